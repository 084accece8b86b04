#!/usr/bin/env python3
"""Run the whole test suite several times, idle and under stress, and count failures per test.

    .venv/bin/python scripts/stability.py --idle 3 --busy 1 --quota 1 --out stability/

Each run uses as many pytest processes as scripts/test.sh, CI's command, would choose
where it runs (--processes): in quota mode, as the CPUs of the quota allow.

Modes:
  idle    nothing else runs
  busy    two neighbour processes spin on the CPUs for the whole run
  quota   the suite runs in a cgroup allowed three quarters of this machine's CPUs
          (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us); root only

Each run writes a JUnit XML under --out; the summary (summary.md there, and on
stdout) gives every test that failed or errored in any run, with its count per
mode, and the runs' durations. Exit status 1 when any test failed. CI runs the
suite once (scripts/test.sh); this is the proof that it passes whatever the
machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import cgroup  # noqa: E402  (the repository root is on the path from here)

SPIN = "while True: pass"
CGROUP = "bench-stability"
# Not half: usable_cpus counts a quota of 1 CPU as one CPU, and in it `bench run` rightly
# refuses the suite's 2-worker cells as oversubscribed. 3/4 of two cores (1.5) leaves both
# CPUs usable and throttles whenever the two test processes peak together.
QUOTA_SHARE = 0.75


@contextlib.contextmanager
def busy_neighbours(n: int = 2) -> Iterator[None]:
    """`n` processes spinning on the CPUs, outside the tested tree, until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run_suite(out: Path, name: str, prefix: list[str], pytest_args: list[str]) -> float:
    xml = out / f"{name}.xml"
    argv = [*prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"--junitxml={xml}", *pytest_args]  # fmt: skip
    start = time.monotonic()
    with open(out / f"{name}.log", "wb") as log:
        subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return time.monotonic() - start


def failures(xml: Path) -> tuple[int, list[str]]:
    """(tests run, ids of those that failed or errored) from a JUnit XML file."""
    if not xml.exists():
        return 0, ["<the run left no report>"]
    tree = ET.parse(xml)
    bad, total = [], 0
    for case in tree.iter("testcase"):
        total += 1
        if case.find("failure") is not None or case.find("error") is not None:
            bad.append(f"{case.get('classname')}::{case.get('name')}")
    return total, bad


def _processes(text: str) -> str:
    if text == "auto" or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: give a number of processes (0: one), or auto")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--idle", type=int, default=3, help="idle runs (default: 3)")
    parser.add_argument("--busy", type=int, default=1, help="runs beside two busy neighbours")
    parser.add_argument("--quota", type=int, default=1, help="runs with 3/4 of the CPUs (root)")
    parser.add_argument("--out", default="stability", help="where reports go")
    parser.add_argument(
        "--processes",
        type=_processes,
        default=os.environ.get("BENCH_TEST_PROCESSES", "auto"),
        help="pytest-xdist workers, as scripts/test.sh runs: a number (0: one process), or "
        "auto (default): as many as the CPUs where the suite runs allow, two at most",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    missing = cgroup.why_not() if args.quota else None
    if missing:
        parser.error(f"--quota needs a CPU quota cgroup ({missing}); use --quota 0")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    pytest_args = ["-n", str(args.processes), "--dist", "loadfile", *args.pytest_args]
    plan = [("idle", i) for i in range(args.idle)] + [("busy", i) for i in range(args.busy)]
    plan += [("quota", i) for i in range(args.quota)]
    rows, counts = [], {mode: Counter[str]() for mode in ("idle", "busy", "quota")}
    for mode, i in plan:
        name = f"{mode}-{i + 1}"
        print(f"stability: {name} ...", flush=True)
        if mode == "busy":
            with busy_neighbours():
                seconds = run_suite(out, name, [], pytest_args)
        elif mode == "quota":
            with cgroup.cpu_quota((os.cpu_count() or 2) * QUOTA_SHARE, CGROUP) as prefix:
                seconds = run_suite(out, name, prefix, pytest_args)
        else:
            seconds = run_suite(out, name, [], pytest_args)
        total, bad = failures(out / f"{name}.xml")
        counts[mode].update(bad)
        rows.append(f"| {name} | {total} | {len(bad)} | {seconds / 60:.1f} |")
        print(
            f"stability: {name}: {len(bad)} of {total} failed ({seconds / 60:.1f} min)", flush=True
        )
    runs = Counter(mode for mode, _ in plan)
    lines = ["| run | tests | failed | minutes |", "|---|---|---|---|", *rows, ""]
    flaky = sorted(set().union(*counts.values()))
    if flaky:
        lines += ["| test | idle | busy | quota |", "|---|---|---|---|"]
        lines += [
            f"| {t} | " + " | ".join(f"{counts[m][t]}/{runs[m]}" for m in counts) + " |"
            for t in flaky
        ]
    else:
        lines.append(f"No test failed in any of the {len(plan)} runs.")
    summary = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(summary)
    print(summary)
    return 1 if flaky else 0


if __name__ == "__main__":
    sys.exit(main())
