#!/usr/bin/env python3
"""The regression gate's calibration tables, from scripts/perf_calibrate.sh's folder.

    .venv/bin/python scripts/perf_table.py OUT                 # the tables
    .venv/bin/python scripts/perf_table.py OUT --csv FILE --counts-csv FILE2
                                                               # and every launch's minima,
                                                               # every run's counts
    .venv/bin/python scripts/perf_table.py --from-csv FILE --from-counts-csv FILE2

OUT holds one folder a gate run (same-N: identical code; slow-N: a slower step;
more-NAME-N: counted benchmark NAME doing more work), each with the JSON report of
every launch (base-K.json, new-K.json: pair K), the counts (counts.json), and a log.
A launch's value per benchmark is its fastest round, as the gate takes it; the CSV
keeps those (a few KB where the reports are megabytes), and `--from-csv FILE` makes
the tables from it again, each gate run's decisions replayed by
scripts/perfgate.py exactly as the gate took them. The counts are replayed by
scripts/perfcount.py's threshold the same way.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # perfgate.py, beside this script

import perfcount  # noqa: E402
import perfgate  # noqa: E402

Row = tuple[str, int, str, int, str, float]  # kind, run, side, pair, benchmark, seconds
CountRow = tuple[str, int, str, str, int]  # kind, run, side, benchmark, instructions
RUN = re.compile(r"(same|slow|more-\w+)-(\d+)")


def read_runs(out: Path) -> list[Row]:
    rows: list[Row] = []
    for run_dir in sorted(out.glob("*-*")):
        m = RUN.fullmatch(run_dir.name)
        if not m or not run_dir.is_dir():
            continue
        for report in run_dir.glob("*.json"):
            launch_of = re.fullmatch(r"(base|new)-(\d+)", report.stem)
            if not launch_of:  # counts.json
                continue
            side, pair = launch_of[1], launch_of[2]
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
    slowed = sum(1 for kind, _ in runs if kind == "slow")
    same = len(runs) - slowed  # more-NAME runs add counted work only: their steps are the same
    lines += ["", "| benchmark | sd of a launch | sd of a pair's log ratio | regressed, "
              "identical steps | regressed, slowed runs |", "|---|---|---|---|---|"]  # fmt: skip
    for name in sorted(paired):
        lines.append(
            f"| {name} | {_sd(single[name]):.1%} | {_sd(paired[name]):.1%} "
            f"| {false[name]}/{same} | {caught[name]}/{slowed} |"
        )
    return "\n".join(lines)


def _sd(groups: list[np.ndarray]) -> float:
    """The sd pooled over groups (each gate run's side or pairs has a mean of its own)."""
    df = sum(g.size - 1 for g in groups if g.size > 1)
    ss = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups if g.size > 1)
    return float(np.sqrt(ss / df)) if df else float("nan")


def read_counts(out: Path) -> list[CountRow]:
    rows: list[CountRow] = []
    for path in sorted(out.glob("*-*/counts.json")):
        m = RUN.fullmatch(path.parent.name)
        if m:
            for side, counts in json.loads(path.read_text()).items():
                rows += [(m[1], int(m[2]), side, name, int(n)) for name, n in counts.items()]
    return sorted(rows)


def read_counts_csv(path: Path) -> list[CountRow]:
    with open(path, newline="") as fh:
        return [(r["kind"], int(r["run"]), r["side"], r["benchmark"], int(r["instructions"]))
                for r in csv.DictReader(fh)]  # fmt: skip


def write_counts_csv(rows: list[CountRow], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["kind", "run", "side", "benchmark", "instructions"])
        w.writerows(rows)


def counts_tables(rows: list[CountRow], threshold: float = perfcount.DEFAULT_THRESHOLD) -> str:
    """One line a gate run (new/base per benchmark, the counted verdict), then each
    benchmark's spread over the runs, per side, where its work was not changed."""
    got: dict[tuple[str, int], dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for kind, run, side, name, n in rows:
        got[kind, run][side][name] = n
    names = sorted({name for *_, name, _ in rows})
    lines = [
        f"| gate run | {' | '.join(names)} | counted verdict |",
        "|---" * (len(names) + 2) + "|",
    ]
    plain: dict[tuple[str, str], list[int]] = defaultdict(list)
    for (kind, run), sides in sorted(got.items()):
        found = {c.name: c for c in perfcount.changes(
            {k: perfcount.Profile(v, {}) for k, v in sides["base"].items()},
            {k: perfcount.Profile(v, {}) for k, v in sides["new"].items()}, threshold)}  # fmt: skip
        cells = [f"{found[n].ratio - 1:+.2%}" if n in found else "" for n in names]
        bad = [n for n in names if n in found and found[n].regressed]
        lines.append(f"| {kind} {run} | {' | '.join(cells)} | "
                     + (f"FAIL: {', '.join(bad)}" if bad else "pass") + " |")  # fmt: skip
        for side, counts in sides.items():
            for name, n in counts.items():
                if not (side == "new" and kind == f"more-{name}"):
                    plain[side, name].append(n)
    lines += [
        "",
        "| benchmark | side | runs | fewest | most | spread |",
        "|---|---|---|---|---|---|",
    ]
    for (side, name), ns in sorted(plain.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(f"| {name} | {side} | {len(ns)} | {min(ns):,} | {max(ns):,} "
                     f"| {max(ns) / min(ns) - 1:.3%} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", help="scripts/perf_calibrate.sh's folder")
    parser.add_argument("--csv", type=Path, help="write every launch's minima here")
    parser.add_argument("--from-csv", type=Path, help="the tables from a CSV written before")
    parser.add_argument("--counts-csv", type=Path, help="write every run's counts here")
    parser.add_argument("--from-counts-csv", type=Path, help="the counts from a CSV written before")
    args = parser.parse_args()
    if not (args.from_csv or args.from_counts_csv or args.out):
        parser.error("give OUT, or --from-csv FILE and/or --from-counts-csv FILE")
    rows = read_csv(args.from_csv) if args.from_csv else read_runs(args.out) if args.out else []
    counted = (read_counts_csv(args.from_counts_csv) if args.from_counts_csv
               else read_counts(args.out) if args.out else [])  # fmt: skip
    if not rows and not counted:
        sys.exit("perf_table: no gate runs found (folders same-N, slow-N, more-NAME-N with "
                 "JSON reports or counts.json)")  # fmt: skip
    if args.csv:
        write_csv(rows, args.csv)
    if args.counts_csv:
        write_counts_csv(counted, args.counts_csv)
    print("\n\n".join(t for t in (rows and tables(rows), counted and counts_tables(counted)) if t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
