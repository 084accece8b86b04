"""Busy neighbours slow every rank alike: CPU-contended, not a straggler.

Two processes spinning beside the run (`python -c 'while True: pass'` x2, each in a
session of its own: tests/conftest.py `busy_neighbours`), made outside the suite as an
operator meets them. Whatever else the machine runs meanwhile only adds
to the contention, so unlike tests/test_stragglers.py's conditions this one needs no
quiet machine.

Its runs take 150 steps, not the other conditions' 30: what others used is read from the
kernel's CPU counters over the timed steps, in ticks of 10 ms a process, and Horovod's
spinning threads leave two neighbours under half a core between them; over 30 steps
(a tenth of a second) those ticks decide whether 0.3 cores reads as 0.1. The verdict is
read before any part of the time lost is named, so no compute-only twins
(`--no-comm-cost`): a third fewer launches, each beside two spinning processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import busy_neighbours
from tests.test_stragglers import ENGINES, sweep, verdicts

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One run a cell, two processes spinning beside every one of them."""
    results = tmp_path_factory.mktemp("busy") / "res"
    with busy_neighbours():
        sweep(results, "--workers", "1,2", "--repeats", "1", "--max-steps", "150", "--no-comm-cost")
    yield results


@pytest.mark.parametrize("engine", ENGINES)
def test_busy_neighbours_slow_every_rank_alike(busy: Path, engine: str) -> None:
    row = verdicts(busy).loc[engine]
    assert row["verdict"] == "CPU-contended", row["evidence"]
    assert row["evidence"].startswith("other processes used"), row["evidence"]
