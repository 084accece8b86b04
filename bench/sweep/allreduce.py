"""`bench collectives`' cells: allreduce latency and bandwidth, each engine through its launcher.

Each (engine, workers) cell launches runners/allreduce.py through the engine's
own launcher, like a training cell, with a time-out; a cell that leaves no
record gets a failed/timeout record of kind "collective". The tables are
bench/tables/busbw.py's.
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

from bench import engines, records
from bench.core import allowlist
from bench.core.units import parse_rate
from bench.engines import Engine, unknown
from bench.launch import netns, process
from bench.launch.cluster import ROOT, Cluster, NodeLaunch
from bench.records import Kind, RunRecord, Status
from bench.sweep.execute import attempt_record

SCRIPT = ROOT / "runners" / "allreduce.py"


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
        wrong = [e for e in names if e not in known]
        if wrong:
            raise ValueError(f"--engines: {unknown(wrong[0])}")
        if not names:
            raise ValueError(f"--engines is empty; name at least one of: {', '.join(known)}")
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
    cluster: Cluster | None = None,
    link_bps: int | None = None,
) -> list[NodeLaunch]:
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
    if link_bps:  # the runner makes the record's `link` from it
        args += ["--label", f"link_rate_bps={link_bps}"]
    where = cluster or Cluster.this_machine(w)
    return engines.build_launch(engine, where, w, args, log_dir=log_dir, script=SCRIPT)


def dry_run(plan: Plan, results: Path, cluster: Cluster | None = None) -> list[list[str]]:
    """The launch command of every cell (every host's), in order, without running anything."""
    target = records.results_file(results).parent / records.COLLECTIVES_FILE
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


def _failed(
    engine: Engine,
    workers: int,
    attempt: str,
    argv: list[str] | list[list[str]],
    link_bps: int | None,
    status: Status,
    error: str,
) -> RunRecord:
    """The record of a cell whose launch left none (see execute.attempt_record)."""
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
        link=netns.link_for(labels),
    )
    rec["kind"] = Kind.COLLECTIVE
    return rec


def run(
    engine_list: Sequence[Engine],
    workers: Sequence[int],
    results: Path,
    *,
    timeout: float,
    extra: Sequence[str] = (),
    out: TextIO | None = None,  # None: sys.stdout as it is when called
    cluster: Cluster | None = None,
    link_bps: int | None = None,
) -> list[Status]:
    """Run every (engine, workers) cell; returns the statuses in order.

    With `cluster`, each cell's workers are spread over its hosts (the namespace pair
    of --emulate-link, whose rate `link_bps` the records carry).
    """
    out = sys.stdout if out is None else out
    target = records.check_writable(results).parent / records.COLLECTIVES_FILE
    run_dir = target.parent / "runs" / ("collectives-" + time.strftime("%Y%m%d-%H%M%S"))
    follower = records.Follower(target)
    statuses = []
    for w in workers:
        for engine in engine_list:
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
                outcome = process.run_launches(argvs, logs, timeout)
            finally:
                allowlist.scrub_log_dir(log_dir)  # launchers echo the environment into logs
            failed = functools.partial(_failed, engine, w, attempt, argv, link_bps)
            rec, _ = attempt_record(follower, attempt, outcome, logs, failed)
            status = rec["status"]
            print(f" {status} {outcome.seconds:.1f}s", file=out, flush=True)
            statuses.append(status)
    return statuses
