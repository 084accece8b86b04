from __future__ import annotations

import dataclasses
import json
import multiprocessing
import typing
from pathlib import Path
from typing import Any

import pytest

from bench import record as record_types
from bench import records, schema
from bench.record import LoadedRecord, RunRecord, Spec
from bench.spec import RunSpec


def _rec(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "schema_version": records.SCHEMA_VERSION,
        "run_id": f"r{i}",
        "status": "ok",
        "engine": "ddp",
        "spec": {"model": "mlp"},
        "world_size": 1,
        "throughput": 100.0,  # an ok record's required numbers
        "step_times_s": [[0.01]],
        **extra,
    }


def test_append_and_load_round_trip(tmp_path: Path) -> None:
    for i in range(3):
        records.append(tmp_path, _rec(i))
    loaded = records.load([tmp_path])
    assert [r["run_id"] for r in loaded.records] == ["r0", "r1", "r2"]
    assert loaded.problems == []
    assert loaded.records[1]["_source"].endswith("runs.jsonl:2")


def test_bad_lines_are_reported_and_good_ones_kept(tmp_path: Path) -> None:
    f = tmp_path / "runs.jsonl"
    lines = [
        json.dumps(_rec(0)),
        "{not json",
        "\x00\xff garbage",
        json.dumps([1, 2]),
        json.dumps({"run_id": "x"}),
        json.dumps(_rec(1, schema_version=records.SCHEMA_VERSION + 1)),
        json.dumps(_rec(2)),
    ]
    f.write_text("\n".join(lines) + "\n")
    loaded = records.load([tmp_path])
    assert [r["run_id"] for r in loaded.records] == ["r0", "r2"]
    messages = {p.line: p.message for p in loaded.problems}
    assert set(messages) == {2, 3, 4, 5, 6}
    assert "not valid JSON" in messages[2]
    assert "not a JSON object" in messages[4]
    assert "missing field(s)" in messages[5]
    assert "newer than this bench understands" in messages[6]


def test_append_after_a_torn_line_keeps_both_readable(tmp_path: Path) -> None:
    records.append(tmp_path, _rec(0))
    with open(tmp_path / "runs.jsonl", "a") as fh:
        fh.write('{"schema_version": 1, "run_id": "torn')  # a writer died mid-line
    records.append(tmp_path, _rec(1))
    loaded = records.load([tmp_path])
    assert [r["run_id"] for r in loaded.records] == ["r0", "r1"]
    assert len(loaded.problems) == 1


def _writer(args: tuple[str, int]) -> None:
    folder, worker = args
    for i in range(50):
        records.append(folder, _rec(worker * 1000 + i, padding="x" * 5000))


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_writer, [(str(tmp_path), w) for w in range(4)])
    loaded = records.load([tmp_path])
    assert loaded.problems == []
    assert len(loaded.records) == 200


def test_results_path_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("")
    with pytest.raises(records.RecordsError, match="is a file, not a directory"):
        records.check_writable(blocker)
    with pytest.raises(
        records.RecordsError, match=r"cannot create results directory .*Not a directory"
    ):
        records.check_writable(blocker / "sub")


def test_missing_path_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    loaded = records.load([tmp_path / "nope"])
    assert loaded.records == [] and "no such file" in loaded.problems[0].message


def _typed_dict(annotation: Any) -> Any:
    """The TypedDict inside an annotation (X, X | None, list[X], list[X | None]), or None."""
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.is_typeddict(arg):
            return arg
        if typing.get_origin(arg) is list:
            found = _typed_dict(typing.get_args(arg)[0])
            if found is not None:
                return found
    return None


def _obj(kind: schema.Type) -> schema.Obj | None:
    """The object type inside a schema type (Obj, Opt(Obj), ListOf(Obj)...), or None."""
    while isinstance(kind, schema.Opt | schema.ListOf):
        kind = kind.inner if isinstance(kind, schema.Opt) else kind.item
    return kind if isinstance(kind, schema.Obj) else None


def _drift(td: Any, fields: dict[str, schema.Field], path: str) -> list[str]:
    """Where a TypedDict and a schema object name different fields, recursively."""
    hints = typing.get_type_hints(td)
    out = [f"{path}{k}: typed only" for k in sorted(set(hints) - set(fields))]
    out += [f"{path}{k}: in the schema only" for k in sorted(set(fields) - set(hints))]
    for key in sorted(set(hints) & set(fields)):
        inner, obj = _typed_dict(hints[key]), _obj(fields[key].type)
        if inner is not None and obj is not None:
            out += _drift(inner, obj.fields, f"{path}{key}.")
    return out


def test_the_record_type_names_the_schemas_fields() -> None:
    # RunRecord (what the type checker holds every reader and writer to) and the schema
    # (what load validates) describe one record: a field added to one is added to both.
    assert record_types.SCHEMA_VERSION == records.SCHEMA_VERSION
    assert _drift(RunRecord, schema.SCHEMAS[records.SCHEMA_VERSION], "") == []
    # LoadedRecord adds only what load attaches, none of it a stored field
    added = set(typing.get_type_hints(LoadedRecord)) - set(typing.get_type_hints(RunRecord))
    assert added == {"_source", "_summary", "step_time_quantiles"}
    assert added.isdisjoint(schema.SCHEMAS[records.SCHEMA_VERSION])
    required = {k for k, f in schema.SCHEMAS[records.SCHEMA_VERSION].items() if "*" in f.required}
    assert RunRecord.__required_keys__ == required
    # a training record's spec is RunSpec.to_dict(): every field of it is typed
    assert {f.name for f in dataclasses.fields(RunSpec)} <= set(typing.get_type_hints(Spec))
