"""Engine-specific options (`--engine-option KEY=VALUE`), declared once and framework-free.

The adapters in runners/engines read their knobs from here, and `bench run` checks
a sweep's options with the same `check` before it launches anything, so a typo is
refused up front instead of failing every cell. What needs the framework itself
(e.g. whether this Horovod build has MPI for Adasum) is still checked by the adapter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from bench.spec import Engine, SpecError

# name -> (kind of value, help); kinds: "bool" (true|false), "number", "path".
OPTIONS: dict[Engine, dict[str, tuple[str, str]]] = {
    Engine.HOROVOD: {
        "timeline": ("path", "PATH: write Horovod's timeline there and summarise it in the record"),
        "autotune": ("bool", "true|false: Horovod autotuning of fusion threshold and cycle time"),
        "adasum": ("bool", "true|false: Adasum gradient reduction instead of averaging"),
        "cycle_time_ms": ("number", "MS: Horovod's cycle time"),
    },
    Engine.DDP: {},
    Engine.PADDLE: {},
}


def describe(engine: Engine) -> str:
    """The known options of `engine` with their help, for error messages."""
    known = OPTIONS[engine]
    return ", ".join(f"{k} ({v[1]})" for k, v in known.items()) or "none"


def check(engine: Engine, options: Mapping[str, str]) -> None:
    """Refuse unknown option names and values of the wrong kind (SpecError names it)."""
    known = OPTIONS[engine]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise SpecError(
            f"unknown {engine.value} engine option(s): {', '.join(unknown)}; "
            f"known: {describe(engine)}"
        )
    for name, value in options.items():
        kind = known[name][0]
        if kind == "bool" and value.lower() not in ("true", "false"):
            raise SpecError(f"engine option {name} must be true or false, got {value!r}")
        if kind == "number":
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number) or number <= 0:
                raise SpecError(f"engine option {name} must be a number > 0, got {value!r}")
        if kind == "path" and not value:
            raise SpecError(f"engine option {name} needs a path, got an empty value")
