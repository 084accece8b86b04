"""scripts/decide_vs_fixed.py: the pairs each run settled, read back from the committed
comparison (results/reference/decide-vs-fixed-2026-12-03) and checked against scipy's
Welch interval on the records' own throughputs."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from types import ModuleType

import numpy as np
import pytest

from tests.conftest import ROOT

EXPERIMENT = ROOT / "results" / "reference" / "decide-vs-fixed-2026-12-03" / "pass1"


def _script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    path = ROOT / "scripts" / "decide_vs_fixed.py"
    spec = importlib.util.spec_from_file_location("decide_vs_fixed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _logs(run: str, model: str, engine: str, workers: int) -> np.ndarray:
    out = []
    for line in (EXPERIMENT / run / "runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        same = (r["status"], r["spec"]["model"], r["engine"], r["world_size"])
        if same == ("ok", model, engine, workers) and r["spec"]["grad_sync"]:
            out.append(math.log(r["throughput"]))
    return np.array(out)


@pytest.mark.parametrize("run", ["decide", "fixed"])
def test_each_head_to_heads_fixed_n_interval_is_welchs_on_its_records(
    monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")  # scikit-learn's dependency: always here
    table = _script(monkeypatch).settled(EXPERIMENT / run)
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
