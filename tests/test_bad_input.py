"""Bad input gets a clear error, a non-zero exit, and never an ok record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import records
from bench.core import machine as benv
from bench.engines import Engine
from tests.conftest import ROOT, run_bench, run_direct, run_engine

ENGINES = [Engine.HOROVOD, Engine.DDP, Engine.PADDLE]


def _no_ok_record(results: Path) -> None:
    f = records.results_file(results)
    if f.exists():
        assert not [r for r in records.load([f]).records if r["status"] == records.Status.OK]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "vgg"], "unknown model 'vgg'; choose one of: lenet, mlp"),
        (["--dataset", "imagenet"], "unknown dataset 'imagenet'"),
        (["--dataset", "mnist"], "dataset 'mnist' needs --data-path DIR"),
        (["--batch-size", "0"], "batch_size must be >= 1"),
        (["--batch-size", "4096"], "fewer than one global batch of 4096"),
        (["--epochs", "1", "--warmup-steps", "500"], "leaves no timed step"),
        (["--optimizer", "lamb"], "invalid choice: 'lamb'"),
    ],
    ids=["model", "dataset", "mnist-path", "batch", "batch-too-big", "warmup", "optimizer"],
)
def test_runner_refuses(
    engine: Engine, args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python lists every module it imports on stderr: the refusal comes before any framework
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    proc, recs = run_direct(engine, args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert recs == []
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert "numpy" in imported  # the listing is there
    assert not imported & {"torch", "paddle", "horovod"}, "a framework loaded before the refusal"


def test_missing_mnist_files_say_where(tmp_path: Path) -> None:
    proc, recs = run_direct(
        Engine.DDP, ["--dataset", "mnist", "--data-path", str(tmp_path / "mnist")], tmp_path
    )
    assert (
        proc.returncode == 2
        and "train-images-idx3-ubyte" in proc.stderr
        and "nothing is downloaded" in proc.stderr
    )
    assert recs == []


def test_results_path_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("precious")
    proc, _ = run_direct(Engine.DDP, [], tmp_path)  # sanity: the same command works elsewhere
    assert proc.returncode == 0
    proc = subprocess.run(
        [sys.executable, "runners/ddp.py", "--results", str(blocker)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "is a file, not a directory" in proc.stderr
    assert blocker.read_text() == "precious"


@pytest.mark.distributed
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_strong_scaling_batch_that_does_not_divide(engine: Engine, tmp_path: Path) -> None:
    """Refused on every rank before any process group exists: no hang, no record."""
    proc, recs = run_engine(
        engine, 2, ["--scaling", "strong", "--batch-size", "33"], tmp_path, timeout=120
    )
    assert proc.returncode != 0
    logs = (
        proc.stdout
        + proc.stderr
        + "".join(
            p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*") if p.is_file()
        )
    )
    assert "does not divide among 2 workers" in logs
    assert recs == []
    _no_ok_record(tmp_path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--engines", "mxnet"],
            "--engines: unknown engine 'mxnet'; engines are: horovod, ddp, paddle (",
        ),
        (["--workers", "0"], "workers must be integers >= 1"),
        (
            ["--workers", str(benv.usable_cpus() + 1), "--batch-size", "4"],
            f"exceed the {benv.usable_cpus()} CPUs this process may use",
        ),
        (["--models", "vgg"], "unknown model 'vgg'"),
        (["--repeats", "0"], "repeats must be an integer >= 1"),
        (["--scaling", "strong", "--batch-size", "33"], "does not divide among 2 workers"),
    ],
)
def test_sweep_refuses_before_launching(args: list[str], message: str, tmp_path: Path) -> None:
    proc = run_bench("run", "--results", str(tmp_path), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing was launched
    _no_ok_record(tmp_path)


def test_sweep_config_with_unknown_key(tmp_path: Path) -> None:
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('engines = ["ddp"]\nrepeat = 2\n[spec]\nmodel = "mlp"\n')
    proc = run_bench("run", "--config", str(cfg), "--results", str(tmp_path))
    assert proc.returncode == 2 and "unknown sweep setting(s): repeat" in proc.stderr
    cfg.write_text('engines = ["ddp"]\n[spec]\nmodle = "mlp"\n')
    proc = run_bench("run", "--config", str(cfg), "--results", str(tmp_path))
    assert proc.returncode == 2 and "unknown spec field(s): modle" in proc.stderr


def test_horovod_without_pytorch_support_says_what_to_do(tmp_path: Path) -> None:
    """A Horovod whose torch extension was not built fails at import; the runner explains."""
    fake = tmp_path / "site" / "horovod" / "torch"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text(
        "raise ImportError('Extension horovod.torch has not been built')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run(
        [sys.executable, "runners/hvd.py", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert "has not been built" in proc.stderr and "scripts/setup.sh" in proc.stderr
    _no_ok_record(tmp_path)


def test_horovod_without_nccl_is_refused_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only Horovod on a GPU would reduce every gradient through the CPU: refused
    before hvd.init(). The build flags are stood in for (a CPU machine has neither a GPU
    nor an NCCL build); the refusal itself is the adapter's real code."""
    import types

    from bench.contract.spec import Device, RunSpec
    from bench.core.errors import InputError
    from runners.adapters.horovod_engine import HorovodAdapter

    fake = types.ModuleType("horovod.torch")
    fake.gloo_built = lambda: True  # type: ignore[attr-defined]
    fake.nccl_built = lambda: 0  # type: ignore[attr-defined]
    fake.mpi_built = lambda: False  # type: ignore[attr-defined]

    def init() -> None:
        raise AssertionError("hvd.init reached: NCCL was not checked")

    fake.init = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "horovod", types.ModuleType("horovod"))
    monkeypatch.setitem(sys.modules, "horovod.torch", fake)
    adapter = HorovodAdapter(RunSpec(model="lenet", device=Device.CUDA))
    with pytest.raises(InputError, match=r"built without NCCL.*HOROVOD_GPU_OPERATIONS=NCCL"):
        adapter.init()


def test_missing_launcher_makes_the_engine_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.sweep import check_engines

    monkeypatch.setenv("PATH", "/nonexistent")
    reasons = check_engines([Engine.HOROVOD], python="/nonexistent/python")
    assert list(reasons) == [Engine.HOROVOD]
    assert "horovodrun not found" in reasons[Engine.HOROVOD]
    assert "scripts/setup.sh" in reasons[Engine.HOROVOD]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "lenet"],
            "bench run takes --models (a comma list, e.g. --models lenet), not --model",
        ),
        (["--dataset", "synthetic"], "takes --datasets (a comma list, e.g. --datasets synthetic)"),
    ],
)
def test_bench_run_refuses_single_model_and_dataset(
    args: list[str], message: str, tmp_path: Path
) -> None:
    """The runners' --model/--dataset would be overridden by the sweep's lists: refused."""
    proc = run_bench("run", *args, "--dry-run", "--results", str(tmp_path))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('engines = ["ddp"]\n[spec]\nmodel = "lenet"\n')
    proc = run_bench("run", "--config", str(cfg), "--dry-run", "--results", str(tmp_path))
    assert proc.returncode == 2
    assert 'set per cell by the sweep; write `models = ["lenet"]` at the top level' in proc.stderr
