"""Import hygiene: only training loads a framework, and threads are set before it does.

Each check runs in a fresh interpreter, since this test process may have imported
torch or paddle already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.engines import Engine
from tests.conftest import ROOT, ok_record, run_direct

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"

# Each snippet ends with the frameworks it loaded printed as JSON on the last line.
SNIPPETS = {
    "bench --help": "from bench import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass",
    "bench run --help": "from bench import cli\ntry:\n    cli.main(['run', '--help'])\nexcept SystemExit:\n    pass",
    # the tables made (a replay would load less still)
    "bench compare": f"from bench import cli\ncli.main(['compare', {str(GOLDEN)!r}, '--no-replay'])",
    "bench models": "from bench import cli\ncli.main(['models'])",
    "RunSpec": (
        "from bench.contract.spec import RunSpec\n"
        "s = RunSpec()\nRunSpec(model='transformer')\ns.replace(model='resnet18').validate(2)"
    ),
    "runner modules": "import runners.protocol.main, bench.sweep, bench.contract.prepare",
}


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_no_framework_is_imported(name: str) -> None:
    code = (
        SNIPPETS[name]
        + "\nimport json, sys\n"
        + "print(json.dumps([m for m in ('torch', 'paddle', 'horovod') if m in sys.modules]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [], f"{name} imported a framework"


def test_a_runner_loads_no_table_library(tmp_path: Path) -> None:
    """Every worker of every launch imports the runner: pandas and pyarrow (0.2 s of
    CPU a process) are for the reports, which a runner never makes. A record written
    through `bench.records` must not bring them in."""
    code = (
        "import sys\n"
        "import runners.protocol.main, runners.protocol.train\n"
        "import runners.adapters.ddp_engine, runners.adapters.horovod_engine\n"
        "import runners.adapters.paddle_engine\n"
        "from bench import records\n"
        "records.append(sys.argv[1], records.new_record({}, 'ddp', 1, {}, {'name': 't'}))\n"
        "print(sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "runs.jsonl").stat().st_size > 0
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("engine", [Engine.DDP, Engine.PADDLE], ids=lambda e: e.value)
def test_threads_reach_the_framework(engine: Engine, tmp_path: Path) -> None:
    """--threads 2 as torch and each loaded OpenMP runtime report it inside a real run.

    OpenMP runtimes read OMP_NUM_THREADS when they load; had a framework loaded before
    the runner set it, they would report the default (the core count) instead.
    """
    args = ["--model", "mlp", "--max-steps", "6", "--warmup-steps", "2", "--threads", "2"]
    rec = ok_record(*run_direct(engine, args, tmp_path))
    threads = rec["threads"]
    assert threads["frameworks_before_thread_env"] == []
    own = {Engine.DDP: "torch", Engine.PADDLE: "paddle"}[engine]
    assert threads["frameworks_loaded"] == [own]  # the paddle runner leaves torch alone
    assert threads["openmp"], "no OpenMP runtime found in the process"
    assert set(threads["openmp"].values()) == {2}, threads["openmp"]
    if engine is Engine.DDP:
        assert threads["torch_intra_op"] == 2


def test_device_detection_reads_no_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.contract import spec

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert spec.detect_device() is spec.Device.CPU  # every GPU hidden
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    driver = Path("/proc/driver/nvidia/gpus")
    has_gpu = driver.is_dir() and any(driver.iterdir())
    if not has_gpu and not list(Path("/dev").glob("nvidia[0-9]*")):
        assert spec.detect_device() is spec.Device.CPU


def test_help_does_not_load_pandas() -> None:
    from bench.cli import common
    from bench.tables import frame

    assert common.DEFAULT_TARGET == frame.DEFAULT_TARGET
    proc = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom bench import cli\nprint('pandas' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.stdout.strip() == "False"
