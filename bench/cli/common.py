"""What every subcommand shares: exit statuses, list arguments, signals, skipped lines."""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench import engines
from bench.core.errors import InputError, Interrupted
from bench.records import Loaded

EXIT_BAD_INPUT = 2
# bench.tables.frame's DEFAULT_TARGET, repeated so that parsing needs no pandas
# (tests/test_imports.py checks that the two agree)
DEFAULT_TARGET = 0.95


def positive_ints(text: str, flag: str, example: str) -> list[int] | None:
    """`text` as a comma list of integers >= 1; None after printing what `flag` takes."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
        if values and min(values) >= 1:
            return values
    except ValueError:
        pass
    print(f"error: {flag} takes integers >= 1, e.g. {example}; got {text!r}", file=sys.stderr)
    return None


def comma_list(kind: type) -> Callable[[str], tuple[object, ...]]:
    """An argparse type: a comma-separated list of `kind` (empty items ignored)."""

    def parse(text: str) -> tuple[object, ...]:
        try:
            return tuple(kind(part.strip()) for part in text.split(",") if part.strip())
        except ValueError:
            plural = {int: "integers", float: "numbers"}.get(kind, kind.__name__)
            example = {int: ", e.g. 1,2", float: ", e.g. 0.5,1"}.get(kind, "")
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {plural}{example}; got {text!r}"
            ) from None

    return parse


def engine_names(text: str) -> tuple[str, ...]:
    """An argparse type: a comma list of registered engines, one line naming a wrong one."""
    known = [str(e) for e in engines.Engine]
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    for name in names:
        if name not in known:
            raise argparse.ArgumentTypeError(engines.unknown(name))
    return names


def hide_flags(p: argparse.ArgumentParser, hidden: Sequence[str]) -> None:
    """Leave the flags in `hidden` (shared flags this command refuses) out of `p`'s help."""
    for action in p._actions:
        if action.dest in hidden:
            action.help = argparse.SUPPRESS


class DefaultsOnce(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after each option's help, unless the help states its own
    default or there is nothing to state: None (unset; the help says what then happens)
    and a switch's False would only mislead."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default:" in text or action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP stop a command as Ctrl-C does: what runs is killed and recorded,
    then the command exits 128 + the signal's number."""

    def stop(signum: int, _frame: object) -> None:
        # A second signal must not cut the clean-up of the first short.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def stopped_status(exc: BaseException) -> tuple[str, int]:
    """(what stopped the command, its exit status) for Ctrl-C or an `Interrupted`."""
    if isinstance(exc, Interrupted):
        return exc.name, 128 + exc.signum
    return "SIGINT (Ctrl-C)", 128 + signal.SIGINT


def report_skipped(loaded: Loaded) -> None:
    """Tell the user, on stderr, every line and folder a load passed over."""
    for problem in loaded.problems:
        if problem.line == 0 and problem.message == "no such file or directory":
            # a path, not a line of a file: said plainly, with what to check
            print(f"skipped {problem.path}: it does not exist (check the path)", file=sys.stderr)
            continue
        print(f"skipped: {problem}", file=sys.stderr)
    for folder in loaded.skipped:
        print(
            f"skipped: {folder} (committed reference records; name it to read it)", file=sys.stderr
        )


def not_records(paths: Sequence[str]) -> str | None:
    """Why a named path holds no records to read, or None: it does not exist, or it is a
    file that is no results file (records are JSON lines, `*.jsonl`).

    Checked before reading, so that a mistyped path is one line and exit 2 (a usage error,
    never exit 1, which `--fail` keeps for a regression), and `bench compare README.md`
    says so once and leaves no summary cache beside README.md."""
    for name in paths:
        path = Path(name)
        if not path.exists():
            return f"{name} does not exist (check the path)"
        if path.suffix == ".jsonl" or not path.is_file():
            continue
        try:
            with path.open("rb") as f:
                first = f.readline(4096).strip()
        except OSError:
            continue  # the load reports it
        if not first.startswith(b"{"):
            return (
                f"{name} is not a results file: records are JSON lines (*.jsonl), one per run; "
                "name a results folder (e.g. results/) or its runs.jsonl"
            )
    return None


def write_file(path: Path, text: str) -> int:
    """Write a report, its folder created; 0, or EXIT_BAD_INPUT saying why not."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        print(f"error: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {path}", file=sys.stderr)
    return 0


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*$")


def parse_precision(text: str) -> float:
    """'5%' or '0.05' -> 0.05; refused outside (0, 0.5)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise InputError(f"--decide-at takes a share such as 5% or 0.05, got {text!r}") from None
    if not 0 < value < 0.5:
        raise InputError(f"--decide-at must be between 0 and 50% (e.g. 5%), got {text!r}")
    return value


def parse_budget(text: str) -> float:
    """'20m', '90s', '1.5h' or plain seconds -> seconds."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"--budget takes a time such as 20m, 90s or 1h, got {text!r}")
    return float(m.group(1)) * {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
