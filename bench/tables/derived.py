"""The figures every analysis layer shares, each defined once and named once.

Compare, the step breakdown and its verdict, `bench predict` and the HTML report all
read these; none derives them again. Per record:

  layout              how the run's workers shared CPUs: workers x threads, plus the
                      threads the engine keeps busy beside compute, against the CPUs
  workers_counted     whose CPU each rank's contention measure holds
  peak_capacity       GFLOP/s the run's workers reach at the machine's measured peak
  step_s              the timed step: global batch over the record's throughput (every
                      timed step, slowest rank): what compare's throughput is
  median_window_step_s  global batch over the median window's throughput: one run's
                      typical step, what `bench predict` fits (a window's luck aside)

Per cell (the frame rows of one engine at one worker count, medians over runs):

  parts               the step's compute, optimizer, exposed and hidden communication,
                      other, input; with the CPU the run used (`Cpu`), the exposed part
                      split into the CPU communication took from compute and waiting
  utilisation         achieved FLOP/s over the timed step against the measured peak:
                      the one "of peak" figure
  comm share          exposed / step: the share of the step (and of throughput) that
                      communication did not hide
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bench import engines
from bench.records import packed

# --- per record -------------------------------------------------------------------


def emulated(r: Mapping[str, Any]) -> bool:
    """Whether the run crossed an emulated link: every host a namespace of this machine."""
    link = r.get("link")
    return isinstance(link, dict) and bool(link.get("emulated"))


def labelled(r: Mapping[str, Any]) -> bool:
    """Launched by bench run (an `attempt` label): each rank's own CPU is then every
    process of the run on its machine, not its launcher's tree alone
    (bench/measure/contention.py)."""
    labels = r.get("labels")
    return isinstance(labels, dict) and bool(labels.get("attempt"))


def base_engine(variant: str) -> str:
    """The registered engine of a variant name: `horovod[mpi]@2nodes/100mbit` -> horovod,
    `ddp~A` (a side of an A/A experiment) -> ddp."""
    return variant.split("[")[0].split("@")[0].split("/")[0].split("~")[0]


@functools.lru_cache(maxsize=256)  # a registry fact per (engine, world): asked per record
def comm_threads(engine: str, world: int) -> int:
    """Threads per worker the engine keeps busy beside compute while it communicates
    (registry `comm_threads`); none in a 1-worker run, which has no collectives."""
    if world <= 1:
        return 0
    try:
        return engines.get(base_engine(engine)).comm_threads
    except ValueError:  # an engine no longer registered: assume the common one thread
        return 1


@dataclasses.dataclass(frozen=True)
class Layout:
    """Workers sharing one machine's CPUs: `workers` x (`threads` + the engine's
    `engine_threads`) against `cpus`."""

    workers: int
    cpus: int
    threads: int
    engine_threads: int = 0

    @property
    def demand(self) -> float:
        """Compute threads per CPU."""
        return self.workers * self.threads / self.cpus

    @property
    def shared(self) -> bool:
        """No spare core for the engine's communication threads: they take CPU from compute."""
        return self.demand >= 1

    @property
    def oversubscription(self) -> float:
        """How much slower each worker's compute runs than with a core per thread."""
        return max(1.0, self.demand)

    @property
    def oversubscribed(self) -> bool:
        """More compute threads than CPUs."""
        return self.workers * self.threads > self.cpus

    @property
    def busy(self) -> int:
        """Threads that want a CPU at once: compute plus the engine's communication."""
        return self.workers * (self.threads + self.engine_threads)

    def fits(self) -> bool:
        """Every busy thread has a CPU of its own."""
        return self.busy <= self.cpus

    def changed(self, workers: int = 0, threads: int = 0) -> Layout:
        """This layout with `workers` and `threads` added (negative: removed)."""
        return dataclasses.replace(
            self, workers=self.workers + workers, threads=self.threads + threads
        )

    def text(self) -> str:
        extra = f" + {self.engine_threads} comm" if self.engine_threads else ""
        return f"{self.workers} workers x ({self.threads} threads{extra}) on {self.cpus} CPUs"


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def layouts(r: Mapping[str, Any]) -> tuple[Layout, Layout]:
    """(machine, host): how the run's workers shared one machine's CPUs, and how its
    launcher placed them on each host.

    Emulated links run every namespace on this one machine, so there the machine holds
    the whole world while each host (namespace) holds its share. Records without a
    `cpu_budget` are read from the spec's threads and the machine's CPU count.
    """
    budget: Mapping[str, Any] = r.get("cpu_budget") or {}
    spec: Mapping[str, Any] = r.get("spec") or {}
    world = _int(r.get("world_size"), 1)
    threads = _int(budget.get("threads_per_worker"), _int(spec.get("threads"), 1))
    cpus = _int(budget.get("usable_cpus"), _int((r.get("env") or {}).get("cpu_count"), 1))
    per_host = _int(budget.get("workers_on_host"), max(world // _int(r.get("nodes"), 1), 1))
    comm = comm_threads(str(r.get("engine") or ""), world)
    host = Layout(per_host, max(cpus, 1), max(threads, 1), comm)
    machine = dataclasses.replace(host, workers=world) if emulated(r) else host
    return machine, host


def oversubscription(r: Mapping[str, Any]) -> tuple[bool, str]:
    """(oversubscribed?, 'W workers x T threads > C CPUs') for a record.

    The runner's own flag where it wrote one; records before it are judged from the
    machine's CPU count (marked 'inferred'), multi-node ones not at all.
    """
    budget: Mapping[str, Any] = r.get("cpu_budget") or {}
    if "oversubscribed" in r and budget:
        w, t, c = (budget.get(k) for k in ("workers_on_host", "threads_per_worker", "usable_cpus"))
        return bool(r["oversubscribed"]), f"{w} workers x {t} threads > {c} CPUs"
    if not (r.get("env") or {}).get("cpu_count") or _int(r.get("nodes"), 1) > 1:
        return False, ""
    machine, _ = layouts(r)
    text = f"{machine.workers} workers x {machine.threads} threads > {machine.cpus} CPUs"
    return machine.oversubscribed, text + " (inferred)"


def peak_capacity(r: Mapping[str, Any]) -> float:
    """GFLOP/s all of a run's workers could reach at the measured peak; NaN if unmeasured.

    Each worker's threads at the peak measured with that many threads, as far as the
    machine's CPUs go: workers sharing cores share their peak (namespaces of an
    emulated link all share this one machine). One GPU per worker on a GPU.
    """
    peak: Mapping[str, Any] = r.get("peak") or {}
    gflops = peak.get("gflops")
    if not isinstance(gflops, int | float) or gflops <= 0:
        return np.nan
    world = _int(r.get("world_size"), 1)
    if peak.get("device") == "cuda":
        return float(gflops) * world
    machine, _ = layouts(r)
    peak_threads = _int(peak.get("threads"), 1)
    machines = 1 if emulated(r) else _int(r.get("nodes"), 1)
    return float(gflops) * machines * min(world / machines, machine.cpus / peak_threads)


def workers_counted(r: Mapping[str, Any], ranks: int) -> list[int]:
    """For each rank, the workers whose CPU its `own_cpu_cores` holds.

    A run `bench run` launched carries an `attempt` label, and each rank counted every
    process with it on its machine: the ranks that share its host name (every
    namespace of one machine shares it). Without the label a rank counted its
    launcher's tree: the workers its launcher started on that host."""
    machine, host = layouts(r)
    if not labelled(r):
        return [host.workers] * ranks
    hosts = r.get("hosts")
    if isinstance(hosts, list) and len(hosts) == ranks and all(isinstance(h, str) for h in hosts):
        return [hosts.count(h) for h in hosts]
    return [machine.workers] * ranks


def step_s(r: Mapping[str, Any]) -> float:
    """The timed step: global batch over the record's throughput; NaN without them."""
    batch, tp = r.get("global_batch"), r.get("throughput")
    ok = all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in (batch, tp))
    return float(batch) / float(tp) if ok else np.nan  # type: ignore[arg-type]


def median_window_step_s(r: Mapping[str, Any]) -> float | None:
    """One run's typical step: global batch over its median window's throughput."""
    batch = r.get("global_batch") or 0
    tput = packed.window_throughput(r)
    windows = [] if tput is None or tput.ndim != 1 else [float(w) for w in tput if w > 0]
    if not windows and r.get("throughput"):
        windows = [r["throughput"]]
    return batch / float(np.median(windows)) if batch and windows else None


def _number(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else np.nan


def rank_cpu(r: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per rank, from its contention measure: the cores the run's own processes used on
    its machine (`own`), the cores others used there (`others`), the hypervisor's
    `steal` share, the machine's `cpus`, and `per_worker` (its own cores over the
    workers they held, `workers_counted`), and `held`, the share of the timed span its
    main thread was held back from outside its process. NaN where a rank did not measure."""
    loads = [c for c in r.get("contention") or [] if isinstance(c, dict)]
    if not loads:
        return {k: [] for k in ("own", "others", "steal", "cpus", "per_worker", "held")}
    machine, _ = layouts(r)
    counted = workers_counted(r, len(loads))
    own_seen = [_number(c.get("own_cpu_cores")) for c in loads]
    per_worker = [o / n for o, n in zip(own_seen, counted, strict=True)]
    # the run's own use of the machine: every worker on it at the ranks' per-worker rate;
    # what a rank saw beyond that (the other namespaces' trees it could not tell as the
    # run's) goes back to the run, the rest is others'
    own = [p * machine.workers for p in per_worker]
    others = [
        max(_number(c.get("other_cpu_cores")) + seen - mine, 0.0)
        for c, seen, mine in zip(loads, own_seen, own, strict=True)
    ]
    return {
        "own": own,
        "others": others,
        "steal": [_number(c.get("steal_fraction")) for c in loads],
        "cpus": [_number(c.get("cpu_count")) for c in loads],
        "per_worker": per_worker,
        # held back from outside its process while timed (a quota, a neighbour on its core)
        "held": [_number(c.get("held_share")) for c in loads],
    }


# --- per cell -----------------------------------------------------------------------


def _top(values: Any) -> float:
    a = np.asarray(values, dtype=float)
    return float(np.nanmax(a)) if a.size and np.isfinite(a).any() else np.nan


def _mid(values: Any) -> float:
    a = np.asarray(values, dtype=float)
    return float(np.nanmedian(a)) if a.size and np.isfinite(a).any() else np.nan


@dataclasses.dataclass(frozen=True)
class Cpu:
    """Who used the CPUs while a cell was timed, medians over its runs of each run's
    most loaded machine."""

    others: float  # cores other processes used on average
    steal: float  # share of the CPU time the hypervisor gave other guests
    own: float  # cores the run's own processes used
    cpus: float  # the machine's CPUs


def cell_cpu(runs: pd.DataFrame) -> Cpu:
    """The CPU of a cell's runs (frame column `cpu`: `rank_cpu` of each record)."""
    per_run = [
        (_top(c["others"]), _top(c["steal"]), _top(c["own"]), _top(c["cpus"]))
        for c in runs["cpu"]
        if isinstance(c, dict) and c.get("own")
    ]
    if not per_run:
        return Cpu(np.nan, np.nan, np.nan, np.nan)
    return Cpu(*(_mid(col) for col in np.asarray(per_run, dtype=float).T))


SATURATED = 0.9  # the run's own CPU use, as a share of the machine's CPUs


@dataclasses.dataclass(frozen=True)
class Parts:
    """A cell's step in milliseconds; NaN where it cannot be measured.

    step = compute + optimizer + exposed + other (other is never negative, so where
    the profiled phases exceed the step the sum does too). exposed = comm_cpu + wait:
    the CPU the collectives took from compute on saturated cores, and the rest.
    """

    step: float
    compute: float
    optimizer: float
    exposed: float
    hidden: float
    other: float
    input: float
    source: str  # how the communication's total was measured
    twin_step: float = np.nan
    comm_cpu: float = 0.0

    @property
    def wait(self) -> float:
        return self.exposed - self.comm_cpu

    def shares(self) -> dict[str, float]:
        """Each of compute, optimizer, exposed comm, other as a fraction of the step."""
        values = (self.compute, self.optimizer, self.exposed, self.other)
        return {c: v / self.step for c, v in zip(CATEGORIES, values, strict=True)}

    def largest(self) -> str | None:
        shares = {k: v for k, v in self.shares().items() if np.isfinite(v)}
        return max(shares, key=lambda k: shares[k]) if shares else None

    @property
    def comm_share(self) -> float:
        """exposed / step: the share of the step communication did not hide (compare's
        `comm %` is the same quantity, estimated from throughputs with an interval)."""
        return self.exposed / self.step if self.step > 0 else np.nan


CATEGORIES = ("compute", "optimizer", "exposed comm", "other")  # these add up to the step


def cell_step_ms(runs: pd.DataFrame) -> float:
    """The cell's step: median over runs of `step_s` (frame column `step_s`), in ms."""
    return 1e3 * _mid(runs["step_s"]) if len(runs) else np.nan


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


def _inside_backward(runs: pd.DataFrame) -> bool:
    """The engine's collectives run synchronously inside backward (registry
    `comm_inside_backward`): all of its communication is exposed."""
    engine = base_engine(str(runs["single_node_engine"].iloc[0]))
    try:
        return engines.get(engine).comm_inside_backward
    except ValueError:
        return False


def _comm_cpu(runs: pd.DataFrame, twin: pd.DataFrame, step: float, twin_step: float) -> float:
    """CPU-ms per step the collectives took from compute: on saturated cores their extra
    CPU over the compute-only twin delays the step by its share of each CPU (every
    worker of the machine is in `own`); 0 where a core was spare."""
    cpu, twin_own = cell_cpu(runs), cell_cpu(twin).own
    if not all(np.isfinite(v) for v in (cpu.own, cpu.cpus, twin_own)) or cpu.cpus <= 0:
        return 0.0
    if cpu.own < SATURATED * cpu.cpus:
        return 0.0
    extra = cpu.own * step - twin_own * twin_step
    return max(extra / cpu.cpus, 0.0)


def parts(cell: pd.DataFrame, twins: pd.DataFrame) -> Parts | None:
    """The step of a cell's runs (finished, with a breakdown), against its twin's runs.

    compute and optimizer are the compute-only twin's profiled phases (a 1-worker cell:
    its own), because in a synced step the backward or the optimizer includes waiting
    for the collectives; exposed = synced step - twin step; hidden = the engine's own
    count of its collectives' time minus the exposed part.
    """
    runs = cell[cell["breakdown"].map(bool)]
    if runs.empty:
        return None
    step, workers = cell_step_ms(runs), int(runs["workers"].iloc[0])
    twin = twins[twins["breakdown"].map(bool)]
    source, comm_cpu = "one worker: no communication", 0.0
    if workers == 1:
        own, exposed, hidden, twin_step = runs, 0.0, 0.0, np.nan
    elif twin.empty:  # no compute-only twin: compute still includes the waits
        own, exposed, hidden, twin_step = runs, np.nan, np.nan, np.nan
        source = "no compute-only twin: run without --no-comm-cost"
    else:
        own, twin_step = twin, cell_step_ms(twin)
        exposed = max(step - twin_step, 0.0)
        total, source = _comm_total(runs)
        if _inside_backward(runs):
            total = exposed
        hidden = float(np.clip(total - exposed, 0.0, total)) if np.isfinite(total) else np.nan
        comm_cpu = min(_comm_cpu(runs, twin, step, twin_step), exposed)
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
    inp = _mid(runs["input_ms"]) if len(runs) else np.nan
    return Parts(step, compute, optimizer, exposed, hidden, other, inp, source, twin_step, comm_cpu)


def utilisation(cell: pd.DataFrame) -> float:
    """The one "of peak" figure: achieved FLOP/s over the timed step (median throughput x
    training FLOPs per sample) over the GFLOP/s the cell's workers reach at the measured
    peak (`peak_capacity`). Above 1 means the peak or the FLOP count is wrong; NaN
    without a peak or a FLOP count."""
    if cell.empty:
        return np.nan
    achieved = _mid(cell["throughput"]) * float(cell["train_flops"].iloc[0]) / 1e9
    peak = _mid(cell["peak_gflops"])
    return achieved / peak if np.isfinite(achieved) and np.isfinite(peak) and peak > 0 else np.nan
