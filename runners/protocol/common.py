"""What the training and allreduce protocols share: loading an engine's adapter, labels,
and small values gathered from every rank."""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench import engines
from bench.core.errors import InputError
from bench.engines import Engine
from bench.launch.cluster import ROOT
from runners.adapters.base import EngineAdapter


def parse_labels(items: Sequence[str], flag: str = "--label") -> dict[str, str]:
    """KEY=VALUE items as a mapping; InputError naming `flag` for one without '='."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def script_name(path: Path) -> str:
    """The runner as its usage line names it: relative to the repository when inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return path.name


def load_adapter(engine: Engine) -> type[EngineAdapter]:
    """The engine's adapter class, imported by its registry path (this loads the framework)."""
    module, _, name = engines.get(engine).adapter.partition(":")
    try:
        cls: type[EngineAdapter] = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        # e.g. Horovod installed without its PyTorch extension ("has not been built")
        raise engines.cannot_start(engine, exc) from None
    return cls


def gather_str(adapter: EngineAdapter, text: str, width: int = 128) -> list[str]:
    """Every rank's short string, in rank order."""
    raw = text.encode()[:width].ljust(width, b"\0")
    rows = adapter.allgather(np.frombuffer(raw, dtype=np.uint8).copy())
    return [bytes(r.astype(np.uint8)).rstrip(b"\0").decode(errors="replace") for r in rows]


def gather_json(adapter: EngineAdapter, value: Any, width: int = 1024) -> list[Any]:
    """Every rank's small JSON-able value, in rank order."""
    return [json.loads(t) if t else None for t in gather_str(adapter, json.dumps(value), width)]


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def launcher(engine: Engine) -> dict[str, Any]:
    """Which launcher started this process, and its command line when visible."""
    name = engines.recognise_launcher(engine, os.environ)
    try:
        proc = psutil.Process().parent()
        parent = proc.cmdline() if proc else None
    except psutil.Error:  # the parent already gone: the record says unknown
        parent = None
    return {"name": name, "runner_argv": [sys.executable, *sys.argv], "parent_argv": parent}
