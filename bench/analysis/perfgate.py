"""The regression gate of the suite's own pytest-benchmark checks: A/B on one machine.

A base revision and the working tree are launched alternately (A B, B A, ...),
each launch running every benchmark for its rounds and saving them with
`--benchmark-save-data`. A launch is the unit, as a run is for `bench compare`:
rounds inside one launch share its process state (allocator, thread placement),
so pooling them as independent would narrow the interval below what differs
between launches. Each launch gives one value per benchmark, its fastest round:
interference (another process, the hypervisor) only ever adds time, so the
fastest of hundreds of rounds is the launch's cost without it. Measured on the
2-core VM, launch minima of the same code spread 0.6-3% (coefficient of
variation) where launch medians spread 4-17%. The change of a benchmark is
new/base with Welch's t-interval on log times over launches (`stats.ratio`, the
interval `bench compare --base --new` uses), and it regressed only when the
whole interval lies above 1 + threshold.

The calibration benchmark says whether the machine changed; it never regresses.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.measure import stats

CALIBRATION = "test_calibration"
DEFAULT_THRESHOLD = 0.10  # a change is a regression when the whole interval is above +10%


@dataclasses.dataclass(frozen=True)
class Launch:
    """One pytest-benchmark JSON file: the machine, and each benchmark's round times."""

    path: Path
    machine: Mapping[str, Any]
    rounds: Mapping[str, list[float]]  # benchmark name -> seconds of every round

    @classmethod
    def read(cls, path: Path) -> Launch:
        data = json.loads(path.read_text())
        rounds = {
            b["name"]: [float(x) for x in (b["stats"].get("data") or [])]
            for b in data.get("benchmarks", [])
        }
        return cls(path, data.get("machine_info") or {}, {k: v for k, v in rounds.items() if v})


@dataclasses.dataclass(frozen=True)
class Change:
    """One benchmark's change from base to new, over launches."""

    name: str
    base_ms: float  # median over launches of each launch's fastest round
    new_ms: float
    ratio: stats.Estimate  # new / base time, with its interval over launches
    rounds: tuple[int, int]  # rounds in all, base and new

    def regressed(self, threshold: float) -> bool:
        """True only when the whole interval lies beyond 1 + threshold."""
        return self.ratio.low is not None and self.ratio.low > 1 + threshold

    def verdict(self, threshold: float) -> str:
        if self.ratio.low is None:
            return stats.TOO_FEW
        if self.regressed(threshold):
            return f"REGRESSED (> +{threshold:.0%} for certain)"
        if self.ratio.high is not None and self.ratio.high < 1 - threshold:
            return "faster"
        return "ok"


def launch_values(launches: Iterable[Launch], name: str) -> list[float]:
    """One value per launch: its fastest round (see the module's docstring)."""
    return [min(lau.rounds[name]) for lau in launches if name in lau.rounds]


def changes(base: Sequence[Launch], new: Sequence[Launch]) -> list[Change]:
    """Every benchmark both sides ran, calibration aside, by name."""
    names = sorted(
        {n for lau in base for n in lau.rounds}
        & {n for lau in new for n in lau.rounds} - {CALIBRATION}
    )
    out = []
    for name in names:
        b, n = launch_values(base, name), launch_values(new, name)
        counts = (_rounds(base, name), _rounds(new, name))
        ms = (1e3 * statistics.median(b), 1e3 * statistics.median(n))
        out.append(Change(name, *ms, stats.ratio(n, b), counts))
    return out


def _rounds(launches: Sequence[Launch], name: str) -> int:
    return sum(len(lau.rounds.get(name, [])) for lau in launches)


def machine_speed(base: Sequence[Launch], new: Sequence[Launch]) -> stats.Estimate | None:
    """new/base time of the calibration workload: how the machine differs between sides."""
    b, n = launch_values(base, CALIBRATION), launch_values(new, CALIBRATION)
    return stats.ratio(n, b) if b and n else None


MACHINE_KEYS = ("node", "processor", "machine", "python_version", "system", "release")


def same_machine(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two pytest-benchmark machine_info blocks describe one machine."""
    cpu_a, cpu_b = a.get("cpu") or {}, b.get("cpu") or {}
    return all(a.get(k) == b.get(k) for k in MACHINE_KEYS) and cpu_a.get("brand_raw") == cpu_b.get(
        "brand_raw"
    )


def render(found: Sequence[Change], threshold: float, speed: stats.Estimate | None) -> str:
    """A table for people: one line per benchmark, its change with the interval."""
    width = max((len(c.name) for c in found), default=9)
    lines = [
        f"{'benchmark':<{width}}  {'base ms':>9}  {'new ms':>9}  {'new/base [95% CI]':>26}  verdict"
    ]
    for c in found:
        iv = c.ratio.interval(".3f")
        lines.append(
            f"{c.name:<{width}}  {c.base_ms:9.3f}  {c.new_ms:9.3f}  {c.ratio.value:7.3f} {iv:>18}  "
            + c.verdict(threshold)
        )
    if speed is not None:
        lines.append(
            f"calibration (not a benchmark): new/base {speed.value:.3f} {speed.interval('.3f')}"
            " -- the machine's own drift between the two sides"
        )
    return "\n".join(lines)
