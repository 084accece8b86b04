"""The `bench` command's parsing: exact flags only, a subcommand per module, and a Slurm
job that is built from the parsed command and so can never submit itself again."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench import cli
from bench.contract.spec import RunSpec
from bench.sweep import SweepConfig, submit
from bench.sweep.config import SLURM
from tests.conftest import run_bench


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_subcommand_has_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([name, "--help"])
    assert exc.value.code == 0
    assert f"usage: bench {name}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--subm", "--dry-run"],  # would have parsed as --submit
        ["run", "--sub", "--dry-run"],
        ["run", "--dry", "--submit"],
        ["run", "--engine", "ddp", "--dry-run"],  # --engines, --engine-option
        ["compare", "--form", "json"],
    ],
)
def test_no_abbreviation_is_taken(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_a_submitted_job_never_submits_again(tmp_path: Path) -> None:
    """The job's sweep is the parsed command written as a config, on the Slurm launcher."""
    given = {"engines": ("ddp",), "workers": (1, 2), "repeats": 2}
    job = submit.Submission(given, {"epochs": 1}, force=True)
    config = SweepConfig.from_dict(given)
    script, text, config_file = submit.prepare(job, config, RunSpec(epochs=1), tmp_path, [])
    data = yaml.safe_load(text)
    assert data == {"engines": ["ddp"], "workers": [1, 2], "repeats": 2, "launcher": SLURM,
                    "spec": {"epochs": 1}}  # fmt: skip
    (run_line,) = [line for line in script.splitlines() if line.startswith("exec ")]
    assert run_line.endswith(f"run --config {config_file} --results {tmp_path} --force")
    assert "--submit" not in run_line


def test_the_job_config_runs_as_written(tmp_path: Path) -> None:
    given = {"engines": ("ddp",), "workers": (2,), "models": ("mlp",), "repeats": 1}
    job = submit.Submission(given, {"epochs": 1, "threads": 1})
    config = SweepConfig.from_dict(given)
    _, text, _ = submit.prepare(job, config, RunSpec(), tmp_path, [])
    path = tmp_path / "job.yaml"
    path.write_text(text)
    # as the job reads it (outside an allocation it is refused, saying why)
    proc = run_bench("run", "--config", str(path), "--dry-run", "--results", str(tmp_path))
    assert proc.returncode == 2
    assert "SLURM_JOB_ID is not set" in proc.stderr
