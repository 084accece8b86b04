"""Start-up time: from the launcher's start to the first timed step, in phases.

Users at scale lose minutes before the first step; which part is the engine's is
what a comparison must show. Each rank marks wall-clock instants (time.time(), one
clock for every process on a host; across hosts as good as their clock sync) as it
passes the boundaries (bench/measure/startup.py); the process's own start comes from the OS. At the end
every rank's marks are gathered and the record keeps the phases of the rank that
reached its first timed step last (the run starts when all of them have).
"""

from __future__ import annotations

import time

import psutil

from bench.measure.startup import PHASES, fields, phases

__all__ = ["CLOCK", "PHASES", "Clock", "fields", "phases"]


class Clock:
    """This rank's marks; the first call of each name counts."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.time())

    def snapshot(self) -> dict[str, float]:
        return {"process": psutil.Process().create_time(), **self.marks}


CLOCK = Clock()
