"""Two separate launches that take turns, window by window (independent_overhead --mode turns).

Each launch's ranks connect to a Unix socket of their own side (BENCH_TURNS), say
their pid, and before every window wait for one byte "g"; after the window's
synchronisation they send "d". In between, every worker of the side that is not in
turn is stopped (SIGSTOP), so it takes no CPU: not a background thread, not a
poll. Turns go in ABBA order (A B, B A, A B, ...), so a linear drift favours
neither side, and window k of one launch is timed next to window k of the other.
A launch that ends (its sockets close) leaves the other to run on alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

CONNECT_S = 300.0  # imports, process groups, data: a slow machine's start-up
TURN_S = 600.0  # one window, plus whatever the side does between its windows


class Side:
    def __init__(self, name: str, argv: Sequence[str], workers: int, tmp: Path, cwd: Path) -> None:
        self.name, self.workers = name, workers
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(tmp / f"{name}.sock"))
        self.server.listen(workers)
        env = {**os.environ, "BENCH_TURNS": str(tmp / f"{name}.sock")}
        # files, not pipes: a full pipe would block a rank that is not read until the end
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                list(argv), env=env, stdout=out, stderr=err, cwd=cwd, start_new_session=True
            )
        self.conns: list[socket.socket] = []
        self.pids: list[int] = []
        self.finished = False
        self.spans: list[tuple[float, float]] = []  # (go sent, every rank done) of each turn

    def accept(self, deadline: float) -> None:
        while len(self.conns) < self.workers:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} ended before its ranks connected")
            self.server.settimeout(max(0.1, min(1.0, deadline - time.monotonic())))
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: ranks did not connect in {CONNECT_S:.0f}s")
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            conn.settimeout(TURN_S)
            self.pids.append(int(_readline(conn)))
            self.conns.append(conn)

    def signal(self, sig: signal.Signals) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if sig == signal.SIGSTOP:  # stopped for certain before the other side starts
            for pid in self.pids:
                _wait_stopped(pid)

    def turn(self) -> None:
        """One window: go to every rank, then wait until every rank is done or gone."""
        self.signal(signal.SIGCONT)
        start = time.monotonic()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.sendall(b"g")
        replies = [_recv1(conn) for conn in self.conns]
        if all(r == b"" for r in replies):
            self.finished = True  # the launch is past its last window
        elif any(r == b"" for r in replies):
            raise RuntimeError(f"{self.name}: some ranks ended while others took a turn")
        else:
            self.spans.append((start, time.monotonic()))
            self.signal(signal.SIGSTOP)

    def close(self) -> None:
        self.signal(signal.SIGCONT)
        for conn in self.conns:
            conn.close()
        self.server.close()


def alternate(a: Side, b: Side) -> None:
    """Turns in ABBA order until both sides are past their last window."""
    deadline = time.monotonic() + CONNECT_S
    a.accept(deadline)
    b.accept(deadline)
    a.signal(signal.SIGSTOP)
    b.signal(signal.SIGSTOP)
    k = 0
    while not (a.finished and b.finished):
        for side in (a, b) if k % 2 == 0 else (b, a):
            if not side.finished:
                side.turn()
        k += 1


@dataclasses.dataclass
class Ended:
    stdout: str
    stderr: str
    spans: list[tuple[float, float]]  # monotonic (start, end) of each of its windows' turns


def run_pair(
    launches: Mapping[str, tuple[Sequence[str], Path]], workers: int, tmp: Path
) -> dict[str, Ended]:
    """Run two launches (name: (argv, cwd)) taking turns, each with `workers` ranks."""
    work = Path(tempfile.mkdtemp(prefix="turns-", dir=tmp))  # sockets and output files
    sides = [Side(name, argv, workers, work, cwd) for name, (argv, cwd) in launches.items()]
    try:
        alternate(*sides)
        for side in sides:
            side.proc.wait(timeout=TURN_S)
    finally:
        for side in sides:
            side.close()
            if side.proc.poll() is None:  # the launcher's group, and the workers by pid
                for pid in side.pids:  # (horovodrun starts them in groups of their own)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(side.proc.pid, signal.SIGKILL)
                side.proc.wait()
    out = {}
    for side in sides:
        stdout, stderr = side.out.read_text(), side.err.read_text()
        if side.proc.returncode != 0:
            raise RuntimeError(f"{side.name} failed ({side.proc.returncode}):\n{stderr[-3000:]}")
        out[side.name] = Ended(stdout, stderr, side.spans)
    return out


def _readline(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            raise RuntimeError("a rank connected and went away before saying its pid")
        data += chunk
    return data.decode().strip()


def _recv1(conn: socket.socket) -> bytes:
    try:
        return conn.recv(1)
    except ConnectionResetError:
        return b""


def _wait_stopped(pid: int) -> None:
    """Until the kernel shows `pid` stopped (state T), or it is gone: at most a second."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return
        if state in ("T", "t", "Z", "X"):
            return
        time.sleep(0.0002)
