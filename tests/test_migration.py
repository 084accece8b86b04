"""The explicit migrations: version 1 to 2 (names, numbers), 2 to 3 (the protocol), 3 to 4
(series at the resolution they were measured, stored packed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import records
from bench.measure.window import PROTOCOL_VERSION
from bench.records import packed, schema

REFERENCE = Path(__file__).parent.parent / "results" / "reference"


def _v1(**extra: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "run_id": "old",
        "status": "ok",
        "engine": "horovod",
        "spec": {"model": "mlp"},
        "world_size": 1,
        "throughput": 100.0,
        "step_times_s": [[0.01, 0.02]],
        "labels": {"repeat": "2", "attempt": "0123", "sweep": "s"},
        "launcher": {"name": "horovodrun", "runner_argv": ["python", "runners/hvd.py"]},
        "knobs": {"cycle_time_ms": "default", "fusion_threshold_bytes": 1},
        "epochs": [{"epoch": 0, "wall_time_s": 1.5, "train_time_s": 1.0}],
        "wall_time_s": 2.5,
        **extra,
    }


def _load(tmp_path: Path, *recs: dict[str, Any]) -> records.Loaded:
    f = tmp_path / "runs.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return records.load([f])


def test_a_v1_runner_record_is_migrated(tmp_path: Path) -> None:
    loaded = _load(tmp_path, _v1())
    assert loaded.problems == []
    rec = loaded.records[0]
    assert rec["schema_version"] == records.SCHEMA_VERSION == 5
    assert rec["protocol_version"] == 1  # no window fields: each step timed alone
    assert rec["training_wall_s"] == 2.5 and "wall_time_s" not in rec
    assert rec["epochs"] == [{"epoch": 0, "elapsed_s": 1.5, "train_time_s": 1.0}]
    assert rec["labels"] == {"repeat": 2, "attempt": "0123", "sweep": "s"}  # ids stay strings
    assert rec["knobs"]["cycle_time_ms"] is None
    set_cycle = _v1(knobs={"cycle_time_ms": "3.5"})
    assert _load(tmp_path, set_cycle).records[0]["knobs"]["cycle_time_ms"] == 3.5


def test_a_v1_sweep_written_record_keeps_its_launch_to_exit_time(tmp_path: Path) -> None:
    failed = _v1(status="timeout", launcher={"name": "bench run", "argv": ["torchrun"]})
    rec = _load(tmp_path, failed).records[0]
    assert rec["launch_to_exit_s"] == 2.5 and "training_wall_s" not in rec


def test_v1_types_are_checked_when_migrating(tmp_path: Path) -> None:
    loaded = _load(tmp_path, _v1(labels={"repeat": 2}))  # v1 labels were strings
    assert loaded.records == []
    assert "labels.repeat: expected a string" in loaded.problems[0].message
    v2 = {**records.migrate(_v1()), "labels": {"repeat": "two"}}
    assert schema.validate(v2) == "labels.repeat: expected an integer >= 0, got 'two' (str)"


def test_typed_labels() -> None:
    assert records.typed_labels({"repeat": "3", "launched_at": "12.5", "x": "7"}) == {
        "repeat": 3,
        "launched_at": 12.5,
        "x": "7",
    }
    with pytest.raises(ValueError, match="label repeat must be an integer"):
        records.typed_labels({"repeat": "x"})


def test_the_reference_is_stored_at_the_current_version() -> None:
    lines = (REFERENCE / "cpu-2core-digits" / "runs.jsonl").read_text().splitlines()
    assert {json.loads(line)["schema_version"] for line in lines} == {records.SCHEMA_VERSION}
    loaded = records.load([REFERENCE])
    assert loaded.problems == []


def test_the_reference_was_taken_under_todays_protocol() -> None:
    """The committed reference is what a user compares against first: a change of the
    measurement protocol must come with a fresh one, or this fails."""
    current = records.load([REFERENCE / "cpu-2core-digits"]).records
    assert current and {records.protocol_version(r) for r in current} == {PROTOCOL_VERSION}
    # the older reference is kept under a name that says what it is, and reads as such
    old = records.load([REFERENCE / "cpu-2core-digits-protocol1"]).records
    assert old and {records.protocol_version(r) for r in old} == {1}


def test_a_v2_record_names_the_protocol_that_timed_it(tmp_path: Path) -> None:
    # Schema-2 records said protocol 1 whether their steps were timed alone or in
    # windows; the window fields tell them apart, and the two never group together.
    alone = records.migrate(_v1())
    windowed = {**alone, "schema_version": 2, "window_times_s": [[0.1]], "window_steps": [10]}
    alone = {**alone, "schema_version": 2, "protocol_version": 1}
    assert records.migrate(alone)["protocol_version"] == 1
    assert records.migrate(windowed)["protocol_version"] == 2
    said = {**windowed, "protocol_version": 3}  # a version it states beyond 1 is kept
    assert records.migrate(said)["protocol_version"] == 3
    collective = {**alone, "kind": "collective"}
    assert records.migrate(collective)["protocol_version"] == 1


# A few records of the protocol-2 reference as schema 3 wrote them (full-precision
# floats), kept when the reference itself was rewritten in the packed form.
V3_SAMPLE = Path(__file__).parent / "data" / "reference-v3-sample.jsonl"


def test_a_v3_record_reads_as_its_rewritten_form() -> None:
    """Version 3 records (the protocol-2 reference before its rewrites) load, their series
    rounded to what version 4 stores, and read exactly as the rewritten reference does."""
    old = records.load([V3_SAMPLE])
    assert old.problems == [] and len(old.records) >= 3
    new = {r["run_id"]: r for r in records.load([REFERENCE / "cpu-2core-digits"]).records}
    raw = [json.loads(line) for line in V3_SAMPLE.read_text().splitlines()]
    for rec, before in zip(old.records, raw, strict=True):
        assert before["schema_version"] == 3 and rec["schema_version"] == records.SCHEMA_VERSION
        got = {k: v for k, v in rec.items() if k != "_source"}
        assert got == {k: v for k, v in new[rec["run_id"]].items() if k != "_source"}
        for rank, times in zip(rec["step_times_s"], before["step_times_s"], strict=True):
            assert all(abs(a - b) <= 5e-7 for a, b in zip(rank, times, strict=True))
            assert all(a == round(a * 1e6) / 1e6 for a in rank)  # whole microseconds
        assert all(float(np.float32(x)) == x for x in rec["step_losses"])


def test_the_protocol1_reference_loads_and_keeps_its_figures_through_the_packed_form(
    tmp_path: Path,
) -> None:
    """The protocol-1 reference (schema 2) is migrated on read; written again it is packed,
    and reads back to the same record."""
    old = records.load([REFERENCE / "cpu-2core-digits-protocol1"])
    assert old.problems == [] and len(old.records) == 54
    for rec in old.records:
        records.append(tmp_path, {k: v for k, v in rec.items() if k != "_source"})
    line = (tmp_path / "runs.jsonl").read_text().splitlines()[0]
    assert json.loads(line)["step_times_s"].keys() == packed.KEYS
    again = records.load([tmp_path]).records
    strip = [{k: v for k, v in r.items() if k != "_source"} for r in old.records]
    assert [{k: v for k, v in r.items() if k != "_source"} for r in again] == strip
