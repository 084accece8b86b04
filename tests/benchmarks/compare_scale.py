"""How fast `bench compare` reads many records: cold (cache built) and warm (cache read).

    .venv/bin/python tests/benchmarks/compare_scale.py [--records 10000] [--runs 3]

Writes N records made from the committed reference sweep (each reference record copied
with a new run id, as a year of nightly sweeps would pile them up: about 18 KB a record
as schema 5 writes it, 181 MB at 10,000) into a temporary folder; then runs `bench compare`
on them in fresh processes: once with no cache (it builds the caches beside the file),
then `--runs` times reading them. Prints wall seconds and peak memory of each.
Targets on the 2-core reference machine (docs/reading-compare.md has the measurement):
10,000 records warm under 1.5 s and 300 MB, cold under 12 s.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "results" / "reference" / "cpu-2core-digits" / "runs.jsonl"
_RUN_ID = re.compile(rb'"run_id": "[^"]*"')


def write_records(path: Path, n: int) -> None:
    """`n` records: the reference's lines in turn, each with a run id of its own (the
    line is copied as stored, its packed series untouched)."""
    templates = [line for line in REFERENCE.read_bytes().splitlines() if line.strip()]
    with open(path, "wb") as fh:
        for i in range(n):
            line = templates[i % len(templates)]
            fh.write(_RUN_ID.sub(f'"run_id": "scale{i:07d}"'.encode(), line, count=1) + b"\n")


def timed_compare(path: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one `bench compare` in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, sys\n"
            "from bench import cli\n"
            # made each time: a replay of the first run's output is not compare's work
            f"code = cli.main(['compare', {str(path)!r}, '--no-replay'])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"bench compare failed:\n{proc.stderr[-2000:]}")
    rss_kb = float(proc.stderr.strip().splitlines()[-1])
    return wall, rss_kb / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3, help="warm runs after the cold one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.jsonl"
        write_records(path, args.records)
        print(f"{args.records} records, {path.stat().st_size / 1e6:.0f} MB of JSON Lines")
        for label in ["cold (builds the cache)"] + ["warm"] * args.runs:
            wall, rss = timed_compare(path)
            print(f"  bench compare, {label}: {wall:.2f} s, peak {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
