"""Predictions with intervals, as records and tables, and checked against measured runs.

Everything here computes or renders; `bench predict` (bench/cli/predict.py) reads the
records, prints and writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench import records
from bench.core.errors import PredictError
from bench.core.units import format_rate
from bench.engines import registry
from bench.measure.stats import t_quantile
from bench.predict.inputs import Measured, Sample, measured, samples, spec_key
from bench.predict.model import Fit, LatencySplit, Layout, LinkCost, Target
from bench.records import Kind, LoadedRecord, RunRecord

FILE = "predictions.jsonl"
DRAWS = 2000
SEED = 20240611  # fixed: the same records always give the same interval
INTERVAL_METHOD = (
    "2.5-97.5% of the prediction over draws of each input's mean from its t distribution, "
    "runs and collective records as the units"
)


@dataclasses.dataclass(frozen=True)
class Prediction:
    fit: Fit
    target: Target
    workers: int
    per_worker_batch: int
    step_s: float
    throughput: float
    compute_share: float  # compute / step: not compare's scaling efficiency
    throughput_interval: tuple[float, float]
    compute_share_interval: tuple[float, float]
    # "lower": the fit cannot see past a bound (`bound_reasons`): the throughput is at
    # least this, and at most throughput_upper. "between": oversubscribed cores, where
    # no input places the step between no overlap (throughput_lower) and full overlap
    # (throughput_upper): the point lies between them (`predict`).
    bound: str | None = None
    throughput_upper: float | None = None
    held_fixed: tuple[str, ...] = ()  # inputs with one unit, outside the interval
    bound_reasons: tuple[str, ...] = ()  # why `bound` is set (`bound_reasons`)
    throughput_lower: float | None = None


def _figures(
    fit: Fit, target: Target, workers: int, batch: int, hide_all: bool = False
) -> tuple[float, float, float]:
    step = target.step_s(fit, workers, hide_all=hide_all)
    return step, workers * batch / step, target.compute_at(fit, workers) / step


def _upper(
    fit: Fit, target: Target, workers: int, batch: int, hide_all: bool
) -> tuple[float, float, float]:
    """The fastest figures the model allows: the engine hiding all it can (`hide_all`),
    and on oversubscribed cores the work-conserving sharing (`Target.shared_step_s`)."""
    step = target.step_s(fit, workers, hide_all=hide_all)
    shared = target.shared_step_s(fit, workers, hide_all=hide_all)
    step = step if shared is None else min(step, shared)
    return step, workers * batch / step, target.compute_at(fit, workers) / step


def bound_reasons(fit: Fit, target: Target, workers: int) -> list[str]:
    """Why a prediction is bounded rather than a point (empty: it is a point)."""
    reasons = []
    if fit.censored:
        reasons.append("all communication hidden at the fit: the engine may hide more")
    if target.shared_step_s(fit, workers) is not None:
        point = (
            "the point is the lower end: this engine's waits poll, keeping their share of the cores"
            if registry.waits_spin(fit.engine)
            else "the point is their geometric mean"
        )
        reasons.append(
            "more threads than cores, and more than where compute was measured: the lower "
            "end adds each worker's waits to its stretched compute, the upper end lets "
            f"other workers compute during them; {point}"
        )
    return reasons


def _bound(fit: Fit, target: Target, workers: int) -> str | None:
    """`Prediction.bound`: "between" on oversubscribed cores, else "lower" if censored."""
    if target.shared_step_s(fit, workers) is not None:
        return "between"
    return "lower" if fit.censored else None


def predict(
    fit: Fit,
    target: Target,
    workers: int,
    draws: Sequence[Fit] = (),
    held_fixed: Sequence[str] = (),
) -> Prediction:
    """The point prediction from `fit`, with the interval spanned by the `draws`.

    Where the model can only bound the step (`bound_reasons`), the fastest case it
    allows gives the upper end, which the interval always reaches. A fit that saw all
    its communication hidden cannot see how much more would be: the point is the
    lower bound ("lower"). On cores oversubscribed beyond the fit's the step lies
    between no overlap and full overlap of the workers' waits with each other's
    compute, and no input places it ("between"): the point is the geometric mean of
    the two (at the overlap the fit saw), whose ratio error is at most the square root
    of theirs whichever end the machine reaches; for an engine whose waits poll
    (`EngineEntry.waits_spin`) the waits keep their cores, and the point is the no-overlap end.
    """
    batch = target.per_worker_batch(fit, workers)
    step, tput, share = _figures(fit, target, workers, batch)
    bound = _bound(fit, target, workers)
    upper = _upper(fit, target, workers, batch, fit.censored) if bound else None
    lo, hi = np.array([tput, share]), np.array([tput, share])
    if draws:
        lo, hi = _percentiles([_figures(f, target, workers, batch)[1:] for f in draws], lo, hi)
        if bound:  # the bound's own spread below, the fastest case above
            fastest = [_upper(f, target, workers, batch, fit.censored)[1:] for f in draws]
            hi = np.maximum(hi, _percentiles(fastest, lo, hi)[1])
    if upper is not None:
        hi = np.maximum(hi, upper[1:])
    # an unidentified latency split is drawn over its whole range while the point takes
    # the textbook ring (all per hop), which can sit at the range's edge: keep it, and
    # the no-overlap end when the point moves off it, inside
    lo, hi = np.minimum(lo, [tput, share]), np.maximum(hi, [tput, share])
    lower = tput if bound == "between" else None
    if bound == "between" and not registry.waits_spin(fit.engine):
        step = float(np.sqrt(step * _upper(fit, target, workers, batch, False)[0]))
        tput, share = workers * batch / step, target.compute_at(fit, workers) / step
        lo, hi = np.minimum(lo, [tput, share]), np.maximum(hi, [tput, share])
    return Prediction(
        fit,
        target,
        workers,
        per_worker_batch=batch,
        step_s=step,
        throughput=tput,
        compute_share=share,
        throughput_interval=(float(lo[0]), float(hi[0])),
        compute_share_interval=(float(lo[1]), float(hi[1])),
        bound=bound,
        throughput_upper=None if upper is None else upper[1],
        held_fixed=tuple(held_fixed),
        bound_reasons=tuple(bound_reasons(fit, target, workers)),
        throughput_lower=lower,
    )


def _percentiles(
    figures: Sequence[Sequence[float]], lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """2.5 and 97.5 percentiles of the finite draws (per column); the given ends if none."""
    many = np.array(figures, dtype=float)
    many = many[np.isfinite(many).all(axis=1)]
    if not len(many):
        return lo, hi
    q = np.percentile(many, [2.5, 97.5], axis=0)
    return q[0], q[1]


def run(
    sample_list: Sequence[Sample],
    target: Target,
    workers: Sequence[int],
    draws: int = DRAWS,
    notes: list[str] | None = None,
) -> list[Prediction]:
    """Every sample's predictions at every worker count, with intervals over `draws`;
    one the model refuses (strong scaling away from its fit) is left out with the reason
    in `notes`."""
    out: list[Prediction] = []
    for s in sample_list:
        rng = np.random.default_rng(SEED)
        point, drawn = s.fit(), [s.fit(rng) for _ in range(draws)]
        for n in workers:
            try:
                out.append(predict(point, target, n, drawn, s.held_fixed()))
            except PredictError as exc:
                if notes is None:
                    raise
                notes.append(str(exc))
    return out


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

    Latency and bus bandwidth come from the Target (--hop-latency-us, --busbw-fraction),
    which must then give both; the cores are free (no CPU term).
    """
    return Fit(
        engine="ring",
        variant="ring model",
        model=model,
        spec={"model": model, "batch_size": per_worker_batch, "bucket_mb": bucket_bytes / 2**20},
        workers=2,
        per_worker_batch=per_worker_batch,
        grad_bytes=grad_bytes,
        bucket_bytes=bucket_bytes,
        compute_s=compute_s,
        sync_s=compute_s,
        comm_cpu_s=0.0,
        link=LinkCost(LatencySplit(0.0, 0.0, False), {2: float("nan")}, None),
        machine=Layout(1, 1, 1),
        hosts=Layout(1, 1, 1),
        hidden_share_given=hidden_share,
    )


def to_record(p: Prediction, argv: Sequence[str]) -> RunRecord:
    """A record of kind "prediction": compare and the HTML report show it apart."""
    f, t = p.fit, p.target
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
        "link_rate_bps": t.link_rate_bps or f.link.rate_bps,
        "throughput": p.throughput,
        "throughput_interval": list(p.throughput_interval),
        "bound": p.bound,
        "bound_reasons": list(p.bound_reasons),
        "throughput_upper": p.throughput_upper,
        "throughput_lower": p.throughput_lower,
        "compute_share": p.compute_share,
        "compute_share_interval": list(p.compute_share_interval),
        "step_time_s": p.step_s,
        "per_worker_batch": p.per_worker_batch,
        "global_batch": p.per_worker_batch * p.workers,
        "interval": {"method": INTERVAL_METHOD, "held_fixed": list(p.held_fixed)},
        "inputs": _inputs(p),
    }
    return rec


def _inputs(p: Prediction) -> dict[str, Any]:
    """Every input the prediction used, as the record keeps it."""
    f, t = p.fit, p.target
    layout = t.layout(f, p.workers)
    return {
        "fit_workers": f.workers,
        "fit_link_rate_bps": f.link.rate_bps,
        "compute_s": t.compute_at(f, p.workers),
        "compute_given": t.compute_s is not None,
        "sync_s_at_fit": f.sync_s,
        "grad_bytes": f.grad_bytes if t.grad_bytes is None else t.grad_bytes,
        "grad_given": t.grad_bytes is not None,
        "bucket_bytes": f.bucket_bytes,
        "busbw_bytes_per_s": t.busbw(f, p.workers),
        "fixed_latency_s": f.link.latency.fixed_s,
        "hop_latency_s": f.link.latency.hop_s if t.hop_latency_s is None else t.hop_latency_s,
        "latency_split_measured": f.link.latency.identified,
        "overlap_at_fit": None if f.hidden_share_given is not None else f.overlap,
        "what_if": f.hidden_share_given is not None,
        "hidden_share_of_compute": f.hidden_share,
        # one worker's (records before 46e84e8 kept the whole run's under another key)
        "comm_cpu_s_per_worker_step": f.comm_cpu_s,
        "cpu_term_at_fit_s": f.cpu_s,
        "cores": None
        if f.hidden_share_given is not None
        else {
            "workers": layout.workers,
            "cpus": layout.cpus,
            "threads": layout.threads,
            "shared": layout.shared,
        },
        "extra_s": f.extra_s,
        "per_worker_batch": f.per_worker_batch,
    }


# --- tables --------------------------------------------------------------------------------


def _rate_text(bps: Any) -> str:
    return format_rate(bps) if isinstance(bps, int | float) and bps else "measured link"


def _with_interval(value: float, iv: Sequence[float] | None, spec: str) -> str:
    text = format(value, spec)
    if iv and len(iv) == 2 and iv[0] != iv[1]:
        text += f" [{format(iv[0], spec)}, {format(iv[1], spec)}]"
    return text


def _row(r: RunRecord) -> dict[str, Any]:
    p: dict[str, Any] = r["predicted"]  # type: ignore[assignment]
    inputs = p.get("inputs") or {}
    given = [f"{k} given" for k in ("compute", "grad") if inputs.get(f"{k}_given")]
    # records before the rename called compute / step "efficiency"
    share = p.get("compute_share", p.get("efficiency", np.nan))
    share_iv = p.get("compute_share_interval") or p.get("efficiency_interval")
    tput = _with_interval(p.get("throughput", np.nan), p.get("throughput_interval"), ",.0f")
    mark = _MARKS.get(str(p.get("bound")), "")
    return {
        "engine": p.get("variant") or r.get("engine"),
        "model": str((r.get("spec") or {}).get("model"))
        + (f" ({', '.join(given)})" if given else ""),
        "link": _rate_text(p.get("link_rate_bps")),
        "workers": p.get("workers"),
        "global batch": p.get("global_batch", ""),
        "samples/s": mark + tput,
        "compute share": mark + _with_interval(share, share_iv, ".0%"),
        "fitted at": "stated inputs (what-if)"
        if inputs.get("what_if")
        else f"{inputs.get('fit_workers')} workers, " + _rate_text(inputs.get("fit_link_rate_bps")),
        "hidden share of compute": f"{inputs.get('hidden_share_of_compute', np.nan):.0%}",
    }


# how a bounded prediction's point is marked in the table (`Prediction.bound`)
_MARKS = {"lower": ">= ", "between": "~ "}


def table(recs: Iterable[RunRecord]) -> Any:
    """Predicted throughput and compute share, one row per prediction record (a DataFrame)."""
    rows = [
        _row(r)
        for r in recs
        if r.get("kind") == "prediction" and isinstance(r.get("predicted"), dict)
    ]
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.drop_duplicates().sort_values(["model", "engine", "link", "workers"])
    return df


CAPTION = (
    "MODEL PREDICTIONS, not measurements (bench predict): compute-only step time plus the "
    "ring all-reduce cost not hidden under it and the CPU communication takes from shared "
    "cores, fitted to runs and bench collectives on their link, or from stated inputs "
    "(what-if). compute share = compute / step, not compare's throughput(n) / (n x "
    "throughput(1)); "
    "[95% interval over runs and collective records]; '>=': a lower bound (the fit saw "
    "all communication hidden); '~' (whether or not it did): more workers share the "
    "cores than at the fit, the step between no overlap and full overlap of their waits "
    "(the point: the geometric mean, or no overlap for an engine whose waits poll; the "
    "interval reaches both)"
)


def render_text(recs: Iterable[RunRecord]) -> str | None:
    """The predictions table as text, under its caption; None without predictions."""
    df = table(recs)
    if df.empty:
        return None
    return CAPTION + "\n" + df.to_string(index=False)


# --- checked against runs -------------------------------------------------------------------


def check(
    recs: Sequence[LoadedRecord],
    fit_link_bps: int,
    *,
    fit_workers: int | None = None,
    draws: int = DRAWS,
    **filters: Any,
) -> tuple[Any, list[str]]:
    """Fit on runs over `fit_link_bps` (at `fit_workers`, default the fewest measured),
    predict every other measured link rate and worker count of the same engine, model
    and spec on the machine they ran on, and compare: (a DataFrame, the notes).

    The error is predicted / measured throughput - 1; `covered` says whether the 95%
    interval holds the measured value (the runs' mean, as the fit takes them).
    """
    notes: list[str] = []
    cells = measured(recs, **filters)  # the fit is never made from these: no twin needed
    # notes only for the worker count fitted: the others on its link are checked, no twin
    fitted = samples(
        recs, fit_link_bps=fit_link_bps, fit_workers=fit_workers, notes=notes, **filters
    )
    others = (
        [] if fitted or fit_workers is None else samples(recs, fit_link_bps=fit_link_bps, **filters)
    )
    if others:
        counts = ", ".join(str(n) for n in sorted({s.workers for s in others}))
        raise PredictError(
            f"--fit-workers {fit_workers}: the fitted link has runs at {counts} workers only"
        )
    rows = []
    for s in _fitted(fitted, fit_workers):
        point, rng = s.fit(), np.random.default_rng(SEED)
        drawn = [s.fit(rng) for _ in range(draws)]
        for m in cells:
            same = (m.variant, spec_key(m.spec)) == (s.variant, spec_key(s.spec))
            if (
                same
                and m.link_rate_bps
                and (m.link_rate_bps, m.workers) != (fit_link_bps, s.workers)
            ):
                try:
                    rows.append(_check_row(s, m, point, drawn))
                except PredictError as exc:
                    notes.append(str(exc))
    return pd.DataFrame(rows), notes


def _fitted(fitted: Sequence[Sample], fit_workers: int | None) -> list[Sample]:
    """One sample per engine and spec: at `fit_workers`, or the fewest workers measured."""
    chosen: dict[tuple[str, str], Sample] = {}
    for s in sorted(fitted, key=lambda s: s.workers):
        key = (s.variant, spec_key(s.spec))
        if key not in chosen and (fit_workers is None or s.workers == fit_workers):
            chosen[key] = s
    return list(chosen.values())


def _check_row(s: Sample, m: Measured, point: Fit, drawn: Sequence[Fit]) -> dict[str, Any]:
    """`s`'s prediction for where `m` was measured, against `m`'s runs."""
    target = Target(
        link_rate_bps=m.link_rate_bps,
        same_machine=s.machine != s.hosts,
    )
    p = predict(point, target, m.workers, drawn)
    meas = m.workers * m.per_worker_batch / float(np.exp(np.mean(np.log(m.sync))))
    lo, hi = p.throughput_interval
    error_iv = error_interval(p.throughput, (lo, hi), meas, m.sync)
    return {
        "engine": s.variant,
        "model": s.model,
        "link": _rate_text(m.link_rate_bps),
        "workers": m.workers,
        "measured samples/s": meas,
        "predicted samples/s": p.throughput,
        "bound": p.bound or "",
        "interval": (lo, hi),
        "covered": lo <= meas <= hi,
        "error": p.throughput / meas - 1,
        "error interval": error_iv,
        "consistent": error_iv[0] <= 0 <= error_iv[1],
    }


def error_interval(
    predicted: float, interval: tuple[float, float], meas: float, runs: Sequence[float]
) -> tuple[float, float]:
    """95% interval of predicted / measured - 1, with both sides' uncertainty.

    The prediction's interval covers the fit's inputs; the measured value is itself the
    mean of a few runs on a machine whose launches drift, so a check asks whether the
    two agree within both spreads. In log space the prediction's half-widths (below,
    above) and the measured mean's t half-width (its runs' log step times) add in
    quadrature. One run: no spread of its own can be estimated, the fit's alone stands.
    """
    logs = np.log(np.asarray(runs, dtype=float))
    n = len(logs)
    m = t_quantile(0.975, n - 1) * logs.std(ddof=1) / np.sqrt(n) if n > 1 else 0.0
    below, above = np.log(predicted / interval[0]), np.log(interval[1] / predicted)
    centre = np.log(predicted / meas)
    return (
        float(np.expm1(centre - np.hypot(below, m))),
        float(np.expm1(centre + np.hypot(above, m))),
    )


def render_check(df: Any) -> str:
    """The error table, each engine's median absolute error and its intervals' coverage."""
    if df.empty:
        return "no engine and model measured both on the fitted link and on another link or worker count"
    shown = df.copy()
    for col in ("measured samples/s", "predicted samples/s"):
        shown[col] = shown[col].map("{:,.1f}".format)
    if "bound" in df:  # the point's mark, as the predictions table gives it
        shown["predicted samples/s"] = (
            df["bound"].map(lambda b: _MARKS.get(b, "")) + shown["predicted samples/s"]
        )
        shown = shown.drop(columns="bound")
    shown["interval"] = df["interval"].map(lambda iv: f"[{iv[0]:,.1f}, {iv[1]:,.1f}]")
    yes_no = {True: "yes", False: "no"}
    shown["covered"] = df["covered"].map(yes_no)
    shown["error"] = df["error"].map("{:+.1%}".format)
    shown["error interval"] = df["error interval"].map(lambda iv: f"[{iv[0]:+.1%}, {iv[1]:+.1%}]")
    shown["consistent"] = df["consistent"].map(yes_no)
    lines = [
        shown.to_string(index=False),
        "",
        "per engine: median absolute error; the prediction's 95% interval holds the measured "
        "value (covered); the error's 95% interval, the measured runs' spread added, holds 0 "
        "(consistent):",
    ]
    for engine, g in df.groupby("engine"):
        lines.append(
            f"  {engine}: {g['error'].abs().median():.1%}; covered {int(g['covered'].sum())}/"
            f"{len(g)}; consistent {int(g['consistent'].sum())}/{len(g)}"
        )
    return "\n".join(lines)
