"""Caches beside a results file, one entry per good line, kept in step with appends.

A cache (.NAME.SUFFIX.json beside NAME.jsonl) is keyed by the file's size and
modification time. When the file only grew since (appends, the only way records
are written), the cache is reused and just the new lines are parsed; anything
else rebuilds it from the file, which stays the source of truth. A damaged line
is kept as its problem, reported as it was when first read.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.records.store import Problem, parse_line
from bench.records.types import LoadedRecord

try:  # reads caches only: several times faster than json on 40 MB of summaries
    import orjson as _fastjson
except ImportError:  # pragma: no cover - a dependency; plain json reads the same file
    _fastjson = None  # type: ignore[assignment]

Entry = list[Any]  # [line number, what the cache keeps of that line's record]


class LineCache:
    """What `keep` takes from each good record of a file, cached beside it."""

    def __init__(self, suffix: str, version: int, keep: Callable[[LoadedRecord], Any]) -> None:
        self.suffix, self.version, self.keep = suffix, version, keep

    def path(self, path: Path) -> Path:
        return path.with_name(f".{path.name}.{self.suffix}.json")

    def read(self, path: Path) -> tuple[list[Entry], list[Problem]]:
        """Every good line's entry and every bad line's problem, from the cache where it can."""
        st = path.stat()
        cache = self._load(path)
        fresh = (
            cache and cache.get("size") == st.st_size and cache.get("mtime_ns") == st.st_mtime_ns
        )
        if not fresh:
            cache = self._update(path, st, cache)
            self._save(path, cache)
        assert cache is not None
        problems = [Problem(str(path), n, message) for n, message in cache["problems"]]
        return cache["entries"], problems

    def _update(
        self, path: Path, st: os.stat_result, cache: dict[str, Any] | None
    ) -> dict[str, Any]:
        entries: list[Entry] = []
        problems: list[Entry] = []
        start, lines = _resume_point(path, cache)
        if start and cache is not None:
            entries, problems = list(cache["entries"]), list(cache["problems"])
        with open(path, "rb") as fh:
            fh.seek(start)
            for raw in fh:
                lines += 1
                if not raw.strip():
                    continue
                parsed = parse_line(path, lines, raw, unpack=False)
                if isinstance(parsed, Problem):
                    problems.append([lines, parsed.message])
                else:
                    parsed.pop("_source", None)
                    entries.append([lines, self.keep(parsed)])
            size = fh.tell()
        return {
            "version": self.version,
            "size": size,
            "mtime_ns": st.st_mtime_ns if size == st.st_size else 0,
            "tail": _tail(path, size).hex(),
            "lines": lines,
            "entries": entries,
            "problems": problems,
        }

    def position(self, path: Path) -> tuple[int, int] | None:
        """(bytes, lines) of the file the cache covers, when it covers the whole file now."""
        cache = self._load(path)
        st = path.stat()
        if cache and cache.get("size") == st.st_size and cache.get("mtime_ns") == st.st_mtime_ns:
            return int(cache["size"]), int(cache["lines"])
        return None

    def _load(self, path: Path) -> dict[str, Any] | None:
        try:
            with open(self.path(path), "rb") as fh:
                raw = fh.read()
            cache = _fastjson.loads(raw) if _fastjson is not None else json.loads(raw)
        except (OSError, ValueError):
            return None
        if not isinstance(cache, dict) or cache.get("version") != self.version:
            return None
        return cache

    def _save(self, path: Path, cache: dict[str, Any]) -> None:
        """Write atomically; an unwritable folder just goes uncached."""
        target = self.path(path)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            # written by json (orjson would turn a NaN into null; json refuses it instead)
            tmp.write_text(json.dumps(cache, allow_nan=False, separators=(",", ":")))
            os.replace(tmp, target)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                tmp.unlink()


def _resume_point(path: Path, cache: dict[str, Any] | None) -> tuple[int, int]:
    """(byte offset, lines before it) to parse from: where the cache stopped when the file
    only grew since (its last bytes still there, ending a line), else the start."""
    try:
        size = cache.get("size") if cache else None
        if cache and isinstance(size, int) and 0 < size <= path.stat().st_size:
            tail = bytes.fromhex(str(cache.get("tail", "")))
            with open(path, "rb") as fh:
                fh.seek(size - len(tail))
                if fh.read(len(tail)) == tail and tail.endswith(b"\n"):
                    return size, int(cache["lines"])
    except (ValueError, KeyError, TypeError, OSError):  # a damaged cache: read the file
        pass
    return 0, 0


def _tail(path: Path, size: int) -> bytes:
    if not size:
        return b""
    with open(path, "rb") as fh:
        fh.seek(max(size - 64, 0))
        return fh.read(size - max(size - 64, 0))
