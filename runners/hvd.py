#!/usr/bin/env python3
"""Train one reference model under Horovod (PyTorch) and append a result record.

horovodrun -np 4 runners/hvd.py --model lenet --dataset digits

Horovod's examples/pytorch/pytorch_synthetic_benchmark.py flags are taken where they
mean the same here (`--num-warmup-batches`, `--fp16-allreduce`, `--no-cuda`,
`--use-adasum`; `--batch-size` and `--model` are this runner's own) and refused, in
one line naming the equivalent, where they do not (docs/coming-from.md).
"""

import sys
from collections.abc import Sequence
from pathlib import Path

# Run as a script, this file's folder is first on sys.path; the repository root
# must be importable too when the package is not installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

# the synthetic benchmark's flag -> this runner's flags with the same meaning
ALIASES = {
    "--num-warmup-batches": ["--warmup-steps"],
    "--fp16-allreduce": ["--grad-compression", "fp16"],
    "--no-cuda": ["--device", "cpu"],
    "--use-adasum": ["--engine-option", "adasum=true"],
}
# the synthetic benchmark's flag -> why it has no alias, and what to use
REFUSED = {
    "--num-iters": "runs are timed in windows until the interval is steady; set the length "
    "with --epochs or --max-steps (total steps), or let --target-ci decide",
    "--num-batches-per-iter": "steps are timed in windows chosen by the runner; "
    "--max-steps sets the total",
    "--use-mixed-precision": "use --precision (see --help)",
}
# exit status for bad input, as runners/protocol/main.py's
EXIT_BAD_INPUT = 2


def translate(argv: Sequence[str]) -> list[str] | str:
    """`argv` with the synthetic benchmark's aliases replaced, or the one-line refusal."""
    out: list[str] = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if flag in REFUSED:
            return f"error: {flag} (Horovod's synthetic benchmark) has no equivalent here: {REFUSED[flag]}"
        if flag in ALIASES:
            out += ALIASES[flag] + ([value] if eq else [])
            continue
        out.append(arg)
    return out


if __name__ == "__main__":
    argv = translate(sys.argv[1:])
    if isinstance(argv, str):
        print(argv, file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)

    from runners._bootstrap import ensure_venv

    ensure_venv()

    from bench.engines import Engine
    from runners.protocol.main import main

    sys.exit(main(Engine.HOROVOD, argv))
