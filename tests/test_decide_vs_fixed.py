"""scripts/decide_vs_fixed.py: the pairs each run settled, read back from the committed
comparison (results/reference/decide-vs-fixed-2026-12-03) and checked against scipy's
Welch interval on the records' own throughputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.conftest import ROOT, script

EXPERIMENT = ROOT / "results" / "reference" / "decide-vs-fixed-2026-12-03"


def _logs(run: str, model: str, engine: str, workers: int) -> np.ndarray:  # run: passN/what
    out = []
    for line in (EXPERIMENT / run / "runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        same = (r["status"], r["spec"]["model"], r["engine"], r["world_size"])
        if same == ("ok", model, engine, workers) and r["spec"]["grad_sync"]:
            out.append(math.log(r["throughput"]))
    return np.array(out)


@pytest.mark.parametrize("run", ["pass1/decide", "pass1/fixed", "pass2/fixed", "pass2/decide"])
def test_each_head_to_heads_fixed_n_interval_is_welchs_on_its_records(
    monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")  # scikit-learn's dependency: always here
    table = script("decide_vs_fixed", monkeypatch).settled(EXPERIMENT / run)
    heads = table[table["what"] == "head to head"]
    assert len(heads) == 12
    for _, row in heads.iterrows():
        pair, workers = row["pair"].rsplit(" x", 1)
        a, b = (_logs(run, row["model"], e, int(workers)) for e in pair.split(" / "))
        assert row["launches"] == f"{a.size} + {b.size}"
        ci = scipy_stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
        low, high = math.exp(ci.low), math.exp(ci.high)
        assert row["ratio [fixed-n 95%]"].endswith(f"[{low:.3f}, {high:.3f}]")
        expected = (
            "different" if high < 1 or low > 1 else "equivalent" if low >= 0.95 and high <= 1.05
            else "undecided"
        )  # fmt: skip
        assert row["fixed-n 95%"] == expected
