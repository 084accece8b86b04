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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from bench import env as benv
from bench import record as record_types
from bench import schema
from bench.record import Env, Launcher, Link, LoadedRecord, RunRecord, Spec

try:  # reads the summaries cache only: several times faster than json on 40 MB of them
    import orjson as _fastjson
except ImportError:  # pragma: no cover - a dependency; plain json reads the same file
    _fastjson = None  # type: ignore[assignment]

SCHEMA_VERSION = record_types.SCHEMA_VERSION  # the version bench/record.py types
# The measurement protocol a record was taken under (runners/protocol.py: what is timed
# and how). Bump it when a change makes new numbers incomparable with old ones: resume
# then reruns cells recorded under another version, and compare keeps them apart.
# Records without the field were taken under version 1.
PROTOCOL_VERSION = 1
DEFAULT_FILE = "runs.jsonl"

# Fields every record must have, whatever its status (the full table: bench/schema.py).
REQUIRED = tuple(k for k, f in schema.SCHEMAS[SCHEMA_VERSION].items() if "*" in f.required)


class Status:
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    DIVERGED = "diverged"  # a loss became NaN/inf; the record says at which step
    # the engine is not installed on this machine: the cell was recorded, not launched
    UNAVAILABLE = "unavailable"


class RecordsError(OSError):
    """The results location cannot be used; the message says what to do."""


def _number(text: Any, kind: type[int] | type[float]) -> Any:
    try:
        return kind(text) if isinstance(text, str) else text
    except ValueError:
        return text


# Records that `bench run`/`bench collectives` wrote for a launch that left no record of
# its own: their wall_time_s was the launch-to-exit time, not the training loop's.
_LAUNCHER_WRITTEN = ("bench run", "bench collectives")


def _v1_to_v2(record: dict[str, Any]) -> dict[str, Any]:
    """v2: wall times named for what they measure; labels and knobs hold numbers as numbers.

    wall_time_s becomes training_wall_s (a runner's training phase) or
    launch_to_exit_s (a record the sweep wrote when the launch left none);
    epochs[].wall_time_s becomes elapsed_s; labels.repeat becomes an integer;
    Horovod's knobs.cycle_time_ms becomes a float, null for its default.
    """
    out = dict(record, schema_version=2)
    if "wall_time_s" in out:
        launcher = out.get("launcher") or {}
        written_by = launcher.get("name") if isinstance(launcher, dict) else None
        name = "launch_to_exit_s" if written_by in _LAUNCHER_WRITTEN else "training_wall_s"
        out[name] = out.pop("wall_time_s")
    if isinstance(out.get("epochs"), list):
        out["epochs"] = [
            {("elapsed_s" if k == "wall_time_s" else k): v for k, v in e.items()}
            if isinstance(e, dict)
            else e
            for e in out["epochs"]
        ]
    labels = out.get("labels")
    if isinstance(labels, dict) and "repeat" in labels:
        out["labels"] = dict(labels, repeat=_number(labels["repeat"], int))
    knobs = out.get("knobs")
    if isinstance(knobs, dict) and "cycle_time_ms" in knobs:
        cycle = knobs["cycle_time_ms"]
        out["knobs"] = dict(
            knobs, cycle_time_ms=None if cycle == "default" else _number(cycle, float)
        )
    return out


# Explicit migrations, oldest first: MIGRATIONS[v] turns a version-v record into v+1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def timestamp(seconds: float | None = None) -> str:
    """UTC ISO-8601 time with milliseconds (now, or `seconds` since the epoch)."""
    when = datetime.datetime.fromtimestamp(
        time.time() if seconds is None else seconds, datetime.UTC
    )
    return when.isoformat(timespec="milliseconds")


def typed_labels(labels: dict[str, str]) -> dict[str, Any]:
    """Command-line labels with the known numeric ones (schema.LABEL_TYPES) as numbers.

    Raises ValueError naming the label when one of those is not a number.
    """
    out: dict[str, Any] = dict(labels)
    for key, kind in schema.LABEL_NUMBERS.items():
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
    # committed reference folders passed over because they were not named (see _files)
    skipped: list[str] = dataclasses.field(default_factory=list)


def new_record(
    spec: Spec | dict[str, Any],
    engine: str,
    world_size: int,
    labels: dict[str, Any],
    launcher: dict[str, Any],
    status: str = Status.OK,
    error: str | None = None,
) -> RunRecord:
    """The fields every record has, whoever writes it (a runner or the sweep).

    A run over an emulated link (label link_rate_bps, set by `bench run --emulate-link`
    and `bench collectives --emulate-link`) also gets the record's `link`.
    """
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
        "launcher": cast(Launcher, benv.scrub_launcher(launcher)),
        "env": cast(Env, benv.environment()),
    }
    rate = labels.get("link_rate_bps")
    if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0:
        from bench.netns import link_record

        record["link"] = cast(Link, link_record(rate))
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


def append(results: str | Path, record: Mapping[str, Any]) -> Path:
    """Append one record atomically (whole line, locked, fsynced); returns the file.

    A line that does not fit (disk full, quota) is cut back off, so the file never
    keeps part of a record; the error says so in one line.
    """
    target = check_writable(results)
    line = (json.dumps(finite(record), sort_keys=True, allow_nan=False) + "\n").encode()
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


def by_label(path: str | Path, key: str, value: str) -> list[LoadedRecord]:
    """The records in `path` whose labels[key] == value (e.g. one launch's attempt id)."""
    if not Path(path).exists():
        return []
    return [r for r in load([path]).records if (r.get("labels") or {}).get(key) == value]


# Committed reference records live in a folder of this name (results/reference/).
REFERENCE_DIR = "reference"


def _files(paths: Iterable[str | Path]) -> tuple[list[Path], list[Problem], list[str]]:
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


def migrate(record: dict[str, Any]) -> dict[str, Any]:
    """Bring a record to SCHEMA_VERSION through the explicit migrations."""
    version = record.get("schema_version")
    if not isinstance(version, int):
        raise ValueError(f"schema_version is missing or not an integer: {version!r}")
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {version} is newer than this bench understands "
            f"({SCHEMA_VERSION}); upgrade bench to read it"
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ValueError(f"no migration from schema_version {version}")
        record = MIGRATIONS[version](record)
        version = record["schema_version"]
    return record


def _parse(path: Path, number: int, raw: bytes) -> LoadedRecord | Problem:
    """One line -> a migrated record, or the problem that keeps it out."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Problem(str(path), number, f"not valid JSON ({exc})")
    if not isinstance(record, dict):
        return Problem(str(path), number, "not a JSON object")
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        return Problem(str(path), number, f"missing field(s): {', '.join(missing)}")
    # Checked against its own version's schema (so that migrations see the types they
    # expect), then against this version's after migrating: a record of the wrong shape
    # is skipped here with its field named, never passed on to crash a report.
    version = record["schema_version"]
    if isinstance(version, int) and version in schema.SCHEMAS:
        problem = schema.validate(record)
        if problem:
            return Problem(str(path), number, problem)
    try:
        record = migrate(record)
    except ValueError as exc:
        return Problem(str(path), number, str(exc))
    problem = schema.validate(record)
    if problem:
        return Problem(str(path), number, problem)
    record["_source"] = f"{path}:{number}"
    # validated against the schema that bench/record.py types (tests keep them in step)
    return cast(LoadedRecord, record)


def load(paths: Iterable[str | Path]) -> Loaded:
    """Every good record under `paths` (files or directories), plus each problem found."""
    files, problems, skipped = _files(paths)
    records: list[LoadedRecord] = []
    for path in files:
        try:
            with open(path, "rb") as fh:
                for number, raw in enumerate(fh, start=1):
                    if not raw.strip():
                        continue
                    parsed = _parse(path, number, raw)
                    if isinstance(parsed, Problem):
                        problems.append(parsed)
                    else:
                        records.append(parsed)
        except OSError as exc:
            problems.append(Problem(str(path), 0, f"cannot read: {exc.strerror}"))
    return Loaded(records, problems, skipped)


# -- summaries for reading many records fast ----------------------------------------

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
            parsed = _parse(path, number, raw)
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
    files, problems, skipped = _files(paths)
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


def protocol_version(record: Mapping[str, Any]) -> int:
    """The measurement protocol `record` was taken under (1 for records before the field)."""
    version = record.get("protocol_version")
    return version if isinstance(version, int) and not isinstance(version, bool) else 1
