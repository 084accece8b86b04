"""Benchmark-only: take turns with another launch, one window of steps at a time.

`tests/benchmarks/independent_overhead.py --mode turns` starts a runner and an
engine's documented loop as two separate launches at once and makes them alternate:
a window starts when the orchestrator sends "go" and reports "done" after its
synchronisation, and the orchestrator stops (SIGSTOP) the launch whose turn it is
not. Adjacent windows of the two then see the machine in the same state, so its
drift cancels, while nothing of the process is shared. Both waits sit outside the
timed region. Without BENCH_TURNS nothing connects and the calls return at once.
"""

from __future__ import annotations

import os
import socket

VARIABLE = "BENCH_TURNS"  # the orchestrator's Unix socket


class Turns:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self.sock: socket.socket | None = None

    def wait(self) -> None:
        """Block until it is this launch's turn (the first call connects and says who)."""
        if not self.path:
            return
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.sock.connect(self.path)
            except OSError as exc:
                raise RuntimeError(
                    f"{VARIABLE}={self.path}: no turn-taking orchestrator there ({exc}); "
                    f"unset {VARIABLE} outside tests/benchmarks/independent_overhead.py"
                ) from None
            self.sock.sendall(f"{os.getpid()}\n".encode())
        if self.sock.recv(1) != b"g":
            raise RuntimeError(f"the turn-taking orchestrator at {self.path} went away")

    def done(self) -> None:
        if self.sock is not None:
            self.sock.sendall(b"d")


TURNS = Turns(os.environ.get(VARIABLE))
