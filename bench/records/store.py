"""Run records: one JSON object per run, appended to JSON Lines files.

Appends are one `write()` of a whole line to a file opened with O_APPEND under an
exclusive lock, then fsync: a crash can lose at most the line being written,
never an earlier one, and two writers never interleave. Reading keeps every good
record and reports each bad line with its file and line number.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import math
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import orjson

from bench.core import allowlist, machine
from bench.core.errors import RecordsError
from bench.measure.window import PROTOCOL_VERSION
from bench.records import compact, packed, schema
from bench.records.migrations import migrate
from bench.records.types import (
    LABEL_TYPES,
    SCHEMA_VERSION,
    Env,
    Launcher,
    Link,
    LoadedRecord,
    RunRecord,
    Spec,
    Status,
)

DEFAULT_FILE = "runs.jsonl"
COLLECTIVES_FILE = "collectives.jsonl"  # beside it: the allreduce benchmark's records


def timestamp(seconds: float | None = None) -> str:
    """UTC ISO-8601 time with milliseconds (now, or `seconds` since the epoch)."""
    when = datetime.datetime.fromtimestamp(
        time.time() if seconds is None else seconds, datetime.UTC
    )
    return when.isoformat(timespec="milliseconds")


def typed_labels(labels: dict[str, str]) -> dict[str, Any]:
    """Command-line labels with the known numeric ones (types.LABEL_TYPES) as numbers.

    Raises ValueError naming the label when one of those is not a number.
    """
    out: dict[str, Any] = dict(labels)
    for key, hint in LABEL_TYPES.items():
        kind = int if hint is not float else float
        if key in out and isinstance(out[key], str):
            try:
                out[key] = kind(out[key])
            except ValueError:
                raise ValueError(
                    f"label {key} must be {'an integer' if kind is int else 'a number'}, "
                    f"got {out[key]!r}"
                ) from None
    return out


@dataclasses.dataclass(frozen=True)
class Problem:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclasses.dataclass
class Loaded:
    records: list[LoadedRecord]
    problems: list[Problem]
    # committed reference folders passed over because they were not named (see files_under)
    skipped: list[str] = dataclasses.field(default_factory=list)


def new_record(
    spec: Spec | dict[str, Any],
    engine: str,
    world_size: int,
    labels: dict[str, Any],
    launcher: dict[str, Any],
    status: Status = Status.OK,
    error: str | None = None,
    link: Mapping[str, Any] | None = None,
) -> RunRecord:
    """The fields every record has, whoever writes it (a runner or the sweep); `link`
    for a run over an emulated link (bench/launch/netns.py `link_record`)."""
    record: RunRecord = {
        "schema_version": SCHEMA_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "run_id": uuid.uuid4().hex,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "status": status,
        "error": error,
        "engine": engine,
        "spec": cast(Spec, spec),
        "world_size": world_size,
        "labels": labels,
        # argv as the launcher saw it, minus environment entries off the allow-list
        "launcher": cast(Launcher, allowlist.scrub_launcher(launcher)),
        "env": cast(Env, machine.environment()),
    }
    if link is not None:
        record["link"] = cast(Link, dict(link))
    return record


def results_file(results: str | Path) -> Path:
    """The JSON Lines file for a results location: a directory gets runs.jsonl."""
    p = Path(results)
    if p.suffix == ".jsonl":
        return p
    return p / DEFAULT_FILE


def check_writable(results: str | Path) -> Path:
    """Create the results directory if needed and prove it is writable, before any work."""
    target = results_file(results)
    folder = target.parent
    if folder.exists() and not folder.is_dir():
        raise RecordsError(f"results path {folder} is a file, not a directory; pass a directory")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordsError(f"cannot create results directory {folder}: {exc.strerror}") from None
    if target.exists() and not target.is_file():
        raise RecordsError(f"results file {target} exists but is not a regular file")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise RecordsError(
            f"results location {target} is not writable; choose another with --results DIR"
        )
    return target


def finite(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """`record` with every NaN/inf float written as null and its path listed.

    JSON has no NaN or infinity, and a record must never be lost for holding one (a
    diverging run's losses): each non-finite float becomes null, and the field
    `nonfinite_fields` lists where, as paths like `final_loss`, `epochs[0].train_loss`
    or `step_losses[12]`. A record without such values is returned unchanged.
    """
    paths: list[str] = []

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            paths.append(path)
            return None
        if isinstance(value, dict):
            return {k: walk(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    out = walk(record, "")
    if not paths:
        return record
    out["nonfinite_fields"] = list(dict.fromkeys([*(out.get("nonfinite_fields") or []), *paths]))
    return dict(out)


def stored_form(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` as it is written: each series types.py marks `Stored` packed at the
    resolution it was measured (bench/records/packed.py), or, where the packed form
    cannot hold it, a list rounded alike; the launcher's commands with the runner's
    arguments and the epochs' names once (bench/records/compact.py)."""
    out = compact.compact(record)
    for field, stored in schema.STORED.items():
        if field in out:
            got = packed.pack(out[field], stored)
            out[field] = got if got is not None else packed.at_resolution(out[field], stored)
    return out


def encode(record: Mapping[str, Any]) -> bytes:
    """One record as its line of a results file: non-finite numbers as null
    (`finite`), series packed (`stored_form`), keys sorted."""
    text = json.dumps(stored_form(finite(record)), sort_keys=True, allow_nan=False)
    return (text + "\n").encode()


def append(results: str | Path, record: Mapping[str, Any]) -> Path:
    """Append one record atomically (whole line, locked, fsynced); returns the file.

    Its series are written packed (`stored_form`). A line that does not fit (disk full,
    quota) is cut back off, so the file never keeps part of a record; the error says so
    in one line.
    """
    target = check_writable(results)
    line = encode(record)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RecordsError(f"cannot open {target} to write a record: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A previous writer that died mid-line leaves no newline at the end; start
        # on a fresh line so that this record stays readable.
        size = os.fstat(fd).st_size
        if size:
            with open(target, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
        try:
            written = os.write(fd, line)
            if written != len(line):  # a short write: the disk filled up mid-line
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except OSError:
            # Under the lock nobody else has written since `size`: cut our part off.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise RecordsError(
                f"no space left on device to write a record to {target} (nothing partial was "
                "kept); free space there or choose another --results"
            ) from None
        raise RecordsError(f"cannot write a record to {target}: {exc.strerror}") from None
    finally:
        os.close(fd)
    return target


class Follower:
    """The records appended to one results file since it was last asked.

    A sweep looks for each cell's record right after the cell; reading the whole file
    each time would make a sweep quadratic in the records a folder already holds.
    This reads only the bytes added since the last call (whole lines: a writer holds
    the lock while it appends one), so finding a record costs the same in an empty
    folder and in one of 10,000 records.
    """

    def __init__(self, results: str | Path, start: tuple[int, int] | None = None) -> None:
        """Follow from the file's end now, or from `start` (bytes, lines) when the caller
        knows it (a cache covering the whole file), which saves counting its lines."""
        self.path = results_file(results)
        self.offset, self.lines = start or (0, 0)
        if start is not None:
            return
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as fh:
            # where the file ends now, and its line count for the records' sources
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                self.offset += len(chunk)
                self.lines += chunk.count(b"\n")

    def new(self) -> list[LoadedRecord]:
        """Good records appended since the last call (damaged lines are passed over)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        out = []
        for raw in complete.splitlines():
            self.lines += 1
            if raw.strip():
                parsed = parse_line(self.path, self.lines, raw)
                if not isinstance(parsed, Problem):
                    out.append(parsed)
        return out


# Committed reference records live in a folder of this name (results/reference/).
REFERENCE_DIR = "reference"


def files_under(paths: Iterable[str | Path]) -> tuple[list[Path], list[Problem], list[str]]:
    """The .jsonl files under `paths`, problems, and the reference folders passed over.

    A directory is searched recursively except for `reference/` folders below it: the
    committed reference records are read only when named (`bench compare
    results/reference/...`), so a user's own sweep is never mixed with them unasked.
    """
    files: list[Path] = []
    problems: list[Problem] = []
    skipped: set[str] = set()
    for p in map(Path, paths):
        # Regular files only: opening a FIFO or device named *.jsonl would block or
        # read forever.
        if p.is_dir():
            for f in sorted(p.rglob("*.jsonl")):
                below = f.relative_to(p).parts[:-1]
                if REFERENCE_DIR in below:
                    skipped.add(str(p.joinpath(*below[: below.index(REFERENCE_DIR) + 1])))
                elif f.is_file():
                    files.append(f)
                else:
                    problems.append(Problem(str(f), 0, "not a regular file; skipped"))
        elif p.is_file():
            files.append(p)
        elif p.exists():
            problems.append(Problem(str(p), 0, "not a regular file or directory; skipped"))
        else:
            problems.append(Problem(str(p), 0, "no such file or directory"))
    return files, problems, sorted(skipped)


def _json(raw: bytes) -> Any:
    """One line's JSON: orjson where it can (several times faster on a long line), the
    standard library for the rest, which also gives its own messages and readings
    (NaN tokens, integers beyond 64 bits): orjson accepts a subset of what json does."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8"))


def parse_line(path: Path, number: int, raw: bytes, unpack: bool = True) -> LoadedRecord | Problem:
    """One line -> a migrated record, or the problem that keeps it out. Packed series
    come back as lists, or, with `unpack` False, stay packed (for a reader that takes
    their arrays: packed.series)."""
    try:
        record = _json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Problem(str(path), number, f"not valid JSON ({exc})")
    if not isinstance(record, dict):
        return Problem(str(path), number, "not a JSON object")
    missing = [k for k in schema.EVERY_RECORD if k not in record]
    if missing:
        return Problem(str(path), number, f"missing field(s): {', '.join(missing)}")
    # Migrated (each migration refuses what it cannot convert), then checked against
    # the current types: a record of the wrong shape is skipped here with its field
    # named, never passed on to crash a report.
    try:
        record = migrate(record)
    except ValueError as exc:
        return Problem(str(path), number, str(exc))
    record = compact.expand(record)
    problem = schema.validate(record)
    if problem:
        return Problem(str(path), number, problem)
    if unpack:
        for field in schema.STORED:
            if packed.is_packed(record.get(field)):
                record[field] = packed.unpack(record[field])
    record["_source"] = f"{path}:{number}"
    return cast(LoadedRecord, record)  # checked against its own type just above


def load(paths: Iterable[str | Path]) -> Loaded:
    """Every good record under `paths` (files or directories), plus each problem found."""
    files, problems, skipped = files_under(paths)
    records: list[LoadedRecord] = []
    for path in files:
        try:
            with open(path, "rb") as fh:
                for number, raw in enumerate(fh, start=1):
                    if not raw.strip():
                        continue
                    parsed = parse_line(path, number, raw)
                    if isinstance(parsed, Problem):
                        problems.append(parsed)
                    else:
                        records.append(parsed)
        except OSError as exc:
            problems.append(Problem(str(path), 0, f"cannot read: {exc.strerror}"))
    return Loaded(records, problems, skipped)


def protocol_version(record: Mapping[str, Any]) -> int:
    """The measurement protocol `record` was taken under (1 for records before the field)."""
    version = record.get("protocol_version")
    return version if isinstance(version, int) and not isinstance(version, bool) else 1
