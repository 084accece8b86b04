"""From records to the model's inputs, with runs and collective records as the units.

A `Sample` holds, per engine, model, spec, link and worker count, one value per run
(its median window's step time, and its CPU seconds per step) and one `RecordCost`
per `bench collectives` record of the engine on that link, at every worker count
measured. `Sample.fit()` reduces them to a `Fit`; `Sample.fit(rng)` draws one: each
input's mean from its t distribution over its units (runs or records, never the
windows inside a run, which are not independent of each other), the suite's rule
in bench/measure/stats.py. An input with one unit has no spread to draw from: it is
held at its value, and `held_fixed` names it so the interval says what it omits.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

import models
from bench.contract import data
from bench.core.errors import DataError, PredictError
from bench.predict.model import (
    Fit,
    Layout,
    LinkCost,
    RecordCost,
    record_cost,
    split_latency,
)
from bench.records import Kind, LoadedRecord, RunRecord
from bench.tables import derived, frame

BYTES_PER_VALUE = {"none": 4, "fp16": 2}  # gradients on the wire, by spec grad_compression


def grad_bytes_of(
    model: str, input_shape: Sequence[int], classes: int = 10, compression: str = "none"
) -> float:
    """Gradient bytes per step of `model`: its trainable parameters x bytes on the wire.

    BatchNorm's scale and shift are trainable too (they start at constants, so the
    model lists them under constants); running statistics are not. fp16 compression
    halves the bytes (Horovod's Compression.fp16, DDP's fp16_compress_hook).
    """
    m = models.get(model)
    shape = tuple(int(s) for s in input_shape)
    n = sum(int(np.prod(s)) for s, _ in m.param_shapes(shape, classes).values())
    if m.constants is not None:
        for name, (s, _) in m.constants(shape, classes).items():
            if name.rsplit(".", 1)[-1] in ("weight", "bias"):
                n += int(np.prod(s))
    return float(BYTES_PER_VALUE.get(compression, 4) * n)


def classes_of(rec: RunRecord) -> int:
    """The model's output classes (a transformer's vocabulary) as the run trained them."""
    dataset: Mapping[str, Any] = rec.get("dataset") or {}
    if isinstance(dataset.get("num_classes"), int):
        return int(dataset["num_classes"])
    name = dataset.get("name") or (rec.get("spec") or {}).get("dataset")
    if name == "sonnets":  # records before num_classes: the bundled corpus says
        return data.load_sonnets(seed=0, test_fraction=0.1).num_classes
    return 10  # every other dataset the suite knows has ten


def run_step_s(rec: RunRecord) -> float | None:
    """One run's step time, as the model fits it (`derived.median_window_step_s`)."""
    return derived.median_window_step_s(rec)


def run_cpu_s(rec: RunRecord, step_s: float) -> float | None:
    """CPU seconds per step of one worker (its threads included), mean over ranks.

    A rank's `own_cpu_cores` is not its own: it is every process of the run that it
    could see (bench/measure/contention.py), shared among the workers those were
    (`derived.workers_counted`). Read as one worker's, a 2-worker run's communication
    CPU was counted twice.
    """
    per_worker = derived.rank_cpu(rec)["per_worker"]
    if not per_worker or not all(np.isfinite(per_worker)):
        return None
    return float(np.mean(per_worker)) * step_s


def earlier_emulation(rec: RunRecord) -> bool:
    """The run crossed the link emulation made before each end's MTU was recorded: a tc
    tbf bucket of 66 KB or more that passed a small model's whole gradient at line
    speed, so its communication was not the link's (bench/launch/netns.py)."""
    link = rec.get("link")
    return isinstance(link, dict) and link.get("qdisc") == "tbf" and "mtu" not in link


def over_links(recs: Iterable[LoadedRecord], notes: list[str] | None = None) -> list[LoadedRecord]:
    """`recs` without the runs over the earlier link emulation, saying how many in `notes`."""
    recs = list(recs)
    kept = [r for r in recs if not earlier_emulation(r)]
    if notes is not None and len(kept) < len(recs):
        notes.append(
            f"{len(recs) - len(kept)} runs over the earlier link emulation left out: its "
            "token bucket passed a small model's gradient at line speed, faster than a "
            "link of that rate; measure them again with bench run --emulate-link"
        )
    return kept


def rate_of(rec: RunRecord) -> int | None:
    link = rec.get("link")
    return link.get("rate_bps") if isinstance(link, dict) else None


def spec_key(spec: Mapping[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in spec.items() if k not in ("seed", "grad_sync")}, sort_keys=True
    )


def layouts(rec: RunRecord) -> tuple[Layout, Layout]:
    """(machine, hosts) as the model reads them: `derived.layouts` without the engine's
    communication threads, which the model's CPU term measures instead."""
    machine, hosts = derived.layouts(rec)
    return (
        dataclasses.replace(machine, engine_threads=0),
        dataclasses.replace(hosts, engine_threads=0),
    )


# A draw's t is clipped here: with two units t has one degree of freedom (a Cauchy),
# whose rare huge draws would overflow; the clip is far beyond the 2.5-97.5% range
# (t(1)'s 97.5% point is 12.7), so the interval is unchanged.
T_CLIP = 50.0


def _mean(values: Sequence[float], rng: np.random.Generator | None, log: bool) -> float:
    """The units' mean, or with `rng` one draw of it from its t distribution (k >= 2)."""
    arr = np.log(values) if log else np.asarray(values, dtype=float)
    m = float(arr.mean())
    if rng is not None and arr.size >= 2:
        t = float(np.clip(rng.standard_t(arr.size - 1), -T_CLIP, T_CLIP))
        m += float(arr.std(ddof=1)) / math.sqrt(arr.size) * t
    return math.exp(m) if log else m


@dataclasses.dataclass
class Sample:
    """What one fit needs, before reduction: per-run values and per-record collective costs."""

    engine: str
    variant: str  # the engine as compare names it (horovod[mpi]...)
    model: str
    spec: dict[str, Any]
    workers: int
    link_rate_bps: int | None
    per_worker_batch: int
    grad_bytes: float
    bucket_bytes: float
    sync: list[float]  # step seconds, one per synced run
    compute: list[float]  # step seconds, one per compute-only run
    sync_cpu: list[float]  # CPU seconds per step per worker, per run (may be empty)
    compute_cpu: list[float]
    costs: list[RecordCost]  # every collective record of the engine on this link
    machine: Layout
    hosts: Layout
    compute_machine: Layout  # how the compute runs' workers shared CPUs (a 1-worker run's own)
    run_ids: list[str]

    def by_workers(self) -> dict[int, list[RecordCost]]:
        out: dict[int, list[RecordCost]] = defaultdict(list)
        for c in self.costs:
            out[c.workers].append(c)
        return dict(sorted(out.items()))

    def held_fixed(self) -> list[str]:
        """The inputs with a single unit: the interval cannot include their spread."""
        held = [
            f"{name} (1 run)"
            for name, v in (("synced step", self.sync), ("compute step", self.compute))
            if len(v) == 1
        ]
        held += [
            f"collectives at {n} workers (1 record)"
            for n, cs in self.by_workers().items()
            if len(cs) == 1
        ]
        if len(self.by_workers()) < 2:
            held.append("latency split (collectives at one worker count: drawn 0-100% per hop)")
        return held

    def fit(self, rng: np.random.Generator | None = None) -> Fit:
        """The fit on the units' means; with `rng`, on one draw of each mean."""
        lat, bw = {}, {}
        for n, cs in self.by_workers().items():
            lat[n] = max(_mean([c.latency_s for c in cs], rng, log=False), 0.0)
            bw[n] = _mean([c.busbw_bps for c in cs], rng, log=True)
        split = split_latency(lat, 1.0 if rng is None else float(rng.uniform()))
        cpu = 0.0
        if self.sync_cpu and self.compute_cpu:
            cpu = _mean(self.sync_cpu, rng, log=False) - _mean(self.compute_cpu, rng, log=False)
        return Fit(
            engine=self.engine,
            variant=self.variant,
            model=self.model,
            spec=self.spec,
            workers=self.workers,
            per_worker_batch=self.per_worker_batch,
            grad_bytes=self.grad_bytes,
            bucket_bytes=self.bucket_bytes,
            compute_s=_mean(self.compute, rng, log=True),
            sync_s=_mean(self.sync, rng, log=True),
            comm_cpu_s=cpu,
            link=LinkCost(split, bw, self.link_rate_bps),
            machine=self.machine,
            hosts=self.hosts,
            compute_machine=self.compute_machine,
            run_ids=tuple(self.run_ids),
        )


_Group = dict[str, list[LoadedRecord]]


def samples(
    recs: Iterable[LoadedRecord],
    *,
    engines: Sequence[str] = (),
    models_: Sequence[str] = (),
    fit_link_bps: int | None = None,
    fit_workers: int | None = None,
    notes: list[str] | None = None,
) -> list[Sample]:
    """One Sample per (engine, model, spec, workers, link) measured with gradient sync.

    `fit_link_bps` keeps only runs over that emulated link, `fit_workers` only that
    worker count. Groups that lack their compute-only measurement or their collective
    records are left out, with the reason appended to `notes`.
    """
    notes = notes if notes is not None else []
    recs = over_links(recs, notes)
    groups = _groups(_train(recs, engines, models_, fit_link_bps))
    singles = {k[:2]: g["single"] for k, g in groups.items() if g["single"]}
    colls = frame.finished(recs, Kind.COLLECTIVE)
    out = []
    for key, g in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if key[3] > 1 and g["sync"] and fit_workers in (None, key[3]):
            sample = _sample(key, g, singles.get(key[:2], []), colls, notes)
            if sample is not None:
                out.append(sample)
    return out


def _train(
    recs: Sequence[LoadedRecord],
    engines: Sequence[str],
    models_: Sequence[str],
    link_bps: int | None = None,
) -> list[LoadedRecord]:
    return [
        r
        for r in frame.finished(recs)
        if (not engines or r.get("engine") in engines)
        and (not models_ or (r.get("spec") or {}).get("model") in models_)
        and (link_bps is None or rate_of(r) == link_bps)
    ]


@dataclasses.dataclass(frozen=True)
class Measured:
    """A synchronised cell as measured, for `--check`: the fit is never made from it, so
    it needs neither a compute-only twin nor collectives of its own."""

    variant: str
    model: str
    spec: dict[str, Any]
    workers: int
    link_rate_bps: int | None
    per_worker_batch: int
    sync: list[float]  # step seconds, one per run


def measured(
    recs: Iterable[LoadedRecord], *, engines: Sequence[str] = (), models_: Sequence[str] = ()
) -> list[Measured]:
    """Every multi-worker synchronised cell's runs (what `--check` compares with)."""
    out = []
    groups = _groups(_train(over_links(recs), engines, models_))
    for (variant, _, rate, workers), g in sorted(groups.items(), key=lambda kv: str(kv[0])):
        steps = _values(g["sync"])[0] if workers > 1 else []
        if steps:
            first = g["sync"][0]
            spec = first["spec"]
            out.append(
                Measured(
                    variant,
                    str(spec.get("model", "?")),
                    {**spec, "grad_sync": True},
                    workers,
                    rate,
                    int(first.get("per_worker_batch") or spec["batch_size"]),
                    steps,
                )
            )
    return out


def _groups(train: Iterable[LoadedRecord]) -> dict[tuple[Any, ...], _Group]:
    """Runs by (variant, spec, link, workers): synchronised, compute-only, one worker."""
    groups: dict[tuple[Any, ...], _Group] = defaultdict(
        lambda: {"sync": [], "compute": [], "single": []}
    )
    for r in train:
        spec = r.get("spec") or {}
        key = (frame.variant(r), spec_key(spec), rate_of(r))
        if r.get("world_size", 1) == 1:
            groups[(*key, 1)]["single"].append(r)
        else:
            part = "sync" if spec.get("grad_sync", True) else "compute"
            groups[(*key, r["world_size"])][part].append(r)
    return groups


def _values(recs: Sequence[LoadedRecord]) -> tuple[list[float], list[float]]:
    """(step seconds, CPU seconds per step) per run; CPU only when every run has it."""
    steps, cpus = [], []
    for r in recs:
        step = run_step_s(r)
        if step is None:
            continue
        steps.append(step)
        cpus.append(run_cpu_s(r, step))
    return steps, ([c for c in cpus if c is not None] if all(c is not None for c in cpus) else [])


def _sample(
    key: tuple[Any, ...],
    g: _Group,
    singles: list[LoadedRecord],
    colls: Sequence[LoadedRecord],
    notes: list[str],
) -> Sample | None:
    """The Sample of one group, or None with the reason in `notes`."""
    variant, _, rate, workers = key
    first = g["sync"][0]
    spec, engine = first["spec"], first["engine"]
    model = spec.get("model", "?")
    where = f"{variant}/{model} at {workers} workers" + (f" over {rate:,} bit/s" if rate else "")
    compute_recs = _compute_runs(g, singles, spec)
    if not compute_recs:
        notes.append(
            f"{where}: no compute-only step time (the grad_sync=false twin or a 1-worker "
            "run); run bench run without --no-comm-cost"
        )
        return None
    costs = _costs_at(colls, engine, rate, workers, notes, where)
    if costs is None:
        return None
    grad = _grad_bytes(first, model)
    if not grad:
        notes.append(f"{where}: gradient size unknown for model {model}; give --grad-mb")
        return None
    sync, sync_cpu = _values(g["sync"])
    compute, compute_cpu = _values(compute_recs)
    if not sync or not compute:
        notes.append(f"{where}: runs without window throughputs")
        return None
    if not (sync_cpu and compute_cpu):
        notes.append(f"{where}: runs without their CPU time (contention); the CPU term is left out")
    machine, hosts = layouts(first)
    compute_machine = layouts(compute_recs[0])[0]
    return Sample(
        engine=engine,
        variant=variant,
        model=model,
        spec={**spec, "grad_sync": True},
        workers=workers,
        link_rate_bps=rate,
        per_worker_batch=int(first.get("per_worker_batch") or spec["batch_size"]),
        grad_bytes=grad,
        bucket_bytes=float(spec.get("bucket_mb") or 25.0) * 2**20,
        sync=sync,
        compute=compute,
        sync_cpu=sync_cpu,
        compute_cpu=compute_cpu,
        costs=costs,
        machine=machine,
        hosts=hosts,
        compute_machine=compute_machine,
        run_ids=[r["run_id"] for r in (*g["sync"], *compute_recs)],
    )


def _compute_runs(
    g: _Group, singles: list[LoadedRecord], spec: Mapping[str, Any]
) -> list[LoadedRecord]:
    """The runs whose step is this group's compute-only step: its grad_sync=false twins,
    else its spec's 1-worker runs, except under strong scaling, where a 1-worker run
    trained the whole global batch."""
    strong = spec.get("scaling") == "strong"
    return g["compute"] or ([] if strong else singles)


def _costs_at(
    colls: Sequence[LoadedRecord],
    engine: str,
    rate: int | None,
    workers: int,
    notes: list[str],
    where: str,
) -> list[RecordCost] | None:
    """The engine's collective costs on this link (`_costs`), or None, with the bench
    collectives command that would measure them in `notes`, when none was measured at
    this worker count."""
    costs = _costs(colls, engine, rate, notes)
    if workers in {c.workers for c in costs}:
        return costs
    link = f" --emulate-link {rate}bit" if rate else ""
    notes.append(
        f"{where}: no bench collectives record on the same link and worker count; "
        f"run bench collectives{link} --engines {engine} --workers {workers}"
    )
    return None


def _grad_bytes(rec: RunRecord, model: str) -> float | None:
    shape = (rec.get("dataset") or {}).get("input_shape")
    compression = str((rec.get("spec") or {}).get("grad_compression") or "none")
    try:
        return grad_bytes_of(model, shape, classes_of(rec), compression) if shape else None
    except (KeyError, ValueError, DataError, OSError):
        return None


def _costs(
    colls: Sequence[LoadedRecord], engine: str, rate: int | None, notes: list[str]
) -> list[RecordCost]:
    """Every collective record of this engine on this link, reduced; unusable ones noted."""
    out = []
    for c in colls:
        # a 1-worker "all-reduce" is a memory copy: no latency or bandwidth of a link
        if c.get("engine") == engine and rate_of(c) == rate and int(c.get("world_size") or 1) > 1:
            try:
                out.append(record_cost(c.get("results") or [], int(c.get("world_size") or 1)))
            except PredictError as exc:
                notes.append(f"collective record {c.get('run_id')} left out: {exc}")
    return out
