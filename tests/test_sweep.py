"""The sweep: plan, resume, and cells that fail or hang (real processes)."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import psutil
import pytest

from bench import records
from bench.contract.flags import spec_from_args
from bench.contract.spec import RunSpec
from bench.engines import Engine
from bench.sweep import Cell, SweepConfig, cell_argv, plan, run_cell, run_sweep, spec_flags
from runners.protocol.main import build_parser

TINY = RunSpec(model="mlp", max_steps=12, warmup_steps=2, epochs=1)


def test_plan_is_repeat_major_with_seeds() -> None:
    cfg = SweepConfig(
        engines=(Engine.DDP, Engine.PADDLE),
        workers=(1, 2),
        models=("mlp", "lenet"),
        repeats=2,
        comm_cost=False,
    )
    cells = plan(cfg, RunSpec(seed=10))
    assert len(cells) == 2 * 2 * 2 * 2
    assert [c.repeat for c in cells] == [0] * 8 + [1] * 8
    assert {c.spec.seed for c in cells if c.repeat == 1} == {11}
    fixed = plan(SweepConfig(repeats=2, seed_mode="fixed"), RunSpec(seed=10))
    assert {c.spec.seed for c in fixed} == {10}
    # the default sweep of the README: 3 engines x {1,2} x {mlp, lenet} x 3 repeats,
    # plus a compute-only twin of every 2-worker cell
    default = plan(SweepConfig(), RunSpec())
    assert len(default) == 36 + 18
    twins = [c for c in default if not c.spec.grad_sync]
    assert len(twins) == 18 and all(c.workers == 2 for c in twins)


def test_spec_flags_reproduce_the_spec_in_the_runner() -> None:
    spec = RunSpec(model="lenet", scaling="strong", batch_size=64, lr=0.01, max_steps=7)  # type: ignore[arg-type]
    args = build_parser(Engine.DDP).parse_args(spec_flags(spec))
    assert spec_from_args(args) == spec


def test_only_the_first_repeat_of_a_synced_cell_keeps_a_trace(tmp_path: Path) -> None:
    """The default sweep's traces: one a configuration, not one a launch (a repeat's
    traced steps are the same picture; a twin's lacks the communication). The user's
    own --trace-steps reaches the cells that keep one."""

    def trace_steps(cell: Cell) -> list[str]:
        (node,) = cell_argv(cell, tmp_path, tmp_path, {}, 60.0)
        return [node.argv[i + 1] for i, a in enumerate(node.argv) if a == "--trace-steps"]

    cells = plan(SweepConfig(), RunSpec())
    kept = [c for c in cells if c.keeps_trace]
    assert {(c.repeat, c.spec.grad_sync) for c in kept} == {(0, True)}
    assert len(kept) == 12  # 3 engines x {1, 2} workers x {mlp, lenet}
    for c in cells:
        assert trace_steps(c) == ([] if c in kept else ["0"]), c.name
    mine = plan(SweepConfig(trace_steps=5, repeats=2, workers=(2,)), RunSpec())
    # the last --trace-steps is the one the runner takes
    assert {trace_steps(c)[-1] for c in mine if c.keeps_trace} == {"5"}
    assert {trace_steps(c)[-1] for c in mine if not c.keeps_trace} == {"0"}


def test_cell_keys_differ_by_what_matters() -> None:
    a, b, twin = plan(
        SweepConfig(engines=(Engine.DDP,), workers=(1, 2), models=("mlp",), repeats=1), TINY
    )
    assert len({a.key("env"), b.key("env"), twin.key("env")}) == 3
    assert a.key("env") != a.key("other-machine")
    assert a.key("env") == plan(
        SweepConfig(engines=(Engine.DDP,), workers=(1,), models=("mlp",), repeats=1), TINY
    )[0].key("env")


@pytest.mark.distributed
def test_real_sweep_records_every_cell_and_resumes(tmp_path: Path) -> None:
    cfg = SweepConfig(  # target_ci 0: no timed windows beyond the spec's steps
        engines=(Engine.HOROVOD, Engine.DDP), workers=(1, 2), models=("mlp",), repeats=1,
        target_ci=0.0,
    )  # fmt: skip
    out = io.StringIO()
    first = run_sweep(cfg, TINY, tmp_path, out=out)
    assert [r.status for r in first] == ["ok"] * 6, out.getvalue()
    recs = records.load([tmp_path]).records
    assert sorted((r["engine"], r["world_size"], r["spec"]["grad_sync"]) for r in recs) == [
        ("ddp", 1, True),
        ("ddp", 2, False),
        ("ddp", 2, True),
        ("horovod", 1, True),
        ("horovod", 2, False),
        ("horovod", 2, True),
    ]
    # the compute-only twin really skipped gradient averaging: replicas diverge
    twin = next(r for r in recs if not r["spec"]["grad_sync"] and r["engine"] == "ddp")
    assert not twin["fingerprints"]["final_weights_ranks_agree"]
    assert next(r for r in recs if r["spec"]["grad_sync"] and r["world_size"] == 2)["fingerprints"][
        "final_weights_ranks_agree"
    ]
    # per-rank logs kept next to the records, without the empty files and folders the
    # launchers open for every rank (torchrun's attempt_0/N/, Horovod's rank.N/)
    for r in recs:
        folder = Path(r["labels"]["log_dir"])
        # the command shown while the cell ran goes once the record holds it: torchrun's
        # workers record torchrun's command; Horovod's see only horovodrun's worker line
        shown = folder / "argv.json"
        if r["engine"] == "ddp":
            parent = r["launcher"]["parent_argv"]
            assert not shown.exists()
            assert parent is not None and parent[1:3] == ["-m", "torch.distributed.run"]
        else:
            command = json.loads(shown.read_text())
            assert Path(command[0]).name == "horovodrun"
            assert r["launcher"]["parent_argv"] != command
        empty = [
            p
            for p in folder.rglob("*")
            if (p.is_dir() and not any(p.iterdir())) or (p.is_file() and not p.stat().st_size)
        ]
        assert not empty, (r["engine"], r["world_size"], empty)
    again = run_sweep(cfg, TINY, tmp_path, out=out)
    assert again == []
    assert "6 cells (6 already recorded, skipped)" in out.getvalue()


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fakepython"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_failing_cells_are_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, 'echo "worker exploded: out of cheese" >&2; exit 3')
    cfg = SweepConfig(engines=(Engine.DDP,), workers=(1,), models=("mlp",), repeats=2)
    out = io.StringIO()
    outcomes = run_sweep(cfg, TINY, tmp_path / "res", out=out, python=python)
    assert [o.status for o in outcomes] == ["failed", "failed"]
    recs = records.load([tmp_path / "res"]).records
    assert [r["status"] for r in recs] == ["failed", "failed"]
    assert "launcher exited with code 3" in str(recs[0]["error"])
    assert "out of cheese" in str(recs[0]["error"])  # the log's last lines travel with the record
    assert "out of cheese" in out.getvalue()


def test_hung_cell_times_out_and_its_tree_is_reaped(tmp_path: Path) -> None:
    marker = "7777.125"
    python = _fake_python(tmp_path, f"sleep {marker} & sleep {marker}; wait")
    cell = plan(SweepConfig(engines=(Engine.DDP,), workers=(1,), models=("mlp",), repeats=1), TINY)[
        0
    ]
    res = run_cell(
        cell,
        1,
        tmp_path / "res",
        tmp_path / "runs",
        timeout=2.0,
        env_key="e",
        sweep_id="s",
        python=python,
    )
    assert res.status == records.Status.TIMEOUT
    assert res.seconds < 30
    rec = records.load([tmp_path / "res"]).records[0]
    assert rec["status"] == "timeout" and "time-out of 2s" in str(rec["error"])
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == [], leftovers
    assert os.path.isdir(res.log_dir)
