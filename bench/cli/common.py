"""What every subcommand shares: exit statuses, list arguments, signals, skipped lines."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.core.errors import Interrupted
from bench.records import Loaded

EXIT_BAD_INPUT = 2
# bench.analysis.frame's DEFAULT_TARGET, repeated so that parsing needs no pandas
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
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {kind.__name__}, got {text!r}"
            ) from None

    return parse


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
        print(f"skipped: {problem}", file=sys.stderr)
    for folder in loaded.skipped:
        print(
            f"skipped: {folder} (committed reference records; name it to read it)", file=sys.stderr
        )


def write_file(path: Path, text: str, figures: Sequence[bytes] = ()) -> int:
    """Write a report (and its figures beside it); 0, or EXIT_BAD_INPUT saying why not."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for i, png in enumerate(figures, start=1):
            (path.parent / f"figure-{i}.png").write_bytes(png)
    except OSError as exc:
        print(f"error: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {path}", file=sys.stderr)
    return 0
