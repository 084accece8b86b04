#!/usr/bin/env python3
"""Rewrite results files in the current stored form: each record migrated, then written as
`bench run` writes one today (series packed at their measured resolution; docs/records.md).

    .venv/bin/python scripts/rewrite_records.py results/reference/cpu-2core-digits/runs.jsonl ...

Run once per schema change for the committed reference records (never for
results/reference/cpu-2core-digits-protocol1/, which tests/test_migration.py reads in
its old form). Every line must load: a damaged line stops the rewrite before anything
is written. The file is replaced atomically; the records' order is kept.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench import records


def rewrite(path: Path) -> tuple[int, int]:
    """Rewrite one file in place; (bytes before, bytes after)."""
    lines = [raw for raw in path.read_bytes().splitlines() if raw.strip()]
    out = []
    for number, raw in enumerate(lines, start=1):
        parsed = records.parse_line(path, number, raw)
        if isinstance(parsed, records.Problem):
            sys.exit(f"{parsed}: not rewritten")
        out.append(records.encode({k: v for k, v in parsed.items() if k != "_source"}))
    tmp = path.with_name(f".{path.name}.rewrite.tmp")
    tmp.write_bytes(b"".join(out))
    os.replace(tmp, path)
    return sum(len(raw) + 1 for raw in lines), path.stat().st_size


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        before, after = rewrite(Path(name))
        print(f"{name}: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
