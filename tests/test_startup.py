"""Start-up time: the phases from the launcher's start to the first timed step."""

from __future__ import annotations

import pytest

from bench import records
from bench.render import formats
from runners.protocol import startup
from tests.shared_sweep import SharedSweep

# in the order a runner passes them: the data is checked before the framework's import
MARKS = {"process": 101.0, "started": 101.5, "data": 101.75, "imported": 103.75,
         "group": 104.0, "recorded": 104.25, "built": 105.0, "first_timed": 106.0}  # fmt: skip


def test_phases_are_the_gaps_between_marks_worked_by_hand() -> None:
    # interpreter and imports: Python and the runner (0.5 s), then the framework (2.0 s)
    got = startup.phases(MARKS, launched_at=100.0)
    assert got == {"launcher": 1.0, "interpreter and imports": 2.5, "data": 0.25,
                   "process group": 0.25, "harness set-up": 0.25,
                   "build and broadcast": 0.75, "warm-up steps": 1.0}  # fmt: skip
    # started by hand: counted from the process's own start, no launcher phase
    alone = startup.phases(MARKS, launched_at=None)
    assert alone is not None and "launcher" not in alone and sum(alone.values()) == 5.0
    # a rank that never reached its first timed step gives no start-up at all
    assert startup.phases({k: v for k, v in MARKS.items() if k != "first_timed"}, 100.0) is None
    late = {**MARKS, "first_timed": 108.0}
    out = startup.fields([MARKS, late], {"launched_at": 100.0})["startup"]
    assert out["rank"] == 1 and out["total_s"] == 8.0 and out["per_rank_total_s"] == [6.0, 8.0]
    assert startup.fields([MARKS, {}], {"launched_at": 100.0}) == {}


@pytest.mark.distributed
def test_a_run_records_its_start_up_and_energy_and_compare_shows_them(
    shared_sweep: SharedSweep,
) -> None:
    # ddp at 2 workers from the session's sweep, which ran with a fake RAPL package (a
    # static counter) in its environment: the record must name it, counted once
    rec = shared_sweep.run("ddp", 2)
    s = rec["startup"]
    assert s["from"] == "launch" and set(s["phases_s"]) == {p for p, _ in startup.PHASES}
    assert all(v >= 0 for v in s["phases_s"].values())
    assert sum(s["phases_s"].values()) == pytest.approx(s["total_s"])
    assert len(s["per_rank_total_s"]) == 2 and s["total_s"] == max(s["per_rank_total_s"])
    # the sweep's own clock agrees: the first timed step came before the record was written
    assert s["total_s"] < rec["launch_to_stop_s"]
    text = formats.render(records.load([shared_sweep.results]), "text", 0.95, show={"start-up"})
    assert text and "start-up:" in text and "interpreter and imports" in text
    e = rec["energy"]
    package = shared_sweep.rapl_package
    assert e["joules"] == 0.0 and e["sources"] == [f"{rec['hosts'][0]}:rapl:{package}"]
    assert e["seconds"] > 0 and e["watts"] == 0.0
