"""scripts/levers.py table: each lever's launch spread, read back from the committed
A/A lever experiment (results/reference/levers-2026-12-03) and checked against the
records' own throughputs, parsed here without the suite's loaders."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tests.conftest import ROOT, script

EXPERIMENT = ROOT / "results" / "reference" / "levers-2026-12-03"


def _logs(lever: str, engine: str, workers: int) -> np.ndarray:
    """The cell's ok, synced launches' log throughputs, in record order."""
    out = []
    for line in (EXPERIMENT / lever / "runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        if (r["status"], r["engine"], r["world_size"]) != ("ok", engine, workers):
            continue
        if r["spec"]["grad_sync"]:
            out.append(math.log(r["throughput"]))
    return np.array(out)


def test_the_table_reads_each_levers_spread_from_its_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    levers = script("levers", monkeypatch)
    text = levers.table(EXPERIMENT)
    rows = re.findall(
        r"^\| (\w+) \| (\d) \| ([\w -]+?) \| (\d+) \| ([\d.]+)% \[([\d.]+)%, ([\d.]+)%\]",
        text,
        re.MULTILINE,
    )
    cells = {(e, int(w), lever) for e, w, lever, *_ in rows}
    for engine in ("ddp", "horovod", "paddle"):
        for workers in (1, 2):
            for lever in (*levers.LEVERS, "first discarded"):
                assert (engine, workers, lever) in cells, (engine, workers, lever)
    for engine, w, lever, n, sd, lo, hi in rows:
        logs = _logs("baseline" if lever == "first discarded" else lever, engine, int(w))
        if lever == "first discarded":
            logs = logs[1:]
        assert int(n) == logs.size >= 10
        assert float(sd) == pytest.approx(100 * logs.std(ddof=1), abs=0.051)
        assert float(lo) <= float(sd) <= float(hi)
    # launches taking turns: one row per engine pair and worker count, from the repeats
    # both engines ran
    turns = re.findall(r"^\| (\w+) / (\w+) \| (\d) \| (\d+) \|", text, re.MULTILINE)
    assert len(turns) == 6
    for a, b, w, n in turns:
        assert int(n) == min(_logs("baseline", a, int(w)).size, _logs("baseline", b, int(w)).size)
