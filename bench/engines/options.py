"""Engine-specific options (`--engine-option KEY=VALUE`): their kinds, checked framework-free.

Each engine declares its options in its registry entry; the adapters in
runners/adapters read their knobs from the same declarations, and `bench run`
checks a sweep's options before it launches anything, so a typo is refused up
front instead of failing every cell. What needs the framework itself (whether
this Horovod build has MPI, say) is still checked by the adapter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from bench.core.errors import SpecError


@dataclasses.dataclass(frozen=True)
class Option:
    """One declared option: its kind of value, its help, and for a choice its values."""

    kind: str  # "bool" (true|false), "number" (> 0), "path" (non-empty), "choice"
    help: str
    choices: tuple[str, ...] = ()


Declared = Mapping[str, Option]


def describe(known: Declared) -> str:
    """Declared options with their help, for error messages."""
    return ", ".join(f"{k} ({v.help})" for k, v in known.items()) or "none"


def check_declared(engine: str, known: Declared, options: Mapping[str, str]) -> None:
    """Refuse unknown option names and values of the wrong kind (SpecError names it)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise SpecError(
            f"unknown {engine} engine option(s): {', '.join(unknown)}; known: {describe(known)}"
        )
    for name, value in options.items():
        _check_value(name, known[name], value)


def _check_value(name: str, option: Option, value: str) -> None:
    if option.kind == "bool" and value.lower() not in ("true", "false"):
        raise SpecError(f"engine option {name} must be true or false, got {value!r}")
    if option.kind == "number":
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= 0:
            raise SpecError(f"engine option {name} must be a number > 0, got {value!r}")
    if option.kind == "path" and not value:
        raise SpecError(f"engine option {name} needs a path, got an empty value")
    if option.kind == "choice" and value not in option.choices:
        raise SpecError(
            f"engine option {name} must be one of {', '.join(option.choices)}, got {value!r}"
        )


def training(known: Declared, options: Mapping[str, str]) -> dict[str, str]:
    """The options that may change what a run computes: all but paths (where a file goes),
    so that compare tells runs apart by them alone."""
    return {k: v for k, v in options.items() if k not in known or known[k].kind != "path"}


def flag(options: Mapping[str, str], name: str) -> bool:
    """A bool option's value (absent: false)."""
    return options.get(name, "false").lower() == "true"


def parse(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """KEY=VALUE items as a mapping (a repeated key: the last wins)."""
    return dict(item.partition("=")[::2] for item in items)
