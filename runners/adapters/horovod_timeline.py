"""Horovod's timeline as the profiled steps' communication probe and as the traced steps'
second trace: Horovod's collectives run on its own C++ thread, which torch's profiler
does not see.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from bench.measure import timeline
from bench.records.types import Trace
from runners.adapters.base import CommProbe, union_seconds
from runners.adapters.torch_base import TorchTracer


class TimelineProbe(CommProbe):
    source = "Horovod timeline on rank 0: its ALLREDUCE activities (fusion copies included)"

    def __init__(self, hvd: Any, rank: int) -> None:
        self.hvd, self.rank = hvd, rank
        self.folder = tempfile.mkdtemp(prefix="bench-timeline-")
        self.path = os.path.join(self.folder, "timeline.json")
        hvd.start_timeline(self.path, mark_cycles=False)
        hvd.barrier()  # the background thread takes the start at its next cycle

    def stop(self) -> float | None:
        self.hvd.barrier()  # every profiled collective is done before the stop
        self.hvd.stop_timeline()  # flushes and closes the file (rank 0 writes it)
        try:
            return None if self.rank != 0 else union_seconds(timeline.spans(self.path))
        except (OSError, ValueError):
            return None
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


# Horovod's timeline as the record names it (bench/records/types.py Trace)
HOROVOD_TIMELINE = "horovod timeline"


class HorovodTracer(TorchTracer):
    """torch.profiler's trace and, where the dynamic timeline is armed (comm_timeline=true),
    Horovod's timeline of the same steps: Horovod's collectives run on its own C++ thread,
    which torch's profiler does not see. The timeline starts and stops on every rank, as
    the communication probe's does, and rank 0 writes it."""

    def __init__(
        self, path: str | None, cuda: bool, hvd: Any, rank: int, timeline_path: str | None
    ) -> None:
        super().__init__(path, cuda)
        self.hvd, self.rank, self.timeline_path = hvd, rank, timeline_path

    def start(self) -> None:
        if self.timeline_path is not None:  # the collective part first, on every rank
            self.hvd.start_timeline(self.timeline_path, mark_cycles=False)
            self.hvd.barrier()  # the background thread takes the start at its next cycle
        super().start()

    def stop(self) -> list[Trace]:
        if self.timeline_path is None:
            return super().stop()
        self.hvd.barrier()  # every traced collective is done before the stop
        self.hvd.stop_timeline()  # flushes and closes the file
        kept: list[Trace] = []
        if self.rank == 0:
            kept = [
                {
                    "path": self.timeline_path,
                    "format": "chrome-json-array",
                    "tool": HOROVOD_TIMELINE,
                    "ranks": [0],
                }
            ]
        return super().stop() + kept
