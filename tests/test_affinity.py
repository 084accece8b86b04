"""--pin-cores: each worker and every thread of its engine on cores of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import records
from bench.tables.frame import frame
from runners.protocol.affinity import share
from tests.conftest import run_bench

ROOT = Path(__file__).resolve().parent.parent


def test_each_worker_gets_an_equal_disjoint_share() -> None:
    cpus = [0, 1, 2, 3, 4, 5]
    assert [share(cpus, r, 2) for r in range(2)] == [[0, 1, 2], [3, 4, 5]]
    assert [share(cpus, r, 4) for r in range(4)] == [[0], [1], [2], [3]]
    assert share([0, 1], 0, 3) is None  # more workers than CPUs: no share to give


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin apart")
def test_threads_started_before_and_after_pinning_run_on_the_share() -> None:
    """A thread that exists when pin() runs is moved; one started after inherits it."""
    code = textwrap.dedent(
        """
        import os, threading
        from runners.protocol.affinity import pin
        stop = threading.Event()
        ids = []
        def work():
            ids.append(threading.get_native_id())
            stop.wait()
        before = threading.Thread(target=work); before.start()
        while not ids: pass
        mine = pin(1, 2)
        after = threading.Thread(target=work); after.start()
        while len(ids) < 2: pass
        print(mine, [sorted(os.sched_getaffinity(t)) for t in ids])
        stop.set()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    cpus = sorted(os.sched_getaffinity(0))
    mine = share(cpus, 1, 2)
    assert out.stdout.strip() == f"{mine} {[mine, mine]}"


@pytest.mark.distributed
def test_every_engine_records_its_workers_cores_and_compares_as_a_variant(tmp_path: Path) -> None:
    # what is checked is where the workers ran: no measurement-only windows or profiled
    # steps after training (run_bench leaves them out)
    proc = run_bench(
        "run",
        *("--models", "mlp", "--epochs", "1", "--no-comm-cost", "--no-compare"),
        *("--results", str(tmp_path), "--workers", "2", "--max-steps", "15", "--repeats", "1"),
        "--pin-cores",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records.load([tmp_path]).records
    cpus = sorted(os.sched_getaffinity(0))
    expected = [share(cpus, r, 2) for r in range(2)]
    assert {r["engine"] for r in recs} == {"ddp", "horovod", "paddle"}
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert r["threads"]["pinned_cores"] == expected, r["engine"]
    assert set(frame(recs)["engine"]) == {"ddp[pinned]", "horovod[pinned]", "paddle[pinned]"}
