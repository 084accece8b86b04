"""What the reports offer, by name, without loading what makes them (pandas): the formats
and their file suffixes, `--show`'s sections, and the width text is fitted to.
`bench compare` parses its arguments and keys a replayed output (bench/cli/replay.py)
with these before it decides whether to make any table."""

from __future__ import annotations

import shutil

FORMATS = ("text", "markdown", "csv", "json", "html")
# where --format html writes without --out: a page is not for the terminal
HTML_DIR = "report"
SUFFIX = {"text": "txt", "markdown": "md", "csv": "csv", "json": "json", "html": "html"}

# `--show` names, and the section (or part of a comparison) each prints
SECTIONS = {
    "throughput": "throughput",
    "per-rank": "per rank",
    "accuracy": "accuracy",
    "head-to-head": "head to head",
    "decided": "decided",
    "noise": "noise",
    "error-rates": "error rates",
    "start-up": "start-up",
    "steps": "where the step goes (ms)",
    "verdict": "verdict",
    "knobs": "knobs",
    "notes": "notes",
}

DEFAULT_WIDTH = 100  # when the output is no terminal (a pipe, a file)
NARROWEST = 40


def width(wide: bool = False) -> int | None:
    """The width to fit: None with --wide; else COLUMNS, the terminal's, or 100."""
    if wide:
        return None
    return max(NARROWEST, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)
