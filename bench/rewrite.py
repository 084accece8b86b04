"""Rewrite stored records through the current code: scrubbed and migrated, numbers unchanged.

python -m bench.rewrite DIR_OR_FILE...

For each results file: every record line is brought to the current schema version
(bench/records.py MIGRATIONS), its launcher argv and recorded variables are cut
down to the environment allow-list (bench/env.py), and the file is replaced
whole; lines that do not parse are kept as they are. Every log folder under a
results directory is scrubbed as `bench run` now does after each cell. Used once
on results/reference/ when records stopped carrying the launcher's environment.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import env as benv
from bench import records


def rewrite_record(record: dict[str, Any]) -> dict[str, Any]:
    """One record, migrated and scrubbed; measured values are left exactly as they were."""
    record = records.migrate(record)
    if isinstance(record.get("launcher"), dict):
        record["launcher"] = benv.scrub_launcher(record["launcher"])
    env = record.get("env")
    if isinstance(env, dict) and isinstance(env.get("env_vars"), dict):
        env["env_vars"] = benv.allowed_env(env["env_vars"])
    return record


def rewrite_file(path: Path) -> int:
    """Rewrite one JSON Lines file in place (atomically); returns the records rewritten."""
    out, n = [], 0
    for raw in path.read_text().splitlines():
        try:
            rec = json.loads(raw)
            rec = rewrite_record(rec) if isinstance(rec, dict) else rec
        except (ValueError, KeyError, TypeError):
            out.append(raw)
            continue
        out.append(json.dumps(rec, sort_keys=True, allow_nan=False))
        n += 1
    tmp = path.with_name(path.name + ".rewrite")
    tmp.write_text("".join(line + "\n" for line in out))
    os.replace(tmp, path)
    return n


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m bench.rewrite DIR_OR_FILE...", file=sys.stderr)
        return 2
    for root in paths:
        files = sorted(root.rglob("*.jsonl")) if root.is_dir() else [root]
        for f in files:
            print(f"{f}: {rewrite_file(f)} records rewritten", file=sys.stderr)
        if root.is_dir():
            for runs in sorted(root.rglob("runs")):
                if runs.is_dir():
                    changed = benv.scrub_log_dir(runs, environ={})
                    print(f"{runs}: {len(changed)} log files scrubbed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
