"""What a one-cell sweep costs in a folder of 10,000 records, against an empty folder.

    .venv/bin/python tests/benchmarks/sweep_scale.py [--records 10000] [--pairs 5]

Two results folders: one empty, one holding N records (modelled on the committed
reference). Then `bench run` of one small DDP cell (1 worker, mlp, 1 epoch, no
extra measurement), a new seed each time so that it is never skipped as done, is
run alternately in the two folders, --pairs times each (the first run in the full
folder builds its summaries cache and is left out, as a sweep's first read is).
Prints each pair's wall seconds and the ratio full/empty with its median: a
sweep's cost per cell must not grow with the records a folder already holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "results" / "reference" / "cpu-2core-digits" / "runs.jsonl"


def fill(folder: Path, n: int) -> None:
    templates = [json.loads(line) for line in REFERENCE.read_text().splitlines() if line.strip()]
    with open(folder / "runs.jsonl", "w") as fh:
        for i in range(n):
            rec = dict(templates[i % len(templates)], run_id=f"scale{i:06d}")
            fh.write(json.dumps(rec) + "\n")


def one_cell(folder: Path, seed: int) -> float:
    argv = [sys.executable, "-m", "bench", "run", "--engines", "ddp", "--workers", "1",
            "--models", "mlp", "--repeats", "1", "--epochs", "1", "--seed", str(seed),
            "--measure-cap-s", "0", "--no-compare", "--results", str(folder)]  # fmt: skip
    start = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        empty, full = Path(tmp) / "empty", Path(tmp) / "full"
        empty.mkdir()
        full.mkdir()
        fill(full, args.records)
        one_cell(full, 10_000)  # builds the summaries cache, as a sweep's first read does
        ratios = []
        for i in range(args.pairs):
            e, f = one_cell(empty, i), one_cell(full, i)
            ratios.append(f / e)
            print(
                f"pair {i + 1}: empty {e:.2f} s, {args.records:,} records {f:.2f} s, ratio {f / e:.3f}"
            )
        print(f"median ratio {statistics.median(ratios):.3f} over {args.pairs} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
