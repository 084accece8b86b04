"""The linear-cost benchmark (tests/benchmarks/compare_linear.py) runs and reports its
table: checked at tiny sizes for its shape, never for its speed (no timing asserts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "benchmarks" / "compare_linear.py"


def test_the_linear_cost_benchmark_prints_a_row_per_size_and_the_ratios() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "20,40"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    columns = header.split()
    assert columns[0] == "records" and "warm_ms_per_record" in columns
    assert "peak_KB_per_record" in columns
    table = [line.split() for line in rows[:2]]
    assert [int(float(r[0])) for r in table] == [20, 40]
    assert all(len(r) == len(columns) and all(float(v) > 0 for v in r) for r in table)
    ratios = rows[2:]
    assert [r.split(" at ")[0] for r in ratios] == [
        "cold_ms_per_record",
        "warm_ms_per_record",
        "peak_KB_per_record",
    ]
    assert all(float(r.rsplit(": ", 1)[1]) > 0 for r in ratios)
