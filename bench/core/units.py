"""Units people type and read: link rates, sizes and durations."""

from __future__ import annotations

import math
import re

from bench.core.errors import LinkError

# Rates below this would make a training run's start-up alone take minutes.
MIN_RATE_BPS = 1_000_000
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
MiB = 2**20


def parse_rate(text: str) -> int:
    """Bits per second from a tc-style rate: '200mbit', '1.5gbit', '25gbit' (SI, x1000).

    Only bit units are taken: tc's 'bps' means bytes per second, a factor of 8 that a
    user should never have to guess, so it is refused with the bit spelling to use.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)bit\s*", str(text), re.IGNORECASE)
    if not m:
        raise LinkError(
            f"--emulate-link: rate {text!r} is not understood; give bits per second with a "
            "unit, e.g. 200mbit, 1gbit or 25gbit (k/m/g/t = x1000)"
        )
    bps = round(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if bps < MIN_RATE_BPS:
        raise LinkError(f"--emulate-link: rate {text!r} is below 1mbit; give 1mbit or more")
    return bps


def format_rate(bps: float) -> str:
    """'200mbit', '25gbit', '1.5gbit': the shortest tc-style spelling of a rate."""
    for unit, size in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= size:
            return f"{bps / size:g}{unit}"
    return f"{bps:g}bit"


def minutes_hms(seconds: float) -> str:
    """H:MM:00 of `seconds` rounded up to whole minutes (at least one), as Slurm takes it."""
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes // 60:d}:{minutes % 60:02d}:00"


def clock(seconds: float) -> str:
    """M:SS of `seconds`, for progress lines."""
    m, s = divmod(int(seconds + 0.5), 60)
    return f"{m}:{s:02d}"
