#!/usr/bin/env python3
"""The regression gate's calibration tables, from scripts/perf_calibrate.sh's folder.

    .venv/bin/python scripts/perf_table.py OUT                 # the tables
    .venv/bin/python scripts/perf_table.py OUT --csv FILE      # and every launch's minima

OUT holds one folder a gate run (same-N: identical code; slow-N: a slower step), each
with the JSON report of every launch (base-K.json, new-K.json: pair K), and a log.
A launch's value per benchmark is its fastest round, as the gate takes it; the CSV
keeps those (a few KB where the reports are megabytes), and `--from-csv FILE` makes
the tables from it again, each gate run's decisions replayed by
scripts/perfgate.py exactly as the gate took them.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # perfgate.py, beside this script

import perfgate  # noqa: E402

Row = tuple[str, int, str, int, str, float]  # kind, run, side, pair, benchmark, seconds


def read_runs(out: Path) -> list[Row]:
    rows: list[Row] = []
    for run_dir in sorted(out.glob("*-*")):
        m = re.fullmatch(r"(same|slow)-(\d+)", run_dir.name)
        if not m or not run_dir.is_dir():
            continue
        for report in run_dir.glob("*.json"):
            side, pair = report.stem.split("-")
            launch = perfgate.Launch.read(report)
            for name, rounds in launch.rounds.items():
                rows.append((m[1], int(m[2]), side, int(pair), name, min(rounds)))
    return sorted(rows)


def read_csv(path: Path) -> list[Row]:
    with open(path, newline="") as fh:
        return [
            (r["kind"], int(r["run"]), r["side"], int(r["pair"]), r["benchmark"], float(r["min_s"]))
            for r in csv.DictReader(fh)
        ]


def write_csv(rows: list[Row], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["kind", "run", "side", "pair", "benchmark", "min_s"])
        w.writerows(rows)


def launches(rows: list[Row]) -> dict[tuple[str, int], dict[str, list[perfgate.Launch]]]:
    """Each gate run's launches, side by side in pair order, one round each (the minimum)."""
    got: dict[tuple[str, int, str, int], dict[str, list[float]]] = defaultdict(dict)
    for kind, run, side, pair, name, seconds in rows:
        got[kind, run, side, pair][name] = [seconds]
    runs: dict[tuple[str, int], dict[str, list[perfgate.Launch]]] = defaultdict(
        lambda: {"base": [], "new": []}
    )
    for (kind, run, side, pair), rounds in sorted(got.items()):
        runs[kind, run][side].append(perfgate.Launch(Path(f"{side}-{pair}"), {}, rounds))
    return runs


def tables(rows: list[Row]) -> str:
    runs = launches(rows)
    lines = ["| gate run | pairs | verdict | regressed |", "|---|---|---|---|"]
    caught: dict[str, int] = defaultdict(int)
    false: dict[str, int] = defaultdict(int)
    paired: dict[str, list[np.ndarray]] = defaultdict(list)  # per run: each pair's log ratio
    single: dict[str, list[np.ndarray]] = defaultdict(list)  # per run and side: log minima
    for (kind, run), sides in sorted(runs.items()):
        found = perfgate.sequential_changes(sides["base"], sides["new"])
        bad = [c.name for c in found if c.regressed]
        verdict = "FAIL" if bad else "pass"
        lines.append(f"| {kind} {run} | {len(sides['base'])} | {verdict} | {', '.join(bad)} |")
        for c in found:
            (caught if kind == "slow" else false)[c.name] += c.regressed
            b, n = perfgate.pair_values(sides["base"], sides["new"], c.name)
            paired[c.name].append(np.log(n) - np.log(b))
            single[c.name] += [np.log(b), np.log(n)]
    kinds = {kind for kind, _ in runs}
    counts = {k: sum(1 for kind, _ in runs if kind == k) for k in kinds}
    lines += ["", "| benchmark | sd of a launch | sd of a pair's log ratio | regressed, "
              "identical code | regressed, slowed runs |", "|---|---|---|---|---|"]  # fmt: skip
    for name in sorted(paired):
        lines.append(
            f"| {name} | {_sd(single[name]):.1%} | {_sd(paired[name]):.1%} "
            f"| {false[name]}/{counts.get('same', 0)} | {caught[name]}/{counts.get('slow', 0)} |"
        )
    return "\n".join(lines)


def _sd(groups: list[np.ndarray]) -> float:
    """The sd pooled over groups (each gate run's side or pairs has a mean of its own)."""
    df = sum(g.size - 1 for g in groups if g.size > 1)
    ss = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups if g.size > 1)
    return float(np.sqrt(ss / df)) if df else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", help="scripts/perf_calibrate.sh's folder")
    parser.add_argument("--csv", type=Path, help="write every launch's minima here")
    parser.add_argument("--from-csv", type=Path, help="the tables from a CSV written before")
    args = parser.parse_args()
    if args.from_csv:
        rows = read_csv(args.from_csv)
    elif args.out:
        rows = read_runs(args.out)
    else:
        parser.error("give OUT or --from-csv FILE")
    if not rows:
        sys.exit("perf_table: no gate runs found (folders same-N and slow-N with JSON reports)")
    if args.csv:
        write_csv(rows, args.csv)
    print(tables(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
