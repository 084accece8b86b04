"""Horovod over MPI: the controller as a recorded knob, Adasum, and the refusals.

Measured on the 2-core CPU machine (horovod 0.28.1 built with MPI and Gloo, OpenMPI
4.1.4, torch 2.13.0): at 2 workers, 30 mlp steps, Horovod's step losses over MPI and
over Gloo are identical to DDP's (max relative difference 0.0: two gradients average
alike over MPI's and Gloo's operations); asserted to 1e-6 relative here, bitwise in
tests/test_launch_as_typed.py.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest

from bench import engines, records, sweep
from bench.contract.spec import SpecError
from bench.core.errors import SweepError
from bench.engines import Engine, horovod
from bench.records.types import RunRecord
from bench.sweep import cells
from tests import shared_sweep as shared
from tests.conftest import run_bench, run_direct
from tests.shared_sweep import SharedSweep

BUILT = horovod.built_controllers()
needs_mpi = pytest.mark.skipif(
    "mpi" not in BUILT,
    reason="Horovod built without MPI: apt-get install libopenmpi-dev openmpi-bin, then "
    "rerun scripts/setup.sh",
)

# the spec of the session's sweep, whose DDP and Horovod-over-Gloo runs these are compared with
COMMON = [*shared.SPEC, "--repeats", "1", "--no-comm-cost", "--no-compare", "--timeout", "240"]


# --- without launching -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "controller"),
    [
        ({}, "gloo"),
        ({"controller": "mpi"}, "mpi"),
        ({"adasum": "true"}, "mpi"),  # Horovod's CPU Adasum runs over MPI only
        ({"adasum": "false", "controller": "gloo"}, "gloo"),
    ],
)
def test_controller_follows_the_options(options: dict[str, str], controller: str) -> None:
    assert horovod.controller(options) == controller


HOROVODRUN_GLOO = {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}
MPIRUN = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}


@pytest.mark.parametrize(
    ("options", "env", "resolved"),
    [
        ({}, {}, ("gloo", "default")),  # by hand: the option's default
        ({"controller": "mpi"}, {}, ("mpi", "option")),
        ({}, HOROVODRUN_GLOO, ("gloo", "launcher:horovodrun")),
        ({}, MPIRUN, ("mpi", "launcher:mpirun")),  # horovodrun's MPI mode sets no controller
        ({"adasum": "true"}, MPIRUN, ("mpi", "launcher:mpirun")),
        ({}, {"PMIX_RANK": "0", "HOROVOD_CONTROLLER": "mpi"}, ("mpi", "launcher:srun --mpi=pmix")),
        ({}, {"HOROVOD_CONTROLLER": "MPI"}, ("mpi", "environment")),
    ],
)
def test_the_launcher_decides_the_controller(
    options: dict[str, str], env: dict[str, str], resolved: tuple[str, str]
) -> None:
    assert horovod.resolve_controller(options, env) == resolved


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        ({"controller": "gloo"}, MPIRUN, "controller=gloo contradicts mpirun, which started"),
        ({"controller": "mpi"}, HOROVODRUN_GLOO, "controller=mpi contradicts horovodrun"),
        ({"adasum": "true"}, HOROVODRUN_GLOO, "adasum=true .which runs over MPI. contradicts"),
        ({}, {**MPIRUN, "HOROVOD_CONTROLLER": "gloo"}, "Gloo has no rendezvous under it"),
        ({}, {"HOROVOD_CONTROLLER": "tcp"}, "HOROVOD_CONTROLLER='tcp'"),
    ],
)
def test_a_contradiction_with_the_launcher_is_refused(
    options: dict[str, str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        horovod.resolve_controller(options, env)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"controller": "tcp"}, "engine option controller must be one of gloo, mpi, got 'tcp'"),
        ({"adasum": "true", "controller": "gloo"}, "adasum=true needs controller=mpi"),
    ],
)
def test_bad_controller_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        engines.check_options(Engine.HOROVOD, options)


def test_launch_argv_picks_the_controller() -> None:
    gloo = engines.local_argv(Engine.HOROVOD, 2, ["--x"])
    mpi = engines.local_argv(Engine.HOROVOD, 2, ["--x"], options={"controller": "mpi"})
    assert "--gloo" in gloo and "--mpi" not in gloo and gloo[0].endswith("horovodrun")
    assert "--mpi" in mpi and "--gloo" not in mpi
    # OpenMPI refuses root unless told; the variables are set only where needed
    root_env = ["env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"]
    assert (mpi[:3] == root_env) == (os.geteuid() == 0)
    assert not any("OMPI" in a for a in gloo)


def _fake_horovod(tmp_path: Path, controllers: str) -> str:
    """A Python whose Horovod reports a build with these controllers, and a horovodrun."""
    built = " ".join(c for c in ("gloo", "mpi") if c in controllers.lower())
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho {built}\n")
    python.chmod(0o755)
    hr = tmp_path / "horovodrun"
    hr.write_text("#!/bin/sh\nexit 0\n")
    hr.chmod(0o755)
    return str(python)


@pytest.mark.parametrize("option", ["horovod:controller=mpi", "horovod:adasum=true"])
def test_mpi_refused_before_launch_on_a_gloo_only_build(tmp_path: Path, option: str) -> None:
    python = _fake_horovod(tmp_path, "Gloo")
    assert horovod.built_controllers(python) == {"gloo"}
    config = sweep.SweepConfig(engines=(Engine.HOROVOD,), engine_options=(option,)).validate()
    with pytest.raises(SweepError, match="needs Horovod built with MPI; this Horovod has "):
        cells.check_launches(config, [Engine.HOROVOD], python)
    # a Gloo sweep on the same build is fine
    cells.check_launches(sweep.SweepConfig(engines=(Engine.HOROVOD,)), [Engine.HOROVOD], python)


def test_mpi_refused_for_multinode_runs() -> None:
    config = sweep.SweepConfig(
        engines=(Engine.HOROVOD,),
        workers=(2,),
        engine_options=("horovod:controller=mpi",),
        hosts="a:1,b:1",
    ).validate()
    with pytest.raises(SweepError, match="runs on one host only here"):
        cells.check_launches(config, [Engine.HOROVOD])


def test_adasum_with_gloo_controller_is_refused_by_the_runner(tmp_path: Path) -> None:
    proc, recs = run_direct(
        Engine.HOROVOD,
        ["--engine-option", "adasum=true", "--engine-option", "controller=gloo"],
        tmp_path,
    )
    assert proc.returncode == 2 and "adasum=true needs controller=mpi" in proc.stderr
    assert recs == []


@pytest.mark.skipif("mpi" in BUILT, reason="this Horovod has MPI: the refusal is for Gloo-only")
@pytest.mark.parametrize("option", ["adasum=true", "controller=mpi"])
def test_gloo_only_build_refuses_mpi_in_the_runner(tmp_path: Path, option: str) -> None:
    proc, recs = run_direct(Engine.HOROVOD, ["--engine-option", option], tmp_path)
    assert proc.returncode == 2 and f"{option} needs Horovod built with MPI" in proc.stderr
    assert recs == []


@pytest.mark.skipif("mpi" in BUILT, reason="this Horovod has MPI: the refusal is for Gloo-only")
def test_gloo_only_build_refuses_mpi_before_launch(tmp_path: Path) -> None:
    proc = run_bench(
        "run", "--engines", "horovod", "--engine-option", "horovod:controller=mpi",
        *COMMON, "--results", str(tmp_path / "res"),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "controller=mpi needs Horovod built with MPI; this Horovod has gloo only" in proc.stderr
    assert not (tmp_path / "res").exists() or not records.load([tmp_path / "res"]).records


def test_variant_names_the_controller_that_ran() -> None:
    from bench.tables.frame import variant as _variant

    rec: dict[str, Any] = {"engine": "horovod", "engine_options": {"controller": "mpi"}}
    assert _variant(cast(RunRecord, {**rec, "knobs": {"controller": "mpi"}})) == "horovod[mpi]"
    gloo = cast(RunRecord, {**rec, "engine_options": {}, "knobs": {"controller": "gloo"}})
    assert _variant(gloo) == "horovod"
    mpi = {**rec, "engine_options": {"adasum": "true"}, "knobs": {"controller": "mpi"}}
    assert _variant(cast(RunRecord, mpi)) == "horovod[mpi][adasum=true]"


# --- real 2-worker launches -------------------------------------------------------------


@needs_mpi
def test_check_build_shows_mpi_and_gloo() -> None:
    assert sorted(BUILT) == ["gloo", "mpi"]


@pytest.fixture(scope="module")
def mpi_results(tmp_path_factory: pytest.TempPathFactory, shared_sweep: SharedSweep) -> Path:
    """DDP and Horovod over Gloo (1 and 2 workers, from the session's sweep), Horovod over
    MPI (1 and 2 workers), Adasum (2)."""
    if "mpi" not in BUILT:
        pytest.skip("Horovod built without MPI")
    results = shared_sweep.copy_to(
        tmp_path_factory.mktemp("mpi") / "res",
        lambda r: (
            r["engine"] in ("ddp", "horovod")
            and bool(r["spec"]["grad_sync"])
            and not r.get("engine_options")
        ),
    )
    for argv in (
        ["--engines", "horovod", "--workers", "1,2", "--engine-option", "horovod:controller=mpi"],
        ["--engines", "horovod", "--workers", "2", "--engine-option", "horovod:adasum=true"],
    ):
        proc = run_bench("run", *argv, *COMMON, "--results", str(results), timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return results


def _by_variant(results: Path) -> dict[tuple[str, int], dict[str, Any]]:
    from bench.tables.frame import variant as _variant

    recs = records.load([results]).records
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    return {(_variant(r), r["world_size"]): cast(dict[str, Any], r) for r in recs}


@pytest.mark.distributed
@needs_mpi
def test_horovod_over_mpi_and_gloo_match_ddp(mpi_results: Path) -> None:
    runs = _by_variant(mpi_results)
    assert set(runs) == {(v, w) for v in ("ddp", "horovod", "horovod[mpi]") for w in (1, 2)} | {
        ("horovod[mpi][adasum=true]", 2)
    }
    ddp = np.asarray(runs["ddp", 2]["step_losses"])
    for variant, controller in (("horovod", "gloo"), ("horovod[mpi]", "mpi")):
        rec = runs[variant, 2]
        assert rec["knobs"]["controller"] == controller
        assert rec["engine_versions"]["controller"] == controller
        assert rec["engine_versions"]["horovod_build"]["mpi"] is True
        assert rec["fingerprints"]["init_weights"] == runs["ddp", 2]["fingerprints"]["init_weights"]
        losses = np.asarray(rec["step_losses"])
        assert losses.shape == ddp.shape and losses.size >= 20
        print(variant, "max relative difference to DDP:", np.abs(losses / ddp - 1).max())
        np.testing.assert_allclose(losses, ddp, rtol=1e-6, err_msg=variant)
    assert runs["horovod[mpi]", 2]["engine_options"] == {"controller": "mpi"}
    assert runs["horovod[mpi]", 2]["launcher"]["name"] == "mpirun"
    assert runs["horovod", 2]["launcher"]["name"] == "horovodrun"


@pytest.mark.distributed
@needs_mpi
def test_compare_shows_both_controllers_with_efficiency(mpi_results: Path) -> None:
    proc = run_bench("compare", str(mpi_results), "--format", "csv", timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(io.StringIO(proc.stdout))
    for variant in ("horovod", "horovod[mpi]"):
        # the throughput table's row: efficiency against the same variant at 1 worker
        two = table[
            (table["section"] == "throughput")
            & (table["engine"] == variant)
            & (table["workers"] == 2)
            & (table["metric"] == "efficiency")
        ]
        assert len(two) == 1 and two["value"].iloc[0] > 0, proc.stdout


@pytest.mark.distributed
@needs_mpi
def test_adasum_trains_over_mpi_next_to_averaging(mpi_results: Path) -> None:
    runs = _by_variant(mpi_results)
    adasum, average = runs["horovod[mpi][adasum=true]", 2], runs["horovod[mpi]", 2]
    assert adasum["knobs"]["op"] == "adasum" and average["knobs"]["op"] == "average"
    assert adasum["knobs"]["controller"] == "mpi"
    assert adasum["engine_options"] == {"adasum": "true"}
    a, m = np.asarray(adasum["step_losses"]), np.asarray(average["step_losses"])
    assert np.isfinite(a).all() and a[0] == pytest.approx(m[0])  # same start
    assert not np.allclose(a[1:], m[1:], rtol=1e-6)  # a different reduction really ran
    assert a[-1] < a[0]  # and it trains
    out = run_bench("compare", str(mpi_results), "--show", "accuracy", timeout=300).stdout
    assert "horovod[mpi][adasum=true]" in out and "train loss start/mid/end" in out, out


def test_compare_reports_the_loss_trajectory() -> None:
    from bench.tables.compare import _loss_trajectory

    runs = pd.Series([[2.0, 1.0, 0.5, 0.25], [4.0, 3.0, 1.5, 0.75]])
    assert _loss_trajectory(runs) == "3 / 1 / 0.5"  # mean at steps 0, 2 and 3
    assert _loss_trajectory(pd.Series([[]])) == "-"
