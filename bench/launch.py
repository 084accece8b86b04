"""Launch plans: the exact argv each engine's own launcher needs for one run.

Always argv lists, never shell strings: no user-provided value reaches a shell.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from bench.spec import Engine

ROOT = Path(__file__).resolve().parent.parent
RUNNER_SCRIPTS = {
    Engine.HOROVOD: ROOT / "runners" / "hvd.py",
    Engine.DDP: ROOT / "runners" / "ddp.py",
    Engine.PADDLE: ROOT / "runners" / "paddle_dp.py",
}
COLLECTIVES_SCRIPT = ROOT / "runners" / "collectives.py"


class LaunchError(RuntimeError):
    """A launcher that cannot be found or a plan that cannot be placed."""


def _horovodrun(python: str) -> str:
    beside = Path(python).parent / "horovodrun"
    if beside.exists():
        return str(beside)
    found = shutil.which("horovodrun")
    if not found:
        raise LaunchError(
            "horovodrun not found next to the Python in use nor on PATH; run scripts/setup.sh, "
            "which builds and installs Horovod into .venv"
        )
    return found


def launch_argv(
    engine: Engine,
    nproc: int,
    runner_args: list[str],
    *,
    log_dir: Path | None = None,
    python: str | None = None,
    script: Path | None = None,
) -> list[str]:
    """argv that starts `nproc` workers of `engine` on this host with its own launcher.

    `log_dir`, when given, receives one log file per rank (each launcher names them its
    own way: torchrun `<run>/attempt_0/<rank>/stdout.log`, horovodrun
    `rank.<n>/stdout`, paddle `workerlog.<n>`).
    """
    if nproc < 1:
        raise LaunchError(f"number of workers must be >= 1, got {nproc}")
    python = python or sys.executable
    script_path = str(script or RUNNER_SCRIPTS[engine])
    if engine is Engine.DDP:
        argv = [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(nproc),
        ]
        if log_dir is not None:
            argv += ["--log-dir", str(log_dir), "--tee", "3"]
        return [*argv, script_path, *runner_args]
    if engine is Engine.HOROVOD:
        argv = [_horovodrun(python), "-np", str(nproc), "-H", f"localhost:{nproc}", "--gloo"]
        # Horovod 0.28.1's --output-filename crashes at -np 1 (log10(0) in _pad_rank);
        # one rank's output is the launcher's own, which the caller captures anyway.
        if log_dir is not None and nproc > 1:
            argv += ["--output-filename", str(log_dir)]
        # The script is run through this Python, not its shebang, so the plan is exact.
        return [*argv, python, script_path, *runner_args]
    argv = [python, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc)]
    if log_dir is not None:
        argv += ["--log_dir", str(log_dir)]
    return [*argv, script_path, *runner_args]
