"""What a record holds twice or spells out each time, written once: `store.encode`
writes these shorter forms, `store.parse_line` reads them back whole before the record
is checked, so every reader sees the record as its writer made it. A value that would
not come back exactly is written as it is.

- `launcher`: the runner's command (`runner_argv`: the interpreter, the script, its
  arguments) and the command of the process that started it (`parent_argv`), which
  ends with the same arguments: as words (torchrun, Paddle's launch), or quoted at the
  end of the `sh -c` line horovodrun starts a worker with. The parent's command is
  written without them, `then_runner_args` ("words" or "quoted") saying how they
  follow. Written out twice they were a tenth of a record.
- `epochs`: one entry a training epoch, each with the same names; written as one list
  a name (`{"epoch": [0, 1, ...], "test_loss": [...], ...}`), the names once, not once
  an epoch (a default-sweep record's ten epochs: about 1 KB fewer).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

THEN = "then_runner_args"
WORDS, QUOTED = "words", "quoted"


def compact(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` in its written form (`record` itself is left as it is)."""
    out = dict(record)
    if isinstance(out.get("launcher"), Mapping):
        out["launcher"] = _checked(compact_launcher, expand_launcher, out["launcher"])
    if isinstance(out.get("epochs"), list):
        out["epochs"] = _checked(compact_epochs, expand_epochs, out["epochs"])
    return out


def expand(record: dict[str, Any]) -> dict[str, Any]:
    """A written record with what `compact` shortened whole again, in place; anything
    that does not read as `compact` writes it is left for the record's check to name."""
    if isinstance(record.get("launcher"), dict):
        record["launcher"] = expand_launcher(record["launcher"])
    if isinstance(record.get("epochs"), dict):
        record["epochs"] = expand_epochs(record["epochs"])
    return record


def _checked(shorten: Any, whole: Any, value: Any) -> Any:
    short = shorten(value)
    return short if short is value or whole(short) == value else value


def _runner_args(launcher: Mapping[str, Any]) -> list[str] | None:
    runner = launcher.get("runner_argv")
    if not isinstance(runner, list) or not all(isinstance(w, str) for w in runner):
        return None
    return runner[2:] or None  # past the interpreter and the script


def compact_launcher(launcher: Mapping[str, Any]) -> Mapping[str, Any]:
    args, parent = _runner_args(launcher), launcher.get("parent_argv")
    if args is None or not isinstance(parent, list) or THEN in launcher:
        return launcher
    n, quoted = len(args), " " + shlex.join(args)
    if len(parent) > n and parent[-n:] == args:
        return {**launcher, "parent_argv": parent[:-n], THEN: WORDS}
    if parent and isinstance(parent[-1], str) and parent[-1].endswith(quoted):
        line = parent[-1][: -len(quoted)]
        return {**launcher, "parent_argv": [*parent[:-1], line], THEN: QUOTED}
    return launcher


def expand_launcher(launcher: Mapping[str, Any]) -> Mapping[str, Any]:
    how, args, parent = launcher.get(THEN), _runner_args(launcher), launcher.get("parent_argv")
    if how not in (WORDS, QUOTED) or args is None or not isinstance(parent, list):
        return launcher
    out = {k: v for k, v in launcher.items() if k != THEN}
    if how == WORDS:
        out["parent_argv"] = [*parent, *args]
    elif parent and isinstance(parent[-1], str):
        out["parent_argv"] = [*parent[:-1], parent[-1] + " " + shlex.join(args)]
    else:
        return launcher
    return out


def compact_epochs(epochs: list[Any]) -> Any:
    if not epochs or not all(isinstance(e, dict) for e in epochs):
        return epochs
    names = list(epochs[0])
    if any(e.keys() != epochs[0].keys() for e in epochs):
        return epochs  # entries of differing names stay entries
    return {name: [e[name] for e in epochs] for name in names}


def expand_epochs(columns: Mapping[str, Any]) -> Any:
    lists = list(columns.values())
    if not lists or not all(isinstance(v, list) for v in lists):
        return columns
    n = len(lists[0])
    if any(len(v) != n for v in lists):
        return columns
    return [{name: values[i] for name, values in columns.items()} for i in range(n)]
