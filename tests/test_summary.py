"""The answer first: `bench compare`'s summary, and one reading per pair in every format.

Read on the committed reference folders and the golden records: at most 40 lines a
comparison at 100 columns; every head-to-head given one interval and one word, the
same in the summary's sentences, the head to head and decided tables, json and csv;
fixed repeats read with one look, launches of `bench run --decide-at` at its looks;
`--all` every section; the command an open pair names is one `bench run` takes."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench import cli, records
from bench.records import summaries
from bench.records.types import LoadedRecord
from bench.render import formats, summary
from bench.tables import compare, frame
from tests.conftest import ROOT

REFERENCE = ROOT / "results" / "reference"
FOLDERS = sorted(p for p in REFERENCE.iterdir() if p.is_dir())
GOLDEN = ROOT / "tests" / "data" / "golden.jsonl"


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(["compare", *argv]) == 0
    return capsys.readouterr().out


def test_the_reference_summary_is_a_screen_a_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = _text(capsys, str(REFERENCE / "cpu-2core-digits"))
    blocks = out.strip().split("\n\n" + "mlp on digits")
    assert len(blocks) == 2 and blocks[0].startswith("lenet on digits")
    for block in blocks:
        lines = block.splitlines()
        assert len(lines) <= 40, block
        assert all(len(line) <= 100 for line in lines)
    assert "answers (one look at 95%; equivalent within 5%):" in out
    assert "x2  ddp is 1.71x [1.32, 2.00] as fast as horovod" in out
    assert "more (--show NAME,NAME or --all): throughput, per-rank," in out
    # the details stay out of the summary
    for heading in ("per rank:", "noise:", "decided:", "knobs that differ"):
        assert heading not in out


def _answers(comp: dict[str, Any]) -> dict[tuple[int, str, str], dict[str, Any]]:
    return {(a["workers"], a["a"], a["b"]): a for a in comp["answers"]}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_no_pair_gets_two_readings_in_any_format(folder: Path) -> None:
    """Every committed reference: the answers (json), the decided table and the head to
    head table give each pair the same ratio, interval and word; csv carries the same
    numbers; the text summary says each answer's sentence."""
    loaded = summaries.load_summaries([folder])
    data = json.loads(formats.render(loaded, "json", frame.DEFAULT_TARGET) or "[]")
    as_csv = formats.render(loaded, "csv", frame.DEFAULT_TARGET)
    csv = pd.read_csv(io.StringIO(as_csv)) if as_csv else pd.DataFrame(columns=["group"])
    text = formats.render(loaded, "text", frame.DEFAULT_TARGET) or ""
    checked = 0
    for comp in data:
        answers = _answers(comp)
        for row in comp["sections"].get("decided", []):
            if row["b"] == "efficiency":
                continue
            a = answers[row["workers"], row["a"], row["b"]]
            assert row["ratio"] == pytest.approx(a["ratio"])
            if a["low"] is not None:
                assert row["interval"] == f"[{a['low']:.3f}, {a['high']:.3f}]"
            word = {"different": ("a faster", "b faster"), "undecided": ("undecided",)}
            assert row["decided"] in word.get(a["outcome"], ("equivalent within 5%",))
            assert a["sentence"].split("(")[0].strip() in text
            checked += 1
        for row in comp["sections"].get("head to head", []):
            if row["verdict"] in ("fastest", "too few runs"):
                continue
            fastest = {
                r["engine"]
                for r in comp["sections"]["head to head"]
                if r["verdict"] == "fastest" and r["workers"] == row["workers"]
            }
            (key,) = [
                k
                for k in answers
                if k[0] == row["workers"] and row["engine"] in k[1:] and fastest & set(k[1:])
            ]
            a = answers[key]
            ratio = a["ratio"] if key[1] == row["engine"] else 1 / a["ratio"]
            assert row["vs fastest"] == pytest.approx(ratio)
            words = {"different": ("slower", "faster"), "undecided": ("not settled",)}
            assert row["verdict"] in words.get(a["outcome"], ("equivalent within 5%",))
        numbers = csv[(csv["group"] == comp["group"]) & (csv["section"] == "decided")]
        for ratio in numbers[numbers["metric"] == "ratio"]["value"]:
            assert any(ratio == pytest.approx(a["ratio"]) for a in answers.values()) or any(
                ratio == pytest.approx(e["efficiency"])
                for e in comp["sections"]["throughput"]
                if e.get("efficiency") is not None
            )
    assert checked or not data or folder.name.startswith(("tune", "perf"))


def _golden(decide_at: float | None = None) -> list[LoadedRecord]:
    recs = records.load([GOLDEN]).records
    if decide_at is not None:
        for r in recs:
            r["labels"] = {**(r.get("labels") or {}), "decide_at": decide_at}
    return recs


def test_fixed_repeats_read_with_one_look_and_the_loops_launches_at_its_looks() -> None:
    """The same launches: as fixed repeats, ddp / horovod x2 reads 'ddp faster' at one 95%
    look; labelled as the loop's launches, at its looks (99.4% each) it is not settled,
    and the summary says which reading it gave."""
    fixed = compare.compare(_golden())[0]
    looped = compare.compare(_golden(0.05))[0]
    one = formats.render_text(fixed)
    looks = formats.render_text(looped)
    assert "answers (one look at 95%;" in one and "x2  ddp is 1.25x" in one
    assert "answers (at the looks of --decide-at;" in looks
    assert "x2  ddp vs horovod: not settled" in looks
    for comp, read in ((fixed, "one look"), (looped, "looks")):
        assert set(comp.sections["decided"]["read"]) == {read}


def test_an_open_pair_names_the_command_that_settles_it() -> None:
    comp = compare.compare(_golden())[0]
    assert comp.readings is not None
    (open_,) = [r for r in comp.readings.all if r.decision.outcome == "undecided"]
    sentence = summary.sentence(open_, comp)
    assert sentence.startswith("ddp vs horovod: not settled (ddp 1.25x")
    command = summary.settle_command(open_, comp)
    assert command in sentence
    argv = shlex.split(command)
    args = cli.parser("run").parse_args(argv[1:])
    assert args.decide_at == "5%" and args.models == ("mlp",) and args.workers == (1,)
    assert set(args.engines) == {"ddp", "horovod"}
    assert args.results == str(GOLDEN.relative_to(ROOT)) or args.results == str(GOLDEN)
    assert args.epochs == 2  # the comparison's own settings, where they are not the default


def test_all_shows_every_section_notes_and_knobs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_html_report import _rich

    monkeypatch.setenv("COLUMNS", "100")
    comps = compare.compare(_rich())
    for comp in comps:
        everything = formats.render_text(comp, None, set(summary.SECTIONS.values()))
        for name, section in comp.sections.items():
            if not section.empty:
                assert f"\n  {name}:\n" in everything, name
        assert comp.notes[0] in everything
    out = _text(capsys, str(GOLDEN), "--all")
    for heading in ("throughput:", "per rank:", "accuracy:", "head to head:", "decided:", "noise:"):
        assert heading in out
    assert "timeout: paddle np=2" in out  # the notes
    only = _text(capsys, str(GOLDEN), "--show", "noise")
    assert "noise:" in only and "decided:" not in only and "answers (" in only


def test_a_section_that_does_not_exist_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", str(GOLDEN), "--show", "noise,verdicts"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --show: no section 'verdicts'; sections are throughput,")


def test_the_readme_quotes_the_reference_summary_as_compare_prints_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = _text(capsys, str(REFERENCE / "cpu-2core-digits"))
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## What you get")[1].split("```\n")[1]
    quoted = [line for line in block.splitlines() if line.strip() and not line.endswith("...")]
    assert len(quoted) >= 10
    assert [line for line in quoted if line not in out.splitlines()] == []
