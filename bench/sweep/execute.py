"""`bench run`'s execution: each cell through its launcher, and exactly one record per cell.

Every cell is launched as an argv list in its own process session with a
time-out, and always leaves a record: the runner writes it, or the sweep writes
a failed/timeout record with the last log lines when the runner could not.
Cells already recorded ok with the same spec and environment are skipped
(resume) unless forced. Finding a cell's record reads only what was appended
since the last cell (`records.Follower`), so a sweep's cost per cell does not
grow with the records its folder already holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from bench import engines, records
from bench.contract.spec import RunSpec
from bench.core import allowlist, machine
from bench.core.errors import Interrupted, RecordsError
from bench.core.units import clock
from bench.engines import options as engine_options
from bench.launch import netns, process, slurm
from bench.launch.cluster import Cluster, NodeLaunch
from bench.measure.window import PROTOCOL_VERSION
from bench.records import LoadedRecord, RunRecord, Status, summaries
from bench.sweep.cells import Cell, check_plan, plan, spec_flags
from bench.sweep.config import SweepConfig


@dataclasses.dataclass
class CellResult:
    cell: Cell
    status: Status
    seconds: float
    log_dir: Path
    error: str | None = None
    throughput: float | None = None  # the record's samples/s, when it finished ok


def attempt_record(
    follower: records.Follower,
    attempt: str,
    outcome: process.Outcome,
    logs: Sequence[Path],
    failed: Callable[[Status, str], RunRecord],
) -> tuple[RunRecord, bool]:
    """The record launch `attempt` left, or a failed one written for it now.

    Every launch leaves exactly one record. The run's own, found by its `attempt`
    label among the records appended since `follower` last looked, comes back with
    True. Without one, `failed(status, error)` is appended and comes back with False:
    a time-out stays a time-out, anything else is failed (a launch that left no
    record failed whatever its exit code), its error the launcher's followed by the
    last lines of each of its `logs`.
    """
    written = _with_attempt(follower.new(), attempt)
    if written:
        return written[-1], True
    error = outcome.error or "no record written"
    for log in logs:
        error += f"\n--- last lines of {log} ---\n{process.tail(log)}"
    rec = failed(Status.TIMEOUT if outcome.timed_out else Status.FAILED, error)
    records.append(follower.path, rec)
    follower.new()  # past our own record
    return rec, False


def _with_attempt(recs: Sequence[LoadedRecord], attempt: str) -> list[LoadedRecord]:
    return [r for r in recs if (r.get("labels") or {}).get("attempt") == attempt]


def cell_argv(
    cell: Cell,
    results: Path,
    log_dir: Path,
    labels: dict[str, Any],
    timeout: float,
    trace: bool = False,
    python: str | None = None,
) -> list[NodeLaunch]:
    """The exact launcher argv of one cell, one per host it starts from (--dry-run prints them)."""
    runner_args = [
        *spec_flags(cell.spec),
        "--results",
        str(results),
        "--quiet",
        "--collective-timeout",
        str(max(timeout / 2, 30.0)),
    ]
    runner_args += [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
    runner_args += list(cell.measure)
    if not cell.keeps_trace:  # the last --trace-steps wins, the user's included
        runner_args += ["--trace-steps", "0"]
    options = list(cell.options)
    trace_option = engines.get(cell.engine).trace_option
    if trace and trace_option is not None:
        options.append(trace_option(log_dir))
    runner_args += [a for kv in options for a in ("--engine-option", kv)]
    option_map = engine_options.parse(options)
    if cell.allocation:
        return engines.slurm_launch(
            cell.engine,
            cell.allocation,
            cell.workers,
            runner_args,
            tag=slurm_tag(labels),
            log_dir=log_dir,
            python=python,
            options=option_map,
        )
    return engines.build_launch(
        cell.engine,
        cell.cluster or Cluster.this_machine(cell.workers),
        cell.workers,
        runner_args,
        log_dir=log_dir,
        python=python,
        options=option_map,
    )


def slurm_tag(labels: dict[str, Any]) -> str:
    """The tag naming a cell's job steps: its attempt (or, for --dry-run, its cell key)."""
    return str(labels.get("attempt") or labels.get("cell") or "cell")[:16]


def _write_log(path: Path, text: str) -> None:
    """Write a log file, turning a full disk into the same one-line error as records get."""
    try:
        path.write_text(text)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()  # no half-written file left behind
        raise RecordsError(f"cannot write {path}: {exc.strerror}") from None


def cell_log_dir(run_dir: Path, index: int, cell: Cell) -> Path:
    sync = "" if cell.spec.grad_sync else "-nosync"
    return run_dir / (
        f"{index:03d}-{cell.engine.value}-np{cell.workers}-{cell.spec.model}-r{cell.repeat}{sync}"
    )


def _labels(cell: Cell, env_key: str, sweep_id: str) -> dict[str, Any]:
    """The labels every record of this cell carries (its runner gets them as --label)."""
    labels: dict[str, Any] = {
        "cell": cell.key(env_key),
        "attempt": uuid.uuid4().hex,
        "sweep": sweep_id,
        "repeat": cell.repeat,
        "seed_mode": cell.seed_mode,
    }
    if cell.cluster:
        labels["hosts"] = cell.hosts_label
    if cell.link_bps:  # the record's `link` is made from it
        labels["link_rate_bps"] = cell.link_bps
    if cell.label:  # an A/A experiment's side: compare shows it as an engine of its own
        labels["aa"] = cell.label
    if cell.allocation:
        labels["slurm_job"] = cell.allocation.job_id
        labels["hosts"] = ",".join(map(str, cell.allocation.placement(cell.workers)))
    return labels


def _cell_record(
    cell: Cell,
    labels: dict[str, Any],
    argv: list[str] | list[list[str]],
    status: Status,
    error: str,
) -> RunRecord:
    """The record `bench run` writes for a cell whose launch left none of its own."""
    return records.new_record(
        cell.spec.to_dict(),
        cell.engine.value,
        cell.workers,
        labels,
        {"name": "bench run", "argv": argv},
        status=status,
        error=error,
        link=netns.link_for(labels),
    )


@dataclasses.dataclass(frozen=True)
class _Launch:
    """One cell's launch as it is about to run: its commands and where their logs go."""

    nodes: list[NodeLaunch]
    logs: list[Path]

    @property
    def argv(self) -> list[str] | list[list[str]]:
        argvs = [n.argv for n in self.nodes]
        return argvs[0] if len(argvs) == 1 else argvs


def _prepare(cell: Cell, labels: dict[str, Any], log_dir: Path, **kwargs: Any) -> _Launch:
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordsError(f"cannot create log folder {log_dir}: {exc.strerror}") from None
    nodes = cell_argv(cell, log_dir=log_dir, labels=labels, **kwargs)
    shown = [allowlist.scrub_argv(n.argv) for n in nodes]  # no environment off the allow-list
    _write_log(log_dir / "argv.json", json.dumps(shown[0] if len(shown) == 1 else shown, indent=1))
    logs = [log_dir / "launcher.log"]
    if len(nodes) > 1:
        logs = [log_dir / f"launcher-{i}-{n.host.name}.log" for i, n in enumerate(nodes)]
    return _Launch(nodes, logs)


def run_cell(
    cell: Cell,
    index: int,
    results: Path,
    run_dir: Path,
    timeout: float,
    env_key: str,
    sweep_id: str,
    python: str | None = None,
    trace: bool = False,
    follower: records.Follower | None = None,
    extra_labels: dict[str, Any] | None = None,
) -> CellResult:
    """Launch one cell and make sure it leaves exactly one record (with `extra_labels`
    among its labels: `bench tune` names its trials so)."""
    follower = follower or records.Follower(results)
    log_dir = cell_log_dir(run_dir, index, cell)
    labels = {**_labels(cell, env_key, sweep_id), **(extra_labels or {}), "log_dir": str(log_dir)}
    # the runner's record measures launch-to-stop from it (on this machine's clock)
    labels["launched_at"] = time.time()
    launch = _prepare(
        cell, labels, log_dir, results=results, timeout=timeout, trace=trace, python=python
    )
    start = time.monotonic()
    try:
        outcome = _supervise(cell, labels, launch, log_dir, timeout)
    except (KeyboardInterrupt, Interrupted) as exc:
        # The tree is already killed; the cell still leaves its record, so nothing that
        # ran goes unrecorded.
        left = _interrupted(cell, labels, launch.argv, results, follower, exc, start)
        drop_shown_command(log_dir, left)
        raise

    def failed(status: Status, error: str) -> RunRecord:
        rec = _cell_record(cell, labels, launch.argv, status, error)
        rec["launch_to_exit_s"] = outcome.seconds
        return rec

    # The run's own record decides: a run that finished and recorded ok stays ok when its
    # launcher failed afterwards (teardown); an ok launch whose run recorded otherwise
    # takes the run's status.
    rec, _ = attempt_record(follower, labels["attempt"], outcome, launch.logs, failed)
    drop_shown_command(log_dir, rec)
    tput = rec.get("throughput")
    return CellResult(
        cell,
        rec["status"],
        outcome.seconds,
        log_dir,
        rec.get("error"),
        float(tput) if isinstance(tput, int | float) else None,
    )


def _interrupted(
    cell: Cell,
    labels: dict[str, Any],
    argv: list[str] | list[list[str]],
    results: Path,
    follower: records.Follower,
    exc: BaseException,
    start: float,
) -> Mapping[str, Any]:
    """The record of a cell stopped by Ctrl-C or a signal: the run's own where it wrote
    one just before, else a failed one written now."""
    written = _with_attempt(follower.new(), labels["attempt"])
    if written:
        return written[-1]
    why = exc.name if isinstance(exc, Interrupted) else "SIGINT (Ctrl-C)"
    error = (
        f"interrupted by {why} after {time.monotonic() - start:.1f}s; the cell's "
        "processes were killed; rerun the sweep to run it again"
    )
    rec = _cell_record(cell, labels, argv, Status.FAILED, error)
    records.append(results, rec)
    return rec


def drop_shown_command(log_dir: Path, rec: Mapping[str, Any]) -> None:
    """Remove the cell's argv.json once its record holds the same command.

    The file shows what a cell runs while it runs (and stays where `bench run` itself
    died mid-cell). Afterwards the record says it: as the launcher its workers ran under
    (torchrun's and Paddle's, `parent_argv`) or, where `bench run` wrote the record, as
    launched (`argv`). Horovod's workers see only the line horovodrun starts them with,
    and a multi-node run's workers only their own node's launcher, so those cells keep
    the file unless they failed (their record then holds every node's command).
    """
    path = log_dir / "argv.json"
    try:
        shown = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    launcher = rec.get("launcher")
    if isinstance(launcher, Mapping) and shown in (
        launcher.get("parent_argv"),
        launcher.get("argv"),
    ):
        with contextlib.suppress(OSError):
            path.unlink()


def _supervise(
    cell: Cell, labels: dict[str, Any], launch: _Launch, log_dir: Path, timeout: float
) -> process.Outcome:
    try:
        return process.run_launches([n.argv for n in launch.nodes], launch.logs, timeout)
    finally:
        if cell.allocation:  # a killed srun can leave its step running: cancel it
            job = cell.allocation.job_id
            note = slurm.cancel_steps(job, slurm_tag(labels)).note(job)
            if note:
                print(note, file=sys.stderr, flush=True)
        # launchers echo the environment into their logs (paddle's envlog.N and more)
        allowlist.scrub_log_dir(log_dir)
        prune_empty(log_dir)


def prune_empty(folder: Path) -> None:
    """Remove the empty files and folders under `folder`: the per-rank logs a launcher
    opens whether or not a rank prints (torchrun's attempt_0/N/, Horovod's rank.N/),
    134 of a default sweep's 348 log files and 87 of its 145 folders, holding nothing."""
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):  # a file still written to is left as it is
            if path.is_symlink():
                continue
            if path.is_dir():
                path.rmdir()  # only an empty one: OSError otherwise
            elif path.stat().st_size == 0:
                path.unlink()


def record_unavailable(
    cell: Cell, results: Path, env_key: str, sweep_id: str, reason: str
) -> CellResult:
    """Record a cell of an engine not installed here, without launching anything."""
    labels = _labels(cell, env_key, sweep_id)
    rec = records.new_record(
        cell.spec.to_dict(),
        cell.engine.value,
        cell.workers,
        labels,
        {"name": "bench run", "argv": []},
        status=Status.UNAVAILABLE,
        error=reason,
        link=netns.link_for(labels),
    )
    records.append(results, rec)
    return CellResult(cell, Status.UNAVAILABLE, 0.0, Path(), reason)


def environment_key() -> str:
    env = machine.environment()
    return json.dumps([env["hostname"], machine.machine_key(env), env["libraries"]], sort_keys=True)


def completed_cells(results: Path) -> set[str]:
    """Cells recorded ok under the current measurement protocol (a cell recorded under
    another is not done: it is run again), from the results file's small cell index."""
    target = records.results_file(results)
    if not target.exists():
        return set()
    return {
        str(cell)
        for cell, status, protocol in summaries.cells(target)
        if cell and status == Status.OK and protocol == PROTOCOL_VERSION
    }


@dataclasses.dataclass
class _Progress:
    """The lines `bench run` prints as it goes."""

    out: TextIO
    total: int
    start: float = dataclasses.field(default_factory=time.monotonic)

    def say(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.out, flush=True)

    def plan(
        self,
        n_cells: int,
        todo: Sequence[Cell],
        run_dir: Path,
        unavailable: dict[engines.Engine, str],
    ) -> None:
        """What the sweep will do: how many cells run, where their logs go, and which
        engines' cells are recorded as unavailable instead of run."""
        self.say(
            f"bench run: {n_cells} cells ({n_cells - len(todo)} already recorded, skipped); "
            f"logs in {run_dir}"
        )
        for engine, why in unavailable.items():
            n = sum(c.engine is engine for c in todo)
            self.say(
                f"bench run: WARNING: engine {engine.value} is not installed here, so its {n} "
                f"cells are recorded as unavailable and not run ({why})"
            )

    def done(self, i: int, res: CellResult) -> None:
        if res.status == Status.UNAVAILABLE:
            self.say(f" {res.status}")
            return
        elapsed = time.monotonic() - self.start
        left = elapsed / i * (self.total - i)
        self.say(
            f" {res.status} {res.seconds:.1f}s  (elapsed {clock(elapsed)}, ~{clock(left)} left)"
        )
        if res.status != Status.OK and res.error:
            for line in res.error.strip().splitlines()[-8:]:
                self.say(f"      | {line}")


def run_sweep(
    config: SweepConfig,
    base: RunSpec,
    results: Path,
    *,
    force: bool = False,
    out: TextIO | None = None,  # None: sys.stdout as it is when called
    python: str | None = None,
    on_cell: Callable[[CellResult], None] | None = None,
    before_cells: Callable[[], None] | None = None,
    cells: Sequence[Cell] | None = None,
    extra_labels: dict[str, Any] | None = None,
) -> list[CellResult]:
    """Run every cell not already recorded; returns what ran (skipped cells excluded).

    `before_cells` runs once every check has passed and before the first cell (a
    refused sweep leaves nothing behind), and only when there is a cell to run. `cells`:
    these instead of the config's plan (`bench run --decide-at` adds launches);
    `extra_labels`: every record of the sweep carries them."""
    cells = plan(config, base) if cells is None else list(cells)
    unavailable = check_plan(cells, config, python)
    records.check_writable(results)
    env_key = environment_key()
    done = set() if force else completed_cells(results)
    todo = [c for c in cells if c.key(env_key) not in done]
    sweep_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    run_dir = (results if results.suffix != ".jsonl" else results.parent) / "runs" / sweep_id
    progress = _Progress(sys.stdout if out is None else out, len(todo))
    progress.plan(len(cells), todo, run_dir, unavailable)
    if before_cells is not None and todo:
        before_cells()
    follower = summaries.follow(records.results_file(results))
    outcomes: list[CellResult] = []
    for i, cell in enumerate(todo, start=1):
        progress.say(f"[{i:>3}/{len(todo)}] {cell.name} ...", end="")
        if cell.engine in unavailable:
            res = record_unavailable(cell, results, env_key, sweep_id, unavailable[cell.engine])
            follower.new()  # past the record just written
        else:
            res = run_cell(
                cell,
                i,
                results,
                run_dir,
                config.timeout,
                env_key,
                sweep_id,
                python,
                config.engine_traces,
                follower,
                extra_labels,
            )
        outcomes.append(res)
        progress.done(i, res)
        if on_cell:
            on_cell(res)
    return outcomes
