"""`bench predict`: each engine's scaling modelled from measured records (predictions,
written as records of kind 'prediction', which compare shows apart)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import predict, records
from bench.cli.common import EXIT_BAD_INPUT, not_records, positive_ints
from bench.core.errors import BenchError, PredictError
from bench.core.units import format_rate, parse_rate

DESCRIPTION = (
    "Fit, per engine and model, a model of step time (compute-only step time, ring "
    "all-reduce cost from bench collectives on the same link, the overlap measured, the "
    "CPU communication takes from shared cores) and predict throughput and compute share "
    "at other worker counts and link rates (weak scaling). Writes records of kind "
    "'prediction', which compare shows apart."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", default=["results"], help="result files or directories")
    p.add_argument("--workers", default="8,64,512", help="worker counts to predict, comma list")
    p.add_argument("--link", help="link rate to predict on, e.g. 25gbit (default: the fitted link)")
    p.add_argument("--fit-link", help="fit only runs over this emulated link rate, e.g. 500mbit")
    p.add_argument("--engines", help="comma list of engines to fit (default: all measured)")
    p.add_argument("--models", help="comma list of models to fit (default: all measured)")
    p.add_argument(
        "--compute-ms",
        type=float,
        help="per-worker compute-only step time to use instead of the measured one "
        "(e.g. a GPU's, from the GPU check)",
    )
    p.add_argument(
        "--grad-mb", type=float, help="gradient MB (2^20 bytes) per step instead of the model's"
    )
    p.add_argument(
        "--busbw-fraction",
        type=float,
        help="bus bandwidth as a fraction of --link (default: the fraction measured)",
    )
    p.add_argument(
        "--hop-latency-us",
        type=float,
        help="latency of one ring step in microseconds (default: measured, from collectives "
        "at two worker counts; from one, all of the latency is taken per hop)",
    )
    _what_if_arguments(p)
    _where_arguments(p)
    p.add_argument(
        "--results",
        default="results",
        help="where predictions.jsonl is written (default: results/)",
    )
    p.add_argument("--no-write", action="store_true", help="print only, write no records")


def _what_if_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--what-if",
        metavar="MODEL",
        help="no records: the ring model alone for MODEL (a label) from stated inputs; needs "
        "--compute-ms, --grad-mb, --hidden-share, --link, --busbw-fraction, --hop-latency-us",
    )
    p.add_argument(
        "--hidden-share",
        type=float,
        help="with --what-if: share of compute under which communication hides "
        "(0: none; about 0.67: all of the backward pass)",
    )
    p.add_argument("--bucket-mb", type=float, default=25.0, help="with --what-if: bucket/fusion MB")
    p.add_argument(
        "--batch", type=int, default=32, help="with --what-if: per-worker batch (samples)"
    )


def _where_arguments(p: argparse.ArgumentParser) -> None:
    """Where the prediction is for (cores), and the check against runs."""
    p.add_argument(
        "--workers-per-node",
        type=int,
        help="workers sharing one node's CPUs where predicted (default: as the fit's hosts)",
    )
    p.add_argument(
        "--cpus-per-node",
        type=int,
        help="usable CPUs per node where predicted (default: the fit's)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --fit-link: predict every other measured link rate and worker count, "
        "print the error and whether each interval holds the measured value",
    )
    p.add_argument(
        "--fit-workers",
        type=int,
        help="with --check: fit at this worker count (default: the fewest measured)",
    )


def _positive(value: float | None, flag: str, upper: float | None = None) -> None:
    if value is not None and not (value > 0 and (upper is None or value <= upper)):
        bound = f" and <= {upper:g}" if upper is not None else ""
        raise PredictError(f"{flag} must be > 0{bound}, got {value}")


def _names(text: str | None) -> list[str]:
    return [e.strip() for e in (text or "").split(",") if e.strip()]


def run(args: argparse.Namespace) -> int:
    workers = positive_ints(args.workers, "--workers", "8,64,512")
    if workers is None:
        return EXIT_BAD_INPUT
    try:
        _check_inputs(args)
        if args.check:
            return _check(args)
        target = _target(args)
        fit_link_bps = parse_rate(args.fit_link) if args.fit_link else None
        preds = _predictions(args, workers, target, fit_link_bps, _what_if(args))
        recs = [predict.to_record(p, ["bench", *sys.argv[1:]]) for p in preds]
        if not args.no_write:
            _write(recs, Path(args.results))
        print(predict.render_text(recs))
        return 0
    except BenchError as exc:
        print(f"error: {exc}".replace("--emulate-link: rate", "rate"), file=sys.stderr)
        return EXIT_BAD_INPUT


def _predictions(
    args: argparse.Namespace,
    workers: Sequence[int],
    target: predict.Target,
    fit_link_bps: int | None,
    given: predict.Fit | None,
) -> list[predict.Prediction]:
    """Every prediction asked for: from the stated inputs (`given`, --what-if: no records,
    no interval), else fitted to the records under the paths, what was left out said once."""
    if given is not None:
        return [predict.predict(given, target, n) for n in workers]
    loaded = _load(args.paths)
    notes: list[str] = []
    fitted = predict.samples(
        loaded.records,
        engines=_names(args.engines),
        models_=_names(args.models),
        fit_link_bps=fit_link_bps,
        notes=notes,
    )
    if not fitted:
        _print_skipped(notes)
        raise PredictError(
            f"nothing to fit under {', '.join(args.paths)}: it needs multi-worker training "
            "records with their compute-only twins and bench collectives records on the "
            "same link"
        )
    preds = predict.run(fitted, target, workers, notes=notes)
    _print_skipped(notes)
    if not preds:
        raise PredictError("no prediction the model can make for these worker counts (see above)")
    return preds


def _load(paths: Sequence[str]) -> records.Loaded:
    """The records under `paths`; a path that does not exist (or holds no records) is
    refused by name, where the fit would only say it found nothing to fit."""
    wrong = not_records(paths)
    if wrong:
        raise PredictError(wrong)
    return records.load(paths)


def _print_skipped(notes: Sequence[str]) -> None:
    for note in dict.fromkeys(notes):  # in order, each once
        print(f"bench predict: skipped {note}", file=sys.stderr)


def _write(recs: Sequence[records.RunRecord], results: Path) -> None:
    """Append the prediction records to predictions.jsonl beside the results file."""
    target_file = records.check_writable(results).parent / predict.FILE
    for rec in recs:
        records.append(target_file, rec)
    print(f"bench predict: {len(recs)} predictions -> {target_file}", file=sys.stderr)


def _check_inputs(args: argparse.Namespace) -> None:
    _positive(args.compute_ms, "--compute-ms")
    _positive(args.grad_mb, "--grad-mb")
    _positive(args.workers_per_node, "--workers-per-node")
    _positive(args.cpus_per_node, "--cpus-per-node")
    _positive(args.busbw_fraction, "--busbw-fraction", 1.0)
    if args.hop_latency_us is not None and args.hop_latency_us < 0:
        raise PredictError(f"--hop-latency-us must be >= 0, got {args.hop_latency_us}")
    if args.hidden_share is not None and not args.what_if:
        raise PredictError("--hidden-share is a --what-if input; runs measure it")


def _check(args: argparse.Namespace) -> int:
    """--check: fit on one link rate, predict every other measured one, print the error."""
    if not args.fit_link:
        raise PredictError("--check needs --fit-link RATE, the link to fit on")
    ignored = {
        "--link": args.link,
        "--compute-ms": args.compute_ms,
        "--grad-mb": args.grad_mb,
        "--busbw-fraction": args.busbw_fraction,
        "--hop-latency-us": args.hop_latency_us,
        "--workers-per-node": args.workers_per_node,
        "--cpus-per-node": args.cpus_per_node,
        "--what-if": args.what_if,
    }
    given = [flag for flag, value in ignored.items() if value is not None]
    if given:
        raise PredictError(
            f"--check predicts where runs were measured, so it takes no {', '.join(given)}; "
            "drop them, or predict without --check"
        )
    fit_link = parse_rate(args.fit_link)
    loaded = _load(args.paths)
    df, notes = predict.check(
        loaded.records,
        fit_link,
        fit_workers=args.fit_workers,
        engines=_names(args.engines),
        models_=_names(args.models),
    )
    _print_skipped(notes)
    print(f"fitted on {format_rate(fit_link)}; predicted / measured - 1:")
    print(predict.render_check(df))
    return 0 if not df.empty else 1


def _target(args: argparse.Namespace) -> predict.Target:
    return predict.Target(
        link_rate_bps=parse_rate(args.link) if args.link else None,
        busbw_fraction=args.busbw_fraction,
        hop_latency_s=None if args.hop_latency_us is None else args.hop_latency_us * 1e-6,
        compute_s=None if args.compute_ms is None else args.compute_ms * 1e-3,
        grad_bytes=None if args.grad_mb is None else args.grad_mb * 2**20,
        workers_per_node=args.workers_per_node,
        cpus_per_node=args.cpus_per_node,
    )


def _what_if(args: argparse.Namespace) -> predict.Fit | None:
    """--what-if MODEL: the ring model alone, every input stated."""
    if not args.what_if:
        return None
    needed = {
        "--compute-ms": args.compute_ms,
        "--grad-mb": args.grad_mb,
        "--hidden-share": args.hidden_share,
        "--link": args.link,
        "--busbw-fraction": args.busbw_fraction,
        "--hop-latency-us": args.hop_latency_us,
    }
    missing = [flag for flag, value in needed.items() if value is None]
    if missing:
        raise PredictError(f"--what-if states every input; give {', '.join(missing)} too")
    if not 0 <= args.hidden_share <= 1:
        raise PredictError(f"--hidden-share must be in [0, 1], got {args.hidden_share}")
    _positive(args.bucket_mb, "--bucket-mb")
    _positive(args.batch, "--batch")
    return predict.what_if(
        args.what_if,
        compute_s=args.compute_ms * 1e-3,
        grad_bytes=args.grad_mb * 2**20,
        bucket_bytes=args.bucket_mb * 2**20,
        hidden_share=args.hidden_share,
        per_worker_batch=args.batch,
    )
