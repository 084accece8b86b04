"""Identities across suite changes: the protocol version and spec normalisation in the
comparison group and the resume key (no training)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import cast

from bench import records, sweep
from bench.contract.spec import RunSpec
from bench.measure.window import PROTOCOL_VERSION
from bench.records.types import LoadedRecord, Spec
from bench.tables import compare, frame, regress

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


def _golden() -> list[LoadedRecord]:
    return records.load([GOLDEN]).records


def test_a_spec_field_at_its_default_does_not_split_groups() -> None:
    """Records written before a RunSpec field existed and records that carry it at its
    default are one comparison (and one BASE/NEW cell)."""
    old = _golden()  # their specs predate allow_tf32, augment, bn_* and grad_compression
    assert "allow_tf32" not in old[0]["spec"]
    new = copy.deepcopy(old)
    defaults = RunSpec().to_dict()
    for r in new:
        r["spec"] = cast(Spec, {**defaults, **r["spec"]})
        r["run_id"] += "-new"
    spec_old, spec_new = old[0]["spec"], new[0]["spec"]
    assert frame.group_key(spec_old, "m") == frame.group_key(spec_new, "m")
    assert len(compare.compare(old)) == len(compare.compare(old + new)) == 1
    # a field away from its default still makes its own group
    other = {**spec_new, "allow_tf32": True}
    assert frame.group_key(other, "m") != frame.group_key(spec_new, "m")


def test_another_protocol_version_is_its_own_comparison() -> None:
    old = _golden()
    new = copy.deepcopy(old)
    for r in new:
        r["protocol_version"] = 2
        r["run_id"] += "-p2"
    assert records.protocol_version(old[0]) == 1
    comps = compare.compare(old + new)
    assert len(comps) == 2 and len({c.group for c in comps}) == 2
    df = frame.frame(old + new)
    synced = df[df["grad_sync"].astype(bool)]
    assert synced["spec_group"].nunique() == 2  # BASE/NEW never pairs two protocols


def test_resume_reruns_cells_of_another_protocol(tmp_path: Path) -> None:
    rec = _golden()[0]
    rec.pop("_source", None)
    rec["labels"] = {"cell": "abc"}
    path = tmp_path / "runs.jsonl"
    now, other = PROTOCOL_VERSION, PROTOCOL_VERSION + 1
    both = [{**rec, "protocol_version": now}, {**rec, "protocol_version": other}]
    path.write_text("".join(json.dumps(r) + "\n" for r in both))
    assert sweep.completed_cells(tmp_path) == {"abc"}
    path.write_text(json.dumps({**rec, "protocol_version": other}) + "\n")
    assert sweep.completed_cells(tmp_path) == set()
    path.write_text(json.dumps({**rec, "protocol_version": 1}) + "\n")  # each step alone
    assert sweep.completed_cells(tmp_path) == set()


def test_records_carry_the_protocol_version() -> None:
    rec = records.new_record({}, "ddp", 1, {}, {"name": "none"})
    assert rec["protocol_version"] == PROTOCOL_VERSION


def test_compare_says_why_runs_of_another_protocol_are_apart() -> None:
    old = _golden()  # no window fields: each step timed alone (protocol 1)
    new = copy.deepcopy(old)
    for r in new:
        r["protocol_version"] = PROTOCOL_VERSION
        r["run_id"] += "-new"
    comps = compare.compare(old + new)
    assert len(comps) == 2
    for c in comps:
        (note,) = [n for n in c.notes if n.startswith("apart: ")]
        assert "never compared" in note and "protocol 1" in note


def test_base_new_never_pairs_two_protocols_and_says_so() -> None:
    old = _golden()
    new = copy.deepcopy(old)
    for r in new:
        r["protocol_version"] = PROTOCOL_VERSION
    assert regress.diff(old, new).empty  # no cell pairs a protocol-1 run with a windowed one
    why = regress.why_unmatched(old, new)
    assert f"protocol 1 in BASE and {PROTOCOL_VERSION} in NEW" in why
    assert "rerun BASE" in why
