"""bench collectives: the bandwidth arithmetic, and a real run of each engine's allreduce."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from bench import records
from bench.records.types import LoadedRecord
from bench.tables import busbw
from runners.protocol.allreduce import bus_factor
from tests.conftest import ROOT


def test_bus_bandwidth_factor_is_nccl_tests_allreduce() -> None:
    assert bus_factor(1) == 0.0
    assert bus_factor(2) == 1.0
    assert bus_factor(4) == pytest.approx(1.5)
    assert bus_factor(8) == pytest.approx(1.75)


def _rec(engine: str, latency: float) -> LoadedRecord:
    return cast(
        LoadedRecord,
        {
            "kind": "collective",
            "status": "ok",
            "engine": engine,
            "world_size": 2,
            "results": [
                {"bytes": 1 << 20, "latency_s": latency, "busbw_gbps": (1 << 20) / latency / 1e9}
            ],
        },
    )


def test_tables_take_the_median_per_cell() -> None:
    parts = busbw.tables(
        [_rec("ddp", 1e-3), _rec("ddp", 2e-3), _rec("ddp", 3e-3), _rec("paddle", 1e-3)]
    )
    lat = parts["latency us"]
    assert lat.loc["1 MiB", "ddp np2"] == pytest.approx(2000.0)
    assert lat.loc["1 MiB", "paddle np2"] == pytest.approx(1000.0)
    assert parts["bus bandwidth GB/s"].loc["1 MiB", "paddle np2"] == pytest.approx(1.048576)


@pytest.mark.distributed
def test_real_allreduce_benchmark_for_every_engine(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "collectives",
            "--workers",
            "2",
            "--sizes",
            "4096,1048576",
            "--iters",
            "3",
            "--results",
            str(tmp_path),
            "--timeout",
            "240",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = records.load([tmp_path / records.COLLECTIVES_FILE]).records
    assert sorted(r["engine"] for r in recs) == ["ddp", "horovod", "paddle"]
    for r in recs:
        assert r["status"] == "ok" and r["world_size"] == 2
        assert r["spec"]["device"] in ("cpu", "cuda")  # the default, auto, as resolved
        assert [row["bytes"] for row in r["results"]] == [4096, 1048576]
        for row in r["results"]:
            assert row["latency_s"] > 0
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"])  # factor 1 at n=2
    assert "horovod np2" in proc.stdout and "1 MiB" in proc.stdout


def _collectives(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "collectives", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--sizes", "4KiB"],
            "--sizes takes integers, comma-separated (e.g. --sizes 4096,1048576)",
        ),
        (["--sizes", "4096,6"], "multiples of 4; got 6"),
        (["--sizes", "0"], "--sizes must be >= 4"),
        # worded as bench run words it (one check, bench/cli/common.py)
        (
            ["--engines", "ddp,mpi"],
            "--engines: unknown engine 'mpi'; engines are: horovod, ddp, paddle",
        ),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--iters", "1,2"], "--iters takes one integer"),
        (["--timeout", "-1"], "--timeout takes seconds > 0"),
    ],
)
def test_arguments_are_checked_before_launch(args: list[str], message: str, tmp_path: Path) -> None:
    proc = _collectives(*args, "--results", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1  # one line, no usage or traceback
    assert message in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing launched, nothing written


def test_dry_run_and_defaults(tmp_path: Path) -> None:
    proc = _collectives(
        "--dry-run",
        "--engines",
        "ddp,horovod",
        "--workers",
        "1,2",
        "--results",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4 and "# 4 cells" in proc.stderr
    assert all("runners/allreduce.py" in ln and "--device auto" in ln for ln in lines)
    assert "--sizes 4096,16384,65536,262144,1048576,4194304,16777216,67108864" in lines[0]
    assert not (tmp_path / "r").exists()
    help_text = _collectives("--help").stdout
    for default in ("(default: 2)", "(default: 20)", "(default: auto)", "(default: 300)"):
        assert default in help_text
