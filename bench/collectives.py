"""`bench collectives`: allreduce latency and bandwidth per engine, and their table.

Each (engine, workers) cell launches runners/collectives.py through the engine's
own launcher, like a training cell, with a time-out; a cell that leaves no
record gets a failed/timeout record of kind "collective".
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd

from bench import env as benv
from bench import launch, records
from bench.engines import Engine
from bench.sweep import _tail, run_launch

FILE = launch.COLLECTIVES_FILE
DEFAULT_SIZES = launch.COLLECTIVE_SIZES


def _ints(text: str, flag: str, least: int, example: str, many: bool = True) -> tuple[int, ...]:
    """Integers >= least from a comma list (one integer unless `many`), or a ValueError."""
    what = "integers, comma-separated" if many else "one integer"
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{flag} takes {what} (e.g. {flag} {example}), got {text!r}") from None
    if not values or (len(values) > 1 and not many):
        raise ValueError(f"{flag} takes {what} (e.g. {flag} {example}), got {text!r}")
    if min(values) < least:
        raise ValueError(f"{flag} must be >= {least}, got {text!r}")
    return values


@dataclasses.dataclass(frozen=True)
class Plan:
    """`bench collectives`' arguments, checked before any launch."""

    engines: tuple[Engine, ...]
    workers: tuple[int, ...]
    sizes: tuple[int, ...]
    iters: int
    threads: int
    device: str
    timeout: float

    @classmethod
    def parse(
        cls,
        *,
        engines: str,
        workers: str,
        sizes: str,
        iters: str,
        threads: str,
        device: str,
        timeout: str,
    ) -> Plan:
        """Parse the command-line strings; a ValueError's message names the bad argument."""
        names = [e.strip() for e in engines.split(",") if e.strip()]
        known = [e.value for e in Engine]
        unknown = [e for e in names if e not in known]
        if unknown or not names:
            raise ValueError(
                f"--engines: unknown engine(s) {', '.join(unknown) or '(none given)'}; "
                f"choose from {','.join(known)}"
            )
        byte_sizes = _ints(sizes, "--sizes", 4, "4096,1048576")
        odd = [n for n in byte_sizes if n % 4]
        if odd:
            raise ValueError(f"--sizes are bytes of float32 data, so multiples of 4; got {odd[0]}")
        try:
            seconds = float(timeout)
        except ValueError:
            seconds = float("nan")
        if not seconds > 0:  # also refuses nan
            raise ValueError(f"--timeout takes seconds > 0, got {timeout!r}")
        return cls(
            engines=tuple(Engine(e) for e in names),
            workers=_ints(workers, "--workers", 1, "1,2"),
            sizes=byte_sizes,
            iters=_ints(iters, "--iters", 1, "20", many=False)[0],
            threads=_ints(threads, "--threads", 1, "1", many=False)[0],
            device=device,
            timeout=seconds,
        )

    def extra(self) -> list[str]:
        """The arguments every cell's runners/collectives.py gets."""
        return [
            "--iters",
            str(self.iters),
            "--threads",
            str(self.threads),
            "--device",
            self.device,
            "--sizes",
            ",".join(map(str, self.sizes)),
        ]


def _argv(
    engine: Engine, w: int, target: Path, extra: Sequence[str], attempt: str, log_dir: Path
) -> list[str]:
    args = [
        "--engine",
        engine.value,
        "--results",
        str(target.parent),
        *extra,
        "--label",
        f"attempt={attempt}",
        "--label",
        f"log_dir={log_dir}",
    ]
    return launch.launch_argv(engine, w, args, log_dir=log_dir, script=launch.COLLECTIVES_SCRIPT)


def dry_run(plan: Plan, results: Path) -> list[list[str]]:
    """The launch command of every cell, in order, without running or writing anything."""
    target = records.results_file(results).parent / FILE
    run_dir = target.parent / "runs" / "collectives-DRY-RUN"
    return [
        _argv(engine, w, target, plan.extra(), "DRY-RUN", run_dir / f"{engine.value}-np{w}")
        for w in plan.workers
        for engine in plan.engines
    ]


def _fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def run(
    engines: Sequence[Engine],
    workers: Sequence[int],
    results: Path,
    *,
    timeout: float,
    extra: Sequence[str] = (),
    out: TextIO = sys.stdout,
) -> list[str]:
    """Run every (engine, workers) cell; returns the statuses in order."""
    target = records.check_writable(results).parent / FILE
    run_dir = target.parent / "runs" / ("collectives-" + time.strftime("%Y%m%d-%H%M%S"))
    statuses = []
    for w in workers:
        for engine in engines:
            attempt = uuid.uuid4().hex
            log_dir = run_dir / f"{engine.value}-np{w}"
            log_dir.mkdir(parents=True, exist_ok=True)
            argv = _argv(engine, w, target, extra, attempt, log_dir)
            print(f"collectives: {engine.value} np={w} ...", end="", file=out, flush=True)
            try:
                status, error, seconds = run_launch(argv, log_dir / "launcher.log", timeout)
            finally:
                benv.scrub_log_dir(log_dir)  # launchers echo the environment into logs
            written = records.by_label(target, "attempt", attempt)
            if written:
                status = written[-1]["status"]
            else:
                status = status if status != records.Status.OK else records.Status.FAILED
                rec = records.new_record(
                    {"op": "allreduce"},
                    engine.value,
                    w,
                    {"attempt": attempt},
                    {"name": "bench collectives", "argv": argv},
                    status=status,
                    error=f"{error or 'no record written'}\n{_tail(log_dir / 'launcher.log')}",
                )
                rec["kind"] = "collective"
                records.append(target, rec)
            print(f" {status} {seconds:.1f}s", file=out, flush=True)
            statuses.append(status)
    return statuses


def tables(recs: Sequence[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Bus bandwidth (GB/s) and latency (us) by message size, one column per engine and workers.

    With several records per cell the median is shown.
    """
    rows = []
    for r in recs:
        if r.get("kind") != "collective" or r.get("status") != records.Status.OK:
            continue
        for res in r.get("results") or []:
            rows.append(
                {
                    "cell": f"{r['engine']} np{r['world_size']}",
                    "bytes": res["bytes"],
                    "busbw": res["busbw_gbps"],
                    "latency": res["latency_s"] * 1e6,
                }
            )
    if not rows:
        return {}
    df = pd.DataFrame(rows)
    out = {}
    for value, name in (("busbw", "bus bandwidth GB/s"), ("latency", "latency us")):
        t = df.pivot_table(index="bytes", columns="cell", values=value, aggfunc=np.median)
        t.index = pd.Index([_fmt_bytes(int(b)) for b in t.index], name="size")
        t.columns.name = None
        out[name] = t
    return out


def render_text(parts: dict[str, pd.DataFrame]) -> str:
    lines = [
        "allreduce, float32. bus bandwidth = size / time x 2(n-1)/n (nccl-tests); "
        "time = median over iterations of the slowest rank"
    ]
    for name, df in parts.items():
        fmt = "{:.3f}" if name.startswith("bus") else "{:,.0f}"
        shown = df.map(lambda v, f=fmt: "-" if pd.isna(v) else f.format(v))
        lines += ["", f"  {name}:", shown.to_string()]
    return "\n".join(lines)
