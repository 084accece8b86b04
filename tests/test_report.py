"""`bench compare` on committed golden records (no training)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, cast

import pandas as pd
import pytest

from bench import cli, records
from bench.records import summaries
from bench.records.types import LoadedRecord
from bench.render import formats
from bench.tables import compare, derived, frame
from tests.conftest import run_bench

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"
REFERENCE = Path(__file__).parent.parent / "results" / "reference" / "cpu-2core-digits"


def _comparison() -> compare.Comparison:
    loaded = records.load([GOLDEN])
    comps = compare.compare(loaded.records)
    assert len(comps) == 1  # seeds differ, the spec does not; no-sync twins are not a table
    return comps[0]


def _section(name: str) -> pd.DataFrame:
    return _comparison().sections[name].set_index(["engine", "workers"])


def test_throughput_efficiency_and_comm_share() -> None:
    t = _section("throughput")
    assert t.loc[("ddp", 1), "runs"] == 3
    assert t.loc[("ddp", 1), "samples/s"] == 100
    assert t.loc[("ddp", 2), "samples/s"] == 150
    assert t.loc[("ddp", 2), "efficiency"] == pytest.approx(0.75)  # 150 / (2 x 100)
    assert t.loc[("horovod", 2), "efficiency"] == pytest.approx(0.75)  # 120 / (2 x 80)
    # 140, 150, 160: three runs get the t-interval on log throughput (t = 4.30 at 2 df),
    # not the min-max a bootstrap of the median gives
    assert t.loc[("ddp", 2), "95% CI"] == "[127, 177] n=3"
    # compute-only twin runs at 200 samples/s: 1 - 150/200 of the step is exposed communication
    assert t.loc[("ddp", 2), "comm %"].startswith("25% [")
    assert t.loc[("horovod", 2), "comm %"] == "-"  # no twin recorded
    assert t.loc[("paddle", 2), "runs"] == 0 and t.loc[("paddle", 2), "failed"] == 1


def test_per_rank_spread_and_step_percentiles() -> None:
    r = _section("per rank")
    assert r.loc[("ddp", 2), "rank min/s"] == pytest.approx(150 / 2 * 0.9)
    assert r.loc[("ddp", 2), "rank max/s"] == pytest.approx(150 / 2 * 1.1)
    assert r.loc[("ddp", 2), "step p50 ms"] == pytest.approx(20.0)
    assert r.loc[("ddp", 2), "step p95 ms"] == pytest.approx(30.0)
    assert r.loc[("ddp", 2), "peak RSS MB"] == 400


def test_accuracy_time_to_target_and_parity() -> None:
    a = _section("accuracy")
    assert a.loc[("ddp", 2), "accuracy"] == pytest.approx(0.96)
    assert a.loc[("ddp", 2), "time to 95% s"] == pytest.approx(2.0)
    assert a.loc[("horovod", 2), "reached"] == "0/3"  # 90% never reaches the 95% target
    assert a.loc[("horovod", 2), "parity vs others"].endswith("FLAG")
    assert a.loc[("horovod", 1), "parity vs others"].endswith("ok")


def test_head_to_head_significance() -> None:
    h = _comparison().sections["head to head"].set_index(["workers", "engine"])
    assert h.loc[(2, "ddp"), "verdict"] == "fastest"
    assert h.loc[(2, "horovod"), "vs fastest"] == pytest.approx(0.8)
    assert h.loc[(2, "horovod"), "verdict"] == "slower"
    # the pair's one reading: the decided table says the same of the same pair
    d = _comparison().sections["decided"].set_index(["workers", "a", "b"])
    assert d.loc[(2, "ddp", "horovod"), "decided"] == "a faster"


def test_notes_name_failures() -> None:
    notes = "\n".join(_comparison().notes)
    assert "timeout: paddle np=2" in notes and "golden.jsonl:16" in notes


def test_fingerprint_mismatch_is_flagged() -> None:
    loaded = records.load([GOLDEN]).records
    loaded[2]["fingerprints"]["init_weights"] = "different"  # horovod np=1, seed 0
    notes = "\n".join(compare.compare(loaded)[0].notes)
    assert "WARNING: initial-weight fingerprints differ between engines" in notes


def test_cli_reports_bad_lines_and_still_compares() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "compare", str(GOLDEN)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipped: " in proc.stderr and "golden.jsonl:17: not valid JSON" in proc.stderr
    assert "mlp on digits" in proc.stdout and "0.75" in proc.stdout
    assert "16 records read, 1 skipped" in proc.stderr


def test_cli_json_and_sources() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "compare", str(GOLDEN), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = json.loads(proc.stdout)[0]["sections"]["throughput"]
    assert {(r["engine"], r["workers"]) for r in rows} == {
        ("ddp", 1),
        ("ddp", 2),
        ("horovod", 1),
        ("horovod", 2),
        ("paddle", 2),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "compare", str(GOLDEN), "--sources"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"file 1: {GOLDEN}" in proc.stdout or "file 1: tests/data/golden.jsonl" in proc.stdout
    assert "record behind each run (file, line):" in proc.stdout


def test_cli_with_nothing_readable(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "compare", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "no readable records" in proc.stderr


def test_export_is_read_by_pytest_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "export", str(GOLDEN), "--pytest-benchmark", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    names = {b["name"] for b in data["benchmarks"]}
    assert names == {
        "train_step[mlp-digits-ddp-np1]",
        "train_step[mlp-digits-ddp-np2]",
        "train_step[mlp-digits-horovod-np1]",
        "train_step[mlp-digits-horovod-np2]",
    }
    ddp2 = next(b for b in data["benchmarks"] if b["name"] == "train_step[mlp-digits-ddp-np2]")
    assert ddp2["stats"]["rounds"] == 9 and ddp2["stats"]["median"] == pytest.approx(0.02)
    assert ddp2["extra_info"]["engine"] == "ddp" and ddp2["extra_info"]["records"]
    # pytest-benchmark's own compare command reads it
    cmp_ = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cmp_.returncode == 0, cmp_.stderr
    assert "train_step[mlp-digits-ddp-np2]" in cmp_.stdout
    # ... and draws its histogram with the dev extras' pygal, out of the box
    hist = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(out), "--histogram", "h"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert hist.returncode == 0, hist.stderr
    svgs = sorted(tmp_path.glob("h-*.svg"))
    # one group (and histogram) per worker count: a 2-worker step is never ranked
    # against 1-worker steps
    assert len(svgs) == 2 and all("<svg" in svg.read_text() for svg in svgs)
    assert "1_worker" in svgs[0].name and "2_workers" in svgs[1].name


def test_different_machines_and_versions_are_never_pooled() -> None:
    golden = records.load([GOLDEN]).records
    other_cpu = [cast(LoadedRecord, {**r, "env": {**r["env"], "cpu": "Other CPU"}}) for r in golden]
    other_lib = [
        cast(LoadedRecord, {**r, "env": {**r["env"], "libraries": {"torch": "9.9"}}})
        for r in golden
    ]
    comps = compare.compare(golden + other_cpu + other_lib)
    assert len(comps) == 3  # one per machine and library versions, each with its own medians
    assert sorted((c.machine, c.libraries) for c in comps) == [
        ("Golden CPU x2", "torch 2.13.0"),
        ("Golden CPU x2", "torch 9.9"),
        ("Other CPU x2", "torch 2.13.0"),
    ]
    for c in comps:
        t = c.sections["throughput"].set_index(["engine", "workers"])
        assert t.loc[("ddp", 1), "runs"] == 3  # not 6 or 9
        # the compute-only twin of the same machine gives comm %
        assert t.loc[("ddp", 2), "comm %"].startswith("25% [")
        assert f"| {c.machine} | {c.libraries} |" in formats.render_text(c)  # the summary
        full = formats.render_text(c, show={"throughput"})
        assert f"machine {c.machine} | {c.libraries}" in full


def test_reference_records_are_read_only_when_named(tmp_path: Path) -> None:
    golden = records.load([GOLDEN]).records
    for r in golden[:4]:
        records.append(tmp_path / "mine", {k: v for k, v in r.items() if k != "_source"})
    for r in golden:
        records.append(
            tmp_path / "reference" / "cpu", {k: v for k, v in r.items() if k != "_source"}
        )
    loaded = records.load([tmp_path])
    assert len(loaded.records) == 4
    assert loaded.skipped == [str(tmp_path / "reference")]
    proc = run_bench("compare", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert f"skipped: {tmp_path / 'reference'} (committed reference records" in proc.stderr
    assert "4 records read" in proc.stderr
    named = run_bench("compare", str(tmp_path / "reference"))
    assert named.returncode == 0 and "16 records read" in named.stderr
    assert "committed reference" not in named.stderr


def test_oversubscribed_runs_are_flagged_in_every_table() -> None:
    golden = records.load([GOLDEN]).records
    for r in golden:
        over = r["engine"] == "ddp" and r["world_size"] == 2
        r["oversubscribed"] = over
        r["cpu_budget"] = {
            "workers_on_host": r["world_size"],
            "threads_per_worker": 4 if over else 1,
            "usable_cpus": 2,
        }
    comp = compare.compare(golden)[0]
    cells = {n: df for n, df in comp.sections.items() if "engine" in df}  # not: a row a pair
    assert set(comp.sections) - set(cells) == {"decided"}
    for name, df in cells.items():
        marks = df.set_index(["engine", "workers"])["oversubscribed"]
        assert marks.loc[("ddp", 2)] == "YES", name
        assert marks.loc[("horovod", 2)] == "no", name
    assert any(
        n.startswith("WARNING: oversubscribed") and "ddp np=2: 2 workers x 4 threads > 2 CPUs" in n
        for n in comp.notes
    )
    # records from before the field existed are judged from the machine's CPU count
    old = records.load([GOLDEN]).records[0]
    assert derived.oversubscription(cast(LoadedRecord, {**old, "world_size": 4})) == (
        True,
        "4 workers x 1 threads > 2 CPUs (inferred)",
    )
    assert not derived.oversubscription(old)[0]


def test_contended_runs_are_flagged_in_every_timing_table() -> None:
    recs = records.load([GOLDEN]).records
    for r in recs:
        if r["engine"] == "horovod" and r["world_size"] == 2:
            r["contended"] = True
    comp = compare.compare(recs)[0]
    for name in ("throughput", "per rank", "head to head"):
        section = comp.sections[name].set_index(["engine", "workers"])
        assert section.loc[("horovod", 2), "contended"] == "3/3", name
        assert section.loc[("ddp", 2), "contended"] == "-", name
    (note,) = [n for n in comp.notes if "shared CPUs" in n]
    assert "3 of " in note and "3 for a reason the record does not keep" in note
    # the cause is the record's own: other processes, or the hypervisor's steal
    for r in recs:
        if r["engine"] == "horovod" and r["world_size"] == 2:
            c = {"other_cpu_cores": 0.0, "steal_fraction": 0.05}
            r["contention"] = cast(
                Any, [c, {**c, "other_cpu_cores": "lots"}]
            )  # wrong type: ignored
    (note,) = [n for n in compare.compare(recs)[0].notes if "shared CPUs" in n]
    assert "3 while the hypervisor withheld over 2%" in note and "other processes" not in note
    recs[0]["contended"], recs[0]["contention"] = True, cast(Any, [{"other_cpu_cores": 0.9}])
    (note,) = [n for n in compare.compare(recs)[0].notes if "shared CPUs" in n]
    assert "1 while other processes on this machine used the CPUs" in note


def test_json_and_csv_keep_numbers_as_numbers() -> None:
    """json and csv carry value, low, high and n as numbers, missing as null/empty,
    never '-' or a preformatted interval; csv is one table pandas reads back."""
    import io

    loaded = records.load([GOLDEN])
    data = json.loads(formats.render(loaded, "json", frame.DEFAULT_TARGET) or "")
    rows = {(r["engine"], r["workers"]): r for r in data[0]["sections"]["throughput"]}
    ddp2 = rows["ddp", 2]
    assert ddp2["samples/s"] == 150 and ddp2["samples/s n"] == 3
    assert ddp2["samples/s low"] == pytest.approx(127, abs=1)
    assert ddp2["samples/s high"] == pytest.approx(177, abs=1)
    assert ddp2["comm %"] == pytest.approx(0.25)  # a share, with its interval beside it
    assert ddp2["comm % low"] < 0.25 < ddp2["comm % high"]
    assert "95% CI" not in ddp2 and rows["ddp", 1]["comm %"] is None
    text = json.dumps(data)
    assert '"-"' not in text and "n=3" not in text
    csv = formats.render(loaded, "csv", frame.DEFAULT_TARGET) or ""
    table = pd.read_csv(io.StringIO(csv))
    assert list(table.columns[-5:]) == ["value", "low", "high", "n", "text"]
    sections = {
        "throughput",
        "per rank",
        "accuracy",
        "head to head",
        "decided",
        "noise",
    }
    assert set(table["section"]) == sections
    sps = table[(table["section"] == "throughput") & (table["metric"] == "samples/s")]
    one = sps[(sps["engine"] == "ddp") & (sps["workers"] == 2)].iloc[0]
    assert (one["value"], one["n"]) == (150, 3) and one["low"] < 150 < one["high"]
    assert table["value"].dtype == float and not (table["text"] == "-").any()
    # text keeps its formatting
    full = formats.render(loaded, "text", frame.DEFAULT_TARGET, show={"throughput"}) or ""
    assert "[127, 177] n=3" in full
    # json keeps every answer with its numbers
    answer = json.loads(formats.render(loaded, "json", frame.DEFAULT_TARGET) or "")[0]["answers"]
    x2 = next(a for a in answer if a["workers"] == 2)
    assert (x2["a"], x2["b"], x2["outcome"], x2["read"]) == (
        "ddp",
        "horovod",
        "different",
        "one look at 95%",
    )
    assert x2["low"] < x2["ratio"] < x2["high"] and x2["sentence"].startswith("ddp is 1.25x")


def _leaves(value: Any) -> list[Any]:
    """Every scalar in a JSON document."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_every_interval_of_the_reference_is_numbers_in_json_and_csv() -> None:
    """Over every committed reference record: no interval reaches json or csv as its
    display text ('[2.35, 4.09] n=3'); the start-up total carries value, low, high, n."""
    import io
    import re

    loaded = summaries.load_summaries([REFERENCE.parent])
    # a cell that is an interval's display text (prose that quotes one, as a verdict's
    # advice does, is a sentence, not a value)
    as_text = re.compile(r"^\[.*\] n=\d+$|^too few runs")
    data = json.loads(formats.render(loaded, "json", frame.DEFAULT_TARGET) or "")
    assert not [v for v in _leaves(data) if isinstance(v, str) and as_text.search(v)]
    starts = [r for comp in data for r in comp.get("sections", {}).get("start-up", [])]
    assert len(starts) > 30  # the reference sweeps, bench tune, the scaling-model check
    for row in starts:
        assert "95% CI" not in row and isinstance(row["total s n"], int)
        if row["total s n"] >= 2:
            assert row["total s low"] <= row["total s"] <= row["total s high"]
    csv = formats.render(loaded, "csv", frame.DEFAULT_TARGET) or ""
    table = pd.read_csv(io.StringIO(csv))
    assert not table["text"].dropna().str.contains(as_text).any()
    totals = table[(table["section"] == "start-up") & (table["metric"] == "total s")]
    assert len(totals) == len(starts) and totals[["value", "low", "high", "n"]].notna().all().all()


def test_a_phase_no_run_of_a_cell_had_is_a_dash_without_a_warning() -> None:
    """Runs started by hand have no launcher phase; their start-up cell shows '-' for it,
    and formatting the tables warns nothing (pandas deprecates a string into a float)."""
    recs = copy.deepcopy(records.load([GOLDEN]).records)
    for r in recs:
        phases = {"launcher": 0.5, "interpreter and imports": 1.0, "data": 0.1}
        if r["engine"] == "horovod":
            del phases["launcher"]  # started by hand: no launch instant to count from
        r["startup"] = {"total_s": sum(phases.values()), "phases_s": phases, "from": "launch"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shown = {
            name: compare.displayed(name, section)
            for comp in compare.compare(recs)
            for name, section in comp.sections.items()
        }
    startup = shown["start-up"].set_index(["engine", "workers"])
    assert startup.loc[("horovod", 1), "launcher"] == "-"
    assert startup.loc[("ddp", 1), "launcher"] == 0.5


def test_compare_on_the_reference_warns_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.main(["compare", str(REFERENCE), "--sources", "--price-per-hour", "1"]) == 0
        for fmt in ("markdown", "html"):
            assert (
                cli.main(["compare", str(REFERENCE), "--format", fmt, "--out", str(tmp_path)]) == 0
            )
    capsys.readouterr()
