"""The counted half of the regression gate (scripts/perfcount.py, scripts/perfcount_work.py):
callgrind's profiles read, the per-function diff, the threshold, and the workload itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

if str(ROOT / "scripts") not in sys.path:  # the gate is a developer tool, not in the package
    sys.path.append(str(ROOT / "scripts"))
import perfcount
import perfcount_work

# A profile in callgrind's format as callgrind writes it with --dump-line=no: names
# compressed ("(1) name" once, "(1)" after), relative positions, two events, a call
# whose inclusive cost line must not count as the caller's own, an inlined file, a
# recursion level ('2), and a function of another object named by its id alone.
PROFILE = textwrap.dedent("""\
    # callgrind format
    version: 1
    creator: callgrind-3.19.0
    cmd:  python work.py
    part: 2

    desc: Trigger: --dump-after=_PyEval_CallTracing

    positions: line
    events: Dr Ir
    summary: 6 1100

    ob=(1) /usr/lib/libpython3.11.so.1.0
    fl=(1) Python/ceval.c
    fn=(1) _PyEval_EvalFrameDefault
    10 5 500
    +2 1 100
    cob=(2) /usr/lib/x86_64-linux-gnu/libc.so.6
    cfi=(2) malloc/malloc.c
    cfn=(2) malloc
    calls=3 0
    12 3 300
    fi=(3) Include/internal/pycore_frame.h
    -1 0 50
    fe=(1)
    fn=(3) _PyEval_EvalFrameDefault'2
    3 0 150

    ob=(2)
    fl=(2)
    fn=(2)
    0 2 300
    """)


def test_a_profile_is_read_with_each_functions_own_instructions() -> None:
    p = perfcount.parse(PROFILE)
    assert p.total == 1100  # the summary's Ir, not its first event
    assert p.functions == {
        "_PyEval_EvalFrameDefault [libpython3.11.so.1.0]": 500 + 100 + 50 + 150,
        "malloc [libc.so.6]": 300,  # once: its own line, not again as the call's cost
    }
    assert sum(p.functions.values()) == p.total


def test_a_profile_without_totals_sums_its_functions_and_bad_ones_are_refused() -> None:
    body = PROFILE.replace("summary: 6 1100\n", "")
    assert perfcount.parse(body).total == 1100
    with pytest.raises(perfcount.ParseError, match="Ir"):
        perfcount.parse(PROFILE.replace("events: Dr Ir", "events: Dr Dw"))
    with pytest.raises(perfcount.ParseError, match=r"\(9\)"):
        perfcount.parse(PROFILE.replace("fn=(3) _PyEval_EvalFrameDefault'2", "fn=(9)"))


def _profile(total: int, **functions: int) -> perfcount.Profile:
    return perfcount.Profile(total, functions)


def test_the_threshold_decides_and_nothing_is_undecided() -> None:
    base = {"a": _profile(1_000_000), "b": _profile(1_000_000), "c": _profile(1_000_000)}
    new = {"a": _profile(1_021_000), "b": _profile(1_019_000), "c": _profile(970_000)}
    a, b, c = perfcount.changes(base, new, threshold=0.02)
    assert (a.outcome, b.outcome, c.outcome) == (perfcount.REGRESSED, perfcount.OK, perfcount.FEWER)
    assert a.regressed and not b.regressed and not c.regressed
    assert a.verdict().startswith("REGRESSED (+2.10%") and b.verdict().startswith("ok (+1.90%")
    # only what both sides counted is compared
    assert [x.name for x in perfcount.changes(base, {"a": new["a"], "d": new["a"]})] == ["a"]


def test_a_regression_names_the_functions_that_grew_most() -> None:
    base = _profile(1000, eval=600, lookup=300, free=100)
    new = _profile(1100, eval=640, lookup=290, free=100, hash=70)
    assert perfcount.grew(base, new) == [("hash", 0, 70), ("eval", 600, 640)]
    assert perfcount.grew(base, new, top=1) == [("hash", 0, 70)]
    (change,) = perfcount.changes({"x": base}, {"x": new}, threshold=0.05)
    assert change.regressed and change.grew == (("hash", 0, 70), ("eval", 600, 640))
    table = perfcount.render([change])
    assert "REGRESSED (+10.00%" in table and "grew most" in table
    assert "+70  hash  (0 -> 70)" in table and "+40  eval  (600 -> 640)" in table
    (same,) = perfcount.changes({"x": base}, {"x": base})
    assert same.grew == () and "grew" not in perfcount.render([same])


def test_injected_work_is_sized_on_the_paths_own_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """BENCH_PERF_EXTRA_WORK=0.05: 5% of the path's calibrated count in all, as busy-loop
    iterations after the path (a unit of one) or inside each of its units (steps), what
    each unit's call costs besides its iterations taken off."""
    steps = perfcount_work.Benchmark("steps", lambda: None, units=40)

    class Counted(perfcount_work.Regions):
        def count(self, label: str, fn: object) -> int:
            self.labels.append(label)
            if label.startswith("pad"):  # 40 units: 600 each besides 120 an iteration
                return round(40 * (600 + 120 * steps.pad))
            return 4_800_000

    monkeypatch.setenv(perfcount_work.EXTRA, "0.05")
    monkeypatch.setenv(f"{perfcount_work.EXTRA}_IN", "steps")
    assert perfcount_work.extra_work(["load", "steps"]) == {"steps": 0.05}
    regions = Counted("dumps")
    perfcount_work.measure(steps, regions, 0.05)
    # 5% of 4.8 M is 240,000 instructions, 6,000 a step: 600 for the call, then 45 of 120
    assert steps.pad == pytest.approx(45)
    assert regions.labels == [
        "steps:calibration",
        "pad0:calibration",
        "pad2500:calibration",
        "steps",
    ]
    # a share that is no whole number of iterations is carried from step to step, and
    # run once CHUNK iterations are owed
    done: list[int] = []
    monkeypatch.setattr(perfcount_work, "busy", done.append)
    steps.pad, steps.owed = 25.5, 0.0
    for _ in range(6):
        steps.pad_unit()
    assert done == [76, 77]
    monkeypatch.setenv(f"{perfcount_work.EXTRA}_IN", "nothing")
    with pytest.raises(ValueError, match="nothing"):
        perfcount_work.extra_work(["load", "steps"])


def test_the_counted_benchmarks_run_on_this_tree(tmp_path: Path) -> None:
    """The workload natively, once each: the public entry points it drives still exist
    and work here (the gate would otherwise fail only when it counts)."""
    manifest = tmp_path / "manifest.json"
    assert perfcount_work.main([str(ROOT), "--manifest", str(manifest)]) == 0
    got = json.loads(manifest.read_text())
    assert got["regions"] == ["load_records", "bench_compare", "runner_steps"]
    assert Path(got["bench"]).is_relative_to(ROOT)


def _regions(out: Path, regions_only: bool) -> tuple[perfcount.Profile, perfcount.Profile]:
    """Two regions of n and 2n loop iterations counted in a process of their own; with
    `regions_only`, callgrind instruments nothing until the process asks around each."""
    ask = "perfcount.ClientRequest()" if regions_only else "lambda code: None"
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'scripts')!r})\n"
        "import perfcount\n"
        "from perfcount_work import busy\n"
        f"ask = {ask}\n"
        "busy(10)\n"
        "for n in (20000, 40000):\n"
        "    ask(perfcount.START_INSTRUMENTATION)\n"
        "    sys.call_tracing(busy, (n,))\n"
        "    ask(perfcount.STOP_INSTRUMENTATION)\n"
    )
    out.mkdir()
    argv = [*perfcount.valgrind(out, regions_only), sys.executable, "-c", code]
    subprocess.run(argv, check=True, env=perfcount.COUNT_ENV, timeout=300)
    one, two = (perfcount.read(out / f"{perfcount.DUMPS}.{i}") for i in (1, 2))
    return one, two


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_region_is_counted_alone_and_the_same_every_run(tmp_path: Path) -> None:
    """Under the gate's callgrind, each sys.call_tracing region is a dump of its own with
    only its work in it: 2n loop iterations count twice n, the interpreter's start is in
    no region, and a second process counts the same. So does one where callgrind
    instruments the regions only (what the gate does on x86-64: the imports then run
    several times faster)."""
    totals = []
    for run in ("a", "b"):
        one, two = _regions(tmp_path / run, regions_only=False)
        assert two.total == pytest.approx(2 * one.total, rel=0.01)
        assert one.total < 30_000_000  # starting and importing this took 216 M here
        assert any(n.startswith("_PyEval_EvalFrameDefault ") for n in one.functions)
        totals.append((one.total, two.total))
    assert totals[0] == pytest.approx(totals[1], rel=0.001)
    if not perfcount.instrument_regions():
        pytest.skip("no client requests from Python on this machine (not x86-64, or W^X)")
    one, two = _regions(tmp_path / "instrumented", regions_only=True)
    assert (one.total, two.total) == pytest.approx(totals[0], rel=0.001)
