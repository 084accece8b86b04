"""The allreduce benchmark protocol, shared by every engine (entry: runners/allreduce.py)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench import records
from bench.contract.spec import Device, RunSpec
from bench.core import machine
from bench.core.errors import BenchError, InputError
from bench.engines import Engine
from bench.launch import netns
from bench.measure.allreduce import DEFAULT_SIZES
from bench.records import Kind
from bench.records.types import CollectiveResult
from runners.adapters.base import EngineAdapter
from runners.protocol.common import launcher, load_adapter, parse_labels


def bus_factor(world: int) -> float:
    """nccl-tests' allreduce correction: each rank sends and receives 2(n-1)/n of the data."""
    return 2 * (world - 1) / world


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Allreduce latency/bandwidth of one engine.")
    p.add_argument("--engine", required=True, choices=[e.value for e in Engine])
    p.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=DEFAULT_SIZES,
        help="message sizes in bytes, comma-separated (default: 4 KiB to 64 MiB, x4)",
    )
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--device",
        choices=[d.value for d in Device],
        default="auto",
        help="auto: cuda where a CUDA GPU is visible, else cpu (as the training runners)",
    )
    p.add_argument("--results", default="results", help="results directory")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    return p


def measure(adapter: Any, sizes: Sequence[int], iters: int, warmup: int) -> list[CollectiveResult]:
    world = adapter.world_size
    rows: list[CollectiveResult] = []
    for nbytes in sizes:
        buf = adapter.buffer(nbytes)
        for _ in range(warmup):
            adapter.allreduce_inplace(buf)
        adapter.synchronize()
        adapter.barrier()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            adapter.allreduce_inplace(buf)
            adapter.synchronize()
            times.append(time.perf_counter() - t0)
        slowest = adapter.allgather(np.asarray(times, dtype=np.float64)).max(axis=0)
        latency = float(np.median(slowest))
        algbw = nbytes / latency / 1e9
        rows.append(
            {
                "bytes": int(nbytes),
                "latency_s": latency,
                "latency_p95_s": float(np.percentile(slowest, 95)),
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * bus_factor(world),
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or not args.sizes or min(args.sizes) < 4:
        print(
            "error: --iters must be >= 1, --warmup >= 0, and every size >= 4 bytes", file=sys.stderr
        )
        return 2
    engine = Engine(args.engine)
    try:
        records.check_writable(args.results)
        # numbers as numbers (repeat, link_rate_bps), as the training runners store them
        try:
            labels = records.typed_labels(parse_labels(args.label))
        except ValueError as exc:
            raise InputError(f"--label: {exc}") from None
        spec = RunSpec(threads=args.threads, device=Device(args.device))
        machine.set_thread_env(spec.threads)
        adapter = load_adapter(engine)(spec)
        adapter.init()  # e.g. a contradicting HOROVOD_FUSION_THRESHOLD is refused here
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = _new_record(engine, adapter, spec, args, labels)
    code = 0
    try:
        record["results"] = measure(adapter, args.sizes, args.iters, args.warmup)
        record["engine_versions"] = adapter.versions()
        record["threads"] = adapter.threads()
    except Exception as exc:
        record["status"], record["error"] = records.Status.FAILED, f"{type(exc).__name__}: {exc}"
        code = 1
    if adapter.rank == 0:
        _write(record, engine, adapter.world_size, args.results)
    if code == 0:
        adapter.shutdown()
    return code


def _new_record(
    engine: Engine, adapter: EngineAdapter, spec: RunSpec, args: argparse.Namespace, labels: Any
) -> records.RunRecord:
    spec_data = {
        "op": "allreduce",
        "dtype": "float32",
        "sizes": list(args.sizes),
        "iters": args.iters,
        "warmup": args.warmup,
        "threads": args.threads,
        "device": spec.device.value,  # auto resolved
    }
    record = records.new_record(
        spec_data,
        engine.value,
        adapter.world_size,
        labels,
        launcher(engine),
        link=netns.link_for(labels),
    )
    record["kind"] = Kind.COLLECTIVE
    record.update(machine.oversubscription(adapter.local_world_size, spec.threads))  # type: ignore[typeddict-item]
    return record


def _write(record: records.RunRecord, engine: Engine, world: int, results: str) -> None:
    path = records.append(records.results_file(results).parent / records.COLLECTIVES_FILE, record)
    for row in record.get("results", []):
        print(
            f"[{engine.value} np={world}] {row['bytes']:>10,d} B  "
            f"{row['latency_s'] * 1e6:10.1f} us  algbw {row['algbw_gbps']:.3f} GB/s  "
            f"busbw {row['busbw_gbps']:.3f} GB/s",
            flush=True,
        )
    print(f"record {record['run_id'][:8]} -> {path}", flush=True)
