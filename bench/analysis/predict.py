"""`bench predict`: a scaling model of each engine's step time, fitted to measured records.

For one engine and model, measured at n0 workers over a link (emulated, `bench run
--emulate-link`, or the machine's own), the model takes:

- compute: the compute-only twin's step time (grad_sync=false; else the 1-worker run);
- sync: the step time with gradient synchronisation (global batch / throughput);
- gradient bytes per step (the model's parameters, float32) and the engine's bucket
  (spec bucket_mb, which sets DDP's bucket, Horovod's fusion threshold and Paddle's
  comm buffer), hence messages = ceil(bytes / bucket);
- the collective's cost on the same link at n0 workers, from `bench collectives`
  records: time(S) = latency + S x 2(n0-1)/n0 / busbw, least squares over sizes.

A ring all-reduce of B bytes in m messages over n workers then costs

    comm(n) = 2(n-1)/n x B / busbw + m x 2(n-1) x hop_latency

(hop_latency = the measured latency / 2(n0-1): a ring's 2(n-1) steps each pay it).
The overlap the engine achieved at n0 is the communication it hid under compute,
hidden = comm(n0) - (sync - compute), kept as a share of compute; anything slower
than comm(n0) can explain is a fixed extra per step. The prediction at n workers is

    step(n) = compute + max(comm(n) - hidden_share x compute, 0) + extra

with throughput n x per-worker batch / step(n) and efficiency compute / step(n)
(a compute time the user supplies scales the hidden share and the extra with it)
(weak scaling: a worker's batch stays the same). On another link rate R the bus
bandwidth is the same fraction of the wire as measured (busbw x R / R0) and the
hop latency stays. The interval re-fits on resampled windows (each window's step
time, both runs) and collective records, and takes the 2.5 and 97.5 percentiles.
Predictions are records of kind "prediction", never mixed with measured ones.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import models
from bench import records
from bench.analysis import frame as runs
from bench.core.errors import PredictError
from bench.core.units import format_rate
from bench.records import Kind, LoadedRecord, RunRecord

FILE = "predictions.jsonl"
RESAMPLES = 400
SEED = 20240611  # fixed: the same records always give the same interval


# --- the model ---------------------------------------------------------------------------


def ring_allreduce_s(
    grad_bytes: float, messages: int, workers: int, busbw_bps: float, hop_latency_s: float
) -> float:
    """Seconds of a ring all-reduce of `grad_bytes` in `messages` over `workers` workers.

    `busbw_bps` is bus bandwidth in bytes/s (nccl-tests' definition, so that the
    2(n-1)/n traffic factor is applied here), `hop_latency_s` one ring step's latency.
    """
    if workers <= 1:
        return 0.0
    n = workers
    return 2 * (n - 1) / n * grad_bytes / busbw_bps + messages * 2 * (n - 1) * hop_latency_s


def fit_collective(results: Sequence[Mapping[str, Any]], workers: int) -> tuple[float, float]:
    """(latency s, busbw bytes/s) of time(S) = latency + S x 2(n-1)/n / busbw over sizes.

    Least squares on a collective record's per-size median times; one size gives
    the bandwidth through the origin and no latency. Raises PredictError when the
    record holds no usable size.
    """
    pts = [
        (float(r["bytes"]), float(r["latency_s"]))
        for r in results
        if r.get("bytes") and r.get("latency_s") and r["latency_s"] > 0
    ]
    if not pts:
        raise PredictError("a collective record has no timed sizes")
    factor = 2 * (workers - 1) / workers if workers > 1 else 1.0
    x = np.array([p[0] * factor for p in pts])
    t = np.array([p[1] for p in pts])
    if len(pts) == 1 or np.ptp(x) == 0:
        return 0.0, float(x.mean() / t.mean())
    slope, intercept = np.polyfit(x, t, 1)
    if slope <= 0:  # times that do not grow with size: bandwidth beyond what was timed
        slope = float(t.max() / x.max())
    return max(float(intercept), 0.0), 1.0 / float(slope)


@dataclasses.dataclass(frozen=True)
class Fit:
    """One engine and model, fitted at `workers` workers on one link."""

    engine: str
    variant: str  # the engine as compare names it
    model: str
    spec: dict[str, Any]
    workers: int  # n0, where it was measured
    link_rate_bps: int | None  # the measured link (None: the machine's own, no rate)
    per_worker_batch: int
    grad_bytes: float
    bucket_bytes: float
    compute_s: float
    sync_s: float
    latency_s: float  # the collective's at n0 (whole all-reduce, one message)
    busbw_bps: float  # bytes/s at n0
    run_ids: tuple[str, ...] = ()
    # given instead of derived from the runs (what_if): share of compute hiding comm
    hidden_share_given: float | None = None

    @property
    def messages(self) -> int:
        return max(1, math.ceil(self.grad_bytes / self.bucket_bytes))

    @property
    def hop_latency_s(self) -> float:
        return self.latency_s / (2 * (self.workers - 1))

    @property
    def comm_s(self) -> float:
        """The model's all-reduce time per step where it was measured."""
        return ring_allreduce_s(
            self.grad_bytes, self.messages, self.workers, self.busbw_bps, self.hop_latency_s
        )

    @property
    def exposed_s(self) -> float:
        return self.sync_s - self.compute_s

    @property
    def hidden_share(self) -> float:
        """Communication hidden under compute at n0, as a share of compute (0..1)."""
        if self.hidden_share_given is not None:
            return self.hidden_share_given
        hidden = min(max(self.comm_s - self.exposed_s, 0.0), self.compute_s)
        return hidden / self.compute_s

    @property
    def overlap(self) -> float:
        """Share of the modelled communication hidden at n0 (0..1)."""
        return self.hidden_share * self.compute_s / self.comm_s if self.comm_s > 0 else 0.0

    @property
    def extra_s(self) -> float:
        """Step time beyond compute + all of comm(n0): a cost the ring model does not see."""
        if self.hidden_share_given is not None:
            return 0.0
        return max(self.exposed_s - self.comm_s, 0.0)

    def step_s(
        self,
        workers: int,
        *,
        busbw_bps: float | None = None,
        hop_latency_s: float | None = None,
        compute_s: float | None = None,
        grad_bytes: float | None = None,
    ) -> float:
        """Predicted step time at `workers`, on the measured link unless overridden."""
        compute = self.compute_s if compute_s is None else compute_s
        if workers <= 1:
            return compute
        grad = self.grad_bytes if grad_bytes is None else grad_bytes
        messages = max(1, math.ceil(grad / self.bucket_bytes))
        comm = ring_allreduce_s(
            grad,
            messages,
            workers,
            self.busbw_bps if busbw_bps is None else busbw_bps,
            self.hop_latency_s if hop_latency_s is None else hop_latency_s,
        )
        # the extra, like the hidden share, is kept in proportion to compute: a supplied
        # (e.g. GPU) compute time scales what this machine's cores added to it
        extra = self.extra_s * compute / self.compute_s if self.compute_s > 0 else 0.0
        return compute + max(comm - self.hidden_share * compute, 0.0) + extra


@dataclasses.dataclass(frozen=True)
class Target:
    """Where to predict: a link rate (None: the measured link) and optional overrides."""

    link_rate_bps: int | None = None
    busbw_fraction: float | None = None  # busbw as a fraction of the link rate
    hop_latency_s: float | None = None
    compute_s: float | None = None  # per-worker compute step time the user supplies
    grad_bytes: float | None = None  # gradient bytes per step the user supplies

    def busbw(self, fit: Fit) -> float:
        """Bus bandwidth (bytes/s) on this target's link for `fit`'s engine."""
        if self.link_rate_bps is None:
            if self.busbw_fraction is not None:
                raise PredictError("--busbw-fraction needs --link RATE, the rate it applies to")
            return fit.busbw_bps
        if self.busbw_fraction is not None:
            return self.busbw_fraction * self.link_rate_bps / 8
        if fit.link_rate_bps is None:
            raise PredictError(
                f"{fit.engine}/{fit.model} was measured on a link of unknown rate, so the "
                "fraction of the wire its collectives reach is unknown: measure with "
                "--emulate-link RATE, or pass --busbw-fraction (e.g. 0.9)"
            )
        return fit.busbw_bps * self.link_rate_bps / fit.link_rate_bps

    def step_s(self, fit: Fit, workers: int) -> float:
        return fit.step_s(
            workers,
            busbw_bps=self.busbw(fit),
            hop_latency_s=self.hop_latency_s,
            compute_s=self.compute_s,
            grad_bytes=self.grad_bytes,
        )


@dataclasses.dataclass(frozen=True)
class Prediction:
    fit: Fit
    target: Target
    workers: int
    step_s: float
    throughput: float
    efficiency: float
    throughput_interval: tuple[float, float]
    efficiency_interval: tuple[float, float]


def predict(fit: Fit, target: Target, workers: int, resampled: Sequence[Fit] = ()) -> Prediction:
    """The point prediction from `fit`, with the interval spanned by `resampled` fits."""

    def figures(f: Fit) -> tuple[float, float, float]:
        step = target.step_s(f, workers)
        compute = f.compute_s if target.compute_s is None else target.compute_s
        return step, workers * f.per_worker_batch / step, compute / step

    step, tput, eff = figures(fit)
    if resampled:
        many = np.array([figures(f)[1:] for f in resampled])
        lo, hi = np.percentile(many, [2.5, 97.5], axis=0)
        t_iv, e_iv = (float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1]))
    else:
        t_iv, e_iv = (tput, tput), (eff, eff)
    return Prediction(fit, target, workers, step, tput, eff, t_iv, e_iv)


def what_if(
    model: str,
    *,
    compute_s: float,
    grad_bytes: float,
    bucket_bytes: float,
    hidden_share: float,
    per_worker_batch: int,
) -> Fit:
    """A fit from stated inputs alone, no records: the ring model with a given overlap.

    `hidden_share` is the share of compute under which communication hides (0: none;
    about 2/3 when all of the backward pass overlaps). Latency and bus bandwidth come
    from the Target (--hop-latency-us, --busbw-fraction), which must then give both.
    """
    return Fit(
        engine="ring",
        variant="ring model",
        model=model,
        spec={"model": model, "batch_size": per_worker_batch, "bucket_mb": bucket_bytes / 2**20},
        workers=2,
        link_rate_bps=None,
        per_worker_batch=per_worker_batch,
        grad_bytes=grad_bytes,
        bucket_bytes=bucket_bytes,
        compute_s=compute_s,
        sync_s=compute_s,
        latency_s=0.0,
        busbw_bps=float("nan"),
        hidden_share_given=hidden_share,
    )


# --- from records ------------------------------------------------------------------------


def grad_bytes_of(model: str, input_shape: Sequence[int], classes: int = 10) -> float:
    """Gradient bytes per step of `model` (float32): its trainable parameters x 4.

    BatchNorm's scale and shift are trainable too (they start at constants, so the
    model lists them under constants); running statistics are not.
    """
    m = models.get(model)
    shape = tuple(int(s) for s in input_shape)
    n = sum(int(np.prod(s)) for s, _ in m.param_shapes(shape, classes).values())
    if m.constants is not None:
        for name, (s, _) in m.constants(shape, classes).items():
            if name.rsplit(".", 1)[-1] in ("weight", "bias"):
                n += int(np.prod(s))
    return 4.0 * n


def _step_times(rec: RunRecord) -> list[float]:
    """Per-window step times of a record (global batch / each window's throughput)."""
    batch = rec.get("global_batch") or 0
    windows = [w for w in rec.get("window_throughput") or [] if w and w > 0]
    if batch and windows:
        return [batch / w for w in windows]
    throughput = rec.get("throughput")
    if batch and throughput:
        return [batch / throughput]
    return []


def _rate(rec: RunRecord) -> int | None:
    link = rec.get("link")
    return link.get("rate_bps") if isinstance(link, dict) else None


def _spec_key(spec: Mapping[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in spec.items() if k not in ("seed", "grad_sync")}, sort_keys=True
    )


@dataclasses.dataclass
class Sample:
    """What one fit needs, before reduction: the window step times and collective records."""

    engine: str
    variant: str  # the engine as compare names it (horovod[mpi]...)
    model: str
    spec: dict[str, Any]
    workers: int
    link_rate_bps: int | None
    per_worker_batch: int
    grad_bytes: float
    bucket_bytes: float
    sync: list[float]
    compute: list[float]
    collectives: list[tuple[float, float]]  # (latency s, busbw bytes/s) per record
    run_ids: list[str]

    def fit(self, rng: np.random.Generator | None = None) -> Fit:
        """The fit on medians; with `rng`, on one resample of windows and records."""

        def med(xs: list[float]) -> float:
            arr = np.asarray(xs)
            if rng is not None:
                arr = rng.choice(arr, size=arr.size, replace=True)
            return float(np.median(arr))

        if rng is not None:
            lat, bw = self.collectives[int(rng.integers(len(self.collectives)))]
        else:
            lat = float(np.median([c[0] for c in self.collectives]))
            bw = float(np.median([c[1] for c in self.collectives]))
        return Fit(
            self.engine,
            self.variant,
            self.model,
            self.spec,
            self.workers,
            self.link_rate_bps,
            self.per_worker_batch,
            self.grad_bytes,
            self.bucket_bytes,
            med(self.compute),
            med(self.sync),
            lat,
            bw,
            tuple(self.run_ids),
        )


def samples(
    recs: Iterable[LoadedRecord],
    *,
    engines: Sequence[str] = (),
    models_: Sequence[str] = (),
    fit_link_bps: int | None = None,
    notes: list[str] | None = None,
) -> list[Sample]:
    """One Sample per (engine, model, spec, workers, link) measured with gradient sync.

    `fit_link_bps` keeps only runs over that emulated link. Groups that lack their
    compute-only measurement or their collective records are left out, with the
    reason appended to `notes`.
    """
    notes = notes if notes is not None else []
    train = [
        r
        for r in runs.finished(recs)
        if (not engines or r.get("engine") in engines)
        and (not models_ or (r.get("spec") or {}).get("model") in models_)
        and (fit_link_bps is None or _rate(r) == fit_link_bps)
    ]
    groups = _groups(train)
    singles = {k[:2]: g["single"] for k, g in groups.items() if g["single"]}
    colls = runs.finished(recs, Kind.COLLECTIVE)
    out = []
    for key, g in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if key[3] > 1 and g["sync"]:
            sample = _sample(key, g, singles.get(key[:2], []), colls, notes)
            if sample is not None:
                out.append(sample)
    return out


_Group = dict[str, list[LoadedRecord]]


def _groups(train: Iterable[LoadedRecord]) -> dict[tuple[Any, ...], _Group]:
    """Runs by (variant, spec, link, workers): synchronised, compute-only, one worker."""
    groups: dict[tuple[Any, ...], _Group] = defaultdict(
        lambda: {"sync": [], "compute": [], "single": []}
    )
    for r in train:
        spec = r.get("spec") or {}
        key = (runs.variant(r), _spec_key(spec), _rate(r))
        if r.get("world_size", 1) == 1:
            groups[(*key, 1)]["single"].append(r)
        else:
            part = "sync" if spec.get("grad_sync", True) else "compute"
            groups[(*key, r["world_size"])][part].append(r)
    return groups


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
    compute_recs = g["compute"] or singles
    if not compute_recs:
        notes.append(
            f"{where}: no compute-only step time (the grad_sync=false twin or a 1-worker "
            "run); run bench run without --no-comm-cost"
        )
        return None
    fits = _collective_fits(colls, engine, workers, rate)
    if not fits:
        link = f" --emulate-link {rate}bit" if rate else ""
        notes.append(
            f"{where}: no bench collectives record on the same link; run bench "
            f"collectives{link} --engines {engine} --workers {workers}"
        )
        return None
    shape = (first.get("dataset") or {}).get("input_shape")
    try:
        grad = grad_bytes_of(model, shape) if shape else None
    except (KeyError, ValueError):
        grad = None
    if not grad:
        notes.append(f"{where}: gradient size unknown for model {model}; give --grad-mb")
        return None
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
        sync=[t for r in g["sync"] for t in _step_times(r)],
        compute=[t for r in compute_recs for t in _step_times(r)],
        collectives=fits,
        run_ids=[r["run_id"] for r in (*g["sync"], *compute_recs)],
    )


def _collective_fits(
    colls: Sequence[LoadedRecord], engine: str, workers: int, rate: int | None
) -> list[tuple[float, float]]:
    """(latency, bus bandwidth) of each collective record of this engine, size and link."""
    fits = []
    for c in colls:
        if c.get("engine") == engine and c.get("world_size") == workers and _rate(c) == rate:
            try:
                fits.append(fit_collective(c.get("results") or [], workers))
            except PredictError:
                continue
    return fits


def run(
    sample_list: Sequence[Sample],
    target: Target,
    workers: Sequence[int],
    resamples: int = RESAMPLES,
) -> list[Prediction]:
    """Every sample's predictions at every worker count, with resampled intervals."""
    out: list[Prediction] = []
    for s in sample_list:
        rng = np.random.default_rng(SEED)
        point = s.fit()
        boot = [s.fit(rng) for _ in range(resamples)]
        out.extend(predict(point, target, n, boot) for n in workers)
    return out


def to_record(p: Prediction, argv: Sequence[str]) -> RunRecord:
    """A record of kind "prediction": compare and the HTML report show it apart."""
    f = p.fit
    rec = records.new_record(
        f.spec,
        f.engine,
        p.workers,
        {"predicted_from": ",".join(f.run_ids[:20])},
        {"name": "bench predict", "argv": list(argv)},
    )
    rec["kind"] = Kind.PREDICTION
    rec["predicted"] = {
        "variant": f.variant,
        "workers": p.workers,
        "link_rate_bps": p.target.link_rate_bps or f.link_rate_bps,
        "throughput": p.throughput,
        "throughput_interval": list(p.throughput_interval),
        "efficiency": p.efficiency,
        "efficiency_interval": list(p.efficiency_interval),
        "step_time_s": p.step_s,
        "inputs": {
            "fit_workers": f.workers,
            "fit_link_rate_bps": f.link_rate_bps,
            "compute_s": f.compute_s if p.target.compute_s is None else p.target.compute_s,
            "compute_given": p.target.compute_s is not None,
            "sync_s_at_fit": f.sync_s,
            "grad_bytes": f.grad_bytes if p.target.grad_bytes is None else p.target.grad_bytes,
            "grad_given": p.target.grad_bytes is not None,
            "bucket_bytes": f.bucket_bytes,
            "busbw_bytes_per_s": p.target.busbw(f),
            "hop_latency_s": (
                f.hop_latency_s if p.target.hop_latency_s is None else p.target.hop_latency_s
            ),
            "overlap_at_fit": None if f.hidden_share_given is not None else f.overlap,
            "what_if": f.hidden_share_given is not None,
            "hidden_share_of_compute": f.hidden_share,
            "extra_s": f.extra_s,
            "per_worker_batch": f.per_worker_batch,
        },
    }
    return rec


# --- tables --------------------------------------------------------------------------------


def _rate_text(bps: Any) -> str:
    return format_rate(bps) if isinstance(bps, (int, float)) and bps else "measured link"


def table(recs: Iterable[RunRecord]) -> Any:
    """Predicted throughput and efficiency, one row per prediction record (a DataFrame)."""
    rows = []
    for r in recs:
        if r.get("kind") != "prediction" or not isinstance(r.get("predicted"), dict):
            continue
        p = r["predicted"]
        inputs = p.get("inputs") or {}
        given = [
            f"{k} given" for k in ("compute", "grad") if inputs.get(f"{k}_given")
        ]  # what-if inputs the user supplied
        t_lo, t_hi = (p.get("throughput_interval") or [np.nan, np.nan])[:2]
        e_lo, e_hi = (p.get("efficiency_interval") or [np.nan, np.nan])[:2]
        rows.append(
            {
                "engine": p.get("variant") or r.get("engine"),
                "model": str((r.get("spec") or {}).get("model"))
                + (f" ({', '.join(given)})" if given else ""),
                "link": _rate_text(p.get("link_rate_bps")),
                "workers": p.get("workers"),
                "samples/s": f"{p.get('throughput', np.nan):,.0f}"
                + (f" [{t_lo:,.0f}, {t_hi:,.0f}]" if t_lo != t_hi else ""),
                "efficiency": f"{p.get('efficiency', np.nan):.0%}"
                + (f" [{e_lo:.0%}, {e_hi:.0%}]" if e_lo != e_hi else ""),
                "fitted at": "stated inputs (what-if)"
                if inputs.get("what_if")
                else f"{inputs.get('fit_workers')} workers, "
                + _rate_text(inputs.get("fit_link_rate_bps")),
                "hidden share of compute": f"{inputs.get('hidden_share_of_compute', np.nan):.0%}",
            }
        )
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.drop_duplicates().sort_values(["model", "engine", "link", "workers"])
    return df


CAPTION = (
    "MODEL PREDICTIONS, not measurements (bench predict): compute-only step time plus the "
    "ring all-reduce cost not hidden under it, from fitted runs and bench collectives on "
    "their link, or from stated inputs (what-if); [95% interval over resampled windows]"
)


def render_text(recs: Iterable[RunRecord]) -> str | None:
    """The predictions table as text, under its caption; None without predictions."""
    df = table(recs)
    if df.empty:
        return None
    return CAPTION + "\n" + df.to_string(index=False)


# --- checked against runs -------------------------------------------------------------------


def check(recs: Sequence[LoadedRecord], fit_link_bps: int, **filters: Any) -> tuple[Any, list[str]]:
    """Fit on runs over `fit_link_bps`, predict the same engines and models on every other
    measured link rate, and compare with what was measured there: (a DataFrame, the
    notes on what could not be fitted).

    The error is predicted / measured throughput - 1, each run's median window.
    """
    notes: list[str] = []
    fitted = samples(recs, fit_link_bps=fit_link_bps, notes=notes, **filters)
    measured = samples(recs, **filters)  # every link
    rows = []
    for s in fitted:
        point = s.fit()
        for m in measured:
            same = (m.variant, m.model, _spec_key(m.spec), m.workers)
            if same != (s.variant, s.model, _spec_key(s.spec), s.workers):
                continue
            if m.link_rate_bps in (None, fit_link_bps):
                continue
            target = Target(link_rate_bps=m.link_rate_bps)
            p = predict(point, target, m.workers)
            meas = m.workers * m.per_worker_batch / float(np.median(m.sync))
            rows.append(
                {
                    "engine": s.variant,
                    "model": s.model,
                    "link": _rate_text(m.link_rate_bps),
                    "measured samples/s": meas,
                    "predicted samples/s": p.throughput,
                    "error": p.throughput / meas - 1,
                }
            )
    return pd.DataFrame(rows), notes


def render_check(df: Any) -> str:
    """The error table and each engine's median absolute error."""
    if df.empty:
        return "no engine and model measured both on the fitted link and on another"
    shown = df.copy()
    for col in ("measured samples/s", "predicted samples/s"):
        shown[col] = shown[col].map("{:,.1f}".format)
    shown["error"] = df["error"].map("{:+.1%}".format)
    per = df.assign(abs_error=df["error"].abs()).groupby("engine")["abs_error"].median()
    lines = [shown.to_string(index=False), "", "median absolute error per engine:"]
    lines += [f"  {e}: {v:.1%}" for e, v in per.items()]
    return "\n".join(lines)


def main_predict(
    paths: Sequence[str],
    *,
    workers: Sequence[int],
    target: Target,
    results: Path | None,
    engines: Sequence[str] = (),
    models_: Sequence[str] = (),
    fit_link_bps: int | None = None,
    argv: Sequence[str] = (),
    out: Any = None,
    given: Fit | None = None,
) -> int:
    """`bench predict`: fit, predict, print, and write prediction records under `results`.

    With `given` (a what_if fit) no records are read and there is no interval.
    """
    if given is not None:
        preds = [predict(given, target, n) for n in workers]
    else:
        loaded = records.load(paths)
        notes: list[str] = []
        sample_list = samples(
            loaded.records,
            engines=engines,
            models_=models_,
            fit_link_bps=fit_link_bps,
            notes=notes,
        )
        for note in notes:
            print(f"bench predict: skipped {note}", file=sys.stderr)
        if not sample_list:
            raise PredictError(
                f"nothing to fit under {', '.join(paths)}: it needs multi-worker training "
                "records with their compute-only twins and bench collectives records on the "
                "same link"
            )
        preds = run(sample_list, target, workers)
    recs = [to_record(p, argv) for p in preds]
    if results is not None:
        target_file = records.check_writable(results).parent / FILE
        for rec in recs:
            records.append(target_file, rec)
        print(f"bench predict: {len(recs)} predictions -> {target_file}", file=sys.stderr)
    print(render_text(recs), file=out or sys.stdout)  # read at call time, not import
    return 0
