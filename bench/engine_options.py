"""Engine-specific options (`--engine-option KEY=VALUE`): their kinds, checked framework-free.

Each engine declares its options in its registry entry (bench/engines.py); the
adapters in runners/engines read their knobs from the same declarations, and `bench
run` checks a sweep's options with `bench.engines.check_options` before it launches
anything, so a typo is refused up front instead of failing every cell. What needs
the framework itself (e.g. whether this Horovod build has MPI for Adasum) is still
checked by the adapter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from bench.spec import SpecError

# An engine's options: name -> (kind of value, help); kinds: "bool" (true|false),
# "number", "path", "choice" (one of CHOICES[name]).
Declared = Mapping[str, tuple[str, str]]

HOROVOD: Declared = {
    "controller": (
        "choice",
        "gloo|mpi: horovodrun --gloo or --mpi (mpi needs Horovod built with MPI); "
        "default gloo, mpi with adasum=true",
    ),
    "timeline": ("path", "PATH: write Horovod's timeline there and summarise it in the record"),
    "autotune": ("bool", "true|false: Horovod autotuning of fusion threshold and cycle time"),
    "adasum": (
        "bool",
        "true|false: Adasum gradient reduction instead of averaging (over MPI)",
    ),
    "cycle_time_ms": ("number", "MS: Horovod's cycle time"),
}
CHOICES: dict[str, tuple[str, ...]] = {"controller": ("gloo", "mpi")}


def describe(known: Declared) -> str:
    """Declared options with their help, for error messages."""
    return ", ".join(f"{k} ({v[1]})" for k, v in known.items()) or "none"


def check_declared(engine: str, known: Declared, options: Mapping[str, str]) -> None:
    """Refuse unknown option names and values of the wrong kind (SpecError names it)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise SpecError(
            f"unknown {engine} engine option(s): {', '.join(unknown)}; known: {describe(known)}"
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
        if kind == "choice" and value not in CHOICES[name]:
            raise SpecError(
                f"engine option {name} must be one of {', '.join(CHOICES[name])}, got {value!r}"
            )


def horovod_controller(options: Mapping[str, str]) -> str:
    """The controller a Horovod run starts with: `controller`, else mpi for Adasum, else gloo.

    Horovod's CPU Adasum reduces over MPI only (under the Gloo controller it has no
    Adasum operation), so adasum=true implies the MPI controller and refuses gloo.
    """
    adasum = options.get("adasum", "false").lower() == "true"
    controller = options.get("controller", "mpi" if adasum else "gloo")
    if adasum and controller != "mpi":
        raise SpecError(
            "engine option adasum=true needs controller=mpi (Horovod's Adasum reduces over "
            f"MPI), got controller={controller}; drop controller or set it to mpi"
        )
    return controller
