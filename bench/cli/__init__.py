"""The `bench` command: one module per subcommand, each with `add_arguments` and `run`.

`main` builds the parser with every subcommand's one-line help, and the full
arguments of the subcommand being run only: a subcommand's module (and what it
imports: pandas for compare, the sweep for run) is loaded only when it runs, so
`bench --help` stays fast.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import signal
import sys
import typing
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


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line: what was wrong with which flag, and
    where the flags are listed (the full usage stays with --help)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the flags)\n")


def parser(selected: str | None = None) -> argparse.ArgumentParser:
    """`bench`'s parser; `selected`, a subcommand's name, gets its full arguments."""
    top = Parser(
        prog="bench",
        description="Benchmark data-parallel training engines under identical settings.",
        allow_abbrev=False,
    )
    sub = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, allow_abbrev=False)
        if name == selected:
            # loaded here, by name: only the subcommand that runs pays for its imports
            module = importlib.import_module(module_name)
            p.description = module.DESCRIPTION
            p.formatter_class = getattr(module, "FORMATTER", argparse.HelpFormatter)
            module.add_arguments(p)
    return top


def unrecognized(p: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """argparse's 'unrecognized arguments' for `p`, with the closest flag it does take."""
    message = f"unrecognized arguments: {' '.join(extra)}"
    flags = [s for a in p._actions for s in a.option_strings if a.help != argparse.SUPPRESS]
    for given in (e.split("=", 1)[0] for e in extra if e.startswith("--")):
        close = difflib.get_close_matches(given, flags, n=1, cutoff=0.6)
        if close:
            return f"{message}; did you mean {close[0]}?"
    return message


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: the command line) and run the subcommand it names.

    A reader that stops early (`bench compare | head`) ends the command quietly."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the exit
        return status
    except BrokenPipeError:
        # Python's own advice: point stdout at devnull so the exit's flush cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in argv if not a.startswith("-")), None)
    top = parser(selected if selected in COMMANDS else None)
    args, extra = top.parse_known_args(argv)
    if extra:
        sub = _subparser(top, args.command)
        sub.error(unrecognized(sub, extra))
    module = importlib.import_module(COMMANDS[args.command][0])
    status: int = module.run(args)
    return status


def _subparser(top: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand `name` in `top`."""
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return top
