"""conftest.once_per_run: a session fixture is built once for a run in two processes.

scripts/test.sh runs the suite under pytest-xdist, where every worker has a session of
its own; the shared sweep and the other costly session fixtures must still run once.
A real two-worker pytest run checks it here, on a suite of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = """
import os
import time
from pathlib import Path

import pytest

from tests.conftest import once_per_run

LOG = Path(os.environ["ONCE_LOG"])


def build(folder: Path) -> dict[str, object]:
    with LOG.open("a") as log:
        log.write(f"built {os.getpid()}\\n")
    time.sleep(1)  # the other worker asks meanwhile, and waits
    (folder / "made").write_text(str(os.getpid()))
    return {"pid": os.getpid(), "folder": str(folder)}


def build_failing_once(folder: Path) -> dict[str, object]:
    first = not (LOG.parent / "failed").exists()
    (LOG.parent / "failed").touch()
    (folder / "half-made").touch()
    with LOG.open("a") as log:
        log.write(f"tried {os.getpid()}\\n")
    if first:
        raise RuntimeError("the first build fails")
    assert list(folder.iterdir()) == [folder / "half-made"]  # the failed one's was cleared
    return {"pid": os.getpid(), "folder": str(folder)}


@pytest.fixture(scope="session")
def once(tmp_path_factory):
    return once_per_run(tmp_path_factory, "once", build)


@pytest.fixture(scope="session")
def retried(tmp_path_factory):
    return once_per_run(tmp_path_factory, "retried", build_failing_once)
"""

TESTS = """
import os
from pathlib import Path

LOG = Path(os.environ["ONCE_LOG"])


def test_once(once):
    assert Path(once["folder"], "made").read_text() == str(once["pid"])
    with LOG.open("a") as log:
        log.write(f"saw {os.getpid()} {once['pid']} {once['folder']}\\n")


def test_retried(retried):
    assert Path(retried["folder"]).is_dir()
"""


def test_two_workers_share_one_build_and_a_failed_build_is_retried(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_fixture.py").write_text(TESTS)
    log = tmp_path / "log"
    log.touch()
    env = {**os.environ, "ONCE_LOG": str(log), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this suite may itself run under xdist
    # --dist each: every test runs on both workers, so both ask for each fixture
    argv = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "each", "-p", "no:cacheprovider"]
    argv += ["-q", "--basetemp", str(tmp_path / "base"), str(suite)]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert "3 passed, 1 error" in out, out[-3000:]
    assert "the first build fails" in out
    lines = log.read_text().splitlines()
    built = [line.split()[1] for line in lines if line.startswith("built")]
    saw = [line.split()[1:] for line in lines if line.startswith("saw")]
    assert len(built) == 1, lines  # one build for the two workers
    assert len(saw) == 2 and saw[0][0] != saw[1][0], lines  # asked in two processes
    assert {(pid, folder) for _, pid, folder in saw} == {(built[0], saw[0][2])}, lines
    tried = [line.split()[1] for line in lines if line.startswith("tried")]
    assert len(tried) == 2 and tried[0] != tried[1], lines  # the second worker built anew


TURN_CONFTEST = """
from tests.conftest import _machine_turn  # noqa: F401  (the autouse fixture under test)
from tests.conftest import pytest_terminal_summary  # noqa: F401  (and the waits it adds up)


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: the file runs with the machine to itself")
"""

TURN_TEST = """
import os
import time
from pathlib import Path

import pytest

{mark}
LOG = Path(os.environ["TURN_LOG"])


@pytest.mark.parametrize("i", range(3))
def test_sleeps(i):
    start = time.monotonic()
    time.sleep(0.5)
    with LOG.open("a") as log:
        log.write(f"{{__name__}} {{start}} {{time.monotonic()}}\\n")
"""


def test_a_file_marked_alone_runs_with_no_other_file_beside_it(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(TURN_CONFTEST)
    (suite / "test_alone.py").write_text(TURN_TEST.format(mark="pytestmark = pytest.mark.alone"))
    for name in ("test_a", "test_b"):  # one runs beside the alone file, without the turn
        (suite / f"{name}.py").write_text(TURN_TEST.format(mark=""))
    log = tmp_path / "log"
    env = {**os.environ, "TURN_LOG": str(log), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-n",
        "2",
        "--dist",
        "loadfile",
        "-p",
        "no:cacheprovider",
    ]
    argv += ["-q", "--basetemp", str(tmp_path / "base"), str(suite)]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "9 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    spans = [line.split() for line in log.read_text().splitlines()]
    alone = [(float(a), float(b)) for name, a, b in spans if name == "test_alone"]
    others = [(float(a), float(b)) for name, a, b in spans if name != "test_alone"]
    assert len(alone) == 3 and len(others) == 6, spans
    first, last = min(a for a, _ in alone), max(b for _, b in alone)
    # no other test ran between the alone file's first start and its last end
    beside = [(a, b) for a, b in others if a < last and b > first]
    assert not beside, (alone, others)
    # the wait that made it so is told (the alone file's for the file it found running,
    # or the other process's for the alone file: a file's 1.5 s either way)
    summary = re.search(r"waits, one process on the other: (.*) -+$", proc.stdout, re.M)
    assert summary, proc.stdout[-3000:]
    told = re.findall(
        r"^ +[\d.]+ s  (gw\d)  (?:an alone|a) turn for \S*test_\w+\.py$", proc.stdout, re.M
    )
    assert told and set(told) <= {"gw0", "gw1"}, proc.stdout[-3000:]
