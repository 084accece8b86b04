#!/usr/bin/env python3
"""A fourth engine for tests: DDP's adapter under another name, registered from this file only.

It shows what adding an engine takes: an adapter class and one registry entry (here
both borrowed from DDP), plus this runner script. The test registers it in-process;
the launcher runs this file on every worker, which registers it there too.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

# Run as a script, this file's folder is first on sys.path; the repository root
# must be importable too.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench import engines
from bench.engines import Engine
from runners.adapters.ddp_engine import DDPAdapter

NAME = "twin"


class TwinAdapter(DDPAdapter):
    """DDP under the name `twin`: the registry, not the adapter, makes it an engine."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.engine = Engine(NAME)
        super().__init__(*args, **kwargs)


def register() -> Engine:
    """Register `twin`: DDP's entry with this script, adapter and name."""
    ddp = engines.get(Engine.DDP)
    return engines.register(
        dataclasses.replace(
            ddp,
            name=NAME,
            runner=Path(__file__).resolve(),
            adapter="tests.engine_double:TwinAdapter",
        )
    )


if __name__ == "__main__":
    engine = register()
    from runners.protocol.main import main

    sys.exit(main(engine))
