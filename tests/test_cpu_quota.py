"""The CPUs a process may use, a cgroup CPU quota included, and what the suite makes of it.

`usable_cpus` caps the affinity mask by the tightest CFS quota on the process's own cgroup
path (v2 `cpu.max`, v1 `cpu.cfs_quota_us`): records and the oversubscription check read
it, and `pytest -n auto` (scripts/test.sh) runs one process where one CPU is allowed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.core import machine
from tests import cgroup

ROOT = Path(__file__).resolve().parent.parent
needs_cgroup = pytest.mark.skipif(
    cgroup.why_not() is not None, reason=f"no CPU quota cgroup: {cgroup.why_not()}"
)


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _limit(tmp_path: Path, proc_cgroup: str, files: dict[str, str]) -> float | None:
    (tmp_path / "proc").write_text(proc_cgroup)
    _tree(tmp_path / "fs", files)
    return machine.cgroup_cpu_limit(tmp_path / "proc", tmp_path / "fs")


def test_a_parents_quota_caps_its_child_in_cgroup_v2(tmp_path: Path) -> None:
    files = {"cpu.max": "max 100000\n", "job/cpu.max": "50000 100000\n",
             "job/step/cpu.max": "max 100000\n"}  # fmt: skip
    assert _limit(tmp_path, "0::/job/step\n", files) == 0.5


def test_the_tightest_quota_on_the_path_counts(tmp_path: Path) -> None:
    files = {"job/cpu.max": "300000 100000\n", "job/step/cpu.max": "150000 100000\n"}
    assert _limit(tmp_path, "0::/job/step\n", files) == 1.5


def test_cgroup_v1_under_a_joined_controller_folder(tmp_path: Path) -> None:
    files = {"cpu,cpuacct/slurm/job1/cpu.cfs_quota_us": "150000\n",
             "cpu,cpuacct/slurm/job1/cpu.cfs_period_us": "100000\n",
             "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}  # fmt: skip
    proc = "12:memory:/slurm/job1\n4:cpu,cpuacct:/slurm/job1\n0::/\n"
    assert _limit(tmp_path, proc, files) == 1.5


def test_a_container_mount_without_the_named_folders_still_counts_its_root(
    tmp_path: Path,
) -> None:
    # no cgroup namespace: the path names the host's folders, the mount is the container's
    files = {"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}
    assert _limit(tmp_path, "3:cpu:/docker/0123abcd\n", files) == 2.0


@pytest.mark.parametrize(
    ("proc_cgroup", "files"),
    [
        ("0::/\n", {"cpu.max": "max 100000\n"}),  # unlimited
        ("2:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}),
        ("0::/\n", {"cpu.max": "lots\n"}),  # unreadable: no limit rather than a crash
        ("0::/\n", {"cpu.max": "50000 0\n"}),
        ("0::/\n", {}),  # no cpu controller files at all
        ("5:memory:/x\n", {"memory/x/memory.max": "1\n"}),  # no cpu hierarchy
        ("garbage\n", {}),
    ],
    ids=["v2-max", "v1-minus-one", "v2-garbage", "v2-zero-period", "no-files", "no-cpu", "bad"],
)
def test_no_quota_is_no_limit(tmp_path: Path, proc_cgroup: str, files: dict[str, str]) -> None:
    assert _limit(tmp_path, proc_cgroup, files) is None


def test_no_proc_file_is_no_limit(tmp_path: Path) -> None:
    assert machine.cgroup_cpu_limit(tmp_path / "absent", tmp_path) is None


def _run(argv: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)  # the suite itself may run under xdist
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def _in_quota(cpus: float, argv: list[str], cwd: Path) -> str:
    with cgroup.cpu_quota(cpus, f"bench-test-{os.getpid()}") as prefix:
        return _run([*prefix, *argv], cwd)


@needs_cgroup
def test_a_real_quota_of_half_a_cpu_is_one_usable_cpu(tmp_path: Path) -> None:
    code = "from bench.core.machine import *; print(cgroup_cpu_limit(), usable_cpus())"
    assert _in_quota(0.5, [sys.executable, "-c", code], tmp_path).split() == ["0.5", "1"]


@needs_cgroup
def test_pytest_auto_runs_one_process_in_one_cpus_quota(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        "from tests.conftest import pytest_xdist_auto_num_workers  # noqa: F401\n"
    )
    (suite / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    argv = [sys.executable, "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", str(suite)]
    assert "created: 1/1 worker" in _in_quota(1.0, argv, tmp_path)
    n = min(2, machine.usable_cpus())  # outside the quota: two on this kind of machine
    assert f"created: {n}/{n} worker" in _run(argv, tmp_path)
