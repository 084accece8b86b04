"""Contention is measured: other processes' CPU time during the timed region, flagged."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import psutil
import pytest

from bench import records
from bench.measure import contention
from bench.measure.contention import Snapshot


def test_own_processes_do_not_count_as_contention() -> None:
    start = Snapshot(wall=0.0, busy_s=0.0, steal_s=0.0, total_s=0.0, tree_cpu_s=0.0)
    # 2 s of wall on 2 cores: the machine was busy 3.9 CPU-s, of which the run used 3.8
    quiet = Snapshot(wall=2.0, busy_s=3.9, steal_s=0.0, total_s=4.0, tree_cpu_s=3.8)
    summary = contention.summarise(start, quiet)
    assert summary is not None
    assert summary["other_cpu_cores"] == pytest.approx(0.05)
    assert not summary["contended"]
    busy = Snapshot(wall=2.0, busy_s=3.9, steal_s=0.0, total_s=4.0, tree_cpu_s=2.0)
    assert contention.summarise(start, busy)["contended"]  # type: ignore[index]
    stolen = Snapshot(wall=2.0, busy_s=1.0, steal_s=0.2, total_s=4.0, tree_cpu_s=1.0)
    assert contention.summarise(start, stolen)["contended"]  # type: ignore[index]
    assert contention.summarise(None, quiet) is None


def test_busy_warning_names_the_load() -> None:
    sample = {"other_cpu_cores": 1.5, "cpu_count": 2, "loadavg_1m": 3.0, "steal_fraction": 0.0}
    text = contention.busy_warning(sample)
    assert text is not None and "1.50 of 2 cores" in text
    assert contention.busy_warning({**sample, "other_cpu_cores": 0.01}) is None


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc/stat")
def test_a_busy_neighbour_flags_the_run(busy_neighbour_run: Path) -> None:
    # conftest's run beside two spinning processes (test_breakdown's verdict reads it too)
    (rec,) = cast(list[dict[str, Any]], records.load([busy_neighbour_run]).records)
    assert rec["status"] == records.Status.OK, rec.get("error")
    (load,) = rec["contention"]
    assert load["other_cpu_cores"] > contention.OTHER_CORES_LIMIT, load
    assert rec["contended"] is True
    assert load["own_cpu_cores"] > 0  # the run's own CPU time was measured, and excluded


def test_the_launch_label_names_its_own_attempt() -> None:
    argv = ["runner.py", "--label", "cell=abc", "--label", "attempt=f00d", "--quiet"]
    assert contention.run_label(argv) == "attempt=f00d"
    assert contention.run_label(["runner.py", "--label", "cell=abc"]) is None


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc/stat")
def test_a_peer_rank_outside_the_tree_is_the_run_not_a_neighbour() -> None:
    # A rank that another launcher started (an emulated link's second namespace, or an
    # sshd's child) is not under this rank's launcher; its label makes it the run's own.
    label = "attempt=peer-test-label"
    spin = "import time\nt = time.time()\nwhile time.time() - t < 20: pass"
    # started by a shell that exits at once: the peer is re-parented, outside this tree
    started = subprocess.run(
        [
            "sh",
            "-c",
            '"$0" -c "$1" --label "$2" >/dev/null 2>&1 & echo $!',
            sys.executable,
            spin,
            label,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    peer = int(started.stdout.strip())
    try:
        time.sleep(0.5)  # the peer is spinning
        me = os.getpid()
        cpu0, t0 = sum(psutil.Process(peer).cpu_times()[:2]), time.monotonic()
        own0, other0 = contention.snapshot(me, label), contention.snapshot(me, "attempt=other")
        time.sleep(2.0)
        own1, other1 = contention.snapshot(me, label), contention.snapshot(me, "attempt=other")
        cpu1, t1 = sum(psutil.Process(peer).cpu_times()[:2]), time.monotonic()
        os.kill(peer, 0)  # still running: its CPU time is in both ends
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(peer, signal.SIGKILL)
    # What the peer really got: a whole core on an idle machine, less beside neighbours;
    # the snapshots must put that share on the run's side or on the others' side.
    peer_cores = (cpu1 - cpu0) / (t1 - t0)
    assert peer_cores > 0.05, "the peer never ran: nothing to attribute"
    as_own, as_other = contention.summarise(own0, own1), contention.summarise(other0, other1)
    assert as_own is not None and as_other is not None
    assert as_own["own_cpu_cores"] > 0.8 * peer_cores, (as_own, peer_cores)  # the run's own
    assert as_other["other_cpu_cores"] > 0.8 * peer_cores and as_other["contended"], as_other
    assert as_own["other_cpu_cores"] < as_other["other_cpu_cores"] - 0.8 * peer_cores, (
        as_own,
        as_other,
        peer_cores,
    )


def test_the_causes_of_contention_are_named_and_wrong_types_count_for_nothing() -> None:
    assert contention.causes(0.5, 0.05) == ["other processes", "steal"]
    assert contention.causes(0.1, 0.05) == ["steal"] and contention.causes(None, 0.0) == []
    assert contention.causes(True, "lots") == []  # a damaged record's values
