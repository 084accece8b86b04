"""Summaries of records for reading many of them fast, cached beside each results file.

A summary is a record without its per-step arrays (most of its bytes, which no
table needs whole) plus the step-time quantiles the tables show. The cache
(.NAME.summaries.json beside NAME.jsonl) is keyed by the file's size and
modification time and grows with appends; the results file stays the source of
truth and the cache is rebuilt from it whenever in doubt.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.records.store import Loaded, Problem, files_under, parse_line
from bench.records.types import LoadedRecord

try:  # reads the summaries cache only: several times faster than json on 40 MB of them
    import orjson as _fastjson
except ImportError:  # pragma: no cover - a dependency; plain json reads the same file
    _fastjson = None  # type: ignore[assignment]

# Per-step and per-window arrays: most of a record's bytes, and no table needs them
# whole. A summary keeps everything else and the quantiles the tables show.
HEAVY_FIELDS = ("step_times_s", "window_times_s", "window_throughput", "step_losses", "launcher")
EPOCH_FIELDS = ("epoch", "train_time_s", "test_accuracy", "test_loss", "train_loss")
CACHE_VERSION = 2


def summarise(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record without its per-step arrays (and launcher argv), plus the step-time
    quantiles the tables use; epochs keep their times, losses and accuracies."""
    out = {k: v for k, v in record.items() if k not in HEAVY_FIELDS}
    if isinstance(record.get("epochs"), list):
        out["epochs"] = [
            {k: e[k] for k in EPOCH_FIELDS if k in e} if isinstance(e, dict) else e
            for e in record["epochs"]
        ]
    steps = [t for rank in record.get("step_times_s") or [] for t in rank]
    if steps:
        ordered = sorted(float(t) for t in steps)
        out["step_time_quantiles"] = {
            "p50": _quantile(ordered, 0.50),
            "p95": _quantile(ordered, 0.95),
            "n": len(ordered),
        }
    losses = record.get("step_losses")
    if isinstance(losses, list) and losses:
        # first, middle and last step: what compare's loss-trajectory column shows
        n = len(losses)
        out["step_losses"] = [losses[0], losses[n // 2], losses[n - 1]]
    out["_summary"] = True
    return out


def _quantile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) quantile of sorted values, without importing numpy here."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _cache_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.summaries.json")


def _read_cache(path: Path) -> dict[str, Any] | None:
    try:
        with open(_cache_path(path), "rb") as fh:
            raw = fh.read()
        cache = _fastjson.loads(raw) if _fastjson is not None else json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(cache, dict) or cache.get("version") != CACHE_VERSION:
        return None
    return cache


def _write_cache(path: Path, cache: dict[str, Any]) -> None:
    """Write the cache beside the file atomically; an unwritable folder just goes uncached."""
    target = _cache_path(path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        # written by json (orjson would turn a NaN into null; json refuses it instead)
        tmp.write_text(json.dumps(cache, allow_nan=False, separators=(",", ":")))
        os.replace(tmp, target)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink()


def _summaries_of(path: Path) -> tuple[list[LoadedRecord], list[Problem]]:
    """Summaries of one JSON Lines file, from its cache when the file is unchanged.

    The cache (.NAME.summaries.json beside the file) is keyed by the file's size and
    modification time; a file that only grew since (appends) is parsed from where the
    cache stopped, anything else is parsed again. The file stays the source of truth:
    the cache is rebuilt from it whenever in doubt, and a damaged line is reported
    from the cache as it was when first read.
    """
    st = path.stat()
    cache = _read_cache(path)
    entries: list[list[Any]] = []
    problems: list[list[Any]] = []
    start, first_line = 0, 1
    try:
        if cache and cache.get("size") == st.st_size and cache.get("mtime_ns") == st.st_mtime_ns:
            return _from_cache(path, cache)
        if cache and isinstance(cache.get("size"), int) and 0 < cache["size"] < st.st_size:
            # grown since: reuse the cache if its last bytes are still there, ending a line
            tail = bytes.fromhex(str(cache.get("tail", "")))
            with open(path, "rb") as fh:
                fh.seek(cache["size"] - len(tail))
                same = fh.read(len(tail)) == tail
            if same and tail.endswith(b"\n"):
                entries, problems = list(cache["entries"]), list(cache["problems"])
                start, first_line = cache["size"], int(cache["lines"]) + 1
    except (ValueError, KeyError, TypeError, IndexError):  # a damaged cache: read the file
        entries, problems, start, first_line = [], [], 0, 1
    number = first_line - 1
    with open(path, "rb") as fh:
        fh.seek(start)
        for number, raw in enumerate(fh, start=first_line):
            if not raw.strip():
                continue
            parsed = parse_line(path, number, raw)
            if isinstance(parsed, Problem):
                problems.append([number, parsed.message])
            else:
                parsed.pop("_source", None)
                entries.append([number, summarise(parsed)])
        size = fh.tell()
    tail = b""
    if size:
        with open(path, "rb") as fh:
            fh.seek(max(size - 64, 0))
            tail = fh.read(size - max(size - 64, 0))
    cache = {
        "version": CACHE_VERSION,
        "size": size,
        "mtime_ns": st.st_mtime_ns if size == st.st_size else 0,
        "tail": tail.hex(),
        "lines": number,
        "entries": entries,
        "problems": problems,
    }
    _write_cache(path, cache)
    return _from_cache(path, cache)


def _from_cache(path: Path, cache: dict[str, Any]) -> tuple[list[LoadedRecord], list[Problem]]:
    recs = []
    for number, summary in cache["entries"]:
        summary["_source"] = f"{path}:{number}"
        recs.append(summary)
    return recs, [Problem(str(path), number, message) for number, message in cache["problems"]]


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
