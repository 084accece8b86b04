"""`bench compare` reads cached record summaries: same tables, far fewer bytes decoded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from bench import records
from bench.records import cache, summaries
from bench.tables import compare

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "runs.jsonl"
    target.write_bytes(GOLDEN.read_bytes())
    return target


def test_summaries_give_the_same_tables(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    full = compare.compare(records.load([path]).records)
    for _ in range(2):  # built, then read from the cache
        summ = compare.compare(records.load_summaries([path]).records)
        assert [c.title for c in summ] == [c.title for c in full]
        for a, b in zip(full, summ, strict=True):
            for name in a.sections:
                pd.testing.assert_frame_equal(a.sections[name], b.sections[name])
    assert (tmp_path / ".runs.jsonl.summaries.json").is_file()
    assert all("step_times_s" not in r for r in records.load_summaries([path]).records)


def test_unchanged_file_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _copy(tmp_path)
    first = records.load_summaries([path])

    def fail(*_: object) -> None:
        raise AssertionError("parsed a line the cache holds")

    monkeypatch.setattr(cache, "parse_line", fail)
    again = records.load_summaries([path])
    assert [r["_source"] for r in again.records] == [r["_source"] for r in first.records]


def test_appends_are_parsed_alone_and_damage_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _copy(tmp_path)
    before = records.load_summaries([path])
    n, bad = len(before.records), [p.line for p in before.problems]
    extra = json.loads(GOLDEN.read_text().splitlines()[0])
    extra["run_id"] = "appended"
    with open(path, "a") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps(extra) + "\n")
    seen: list[int] = []
    parse = cache.parse_line

    def spy(p: Path, number: int, raw: bytes, **how: bool) -> object:
        seen.append(number)
        return parse(p, number, raw, **how)

    monkeypatch.setattr(cache, "parse_line", spy)
    loaded = records.load_summaries([path])
    lines = len(GOLDEN.read_text().splitlines())
    assert seen == [lines + 1, lines + 2]  # only the new lines
    assert len(loaded.records) == n + 1 and loaded.records[-1]["run_id"] == "appended"
    assert [p.line for p in loaded.problems] == [*bad, lines + 1]
    monkeypatch.setattr(cache, "parse_line", parse)
    # reported again from the cache, not lost
    assert [p.line for p in records.load_summaries([path]).problems] == [*bad, lines + 1]


def test_rewritten_file_or_damaged_cache_is_read_again(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    records.load_summaries([path])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n")  # shorter: the cache cannot be reused
    assert len(records.load_summaries([path]).records) == 2
    cache = tmp_path / ".runs.jsonl.summaries.json"
    cache.write_text('{"version": 1, "size": "x", "entries": 5}')
    os.utime(path)
    assert len(records.load_summaries([path]).records) == 2


def test_resume_reads_a_small_cell_index_grown_with_appends(tmp_path: Path) -> None:
    """A sweep's resume needs (cell, status, protocol) per record: its own index beside the
    file, three values a record, updated from the appended lines only."""
    path = _copy(tmp_path)
    first = summaries.cells(path)
    assert len(first) == len(records.load([path]).records)
    index = tmp_path / ".runs.jsonl.cells.json"
    assert index.is_file() and index.stat().st_size < path.stat().st_size / 5
    extra = json.loads(GOLDEN.read_text().splitlines()[0])
    extra["labels"] = {"cell": "new-cell"}
    with open(path, "a") as fh:
        fh.write(json.dumps(extra) + "\n")
    assert summaries.cells(path)[-1][0] == "new-cell"
    assert summaries.cells(path)[:-1] == first
