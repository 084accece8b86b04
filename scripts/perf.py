#!/usr/bin/env python3
"""The pytest-benchmark regression gate: base and working tree, on this machine, alternated.

    .venv/bin/python scripts/perf.py                     # A/B against the merge base with main
    .venv/bin/python scripts/perf.py --base REV          # A/B against REV
    .venv/bin/python scripts/perf.py --base-file .ci/perf-base   # CI: the base kept in the repo
    .venv/bin/python scripts/perf.py --baseline          # against a baseline saved
                                                         # on this machine (never committed)
    .venv/bin/python scripts/perf.py --save-baseline     # record this machine's baseline

A/B: REV is checked out in a temporary git worktree sharing this .venv; the two
sides are launched in pairs, alternately (A B, B A, ...), each side running its own
tests/benchmarks, and every benchmark both ran is decided by
scripts/perfgate.py at the looks (4, 6, 8, 11, 16 pairs): pairs are added
until a benchmark regressed, every one is decided, or the next look would overrun
--budget. Exit status 1 only when a benchmark's whole interval lies above
+threshold. BENCH_PERF_SLOWDOWN=0.15 (new side only; BENCH_PERF_SLOWDOWN_ENGINE=ddp
for one engine's step alone) makes the training-step benchmarks do 15% more work:
how the gate is calibrated.
"""

from __future__ import annotations

import argparse
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

import perfgate  # noqa: E402

from bench.cli.common import parse_budget  # noqa: E402
from bench.core.errors import InputError  # noqa: E402
from bench.measure import stats  # noqa: E402

BASELINE = ROOT / "tests" / "benchmarks" / "baseline"
# the benchmarks the gate times: each one in-process and cheap; the 2-process allreduce
# (tests/benchmarks/test_collective_perf.py) runs as a smoke test in the suite only
SELECTION = ["tests/benchmarks/test_perf.py"]
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
        plain = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_PERF_SLOWDOWN")}
        sides = {"base": (base_tree, plain), "new": (ROOT, dict(os.environ))}
        got: dict[str, list[perfgate.Launch]] = {"base": [], "new": []}
        print(f"perf: base {base_rev[:10]} vs the working tree, launched in pairs until decided "
              f"(looks at {', '.join(map(str, perfgate.LOOKS))} pairs; budget {args.budget})",
              flush=True)  # fmt: skip
        start = time.monotonic()
        for i in range(perfgate.LOOKS[-1]):
            order = ("base", "new") if i % 2 == 0 else ("new", "base")  # drift cancels in pairs
            for side in order:
                tree, env = sides[side]
                report = launch(tree, reports / f"{side}-{i}.json", env, args.pytest_args)
                got[side].append(perfgate.Launch.read(report))
            if stop(got, i + 1, time.monotonic() - start, args):
                break
        found = perfgate.sequential_changes(got["base"], got["new"], args.threshold)
        speed = perfgate.machine_speed(got["base"], got["new"], pairs=True)
        print(f"perf: {len(got['base'])} pairs in {time.monotonic() - start:.0f} s")
        return verdict(found, speed, perfgate.confidence(), args.threshold)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT,
                       capture_output=True)  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)


def stop(
    got: dict[str, list[perfgate.Launch]], pairs: int, spent: float, args: argparse.Namespace
) -> bool:
    """At a look: stop when settled, or when the next look would overrun the budget."""
    if pairs not in perfgate.LOOKS:
        return False
    found = perfgate.sequential_changes(got["base"], got["new"], args.threshold)
    undecided = [c.name for c in found if c.outcome == perfgate.UNDECIDED]
    print(f"perf: look at {pairs} pairs ({spent:.0f} s): "
          + (f"{len(undecided)} undecided" if undecided else "every benchmark decided"),
          flush=True)  # fmt: skip
    if perfgate.settled(found):
        return True
    later = [k for k in perfgate.LOOKS if k > pairs]
    if later and spent + (later[0] - pairs) * spent / pairs > args.budget_s:
        print(f"perf: the next look ({later[0]} pairs) would overrun the budget ({args.budget})")
        return True
    return False


def verdict(
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
        print(f"perf: no benchmark is slower by more than {threshold:.0%} for certain, but "
              f"UNDECIDED: {', '.join(open_)} could still be (the machine was too noisy for "
              "the budget: rerun on a quiet machine or with a longer --budget)")  # fmt: skip
        return 0
    print(f"perf: every benchmark is within +{threshold:.0%} for certain")
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
    return verdict(found, speed, stats.CONFIDENCE, args.threshold)


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
    parser.add_argument("--keep", metavar="DIR", help="keep every launch's JSON report in DIR")
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
