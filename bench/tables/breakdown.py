"""Where each engine's step goes, and a verdict that explains the time it lost.

The step's parts (compute, optimizer, exposed and hidden communication, other,
input) are bench/tables/derived.py's, per cell (engine, worker count), in
milliseconds per step, medians over runs. The phases come from profiled steps run
after every timed window (runners/protocol/profile.py), never from them.

The verdict answers "why does this engine not scale" and "why is it slower than
that one". First the causes that need no baseline: a straggler rank, input slower
than the step, CPU taken by other processes, the hypervisor or oversubscription.
Then, for a multi-worker cell, the time it lost: its step against its own 1-worker
step (scaled to its per-worker batch: the efficiency's complement, in ms), and
against the fastest engine at the same worker count. Each difference is split into
compute stretch, the CPU communication took from compute, waiting for
communication, optimizer and the rest; the verdict names the largest part of the
time lost to scaling, and says how closely the parts add up to the measured
difference. A 1-worker cell (or one without its baseline, saying what to run) is
read from its step's largest share. Advice is bench/tables/advice.py's, checked
against the run's layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench.measure.contention import OTHER_CORES_LIMIT
from bench.tables import advice, derived
from bench.tables.derived import CATEGORIES, Parts, parts

__all__ = ["CATEGORIES", "Parts", "parts", "rows", "stacked", "verdict", "verdict_rows"]


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows by worker count, then engine; an empty frame without any."""
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).sort_values(["workers", "engine"]).reset_index(drop=True)


def cells(
    ok: pd.DataFrame, twins: pd.DataFrame
) -> Iterator[tuple[str, int, pd.DataFrame, pd.DataFrame]]:
    """(engine, workers, its runs, its compute-only twin's runs) of every cell."""
    for (engine, workers), cell in ok.groupby(["engine", "workers"]):
        yield (
            str(engine),
            int(workers),
            cell,
            twins[(twins["engine"] == engine) & (twins["workers"] == workers)],
        )


def rows(ok: pd.DataFrame, twins: pd.DataFrame) -> pd.DataFrame:
    """The breakdown table: one row per engine and worker count whose runs were profiled."""
    out = []
    for engine, workers, cell, twin in cells(ok, twins):
        p = parts(cell, twin)
        if p is None:
            continue
        out.append(
            {
                "engine": engine,
                "workers": int(workers),
                "step ms": p.step,
                "compute": p.compute,
                "optimizer": p.optimizer,
                "exposed comm": p.exposed,
                "hidden comm": p.hidden,
                "other": p.other,
                "input (outside)": p.input,
                "comm measured by": p.source,
            }
        )
    return _table(out)


# --- the time lost, split -----------------------------------------------------------

LOST_PARTS = ("compute stretch", "comm CPU", "comm wait", "optimizer", "other")
# the verdict each part of the lost time names
CAUSE = {
    "compute stretch": "compute-stretched",
    "comm CPU": "comm-CPU-bound",
    "comm wait": "communication-bound",
    "optimizer": "optimizer-bound",
    "other": "overhead-bound",
}
SCALES = 0.10  # lost time below this share of the step: the cell scales
ADDS_UP = 0.10  # the parts' sum within this share of the measured difference


@dataclasses.dataclass(frozen=True)
class Split:
    """A cell's step against a baseline's (scaled to the cell's per-worker batch), and
    the difference in parts (ms per step)."""

    against: str  # "1 worker" or the faster engine's cell
    step: float
    base: float
    parts: dict[str, float]

    @property
    def lost(self) -> float:
        return self.step - self.base

    @property
    def explained(self) -> float:
        return float(sum(self.parts.values()))

    def largest(self) -> str | None:
        finite = {k: v for k, v in self.parts.items() if np.isfinite(v)}
        return max(finite, key=lambda k: finite[k]) if finite else None

    def adds_up(self) -> bool:
        return abs(self.explained - self.lost) <= ADDS_UP * max(abs(self.lost), 1e-9)

    def text(self) -> str:
        split = ", ".join(f"{k} {v:+.2f}" for k, v in self.parts.items() if np.isfinite(v))
        head = f"{self.lost:+.2f} ms vs {self.against} ({self.step:.2f} vs {self.base:.2f})"
        tail = f"parts add up to {self.explained:+.2f} ms"
        if self.lost:
            tail += f" ({self.explained / self.lost:.0%})"
        if not self.adds_up():
            tail += (
                ": the profiled phases (each marked and synchronised) do not add up to "
                "the timed step on one side, so 'other' was held at 0"
            )
        return f"{head}: {split}; {tail}"


def split(p: Parts, base: Parts, scale: float, against: str) -> Split:
    """`p` against `base`, each of base's parts times `scale` (this cell's per-worker
    batch over the baseline's: 1 under weak scaling)."""
    mine = (p.compute, p.comm_cpu, p.wait, p.optimizer, p.other)
    theirs = (base.compute, base.comm_cpu, base.wait, base.optimizer, base.other)
    return Split(
        against,
        p.step,
        scale * base.step,
        {k: a - scale * b for k, a, b in zip(LOST_PARTS, mine, theirs, strict=True)},
    )


@dataclasses.dataclass(frozen=True)
class Group:
    """A comparison's cells, for the baselines a verdict reads: each engine's 1-worker
    cell and the fastest engine at each worker count (over the same kind of link)."""

    ok: pd.DataFrame
    twins: pd.DataFrame
    tuned: Mapping[tuple[str, int], str] = dataclasses.field(default_factory=dict)

    def _parts(self, engine: str, workers: int) -> tuple[Parts | None, pd.DataFrame]:
        cell = self.ok[(self.ok["engine"] == engine) & (self.ok["workers"] == workers)]
        twin = self.twins[(self.twins["engine"] == engine) & (self.twins["workers"] == workers)]
        return (parts(cell, twin) if len(cell) else None), cell

    def one_worker(self, cell: pd.DataFrame, p: Parts) -> Split | None:
        """The cell against its engine's own 1-worker cell."""
        engine = str(cell["single_node_engine"].iloc[0])
        base, base_cell = self._parts(engine, 1)
        if base is None or not np.isfinite(base.step):
            return None
        mine = float(cell["per_worker_batch"].iloc[0] or np.nan)
        theirs = float(base_cell["per_worker_batch"].iloc[0] or np.nan)
        scale = mine / theirs if np.isfinite(mine / theirs) else 1.0
        return split(p, base, scale, "1 worker")

    def fastest(self, cell: pd.DataFrame, p: Parts) -> Split | None:
        """The cell against the fastest engine at its worker count, over the same kind of
        link (a variant's suffix: @nodes, /rate); None when it is the fastest."""
        engine, workers = str(cell["engine"].iloc[0]), int(cell["workers"].iloc[0])
        suffix = engine[len(str(cell["single_node_engine"].iloc[0])) :]
        best: tuple[float, str, Parts] | None = None
        for other in self.ok[self.ok["workers"] == workers]["engine"].unique():
            rest = str(other)[len(_single(self.ok, str(other))) :]
            if other == engine or rest != suffix:
                continue
            q, _ = self._parts(str(other), workers)
            if q is not None and np.isfinite(q.step) and (best is None or q.step < best[0]):
                best = (q.step, str(other), q)
        if best is None or best[0] >= p.step:
            return None
        return split(p, best[2], 1.0, f"{best[1]} x{workers}")


def _single(ok: pd.DataFrame, engine: str) -> str:
    return str(ok[ok["engine"] == engine]["single_node_engine"].iloc[0])


# --- the verdict --------------------------------------------------------------------

# A straggler: the other ranks' waiting for one rank explains at least this share of the
# time the cell lost against its own 1 worker (of its step, without that baseline), and
# it is the same rank in at least this share of the runs. Measured on a 2-core machine
# (lenet, 2 runs a cell, the three engines): idle, the others wait 0-13% of the lost
# time on some rank; over a 20 Mbit link 2-11%; beside two busy processes 9-49%, on
# either rank and none held back alone; a rank under a third of a core's quota, 59-74%,
# the same rank in 2/2 runs, held back 18-63% of the time (docs/why.md#stragglers).
STRAGGLER_SHARE = 0.25
STRAGGLER_RUNS = 2 / 3
STRAGGLER_MIN_RUNS = 2  # "the same rank in most runs" needs runs to say it
# Starved: stopped by its cgroup's CPU quota for at least this share of the probe, or
# held back from outside its process (its main thread ready to run but not running, less
# what its own threads ran meanwhile) at least this share of the time and at least this
# many times the other ranks' share
HELD_SHARE = 0.10
HELD_ALONE = 2.0
# or slower at its own work than the others by at least this share of what they wait
# for it an iteration (a rank delayed inside its process: a slow loader, a pause)
OWN_EXPLAINS = 0.5
OVERHEAD_UTILISATION = 0.05  # the step below this share of the measured peak: overhead
STEAL_SHARE = 0.10  # CPU time the hypervisor gave other guests, to be the cause


@dataclasses.dataclass(frozen=True)
class Verdict:
    name: str  # a key of advice.RULES: straggler, communication-bound, ...
    evidence: str  # the numbers behind it
    knob: str  # what to try, each with the direction it should move the step
    lost: Split | None = None  # against the engine's own 1-worker cell
    behind: Split | None = None  # against the fastest engine at the same worker count


@dataclasses.dataclass(frozen=True)
class Waited:
    """Who waited for whom in one run (the waits probe: runners/protocol/profile.py)."""

    rank: int  # the rank the others waited for: the one that waited least
    share: float  # of the time, the others' mean wait less its own: a step loses it too
    own: list[float]  # each rank's own work, mean ms
    own_p90: list[float]
    own_max: list[float]
    # each rank's share of the time held back from outside its process (None: the kernel
    # did not say)
    held: list[float] | None
    throttled: float | None = None  # ms its cgroup's CPU quota stopped it during the probe
    seconds: float | None = None  # the probe's
    iterations: int | None = None  # the probe's

    @classmethod
    def of(cls, b: Mapping[str, Any], timed: Any = None) -> Waited | None:
        """The run's waits when its record has them well formed (older records: None);
        `timed`, each rank's held-back share over the timed steps where the record says,
        stands in for the probe's own (longer: a quota shows however light the probe)."""
        w = b.get("waits") if isinstance(b, Mapping) else None
        if not isinstance(w, Mapping):
            return None
        own: Any = w.get("own_ms") or {}
        raw: list[Any] = [own.get("mean"), own.get("p90"), own.get("max"), w.get("wait_share")]
        if not all(_numbers(c) for c in raw):
            return None
        columns = [[float(x) for x in c] for c in raw]  # each a list of numbers: checked
        if not all(len(c) == len(columns[0]) >= 2 for c in columns):
            return None
        mean, p90, top, wait = columns
        # held back: over the timed steps where the record says, else over the probe,
        # else not measured
        probe: Any = w.get("held_share")
        found = [h for h in (timed, probe) if _numbers(h) and len(h) == len(mean)]
        held = [float(x) for x in found[0]] if found else None
        rank = int(np.argmin(wait))
        others = [x for i, x in enumerate(wait) if i != rank]
        stopped: Any = w.get("throttled_ms")
        quota = stopped[rank] if isinstance(stopped, list) and len(stopped) == len(mean) else None
        share = float(np.mean(others)) - wait[rank]
        throttled = float(quota) if isinstance(quota, int | float) else None
        seconds = w.get("seconds")
        length = float(seconds) if isinstance(seconds, int | float) else None
        count: Any = w.get("iterations")
        iterations = int(count) if isinstance(count, int) and count > 0 else None
        return cls(rank, share, mean, p90, top, held, throttled, length, iterations)

    def alone(self) -> bool:
        """Whether the rank waited for was behind on its own, not as one of many ranks
        slowed alike: held back from outside (`starved`), or slower at its own work."""
        return self.starved() or self.slower()

    def slower(self) -> bool:
        """Whether its own work, slower than the others' by OWN_EXPLAINS of what they
        wait for it an iteration, explains their waiting."""
        if not self.seconds or not self.iterations:
            return False
        waited = self.share * 1e3 * self.seconds / self.iterations
        others = float(np.mean([x for i, x in enumerate(self.own) if i != self.rank]))
        return waited > 0 and self.own[self.rank] - others >= OWN_EXPLAINS * waited

    def starved(self) -> bool:
        """Whether something outside its process held the rank waited for back: its
        cgroup's CPU quota stopped it for a share of the probe, or its main thread was
        held back for a share of the time, and it alone (busy neighbours everywhere hold
        every rank back alike)."""
        if self.throttled and self.seconds and self.throttled >= HELD_SHARE * 1e3 * self.seconds:
            return True
        if self.held is None:
            return False
        others = float(np.median([x for i, x in enumerate(self.held) if i != self.rank]))
        mine = self.held[self.rank]
        return mine >= HELD_SHARE and mine >= HELD_ALONE * others

    def text(self) -> str:
        others = [x for i, x in enumerate(self.own) if i != self.rank]
        out = (
            f"its own work {self.own[self.rank]:.2f} ms mean, p90 "
            f"{self.own_p90[self.rank]:.2f}, max {self.own_max[self.rank]:.2f}, the others' "
            f"{float(np.mean(others)):.2f} ms mean; held back from outside its process "
        )
        if self.held is None:
            out += "- (not measured: the kernel gave no per-thread scheduling delays)"
        else:
            held = [x for i, x in enumerate(self.held) if i != self.rank]
            out += (
                f"{self.held[self.rank]:.0%} of the time, the others {float(np.median(held)):.0%}"
            )
        if self.throttled:
            out += f" (its cgroup's CPU quota stopped it {self.throttled:.0f} ms)"
        return out


def _numbers(values: Any) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, int | float) and np.isfinite(v) for v in values
    )


@dataclasses.dataclass(frozen=True)
class WaitedOn:
    """A cell's runs read together: the rank most waited for, in how many runs, and the
    ms a step the others waited for it (the median over those runs)."""

    rank: int
    runs: int  # runs in which it was the one waited for
    of: int  # runs with waits measured
    share: float  # of the time, the others waiting for it (the median over those runs)
    example: Waited

    @classmethod
    def of_cell(cls, runs: pd.DataFrame) -> WaitedOn | None:
        timed = [c.get("held") if isinstance(c, dict) else None for c in runs["cpu"]]
        found = [
            w
            for w in (Waited.of(b, t) for b, t in zip(runs["breakdown"], timed, strict=True))
            if w is not None
        ]
        if not found:
            return None
        ranks = [w.rank for w in found]
        rank = max(set(ranks), key=ranks.count)
        mine = [w for w in found if w.rank == rank]
        share = float(np.median([w.share for w in mine]))
        alone = sum(w.alone() for w in mine)
        return cls(rank, len(mine), len(found), share, mine[0], alone)

    alone: int = 0  # runs in which it was behind on its own (Waited.alone)

    def straggles(self, step: float, basis: float, on_cpu: bool) -> bool:
        """Whether waiting for one rank explains STRAGGLER_SHARE of the time lost (or of
        the step, without a 1-worker baseline), it is the same rank in most of at least
        STRAGGLER_MIN_RUNS runs, and, on CPUs, it was behind on its own in most of them:
        on cores every rank shares, busy neighbours hold some rank back in each run, and
        a rank slowed by its own engine's threads (Horovod's coordinator) is the
        engine's overhead, not a straggler."""
        often = self.of >= STRAGGLER_MIN_RUNS and self.runs >= STRAGGLER_RUNS * self.of
        alone = not on_cpu or self.alone >= STRAGGLER_RUNS * self.runs
        return often and alone and basis > 0 and self.share * step >= STRAGGLER_SHARE * basis

    def text(self, step: float, basis: float, against: str) -> str:
        ms = self.share * step
        return (
            f"the other ranks wait for rank {self.rank} {self.share:.0%} of the time, "
            f"{ms:.2f} ms of a {step:.2f} ms step ({ms / basis:.0%} of the {basis:.2f} ms "
            f"{against}), in {self.runs}/{self.of} runs; {self.example.text()}"
        )


def _contention_evidence(runs: pd.DataFrame) -> str | None:
    """Evidence that others shared the CPUs: other processes, the hypervisor, or more
    compute threads than CPUs. (The CPU the engine's own communication takes is a part
    of the time lost to scaling, `comm CPU`.)"""
    cpu = derived.cell_cpu(runs)
    # the record's `contended` flag warns from 2% of steal; a verdict needs a real share
    if cpu.others > OTHER_CORES_LIMIT or cpu.steal > STEAL_SHARE:
        return (
            f"other processes used {cpu.others:.2f} cores on average while it was timed "
            f"(limit {OTHER_CORES_LIMIT}); the hypervisor stole {cpu.steal:.1%} of the CPU "
            f"time (limit {STEAL_SHARE:.0%})"
        )
    if bool(runs["oversubscribed"].any()):
        return "more worker threads than CPUs (oversubscribed)"
    return None


def _layout(runs: pd.DataFrame) -> derived.Layout:
    layout = runs["layout"].iloc[0] if "layout" in runs else None
    return layout if isinstance(layout, derived.Layout) else derived.Layout(1, 1, 1)


def _verdict(
    name: str, runs: pd.DataFrame, evidence: str, group: Group | None = None, **splits: Any
) -> Verdict:
    """A verdict with its advice, checked against the cell's layout."""
    engine = str(runs["single_node_engine"].iloc[0])
    workers = int(runs["workers"].iloc[0])
    tuned = group.tuned.get((derived.base_engine(engine), workers)) if group else None
    tips = advice.advise(name, _layout(runs), engine, tuned)
    knob = "; ".join(a.text() for a in tips) or "nothing: it scales"
    return Verdict(name, evidence, knob, **splits)


def verdict(cell: pd.DataFrame, twins: pd.DataFrame, group: Group | None = None) -> Verdict | None:
    """The one thing most worth changing for this cell, with its evidence; `group` gives
    the baselines the time lost is measured against."""
    runs = cell[cell["breakdown"].map(bool)]
    p = parts(cell, twins)
    if p is None or not np.isfinite(p.step):
        return None
    multi = int(runs["workers"].iloc[0]) > 1
    lost = group.one_worker(runs, p) if multi and group is not None else None
    basis, against = (p.step, "of its step")
    if lost is not None and lost.lost > 0:
        basis, against = lost.lost, "lost against 1 worker"
    waited = WaitedOn.of_cell(runs) if multi else None
    contended = _contention_evidence(runs)
    on_cpu = str(runs["device"].iloc[0]) != "cuda" if "device" in runs else True
    if waited is not None and waited.straggles(p.step, basis, on_cpu):
        evidence = waited.text(p.step, basis, against)
        if contended is not None:  # one rank behind on CPUs others shared too: both said
            evidence += f"; the CPUs were shared as well: {contended}"
        return _verdict("straggler", runs, evidence, group, lost=lost)
    # who waited, when no one rank explains the time lost: evidence, not the verdict
    spread = "" if waited is None else f"; no straggler: {waited.text(p.step, basis, against)}"
    # batches built slower than steps run decide whatever else shares the CPUs
    if np.isfinite(p.input) and p.input >= p.step:
        evidence = (
            f"building a batch takes {p.input:.2f} ms, the step {p.step:.2f} ms: "
            "even a loader overlapping the step could not keep up"
        )
        return _verdict("input-bound", runs, evidence + spread, group)
    if contended is not None:  # every rank slowed alike: what it lost is not its own
        if lost is not None:
            spread = f"; {_lost_text(lost)}{spread}"
        return _verdict("CPU-contended", runs, contended + spread, group, lost=lost)
    if multi and not np.isfinite(p.exposed):
        evidence = (
            "no compute-only twin: this cell's compute still includes waiting for its "
            "collectives; run bench run without --no-comm-cost"
        )
        return _verdict("undetermined", runs, evidence + spread, group)
    if lost is not None and group is not None:
        return _scaling(runs, p, lost, group.fastest(runs, p), group, spread)
    return _by_share(runs, p, group, spread)


def _lost_text(lost: Split) -> str:
    return "lost " + lost.text()


def _hidden(p: Parts) -> str:
    """The hidden communication, or why it is not a number."""
    if np.isfinite(p.hidden):
        return f"hidden comm {p.hidden:.2f} ms"
    return "hidden comm - (not measured: the engine's probe saw none)"


def _scaling(
    runs: pd.DataFrame, p: Parts, lost: Split, behind: Split | None, group: Group, spread: str
) -> Verdict:
    """The verdict of a multi-worker cell from the largest part of its lost time."""
    evidence = _lost_text(lost)
    if behind is not None:
        evidence += f"; behind by {behind.text()}"
    largest = lost.largest()
    if lost.lost < SCALES * p.step or largest is None:
        return _verdict("scales", runs, evidence + spread, group, lost=lost, behind=behind)
    if largest == "comm wait":
        evidence += "; " + _hidden(p)
    return _verdict(CAUSE[largest], runs, evidence + spread, group, lost=lost, behind=behind)


def _by_share(runs: pd.DataFrame, p: Parts, group: Group | None, spread: str = "") -> Verdict:
    """The verdict from the step's largest share (and the measured peak): a 1-worker
    cell, or a multi-worker one whose 1-worker baseline is missing."""
    evidence = ", ".join(f"{k} {v:.0%}" for k, v in p.shares().items() if np.isfinite(v))
    evidence += f" of a {p.step:.2f} ms step"
    workers = int(runs["workers"].iloc[0])
    if workers > 1:
        engine, model = str(runs["single_node_engine"].iloc[0]), str(runs["model"].iloc[0])
        evidence += (
            "; no 1-worker baseline, so this is the step's largest share, not what "
            f"scaling lost: run bench run --engines {derived.base_engine(engine)} "
            f"--workers 1 --models {model} with the same settings into the same results"
        )
    largest = p.largest()
    if largest is None:
        return Verdict("undetermined", "no phase was measured", "rerun with --profile-steps 10")
    if largest == "exposed comm":
        evidence += "; " + _hidden(p)
        return _verdict("communication-bound", runs, evidence + spread, group)
    util = derived.utilisation(runs)
    at = f"; {util:.1%} of the measured peak" if np.isfinite(util) else "; no peak measured"
    if largest == "other" or (np.isfinite(util) and util < OVERHEAD_UTILISATION):
        return _verdict("overhead-bound", runs, evidence + at + spread, group)
    return _verdict("compute-bound", runs, evidence + at + spread, group)


def verdict_rows(
    ok: pd.DataFrame, twins: pd.DataFrame, tuned: Mapping[tuple[str, int], str] | None = None
) -> pd.DataFrame:
    """One verdict per cell: its name, the time lost against its 1-worker cell and the
    fastest engine (ms per step), the evidence and what to try."""
    group = Group(ok, twins, tuned or {})
    out: list[dict[str, Any]] = []
    for engine, workers, cell, twin in cells(ok, twins):
        v = verdict(cell, twin, group)
        if v is not None:
            out.append(
                {
                    "engine": engine,
                    "workers": int(workers),
                    "verdict": v.name,
                    "lost ms": v.lost.lost if v.lost else np.nan,
                    "largest part": v.lost.largest() if v.lost else "-",
                    "largest ms": _largest_ms(v.lost),
                    "behind ms": v.behind.lost if v.behind else np.nan,
                    "evidence": v.evidence,
                    "try": v.knob,
                }
            )
    return _table(out)


def _largest_ms(lost: Split | None) -> float:
    """The ms a step of the time lost that its largest part takes (NaN without one)."""
    largest = lost.largest() if lost else None
    return lost.parts[largest] if lost is not None and largest is not None else np.nan


def stacked(table: pd.DataFrame) -> Sequence[tuple[str, list[float]]]:
    """(label, [compute, optimizer, exposed comm, other] ms) per row, for the figure."""
    return [
        (
            f"{r['engine']} x{r['workers']}",
            [0.0 if pd.isna(r[c]) else float(r[c]) for c in CATEGORIES],
        )
        for _, r in table.iterrows()
    ]
