"""scripts/test_durations.py: seconds per test file from pytest's JUnit XML."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import file_order
from tests.conftest import ROOT

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4" time="9.9">
<testcase classname="tests.test_a" name="test_one" time="1.5" />
<testcase classname="tests.test_a" name="test_two[x]" time="2.5" />
<testcase classname="tests.test_b.TestGroup" name="test_three" time="0.25" />
<testcase classname="tests.benchmarks.test_perf" name="test_four" time="0.75" />
</testsuite></testsuites>
"""


def _script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script as a module (scripts/ is no package); registered while the test runs,
    as its dataclass needs."""
    spec = importlib.util.spec_from_file_location(
        "test_durations", ROOT / "scripts" / "test_durations.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_seconds_are_summed_per_file_and_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(monkeypatch)
    before = tmp_path / "before.xml"
    before.write_text(REPORT)
    times = script.per_file(before)
    assert {k: (v.seconds, v.tests) for k, v in times.items()} == {
        "tests/test_a.py": (4.0, 2),
        "tests/test_b.py": (0.25, 1),  # the class dropped
        "tests/benchmarks/test_perf.py": (0.75, 1),
    }
    assert script.main([str(before)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2] == "| tests/test_a.py | 2 | 4.0 | 80.0% |"  # slowest first
    assert rows[-1] == "| **total** | 4 | 5.0 | 100% |"
    after = tmp_path / "after.xml"
    after.write_text(
        REPORT.replace('time="2.5"', 'time="0.5"').replace("tests.test_b.", "tests.test_c.")
    )
    assert script.main([str(before), str(after)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2] == "| tests/test_a.py | 4.0 | 2.0 | -2.0 | 2 | 2 |"  # the largest saving first
    assert "| tests/test_b.py | 0.2 | - | -0.2 | 1 | - |" in rows
    assert "| tests/test_c.py | - | 0.2 | +0.2 | - | 1 |" in rows
    assert rows[-1] == "| **total** | 5.0 | 3.0 | -2.0 | 4 | 4 |"
    assert script.main([str(tmp_path / "absent.xml")]) == 2


def test_write_makes_the_table_the_files_are_ordered_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(monkeypatch)
    report, table = tmp_path / "run.xml", tmp_path / "file_seconds.tsv"
    report.write_text(REPORT)
    assert script.main(["--write", str(table), str(report)]) == 0
    assert file_order.load_seconds(table) == {
        "tests/benchmarks/test_perf.py": 0.8,  # 0.75, to a tenth
        "tests/test_a.py": 4.0,
        "tests/test_b.py": 0.2,
    }
    with pytest.raises(SystemExit):  # one report only
        script.main(["--write", str(table), str(report), str(report)])
    # a file's waits for the other process are the order's, not its own: taken out
    waits = tmp_path / "waits.tsv"
    waits.write_text(
        "gw1\t3.0\ta turn for tests/test_a.py\ttests/test_a.py\n"
        "gw0\t9.0\tthe shared 'x', built by the other process\ttests/test_b.py\n"
        "gw0\t1.0\ta turn for suite/test_x.py\t\n"  # no test being set up: no file
    )
    assert script.main(["--write", str(table), "--waits", str(waits), str(report)]) == 0
    seconds = file_order.load_seconds(table)
    assert (seconds["tests/test_a.py"], seconds["tests/test_b.py"]) == (1.0, 0.0)
