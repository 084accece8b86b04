"""Explicit migrations of stored records, oldest first (as airspeed-velocity's `update_to_N`).

A record is read at whatever version wrote it and brought to `SCHEMA_VERSION`
one step at a time, as a plain dict, before its type is checked. These are the
only places where the field names of older versions are spelled out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.records import packed
from bench.records.types import SCHEMA_VERSION, Stored


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
    labels = record.get("labels")
    if isinstance(labels, dict):  # v1 wrote every label as a string
        for key, value in labels.items():
            if not isinstance(value, str):
                raise ValueError(f"labels.{key}: expected a string, got {value!r} in a v1 record")
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
    if isinstance(labels, dict) and "repeat" in labels:
        out["labels"] = dict(labels, repeat=_number(labels["repeat"], int))
    knobs = out.get("knobs")
    if isinstance(knobs, dict) and "cycle_time_ms" in knobs:
        cycle = knobs["cycle_time_ms"]
        out["knobs"] = dict(
            knobs, cycle_time_ms=None if cycle == "default" else _number(cycle, float)
        )
    return out


# Fields only a run timed in windows writes (the measurement protocol's version 2).
_WINDOW_FIELDS = ("window_times_s", "measurement", "window_steps")


def _v2_to_v3(record: dict[str, Any]) -> dict[str, Any]:
    """v3: every training record names the measurement protocol that timed it.

    Records of schema 2 said protocol 1 (or nothing) whether their steps were each
    synchronised and timed alone or timed in windows; the two must never be compared.
    A training record holding window fields was timed in windows: protocol 2.
    """
    out = dict(record, schema_version=3)
    if out.get("kind", "train") == "train" and out.get("protocol_version", 1) == 1:
        windowed = any(k in out for k in _WINDOW_FIELDS)
        out["protocol_version"] = 2 if windowed else 1
    return out


# The series v4 stores at the resolution they were measured (types.py `Stored`), as
# they were in version 3: spelled out here, where old versions are.
_V4_RESOLUTION = {
    "step_times_s": Stored("<i4", 1_000_000),
    "window_times_s": Stored("<i4", 1_000_000),
    "step_losses": Stored("<f4"),
}


def _v3_to_v4(record: dict[str, Any]) -> dict[str, Any]:
    """v4: per-step series at the resolution they were measured, stored packed.

    Step and window times are microseconds (the finer digits of a v3 record were the
    clock's noise, not the step's), step losses float32 (what every framework computed
    them in). A v3 record's series are rounded the same way, so a record reads alike
    whether it was written before or after (the packed form is the store's business,
    bench/records/packed.py).
    """
    out = dict(record, schema_version=4)
    for field, stored in _V4_RESOLUTION.items():
        if field in out:
            out[field] = packed.at_resolution(out[field], stored)
    return out


def _v4_to_v5(record: dict[str, Any]) -> dict[str, Any]:
    """v5: each window's throughput is no longer written out, since the window times and
    steps and the global batch hold it (packed.window_throughput reads it off them). A
    v4 record keeps the series it has, which readers take as it is. The launcher's and
    the epochs' shorter written forms (compact.py) are read back whole as a record is
    read; a reader before version 5 would take them for damage, so it is told to upgrade."""
    return dict(record, schema_version=5)


# Explicit migrations, oldest first: MIGRATIONS[v] turns a version-v record into v+1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
}


def migrate(record: dict[str, Any]) -> dict[str, Any]:
    """Bring a record to SCHEMA_VERSION through the explicit migrations."""
    version = record.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
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
