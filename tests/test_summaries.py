"""`bench compare` reads cached record summaries: same tables, far fewer bytes decoded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench import records
from bench.records import cache, summaries
from bench.tables import compare

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"
ROOT = Path(__file__).resolve().parents[1]


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "runs.jsonl"
    target.write_bytes(GOLDEN.read_bytes())
    return target


def test_summaries_give_the_same_tables(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    full = compare.compare(records.load([path]).records)
    for _ in range(2):  # built, then read from the cache
        summ = compare.compare(summaries.load_summaries([path]).records)
        assert [c.title for c in summ] == [c.title for c in full]
        for a, b in zip(full, summ, strict=True):
            for name in a.sections:
                pd.testing.assert_frame_equal(a.sections[name], b.sections[name])
    assert list((tmp_path / ".runs.jsonl.summaries").glob("*.parquet"))
    assert all("step_times_s" not in r for r in summaries.load_summaries([path]).records)


def test_unchanged_file_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _copy(tmp_path)
    first = summaries.load_summaries([path])

    def fail(*_: object) -> None:
        raise AssertionError("parsed a line the cache holds")

    monkeypatch.setattr(cache, "parse_line", fail)
    again = summaries.load_summaries([path])
    assert [r["_source"] for r in again.records] == [r["_source"] for r in first.records]


def test_appends_are_parsed_alone_and_damage_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _copy(tmp_path)
    before = summaries.load_summaries([path])
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
    loaded = summaries.load_summaries([path])
    lines = len(GOLDEN.read_text().splitlines())
    assert seen == [lines + 1, lines + 2]  # only the new lines
    assert len(loaded.records) == n + 1 and loaded.records[-1]["run_id"] == "appended"
    assert [p.line for p in loaded.problems] == [*bad, lines + 1]
    monkeypatch.setattr(cache, "parse_line", parse)
    # reported again from the cache, not lost
    assert [p.line for p in summaries.load_summaries([path]).problems] == [*bad, lines + 1]


def test_rewritten_file_or_damaged_cache_is_read_again(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    summaries.load_summaries([path])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n")  # shorter: the cache cannot be reused
    assert len(summaries.load_summaries([path]).records) == 2
    for part in (tmp_path / ".runs.jsonl.summaries").glob("*.parquet"):
        part.write_bytes(b"not parquet")  # a damaged part is never read
    assert len(summaries.load_summaries([path]).records) == 2


def test_resume_reads_a_small_cell_index_grown_with_appends(tmp_path: Path) -> None:
    """A sweep's resume needs (cell, status, protocol) per record: its own index beside the
    file, three values a record, updated from the appended lines only."""
    path = _copy(tmp_path)
    first = summaries.cells(path)
    assert len(first) == len(records.load([path]).records)
    index = tmp_path / ".runs.jsonl.cells"
    size = sum(f.stat().st_size for f in index.glob("*.parquet"))
    assert 0 < size < path.stat().st_size / 5
    extra = json.loads(GOLDEN.read_text().splitlines()[0])
    extra["labels"] = {"cell": "new-cell"}
    with open(path, "a") as fh:
        fh.write(json.dumps(extra) + "\n")
    assert summaries.cells(path)[-1][0] == "new-cell"
    assert summaries.cells(path)[:-1] == first


def _append_copies(path: Path, n: int, tag: str) -> None:
    base = json.loads(GOLDEN.read_text().splitlines()[0])
    with open(path, "a") as fh:
        for i in range(n):
            fh.write(json.dumps({**base, "run_id": f"{tag}{i}"}) + "\n")


def test_appending_touches_only_the_new_records(tmp_path: Path) -> None:
    """A folder of new records is parsed and cached alone: the parts already written are
    kept as they were, and one new part covers exactly the appended bytes."""
    path = _copy(tmp_path)
    summaries.load_summaries([path])
    folder = tmp_path / ".runs.jsonl.summaries"
    before = {f.name: f.stat().st_mtime_ns for f in folder.glob("*.parquet")}
    size = path.stat().st_size
    _append_copies(path, 5, "new")
    loaded = summaries.load_summaries([path])
    after = {f.name: f.stat().st_mtime_ns for f in folder.glob("*.parquet")}
    assert {k: after[k] for k in before} == before  # untouched
    (new,) = set(after) - set(before)
    assert new == f"{size:015d}-{path.stat().st_size:015d}.parquet"
    assert [r["run_id"] for r in loaded.records[-5:]] == [f"new{i}" for i in range(5)]


def test_many_appends_are_merged_into_one_part(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    for k in range(cache.MAX_PARTS + 2):
        _append_copies(path, 1, f"a{k}-")
        summaries.load_summaries([path])
    parts = list((tmp_path / ".runs.jsonl.summaries").glob("*.parquet"))
    assert len(parts) <= 2
    got = [r["run_id"] for r in summaries.load_summaries([path]).records]
    assert got == [r["run_id"] for r in records.load([path]).records]


_WRITER = """
import json, sys
from pathlib import Path
from bench import records
from bench.records import summaries
path, n, tag = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
base = records.load([path]).records[0]
base.pop("_source")
for i in range(n):
    records.append(path, {**base, "run_id": f"{tag}{i}"})
    summaries.load_summaries([path])  # and grows the cache as it goes
"""


def test_two_processes_appending_and_reading_stay_consistent(tmp_path: Path) -> None:
    """Two writers append while they and this process read the cache: every read is the
    file's records in order (never a record twice, never one lost), and so is the end."""
    path = _copy(tmp_path)
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), "40", tag], cwd=ROOT)
        for tag in ("x", "y")
    ]
    seen = 0
    while any(p.poll() is None for p in procs):
        got = summaries.load_summaries([path])
        ids = [r["run_id"] for r in got.records]
        assert len(ids) >= seen and len(set(ids[len(ids) - 80 :])) == len(ids[len(ids) - 80 :])
        seen = len(ids)
    assert all(p.wait() == 0 for p in procs)
    final = summaries.load_summaries([path])
    full = records.load([path])
    assert [r["run_id"] for r in final.records] == [r["run_id"] for r in full.records]
    assert [r["_source"] for r in final.records] == [r["_source"] for r in full.records]
    assert sum(r["run_id"].startswith(("x", "y")) for r in final.records) == 80
