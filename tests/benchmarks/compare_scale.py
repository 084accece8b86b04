"""How fast `bench compare` reads many records: cold (cache built) and warm (cache read).

    .venv/bin/python tests/benchmarks/compare_scale.py [--records 10000] [--steps 700]

Writes N records modelled on the committed reference records, each with per-step
arrays of `--steps` timed steps per rank (about 40 KB a record, 402 MB at 10,000,
with today's reference records), into a temporary folder; then runs `bench compare`
on them three times in fresh processes: once with no cache (it builds the summaries
beside the file), twice reading it. Prints wall seconds and peak memory of each.
Target on the 2-core reference machine: warm under 3 s and 500 MB (missed today:
docs/reading-compare.md has the measurement).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "results" / "reference" / "cpu-2core-digits" / "runs.jsonl"


def write_records(path: Path, n: int, steps: int) -> None:
    templates = [json.loads(line) for line in REFERENCE.read_text().splitlines() if line.strip()]
    templates = [t for t in templates if t.get("status") == "ok"]
    rng = random.Random(0)
    with open(path, "w") as fh:
        for i in range(n):
            rec = dict(templates[i % len(templates)])
            world = int(rec.get("world_size") or 1)
            rec["run_id"] = f"scale{i:06d}"
            rec["spec"] = {**rec["spec"], "seed": i // len(templates)}
            rec["throughput"] = float(rec["throughput"]) * rng.uniform(0.9, 1.1)
            rec["step_times_s"] = [
                [round(rng.uniform(0.004, 0.006), 6) for _ in range(steps)] for _ in range(world)
            ]
            rec["step_losses"] = [round(rng.uniform(0.0, 2.0), 6) for _ in range(steps)]
            fh.write(json.dumps(rec) + "\n")


def timed_compare(path: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one `bench compare` in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, sys\n"
            "from bench import cli\n"
            f"code = cli.main(['compare', {str(path)!r}])\n"
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=700, help="timed steps per rank per record")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.jsonl"
        write_records(path, args.records, args.steps)
        print(f"{args.records} records, {path.stat().st_size / 1e6:.0f} MB of JSON Lines")
        for label in ("cold (builds the cache)", "warm", "warm"):
            wall, rss = timed_compare(path)
            print(f"  bench compare, {label}: {wall:.2f} s, peak {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
