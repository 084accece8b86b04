"""Where each engine's step goes, the same categories for every engine, and a verdict.

Per cell (engine, worker count), in milliseconds per step, medians over runs:

  compute       forward and backward of the compute-only twin's profiled steps: the
                step's work without any collective (a 1-worker cell: its own)
  optimizer     the twin's optimizer phase
  exposed comm  synced step - twin step (>= 0): what computation did not hide. On shared
                CPUs it includes the CPU the engine's communication threads take from
                compute (the contention evidence below says when)
  hidden comm   the engine's own count of its collectives' time (a DDP communication
                hook, Horovod's timeline) minus the exposed part; Paddle's Gloo
                allreduce runs synchronously inside backward, so there all of it is exposed
  other         step - compute - optimizer - exposed: framework and launcher overhead
  input         building a step's batch; the suite builds batches before the timed loop,
                so it is outside the step and shown beside it

The step is the timed one (global batch / throughput); the phases come from profiled
steps run after every timed window (runners/protocol/profile.py), never from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench import engines
from bench.measure.contention import OTHER_CORES_LIMIT

INSIDE_BACKWARD = "not hookable"  # Paddle's source: all communication is exposed
CATEGORIES = ("compute", "optimizer", "exposed comm", "other")  # these add up to the step


@dataclasses.dataclass(frozen=True)
class Parts:
    """A cell's step in milliseconds; NaN where it cannot be measured."""

    step: float
    compute: float
    optimizer: float
    exposed: float
    hidden: float
    other: float
    input: float
    source: str  # how the communication's total was measured
    twin_step: float = np.nan

    def shares(self) -> dict[str, float]:
        """Each of CATEGORIES as a fraction of the step."""
        values = (self.compute, self.optimizer, self.exposed, self.other)
        return {c: v / self.step for c, v in zip(CATEGORIES, values, strict=True)}

    def largest(self) -> str | None:
        shares = {k: v for k, v in self.shares().items() if np.isfinite(v)}
        return max(shares, key=lambda k: shares[k]) if shares else None


def _step_ms(runs: pd.DataFrame) -> float:
    tp = runs["throughput"].astype(float)
    gb = runs["global_batch"].astype(float)
    return float(np.median(1e3 * gb / tp)) if len(runs) else np.nan


def _phase(runs: pd.DataFrame, *names: str) -> float:
    """Median over runs of the median over ranks of the sum of phases `names`."""
    per_run = []
    for b in runs["breakdown"]:
        phases = b.get("phases_ms") or {}
        by_rank = zip(*(phases.get(n) or [] for n in names), strict=False)
        vals = [sum(v) for v in by_rank if all(isinstance(x, int | float) for x in v)]
        if vals:
            per_run.append(float(np.median(vals)))
    return float(np.median(per_run)) if per_run else np.nan


def _comm_total(runs: pd.DataFrame) -> tuple[float, str]:
    values, sources = [], set()
    for b in runs["breakdown"]:
        sources.add(str(b.get("comm_source") or ""))
        ranks = [v for v in b.get("comm_ms") or [] if isinstance(v, int | float)]
        if ranks:
            values.append(float(np.median(ranks)))
    source = "; ".join(sorted(s for s in sources if s)) or "not recorded"
    return (float(np.median(values)) if values else np.nan), source


def parts(cell: pd.DataFrame, twins: pd.DataFrame) -> Parts | None:
    """The step of a cell's runs (finished, with a breakdown), against its twin's runs."""
    runs = cell[cell["breakdown"].map(bool)]
    if runs.empty:
        return None
    step, workers = _step_ms(runs), int(runs["workers"].iloc[0])
    twin = twins[twins["breakdown"].map(bool)]
    source = "one worker: no communication"
    if workers == 1:
        own = runs
        exposed = hidden = 0.0
        twin_step = np.nan
    elif twin.empty:  # no compute-only twin: compute still includes the waits
        own, exposed, hidden, twin_step = runs, np.nan, np.nan, np.nan
        source = "no compute-only twin: run without --no-comm-cost"
    else:
        own, twin_step = twin, _step_ms(twin)
        exposed = max(step - twin_step, 0.0)
        total, source = _comm_total(runs)
        if INSIDE_BACKWARD in source:
            total = exposed
        hidden = float(np.clip(total - exposed, 0.0, total)) if np.isfinite(total) else np.nan
    # The profiled steps give the split, the timed steps the total: a profiled step marks
    # and synchronises each phase, so on a sub-millisecond step its phases can add up to
    # more than the timed step; they are then scaled down to it (never up).
    timed = twin_step if own is twin else step
    profiled = _phase(own, "step")
    scale = min(1.0, timed / profiled) if profiled > 0 and np.isfinite(timed) else 1.0
    compute = scale * _phase(own, "forward", "backward")
    optimizer = scale * _phase(own, "optimizer")
    known = compute + optimizer + (exposed if np.isfinite(exposed) else 0.0)
    other = max(step - known, 0.0)
    inp = float(np.nanmedian(runs["input_ms"].astype(float))) if len(runs) else np.nan
    return Parts(step, compute, optimizer, exposed, hidden, other, inp, source, twin_step)


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


# --- the verdict --------------------------------------------------------------------

STRAGGLER_SHARE = 0.05  # a rank's extra own work, as a share of the step, to matter
SATURATED = 0.9  # the run's own CPU use, as a share of the machine's CPUs
OVERHEAD_UTILISATION = 0.05  # compute below this share of the measured peak: overhead
STEAL_SHARE = 0.10  # CPU time the hypervisor gave other guests, to be the cause


@dataclasses.dataclass(frozen=True)
class Verdict:
    name: str  # compute-bound, communication-bound, straggler, input-bound, ...
    evidence: str  # the numbers behind it
    knob: str  # what to try


def _straggler(runs: pd.DataFrame, step: float) -> tuple[int, str] | None:
    """(rank, evidence) when the same rank's own work (its forward, which never waits for
    another rank) is the slowest beyond the noise in at least half of the runs."""
    flagged: list[tuple[int, float, float]] = []
    for b in runs["breakdown"]:
        fwd = (b.get("phases_ms") or {}).get("forward") or []
        iqr = b.get("forward_iqr_ms") or []
        if len(fwd) < 2 or len(iqr) != len(fwd) or any(v is None for v in fwd):
            continue
        slow = int(np.argmax(fwd))
        others = [i for i in range(len(fwd)) if i != slow]
        rest = float(np.median([fwd[i] for i in others]))
        above = all(
            iqr[slow][0] is not None and iqr[i][1] is not None and iqr[slow][0] > iqr[i][1]
            for i in others
        )
        if above and fwd[slow] - rest >= STRAGGLER_SHARE * step:
            flagged.append((slow, float(fwd[slow]), rest))
    ranks = [r for r, _, _ in flagged]
    if not ranks:
        return None
    rank = max(set(ranks), key=ranks.count)
    if 2 * ranks.count(rank) < len(runs):
        return None
    mine = [(s, r) for k, s, r in flagged if k == rank]
    slow_ms, rest_ms = np.median([s for s, _ in mine]), np.median([r for _, r in mine])
    return rank, (
        f"rank {rank}'s own work (forward) {slow_ms:.2f} ms vs {rest_ms:.2f} ms on the other "
        f"ranks, its quartiles above theirs, in {ranks.count(rank)}/{len(runs)} runs; "
        f"step {step:.2f} ms"
    )


@dataclasses.dataclass(frozen=True)
class Cpu:
    """Who used the CPUs while a cell was timed, medians over its runs."""

    others: float  # cores other processes used on average
    steal: float  # share of the CPU time the hypervisor gave other guests
    own: float  # cores the run's own processes used, on the most loaded machine
    cpus: float  # the machine's CPUs


def _top(values: Any) -> float:
    a = np.asarray(values, dtype=float)
    return float(np.nanmax(a)) if np.isfinite(a).any() else np.nan


def _mid(values: Any) -> float:
    a = np.asarray(values, dtype=float)
    return float(np.nanmedian(a)) if np.isfinite(a).any() else np.nan


def _machine(
    loads: list[dict[str, Any]], hosts: int, emulated: bool, labelled: bool
) -> tuple[float, ...]:
    """(others, steal, own, cpus) of one run. A labelled rank (bench run) counted every
    process of the run on its machine already. An unlabelled one measured its own
    launcher's tree against the whole machine; over an emulated link every namespace
    host is this one machine, so the other hosts' trees are the run's own, not other
    processes."""
    if not loads:
        return (np.nan,) * 4
    keys = ("other_cpu_cores", "own_cpu_cores", "steal_fraction", "cpu_count")
    others, own, steal, cpus = (
        [
            float(c[k])
            if isinstance(c.get(k), int | float) and not isinstance(c.get(k), bool)
            else np.nan
            for c in loads
        ]
        for k in keys
    )
    if emulated and hosts > 1 and not labelled:
        if len(loads) % hosts:  # ranks not spread evenly: who is whose cannot be told
            return (np.nan,) * 4
        per = len(loads) // hosts  # ranks are placed host by host
        busy = _mid(np.add(others, own))  # the machine, as each rank saw it
        # the hosts' trees, at most the whole machine's use (trees that share an
        # ancestor each count the other's processes already)
        trees = min(float(np.sum([own[h * per] for h in range(hosts)])), busy)
        return busy - trees, _top(steal), trees, _top(cpus)
    return _top(others), _top(steal), _top(own), _top(cpus)


def _cpu(runs: pd.DataFrame) -> Cpu:
    per_run = [
        _machine(loads, int(n), bool(e), bool(lab))
        for loads, n, e, lab in runs[["loads", "nodes", "emulated", "labelled"]].values
    ]
    if not per_run:
        return Cpu(np.nan, np.nan, np.nan, np.nan)
    return Cpu(*(_mid(col) for col in np.asarray(per_run, dtype=float).T))


def _contended(runs: pd.DataFrame, twins: pd.DataFrame, p: Parts) -> str | None:
    """Evidence that the CPUs were shared: with other processes, by oversubscription, or
    with the engine's own communication threads on saturated cores."""
    cpu = _cpu(runs)
    # the record's `contended` flag warns from 2% of steal; a verdict needs a real share
    if cpu.others > OTHER_CORES_LIMIT or cpu.steal > STEAL_SHARE:
        return (
            f"other processes used {cpu.others:.2f} cores on average while it was timed "
            f"(limit {OTHER_CORES_LIMIT}); the hypervisor stole {cpu.steal:.1%} of the CPU "
            f"time (limit {STEAL_SHARE:.0%})"
        )
    if bool(runs["oversubscribed"].any()):
        return "more worker threads than CPUs (oversubscribed)"
    twin_own = _cpu(twins).own
    if not (np.isfinite(p.exposed) and np.isfinite(twin_own) and np.isfinite(cpu.own)):
        return None
    if cpu.own < SATURATED * cpu.cpus or p.largest() != "exposed comm":
        return None
    extra = cpu.own * p.step - twin_own * p.twin_step  # CPU-ms per step the collectives add
    # on saturated cores that CPU delays the step by its share of each core, not by all of
    # it (every worker of the machine is in `own`): that is what the exposed time can hold
    lost = extra / cpu.cpus
    if not np.isfinite(lost) or lost < 0.5 * p.exposed:
        return None
    return (
        f"the run used {cpu.own:.2f} of {cpu.cpus:.0f} CPUs; its collectives add {extra:.2f} "
        f"CPU-ms per step over the compute-only twin ({twin_own:.2f} CPUs), {lost:.2f} ms of "
        f"each CPU's time, against {p.exposed:.2f} ms of exposed communication: the "
        "engine's threads take the cores compute needs"
    )


def _utilisation(runs: pd.DataFrame, p: Parts) -> float:
    """Achieved share of the measured peak during the compute phases; NaN without a peak."""
    r = runs.iloc[0]
    peak = float(r["peak_gflops"]) / max(int(r["workers"]), 1)
    flops = float(r["train_flops"]) * float(r["per_worker_batch"] or np.nan)
    if not (np.isfinite(peak) and peak > 0 and np.isfinite(flops) and p.compute > 0):
        return np.nan
    return flops / (p.compute / 1e3) / 1e9 / peak


def _comm_knobs(engine: str) -> str:
    try:
        return engines.get(engine).comm_knobs
    except (KeyError, ValueError):  # an engine no longer registered
        return "larger gradient buckets"


def verdict(cell: pd.DataFrame, twins: pd.DataFrame) -> Verdict | None:
    """The one thing most worth changing for this cell, with its evidence."""
    runs = cell[cell["breakdown"].map(bool)]
    p = parts(cell, twins)
    if p is None or not np.isfinite(p.step):
        return None
    straggler = _straggler(runs, p.step)
    if straggler is not None:
        return Verdict(
            "straggler",
            straggler[1],
            f"find what slows rank {straggler[0]} (its host, its data, its "
            "neighbours); fewer workers per node if it shares cores",
        )
    # batches built slower than steps run decide whatever else shares the CPUs
    if np.isfinite(p.input) and p.input >= p.step:
        return Verdict(
            "input-bound",
            f"building a batch takes {p.input:.2f} ms, the step {p.step:.2f} ms: "
            "even a loader overlapping the step could not keep up",
            "cheaper input (pre-staged or cached data, less augmentation) or more loader workers",
        )
    contended = _contended(runs, twins, p)
    if contended is not None:
        return Verdict(
            "CPU-contended",
            contended,
            "run alone, or leave a core free: fewer threads per worker or fewer workers per node",
        )
    return _by_share(runs, p)


def _by_share(runs: pd.DataFrame, p: Parts) -> Verdict:
    """The verdict from the step's largest category (and the measured peak)."""
    if int(runs["workers"].iloc[0]) > 1 and not np.isfinite(p.exposed):
        return Verdict("undetermined",
                       "no compute-only twin: this cell's compute still includes waiting "
                       "for its collectives", "run bench run without --no-comm-cost")  # fmt: skip
    largest = p.largest()
    evidence = ", ".join(f"{k} {v:.0%}" for k, v in p.shares().items() if np.isfinite(v))
    evidence += f" of a {p.step:.2f} ms step"
    if largest is None:
        return Verdict("undetermined", "no phase was measured", "rerun with --profile-steps 10")
    if largest == "exposed comm":
        engine = str(runs["single_node_engine"].iloc[0]).split("[")[0]
        return Verdict("communication-bound", evidence + f"; hidden comm {p.hidden:.2f} ms",
                       _comm_knobs(engine) + "; fewer workers per node")  # fmt: skip
    util = _utilisation(runs, p)
    if largest == "other" or (np.isfinite(util) and util < OVERHEAD_UTILISATION):
        at = f"; compute at {util:.1%} of the measured peak" if np.isfinite(util) else ""
        return Verdict("overhead-bound", evidence + at,
                       "a larger batch per worker: the per-step cost is fixed")  # fmt: skip
    at = f"; {util:.0%} of the measured peak" if np.isfinite(util) else "; no peak measured"
    return Verdict("compute-bound", evidence + at,
                   "more threads per worker, or fp16/bf16 where the hardware has it")  # fmt: skip


def verdict_rows(ok: pd.DataFrame, twins: pd.DataFrame) -> pd.DataFrame:
    out: list[dict[str, Any]] = []
    for engine, workers, cell, twin in cells(ok, twins):
        v = verdict(cell, twin)
        if v is not None:
            out.append(
                {
                    "engine": engine,
                    "workers": int(workers),
                    "verdict": v.name,
                    "evidence": v.evidence,
                    "try": v.knob,
                }
            )
    return _table(out)


def stacked(table: pd.DataFrame) -> Sequence[tuple[str, list[float]]]:
    """(label, [compute, optimizer, exposed comm, other] ms) per row, for the figure."""
    return [
        (
            f"{r['engine']} x{r['workers']}",
            [0.0 if pd.isna(r[c]) else float(r[c]) for c in CATEGORIES],
        )
        for _, r in table.iterrows()
    ]
