"""Records of the wrong shape are skipped with file:line and field; good ones always come through.

tests/data/damaged.jsonl (made by tests/data/make_damaged.py) holds two good
records around one damaged record per case; each damaged one names, in `_expect`,
the field its problem must mention.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from bench import cli, records
from bench.records import schema
from bench.records.types import Status
from bench.render import export, formats, html, summary
from bench.tables import compare, frame

DATA = Path(__file__).parent / "data"
DAMAGED = DATA / "damaged.jsonl"
GOOD_IDS = {"good1", "good2"}


def _expectations() -> dict[int, str]:
    lines = DAMAGED.read_text().splitlines()
    return {
        n: json.loads(line)["_expect"]
        for n, line in enumerate(lines, start=1)
        if "_expect" in json.loads(line)
    }


def test_each_damaged_record_is_reported_with_line_and_field() -> None:
    loaded = records.load([DAMAGED])
    assert {r["run_id"] for r in loaded.records} == GOOD_IDS
    expected = _expectations()
    assert len(expected) >= 40
    got = {p.line: p.message for p in loaded.problems}
    assert set(got) == set(expected)
    for line, field in expected.items():
        assert got[line].startswith(field) or field in got[line], (line, field, got[line])
    assert all(str(p).startswith(f"{DAMAGED}:{p.line}: ") for p in loaded.problems)


def _good_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "good"
    folder.mkdir()
    shutil.copy(DATA / "golden.jsonl", folder / "runs.jsonl")
    return folder


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "next-to-good-folder"])
@pytest.mark.parametrize("fmt", ["text", "markdown", "csv", "json", "html"])
def test_compare_shows_the_good_and_reports_the_bad(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    alone: bool,
    fmt: str,
) -> None:
    paths = [str(DAMAGED)] + ([] if alone else [str(_good_folder(tmp_path))])
    monkeypatch.chdir(tmp_path)  # html, never for the terminal, goes to report/ here
    assert cli.main(["compare", *paths, "--format", fmt]) == 0
    out, err = capsys.readouterr()
    if fmt == "html":
        assert f"wrote {Path('report') / 'report.html'}" in err
        out = (tmp_path / "report" / "report.html").read_text()
    assert "lenet" in out  # the damaged file's own good comparison
    if not alone:
        assert "mlp" in out  # the good folder's comparison
    skipped = [line for line in err.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == len(_expectations()) + (0 if alone else 1)  # golden's torn line
    assert f"{DAMAGED}:2: spec: expected an object, got 123" in err
    assert "ok<script>" not in out  # the record is skipped; html escapes its problem line


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "next-to-good-folder"])
def test_export_writes_the_good_and_reports_the_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], alone: bool
) -> None:
    paths = [str(DAMAGED)] + ([] if alone else [str(_good_folder(tmp_path))])
    out_file = tmp_path / "export.json"
    assert cli.main(["export", "--pytest-benchmark", str(out_file), *paths]) == 0
    data = json.loads(out_file.read_text())
    names = {b["name"] for b in data["benchmarks"]}
    assert "train_step[lenet-digits-ddp-np1]" in names
    assert "train_step[lenet-digits-ddp-np2]" in names
    if not alone:
        assert "train_step[mlp-digits-horovod-np2]" in names
    err = capsys.readouterr().err
    assert err.count("skipped: ") == len(_expectations()) + (0 if alone else 1)


WRONG_VALUES: list[Any] = [123, -1, 1.5, "x", "", [1], ["a"], {"a": 1}, None, True, [[None]]]


def _full_record() -> dict[str, Any]:
    """A record with every field a runner writes (the first of the committed reference)."""
    path = Path(__file__).parent.parent / "results" / "reference" / "cpu-2core-digits"
    return cast(dict[str, Any], records.load([path]).records[0])


def test_no_wrong_type_of_any_field_crashes_a_report(tmp_path: Path) -> None:
    """Every known field (top level and one level down) set to every kind of wrong value."""
    base = _full_record()
    base.pop("_source")
    mutants: list[dict[str, Any]] = []
    keys: list[str] = []  # the top-level field each mutant changed
    for key in sorted(base):
        for value in WRONG_VALUES:
            mutants.append({**base, key: value})
        if isinstance(base[key], dict):
            for sub in base[key]:
                for value in WRONG_VALUES:
                    mutants.append({**base, key: {**base[key], sub: value}})
        if isinstance(base[key], list) and base[key]:
            for value in WRONG_VALUES:
                mutants.append({**base, key: [value, *base[key][1:]]})
        keys += [key] * (len(mutants) - len(keys))
    f = tmp_path / "runs.jsonl"
    lines = [json.dumps(base)]
    for i, m in enumerate(mutants):
        lines.append(json.dumps({**copy.deepcopy(m), "run_id": m.get("run_id", "") and f"m{i}"}))
    f.write_text("\n".join(lines) + "\n")
    loaded = records.load([f])
    assert loaded.records[0]["run_id"] == base["run_id"]
    # whatever was accepted, every report renders it
    comps = compare.compare(loaded.records)
    assert comps
    every = set(summary.SECTIONS.values())
    for comp in comps:
        formats.render_text(comp)
        formats.render_text(comp, None, every)
    export.to_pytest_benchmark(loaded.records)
    for fmt in ("markdown", "csv", "json"):
        assert formats.render(loaded, fmt, frame.DEFAULT_TARGET)
        assert formats.render(loaded, fmt, frame.DEFAULT_TARGET, show=every)
    # The HTML report draws 4 figures per comparison (0.2 s each). What an accepted
    # spec, version or thread value changes is the group, not what is drawn: those
    # mutants make some 40 more comparisons of valid records, so they are left out here.
    regrouping = {"spec", "engine_versions", "threads"}
    kept = {f"m{i}" for i, key in enumerate(keys) if key not in regrouping}
    drawn = [r for r in loaded.records if r["run_id"] == base["run_id"] or r["run_id"] in kept]
    assert len(compare.compare(drawn)) < len(comps)
    html.render(drawn, loaded.problems)


def test_unknown_fields_are_tolerated_and_statuses_known() -> None:
    rec = {
        "schema_version": records.SCHEMA_VERSION,
        "run_id": "x",
        "status": "diverged",
        "engine": "ddp",
        "spec": {"model": "mlp"},
        "world_size": 1,
        "throughput": None,
        "step_losses": [1.0, "nan", None],
        "some_new_field": {"anything": [1, "a"]},
    }
    assert schema.validate(rec) is None
    for status in ("ok", "failed", "timeout", "diverged", "unavailable"):
        assert status in {s.value for s in Status}
