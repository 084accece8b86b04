"""`bench collectives`: allreduce latency and bandwidth per engine, and their table.

Each (engine, workers) cell launches runners/collectives.py through the engine's
own launcher, like a training cell, with a time-out; a cell that leaves no
record gets a failed/timeout record of kind "collective".
"""

from __future__ import annotations

import dataclasses
import functools
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
from bench.record import LoadedRecord, RunRecord
from bench.sweep import attempt_record, run_launches

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
    link_bps: int | None = None  # --emulate-link's rate; None: this host only

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
        emulate_link: str | None = None,
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
        counts = _ints(workers, "--workers", 1, "1,2")
        link_bps = None
        if emulate_link is not None:
            from bench.netns import parse_rate

            link_bps = parse_rate(emulate_link)  # LinkError is a ValueError
            odd = [w for w in counts if w % 2]
            if odd:
                raise ValueError(
                    f"--emulate-link spreads workers evenly over two namespaces; {odd[0]} "
                    "workers cannot be: use even --workers, e.g. --workers 2"
                )
        return cls(
            engines=tuple(Engine(e) for e in names),
            workers=counts,
            sizes=byte_sizes,
            iters=_ints(iters, "--iters", 1, "20", many=False)[0],
            threads=_ints(threads, "--threads", 1, "1", many=False)[0],
            device=device,
            timeout=seconds,
            link_bps=link_bps,
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
    engine: Engine,
    w: int,
    target: Path,
    extra: Sequence[str],
    attempt: str,
    log_dir: Path,
    cluster: launch.Cluster | None = None,
    link_bps: int | None = None,
) -> list[launch.NodeLaunch]:
    """The cell's launch, one entry per host it starts from (one without a cluster)."""
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
    if link_bps:  # records.new_record turns it into the record's `link`
        args += ["--label", f"link_rate_bps={link_bps}"]
    script = launch.COLLECTIVES_SCRIPT
    if cluster is not None:
        return launch.multinode_launch(engine, cluster, w, args, log_dir=log_dir, script=script)
    argv = launch.launch_argv(engine, w, args, log_dir=log_dir, script=script)
    return [launch.NodeLaunch(launch.Host("localhost", w), argv, argv)]


def dry_run(plan: Plan, results: Path, cluster: launch.Cluster | None = None) -> list[list[str]]:
    """The launch command of every cell (every host's), in order, without running anything."""
    target = records.results_file(results).parent / FILE
    run_dir = target.parent / "runs" / "collectives-DRY-RUN"
    return [
        node.argv
        for w in plan.workers
        for engine in plan.engines
        for node in _argv(
            engine,
            w,
            target,
            plan.extra(),
            "DRY-RUN",
            run_dir / f"{engine.value}-np{w}",
            cluster,
            plan.link_bps,
        )
    ]


def _fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _failed(
    engine: Engine,
    workers: int,
    attempt: str,
    argv: list[str] | list[list[str]],
    link_bps: int | None,
    status: str,
    error: str,
) -> RunRecord:
    """The record of a cell whose launch left none (see sweep.attempt_record)."""
    labels: dict[str, Any] = {"attempt": attempt}
    if link_bps:
        labels["link_rate_bps"] = link_bps
    rec = records.new_record(
        {"op": "allreduce"},
        engine.value,
        workers,
        labels,
        {"name": "bench collectives", "argv": argv},
        status=status,
        error=error,
    )
    rec["kind"] = "collective"
    return rec


def run(
    engines: Sequence[Engine],
    workers: Sequence[int],
    results: Path,
    *,
    timeout: float,
    extra: Sequence[str] = (),
    out: TextIO = sys.stdout,
    cluster: launch.Cluster | None = None,
    link_bps: int | None = None,
) -> list[str]:
    """Run every (engine, workers) cell; returns the statuses in order.

    With `cluster`, each cell's workers are spread over its hosts (the namespace pair
    of --emulate-link, whose rate `link_bps` the records carry).
    """
    target = records.check_writable(results).parent / FILE
    run_dir = target.parent / "runs" / ("collectives-" + time.strftime("%Y%m%d-%H%M%S"))
    statuses = []
    for w in workers:
        for engine in engines:
            attempt = uuid.uuid4().hex
            log_dir = run_dir / f"{engine.value}-np{w}"
            log_dir.mkdir(parents=True, exist_ok=True)
            nodes = _argv(engine, w, target, extra, attempt, log_dir, cluster, link_bps)
            argvs = [n.argv for n in nodes]
            argv: list[str] | list[list[str]] = argvs[0] if len(argvs) == 1 else argvs
            logs = [log_dir / "launcher.log"]
            if len(nodes) > 1:
                logs = [log_dir / f"launcher-{i}-{n.host.name}.log" for i, n in enumerate(nodes)]
            print(f"collectives: {engine.value} np={w} ...", end="", file=out, flush=True)
            try:
                status, error, seconds = run_launches(argvs, logs, timeout)
            finally:
                benv.scrub_log_dir(log_dir)  # launchers echo the environment into logs
            failed = functools.partial(_failed, engine, w, attempt, argv, link_bps)
            rec, _ = attempt_record(target, attempt, status, error, logs, failed)
            status = rec["status"]
            print(f" {status} {seconds:.1f}s", file=out, flush=True)
            statuses.append(status)
    return statuses


def tables(recs: Sequence[LoadedRecord]) -> dict[str, pd.DataFrame]:
    """Bus bandwidth (GB/s) and latency (us) by message size, one column per engine and workers.

    With several records per cell the median is shown. Cells over an emulated link are
    named with its rate (`ddp np2 /1gbit`), and a third table gives their bus bandwidth
    as a fraction of that rate: the link limit beside each busbw.
    """
    from bench.report import finished, link_suffix

    rows = []
    for r in finished(recs, "collective"):
        rate = (r.get("link") or {}).get("rate_bps")
        for res in r.get("results") or []:
            rows.append(
                {
                    "cell": f"{r['engine']} np{r['world_size']}"
                    + (f" {link_suffix(r)}" if rate else ""),
                    "bytes": res["bytes"],
                    "busbw": res["busbw_gbps"],
                    "latency": res["latency_s"] * 1e6,
                    # GB/s of data in bits/s, over the link's bits/s
                    "of_link": res["busbw_gbps"] * 8e9 / rate if rate else np.nan,
                }
            )
    if not rows:
        return {}
    df = pd.DataFrame(rows)
    out = {}
    shown = [("busbw", "bus bandwidth GB/s"), ("latency", "latency us")]
    if df["of_link"].notna().any():
        shown.append(("of_link", LINK_TABLE))
    for value, name in shown:
        if value == "of_link":
            df = df[df["of_link"].notna()]
        t = df.pivot_table(index="bytes", columns="cell", values=value, aggfunc=np.median)
        t.index = pd.Index([_fmt_bytes(int(b)) for b in t.index], name="size")
        t.columns.name = None
        out[name] = t
    return out


LINK_TABLE = "bus bandwidth / emulated link rate (column: its rate)"


def render_text(parts: dict[str, pd.DataFrame]) -> str:
    """The tables of `tables()` as text, with how bus bandwidth is defined."""
    lines = [
        "allreduce, float32. bus bandwidth = size / time x 2(n-1)/n (nccl-tests); "
        "time = median over iterations of the slowest rank"
    ]
    for name, df in parts.items():
        fmt = "{:.3f}" if name.startswith("bus") else "{:,.0f}"
        if name == LINK_TABLE:
            fmt = "{:.0%}"
        shown = df.map(lambda v, f=fmt: "-" if pd.isna(v) else f.format(v))
        lines += ["", f"  {name}:", shown.to_string()]
    return "\n".join(lines)
