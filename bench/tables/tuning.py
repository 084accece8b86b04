"""Best against best: each engine's default and tuned settings from `bench tune`'s fresh
repeats (never its trials), side by side with intervals."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from bench.measure import stats
from bench.records import LoadedRecord, Status


def _labels(r: LoadedRecord) -> dict[str, Any]:
    labels = r.get("labels")
    return labels if isinstance(labels, dict) else {}


def rows(recs: Iterable[LoadedRecord], tune_id: str | None = None) -> pd.DataFrame:
    """One row per tuning session, engine and worker count: default and tuned samples/s
    with their intervals, the ratio tuned / default with its interval, the tuned knobs."""
    tuned = [r for r in recs if _labels(r).get("tuning") in ("default", "tuned", "trial")]
    if tune_id is not None:
        tuned = [r for r in tuned if _labels(r).get("tune") == tune_id]
    groups: dict[tuple[str, str, int, str], dict[str, list[LoadedRecord]]] = {}
    for r in tuned:
        key = (
            str(_labels(r).get("tune")),
            str(r.get("engine")),
            int(r.get("world_size") or 0),
            str((r.get("spec") or {}).get("model")),
        )
        groups.setdefault(key, {}).setdefault(str(_labels(r)["tuning"]), []).append(r)
    out = []
    for (tune, engine, workers, model), by_role in sorted(groups.items()):
        ok = {role: [r for r in rs if r.get("status") == Status.OK] for role, rs in by_role.items()}
        d = [float(r.get("throughput") or "nan") for r in ok.get("default", [])]
        t = [float(r.get("throughput") or "nan") for r in ok.get("tuned", [])]
        if not d or not t:
            continue
        de, te, ratio = stats.estimate(d), stats.estimate(t), stats.ratio(t, d)
        out.append(
            {
                "tune": tune,
                "engine": engine,
                "workers": workers,
                "model": model,
                "default samples/s": round(de.value),
                "default 95% CI": de.interval(),
                "tuned samples/s": round(te.value),
                "tuned 95% CI": te.interval(),
                "tuned / default": round(ratio.value, 3),
                "ratio 95% CI": ratio.interval(".3f"),
                "tuned knobs": _labels(ok["tuned"][0]).get("knobs"),
                "default knobs": _labels(ok["default"][0]).get("knobs"),
                "trials": len(by_role.get("trial", [])),
            }
        )
    return pd.DataFrame(out)
