"""Every documented launch of a runner, typed as a user types it, trains one world.

Each command is the one README.md, docs/usage.md and docs/clusters.md show, run from
the repository root with the environment's bin folder first on PATH (as after
`source .venv/bin/activate`), reduced only in size by the runner flags the docs name
(`--model mlp --max-steps 30`). Nothing the suite's own tools add (`bench run` passes
`--gloo` to horovodrun, for one) is added here: the launchers' defaults are what is
tested, Horovod's MPI mode included where this Horovod has MPI.

Each must give exactly one ok record of a 2-worker world with the loss curve of every
other: bitwise for the two torch engines (both average two gradients, which rounds
the same whichever sums first), Paddle within the identical-settings tests' tolerance.
And none may print the profiler's own lines to the terminal.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from bench import records
from bench.engines import horovod
from tests import slurm_cluster
from tests.conftest import ROOT, RUN_TIMEOUT_S

SIZE = ["--model", "mlp", "--max-steps", "30", "--warmup-steps", "2"]
BIN = str(Path(sys.executable).parent)
MPI = "mpi" in horovod.built_controllers() and shutil.which("mpirun") is not None
# horovodrun's default: MPI where Horovod has it and mpirun is there, else Gloo
DEFAULT_CONTROLLER = "mpi" if MPI else "gloo"
# OpenMPI refuses root unless told; a root user types --allow-run-as-root or sets these
AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
needs_mpi = pytest.mark.skipif(not MPI, reason="Horovod without MPI, or no mpirun on PATH")


@dataclasses.dataclass(frozen=True)
class Launch:
    """A documented command, what it needs, and the controller Horovod must run."""

    argv: tuple[str, ...]
    controller: str | None = None  # Horovod's, None for the other engines
    needs: str | None = None  # "mpi" or "slurm"


# horovodrun's default is MPI where Horovod has it, so there `horovodrun --mpi` would be
# the same launch again (bench run's own --mpi launch: tests/test_horovod_mpi.py)
LAUNCHES = {
    "horovodrun": Launch(("horovodrun", "-np", "2", "runners/hvd.py"), DEFAULT_CONTROLLER),
    "horovodrun --gloo": Launch(("horovodrun", "-np", "2", "--gloo", "runners/hvd.py"), "gloo"),
    "horovodrun -H": Launch(
        ("horovodrun", "-np", "2", "-H", "localhost:2", "runners/hvd.py"), DEFAULT_CONTROLLER
    ),
    "mpirun": Launch(("mpirun", "-np", "2", "python", "runners/hvd.py"), "mpi", "mpi"),
    "srun": Launch(
        ("srun", "--mpi=pmix", "--ntasks", "2", "python", "runners/hvd.py"), "mpi", "slurm"
    ),
    "torchrun": Launch(("torchrun", "--nproc-per-node", "2", "runners/ddp.py")),
    "paddle": Launch(
        (
            "python",
            "-m",
            "paddle.distributed.launch",
            "--nproc_per_node",
            "2",
            "runners/paddle_dp.py",
        )
    ),
}
TORCH = [name for name in LAUNCHES if name != "paddle"]


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_"))}
    return {**env, "PATH": f"{BIN}:{env.get('PATH', '')}", **AS_ROOT, **(extra or {})}


def _typed(
    argv: tuple[str, ...], args: list[str], results: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*argv, *args, "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
        env=_env(env),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str] | None]:
    """The test cluster's client environment, or None where Slurm or PMIx is missing."""
    if slurm_cluster.unavailable():
        yield None
        return
    running = slurm_cluster.start()
    try:
        types = subprocess.run(
            ["srun", "--mpi=list"], capture_output=True, text=True, env=running.environ()
        )
        yield running.env if "pmix" in types.stdout + types.stderr else None
    finally:
        running.stop()


@pytest.fixture(scope="module")
def launched(
    tmp_path_factory: pytest.TempPathFactory, slurm_env: dict[str, str] | None
) -> dict[str, tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]]:
    """Every launch this machine can run, once: its process and the records it wrote."""
    out = {}
    for name, launch in LAUNCHES.items():
        if (launch.needs == "mpi" and not MPI) or (launch.needs == "slurm" and not slurm_env):
            continue
        results = tmp_path_factory.mktemp(name.replace(" ", "_")) / "res"
        env = slurm_env if launch.needs == "slurm" else None
        proc = _typed(launch.argv, SIZE, results, env)
        file = records.results_file(results)
        recs = records.load([file]).records if file.exists() else []
        out[name] = proc, cast(list[dict[str, Any]], recs)
    return out


def _one(launched: dict[str, Any], name: str) -> dict[str, Any]:
    if name not in launched:
        launch = LAUNCHES[name]
        pytest.skip(
            "Horovod without MPI, or no mpirun"
            if launch.needs == "mpi"
            else f"no Slurm cluster with PMIx here ({slurm_cluster.unavailable() or 'no pmix'})"
        )
    proc, recs = launched[name]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(recs) == 1, [(r["world_size"], r["status"]) for r in recs]
    return recs[0]


@pytest.mark.distributed
@pytest.mark.parametrize("name", list(LAUNCHES))
def test_each_launch_trains_one_world_of_two(launched: dict[str, Any], name: str) -> None:
    rec = _one(launched, name)
    assert rec["status"] == "ok" and rec["world_size"] == 2
    controller = LAUNCHES[name].controller
    if controller is not None:
        assert rec["knobs"]["controller"] == controller, rec["knobs"]
        assert rec["knobs"]["controller_from"].startswith("launcher:"), rec["knobs"]
        # the record says which library moved the tensors, whichever it was
        assert rec["knobs"]["cpu_operations"] in ("gloo", "mpi")


@pytest.mark.distributed
@pytest.mark.parametrize("name", TORCH)
def test_the_torch_engines_train_the_same_curve_bitwise(
    launched: dict[str, Any], name: str
) -> None:
    rec, ddp = _one(launched, name), _one(launched, "torchrun")
    assert rec["fingerprints"] == ddp["fingerprints"]
    assert len(rec["step_losses"]) >= 20
    assert rec["step_losses"] == ddp["step_losses"]


@pytest.mark.distributed
def test_paddle_trains_the_same_curve_within_tolerance(launched: dict[str, Any]) -> None:
    paddle, ddp = _one(launched, "paddle"), _one(launched, "torchrun")
    assert paddle["fingerprints"]["init_weights"] == ddp["fingerprints"]["init_weights"]
    assert paddle["fingerprints"]["data_order"] == ddp["fingerprints"]["data_order"]
    np.testing.assert_allclose(paddle["step_losses"], ddp["step_losses"], rtol=1e-4)


@pytest.mark.distributed
@pytest.mark.parametrize("name", list(LAUNCHES))
def test_no_profiler_lines_reach_the_terminal(launched: dict[str, Any], name: str) -> None:
    """Kineto's profiler_start/stop lines go to the trace folder's profiler.log."""
    _one(launched, name)
    proc, _ = launched[name]
    chatter = re.compile(r"(USDT|STAGE):.*(profiler_start|profiler_stop|Completed Stage)")
    assert not chatter.search(proc.stdout + proc.stderr), proc.stderr[-2000:]


@pytest.mark.distributed
@needs_mpi
def test_an_option_that_contradicts_the_launcher_is_one_line(tmp_path: Path) -> None:
    argv = ("horovodrun", "-np", "2", "--mpi", "runners/hvd.py")
    proc = _typed(argv, [*SIZE, "--engine-option", "controller=gloo"], tmp_path / "res")
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr
    assert "controller=gloo contradicts mpirun" in errors[0]
    assert "horovodrun --gloo" in errors[0]
    assert not records.results_file(tmp_path / "res").exists()


@pytest.mark.distributed
@needs_mpi
def test_a_world_the_launcher_did_not_ask_for_is_a_failed_record(tmp_path: Path) -> None:
    """DDP started by mpirun joins no group: each process would train alone. One failed
    record says so, with the world the launch asked for; no ok record is written."""
    proc = _typed(("mpirun", "-np", "2", "python", "runners/ddp.py"), SIZE, tmp_path / "res")
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr
    assert "started a world of 1 worker(s), but the launcher announced 2" in errors[0]
    recs = records.load([tmp_path / "res"]).records
    assert [(r["status"], r["world_size"]) for r in recs] == [("failed", 2)]
    assert "OMPI_COMM_WORLD_SIZE=2" in str(recs[0]["error"])


@pytest.mark.distributed
@needs_mpi
def test_horovod_alone_under_mpirun_is_refused_before_training(tmp_path: Path) -> None:
    """HOROVOD_CONTROLLER=gloo left in the shell, then mpirun: Gloo has no rendezvous
    under mpirun, so each worker would be a world of one. Refused up front."""
    argv = ("mpirun", "-np", "2", "-x", "HOROVOD_CONTROLLER", "python", "runners/hvd.py")
    proc = _typed(argv, SIZE, tmp_path / "res", {"HOROVOD_CONTROLLER": "gloo"})
    assert proc.returncode != 0, proc.stdout
    assert "HOROVOD_CONTROLLER=gloo in the environment, but mpirun started" in proc.stderr
    assert not records.results_file(tmp_path / "res").exists()
