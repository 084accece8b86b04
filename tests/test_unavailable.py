"""Engines not installed here: their cells are recorded as unavailable, the others run.

The engines are made absent for real: a sitecustomize on PYTHONPATH puts a finder
first on sys.meta_path that refuses their packages, in the sweep and in every
process it starts, as on a machine where they were never installed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import records
from bench.records.types import LoadedRecord
from tests.conftest import ROOT, run_bench

HIDE = """
import importlib.abc, sys

class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
"""
TINY = ["--models", "mlp", "--workers", "1", "--repeats", "1", "--epochs", "1",
        "--max-steps", "12", "--warmup-steps", "2", "--threads", "1"]  # fmt: skip


def _without(hidden: set[str], tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE.format(hidden=sorted(hidden)))
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}


def _by_engine(results: Path) -> dict[str, list[LoadedRecord]]:
    out: dict[str, list[LoadedRecord]] = {}
    for r in records.load([records.results_file(results)]).records:
        out.setdefault(str(r["engine"]), []).append(r)
    return out


@pytest.mark.distributed
def test_absent_engines_of_the_default_list_are_recorded_and_the_rest_run(tmp_path: Path) -> None:
    env = _without({"paddle", "horovod"}, tmp_path)
    results = tmp_path / "results"
    proc = run_bench("run", *TINY, "--results", str(results), env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = _by_engine(results)
    assert [r["status"] for r in recs["ddp"]] == ["ok"]
    for engine, package in (("paddle", "'paddle'"), ("horovod", "'horovod'")):
        (rec,) = recs[engine]
        assert rec["status"] == records.Status.UNAVAILABLE
        assert f"needs the {package} package, not installed here" in str(rec["error"])
        assert f"WARNING: engine {engine} is not installed here" in proc.stdout
    # compare shows them as unavailable, not as failures, and the sweep launched nothing
    report = run_bench("compare", str(results), env=env)
    assert report.returncode == 0, report.stderr
    assert "unavailable: paddle" in report.stdout and "unavailable: horovod" in report.stdout
    assert not list((results / "runs").rglob("*paddle*"))


@pytest.mark.distributed
def test_an_absent_engine_that_was_named_fails_the_sweep_after_the_others_ran(
    tmp_path: Path,
) -> None:
    env = _without({"paddle"}, tmp_path)
    results = tmp_path / "results"
    proc = run_bench(
        "run", *TINY, "--engines", "ddp,paddle", "--results", str(results), env=env, timeout=300
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "paddle not installed here: 1 cells recorded as unavailable" in proc.stderr
    assert "Traceback" not in proc.stderr
    recs = _by_engine(results)
    assert [r["status"] for r in recs["ddp"]] == ["ok"]
    assert [r["status"] for r in recs["paddle"]] == ["unavailable"]
    # the dry run says the same without launching or writing anything
    dry = run_bench(
        "run",
        *TINY,
        *("--engines", "ddp,paddle", "--results", str(tmp_path / "d"), "--dry-run"),
        env=env,
    )
    assert dry.returncode == 0, dry.stderr
    assert "# unavailable, recorded without launching: paddle np=1" in dry.stdout
    assert "torch.distributed.run" in dry.stdout
    assert not (tmp_path / "d").exists()
