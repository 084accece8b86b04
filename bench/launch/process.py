"""Launched processes under supervision: time-outs, and a whole tree killed when it must stop.

Every launcher runs in its own session (process group) with its output in a log
file; a time-out, a failed peer or Ctrl-C kills its whole tree, so no worker
outlives its cell. Killing is written once, here (as Horovod's safe_shell_exec):
the tree is listed first, then each process is stopped, then killed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import psutil

from bench.core.errors import RecordsError
from bench.launch.cluster import ROOT

# The signals that stop a command (bench/cli/common.stop_on_signals, Ctrl-C).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# After one host's launcher fails, how long its peers get to fail on their own (their
# collectives time out) before they are killed.
PEER_GRACE_S = 30.0


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a launch ended: every launcher exited 0, or the error, or the time-out."""

    ok: bool
    timed_out: bool
    error: str | None
    seconds: float


def run_launches(argvs: Sequence[list[str]], logs: Sequence[Path], timeout: float) -> Outcome:
    """Run one launcher per host together, each in its own session with its own log.

    The cell fails as soon as one launcher fails; the others are given PEER_GRACE_S to
    notice, then killed. A time-out or Ctrl-C (any exception) kills every tree.
    """
    start = time.monotonic()
    handles = _open_logs(logs)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for argv, fh in zip(argvs, handles, strict=True):
            with signals_held():
                procs.append(
                    subprocess.Popen(
                        argv,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                        cwd=ROOT,
                    )
                )
        timed_out = _wait(procs, start + timeout)
    except BaseException:  # Ctrl-C, SIGTERM: stop the workers, then let the caller end
        for p in procs:
            kill_tree(p)
        raise
    finally:
        for fh in handles:
            fh.close()
    seconds = time.monotonic() - start
    if timed_out:
        return Outcome(False, True, f"cell exceeded its time-out of {timeout:.0f}s", seconds)
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if not bad:
        return Outcome(True, False, None, seconds)
    if len(procs) == 1:
        error = f"launcher exited with code {bad[0][1]}"
    else:
        error = "launcher failed on " + ", ".join(f"host {i} (exit code {rc})" for i, rc in bad)
    return Outcome(False, False, error, seconds)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while the body starts a process; act on them after.

    A signal that lands inside `subprocess.Popen`, after the fork and before Popen
    returns, raises where the caller has no handle on the child, which then outlives
    the command (a torchrun started so trained to its end and appended its record to a
    sweep that had stopped). Held, the signal is acted on, by the handler it would have
    met, once the body has kept the handle. Handlers run in the main thread only, so
    elsewhere there is nothing to hold; a signal ignored, or handled outside Python, is
    left as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    held = {sig: h for sig, h in held.items() if h is not None and h != signal.SIG_IGN}
    for sig in held:
        signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


def _open_logs(logs: Sequence[Path]) -> list[BinaryIO]:
    handles: list[BinaryIO] = []
    try:
        for log in logs:
            handles.append(open(log, "wb"))  # noqa: SIM115 - the caller closes them
    except OSError as exc:
        for fh in handles:
            fh.close()
        raise RecordsError(f"cannot create log file {log}: {exc.strerror}") from None
    return handles


def _wait(procs: Sequence[subprocess.Popen[bytes]], deadline: float) -> bool:
    """Until every launcher exits, the deadline passes (True) or a failed launcher's peers
    have had their grace; whatever still runs then is killed."""
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return False
        now = time.monotonic()
        if any(c not in (None, 0) for c in codes) and failed_at is None:
            failed_at = now
        if now >= deadline or (failed_at is not None and now - failed_at > PEER_GRACE_S):
            for p in procs:
                if p.poll() is None:
                    kill_tree(p)
            return now >= deadline
        time.sleep(0.1)


def kill_tree(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Stop a launcher and every process under it (its session and any stragglers)."""
    stop_processes(descendants(proc.pid), grace, group=proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


def descendants(pid: int) -> list[psutil.Process]:
    """`pid` and every process below it, as far as they can be seen now."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def stop_processes(
    procs: Sequence[psutil.Process], grace: float = 5.0, group: int | None = None
) -> None:
    """Stop `procs` (and process group `group`), then end them: SIGTERM, then SIGKILL.

    Every process is frozen (SIGSTOP) first and the tree listed again, so that no
    parent starts a child or restarts a worker while the others are being killed.
    SIGCONT follows each signal: a stopped process acts on SIGTERM only once continued.
    """
    _send(procs, group, signal.SIGSTOP)
    found = {p.pid: p for p in procs}
    for p in list(procs):
        with contextlib.suppress(psutil.Error):
            found.update({c.pid: c for c in p.children(recursive=True)})
    alive = list(found.values())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _send(alive, group, sig)
        _send(alive, group, signal.SIGCONT)
        _, alive = psutil.wait_procs(alive, timeout=grace)
        if not alive:
            return


def _send(procs: Sequence[psutil.Process], group: int | None, sig: int) -> None:
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


def tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a log file (empty when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])
