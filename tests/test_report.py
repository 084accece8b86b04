"""`bench compare` on committed golden records (no training)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import records, report

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


def _table() -> report.Table:
    loaded = records.load([GOLDEN])
    tables = report.compare(loaded.records)
    assert len(tables) == 1  # seeds differ, the spec does not: one table
    return tables[0]


def test_golden_table_numbers() -> None:
    t = _table().frame.set_index(["engine", "workers"])
    assert t.loc[("ddp", 1), "runs"] == 3
    assert t.loc[("ddp", 1), "samples/s"] == 100
    assert t.loc[("ddp", 2), "samples/s"] == 150
    assert t.loc[("ddp", 2), "efficiency"] == pytest.approx(0.75)  # 150 / (2 x 100)
    assert t.loc[("horovod", 2), "efficiency"] == pytest.approx(0.75)  # 120 / (2 x 80)
    assert t.loc[("horovod", 2), "95% CI"] == "-"  # one run: no interval is claimed
    assert t.loc[("ddp", 2), "accuracy"] == pytest.approx(0.96)
    assert t.loc[("paddle", 2), "runs"] == 0 and t.loc[("paddle", 2), "failed"] == 1


def test_notes_name_failures_and_fingerprint_disagreement() -> None:
    notes = "\n".join(_table().notes)
    assert "timeout: paddle np=2" in notes and "golden.jsonl:9" in notes


def test_fingerprint_mismatch_is_flagged() -> None:
    loaded = records.load([GOLDEN]).records
    loaded[6]["fingerprints"]["init_weights"] = "different"  # horovod np=1, seed 0
    notes = "\n".join(report.compare(loaded)[0].notes)
    assert "WARNING: initial-weight fingerprints differ between engines" in notes


def test_cli_reports_bad_lines_and_still_compares() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "compare", str(GOLDEN)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipped: " in proc.stderr and "golden.jsonl:10: not valid JSON" in proc.stderr
    assert "mlp on digits" in proc.stdout and "0.75" in proc.stdout
    assert "10 records read" not in proc.stderr and "9 records read, 1 skipped" in proc.stderr


def test_cli_json_and_sources() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "compare", str(GOLDEN), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = json.loads(proc.stdout)[0]["rows"]
    assert {(r["engine"], r["workers"]) for r in rows} == {
        ("ddp", 1),
        ("ddp", 2),
        ("horovod", 1),
        ("horovod", 2),
        ("paddle", 2),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "compare", str(GOLDEN), "--sources"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "golden.jsonl:1" in proc.stdout


def test_cli_with_nothing_readable(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "compare", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "no readable records" in proc.stderr
