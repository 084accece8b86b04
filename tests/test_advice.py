"""The verdict's advice never asks for more than the machine has.

Over a grid of layouts (1-8 workers per node, 1-4 threads per worker, 2-16 CPUs, each
registered engine with its communication threads) and every verdict, no suggestion
adds threads or workers where they would not fit, and every suggestion that names a
thread count or a worker count names the one its change leads to.
"""

from __future__ import annotations

import itertools
import re

import pytest

from bench import engines
from bench.tables import advice, derived


@pytest.mark.parametrize("engine", [e.value for e in engines.Engine])
def test_no_advice_oversubscribes_any_layout(engine: str) -> None:
    checked = 0
    grid = itertools.product(range(1, 9), range(1, 5), range(2, 17), advice.RULES)
    for workers, threads, cpus, cause in grid:
        layout = derived.Layout(workers, cpus, threads, derived.comm_threads(engine, workers))
        for a in advice.advise(cause, layout, engine, tuned="bucket_mb=5"):
            after = layout.changed(a.workers, a.threads)
            where = f"{cause} on {layout.text()}: {a.text()}"
            assert after.workers >= 1 and after.threads >= 1, where
            if a.workers > 0 or a.threads > 0:
                assert after.fits(), where
            named = re.search(r"--threads (\d+)", a.what)
            if named:
                assert int(named.group(1)) == after.threads, where
            per_node = re.search(r"(\d+) per node instead of (\d+)", a.what)
            if per_node:
                assert (int(per_node.group(1)), int(per_node.group(2))) == (
                    after.workers,
                    layout.workers,
                ), where
            checked += 1
    assert checked > 8 * 4 * 15  # every layout got advice for some cause


def test_a_full_machine_gets_fewer_workers_and_a_spare_one_more_threads() -> None:
    full = derived.Layout(2, 2, 1, derived.comm_threads("ddp", 2))  # 2 x (1 + 1) on 2 CPUs
    assert not full.fits()
    tips = advice.advise("compute-bound", full, "ddp")
    assert all(a.threads <= 0 and a.workers <= 0 for a in tips)
    assert advice.advise("comm-CPU-bound", full, "ddp")[0].workers == -1
    spare = derived.Layout(1, 8, 1, derived.comm_threads("ddp", 1))
    assert advice.advise("compute-bound", spare, "ddp")[0].what == "--threads 2"
    # an engine's own knobs only where communication is the cause, with tune's result
    comm = advice.advise("communication-bound", full, "horovod", tuned="bucket_mb=100 at 1.10")
    assert "fusion threshold" in comm[0].what and "bench tune measured" in comm[0].expect
    others = [c for c in advice.RULES if c != "communication-bound"]
    assert not any("fusion" in a.what for c in others for a in advice.advise(c, full, "horovod"))
