"""tests/file_order.py: the order the files are handed to the two test processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import file_order
from tests.conftest import ROOT

SECONDS = {"tests/a.py": 300.0, "tests/b.py": 5.0, "tests/c.py": 60.0, "tests/d.py": 1.0}


def test_alone_first_beside_the_shortest_then_the_longest_first() -> None:
    files = ["tests/a.py", "tests/b.py", "tests/c.py", "tests/d.py", "tests/s.py"]
    assert file_order.order(files, {"tests/s.py"}, SECONDS) == [
        "tests/s.py",  # alone: first
        "tests/d.py",  # the shortest: the other process's first file
        "tests/a.py",
        "tests/c.py",
        "tests/b.py",
    ]
    # two alone files, each followed by one of the two shortest
    two = file_order.order([*files, "tests/t.py"], {"tests/s.py", "tests/t.py"}, SECONDS)
    assert two == [
        "tests/s.py",
        "tests/d.py",
        "tests/t.py",
        "tests/b.py",
        "tests/a.py",
        "tests/c.py",
    ]
    # no alone file: the longest first; a file the table lacks counts as the median (32.5 s)
    assert file_order.order([*files[:4], "tests/new.py"], set(), SECONDS) == [
        "tests/a.py",
        "tests/c.py",
        "tests/new.py",
        "tests/b.py",
        "tests/d.py",
    ]
    assert file_order.order(["tests/x.py", "tests/w.py"], set(), {}) == ["tests/w.py", "tests/x.py"]
    assert file_order.order(["tests/s.py"], {"tests/s.py"}, SECONDS) == ["tests/s.py"]


def test_the_table_reads_its_lines_and_names_a_bad_one(tmp_path: Path) -> None:
    table = tmp_path / "t.tsv"
    table.write_text("# a comment\ntests/a.py\t12.5\n\ntests/b.py\t3\n")
    assert file_order.load_seconds(table) == {"tests/a.py": 12.5, "tests/b.py": 3.0}
    table.write_text("tests/a.py 12.5\n")
    with pytest.raises(ValueError, match=r"t\.tsv:1: expected `file<TAB>seconds`"):
        file_order.load_seconds(table)


def test_the_committed_table_names_only_files_that_exist() -> None:
    """A file renamed or removed since the table was written would be ordered by nothing."""
    seconds = file_order.load_seconds(ROOT / file_order.TABLE)
    assert seconds and not [f for f in seconds if not (ROOT / f).is_file()]


CONFTEST = """
pytest_plugins = ["tests.file_order"]


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: the file runs with the machine to itself")
"""

TEST = """
import os
import time
from pathlib import Path

import pytest

{mark}


@pytest.mark.parametrize("i", range({count}))
def test_logs(i):
    with Path(os.environ["ORDER_LOG"]).open("a") as log:
        log.write(f"{{time.monotonic()}} {{os.environ['PYTEST_XDIST_WORKER']}} {{__name__}}\\n")
    time.sleep(0.2)
"""


def test_two_processes_take_the_files_in_this_order_not_by_test_count(tmp_path: Path) -> None:
    """A real two-process run: xdist would start the file with the most tests first."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(CONFTEST)
    counts = {"test_alone": 2, "test_long": 1, "test_mid": 2, "test_many": 9, "test_short": 1}
    for name, count in counts.items():
        mark = "pytestmark = pytest.mark.alone" if name == "test_alone" else ""
        (tmp_path / "tests" / f"{name}.py").write_text(TEST.format(mark=mark, count=count))
    table = "tests/test_long.py\t90\ntests/test_mid.py\t30\ntests/test_short.py\t1\n"
    (tmp_path / file_order.TABLE).write_text(table + "tests/test_many.py\t2\n")
    log = tmp_path / "log"
    env = {**os.environ, "ORDER_LOG": str(log), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this suite may itself run under xdist
    argv = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-q"]
    argv += ["-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"), "tests"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "15 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran: dict[str, list[str]] = {}  # each process's files, in the order it ran them
    for line in sorted(log.read_text().splitlines(), key=lambda ln: float(ln.split()[0])):
        _, worker, name = line.split()
        if name not in ran.setdefault(worker, []):
            ran[worker].append(name)
    # each process's first file: the alone one and the shortest (xdist's own order would
    # have started the file with the most tests), then each takes the queue's files in
    # its order: the long, the mid, the rest
    assert {files[0] for files in ran.values()} == {"test_alone", "test_short"}, ran
    queue = ["test_alone", "test_short", "test_long", "test_mid", "test_many"]
    assert all(files == sorted(files, key=queue.index) for files in ran.values()), ran
    assert sorted(f for files in ran.values() for f in files) == sorted(queue), ran


def test_a_table_that_does_not_read_is_warned_of_and_every_file_still_runs(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(CONFTEST)
    for name in ("test_a", "test_b"):
        (tmp_path / "tests" / f"{name}.py").write_text("def test_it():\n    pass\n")
    (tmp_path / file_order.TABLE).write_text("<<<<<<< HEAD\ntests/test_a.py\t3\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "2 passed, 1 warning" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "file_seconds.tsv:1: expected `file<TAB>seconds`" in proc.stdout
    assert "the files run in name order" in proc.stdout
