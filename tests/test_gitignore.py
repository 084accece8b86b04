"""What git tracks under results/: the committed reference, never what a user's run writes
(README: "results/  your records (ignored by git) and the committed reference")."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT

# what runs write under results/: records, per-rank logs, a runner's traces started by
# hand, bench run --submit's Slurm files, tune, predict, the cached peak, html reports
WRITTEN = [
    "results/runs.jsonl",
    "results/collectives.jsonl",
    "results/predictions.jsonl",
    "results/traces/1f2e3d4c/rank0.pt.trace.json",
    "results/slurm/20261205-101500.yaml",
    "results/slurm/slurm-1234.out",
    "results/runs/20261205-101500/ddp-np2-r0.log",
    "results/tune/runs.jsonl",
    "results/peak-flops.json",
    "results/.peak-flops.json.lock",
    "results/.runs.jsonl.summaries.json",
    "results/some-new-folder/anything.txt",
]
TRACKED = ["results/reference/README.md", "results/reference/cpu-2core-digits/runs.jsonl"]

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)


def _ignored(paths: list[str]) -> set[str]:
    """Which of `paths` .gitignore ignores (its patterns alone: --no-index, so that a
    tracked file is judged by the rules too, not let through because git has it)."""
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(paths) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: none of them ignored
    return set(proc.stdout.split())


def test_what_a_run_writes_under_results_is_ignored() -> None:
    assert _ignored(WRITTEN) == set(WRITTEN)


def test_the_committed_reference_is_not_ignored() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "results"], capture_output=True, text=True, cwd=ROOT, timeout=60
    ).stdout.split()
    # per-rank logs (runs/) are ignored everywhere, reference/ too: the few committed
    # beside reference records were added by name, and a rerun's stay out
    records = [p for p in listed if "/runs/" not in p]
    assert len(records) > 20  # the reference sweeps, tune, the model check, the gate's calibration
    assert not _ignored([*TRACKED, *records])
