"""The regression gate of the suite's own pytest-benchmark checks: A/B on one machine.

A base revision and the working tree are launched in pairs, alternately (A B, B A,
...), each launch running every benchmark for its rounds and saving them with
`--benchmark-save-data`. A launch is the unit, as a run is for `bench compare`:
rounds inside one launch share its process state (allocator, thread placement),
so pooling them as independent would narrow the interval below what differs
between launches. Each launch gives one value per benchmark, its fastest round:
interference (another process, the hypervisor) only ever adds time, so the
fastest of hundreds of rounds is the launch's cost without it.

The change of a benchmark is new/base from the launch pairs: the t-interval of the
mean log ratio of each pair's two launches, which ran one after the other, so the
machine's slow phases (train-step minima 2-4.5 ms for 40 minutes, where they are
1.5 ms otherwise) fall on both of a pair and cancel. Launches are added a pair at a
time and each benchmark is looked at when the pairs reach `LOOKS`, each look at
confidence 1 - alpha / len(LOOKS) (alpha spent over the looks, as `bench run
--decide-at` spends it), so the intervals hold whatever the stopping:
- "regressed": the whole interval lies above 1 + threshold;
- "ok": the whole interval lies below 1 + threshold (not slower by that much);
- "undecided": neither yet; at the cap the gate passes and says so.
The gate stops at the first look where a benchmark regressed or every one is decided.

The calibration benchmark says whether the machine changed; it never regresses.

The gate is the project's own CI tool, not part of the `bench` package: scripts/perf.py
and scripts/perf_table.py import it from beside them. It needs only bench's interval
statistics (bench.measure.stats).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.measure import stats

CALIBRATION = "test_calibration"
DEFAULT_THRESHOLD = 0.10  # a change is a regression when the whole interval is above +10%
ALPHA = 0.05  # spent over the looks, as bench run --decide-at spends its own
# Launch pairs at which the gate looks; a look needs 4 pairs: at 3 (2 degrees of freedom)
# the interval at 99% is too wide to decide anything measured here.
LOOKS = (4, 6, 8, 11, 16)
REGRESSED, OK, UNDECIDED = "regressed", "ok", "undecided"


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
    base_ms: float  # median over the launches used of each launch's fastest round
    new_ms: float
    ratio: stats.Estimate  # new / base time, at the deciding (or latest) look
    rounds: tuple[int, int]  # rounds in all, base and new
    outcome: str  # REGRESSED | OK | UNDECIDED
    threshold: float

    @property
    def regressed(self) -> bool:
        return self.outcome == REGRESSED

    def verdict(self) -> str:
        if self.ratio.low is None:
            return stats.TOO_FEW
        if self.outcome == REGRESSED:
            return f"REGRESSED (> +{self.threshold:.0%} for certain)"
        if self.outcome == UNDECIDED:
            return f"undecided (cannot rule out > +{self.threshold:.0%})"
        if self.ratio.high is not None and self.ratio.high < 1 - self.threshold:
            return "faster"
        return "ok"


def confidence(alpha: float = ALPHA, looks: Sequence[int] = LOOKS) -> float:
    """Each look's confidence: alpha spent evenly over the gate's looks (Bonferroni, as
    for bench run --decide-at)."""
    return 1 - alpha / len(looks)


def outcome_of(ratio: stats.Estimate, threshold: float) -> str:
    """Regressed when the whole interval lies above 1 + threshold, ok when it lies below."""
    if ratio.low is None or ratio.high is None:
        return UNDECIDED
    if ratio.low > 1 + threshold:
        return REGRESSED
    if ratio.high < 1 + threshold:
        return OK
    return UNDECIDED


def launch_values(launches: Iterable[Launch], name: str) -> list[float]:
    """One value per launch: its fastest round (see the module's docstring)."""
    return [min(lau.rounds[name]) for lau in launches if name in lau.rounds]


def _names(base: Sequence[Launch], new: Sequence[Launch]) -> list[str]:
    """Every benchmark both sides ran, calibration aside, by name."""
    return sorted(
        {n for lau in base for n in lau.rounds}
        & {n for lau in new for n in lau.rounds} - {CALIBRATION}
    )


def _change(
    name: str, b: list[float], n: list[float], ratio: stats.Estimate, rounds: tuple[int, int],
    threshold: float,
) -> Change:  # fmt: skip
    ms = (1e3 * statistics.median(b), 1e3 * statistics.median(n))
    return Change(name, *ms, ratio, rounds, outcome_of(ratio, threshold), threshold)


def changes(
    base: Sequence[Launch], new: Sequence[Launch], threshold: float = DEFAULT_THRESHOLD
) -> list[Change]:
    """Fixed launches, not paired (a saved baseline against new launches): Welch's
    interval on log minima at 95%, one look."""
    out = []
    for name in _names(base, new):
        b, n = launch_values(base, name), launch_values(new, name)
        counts = (_rounds(base, name), _rounds(new, name))
        out.append(_change(name, b, n, stats.ratio(n, b), counts, threshold))
    return out


def paired(base: Sequence[float], new: Sequence[float], conf: float) -> stats.Estimate:
    """new / base from launch pairs: the t-interval of the mean of log(new_i / base_i)."""
    d = np.log(np.asarray(new, dtype=np.float64)) - np.log(np.asarray(base, dtype=np.float64))
    mean = float(np.mean(d))
    if d.size < stats.MIN_RUNS:
        return stats.Estimate(math.exp(mean), None, None, int(d.size), stats.TOO_FEW)
    sd = float(np.std(d, ddof=1))
    half = stats.t_quantile(0.5 + conf / 2, d.size - 1) * sd / math.sqrt(d.size)
    return stats.Estimate(
        math.exp(mean), math.exp(mean - half), math.exp(mean + half), int(d.size), "paired-log-t"
    )


def pair_values(
    base: Sequence[Launch], new: Sequence[Launch], name: str
) -> tuple[list[float], list[float]]:
    """Each pair's fastest rounds, (base, new), over the pairs where both ran `name`."""
    both = [
        (b, n) for b, n in zip(base, new, strict=False) if name in b.rounds and name in n.rounds
    ]
    return [min(b.rounds[name]) for b, _ in both], [min(n.rounds[name]) for _, n in both]


def sequential_changes(
    base: Sequence[Launch],
    new: Sequence[Launch],
    threshold: float = DEFAULT_THRESHOLD,
    looks: Sequence[int] = LOOKS,
    alpha: float = ALPHA,
) -> list[Change]:
    """Launch pairs (base[i], new[i]), each benchmark decided at its first deciding look.

    Undecided: the interval over every pair so far, at the looks' confidence (shown, never
    used to decide: only the looks' intervals hold under optional stopping)."""
    conf = confidence(alpha, looks)
    out = []
    for name in _names(base, new):
        b, n = pair_values(base, new, name)
        used = len(b)
        ratio = paired(b, n, conf)
        for look in (k for k in looks if k <= len(b)):
            at = paired(b[:look], n[:look], conf)
            if outcome_of(at, threshold) != UNDECIDED:
                used, ratio = look, at
                break
        counts = (_rounds(base[:used], name), _rounds(new[:used], name))
        change = _change(name, b[:used], n[:used], ratio, counts, threshold)
        if used not in looks and change.outcome != UNDECIDED:  # decided by no look
            change = dataclasses.replace(change, outcome=UNDECIDED)
        out.append(change)
    return out


def settled(found: Sequence[Change]) -> bool:
    """Whether the gate can stop: a benchmark regressed, or every one is decided."""
    return any(c.regressed for c in found) or all(c.outcome != UNDECIDED for c in found)


def _rounds(launches: Sequence[Launch], name: str) -> int:
    return sum(len(lau.rounds.get(name, [])) for lau in launches)


def machine_speed(
    base: Sequence[Launch], new: Sequence[Launch], pairs: bool = False
) -> stats.Estimate | None:
    """new/base time of the calibration workload: how the machine differs between sides
    (at 95%; from the launch pairs where the launches were made in pairs)."""
    if pairs:
        b, n = pair_values(base, new, CALIBRATION)
        return paired(b, n, stats.CONFIDENCE) if b else None
    b, n = launch_values(base, CALIBRATION), launch_values(new, CALIBRATION)
    return stats.ratio(n, b) if b and n else None


MACHINE_KEYS = ("node", "processor", "machine", "python_version", "system", "release")


def same_machine(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two pytest-benchmark machine_info blocks describe one machine."""
    cpu_a, cpu_b = a.get("cpu") or {}, b.get("cpu") or {}
    return all(a.get(k) == b.get(k) for k in MACHINE_KEYS) and cpu_a.get("brand_raw") == cpu_b.get(
        "brand_raw"
    )


def render(found: Sequence[Change], speed: stats.Estimate | None, confidence: float) -> str:
    """A table for people: one line per benchmark, its change with the interval."""
    width = max((len(c.name) for c in found), default=9)
    head = f"new/base [{confidence:.1%} CI]"
    lines = [f"{'benchmark':<{width}}  {'base ms':>9}  {'new ms':>9}  {head:>26}  verdict"]
    for c in found:
        iv = c.ratio.interval(".3f")
        lines.append(
            f"{c.name:<{width}}  {c.base_ms:9.3f}  {c.new_ms:9.3f}  {c.ratio.value:7.3f} {iv:>18}  "
            + c.verdict()
        )
    if speed is not None:
        lines.append(
            f"calibration (not a benchmark): new/base {speed.value:.3f} {speed.interval('.3f')}"
            " -- the machine's own drift between the two sides"
        )
    return "\n".join(lines)
