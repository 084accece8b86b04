"""Two separate launches taking turns window by window (tests/benchmarks/take_turns.py).

The separate-process overhead benchmark (independent_overhead.py --mode turns) is
only as good as its alternation: real launches of a runner and of DDP's documented
loop must never time a window at the same time, must alternate in ABBA order, must
time every window inside their own turn, and a launch that dies must not leave the
other hanging or running.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bench import records
from bench.engines import Engine
from tests.benchmarks import independent_overhead as overhead
from tests.benchmarks import take_turns
from tests.conftest import ROOT
from tests.test_faults import _procs_with, _wait_for

pytestmark = pytest.mark.distributed

ARGS = argparse.Namespace(steps=64, warmup_steps=16, window_steps=16)


def _launches(tmp: Path, results: Path) -> dict[str, tuple[list[str], Path]]:
    data = tmp / "data.npz"
    overhead.write_data(data)
    return {
        "runner": (overhead.runner_argv(Engine.DDP, 1, ARGS, results), tmp),
        "canonical": (overhead.canonical_argv(Engine.DDP, 1, ARGS, data), overhead.HERE),
    }


def test_two_launches_time_their_windows_in_turns_never_at_once(tmp_path: Path) -> None:
    results = tmp_path / "res.jsonl"
    out = take_turns.run_pair(_launches(tmp_path, results), 1, tmp_path)
    runner, canonical = out["runner"].spans, out["canonical"].spans
    assert len(runner) == len(canonical) == 1 + 64 // 16  # the warm-up window, then 4
    spans = sorted([(*s, "r") for s in runner] + [(*s, "c") for s in canonical])
    assert all(end <= nxt for (_, end, _), (nxt, _, _) in itertools.pairwise(spans))
    assert "".join(side for *_, side in spans) == "rccrrccrrc"  # ABBA: drift favours no one
    # every timed window lies inside its own turn
    (rec,) = records.load([results]).records
    windows = rec["window_times_s"][0]
    assert len(windows) == 4
    assert all(w <= end - start for w, (start, end) in zip(windows, runner[1:], strict=True))
    tput = overhead.canonical_output(Engine.DDP, out["canonical"].stdout, "")
    assert len(tput) == 4 and all(t > 0 for t in tput)


def test_a_launch_that_dies_stops_the_pair_and_leaves_no_process(tmp_path: Path) -> None:
    results = tmp_path / "res.jsonl"
    launches = _launches(tmp_path, results)
    launches["canonical"] = ([sys.executable, "-c", "raise SystemExit(3)"], tmp_path)
    with pytest.raises(RuntimeError, match="canonical ended before its ranks connected"):
        take_turns.run_pair(launches, 1, tmp_path)
    assert _with(str(results)) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_an_interrupted_orchestrator_leaves_no_stopped_process(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Stopped launches would wait forever: every way of ending the orchestrator resumes
    and kills them (independent_overhead.py turns SIGTERM and SIGHUP into an unwind)."""
    results = tmp_path / "res.jsonl"
    script = (
        "import signal, sys\n"
        "for s in (signal.SIGTERM, signal.SIGHUP):\n"
        "    signal.signal(s, lambda n, _: sys.exit(128 + n))\n"
        "from pathlib import Path\n"
        "from tests.test_take_turns import ARGS, _launches\n"
        "from tests.benchmarks import take_turns\n"
        f"tmp = Path({str(tmp_path)!r})\n"
        "launches = _launches(tmp, tmp / 'res.jsonl')\n"
        "launches['runner'][0][launches['runner'][0].index('--max-steps') + 1] = '100000'\n"
        "take_turns.run_pair(launches, 1, tmp)\n"
    )
    orchestrator = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        _wait_for_a_stopped(str(results), orchestrator)
        orchestrator.send_signal(sig)
        orchestrator.wait(timeout=60)
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
    _wait_for(lambda: _with(str(results)) == [], 10, "every process of the pair ending")


def _with(marker: str) -> list[psutil.Process]:
    """Live processes with `marker` on their command line (reaped ones aside)."""
    live = []
    for p in _procs_with(marker):
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE:
                live.append(p)
    return live


def _wait_for_a_stopped(marker: str, orchestrator: subprocess.Popen[bytes]) -> None:
    """Until a runner process is stopped by the orchestrator: turns are under way."""

    def stopped() -> bool:
        assert orchestrator.poll() is None, "the orchestrator ended on its own"
        return any(_status(p) == psutil.STATUS_STOPPED for p in _with(marker))

    _wait_for(stopped, 120, "a turn")


def _status(p: psutil.Process) -> str | None:
    try:
        return str(p.status())
    except psutil.Error:
        return None


def test_a_runner_told_of_an_orchestrator_that_is_not_there_says_so(tmp_path: Path) -> None:
    from runners.protocol.turns import Turns

    with pytest.raises(RuntimeError, match=r"BENCH_TURNS=.*no turn-taking orchestrator there"):
        Turns(str(tmp_path / "missing.sock")).wait()
    Turns(None).wait()  # unset: the normal run, no wait at all
