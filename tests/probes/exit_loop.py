#!/usr/bin/env python3
"""Launch a 2-worker run again and again until a worker dies at exit, then say how.

    .venv/bin/python tests/probes/exit_loop.py --runs 200 --what probe-ddp
    .venv/bin/python tests/probes/exit_loop.py --runs 100 --what runner-ddp-fp16

Each worker runs with Python's faulthandler on (PYTHONFAULTHANDLER=1), so a SIGABRT
prints every Python thread's stack, and with core dumps allowed (into --out), so the
C++ threads can be read with `gdb -batch -ex "thread apply all bt" PYTHON CORE`.
Prints one line per failed run and a count at the end; exit status 1 when any run
died. This is how the abort at exit was hunted; it did not fire in 250 runs here
(docs/findings.md, "The abort at exit").
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import engines
from bench.engines import Engine

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "probes" / "fp16_compression.py"
RUNNER_ARGS = ["--model", "mlp", "--max-steps", "24", "--warmup-steps", "2", "--quiet",
               "--grad-compression", "fp16", "--measure-cap-s", "0"]  # fmt: skip


def argv(what: str, out: Path) -> list[str]:
    kind, engine_name, *rest = what.split("-")
    engine = Engine(engine_name)
    if kind == "probe":
        return engines.local_argv(
            engine, 2, ["--engine", engine.value, "--out", str(out / "probe.json")], script=PROBE
        )
    args = [*RUNNER_ARGS, "--results", str(out)]
    if "fp16" not in rest:
        args = [a for a in args if a not in ("--grad-compression", "fp16")]
    return engines.local_argv(engine, 2, args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument(
        "--what",
        default="probe-ddp",
        help="probe-ENGINE (tests/probes/fp16_compression.py) or runner-ENGINE[-fp16]",
    )
    parser.add_argument("--out", default=None, help="where cores and failed logs go")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="exit-loop-"))
    out.mkdir(parents=True, exist_ok=True)
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    died = 0
    for i in range(args.runs):
        work = out / f"run-{i}"
        work.mkdir(exist_ok=True)
        proc = subprocess.run(
            argv(args.what, work), capture_output=True, text=True, cwd=work, env=env,
            timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        text = proc.stdout + proc.stderr
        bad = proc.returncode != 0 or "terminate called" in text or "Fatal Python" in text
        if bad:
            died += 1
            (work / "output.txt").write_text(text)
            first = next((ln for ln in text.splitlines() if "terminate" in ln or "Fatal" in ln), "")
            print(f"run {i}: exit {proc.returncode} {first}", flush=True)
        else:
            for f in work.iterdir():  # keep only what failed
                f.unlink()
            work.rmdir()
    print(f"{died} of {args.runs} runs died ({args.what}); output in {out}")
    return 1 if died else 0


if __name__ == "__main__":
    sys.exit(main())
