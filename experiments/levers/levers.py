#!/usr/bin/env python3
"""A/A experiments on the levers that might cut the spread between launches.

    .venv/bin/python scripts/levers.py run results/levers-DATE [--rounds 12]
    .venv/bin/python scripts/levers.py table results/levers-DATE

`run`: every engine's mlp cell at 1 and 2 workers, launched --rounds times under each
lever, the levers taking turns launch round by launch round (their order rotated each
round, so the machine's drift falls on every lever alike). Each lever is a `bench run`
sweep of its own folder, its cells the same but for the lever:

- baseline: the defaults (seeds vary by repeat; threads unpinned; 10 epochs);
- pinned: `--pin-cores`, each worker and its engine's threads on their own cores;
- fixed-seed: `--seed-mode fixed`, the same seed (weights, data order) every launch;
- half-steps: `--epochs 5`, half the timed steps a launch, so twice the launches fit
  in the same minutes.

Two more levers are read from the baseline's launches: the first launch of each cell
discarded (a cold page cache, first imports), and launches taking turns pairwise (two
engines' launches of one repeat ran one after the other: the ratio from those pairs
against the ratio from unpaired launches).

`table`: per engine and worker count, the launch CV (sd of log throughput) under each
lever with a 95% bootstrap interval, the CV's ratio to the baseline's with its interval,
and the precision one minute of launches buys (what a lever must improve: a shorter
launch that varies more can still win), and its median throughput against the
baseline's (Welch's interval on the logs): a lever that speeds one engine up more than
another changes the head-to-head, not only its noise. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import records  # noqa: E402
from bench.analysis.frame import frame  # noqa: E402
from bench.measure import stats  # noqa: E402

LEVERS: dict[str, list[str]] = {
    "baseline": [],
    "pinned": ["--pin-cores"],
    "fixed-seed": ["--seed-mode", "fixed"],
    "half-steps": ["--epochs", "5"],
}
SWEEP = ["--engines", "ddp,horovod,paddle", "--models", "mlp", "--workers", "1,2",
         "--no-comm-cost", "--no-compare"]  # fmt: skip
BOOT = 10_000
Z95 = 1.959963984540054


def run(out: Path, rounds: int, names: list[str]) -> None:
    for r in range(1, rounds + 1):
        turn = r % len(names)
        for lever in names[turn:] + names[:turn]:
            argv = [str(ROOT / ".venv/bin/bench"), "run", *SWEEP, "--repeats", str(r),
                    "--results", str(out / lever), *LEVERS[lever]]  # fmt: skip
            print(f"levers: round {r}/{rounds}, {lever}", flush=True)
            subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def launches(folder: Path) -> pd.DataFrame:
    """The folder's ok, synced launches in record order."""
    df = frame(records.load([records.results_file(folder)]).records)
    df = df[(df["status"] == records.Status.OK) & df["grad_sync"].astype(bool)]
    return df.assign(log=np.log(pd.to_numeric(df["throughput"], errors="coerce")))


def sd_interval(logs: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """sd of the logs with a percentile-bootstrap 95% interval."""
    boot = rng.choice(logs, (BOOT, logs.size)).std(axis=1, ddof=1)
    return float(logs.std(ddof=1)), *np.percentile(boot, [2.5, 97.5])


def sd_ratio(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """sd(a) / sd(b), each side resampled on its own."""
    ba = rng.choice(a, (BOOT, a.size)).std(axis=1, ddof=1)
    bb = rng.choice(b, (BOOT, b.size)).std(axis=1, ddof=1)
    ratio = ba / np.maximum(bb, 1e-12)
    return float(a.std(ddof=1) / b.std(ddof=1)), *np.percentile(ratio, [2.5, 97.5])


def per_minute(sd: float, launch_s: float) -> float:
    """Half-width of a 95% interval on the cell's mean from one minute of such launches."""
    return Z95 * sd * float(np.sqrt(launch_s / 60.0))


def cell_logs(df: pd.DataFrame, engine: str, workers: int) -> pd.DataFrame:
    return df[(df["engine_name"] == engine) & (df["workers"] == workers)]


def table(out: Path) -> str:
    rng = np.random.default_rng(0)
    frames = {lever: launches(out / lever) for lever in LEVERS if (out / lever).exists()}
    base = frames["baseline"]
    lines = [
        "| engine | workers | lever | launches | launch CV [95% CI] | CV / baseline [95% CI] "
        "| speed / baseline [95% CI] | launch s | +-% from 1 min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for engine in ("ddp", "horovod", "paddle"):
        for workers in (1, 2):
            b = cell_logs(base, engine, workers)
            variants = {lever: cell_logs(df, engine, workers) for lever, df in frames.items()}
            variants["first discarded"] = b.iloc[1:]
            for lever, cell in variants.items():
                logs = cell["log"].to_numpy(dtype=float)
                if logs.size < 3:
                    continue
                sd, lo, hi = sd_interval(logs, rng)
                launch_s = float(np.median(cell["launch_s"].astype(float)))
                vs = speed = ""
                if lever != "baseline":
                    base_logs = b["log"].to_numpy(dtype=float)
                    vs = "{:.2f} [{:.2f}, {:.2f}]".format(*sd_ratio(logs, base_logs, rng))
                    # a lever that changes one engine's speed more than another's changes
                    # the head-to-head itself: it cannot be a default, however steady
                    est = stats.ratio(np.exp(logs), np.exp(base_logs))
                    speed = f"{est.value:.2f} [{est.low:.2f}, {est.high:.2f}]"
                lines.append(
                    f"| {engine} | {workers} | {lever} | {logs.size} | {sd:.1%} [{lo:.1%}, {hi:.1%}] "
                    f"| {vs} | {speed} | {launch_s:.1f} | {per_minute(sd, launch_s):.1%} |"
                )
    return "\n".join(lines) + "\n\n" + turns(base)


def turns(base: pd.DataFrame) -> str:
    """Launches taking turns pairwise: the sd of each head-to-head's log ratio from the
    two engines' launches of one repeat (run one after the other), against the sd the
    same launches give unpaired (each side's variance added)."""
    rng = np.random.default_rng(1)
    lines = [
        "| pair | workers | pairs | paired sd [95% CI] | unpaired sd | paired / unpaired [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    engines = ("ddp", "horovod", "paddle")
    for workers in (1, 2):
        for i, a in enumerate(engines):
            for b in engines[i + 1 :]:
                la = cell_logs(base, a, workers).set_index("repeat")["log"]
                lb = cell_logs(base, b, workers).set_index("repeat")["log"]
                both = la.index.intersection(lb.index)
                if both.size < 3:
                    continue
                xa, xb = la[both].to_numpy(dtype=float), lb[both].to_numpy(dtype=float)
                sd, lo, hi = sd_interval(xa - xb, rng)
                unpaired = float(np.sqrt(xa.var(ddof=1) + xb.var(ddof=1)))
                # the repeats resampled together: both sd's of each resample
                pick = rng.integers(0, xa.size, (BOOT, xa.size))
                ra, rb = xa[pick], xb[pick]
                gain = (ra - rb).std(axis=1, ddof=1) / np.maximum(
                    np.sqrt(ra.var(axis=1, ddof=1) + rb.var(axis=1, ddof=1)), 1e-12
                )
                glo, ghi = np.percentile(gain, [2.5, 97.5])
                lines.append(
                    f"| {a} / {b} | {workers} | {both.size} | {sd:.1%} [{lo:.1%}, {hi:.1%}] "
                    f"| {unpaired:.1%} | {sd / unpaired:.2f} [{glo:.2f}, {ghi:.2f}] |"
                )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["run", "table"])
    parser.add_argument("out", type=Path, help="the experiment's folder (one sub-folder a lever)")
    parser.add_argument("--rounds", type=int, default=12, help="launches a cell and lever (12)")
    parser.add_argument(
        "--levers", default=",".join(LEVERS), help=f"comma list (default: {','.join(LEVERS)})"
    )
    args = parser.parse_args()
    names = args.levers.split(",")
    unknown = sorted(set(names) - set(LEVERS))
    if unknown or "baseline" not in names:
        parser.error(f"--levers takes baseline and any of {', '.join(LEVERS)}; got {args.levers}")
    if args.what == "run":
        if args.rounds < 3:
            parser.error("--rounds must be >= 3: fewer give no spread")
        run(args.out, args.rounds, names)
    print(table(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
