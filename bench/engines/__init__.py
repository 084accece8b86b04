"""The engines: the registry and the three built-in entries (importing this registers them).

A fourth engine is one adapter (runners/adapters/), one entry script (runners/)
and one `register(EngineEntry(...))`, here or in any module imported first.
"""

from bench.engines import ddp, horovod, paddle
from bench.engines.registry import (
    Announced,
    Engine,
    EngineEntry,
    LaunchRequest,
    SlurmRequest,
    Where,
    announced_world,
    build_launch,
    cannot_start,
    check_engine,
    check_options,
    describe_options,
    frameworks,
    get,
    local_argv,
    names,
    recognise_launcher,
    register,
    slurm_launch,
    trace_flags,
    unknown,
    unregister,
    variant_options,
)

# The built-in engines, in the order every list of engines follows (the default sweep,
# help texts, tables).
Engine.HOROVOD = register(horovod.ENTRY)
Engine.DDP = register(ddp.ENTRY)
Engine.PADDLE = register(paddle.ENTRY)

__all__ = [
    "Announced",
    "Engine",
    "EngineEntry",
    "LaunchRequest",
    "SlurmRequest",
    "Where",
    "announced_world",
    "build_launch",
    "cannot_start",
    "check_engine",
    "check_options",
    "describe_options",
    "frameworks",
    "get",
    "local_argv",
    "names",
    "recognise_launcher",
    "register",
    "slurm_launch",
    "trace_flags",
    "unknown",
    "unregister",
    "variant_options",
]
