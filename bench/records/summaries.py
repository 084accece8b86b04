"""Summaries of records for reading many of them fast, cached beside each results file.

A summary is a record without its per-step arrays (most of its bytes, which no
table needs whole) plus the step-time quantiles the tables show. The cache
(.NAME.summaries/ beside NAME.jsonl, bench/records/cache.py) is columnar, grows with
appends by the appended lines alone, and is safe to read and grow from two processes
at once; the results file stays the source of truth, parsed again whenever in doubt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np

from bench.records import packed
from bench.records.cache import ColumnCache
from bench.records.store import Follower, Loaded, Problem, files_under, protocol_version
from bench.records.types import LoadedRecord

# Per-step and per-window arrays: most of a record's bytes, and no table needs them
# whole. A summary keeps everything else and the quantiles the tables show.
HEAVY_FIELDS = ("step_times_s", "window_times_s", "window_throughput", "step_losses", "launcher")
EPOCH_FIELDS = ("epoch", "train_time_s", "test_accuracy", "test_loss", "train_loss")
CACHE_VERSION = 5  # 4: window statistics kept (window_stats); 5: columnar


def summarise(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record without its per-step arrays (and launcher argv), plus the step-time
    quantiles the tables use; epochs keep their times, losses and accuracies."""
    out = {k: v for k, v in record.items() if k not in HEAVY_FIELDS}
    if isinstance(record.get("epochs"), list):
        out["epochs"] = [
            {k: e[k] for k in EPOCH_FIELDS if k in e} if isinstance(e, dict) else e
            for e in record["epochs"]
        ]
    quantiles = step_quantiles(record)
    if quantiles is not None:
        out["step_time_quantiles"] = quantiles
    windows = window_stats(record)
    if windows is not None:
        out["window_stats"] = windows
    losses = loss_points(record)
    if losses is not None:
        out["step_losses"] = losses
    out["_summary"] = True
    return out


def loss_points(record: Mapping[str, Any]) -> list[float | None] | None:
    """The loss at the first, middle and last step (what compare's loss-trajectory column
    shows), null where not finite; None without losses. A summary's are its own."""
    if record.get("_summary"):
        return record.get("step_losses")
    losses = packed.series(record, "step_losses")
    if losses is None or losses.ndim != 1 or not losses.size:
        return None
    n = len(losses)
    return [_loss(losses[i]) for i in (0, n // 2, n - 1)]


def _loss(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def step_quantiles(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """p50 and p95 of every rank's timed steps together, and their number; None without
    steps. Packed or lists alike (bench/records/packed.py)."""
    steps = packed.series(record, "step_times_s")
    if steps is None or not steps.size:
        return None
    ordered = np.sort(steps.ravel())
    ordered = ordered[~np.isnan(ordered)]
    if not ordered.size:
        return None
    return {
        "p50": _quantile(ordered, 0.50),
        "p95": _quantile(ordered, 0.95),
        "n": int(ordered.size),
    }


def window_stats(record: Mapping[str, Any]) -> dict[str, float] | None:
    """The launch's windows as the noise table needs them: their number, the mean and
    variance (ddof 1) of their log throughputs, and a window's median seconds. None
    without two good windows (older records, failed runs, damaged arrays)."""
    tput_array = packed.window_throughput(record)
    steps_array = packed.series(record, "window_steps")
    batch = record.get("global_batch")
    if tput_array is None or steps_array is None or tput_array.shape != steps_array.shape:
        return None
    if tput_array.ndim != 1:
        return None
    # the windows with a finite, positive throughput and step count, picked column-wise
    # (a long run has hundreds); the figures below are summed in order as they always were
    with np.errstate(invalid="ignore"):
        good = (np.isfinite(tput_array) & (tput_array > 0)) & (
            np.isfinite(steps_array) & (steps_array > 0)
        )
    pairs = list(zip(tput_array[good].tolist(), steps_array[good].tolist(), strict=True))
    if len(pairs) < 2 or not isinstance(batch, int | float) or not _positive(batch):
        return None
    logs = [math.log(t) for t, _ in pairs]
    mean = sum(logs) / len(logs)
    seconds = sorted(k * float(batch) / t for t, k in pairs)
    return {
        "n": len(logs),
        "log_mean": mean,
        "log_var": sum((x - mean) ** 2 for x in logs) / (len(logs) - 1),
        "window_s": _quantile(seconds, 0.5),
    }


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _quantile(ordered: Any, q: float) -> float:
    """numpy's default (linear) quantile of sorted values, written out: the figures
    summaries have always held, to the last digit."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo]) + (float(ordered[hi]) - float(ordered[lo])) * (pos - lo)


# The summaries cache (.NAME.summaries/): bump CACHE_VERSION when a summary changes.
SUMMARIES = ColumnCache(
    "summaries", CACHE_VERSION, {"summary": "json"}, lambda r: {"summary": summarise(r)}
)


def _summaries_of(path: Path) -> tuple[list[LoadedRecord], list[Problem]]:
    """Summaries of one JSON Lines file, from its cache (bench/records/cache.py)."""
    rows, problems = SUMMARIES.read(path)
    recs: list[LoadedRecord] = []
    for number, summary in zip(rows["line"].tolist(), rows["summary"].tolist(), strict=True):
        rec = cast(LoadedRecord, dict(summary))  # one text decodes once: a dict per record
        rec["_source"] = f"{path}:{number}"
        recs.append(rec)
    return recs, problems


def _cell_of(record: LoadedRecord) -> dict[str, Any]:
    labels = record.get("labels") or {}
    cell = labels.get("cell") if isinstance(labels, dict) else None
    return {"cell": cell, "status": record.get("status"), "protocol": protocol_version(record)}


# A sweep's resume needs three values per record, not a summary: their own small cache.
CELLS = ColumnCache("cells", 2, {"cell": "str", "status": "str", "protocol": "int"}, _cell_of)


def cells(path: Path) -> list[tuple[str | None, str, int]]:
    """(labels.cell, status, protocol version) of every good record of one results file."""
    rows, _ = CELLS.read(path)
    return [
        (cell, status, int(protocol))
        for cell, status, protocol in zip(
            rows["cell"], rows["status"], rows["protocol"], strict=True
        )
    ]


def follow(path: Path) -> Follower:
    """A Follower of `path` from its end, placed by the cell index when that is current."""
    return Follower(path, CELLS.position(path) if path.exists() else None)


def load_summaries(paths: Iterable[str | Path]) -> Loaded:
    """Like `load`, with every record summarised (`summarise`) and cached per file.

    For reports that need no per-step arrays: reading 10,000 records is reading their
    summaries, once the cache beside each file exists.
    """
    files, problems, skipped = files_under(paths)
    recs: list[LoadedRecord] = []
    for path in files:
        try:
            got, bad = _summaries_of(path)
        except OSError as exc:
            problems.append(Problem(str(path), 0, f"cannot read: {exc.strerror}"))
            continue
        recs.extend(got)
        problems.extend(bad)
    return Loaded(recs, problems, skipped)
