"""`bench peak`: the machine's measured matrix-multiply peak, which utilisation divides by."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from bench import records
from bench.cli.common import EXIT_BAD_INPUT, positive_ints
from bench.measure import peak

DESCRIPTION = (
    "Measure (or show the cached) dense matrix-multiply peak of this machine at a thread "
    "count and precision, cached beside the results (RESULTS/peak-flops.json); runs "
    "recorded there name it, and compare divides achieved FLOP/s by it. bench run measures "
    "it before its cells. It is also kept in a per-user cache, "
    "$XDG_CACHE_HOME/bench/peak-flops.json (default ~/.cache/bench/peak-flops.json), which "
    "a results folder without the entry copies instead of measuring again; each entry, and "
    "each record's peak, says when it was measured and whether it was copied from there."
)


class _WholeNames(argparse.HelpFormatter):
    """argparse's help, its description wrapped without breaking at hyphens, so that the
    cache's file name (peak-flops.json) stays whole for a reader to copy or grep."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


FORMATTER = _WholeNames  # bench.cli's parser reads it


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", default="1", help="thread counts, comma list (default: 1)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--results", default="results", help="the results folder it is cached in")
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="measure again, replacing the entry in the results folder and the per-user cache",
    )


def run(args: argparse.Namespace) -> int:
    threads = positive_ints(args.threads, "--threads", "1,2")
    if threads is None:
        return EXIT_BAD_INPUT
    folder = records.results_file(Path(args.results)).parent
    for t in threads:
        try:
            entry = peak.ensure(folder, t, args.precision, args.device, args.remeasure)
            assert entry is not None  # may_measure: measured when missing
        except (ImportError, RuntimeError, OSError) as exc:
            print(f"error: the peak could not be measured: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(
            f"{entry['gflops']:,.1f} GFLOP/s  {entry['key']}  (n={entry['n']}, "
            f"{peak.provenance(entry)}; {entry['source']})"
        )
    return 0
