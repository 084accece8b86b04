"""`bench compare`'s text fits the terminal: every line at most COLUMNS (100 when no
terminal) on the committed reference and on records with a step breakdown and a verdict,
with --price-per-hour, and --base/--new's changes; nothing cut, what moved said (issue 36)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import cli
from bench.render import textfit
from bench.tables import knobs
from tests.test_html_report import _rich

ROOT = Path(__file__).parent.parent
REFERENCE = ROOT / "results" / "reference" / "cpu-2core-digits"
GOLDEN = ROOT / "tests" / "data" / "golden.jsonl"
# collectives on emulated links and the scaling model's predictions, beside a sweep
PREDICT = ROOT / "results" / "reference" / "predict-check-2026-12-03"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden records with a step breakdown each (so a verdict table), on disk."""
    path = tmp_path_factory.mktemp("profiled") / "runs.jsonl"
    lines = [
        json.dumps({k: v for k, v in dict(r).items() if not k.startswith("_")}) for r in _rich()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _compare(path: Path, columns: int, *extra: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["compare", str(path), "--price-per-hour", "0.5", *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("which", ["reference", "profiled", "collectives"])
def test_every_line_fits_the_terminal(
    columns: int,
    which: str,
    profiled: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    path = {"reference": REFERENCE, "collectives": PREDICT}.get(which, profiled)
    first = _compare(path, columns, capsys=capsys)  # the summary
    out = _compare(path, columns, "--all", capsys=capsys)
    wide = [line for line in (first + out).splitlines() if len(line) > columns]
    assert not wide, "\n".join(wide)
    assert "answers (" in first and "per worker/s" not in first
    assert "cost and energy" in out and "per worker/s" in out
    if which == "profiled":  # prose under the table as numbered notes, never a column
        assert "verdict:" in out and ", evidence: " in out and ", try: " in out
        assert "comm measured by: " in out
    if which == "collectives":
        assert "bus bandwidth GB/s:" in out
    if which == "reference":  # a table split to fit says so
        assert "parts to fit" in out
    # --wide: one table each, as wide as it needs
    assert max(map(len, _compare(REFERENCE, columns, "--wide", capsys=capsys).splitlines())) > 100


@pytest.mark.parametrize("columns", [80, 100])
def test_the_base_new_changes_fit_the_terminal(
    columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--base/--new (the reference against itself: one machine, so every cell matches)
    fits as the tables do, every cell's change shown; --wide keeps one table a comparison."""
    monkeypatch.setenv("COLUMNS", str(columns))
    argv = ["compare", "--base", str(REFERENCE), "--new", str(REFERENCE)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    wide = [line for line in out.splitlines() if len(line) > columns]
    assert not wide, "\n".join(wide)
    for heading in ("samples/s", "step p50 ms", "peak RSS MB", "* significant"):
        assert heading in out
    assert "47,807 -> 47,807 (+0.0%)" in out and "9,784 -> 9,784 (+0.0%)" in out
    assert cli.main([*argv, "--wide"]) == 0
    assert max(map(len, capsys.readouterr().out.splitlines())) > 100


@pytest.mark.parametrize("columns", [80, 100])
def test_sources_fit_the_terminal_and_name_every_record(
    columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sources lists every run's file and line, however long the paths, within the width."""
    monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main(["compare", str(REFERENCE), str(GOLDEN), "--sources"]) == 0
    out = capsys.readouterr().out
    wide = [line for line in out.splitlines() if len(line) > columns]
    assert not wide, "\n".join(wide)
    listing = out[out.index("record behind each run") :].split("\n\n")[0].splitlines()
    files = dict(line.strip().split(": ", 1) for line in listing if line.startswith("  file "))
    assert sorted(files.values()) == sorted([str(REFERENCE / "runs.jsonl"), str(GOLDEN)])
    header = listing[len(files) + 1].split()
    assert header[:6] == ["group", "engine", "workers", "seed", "file", "line"]
    named = {(files[f"file {r.split()[4]}"], int(r.split()[5])) for r in listing[len(files) + 2 :]}
    # one row per record: the reference's 90 and the golden file's 16 (its line 17 is damaged)
    assert len(named) == 106 and (str(GOLDEN), 16) in named


def test_without_a_terminal_the_width_is_100(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert textfit.width() == 100  # pytest's stdout is no terminal
    assert textfit.width(wide=True) is None


def test_no_value_is_cut_and_every_moved_value_is_in_a_note() -> None:
    import pandas as pd

    long = "CPU build: no cuBLAS or cuDNN, and a sentence longer than a cell"
    df = pd.DataFrame([{"engine": "paddle", "workers": 2, "verdict": "ok", "notes": long}])
    lines = textfit.table(df, 60)
    assert all(len(line) <= 60 for line in lines)
    assert "[1]" in lines[1] and long.split()[-1] in " ".join(lines)
    assert " ".join(" ".join(lines).split()).count(long) == 1


def test_knobs_in_human_units() -> None:
    assert knobs.human("fusion_threshold_bytes", 26214400) == "25 MB"
    assert knobs.human("cycle_time_ms", None) == "default"
    assert knobs.human("set_by_launcher", []) == "none"
    assert knobs.human("data_parallel_wrapper", True) == "yes"


def test_the_tune_table_reads_as_the_readme_quotes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["compare", str(ROOT / "results" / "reference" / "tune-lenet-2workers")]) == 0
    out = capsys.readouterr().out
    tuned = out[out.index("best against best") :]
    assert "12,774 [8,132, 19,879] n=3" in tuned and "its defaults won" in tuned
    assert all(len(line) <= 100 for line in out.splitlines())
