#!/usr/bin/env python3
"""The regression gate: base and working tree, counted where the work is deterministic,
timed where time is the point.

    .venv/bin/python scripts/perf.py                     # A/B against the merge base with main
    .venv/bin/python scripts/perf.py --base REV          # A/B against REV
    .venv/bin/python scripts/perf.py --base-file .ci/perf-base   # CI: the base kept in the repo
    .venv/bin/python scripts/perf.py --baseline          # against a baseline saved
                                                         # on this machine (never committed)
    .venv/bin/python scripts/perf.py --save-baseline     # record this machine's baseline

A/B: REV is checked out in a temporary git worktree sharing this .venv. First the
counts (scripts/perfcount.py): the harness's own paths (loading records, `bench
compare`, the runner's work around each step) run once a side under Valgrind's
callgrind, both sides at once, and a benchmark regressed when its instructions grew
by more than --count-threshold (2%). Then the timing (scripts/perfgate.py): the
engines' training steps and the calibration, launched in pairs, alternately (A B,
B A, ...), each side running its own tests/benchmarks, decided at the looks (4, 6, 8,
11, 16 pairs): pairs are added until a step regressed, every one is decided, or the
next look would overrun what --budget leaves after the counts. Exit status 1 when a
count grew beyond its threshold or a step's whole interval lies above +threshold.
BENCH_PERF_SLOWDOWN=0.15 (new side only; BENCH_PERF_SLOWDOWN_ENGINE=ddp for one
engine's step alone) makes the training-step benchmarks take 15% longer, and
BENCH_PERF_EXTRA_WORK=0.05 (BENCH_PERF_EXTRA_WORK_IN=bench_compare for one counted
benchmark) makes the counted paths do 5% more work: how the gate is calibrated.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # perfgate.py, beside this script

import perfcount  # noqa: E402
import perfcount_work  # noqa: E402
import perfgate  # noqa: E402

from bench.cli.common import parse_budget  # noqa: E402
from bench.core.errors import InputError  # noqa: E402
from bench.measure import stats  # noqa: E402

BASELINE = ROOT / "tests" / "benchmarks" / "baseline"
# the benchmarks the gate times: each one in-process and cheap; the 2-process allreduce
# (tests/benchmarks/test_collective_perf.py) runs as a smoke test in the suite only.
# The engines' steps only (and the calibration): the record benchmarks are deterministic
# Python work, counted instead (scripts/perfcount.py), whose time swung by 25% a launch.
SELECTION = ["tests/benchmarks/test_perf.py", "-k", "test_train_step or test_calibration"]
# The variables that inject work on purpose: the new side's only
INJECT = ("BENCH_PERF_SLOWDOWN", perfcount_work.EXTRA)
# Counting both sides takes about 20 s here (a minute where every instruction is
# instrumented: perfcount.instrument_regions); past this, something is wrong
COUNT_TIMEOUT_S = 900.0
# No garbage collection inside a timed round: a full collection lands in whichever round
# crosses its threshold and added up to 3x to the record benchmarks' rounds; at least 10
# rounds for the slow ones (a minimum of 5 was not stable); 0.5 s a benchmark otherwise
# (hundreds of training-step rounds, enough for a stable minimum).
TIMING = ["--benchmark-disable-gc", "--benchmark-min-rounds=10", "--benchmark-max-time=0.5"]


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def resolve_base(args: argparse.Namespace) -> str:
    if args.base_file or args.base:
        rev = Path(args.base_file).read_text().split()[0] if args.base_file else args.base
        try:
            return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        except subprocess.CalledProcessError:
            sys.exit(f"perf: the base {rev} is not a commit in this clone (a shallow clone? "
                     "fetch its history, or name another with --base)")  # fmt: skip
    for main in ("main", "origin/main"):
        try:
            return git("merge-base", "HEAD", main)
        except subprocess.CalledProcessError:
            continue
    return git("rev-parse", "HEAD")


def launch(tree: Path, out: Path, env: dict[str, str], extra: list[str]) -> Path:
    """One pytest process over the gate's benchmarks in `tree`; its JSON report."""
    argv = [sys.executable, "-m", "pytest", *SELECTION, "-q", "-p", "no:cacheprovider",
            "--benchmark-enable", *TIMING, "--benchmark-save-data", f"--benchmark-json={out}",
            *extra]  # fmt: skip
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        sys.exit(
            f"perf: the benchmarks failed in {tree}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        )
    return out


def ab(args: argparse.Namespace) -> int:
    base_rev = resolve_base(args)
    work = Path(tempfile.mkdtemp(prefix="bench-perf-"))
    base_tree = work / "base"
    reports = Path(args.keep) if args.keep else work
    reports.mkdir(parents=True, exist_ok=True)
    try:
        git("worktree", "add", "-q", "--detach", str(base_tree), base_rev)
        (base_tree / ".venv").symlink_to(ROOT / ".venv")
        plain = {k: v for k, v in os.environ.items() if not k.startswith(INJECT)}
        start = time.monotonic()
        counted = [] if args.timed_only else count(work, base_rev, plain, reports, args)
        timed: tuple[list[perfgate.Change], stats.Estimate | None] | None = None
        if any(c.regressed for c in counted):
            # decided: the gate fails whatever the times say, so CI need not wait for them
            print("perf: a count regressed, so the steps are not timed (--timed-only times them)")
        elif not args.counted_only:
            left = args.budget_s - (time.monotonic() - start)
            sides = {"base": (base_tree, plain), "new": (ROOT, dict(os.environ))}
            if left > 0:
                timed = time_pairs(base_rev, sides, reports, left, args)
            else:
                print(f"perf: the counts spent the budget ({args.budget}): the steps are "
                      "UNDECIDED, not timed")  # fmt: skip
        print(f"perf: the gate took {time.monotonic() - start:.0f} s")
        return verdict(counted, timed, args)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT,
                       capture_output=True)  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)


def count(
    work: Path, base_rev: str, plain: dict[str, str], reports: Path, args: argparse.Namespace
) -> list[perfcount.CountChange]:
    """Both sides counted at once under callgrind (a count does not mind sharing the
    machine), on the same records, written here by the working tree's code.

    Each side's packages are copied to WORK/old or WORK/new, its files written under
    WORK/old.out or WORK/new.out: paths of one length, so that both processes lay out
    their heaps alike (perfcount.side_tree says why that matters)."""
    trees = {"base": work / "base", "new": ROOT}
    dirs = {"base": work / "old", "new": work / "new"}
    records = perfcount_work.sample_records(work / "records.jsonl")
    fixed = "" if perfcount.fixed_addresses() else "; address randomisation ON: counts spread more"
    print(f"perf: counting base {base_rev[:10]} and the working tree under callgrind "
          f"(regression above +{args.count_threshold:.0%} instructions{fixed})", flush=True)  # fmt: skip
    start = time.monotonic()
    envs = {"base": plain, "new": dict(os.environ)}
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for side in ("base", "new"):
            tree = perfcount.side_tree(trees[side], dirs[side])
            procs[side] = perfcount.start(
                tree, Path(f"{dirs[side]}.out"), envs[side], records, work
            )
        got = {side: perfcount.finish(p, Path(f"{dirs[side]}.out"), COUNT_TIMEOUT_S)
               for side, p in procs.items()}  # fmt: skip
    except perfcount.CountError as exc:
        for p in procs.values():
            p.kill()  # the other side's count, if still running
        sys.exit(f"perf: COUNTS NOT TAKEN: {exc}")
    counts = {side: {name: p.total for name, p in got[side].items()} for side in got}
    (reports / "counts.json").write_text(json.dumps(counts, indent=1) + "\n")
    if args.keep:  # the profiles too, for callgrind_annotate
        for side in got:
            shutil.copytree(f"{dirs[side]}.out", reports / f"count-{side}", dirs_exist_ok=True)
    found = perfcount.changes(got["base"], got["new"], args.count_threshold)
    print(f"perf: counted in {time.monotonic() - start:.0f} s")
    print(perfcount.render(found), flush=True)
    return found


def time_pairs(
    base_rev: str, sides: dict[str, tuple[Path, dict[str, str]]], reports: Path, budget_s: float,
    args: argparse.Namespace,
) -> tuple[list[perfgate.Change], stats.Estimate | None]:  # fmt: skip
    """The timed benchmarks in launch pairs until decided or `budget_s` is spent."""
    got: dict[str, list[perfgate.Launch]] = {"base": [], "new": []}
    print(f"perf: timing base {base_rev[:10]} vs the working tree, launched in pairs until "
          f"decided (looks at {', '.join(map(str, perfgate.LOOKS))} pairs; {budget_s:.0f} s "
          "left of the budget)", flush=True)  # fmt: skip
    start = time.monotonic()
    for i in range(perfgate.LOOKS[-1]):
        order = ("base", "new") if i % 2 == 0 else ("new", "base")  # drift cancels in pairs
        for side in order:
            tree, env = sides[side]
            report = launch(tree, reports / f"{side}-{i}.json", env, args.pytest_args)
            got[side].append(perfgate.Launch.read(report))
        if stop(got, i + 1, time.monotonic() - start, budget_s, args):
            break
    found = perfgate.sequential_changes(got["base"], got["new"], args.threshold)
    speed = perfgate.machine_speed(got["base"], got["new"], pairs=True)
    print(f"perf: {len(got['base'])} pairs in {time.monotonic() - start:.0f} s")
    return found, speed


def stop(
    got: dict[str, list[perfgate.Launch]], pairs: int, spent: float, budget_s: float,
    args: argparse.Namespace,
) -> bool:  # fmt: skip
    """After each pair: stop at a look when settled, or when the next look would end
    after the budget (at the pace so far), the first look included."""
    later = [k for k in perfgate.LOOKS if k > pairs]
    if pairs in perfgate.LOOKS:
        found = perfgate.sequential_changes(got["base"], got["new"], args.threshold)
        undecided = [c.name for c in found if c.outcome == perfgate.UNDECIDED]
        print(f"perf: look at {pairs} pairs ({spent:.0f} s): "
              + (f"{len(undecided)} undecided" if undecided else "every benchmark decided"),
              flush=True)  # fmt: skip
        if perfgate.settled(found):
            return True
    if later and spent + (later[0] - pairs) * spent / pairs > budget_s:
        print(f"perf: the next look ({later[0]} pairs) would overrun the budget ({args.budget})")
        return True
    return False


def verdict(
    counted: list[perfcount.CountChange],
    timed: tuple[list[perfgate.Change], stats.Estimate | None] | None,
    args: argparse.Namespace,
) -> int:
    """The counted verdict, then the timed one (its table first); 1 when either failed."""
    status = 0
    if counted:
        bad = [c.name for c in counted if c.regressed]
        if bad:
            print(f"perf: REGRESSION in instructions beyond +{args.count_threshold:.0%}: "
                  f"{', '.join(bad)} (the functions that grew are listed above)")  # fmt: skip
            status = 1
        else:
            print(f"perf: every counted benchmark is within +{args.count_threshold:.0%} "
                  "instructions")  # fmt: skip
    if timed is not None:
        status |= timed_verdict(*timed, perfgate.confidence(), args.threshold)
    return status


def timed_verdict(
    found: list[perfgate.Change], speed: stats.Estimate | None, confidence: float,
    threshold: float,
) -> int:  # fmt: skip
    print(perfgate.render(found, speed, confidence))
    bad = [c.name for c in found if c.regressed]
    if bad:
        print(f"perf: REGRESSION beyond +{threshold:.0%}: {', '.join(bad)}")
        return 1
    open_ = [c.name for c in found if c.outcome == perfgate.UNDECIDED]
    if open_:
        print(f"perf: no timed benchmark is slower by more than {threshold:.0%} for certain, "
              f"but UNDECIDED: {', '.join(open_)} could still be (the machine was too noisy "
              "for the budget: rerun on a quiet machine or with a longer --budget)")  # fmt: skip
        return 0
    print(f"perf: every timed benchmark is within +{threshold:.0%} for certain")
    return 0


def against_baseline(args: argparse.Namespace) -> int:
    saved = sorted(BASELINE.glob("**/*.json"))
    if not saved:
        sys.exit(
            "perf: no saved baseline; make one on this machine: scripts/perf.sh --save-baseline"
        )
    base = [perfgate.Launch.read(p) for p in saved]
    work = Path(tempfile.mkdtemp(prefix="bench-perf-"))
    try:
        new = [perfgate.Launch.read(launch(ROOT, work / f"new-{i}.json", dict(os.environ), args.pytest_args))
               for i in range(args.launches)]  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not perfgate.same_machine(base[0].machine, new[0].machine):
        sys.exit("perf: the baseline was saved on another machine, so it is not compared; make a "
                 "local one (scripts/perf.sh --save-baseline) or run the A/B check (scripts/perf.sh)")  # fmt: skip
    found = perfgate.changes(base, new, args.threshold)
    speed = perfgate.machine_speed(base, new)
    return timed_verdict(found, speed, stats.CONFIDENCE, args.threshold)


def save_baseline(args: argparse.Namespace) -> int:
    for old in BASELINE.glob("**/*.json"):
        old.unlink()
    BASELINE.mkdir(parents=True, exist_ok=True)
    for i in range(args.launches):
        launch(ROOT, BASELINE / f"baseline-{i}.json", dict(os.environ), args.pytest_args)
    print(f"perf: saved {args.launches} launches under {BASELINE.relative_to(ROOT)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--base", metavar="REV", help="A/B against this revision")
    where.add_argument("--base-file", metavar="FILE", help="A/B against the revision in FILE")
    where.add_argument("--baseline", action="store_true", help="against the baseline saved here")
    where.add_argument("--save-baseline", action="store_true", help="save this machine's baseline")
    parser.add_argument(
        "--launches", type=int, default=5,
        help="with --baseline or --save-baseline: launches (default: 5)",
    )  # fmt: skip
    parser.add_argument(
        "--budget", default="8m",
        help="A/B: no look is started that would end after this time (default: 8m)",
    )  # fmt: skip
    parser.add_argument(
        "--threshold", type=float, default=perfgate.DEFAULT_THRESHOLD,
        help=f"regression when the whole interval is above +this (default: {perfgate.DEFAULT_THRESHOLD})",
    )  # fmt: skip
    parser.add_argument(
        "--count-threshold", type=float, default=perfcount.DEFAULT_THRESHOLD,
        help="A/B: a counted benchmark regressed when its instructions grew by more than "
        f"this (default: {perfcount.DEFAULT_THRESHOLD})",
    )  # fmt: skip
    part = parser.add_mutually_exclusive_group()
    part.add_argument("--counted-only", action="store_true", help="A/B: the counts alone")
    part.add_argument("--timed-only", action="store_true", help="A/B: the timing alone")
    parser.add_argument("--keep", metavar="DIR", help="keep every launch's JSON report, and "
                        "the counts (counts.json), in DIR")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    try:
        args.budget_s = parse_budget(args.budget)
    except InputError as exc:
        parser.error(str(exc))
    if args.launches < 3:
        parser.error("--launches must be >= 3: fewer give no interval")
    if args.save_baseline:
        return save_baseline(args)
    if args.baseline:
        return against_baseline(args)
    return ab(args)


if __name__ == "__main__":
    sys.exit(main())
