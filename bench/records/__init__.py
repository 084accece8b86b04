"""Run records: their type, the check read off it, migrations, the store and its summaries.

One JSON object per run, appended to JSON Lines files under `results/`. Readers
get `LoadedRecord`s (bench/records/types.py), checked against that same type;
a bad line is reported with its file and line, never lost with the good ones.

The summaries that reports read (`bench.records.summaries`, cached through pandas and
pyarrow) are imported from their module, not from here: a runner writes records and
never reads them, and every worker of every launch imports this package.
"""

from bench.core.errors import RecordsError
from bench.records.migrations import MIGRATIONS, migrate
from bench.records.store import (
    COLLECTIVES_FILE,
    DEFAULT_FILE,
    REFERENCE_DIR,
    Follower,
    Loaded,
    Problem,
    append,
    check_writable,
    encode,
    files_under,
    finite,
    load,
    new_record,
    parse_line,
    protocol_version,
    results_file,
    timestamp,
    typed_labels,
)
from bench.records.types import SCHEMA_VERSION, Kind, LoadedRecord, RunRecord, Status

__all__ = [
    "COLLECTIVES_FILE",
    "DEFAULT_FILE",
    "MIGRATIONS",
    "REFERENCE_DIR",
    "SCHEMA_VERSION",
    "Follower",
    "Kind",
    "Loaded",
    "LoadedRecord",
    "Problem",
    "RecordsError",
    "RunRecord",
    "Status",
    "append",
    "check_writable",
    "encode",
    "files_under",
    "finite",
    "load",
    "migrate",
    "new_record",
    "parse_line",
    "protocol_version",
    "results_file",
    "timestamp",
    "typed_labels",
]
