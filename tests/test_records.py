from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import shlex
import typing
from pathlib import Path
from typing import Any

import pytest

from bench import records
from bench.contract.spec import RunSpec
from bench.records import packed, schema
from bench.records.types import LoadedRecord, RunRecord, Spec, Stored


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


def test_the_check_is_read_off_the_type() -> None:
    # One definition: the loader's check is built from RunRecord's annotations, so a
    # field typed there is checked on load, nested objects included, with no table to
    # keep in step.
    assert tuple(sorted(RunRecord.__required_keys__)) == schema.EVERY_RECORD
    ok = _ok_record()
    assert schema.validate(ok) is None
    wrong = {**ok, "fingerprints": {"init_weights": 7}}
    assert schema.validate(wrong) == "fingerprints.init_weights: expected a string, got 7 (int)"
    wrong = {**ok, "cpu_budget": {"workers_on_host": 1}}  # a TypedDict's required keys
    assert schema.validate(wrong) == "cpu_budget: missing field(s) threads_per_worker, usable_cpus"
    assert "labels.repeat: expected an integer >= 0" in str(
        schema.validate({**ok, "labels": {"repeat": "two"}})
    )
    # a number a failed run may hold as null (NullIfFailed), never an ok one
    nulls = {**ok, "resources": {"peak_rss_mb": [None], "cpu_utilisation": [1.0]}}
    assert "in an ok record" in str(schema.validate(nulls))
    assert schema.validate({**nulls, "status": "failed"}) is None
    # LoadedRecord adds only what load attaches, none of it a stored field
    added = set(typing.get_type_hints(LoadedRecord)) - set(typing.get_type_hints(RunRecord))
    assert added == {"_source", "_summary", "step_time_quantiles"}


def test_a_stored_spec_types_every_runspec_field() -> None:
    # RunSpec is the contract; Spec is how a record stores it: the same fields, and a
    # value of the wrong type in any of them is refused on load.
    assert {f.name for f in dataclasses.fields(RunSpec)} <= set(typing.get_type_hints(Spec))
    spec = RunSpec().to_dict()
    check = schema.checker(Spec)
    assert check.check(spec, "spec", schema.OK) is None
    for name, value in spec.items():
        wrong = [1] if not isinstance(value, list) else "x"
        assert check.check({**spec, name: wrong}, "spec", schema.OK), name


def _ok_record() -> dict[str, Any]:
    rec = records.new_record(RunSpec().to_dict(), "ddp", 1, {}, {"name": "x", "argv": []})
    return {
        **rec,
        "step_times_s": [[0.1]],
        "throughput": 1.0,
        "cpu_budget": {"workers_on_host": 1, "threads_per_worker": 1, "usable_cpus": 2},
    }


def test_following_a_file_reads_only_what_was_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep finds each cell's record among the lines appended since the last cell: its
    cost per cell does not grow with the 10,000 records a folder may already hold."""
    from bench.records import store

    big = tmp_path / "runs.jsonl"
    big.write_text("".join(json.dumps(_rec(i)) + "\n" for i in range(10_000)))
    parsed: list[int] = []
    original = store.parse_line

    def counting(path: Path, number: int, raw: bytes) -> Any:
        parsed.append(number)
        return original(path, number, raw)

    monkeypatch.setattr(store, "parse_line", counting)
    follower = records.Follower(tmp_path)
    assert follower.new() == [] and parsed == []  # nothing read yet, nothing parsed
    records.append(tmp_path, _rec(10_001, labels={"attempt": "a1"}))
    (rec,) = follower.new()
    assert rec["run_id"] == "r10001" and parsed == [10_001]  # one line, numbered
    with open(big, "ab") as fh:  # a writer caught mid-line: nothing yet
        fh.write(b'{"half": ')
    assert follower.new() == []
    with open(big, "ab") as fh:
        fh.write(b"1}\n")
    assert follower.new() == [] and parsed == [10_001, 10_002]  # a damaged line, passed over


ARGS = ["--model", "mlp", "--label", "note=two words", "--label", "q='x'"]
RUNNER = ["/venv/bin/python", "/repo/runners/ddp.py", *ARGS]
LAUNCHERS = {
    # torchrun: the runner's arguments as its last words
    "words": ["/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=2", "ddp.py", *ARGS],
    # horovodrun: one `sh -c` line, the arguments quoted at its end
    "quoted": ["/bin/sh", "-c", "env HOROVOD_RANK=0 " + shlex.join(RUNNER)],
}


@pytest.mark.parametrize("how", sorted(LAUNCHERS))
def test_the_runners_arguments_are_written_once_and_read_back_whole(
    tmp_path: Path, how: str
) -> None:
    launcher = {"name": "torchrun", "runner_argv": RUNNER, "parent_argv": LAUNCHERS[how]}
    records.append(tmp_path, _rec(0, launcher=launcher))
    stored = json.loads((tmp_path / "runs.jsonl").read_text())["launcher"]
    assert stored["then_runner_args"] == how
    assert len(json.dumps(stored)) < len(json.dumps(launcher)) - len(json.dumps(ARGS)) + 40
    (loaded,) = records.load([tmp_path]).records
    assert loaded["launcher"] == launcher


@pytest.mark.parametrize(
    "parent",
    [
        None,
        ["/venv/bin/python", "-m", "bench", "run"],  # does not end with the arguments
        ["/bin/sh", "-c", "env X=1 python run.py --model mlp"],  # nor quoted at its end
        [*LAUNCHERS["words"], "--extra"],
    ],
)
def test_a_parent_command_without_the_runners_arguments_is_written_as_it_is(
    tmp_path: Path, parent: list[str] | None
) -> None:
    launcher = {"name": "x", "runner_argv": RUNNER, "parent_argv": parent}
    records.append(tmp_path, _rec(0, launcher=launcher))
    assert json.loads((tmp_path / "runs.jsonl").read_text())["launcher"] == launcher
    assert records.load([tmp_path]).records[0]["launcher"] == launcher


@pytest.mark.parametrize(
    "damaged",
    [
        {"then_runner_args": "words", "parent_argv": ["torchrun"]},  # runner's command gone
        {"then_runner_args": "quoted", "runner_argv": RUNNER, "parent_argv": [7]},
        {"then_runner_args": "words", "runner_argv": RUNNER, "parent_argv": "torchrun"},
    ],
)
def test_a_damaged_stored_launcher_is_named_or_read_not_a_crash(
    tmp_path: Path, damaged: dict[str, Any]
) -> None:
    (tmp_path / "runs.jsonl").write_text(json.dumps(_rec(0, launcher=damaged)) + "\n")
    loaded = records.load([tmp_path])
    assert len(loaded.records) + len(loaded.problems) == 1
    for p in loaded.problems:
        assert "launcher" in p.message


EPOCHS = [
    {
        "epoch": i,
        "steps": 22,
        "train_loss": 1.5 / (i + 1),
        "test_accuracy": None,
        "elapsed_s": 0.1 * i,
    }
    for i in range(3)
]


@pytest.mark.parametrize(
    "epochs, columns",
    [
        (EPOCHS, True),
        ([], False),
        ([*EPOCHS, {"epoch": 3}], False),  # names that differ stay entries
        ([*EPOCHS, "damaged"], False),
    ],
)
def test_epochs_are_written_a_list_a_name_and_read_back_as_entries(
    tmp_path: Path, epochs: list[Any], columns: bool
) -> None:
    records.append(tmp_path, _rec(0, epochs=epochs))
    stored = json.loads((tmp_path / "runs.jsonl").read_text())["epochs"]
    if columns:
        assert stored == {k: [e[k] for e in epochs] for k in epochs[0]}
    else:
        assert stored == epochs
    loaded = records.load([tmp_path])
    if epochs and not all(isinstance(e, dict) for e in epochs):
        assert loaded.problems and "epochs" in loaded.problems[0].message
    else:
        assert loaded.records[0]["epochs"] == epochs


def test_epochs_stored_as_lists_of_unequal_length_are_named_not_a_crash(tmp_path: Path) -> None:
    damaged = {"epoch": [0, 1], "steps": [22]}
    (tmp_path / "runs.jsonl").write_text(json.dumps(_rec(0, epochs=damaged)) + "\n")
    loaded = records.load([tmp_path])
    assert not loaded.records and "epochs" in loaded.problems[0].message


@pytest.mark.parametrize("mode", [schema.FAILED, schema.OK, schema.STRICT, schema.RELAXED])
def test_the_checks_inline_passes_refuse_what_the_whole_check_refuses(mode: int) -> None:
    # The loops over an object's, a list's and a mapping's values pass a plain string,
    # integer or finite float inline (schema.Checker.sure): a value of any other type,
    # a bool where an integer is wanted, NaN, an infinity or an integer beyond a float's
    # range still gets the whole check, in every mode.
    spec = {k: v for k, v in RunSpec().to_dict().items() if v is not None}  # STRICT's too
    in_object = schema.checker(Spec)
    assert in_object.check(spec, "spec", mode) is None
    floats, ints = schema.checker(list[float]), schema.checker(dict[str, int])
    for bad in (True, math.nan, math.inf, -math.inf, 10**400, "0.1", None):
        if bad is None and mode == schema.RELAXED:
            continue  # a failed run's subtree may hold nulls
        assert in_object.check({**spec, "lr": bad}, "spec", mode), bad
        assert floats.check([0.5, 1, bad], "x", mode), bad
    for bad in (True, 1.0, "1", None):
        if bad is None and mode == schema.RELAXED:
            continue
        assert in_object.check({**spec, "batch_size": bad}, "spec", mode), bad
        assert ints.check({"a": 1, "b": bad}, "x", mode), bad
    assert in_object.check({**spec, "model": 1}, "spec", mode)
    assert in_object.check({**spec, "lr": 1, "batch_size": 3}, "spec", mode) is None
    assert floats.check([0.5, 1, -2.0, 10**300], "x", mode) is None


def test_a_packed_series_decodes_once_a_record_read_only_and_large_ones_are_not_kept() -> None:
    stored = Stored("<i4", 1_000_000)
    value = packed.pack([[0.001, 0.002], [0.003, 0.004]], stored)
    assert value is not None
    first, again = packed.array(value), packed.array(dict(value))
    assert first is again  # the check's stand-in and the frame's row share one decoding
    assert not first.flags.writeable  # so no reader can change another's values
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 1.0
    assert first.tolist() == [[0.001, 0.002], [0.003, 0.004]]
    big = packed.pack([0.5] * (packed._KEPT + 1), stored)
    assert big is not None and packed.array(big) is not packed.array(big)  # decoded, not kept
    damaged = {**value, "data": value["data"][:-4]}
    for _ in range(2):  # a failure is not kept either: refused each time
        with pytest.raises(ValueError, match="does not decode"):
            packed.array(damaged)
