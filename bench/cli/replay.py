"""A command's output replayed: `bench compare` run again over the same records, with the
same arguments and the same code, prints what it printed before, without reading the
records again or loading pandas (0.6-0.7 s a comparison of the committed reference on 2
cores, most of it importing pandas, against 0.16-0.19 s replayed).

An entry is keyed by everything the output is made from: the identity of every records
file the paths name (device, inode, size, modification and change times: appending a
record changes the size, and the change time is the kernel's, which neither `touch`
nor `cp -p` sets back; no file is read, so the key costs the same at 100,000 records),
what the paths hold besides (files passed over, reference folders skipped), the
arguments, the width the text is fitted to, the working folder (paths print as given),
each source file of the bench and models packages alike, and the interpreter and the
folders its libraries are installed in (an install or upgrade changes them).
tests/test_replay.py checks, with an audit hook, that every file a comparison opens is
one the key covers. Only a command that ended with status 0 is kept, and no output of
more than MOST_BYTES; the newest KEEP entries live in the user's cache
($XDG_CACHE_HOME/bench/replay/). A cache that cannot be read or written, or no home
folder at all, only means the tables are made afresh. What the key cannot see: a file
rewritten to the same size within one tick of the kernel's clock after a comparison,
and a file another machine appends to on a network filesystem whose attributes this
machine still has cached (NFS: up to a minute); `--no-replay` for those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import bench
import models
from bench import records
from bench.core.cachedir import user_cache

VERSION = 2  # of the entries' form and key
KEEP = 64  # entries kept, the most recently used
MOST_BYTES = 8 << 20  # a longer output (--sources over 100,000 runs) is not kept
STALE_PART_S = 3600  # a part older than this was left by a writer that died
# what the arguments do not change in the output
UNKEYED = ("command", "no_replay")


def folder() -> Path:
    return user_cache() / "replay"


def code_folders() -> list[Path]:
    """The packages whose source makes the output (compare reads the models' descriptions)."""
    return [Path(file).parent for file in (bench.__file__, models.__file__) if file]


def identity(path: Path) -> list[int]:
    """What changes when a file's content does: device, inode, size, modification and
    change times (the change time is set by the kernel on every write or utime)."""
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def source_identity(root: Path) -> list[Any]:
    """Every Python file under `root`, by its path and identity."""
    return [[str(p.relative_to(root)), *identity(p)] for p in sorted(root.rglob("*.py"))]


def key_material(
    command: str, args: Mapping[str, Any], paths: Sequence[str], width: int | None
) -> dict[str, Any]:
    """Everything the output of `command` with `args` over `paths` is made from.
    OSError where a file cannot be looked at (the command then says so itself)."""
    files, problems, skipped = records.files_under(paths)
    return {
        "version": VERSION,
        "command": command,
        "args": {k: v for k, v in sorted(args.items()) if k not in UNKEYED},
        "width": width,
        "cwd": os.getcwd(),
        "tz": os.environ.get("TZ"),
        "python": [sys.executable, sys.version],
        # where pandas, numpy and pyarrow live: an install or upgrade changes the folder
        "libraries": [[p, *identity(Path(p))] for p in sys.path if p and os.path.isdir(p)],
        "code": [source_identity(package) for package in code_folders()],
        "files": [[str(f), *identity(f)] for f in files],
        "problems": [str(p) for p in problems],
        "skipped": skipped,
    }


class _Tee:
    """A stream that writes through to `stream` and keeps what went by, in order."""

    def __init__(self, stream: TextIO, name: str, chunks: list[list[str]]) -> None:
        self.stream, self.name, self.chunks = stream, name, chunks

    def write(self, text: str) -> int:
        if self.chunks and self.chunks[-1][0] == self.name:
            self.chunks[-1][1] += text
        else:
            self.chunks.append([self.name, text])
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's
        return getattr(self.stream, name)


@dataclasses.dataclass
class Replay:
    """The kept output of one command over its inputs: `path`, named by the hash of its
    key (`key_material`), where it is or would be kept."""

    path: Path | None  # None: the inputs or the cache folder could not be looked at

    @classmethod
    def of(
        cls, command: str, args: Mapping[str, Any], paths: Sequence[str], width: int | None
    ) -> Replay:
        try:
            material = key_material(command, args, paths, width)
            where = folder()
        except (OSError, RuntimeError):  # RuntimeError: no home folder to keep it in
            return cls(None)
        text = json.dumps(material, sort_keys=True, default=str)
        return cls(where / f"{hashlib.sha256(text.encode()).hexdigest()}.json")

    def play(self) -> bool:
        """Print the kept output, stdout and stderr in the order they were written; False
        where none is kept (or it cannot be read)."""
        if self.path is None:
            return False
        try:
            entry = json.loads(self.path.read_text())
            chunks = [(str(name), str(text)) for name, text in entry["chunks"]]
            if entry.get("version") != VERSION or any(n not in ("out", "err") for n, _ in chunks):
                return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
        with contextlib.suppress(OSError):
            os.utime(self.path)  # recently used: the last to be pruned
        for name, text in chunks:
            (sys.stdout if name == "out" else sys.stderr).write(text)
        return True

    def record(self, make: Callable[[], int]) -> int:
        """Run `make` (the command), its output passing through to the terminal as it
        comes; keep that output when it ends with status 0."""
        chunks: list[list[str]] = []
        out, err = _Tee(sys.stdout, "out", chunks), _Tee(sys.stderr, "err", chunks)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = make()
        if status == 0 and self.path is not None:
            self._keep(chunks)
        return status

    def _keep(self, chunks: list[list[str]]) -> None:
        assert self.path is not None
        text = json.dumps({"version": VERSION, "chunks": chunks})
        if len(text) > MOST_BYTES:
            return
        part = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part.write_text(text)
            part.replace(self.path)  # whole or absent for a reader at the same time
            _prune(self.path.parent)
        except OSError:  # a full disk or a read-only home: the tables were printed anyway
            with contextlib.suppress(OSError):
                part.unlink()


def _prune(where: Path) -> None:
    """Keep the KEEP most recently used entries; remove parts a dead writer left."""
    entries = []
    for path in where.glob("*.json"):
        with contextlib.suppress(OSError):
            entries.append((path.stat().st_mtime_ns, path))
    for _, path in sorted(entries, reverse=True)[KEEP:]:
        with contextlib.suppress(OSError):
            path.unlink()
    for part in where.glob(".*.json.*"):
        with contextlib.suppress(OSError):
            if time.time() - part.stat().st_mtime > STALE_PART_S:
                part.unlink()
