"""Columnar caches beside a results file: one row per line, in parts kept in step with appends.

A cache (the folder .NAME.SUFFIX/ beside NAME.jsonl) holds Parquet parts, each one
covering a byte range [start, end) of the file, whole lines, and named for it. A part
keeps in its metadata the cache's version, the lines before and after it and the
file's last bytes before `end`. Reading chains the parts from byte 0, each one still
finding its last bytes in the file (a file rewritten since breaks the chain), parses
only what the chain does not cover, and writes that as one new part: appending a
folder of records costs those records, never the ones cached before.

Two processes at once: a part is written under a temporary name and renamed into
place, so nobody reads half of one, and two processes caching the same range write
the same rows under the same name. With more than MAX_PARTS parts, a reader merges
them into one; another that loses a part to the merge reads the chain again, and as
a last resort parses the file. The file stays the source of truth: whatever is in
doubt is parsed again. A damaged line is kept as its problem, reported as first read.

Columns are declared (`KINDS`): numbers, strings and flags as Arrow types, anything
else as JSON text decoded on read (only the columns a reader asks for).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.records.store import Problem, parse_line
from bench.records.types import LoadedRecord

MAX_PARTS = 8
_ARROW = {"float": pa.float64(), "int": pa.int64(), "str": pa.string(), "bool": pa.bool_()}
KINDS = (*_ARROW, "json")
_PART = re.compile(r"(\d{15})-(\d{15})\.parquet")
_TAIL = 64  # bytes of the file a part remembers before its end


class ColumnCache:
    """The columns `keep` takes from each good record of a file, cached beside it."""

    def __init__(
        self,
        suffix: str,
        version: int,
        columns: Mapping[str, str],
        keep: Callable[[LoadedRecord], Mapping[str, Any]],
    ) -> None:
        bad = {k: v for k, v in columns.items() if v not in KINDS or k in ("line", "problem")}
        if bad:
            raise ValueError(f"columns of unknown kind or reserved name: {bad}")
        self.suffix, self.version, self.columns, self.keep = suffix, version, columns, keep

    def folder(self, path: Path) -> Path:
        return path.with_name(f".{path.name}.{self.suffix}")

    def read(
        self, path: Path, columns: Iterable[str] | None = None
    ) -> tuple[pd.DataFrame, list[Problem]]:
        """One row per good line (`line`, its number, and `columns`, all by default) and
        every bad line's problem, from the cache where it covers the file."""
        wanted = list(self.columns if columns is None else columns)
        for _ in range(2):  # once more when a merge took a part away meanwhile
            with contextlib.suppress(FileNotFoundError, pa.ArrowInvalid, OSError):
                table = self._table(path, ["line", "problem", *wanted])
                return self._frame(path, table, wanted)
        rows, rest, _, _ = _parse(path, 0, 0, self)  # unreadable cache: the file alone
        table = pa.concat_tables([rows, *([rest] if rest is not None else [])])
        return self._frame(path, table.select(["line", "problem", *wanted]), wanted)

    def rows(self, recs: Iterable[LoadedRecord]) -> tuple[pd.DataFrame, list[Problem]]:
        """What `read` gives for records already in memory (nothing cached): the same
        columns, typed alike, whichever way the records came."""
        columns: dict[str, list[Any]] = {k: [] for k in ["line", "problem", *self.columns]}
        for number, r in enumerate(recs, start=1):
            row = self.keep(r)
            columns["line"].append(number)
            columns["problem"].append(None)
            for name, kind in self.columns.items():
                columns[name].append(_cell(row.get(name), kind))
        table = pa.Table.from_pydict(columns, schema=self.schema())
        return self._frame(Path(), table, list(self.columns))

    def position(self, path: Path) -> tuple[int, int] | None:
        """(bytes, lines) of the file the cache covers, when it covers the whole file now."""
        chain = _chain(self, path)
        size = path.stat().st_size
        if chain and chain[-1].end == size:
            return size, chain[-1].lines
        return None if size else (0, 0)

    def _table(self, path: Path, names: list[str]) -> pa.Table:
        chain = _chain(self, path)
        start, lines = (chain[-1].end, chain[-1].lines) if chain else (0, 0)
        rest = None
        if start < path.stat().st_size:
            new, rest, end, lines = _parse(path, start, lines, self)
            if end > start:
                chain.append(_write(self, path, new, start, end, lines))
        if len(chain) > MAX_PARTS:
            chain = [_merge(self, path, chain)]
        parts = [_read_part(p, self, names) for p in chain]
        if rest is not None:
            parts.append(rest.select(names))  # a last line not yet whole: read, not cached
        return pa.concat_tables(parts) if parts else self.schema().empty_table().select(names)

    def schema(self) -> pa.Schema:
        fields = [pa.field("line", pa.int64()), pa.field("problem", pa.string())]
        kinds = self.columns.items()
        return pa.schema(fields + [pa.field(k, _ARROW.get(v, pa.string())) for k, v in kinds])

    def _frame(
        self, path: Path, table: pa.Table, wanted: list[str]
    ) -> tuple[pd.DataFrame, list[Problem]]:
        bad = table.column("problem").is_valid()
        lines = table.column("line").to_pylist()
        problems = [
            Problem(str(path), n, str(m))
            for n, m, b in zip(
                lines, table.column("problem").to_pylist(), bad.to_pylist(), strict=True
            )
            if b
        ]
        table = table.filter(pc.invert(bad))
        data = {"line": table.column("line").to_numpy()}
        for name in wanted:
            data[name] = _column(table.column(name), self.columns[name])
        return pd.DataFrame(data), problems


def _column(column: pa.ChunkedArray, kind: str) -> Any:
    """One column as pandas reads it from a list of records: numbers as numpy (null:
    NaN), strings and flags with nulls as objects (None), JSON decoded."""
    if kind in ("float", "int") or (kind == "bool" and not column.null_count):
        return column.to_numpy()
    values = column.to_pylist()
    return _decoded(values) if kind == "json" else pd.Series(values, dtype=object)


def _decoded(texts: list[str | None]) -> pd.Series:
    """JSON text to values, each distinct text decoded once (NaN, which plain JSON lacks,
    is written by json and read back by it)."""
    seen: dict[str, Any] = {}
    out: list[Any] = []
    for text in texts:
        if text is None:
            out.append(None)
            continue
        if text not in seen:
            try:
                seen[text] = orjson.loads(text)
            except orjson.JSONDecodeError:
                seen[text] = json.loads(text)
        out.append(seen[text])
    return pd.Series(out, dtype=object)


class _Part:
    def __init__(self, file: Path, start: int, end: int, lines: int) -> None:
        self.file, self.start, self.end, self.lines = file, start, end, lines


def _chain(cache: ColumnCache, path: Path) -> list[_Part]:
    """The parts that cover the file from byte 0 without a gap, each still matching the
    file's bytes before its end; the longest part wherever two start at one offset."""
    folder = cache.folder(path)
    found: dict[int, list[_Part]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            m = _PART.fullmatch(name)
            part = _check(cache, path, folder / name, m) if m else None
            if part is not None:
                found.setdefault(part.start, []).append(part)
    chain, at = [], 0
    while at in found:
        part = max(found[at], key=lambda p: p.end)
        chain.append(part)
        at = part.end
    return chain


def _check(cache: ColumnCache, path: Path, file: Path, m: re.Match[str]) -> _Part | None:
    try:
        meta = pq.read_schema(file).metadata or {}
        info = json.loads(meta[b"bench"])
        if info["version"] != cache.version or info["columns"] != dict(cache.columns):
            return None
        start, end = int(m.group(1)), int(m.group(2))
        if _tail(path, end) != bytes.fromhex(info["tail"]):
            return None
        return _Part(file, start, end, int(info["lines"]))
    except (OSError, KeyError, ValueError, TypeError, pa.ArrowInvalid):
        return None  # a part of another version, half removed, or damaged: not used


def _tail(path: Path, end: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(max(end - _TAIL, 0))
        return fh.read(end - max(end - _TAIL, 0))


def _parse(
    path: Path, start: int, lines: int, cache: ColumnCache
) -> tuple[pa.Table, pa.Table | None, int, int]:
    """The rows of the whole lines from byte `start` (after `lines` lines), the row of a
    last line without its newline (a writer may be in the middle of it: read, never
    cached), the byte where the whole lines end and the lines by then."""
    columns: dict[str, list[Any]] = {k: [] for k in ["line", "problem", *cache.columns]}
    rest: dict[str, list[Any]] | None = None
    end = start
    with open(path, "rb") as fh:
        fh.seek(start)
        for raw in fh:
            if not raw.endswith(b"\n"):
                rest = {k: [] for k in columns}
                _add(rest, path, lines + 1, raw, cache)
                break
            lines += 1
            end += len(raw)
            _add(columns, path, lines, raw, cache)
    schema = cache.schema()
    tail = None if rest is None else pa.Table.from_pydict(rest, schema=schema)
    return pa.Table.from_pydict(columns, schema=schema), tail, end, lines


def _add(
    columns: dict[str, list[Any]], path: Path, number: int, raw: bytes, cache: ColumnCache
) -> None:
    """One line's row (a blank line has none)."""
    if not raw.strip():
        return
    parsed = parse_line(path, number, raw, unpack=False)
    row: Mapping[str, Any] = {}
    if isinstance(parsed, Problem):
        columns["problem"].append(parsed.message)
    else:
        parsed.pop("_source", None)
        columns["problem"].append(None)
        row = cache.keep(parsed)
    columns["line"].append(number)
    for name, kind in cache.columns.items():
        columns[name].append(_cell(row.get(name), kind))


def _cell(value: Any, kind: str) -> Any:
    """A value as its column holds it; what the column's type cannot hold is null."""
    if value is None:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "float":
        return float(value) if number else None
    if kind == "int":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "str":
        return value if isinstance(value, str) else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    return json.dumps(value, separators=(",", ":"), default=str)


def _write(
    cache: ColumnCache, path: Path, table: pa.Table, start: int, end: int, lines: int
) -> _Part:
    """One part, written whole under a temporary name, then renamed into place. An
    unwritable folder just goes uncached (the part is then read from memory)."""
    folder = cache.folder(path)
    file = folder / f"{start:015d}-{end:015d}.parquet"
    info = {"version": cache.version, "columns": dict(cache.columns), "lines": lines}
    info["tail"] = _tail(path, end).hex()
    table = table.replace_schema_metadata({"bench": json.dumps(info)})
    tmp = folder / f".{file.name}.{os.getpid()}.tmp"
    try:
        folder.mkdir(exist_ok=True)
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, file)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return _Memory(table, start, end, lines)
    return _Part(file, start, end, lines)


class _Memory(_Part):
    """A part that could not be written: read from memory."""

    def __init__(self, table: pa.Table, start: int, end: int, lines: int) -> None:
        super().__init__(Path(), start, end, lines)
        self.table = table


def _merge(cache: ColumnCache, path: Path, chain: list[_Part]) -> _Part:
    """The chain as one part; the parts it replaces are removed (a reader holding one
    of them reads the chain again)."""
    tables = [_read_part(p, cache) for p in chain]
    merged = _write(cache, path, pa.concat_tables(tables), 0, chain[-1].end, chain[-1].lines)
    for part in chain:
        if part.file != merged.file and not isinstance(part, _Memory):
            with contextlib.suppress(OSError):
                part.file.unlink()
    return merged


def _read_part(part: _Part, cache: ColumnCache, names: list[str] | None = None) -> pa.Table:
    if isinstance(part, _Memory):
        return part.table if names is None else part.table.select(names)
    return pq.read_table(part.file, columns=names, schema=cache.schema())
