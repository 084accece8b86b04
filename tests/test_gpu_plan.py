"""The GPU path as far as a CPU machine can check it: the plan, and the gpu-test guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests import netns

ROOT = Path(__file__).resolve().parent.parent


def _check(
    *args: str, env: dict[str, str], wrap: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*wrap, "bash", "scripts/gpu_check.sh", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_gpu_check_dry_run_prints_the_plan(tmp_path: Path) -> None:
    proc = _check("--dry-run", str(tmp_path / "out"), env={**os.environ, "BENCH_GPUS": "4"})
    assert proc.returncode == 0, proc.stderr
    launches = [ln for ln in proc.stdout.splitlines() if "/runners/" in ln]
    # resnet50 fp32 and bf16: 3 engines x (1, 4 GPUs) x 2 repeats each; lenet: 3 x 2 x 1
    assert len(launches) == 30
    assert all("--device cuda" in ln for ln in launches)
    assert sum("--model resnet50" in ln and "--precision bf16" in ln for ln in launches) == 12
    assert sum("--model lenet --dataset digits" in ln for ln in launches) == 6
    assert any("horovodrun -np 4" in ln for ln in launches)
    assert any("--nproc-per-node 4" in ln for ln in launches)
    assert any("--nproc_per_node 4" in ln for ln in launches)
    assert "BENCH_EXPECT_GPU=1" in proc.stdout and "tests/test_gpu.py" in proc.stdout
    assert "# not run:" not in proc.stdout  # 4 GPUs: every GPU test can run
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def _python_without(tmp_path: Path, kept: str) -> Path:
    """An interpreter lacking torch: stdlib only (`kept` "none"), or every package of this
    environment but torch ("all but torch": its site-packages linked entry by entry)."""
    site = tmp_path / "site-packages"
    site.mkdir()
    if kept == "all but torch":
        purelib = Path(sysconfig.get_paths()["purelib"])
        for entry in purelib.iterdir():
            if entry.name.split("-")[0] not in ("torch", "torchgen", "functorch"):
                (site / entry.name).symlink_to(entry)
    wrapper = tmp_path / "python3"
    # -S: no site module, so none of this environment's packages but those linked above
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'exec {sys.executable} -S "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.parametrize("kept", ["none", "all but torch", "system python3"])
def test_a_dry_run_prints_the_plan_where_python_has_no_torch(kept: str, tmp_path: Path) -> None:
    """docs/gpu.md: a dry run prints the plan on any machine, a laptop without torch
    included; it says what the check itself would refuse, and writes nothing."""
    env = {"PATH": "/usr/bin:/bin"}  # as `env -i PATH=/usr/bin:/bin bash scripts/...`
    if kept == "system python3":
        found = subprocess.run(
            ["/usr/bin/python3", "-c", "import importlib.util as u; print(u.find_spec('torch'))"],
            capture_output=True, text=True, env=env, timeout=60,
        ).stdout.strip() if Path("/usr/bin/python3").exists() else "no /usr/bin/python3"  # fmt: skip
        if found != "None":
            pytest.skip(f"the system python3 is no interpreter without torch here ({found})")
    else:
        env["BENCH_PYTHON"] = str(_python_without(tmp_path, kept))
    proc = _check("--offline", "--dry-run", str(tmp_path / "out"), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert out.startswith("# gpu_check plan for 1 GPU(s), workers 1, ")
    assert "(torch absent, cp" in out and "the check itself refuses until" in out
    lacks = next(line for line in out.splitlines() if "lacks these packages" in line)
    assert "torch" in lacks.split("needs: ")[1].split(" (")[0].split()
    if kept == "all but torch":  # bench loads: every cell planned, torch's engines absent
        assert "# unavailable, recorded without launching: ddp np=1 resnet50" in out
        assert "# not run: GPU tests of ddp" in out
    else:  # bench does not load: each sweep as its command
        assert sum(" -m bench run --workers 1 --device cuda" in ln for ln in out.splitlines()) == 3
    assert "BENCH_EXPECT_GPU=1 " in out and "-m bench compare " in out
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


# Loaded by every Python the check starts (PYTHONPATH is inherited, and the check
# adds to it rather than replacing it): logs each attempt to reach the network or to
# run pip/venv, through Python's audit hooks, and marks that the hook was active.
GUARD = """
import os, socket, sys
LOG, MARK = os.environ["BENCH_GUARD_LOG"], os.environ["BENCH_GUARD_MARK"]
with open(MARK, "a") as f:
    f.write(f"{os.getpid()} {sys.argv[:2]}\\n")
NET = (socket.AF_INET, socket.AF_INET6)
def hook(event, args):
    bad = None
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg") and args[0].family in NET:
        bad = f"{event} {args[1]!r}"
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
        bad = f"{event} {args[0]!r}"
    elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.system"):
        argv = args[1] if len(args) > 1 else args[0]
        words = [str(w) for w in argv] if isinstance(argv, (list, tuple)) else str(argv).split()
        names = [os.path.basename(w) for w in words]
        # a program named pip/curl/wget, or `-m pip|venv|ensurepip`; not a path that
        # merely contains ".venv" (the project's interpreter lives there)
        if any(n in ("pip", "pip3", "curl", "wget") for n in names) or any(
            a == "-m" and b.split(".")[0] in ("pip", "venv", "ensurepip")
            for a, b in zip(words, words[1:])
        ):
            bad = f"{event} {words}"
    elif event == "import" and str(args[0]).split(".")[0] in ("pip", "venv", "ensurepip"):
        bad = f"import {args[0]}"
    if bad:
        with open(LOG, "a") as f:
            f.write(f"{os.getpid()} {sys.argv[:2]}: {bad}\\n")
sys.addaudithook(hook)
"""


def _guarded_env(tmp_path: Path) -> dict[str, str]:
    guard, stubs = tmp_path / "guard", tmp_path / "stubs"
    guard.mkdir()
    stubs.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    log, mark = tmp_path / "network-attempts.log", tmp_path / "guarded-processes.log"
    # the shell-level ways to fetch something: each one logs its call and fails
    for tool in ("pip", "pip3", "curl", "wget", "virtualenv", "uv"):
        stub = stubs / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\nexit 1\n')
        stub.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(guard),
        "PIP_NO_INDEX": "1",
        "BENCH_PYTHON": sys.executable,
        "BENCH_GUARD_LOG": str(log),
        "BENCH_GUARD_MARK": str(mark),
    }


@pytest.mark.skipif(netns.available() is not None, reason=f"no namespaces: {netns.available()}")
def test_offline_dry_run_in_a_namespace_without_network(tmp_path: Path) -> None:
    """The offline check's dry run needs no network and tries none.

    Sound in both directions: inside a fresh network namespace (loopback down, no
    other interface) any attempt fails at once, so a passing run did not depend on
    the network; and the audit hook in every Python it started, plus stubs for the
    shell's download tools, log any attempt that was made and then swallowed. The
    mark file shows the hook really ran in those processes.
    """
    env = _guarded_env(tmp_path)
    ns = f"bench-offline-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    try:
        proc = _check("--offline", "--dry-run", str(tmp_path / "out"), env=env,
                      wrap=("ip", "netns", "exec", ns))  # fmt: skip
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    attempts = tmp_path / "network-attempts.log"
    assert not attempts.exists(), attempts.read_text()
    guarded = (tmp_path / "guarded-processes.log").read_text().splitlines()
    assert len(guarded) >= 5, guarded  # the probes and the three planning sweeps
    assert sum("/runners/" in ln for ln in proc.stdout.splitlines()) == 15
    assert "# not run: test_horovod_and_ddp_agree_on_two_gpus" in proc.stdout
    assert not (tmp_path / "out").exists()


def test_guard_sees_a_network_attempt(tmp_path: Path) -> None:
    """The guard above can fail: a Python that resolves a name is logged."""
    env = _guarded_env(tmp_path)
    subprocess.run(
        [sys.executable, "-c", "import socket\ntry: socket.getaddrinfo('pypi.org', 443)\nexcept OSError: pass"],
        env=env, timeout=60, capture_output=True,
    )  # fmt: skip
    log = (tmp_path / "network-attempts.log").read_text()
    assert "socket.getaddrinfo 'pypi.org'" in log
    # running pip is logged; a program under a .venv folder is not pip
    code = "import subprocess, sys\nfor argv in ([sys.executable, '-m', 'pip', '--version'], ['true', '/x/.venv/bin/python']):\n    subprocess.run(argv, capture_output=True)"
    subprocess.run([sys.executable, "-c", code], env=env, timeout=120, capture_output=True)
    log = (tmp_path / "network-attempts.log").read_text()
    assert "'-m', 'pip', '--version'" in log
    assert ".venv/bin/python']" not in log


def test_bundle_for_another_torch_is_refused(tmp_path: Path) -> None:
    """On a node without Horovod, a bundle built for another torch stops the check in one line."""
    env = _guarded_env(tmp_path)
    (tmp_path / "guard" / "sitecustomize.py").write_text(GUARD + "\n" + HIDE_HOROVOD)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(
        json.dumps({"torch": "0.1.0+cu999", "python": "cp312", "wheel": "horovod.whl"})
    )
    proc = _check("--offline", "--dry-run", "--bundle", str(bundle), str(tmp_path / "out"), env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "was built for torch 0.1.0+cu999 (cp312)" in lines[0], lines
    assert "rebuild it with BENCH_BUNDLE_TORCH=" in lines[0]


HIDE_HOROVOD = """
import importlib.abc
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "horovod":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Absent())
"""


def test_gpu_tests_fail_when_a_gpu_is_expected_but_missing() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the guard for a missing one has nothing to catch")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_gpu.py", "-q", "-p", "no:cacheprovider",
         "-k", "one_gpu_per_rank and ddp"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "BENCH_EXPECT_GPU": "1"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "BENCH_EXPECT_GPU=1 but torch sees no CUDA GPU" in proc.stdout
    # and without the variable the same test is skipped, saying why
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_gpu.py", "-q", "-p", "no:cacheprovider",
         "-k", "one_gpu_per_rank and ddp", "-rs"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "BENCH_EXPECT_GPU"},
    )  # fmt: skip
    assert proc.returncode == 0 and "no CUDA GPU on this machine" in proc.stdout


@pytest.mark.distributed
def test_failing_check_still_reports_and_packs(tmp_path: Path) -> None:
    """A GPU that nvidia-smi lists but torch cannot use: every sweep is refused, the
    tests fail and `bench compare` finds no record and fails, and still the check
    ends with its reports, the packed records and logs, and the closing line."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a real GPU is here: the sweeps would run")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text('#!/bin/sh\necho "GPU 0: Stand-in GPU (UUID: GPU-0)"\n')
    (fake / "nvidia-smi").chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "BENCH_ENGINES": "ddp"}
    proc = _check(str(out), env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["bundle.txt", "check.log", "gpu-tests.log", "records-logs.tar.gz",
                     "report.html", "report.txt", "summary.txt"]  # fmt: skip
    assert all((out / f).stat().st_size < 16 * 2**20 for f in files)
    log = (out / "check.log").read_text().splitlines()
    assert "gpu_check: done, status 1" in log[-1]
    phases = [ln for ln in log if ln.startswith("[") and "] gpu_check: " in ln]
    assert len(phases) >= 7  # start, 3 sweeps, tests, reports, packing, done
    assert sum("no CUDA GPU is visible" in ln for ln in log) == 3  # each sweep, one line
    assert "bench compare failed" in (out / "report.html").read_text()
    assert "need 2+ GPUs" in (out / "gpu-tests.log").read_text()
