"""The scaling model itself: pure arithmetic on measured inputs, no records.

Every term is taken where the measurements can identify it (docs/prediction.md):

- an all-reduce of S bytes in m messages over n workers on a ring costs
  2(n-1)/n x S / busbw + m x (fixed + 2(n-1) x hop): bus bandwidth from the large
  messages of `bench collectives`, latency from the small ones, and the latency split
  into a fixed cost per call (dispatch, an engine's cycle) and a cost per ring step
  from collectives at two worker counts or more (`split_latency`);
- the compute-only twin gives compute; the synced run minus the twin is the step's
  exposed communication plus the CPU that communication takes from the cores the
  computation runs on (`Layout`): on a machine whose cores are all busy with worker
  threads, the engine's communication threads (Gloo's, Horovod's) slow the step by the
  CPU time they use, which a faster link cannot remove; on free cores that term is 0;
- what the twin hid is comm(n0) - exposed, kept as a share of compute. When the fit
  saw all its communication hidden it cannot see how much more the engine could hide:
  the prediction is then a lower bound on throughput (`Fit.censored`), with the
  engine hiding up to all of its compute as the upper bound (on cores that are not
  oversubscribed beyond the fit's: see below);
- on cores more oversubscribed than the fit's, the model adds each worker's waits to
  its stretched compute (no overlap); a work-conserving scheduler lets other workers
  compute during them, which gives the upper end (`Target.shared_step_s`). The point
  then lies between the two, censored fit or not (`report.predict`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from bench.core.errors import PredictError
from bench.tables.derived import Layout

# exposed communication at or below this share of the modelled communication reads as
# "all hidden": the fit then bounds the overlap from below instead of measuring it
CENSOR_SHARE = 0.05


def ring_factor(workers: int) -> float:
    """The share 2(n-1)/n of the buffer each worker sends (and receives) in a ring all-reduce."""
    return 2 * (workers - 1) / workers if workers > 1 else 0.0


@dataclasses.dataclass(frozen=True)
class RecordCost:
    """One `bench collectives` record reduced to the model's two numbers."""

    workers: int
    latency_s: float  # the whole all-reduce of a small message
    busbw_bps: float  # bytes/s


def record_cost(results: Sequence[Mapping[str, object]], workers: int) -> RecordCost:
    """Latency from the smallest message, bus bandwidth from the largest.

    time(S) = latency + S x 2(n-1)/n / busbw through the smallest and the largest
    timed sizes: bandwidth is the slope between them (the largest dominates) and
    latency what the smallest took beyond its bytes. An unweighted line through all
    sizes would let the largest decide the intercept too, where it is noise.
    """
    pts = sorted(
        (float(r["bytes"]), float(r["latency_s"]))  # type: ignore[arg-type]
        for r in results
        if isinstance(r.get("bytes"), int | float)
        and isinstance(r.get("latency_s"), int | float)
        and r["bytes"] > 0  # type: ignore[operator]
        and r["latency_s"] > 0  # type: ignore[operator]
    )
    if len({s for s, _ in pts}) < 2:
        raise PredictError(
            "a collective record needs two message sizes or more (latency from the smallest, "
            "bandwidth from the largest): rerun bench collectives with --sizes 4096,16777216"
        )
    (s0, t0), (s1, t1) = pts[0], pts[-1]
    f = ring_factor(workers) or 1.0
    if t1 <= t0:
        raise PredictError(
            f"a collective record's largest message ({s1:,.0f} B) took no longer than its "
            f"smallest ({s0:,.0f} B): its sizes do not reach the bandwidth; add larger --sizes"
        )
    busbw = (s1 - s0) * f / (t1 - t0)
    return RecordCost(workers, max(t0 - s0 * f / busbw, 0.0), busbw)


@dataclasses.dataclass(frozen=True)
class LatencySplit:
    fixed_s: float  # per all-reduce call, whatever the ring's length (< 0: see split_latency)
    hop_s: float  # per ring step: a call pays 2(n-1) of them
    identified: bool  # False: collectives at one worker count, the split was assumed


def split_latency(latency_by_workers: Mapping[int, float], hop_share: float = 1.0) -> LatencySplit:
    """latency(n) = fixed + 2(n-1) x hop, by least squares over the measured worker counts.

    With one worker count the split is not identifiable: `hop_share` of the latency is
    taken as per-hop (1: the ring's textbook assumption) and `identified` is False.
    """
    pts = [(2 * (n - 1), lat) for n, lat in latency_by_workers.items() if n > 1]
    if not pts:
        raise PredictError("no collective measured at 2 workers or more")
    if len(pts) == 1:
        x, lat = pts[0]
        return LatencySplit(lat * (1 - hop_share), lat * hop_share / x, False)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    hop = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
    fixed = my - hop * mx
    if hop < 0:  # latency that falls with more workers is noise: all of it is fixed
        return LatencySplit(max(my, 0.0), 0.0, True)
    # A negative fixed part: latency grows faster than the ring's hops (4 workers
    # sharing 2 cores pay for the cores, not the wire). The line is kept, so every
    # measured worker count is reproduced; forced through the origin it would
    # overstate the 2-worker latency (4x on the predict check's machine).
    return LatencySplit(fixed, hop, True)


@dataclasses.dataclass(frozen=True)
class LinkCost:
    """The all-reduce on one link: the latency split and bus bandwidth by worker count."""

    latency: LatencySplit
    busbw_bps: Mapping[int, float]  # measured worker count -> bytes/s
    rate_bps: int | None  # the emulated rate; None: the machine's own link

    def busbw_at(self, workers: int) -> float:
        """Bus bandwidth measured at the nearest worker count (ties: the larger)."""
        nearest = min(self.busbw_bps, key=lambda n: (abs(n - workers), -n))
        return self.busbw_bps[nearest]

    def allreduce_s(
        self,
        grad_bytes: float,
        messages: int,
        workers: int,
        *,
        busbw_bps: float | None = None,
        hop_s: float | None = None,
    ) -> float:
        """Seconds per step: the ring's bytes at bus bandwidth, plus each message's
        latency. An emulated link serialises every frame at its rate, as a wire does
        (bench/launch/netns.py), so no bytes cross for free."""
        if workers <= 1:
            return 0.0
        bw = self.busbw_at(workers) if busbw_bps is None else busbw_bps
        hop = self.latency.hop_s if hop_s is None else hop_s
        per_call = max(self.latency.fixed_s + 2 * (workers - 1) * hop, 0.0)
        return ring_factor(workers) * grad_bytes / bw + messages * per_call


@dataclasses.dataclass(frozen=True)
class Fit:
    """One engine and model, fitted at `workers` workers on one link."""

    engine: str
    variant: str  # the engine as compare names it
    model: str
    spec: dict[str, object]
    workers: int  # n0, where it was measured
    per_worker_batch: int
    grad_bytes: float
    bucket_bytes: float
    compute_s: float
    sync_s: float
    comm_cpu_s: float  # CPU seconds per step per worker that synchronising adds
    link: LinkCost
    machine: Layout  # how the fit's workers shared the CPUs they ran on
    hosts: Layout  # how the launcher placed them per host (namespaces: one each)
    run_ids: tuple[str, ...] = ()
    hidden_share_given: float | None = None  # what-if: stated instead of measured
    compute_machine: Layout | None = None  # where compute was measured (None: `machine`)

    @property
    def messages(self) -> int:
        return max(1, math.ceil(self.grad_bytes / self.bucket_bytes))

    @property
    def strong(self) -> bool:
        return self.spec.get("scaling") == "strong"

    @property
    def comm_s(self) -> float:
        """The model's all-reduce time per step where it was measured."""
        return self.link.allreduce_s(self.grad_bytes, self.messages, self.workers)

    def comm_cpu_per_worker_s(self, workers: int) -> float:
        """One worker's communication CPU per step at `workers`, grown with 2(n-1)/n."""
        if self.workers <= 1:
            return 0.0
        per_worker = self.comm_cpu_s * ring_factor(workers) / ring_factor(self.workers)
        return max(per_worker, 0.0)

    def cpu_raw_s(self, layout: Layout, workers: int) -> float:
        """CPU that communication takes from compute per step: 0 on free cores."""
        if not layout.shared:
            return 0.0
        return self.comm_cpu_per_worker_s(workers) * layout.workers / layout.cpus

    @property
    def cpu_calibration(self) -> float:
        """The share of the raw CPU term the fit's gap left room for (never more than seen)."""
        raw0 = self.cpu_raw_s(self.machine, self.workers)
        return self.cpu_s / raw0 if raw0 > 0 else 1.0

    @property
    def gap_s(self) -> float:
        return max(self.sync_s - self.compute_s, 0.0)

    @property
    def cpu_s(self) -> float:
        """The CPU term at the fit, never more than the gap it is part of."""
        return min(self.cpu_raw_s(self.machine, self.workers), self.gap_s)

    @property
    def exposed_s(self) -> float:
        """Communication the fit's step did not hide (gap minus the CPU term)."""
        return self.gap_s - self.cpu_s

    @property
    def hidden_s(self) -> float:
        if self.hidden_share_given is not None:
            return self.hidden_share_given * self.compute_s
        return min(max(self.comm_s - self.exposed_s, 0.0), self.compute_s)

    @property
    def hidden_share(self) -> float:
        """Communication hidden under compute at n0, as a share of compute (0..1)."""
        return self.hidden_s / self.compute_s if self.compute_s > 0 else 0.0

    @property
    def overlap(self) -> float:
        """Share of the modelled communication hidden at n0 (0..1, never above)."""
        return min(self.hidden_s / self.comm_s, 1.0) if self.comm_s > 0 else 0.0

    @property
    def censored(self) -> bool:
        """All but a sliver of the communication was hidden: the overlap is a lower bound."""
        if self.hidden_share_given is not None or self.comm_s <= 0:
            return False
        return self.exposed_s <= CENSOR_SHARE * self.comm_s

    @property
    def extra_s(self) -> float:
        """Step time beyond compute + CPU term + all of comm(n0): a cost the model does not see."""
        if self.hidden_share_given is not None:
            return 0.0
        return max(self.exposed_s - self.comm_s, 0.0)


@dataclasses.dataclass(frozen=True)
class Target:
    """Where to predict: link, CPU layout, and inputs that replace measured ones."""

    link_rate_bps: int | None = None  # None: the fitted link
    busbw_fraction: float | None = None  # busbw as a fraction of the link rate
    hop_latency_s: float | None = None
    compute_s: float | None = None  # per-worker compute-only step time the user supplies
    grad_bytes: float | None = None
    same_machine: bool = False  # every worker on the fit's machine (the check's namespaces)
    workers_per_node: int | None = None  # None: as the fit's hosts held them
    cpus_per_node: int | None = None  # None: the fit machine's

    def busbw(self, fit: Fit, workers: int) -> float:
        """Bus bandwidth (bytes/s) on this target's link at `workers`."""
        measured = fit.link.busbw_at(workers)
        if self.link_rate_bps is None:
            if self.busbw_fraction is not None:
                raise PredictError("--busbw-fraction needs --link RATE, the rate it applies to")
            return measured
        if self.busbw_fraction is not None:
            return self.busbw_fraction * self.link_rate_bps / 8
        if fit.link.rate_bps is None:
            raise PredictError(
                f"{fit.engine}/{fit.model} was measured on a link of unknown rate, so the "
                "fraction of the wire its collectives reach is unknown: measure with "
                "--emulate-link RATE, or pass --busbw-fraction (e.g. 0.9)"
            )
        return measured * self.link_rate_bps / fit.link.rate_bps

    def layout(self, fit: Fit, workers: int) -> Layout:
        if self.same_machine:
            return Layout(workers, fit.machine.cpus, fit.machine.threads)
        per_node = self.workers_per_node or fit.hosts.workers
        return Layout(
            min(per_node, workers), self.cpus_per_node or fit.hosts.cpus, fit.hosts.threads
        )

    def compute_at(self, fit: Fit, workers: int) -> float:
        """Compute per step at `workers`: supplied, or measured and stretched by the cores' sharing."""
        if self.compute_s is not None:
            return self.compute_s
        measured_on = fit.compute_machine or fit.machine
        return (
            fit.compute_s
            * self.layout(fit, workers).oversubscription
            / measured_on.oversubscription
        )

    def _comm_s(self, fit: Fit, workers: int) -> tuple[float, float]:
        """(all-reduce seconds per step, gradient bytes) on this target at `workers`."""
        grad = fit.grad_bytes if self.grad_bytes is None else self.grad_bytes
        comm = fit.link.allreduce_s(
            grad,
            max(1, math.ceil(grad / fit.bucket_bytes)),
            workers,
            busbw_bps=self.busbw(fit, workers),
            hop_s=self.hop_latency_s,
        )
        return comm, grad

    def step_s(self, fit: Fit, workers: int, *, hide_all: bool = False) -> float:
        """Predicted step seconds; `hide_all`: the engine hides up to all of its compute.

        On cores shared by more threads than where compute was measured, each worker's
        waits add to its stretched compute: no overlap with other workers' compute
        (`shared_step_s` is the full overlap)."""
        compute = self.compute_at(fit, workers)
        if workers <= 1:
            return compute
        comm, grad = self._comm_s(fit, workers)
        scale = compute / fit.compute_s if fit.compute_s > 0 else 0.0
        hidden = compute if hide_all else fit.hidden_share * compute
        # the CPU a ring's copies and reductions take grows with the bytes
        cpu = (
            fit.cpu_raw_s(self.layout(fit, workers), workers)
            * fit.cpu_calibration
            * grad
            / fit.grad_bytes
        )
        return compute + max(comm - hidden, 0.0) + cpu + fit.extra_s * scale

    def shared_step_s(self, fit: Fit, workers: int, *, hide_all: bool = False) -> float | None:
        """The fastest step on cores more oversubscribed than where compute was measured,
        or None where they are not (or compute is supplied).

        A work-conserving scheduler gives a waiting worker's core to another, so the step
        is only as long as the larger of: every worker's CPU (compute on its threads plus
        its communication's CPU) spread over the cores, and one worker's own path (compute
        on a core of its own, then the communication it does not hide). `step_s` adds the
        waits to the stretched compute instead. An engine whose waiting itself takes CPU
        (a polling thread) can be slower than either.
        """
        layout = self.layout(fit, workers)
        measured_on = fit.compute_machine or fit.machine
        if (
            workers <= 1
            or self.compute_s is not None
            or fit.compute_s <= 0
            or layout.oversubscription <= measured_on.oversubscription
        ):
            return None
        alone = fit.compute_s / measured_on.oversubscription  # a core per thread
        comm, grad = self._comm_s(fit, workers)
        # one worker's communication CPU per step, as step_s counts it
        cpu = fit.comm_cpu_per_worker_s(workers) * fit.cpu_calibration * grad / fit.grad_bytes
        busy = layout.workers * (layout.threads * alone + cpu) / layout.cpus
        hidden = alone if hide_all else fit.hidden_share * alone
        path = alone + max(comm - hidden, 0.0) + fit.extra_s * alone / fit.compute_s
        return max(busy, path)

    def per_worker_batch(self, fit: Fit, workers: int) -> int:
        """The batch each worker trains: fixed under weak scaling; refused under strong."""
        if fit.strong and workers != fit.workers:
            raise PredictError(
                f"{fit.variant}/{fit.model} was measured under strong scaling (global batch "
                f"{fit.per_worker_batch * fit.workers}); at {workers} workers each worker's "
                "batch, hence its compute time, is one the runs never measured: predict at "
                f"{fit.workers} workers, or measure with --scaling weak"
            )
        return fit.per_worker_batch
