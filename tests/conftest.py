"""Shared helpers: launch real runs through the engines' own launchers, with time-outs."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib.util
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, cast

import pytest

from bench import engines, records
from bench.core.cachedir import user_cache
from bench.core.machine import usable_cpus
from bench.engines import Engine
from tests import shared_sweep as shared
from tests.test_data import write_cifar

ROOT = Path(__file__).resolve().parent.parent
# Generous: a healthy 2-process run here takes 5-10 s; the limit only stops a hang.
RUN_TIMEOUT_S = 240
# Tests check what runs train, not how steady their throughput is: no measurement-only
# windows after training (tests/test_timing.py covers those), unless a test asks.
NO_EXTRA_WINDOWS = ["--target-ci", "0"]
# Nor the profiled steps of the step breakdown (tests/test_breakdown.py covers them).
NO_PROFILE = ["--profile-steps", "0"]
# The environment the session started in: what the shared sweep runs with, whatever a
# test or a module's fixture has set in this process by the time it is first asked for.
SESSION_ENV = dict(os.environ)
T = TypeVar("T")
# the order the files are handed to the two test processes (tests/file_order.py)
pytest_plugins = ["tests.file_order"]


def script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """scripts/NAME.py imported as a module (the scripts are not a package), registered
    for the test's duration only."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


# Processes for `pytest -n auto` (scripts/test.sh's default): two at most, since every
# file's launches start two or more processes of their own, and the suite's time is half
# waiting (docs/development.md#where-the-suites-time-goes); fewer where fewer CPUs are
# usable, a cgroup quota included. xdist's own count is the machine's, quota or not:
# two processes in one CPU's quota time out where one process passes.
MAX_TEST_PROCESSES = 2


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return min(MAX_TEST_PROCESSES, usable_cpus())


# pytest-benchmark's flags that mean "time them": given one, `pytest tests/benchmarks`
# times as a pytest-benchmark user expects, where pyproject's addopts carry
# --benchmark-disable so that the test run executes each benchmark once, untimed.
TIMING_FLAGS = {
    "benchmark_autosave": "--benchmark-autosave",
    "benchmark_save": "--benchmark-save",
    "benchmark_json": "--benchmark-json",
    "benchmark_compare": "--benchmark-compare",
    "benchmark_compare_fail": "--benchmark-compare-fail",
    "benchmark_histogram": "--benchmark-histogram",
    "benchmark_only": "--benchmark-only",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark's, which reads the options once
def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches what the tests start, however the suite itself was started; and a
    pytest-benchmark flag times the benchmarks (TIMING_FLAGS).

    A script that runs a command in the background (`cmd &`) or under nohup starts it
    with SIGINT ignored, and every process below inherits that: the tests that press
    Ctrl-C on a sweep or on a namespace pair would see nothing happen. A handler, unlike
    SIG_IGN, is reset to the default at exec, so the suite's children start as they
    would from a terminal.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _time_benchmarks_when_asked(config)


def _time_benchmarks_when_asked(config: pytest.Config) -> None:
    """Without this, `--benchmark-autosave` and the rest passed every benchmark untimed
    and saved nothing, silently. --benchmark-disable typed on the command line (not
    the addopts') still wins."""
    if not config.pluginmanager.hasplugin("benchmark"):
        return
    asked = [flag for dest, flag in TIMING_FLAGS.items() if config.getoption(dest, None)]
    if asked and "--benchmark-disable" not in config.invocation_params.args:
        config.option.benchmark_enable = True


def _measure_args(args: list[str]) -> list[str]:
    args = args if "--target-ci" in args else [*args, *NO_EXTRA_WINDOWS]
    return args if "--profile-steps" in args else [*args, *NO_PROFILE]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests skip on CPU machines, and fail where BENCH_EXPECT_GPU=1 says a GPU must be."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu or os.environ.get("BENCH_EXPECT_GPU") == "1":
        return
    skip = pytest.mark.skip(
        reason="no CUDA GPU on this machine (set BENCH_EXPECT_GPU=1 to fail instead)"
    )
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_engine(
    engine: Engine, nproc: int, args: list[str], results: Path, timeout: float = RUN_TIMEOUT_S
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run one engine through its launcher; return the process and the records it left.

    A launch that died at rendezvous on a port race (another process took the port
    between choosing and binding it) wrote no record; it is retried once, since that
    says nothing about the engine. Any other failure is returned as it is.
    """
    proc, recs = _run_engine_once(engine, nproc, args, results, timeout)
    if proc.returncode != 0 and not recs and TRANSIENT.search(proc.stdout + proc.stderr):
        print(f"retrying {engine.value} np={nproc} after a rendezvous port race")
        proc, recs = _run_engine_once(engine, nproc, args, results, timeout)
    return proc, recs


TRANSIENT = re.compile(r"Address already in use|EADDRINUSE")


def _run_engine_once(
    engine: Engine, nproc: int, args: list[str], results: Path, timeout: float
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    before = _count(results)
    argv = engines.local_argv(
        engine,
        nproc,
        [*_measure_args(args), "--results", str(results), "--quiet"],
        log_dir=results / "logs" / f"{engine.value}-{nproc}-{before}",
    )
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL
    )
    recs = (
        cast(list[dict[str, Any]], records.load([records.results_file(results)]).records)
        if records.results_file(results).exists()
        else []
    )
    return proc, recs[before:]


def run_direct(
    engine: Engine, args: list[str], results: Path
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run a runner script as a plain process (world size 1, no launcher)."""
    before = _count(results)
    proc = subprocess.run(
        [
            sys.executable,
            str(engines.get(engine).runner),
            *_measure_args(args),
            "--results",
            str(results),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    recs = (
        cast(list[dict[str, Any]], records.load([records.results_file(results)]).records)
        if records.results_file(results).exists()
        else []
    )
    return proc, recs[before:]


def quick_measure(args: Sequence[str]) -> list[str]:
    """`bench run` arguments without the timed windows a run adds after its steps
    (up to --measure-cap-s each) and without profiled steps, unless they set
    --target-ci or --profile-steps themselves: tests that check records, not
    throughput, need neither."""
    args = list(args)
    if args[:1] != ["run"]:
        return args
    return _measure_args(args)


def run_bench(
    *args: str,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """`bench ARGS...`, output captured, no standard input; `bench run` without extra
    timed windows (quick_measure). From the repository root in this environment unless
    `cwd` or `env` (the whole environment, not additions) say otherwise."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *quick_measure(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
    )


def _count(results: Path) -> int:
    f = records.results_file(results)
    return len(records.load([f]).records) if f.exists() else 0


def ok_record(proc: subprocess.CompletedProcess[str], recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The single ok record a successful run must leave, with its output on failure."""
    assert proc.returncode == 0, (
        f"run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    assert len(recs) == 1, f"expected one record, got {len(recs)}"
    assert recs[0]["status"] == records.Status.OK, recs[0].get("error")
    return recs[0]


@contextlib.contextmanager
def machine_turn(factory: pytest.TempPathFactory, who: str, alone: bool = False) -> Iterator[None]:
    """A turn on the machine, under pytest-xdist: shared with the other process's work,
    or `alone`, waiting until that work ends and keeping new work from starting.

    Files run two at a time (scripts/test.sh), sharing two CPUs. A file marked `alone`
    (`pytestmark = pytest.mark.alone`: its runs are conditions made on an otherwise
    quiet machine, and its verdicts read that quiet) takes its turn alone. Two locks in
    the run's shared temporary root: a turnstile that work passes to start, which a
    waiting `alone` turn holds so it is not starved, and the machine, held shared by
    other work and exclusively by an `alone` turn.
    """
    global _IN_TURN
    # one process: every file is alone already; in a turn already (a session fixture
    # first asked for inside a file's): that turn covers it, and a second lock taken by
    # this process would wait on its own first one
    if "PYTEST_XDIST_WORKER" not in os.environ or _IN_TURN:
        yield
        return
    root = factory.getbasetemp().parent  # the run's; each worker's is a folder in it
    with (root / "turnstile.lock").open("w") as gate, (root / "machine.lock").open("w") as m:
        asked = time.monotonic()
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(m, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        _waited(root, f"{'an alone' if alone else 'a'} turn for {who}", asked)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        _IN_TURN = "alone" if alone else "shared"
        try:
            yield  # both locks released when the files close
        finally:
            _IN_TURN = None


_IN_TURN: str | None = None

# What the two processes spend standing still, one waiting on the other (for a turn on the
# machine, or for a shared run the other is building): a line each in the run's temporary
# root, added up at the end of the run (pytest_terminal_summary), so that every run of
# scripts/test.sh says how much of its time the scheduling of its files cost.
WAITS = "waits.tsv"


def _waited(root: Path, what: str, since: float) -> None:
    """A line: the process, the seconds, what it waited for and the file that stood still
    (whose test was being set up: scripts/test_durations.py --waits takes the waits out
    of the files' own seconds)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    file = os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]
    with (root / WAITS).open("a") as log:  # one short line: appended whole
        log.write(f"{worker}\t{time.monotonic() - since:.1f}\t{what}\t{file}\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The waits above, per process and the longest, where the run had two processes."""
    factory = getattr(config, "_tmp_path_factory", None)  # pytest's own, set at configure
    if factory is None or "PYTEST_XDIST_WORKER" in os.environ:
        return
    path = factory.getbasetemp() / WAITS  # the run's root: each worker's folder is in it
    try:
        rows = [line.split("\t")[:3] for line in path.read_text().splitlines()]
    except OSError:
        return
    waits = sorted(((float(s), w, what) for w, s, what in rows), reverse=True)
    per: dict[str, float] = {}
    for seconds, worker, _ in waits:
        per[worker] = per.get(worker, 0.0) + seconds
    total = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(per.items()))
    terminalreporter.write_sep("-", f"waits, one process on the other: {total}")
    terminalreporter.write_line(f"(each in {path})")
    for seconds, worker, what in [w for w in waits if w[0] >= 1][:8]:
        terminalreporter.write_line(f"{seconds:7.1f} s  {worker}  {what}")


@pytest.fixture(autouse=True, scope="session")
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A per-user cache ($XDG_CACHE_HOME/bench) of the run's own, shared by both xdist
    processes and everything they start: no test writes into the developer's home, and
    no comparison is replayed from an earlier run's (bench/cli/replay.py). The measured
    peak is copied in where the developer's cache has one, as the runs would read it."""
    saved = os.environ.get("XDG_CACHE_HOME")
    run = tmp_path_factory.getbasetemp()  # under xdist, each process's folder in the run's
    mine = (run.parent if "PYTEST_XDIST_WORKER" in os.environ else run) / "xdg"
    peak = user_cache() / "peak-flops.json"
    with contextlib.suppress(FileExistsError):
        (mine / "bench").mkdir(parents=True)
        if peak.is_file():
            shutil.copy2(peak, mine / "bench" / peak.name)
    os.environ["XDG_CACHE_HOME"] = str(mine)
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture(autouse=True, scope="module")
def _machine_turn(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Each test file's turn on the machine (`machine_turn`). Autouse at module scope, so
    it is taken before the file's own fixtures (its sweeps) and given back after them;
    the session's shared fixtures take a turn of their own while they are built."""
    alone = request.node.get_closest_marker("alone") is not None
    with machine_turn(tmp_path_factory, request.node.nodeid, alone):
        yield


@pytest.fixture(autouse=True, scope="module")
def _restore_environment_per_module() -> Iterator[None]:
    """The same for a module's fixtures: one that builds an adapter in-process (the
    perf benchmarks, the identical-maths checks) would leave HOROVOD_CONTROLLER and
    thread variables to every later module's launches otherwise. Autouse, so it is set
    up before the module's own fixtures and torn down after them."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Undo what a test (or the adapter it starts in-process) wrote into os.environ.

    Adapters set HOROVOD_*, thread and controller variables in their own process;
    left in pytest's, every later launch would inherit them and a runner would read
    them as its launcher's settings.
    """
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


def once_per_run(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """`build(folder)` once for the whole test run, however many processes run it.

    Under pytest-xdist (scripts/test.sh runs two) every worker has a session of its
    own, so a session fixture would be built once per worker: the shared sweep twice,
    each slowed by the other. The first worker to ask builds it in the run's temporary
    root, which the workers share, holding a lock there; the others wait on the lock
    and load what it left (pickled, beside the folder, so no reader of the folder
    sees it). A build that failed left no pickle: the next worker to ask builds again.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build(factory.mktemp(name))
    if _IN_TURN == "alone":  # the builder may be waiting for this turn to end
        raise RuntimeError(f"a file marked alone cannot use the run's shared {name!r}")
    root = factory.getbasetemp().parent  # the run's; each worker's is a folder in it
    with (root / f"{name}.lock").open("w") as lock:
        asked = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        built = root / f"{name}.pickle"
        if built.exists():
            _waited(root, f"the shared {name!r}, built by the other process", asked)
            return cast(T, pickle.loads(built.read_bytes()))
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
        folder.mkdir()
        with machine_turn(factory, f"building {name!r}"):  # before a file's turn
            value = build(folder)
        part = built.with_suffix(".part")
        part.write_bytes(pickle.dumps(value))
        part.replace(built)  # whole or absent, should this process die mid-write
        return value


@pytest.fixture(scope="session")
def shared_sweep(tmp_path_factory: pytest.TempPathFactory) -> shared.SharedSweep:
    """The session's sweep of every engine's short mlp runs (tests/shared_sweep.py says
    what it holds and who reads it), launched the first time a test asks for it."""
    return once_per_run(tmp_path_factory, "shared-sweep", _shared_sweep)


def _shared_sweep(folder: Path) -> shared.SharedSweep:
    sweep = shared.SharedSweep.prepare(folder)
    env = {**SESSION_ENV, **sweep.environment()}
    out, err = [], []
    for command in shared.COMMANDS:
        proc = run_bench(*command, "--results", str(sweep.results), env=env, timeout=900)
        assert proc.returncode == 0, (
            f"bench {command[0]}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
        out.append(proc.stdout)
        err.append(proc.stderr)
    return dataclasses.replace(sweep, stdout="".join(out), stderr="".join(err))


# ddp at 1 worker on lenet, profiled (a breakdown, so a verdict), while two processes
# that are not the run's spin on the CPUs
BUSY_SWEEP: tuple[str, ...] = (
    "--engines",
    "ddp",
    "--workers",
    "1",
    "--models",
    "lenet",
    "--max-steps",
    "40",
)
BUSY_SWEEP += ("--epochs", "1", "--repeats", "1", "--no-compare", "--profile-steps", "10")


@pytest.fixture(scope="session")
def busy_neighbour_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BUSY_SWEEP's results folder: one run beside two busy neighbours, whose record the
    contention measure must flag and the breakdown must call CPU-contended."""
    return once_per_run(tmp_path_factory, "busy-neighbour", _busy_neighbour_run)


@contextlib.contextmanager
def busy_neighbours(count: int = 2) -> Iterator[None]:
    """`count` processes spinning (`python -c 'while True: pass'`) while the block runs.

    Each in a session of its own, as a neighbour started from another terminal or by a
    service is: where the kernel groups CPU time by session (autogroup, on here), a
    spinner left in the tests' session shares one group's time with everything else
    the tests run, while each Horovod worker, which horovodrun starts with setsid, gets
    a group's time of its own. Seen: two spinners so placed got 0.14 cores between
    them beside a 2-worker Horovod run, under the contention limit.
    """
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for p in burners:
            p.kill()
            p.wait()


def _busy_neighbour_run(results: Path) -> Path:
    with busy_neighbours():
        proc = run_bench("run", "--results", str(results), *BUSY_SWEEP, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return results


def cifar_args(data_path: Path) -> list[str]:
    """ResNet-18 on the CIFAR-10 files under `data_path`, augmented, tiny sizes."""
    args = ["--model", "resnet18", "--dataset", "cifar10", "--data-path", str(data_path)]
    args += ["--batch-size", "8", "--max-steps", "5", "--warmup-steps", "1", "--epochs", "2"]
    return [*args, "--lr", "0.01"]


@pytest.fixture(scope="session")
def resnet18_two_workers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """ResNet-18 (BatchNorm) at 2 workers under every engine, by engine name, on CIFAR-10
    files written here (120 training images: 7 steps at 2x8): test_cifar_distributed reads
    the data every engine saw, test_resnet_distributed what BatchNorm and the engines did."""
    return once_per_run(tmp_path_factory, "cifar", _resnet18_two_workers)


def _resnet18_two_workers(root: Path) -> dict[str, dict[str, Any]]:
    write_cifar(root / "cifar-10-batches-bin", per_file=24)
    # sharded across ranks: the case where the pixels could differ
    return {
        e.value: ok_record(*run_engine(e, 2, cifar_args(root), root / f"res-{e.value}-2"))
        for e in Engine
    }
