"""Engine-specific knobs outside the shared spec: Horovod's timeline, Adasum, autotune."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from bench import engines, records
from bench.engines import Engine
from bench.records.types import LoadedRecord
from bench.tables import compare, frame
from tests import shared_sweep as shared
from tests.conftest import ROOT, RUN_TIMEOUT_S, ok_record, run_direct, run_engine
from tests.shared_sweep import SharedSweep


@pytest.mark.distributed
def test_horovod_timeline_and_autotune_are_recorded(tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.json"
    rec = ok_record(
        *run_engine(
            Engine.HOROVOD,
            2,
            [
                "--model",
                "mlp",
                "--max-steps",
                "20",
                "--warmup-steps",
                "2",
                "--engine-option",
                f"timeline={timeline}",
                "--engine-option",
                "autotune=true",
            ],
            tmp_path,
        )
    )
    assert rec["knobs"]["autotune"] is True and rec["knobs"]["timeline"] is True
    assert rec["engine_options"] == {"autotune": "true"}  # the path is not a training setting
    summary = rec["timeline"]
    assert summary["path"] == str(timeline) and timeline.is_file()
    # named with the run's other traces, relative to the results folder it lies in
    (trace,) = rec["traces"]
    assert trace["path"] == "timeline.json" and trace["ranks"] == [0]
    assert (trace["tool"], trace["format"]) == ("horovod timeline", "chrome-json-array")
    assert summary["activities_ms"]["NEGOTIATE_ALLREDUCE"] > 0
    assert summary["per_step_ms"]["allreduce"] > 0
    # compare keeps autotuned runs apart from plain runs of the same engine
    assert frame.frame([cast(LoadedRecord, rec)])["engine"].iloc[0] == "horovod[autotune=true]"


@pytest.mark.parametrize(
    ("engine", "option", "message"),
    [
        (Engine.DDP, "timeline=/tmp/x", "unknown ddp engine option(s): timeline; known: none"),
        (Engine.HOROVOD, "adasum=maybe", "adasum must be true or false"),
        (Engine.HOROVOD, "fusion=1", "unknown horovod engine option(s): fusion"),
        (Engine.HOROVOD, "novalue", "--engine-option expects KEY=VALUE"),
        (Engine.HOROVOD, "controller=tcp", "controller must be one of gloo, mpi, got 'tcp'"),
    ],
)
def test_bad_engine_options_are_refused(
    engine: Engine, option: str, message: str, tmp_path: Path
) -> None:
    proc, recs = run_direct(engine, ["--engine-option", option], tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert recs == []


@pytest.mark.distributed
def test_fp16_gradient_compression_in_horovod_and_ddp(
    tmp_path: Path, shared_sweep: SharedSweep
) -> None:
    """fp16 allreduce: recorded, really applied (it moves the losses), and alike in both.
    Without compression is the session's sweep's plain 2-worker run of the same spec."""
    args = [*shared.RUNNER_SPEC, "--grad-compression", "fp16"]
    losses, specs = {}, {}
    for engine in (Engine.HOROVOD, Engine.DDP):
        for comp in ("none", "fp16"):
            rec = (
                shared_sweep.run(engine.value, 2)
                if comp == "none"
                else ok_record(*run_engine(engine, 2, args, tmp_path / comp))
            )
            assert rec["knobs"]["gradient_compression"] == comp
            assert rec["spec"]["grad_compression"] == comp
            losses[engine, comp] = np.asarray(rec["step_losses"])
            specs[engine, comp] = {**rec["spec"], "grad_compression": "none"}
    for engine in (Engine.HOROVOD, Engine.DDP):
        assert specs[engine, "fp16"] == specs[engine, "none"]  # nothing else differs
        shift = np.abs(losses[engine, "fp16"] / losses[engine, "none"] - 1).max()
        # measured 4e-5 over 30 steps: fp16 rounding is there, and small
        assert 1e-6 < shift < 1e-3, (engine, shift)
    # one operation in both: cast to fp16, divide by the world size, sum in fp16 (it was
    # 1.5e-6 apart while Horovod divided after the sum); measured bit-identical
    np.testing.assert_allclose(
        losses[Engine.HOROVOD, "fp16"], losses[Engine.DDP, "fp16"], rtol=1e-6, atol=0
    )


def test_paddle_refuses_gradient_compression(tmp_path: Path) -> None:
    proc, recs = run_direct(Engine.PADDLE, ["--grad-compression", "fp16"], tmp_path)
    assert proc.returncode == 2 and not recs
    assert "paddle.DataParallel has no gradient compression" in proc.stderr


@pytest.mark.distributed
def test_bf16_autocast_on_cpu_in_horovod_and_ddp(tmp_path: Path) -> None:
    """bf16 autocast: recorded, really applied, and the same arithmetic in both engines."""
    args = ["--model", "lenet", "--max-steps", "20", "--warmup-steps", "2"]
    losses = {}
    for engine in (Engine.HOROVOD, Engine.DDP):
        for precision in ("fp32", "bf16"):
            rec = ok_record(
                *run_engine(engine, 2, [*args, "--precision", precision], tmp_path / precision)
            )
            assert rec["knobs"]["autocast_dtype"] == (None if precision == "fp32" else "bfloat16")
            assert rec["knobs"]["loss_scaling"] is False  # only fp16 scales the loss
            losses[engine, precision] = np.asarray(rec["step_losses"])
    for engine in (Engine.HOROVOD, Engine.DDP):
        # bf16 keeps 8 mantissa bits: the losses move visibly, but stay close
        shift = np.abs(losses[engine, "bf16"] / losses[engine, "fp32"] - 1).max()
        assert 1e-4 < shift < 0.1, (engine, shift)
    # autocast casts the same ops; gradients reach the allreduce in fp32 in both
    np.testing.assert_allclose(
        losses[Engine.HOROVOD, "bf16"], losses[Engine.DDP, "bf16"], rtol=1e-6
    )


def test_paddle_refuses_bf16_on_cpu(tmp_path: Path) -> None:
    proc, recs = run_direct(Engine.PADDLE, ["--precision", "bf16", "--device", "cpu"], tmp_path)
    assert proc.returncode == 2 and not recs
    assert "paddle's auto_cast keeps its CPU kernels in fp32" in proc.stderr


def _horovodrun(
    flags: list[str], args: list[str], results: Path, nproc: int = 2
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """horovodrun with its own `flags` (e.g. --cycle-time-ms) ahead of the runner."""
    argv = engines.local_argv(Engine.HOROVOD, nproc, [*args, "--results", str(results), "--quiet"])
    at = argv.index("--gloo") + 1
    proc = subprocess.run(
        [*argv[:at], *flags, *argv[at:]],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    f = records.results_file(results)
    return proc, cast(list[dict[str, Any]], records.load([f]).records) if f.exists() else []


@pytest.mark.distributed
def test_horovodrun_flags_are_read_back_and_recorded(tmp_path: Path) -> None:
    """horovodrun's own --cycle-time-ms/--timeline-filename take effect and are recorded."""
    timeline = tmp_path / "hvd-timeline.json"
    flags = ["--cycle-time-ms", "7", "--timeline-filename", str(timeline)]
    args = ["--model", "mlp", "--max-steps", "20", "--warmup-steps", "2"]
    rec = ok_record(*_horovodrun(flags, args, tmp_path))
    knobs = rec["knobs"]
    assert float(knobs["cycle_time_ms"]) == 7.0
    assert knobs["timeline"] is True
    assert knobs["set_by_launcher"] == ["HOROVOD_CYCLE_TIME", "HOROVOD_TIMELINE"]
    # a run with another cycle time is a variant of its own in compare, as with --engine-option
    assert rec["engine_options"] == {"cycle_time_ms": "7.0"}
    assert frame.frame([cast(LoadedRecord, rec)])["engine"].iloc[0] == "horovod[cycle_time_ms=7.0]"
    assert rec["timeline"]["path"] == str(timeline) and timeline.is_file()
    assert rec["timeline"]["per_step_ms"]["allreduce"] > 0


@pytest.mark.distributed
def test_horovodrun_fusion_threshold_must_agree_with_bucket_mb(tmp_path: Path) -> None:
    args = ["--model", "mlp", "--max-steps", "10", "--warmup-steps", "2"]
    proc, recs = _horovodrun(["--fusion-threshold-mb", "64"], args, tmp_path / "no", nproc=1)
    assert proc.returncode != 0 and not recs
    assert (
        "HOROVOD_FUSION_THRESHOLD=67108864 (64 MB, from horovodrun --fusion-threshold-mb or the "
        "environment) contradicts the spec's bucket_mb=25; pass --bucket-mb instead"
    ) in proc.stdout + proc.stderr
    # the same size both ways is honoured, and recorded as what took effect
    rec = ok_record(
        *_horovodrun(
            ["--fusion-threshold-mb", "64"], [*args, "--bucket-mb", "64"], tmp_path / "yes", nproc=1
        )
    )
    assert rec["knobs"]["fusion_threshold_bytes"] == 64 * 2**20
    assert rec["knobs"]["set_by_launcher"] == ["HOROVOD_FUSION_THRESHOLD"]


def test_runner_records_oversubscription(tmp_path: Path) -> None:
    """One worker with more threads than usable CPUs is marked, with the numbers."""
    from bench.core import machine as benv

    cpus = benv.usable_cpus()
    args = ["--model", "mlp", "--max-steps", "5", "--warmup-steps", "1"]
    over = ok_record(*run_direct(Engine.DDP, [*args, "--threads", str(cpus + 1)], tmp_path / "a"))
    assert over["oversubscribed"] is True
    assert over["cpu_budget"] == {
        "workers_on_host": 1,
        "threads_per_worker": cpus + 1,
        "usable_cpus": cpus,
    }
    fits = ok_record(*run_direct(Engine.DDP, [*args, "--threads", "1"], tmp_path / "b"))
    assert fits["oversubscribed"] is False
    flagged = compare.compare([cast(LoadedRecord, over)])[0].sections["throughput"]
    assert flagged["oversubscribed"].tolist() == ["YES"]
