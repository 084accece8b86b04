"""The `bench` command: one module per subcommand, each with `add_arguments` and `run`.

`main` builds the parser with every subcommand's one-line help, and the full
arguments of the subcommand being run only: a subcommand's module (and what it
imports: pandas for compare, the sweep for run) is loaded only when it runs, so
`bench --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> (module, one-line help). Each module has DESCRIPTION, add_arguments(parser)
# and run(args) -> exit status; tests call run() directly.
COMMANDS = {
    "run": ("bench.cli.run", "sweep engines x workers x models x repeats, then compare"),
    "compare": ("bench.cli.compare", "comparison tables from result records, or BASE/NEW changes"),
    "collectives": ("bench.cli.collectives", "allreduce latency and bandwidth of each engine"),
    "predict": (
        "bench.cli.predict",
        "model each engine's scaling from measured records (predictions, not measurements)",
    ),
    "tune": ("bench.cli.tune", "search each engine's communication knobs, then best vs best"),
    "peak": ("bench.cli.peak", "measure the matrix-multiply peak that utilisation divides by"),
    "export": ("bench.cli.export", "write records in another tool's format"),
    "models": ("bench.cli.models", "list the reference models"),
}


def parser(selected: str | None = None) -> argparse.ArgumentParser:
    """`bench`'s parser; `selected`, a subcommand's name, gets its full arguments."""
    top = argparse.ArgumentParser(
        prog="bench",
        description="Benchmark data-parallel training engines under identical settings.",
        allow_abbrev=False,
    )
    sub = top.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, allow_abbrev=False)
        if name == selected:
            # loaded here, by name: only the subcommand that runs pays for its imports
            module = importlib.import_module(module_name)
            p.description = module.DESCRIPTION
            p.formatter_class = getattr(module, "FORMATTER", argparse.HelpFormatter)
            module.add_arguments(p)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: the command line) and run the subcommand it names."""
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in argv if not a.startswith("-")), None)
    args = parser(selected if selected in COMMANDS else None).parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    status: int = module.run(args)
    return status
