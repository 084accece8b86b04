"""Performance regression checks (pytest-benchmark).

In the normal test run these execute once each (--benchmark-disable) as smoke
tests; pytest-benchmark's own flags time them (tests/conftest.py). `scripts/perf.sh`
times the training steps and the calibration for real, alternating a base revision
and the working tree (scripts/perfgate.py decides); loading and comparing records it
counts in instructions instead (scripts/perfcount_work.py, the same paths on the same
kind of records): deterministic work, whose time swung by 25% between launches on a
shared VM while its count moves by less than 0.1%. Every benchmark stores engine,
model and versions in extra_info, and measures one thing: its set-up (files,
caches, models) happens outside the timed rounds, and one warm-up round is run
and discarded, so first-round effects (imports, cold caches, lazily built
checkers) are in no round.

BENCH_PERF_SLOWDOWN=F (a fraction, e.g. 0.15) makes every training step do F
times more work, a spin of F x the step's own median time: the slowdown the
gate's calibration injects on purpose (docs/development.md).
BENCH_PERF_SLOWDOWN_ENGINE=ddp limits it to that engine's steps.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import models
from bench import records
from bench.contract import data
from bench.contract.spec import RunSpec
from bench.core import machine as env
from bench.engines import Engine
from bench.tables import compare, frame
from runners.adapters.base import EngineAdapter
from runners.protocol.common import load_adapter

GOLDEN = Path(__file__).parent.parent / "data" / "golden.jsonl"
# Records the load and compare benchmarks read: enough for their rounds to be dominated
# by per-record work, few enough that the gate's launches stay cheap (at scale:
# tests/benchmarks/compare_scale.py).
RECORDS = 2_000


def test_calibration(benchmark: Any) -> None:
    """A fixed numpy workload: divide other medians by this one to compare across machines.

    Pinned to one BLAS thread: with the machine's default, the matmul's time depends on
    how many cores happen to be free, which is what a calibration point must not measure.
    """
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    with threadpool_limits(limits=1):
        blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
        assert blas and all(p["num_threads"] == 1 for p in blas), blas
        benchmark.extra_info.update(
            {
                "engine": "numpy",
                "model": "matmul256",
                "versions": env.library_versions(),
                "blas_threads": 1,
            }
        )
        benchmark(lambda: a @ a)


@pytest.fixture(scope="module", params=[e.value for e in Engine])
def engine_adapter(request: pytest.FixtureRequest) -> Iterator[EngineAdapter]:
    """One in-process adapter per engine at world size 1 (no launcher).

    Adapters set HOROVOD_*/thread variables in this process's environment; they are
    restored afterwards so that later tests' launches do not inherit them (a runner
    reads inherited HOROVOD_* settings as the launcher's).
    """
    saved = dict(os.environ)
    env.set_thread_env(1)
    adapter = load_adapter(Engine(request.param))(RunSpec(threads=1))
    adapter.init()
    yield adapter
    adapter.shutdown()
    os.environ.clear()
    os.environ.update(saved)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _slowdown(engine: Engine) -> float:
    """The fraction of work BENCH_PERF_SLOWDOWN adds to this engine's step (test-only)."""
    only = os.environ.get("BENCH_PERF_SLOWDOWN_ENGINE")
    if only and only not in {e.value for e in Engine}:
        raise ValueError(f"BENCH_PERF_SLOWDOWN_ENGINE={only!r} is not one of the engines")
    if only and only != engine.value:
        return 0.0
    return float(os.environ.get("BENCH_PERF_SLOWDOWN") or 0)


def _slowed(step: Any, fraction: float) -> Any:
    """`step` with `fraction` x its median time of work added."""
    if fraction <= 0:
        return step
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    extra = fraction * float(np.median(times))

    def slower() -> None:
        step()
        _spin(extra)

    return slower


@pytest.mark.benchmark(warmup=True, warmup_iterations=1)
@pytest.mark.parametrize("model_name", ["mlp", "lenet"])
def test_train_step(benchmark: Any, engine_adapter: EngineAdapter, model_name: str) -> None:
    ds = data.load_digits(seed=0, test_fraction=0.2)
    model = models.get(model_name)
    engine_adapter.spec = RunSpec(model=model_name, threads=1)
    engine_adapter.build(
        model, models.init_weights(model, ds.input_shape, 10, 0), ds.input_shape, 10
    )
    batch = engine_adapter.to_batch(ds.train_x[:32], ds.train_y[:32])

    def step() -> None:
        engine_adapter.train_step(batch, 0.01)
        engine_adapter.synchronize()

    benchmark.extra_info.update(
        {
            "engine": engine_adapter.engine.value,
            "model": model_name,
            "batch": 32,
            "versions": env.library_versions(),
            "slowdown": _slowdown(engine_adapter.engine),
        }
    )
    benchmark(_slowed(step, _slowdown(engine_adapter.engine)))


@pytest.fixture(scope="module")
def many_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 records (the golden ones, varied) in one JSON Lines file."""
    base = [r for r in records.load([GOLDEN]).records if r["status"] == "ok"]
    path = tmp_path_factory.mktemp("many") / "runs.jsonl"
    rng = np.random.default_rng(0)
    with open(path, "w") as fh:
        for i in range(RECORDS):
            r = copy.deepcopy(base[i % len(base)])
            r.pop("_source", None)
            r["run_id"] = f"r{i}"
            r["spec"]["seed"] = i % 50
            r["throughput"] = float(r["throughput"] or 0) * float(rng.uniform(0.9, 1.1))
            fh.write(records.encode(r).decode())  # as a runner writes it: series packed
    return path


@pytest.mark.benchmark(warmup=True, warmup_iterations=1)
def test_load_records(benchmark: Any, many_records: Path) -> None:
    benchmark.extra_info.update(
        {"engine": "-", "model": "-", "records": RECORDS, "versions": env.library_versions()}
    )
    loaded = benchmark(records.load, [many_records])
    assert len(loaded.records) == RECORDS and not loaded.problems


@pytest.mark.benchmark(warmup=True, warmup_iterations=1)
def test_compare_records(benchmark: Any, many_records: Path) -> None:
    """What `bench compare` does warm: the runs read from the file's columnar cache (the
    warm-up round builds it), one frame, every comparison of it."""
    recs = records.load([many_records]).records
    benchmark.extra_info.update(
        {"engine": "-", "model": "-", "records": RECORDS, "versions": env.library_versions()}
    )

    def warm() -> list[compare.Comparison]:
        runs, loaded = frame.read([many_records])
        return compare.compare(loaded.records, runs=runs.frame)

    comps = benchmark(warm)
    synced = sum(1 for r in recs if r["spec"]["grad_sync"])
    assert sum(int(c.sections["throughput"]["runs"].sum()) for c in comps) == synced
