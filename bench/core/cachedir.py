"""The per-user cache folder, shared by every results folder and checkout:
`$XDG_CACHE_HOME/bench`, by default `~/.cache/bench` (the measured peak, the replayed
comparisons)."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bench"
