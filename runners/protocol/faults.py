"""Test-only faults injected into a real run at a named step, so that no test races the clock.

A test that needs a hung, killed or slow worker sets BENCH_TEST_FAULT in the
environment of the launch (every launcher passes it to its workers):

    stall:rank=1,step=3     rank 1 stops itself (SIGSTOP) before its step 3: hung, for certain
    kill:rank=1,step=3      rank 1 kills itself (SIGKILL) before its step 3
    exit:rank=1,step=3      rank 1 exits with status 1 before its step 3
    delay:rank=1,ms=5       every step of rank 1 takes 5 ms more: a straggler
    slow_input:rank=0,ms=5  building each of rank 0's batches takes 5 ms more: a slow
                            input stage (batches are built before the timed loop)
    abort:rank=1            rank 1 aborts (SIGABRT) at exit, after the record is written:
                            a run that finished its work and then died

`step` counts this run's training steps from 0 (warm-up included). Without the
variable nothing is wrapped and the timed loop is untouched. A run told to
inject a fault says so in its record (`injected`), so such numbers are never
mistaken for a measurement.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.core.errors import InputError
from runners.adapters.base import EngineAdapter

VARIABLE = "BENCH_TEST_FAULT"
KINDS = {
    "stall": ("rank", "step"),
    "kill": ("rank", "step"),
    "exit": ("rank", "step"),
    "delay": ("rank", "ms"),
    "slow_input": ("rank", "ms"),
    "abort": ("rank",),
}


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    step: int = 0
    ms: float = 0.0

    def __str__(self) -> str:
        return os.environ.get(VARIABLE, self.kind)


def parse(text: str) -> Fault:
    """`KIND:key=value,...` as a Fault; InputError naming what is wrong."""
    kind, _, rest = text.partition(":")
    if kind not in KINDS:
        raise InputError(f"{VARIABLE}={text!r}: the fault must be one of {', '.join(KINDS)}")
    try:
        given = {k: float(v) for k, _, v in (p.partition("=") for p in rest.split(",") if p)}
    except ValueError:
        raise InputError(
            f"{VARIABLE}={text!r}: values must be numbers, e.g. stall:rank=1,step=3"
        ) from None
    needed = KINDS[kind]
    if set(given) != set(needed):
        raise InputError(f"{VARIABLE}={text!r}: {kind} takes {', '.join(needed)}")
    return Fault(kind, int(given["rank"]), int(given.get("step", 0)), given.get("ms", 0.0))


def from_env(environ: Mapping[str, str] | None = None) -> Fault | None:
    """The fault this run was told to inject, or None (the normal case)."""
    text = (os.environ if environ is None else environ).get(VARIABLE)
    return parse(text) if text else None


def install(adapter: EngineAdapter, fault: Fault) -> None:
    """Wrap the adapter's training step so that `fault` happens on its rank."""
    if fault.rank != adapter.rank or fault.kind == "abort":
        return
    if fault.kind == "slow_input":
        build: Callable[[Any, Any], Any] = adapter.to_batch

        def slow(x: Any, y: Any) -> Any:
            time.sleep(fault.ms / 1e3)
            return build(x, y)

        adapter.to_batch = slow  # type: ignore[method-assign]
        return
    step_fn: Callable[[Any, float], Any] = adapter.train_step
    count = 0

    def faulty(batch: Any, lr: float) -> Any:
        nonlocal count
        if fault.kind == "delay":
            time.sleep(fault.ms / 1e3)
        elif count == fault.step:
            _act(fault)
        count += 1
        return step_fn(batch, lr)

    adapter.train_step = faulty  # type: ignore[method-assign]
    if fault.kind == "delay":  # a slow rank's own work is slow in the waits probe too
        local = adapter.local_step

        def slow_local(batch: Any) -> None:
            time.sleep(fault.ms / 1e3)
            local(batch)

        adapter.local_step = slow_local  # type: ignore[method-assign]


def at_exit(fault: Fault | None, rank: int) -> None:
    """The `abort` fault: this rank dies at exit, once its record is written."""
    if fault is not None and fault.kind == "abort" and fault.rank == rank:
        _act(fault)


def _act(fault: Fault) -> None:
    print(f"{VARIABLE}: rank {fault.rank} injects {fault.kind}", file=sys.stderr, flush=True)
    if fault.kind == "stall":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.kind == "exit":
        os._exit(1)
    elif fault.kind == "abort":
        os.abort()
