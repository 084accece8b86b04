"""Does `bench compare` cost the same per record at 1,000, 10,000 and 100,000 records?

    .venv/bin/python tests/benchmarks/compare_linear.py [--sizes 1000,10000,100000]

For each size, writes that many records made from the committed reference sweep
(compare_scale.py's records), runs `bench compare` cold (building its caches) and warm
(reading them) in fresh processes, and prints per size the wall time and peak memory,
each also per record, and at the end the ratio of the largest size's per-record
figures to the second largest's: flat means within 2x (docs/reading-compare.md).
Peak memory includes the interpreter and its imports, a fixed cost that small sizes
divide among few records.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from compare_scale import timed_compare, write_records

COLUMNS = [
    "records",
    "MB",
    "cold_s",
    "cold_ms_per_record",
    "warm_s",
    "warm_ms_per_record",
    "peak_MB",
    "peak_KB_per_record",
]


def measure(n: int, folder: Path) -> dict[str, float]:
    """One size: cold, then warm, the warm run's peak memory."""
    path = folder / f"n{n}" / "runs.jsonl"
    path.parent.mkdir()
    write_records(path, n)
    cold, _ = timed_compare(path)
    warm, peak = timed_compare(path)
    size = path.stat().st_size / 1e6
    path.unlink()
    return {
        "records": n,
        "MB": size,
        "cold_s": cold,
        "cold_ms_per_record": cold / n * 1e3,
        "warm_s": warm,
        "warm_ms_per_record": warm / n * 1e3,
        "peak_MB": peak,
        "peak_KB_per_record": peak * 1024 / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma list of sizes")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(" ".join(f"{c:>18}" for c in COLUMNS))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            rows.append(measure(n, Path(tmp)))
            print(" ".join(f"{rows[-1][c]:>18.3f}" for c in COLUMNS), flush=True)
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        for c in ("cold_ms_per_record", "warm_ms_per_record", "peak_KB_per_record"):
            print(f"{c} at {b['records']} / at {a['records']}: {b[c] / a[c]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
