"""`bench run --submit`: the sweep as a Slurm batch job that runs it as job steps.

The job's sweep is written from the parsed command, never from its raw argv: the
settings and spec fields the user gave (flags and config file alike) go into a
YAML config beside the script, and the job runs `bench run --config` on it with
the Slurm launcher. Nothing in it can submit again, however the submission was
spelled.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import yaml

from bench.contract.spec import RunSpec
from bench.core.errors import SlurmError, SweepError
from bench.launch import slurm
from bench.sweep.cells import plan
from bench.sweep.config import LOCAL, SLURM, SweepConfig


@dataclasses.dataclass(frozen=True)
class Submission:
    """What the user asked for, as given: settings and spec fields, before defaults."""

    settings: dict[str, Any]
    spec: dict[str, Any]
    force: bool = False
    no_compare: bool = False

    def job_config(self) -> dict[str, Any]:
        """The job's sweep config: the given settings, on the Slurm launcher."""
        settings = {k: list(v) if isinstance(v, tuple) else v for k, v in self.settings.items()}
        return {**settings, "launcher": SLURM, "spec": dict(self.spec)}

    def job_argv(self, config_file: Path, results: Path) -> list[str]:
        """The `bench run` arguments of the job (absolute paths: any working folder)."""
        argv = ["--config", str(config_file), "--results", str(results)]
        return [
            *argv,
            *(["--force"] if self.force else []),
            *(["--no-compare"] if self.no_compare else []),
        ]


def prepare(
    submission: Submission,
    config: SweepConfig,
    base: RunSpec,
    results: Path,
    sbatch_args: list[str],
) -> tuple[str, str, Path]:
    """(sbatch script, its YAML config, where the config goes) for the sweep."""
    if config.launcher == LOCAL and submission.settings.get("launcher") == LOCAL:
        raise SweepError("--submit runs the sweep with --launcher slurm; drop --launcher local")
    if config.hosts or config.hostfile:
        raise SweepError("--submit takes its hosts from the allocation; drop --hosts/--hostfile")
    # the sweep's size, planned as on one machine (the job's own nodes are not known yet)
    cells = plan(dataclasses.replace(config, launcher=LOCAL), base)
    stamp = f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    config_file = results / "slurm" / f"{stamp}.yaml"
    script = slurm.sbatch_script(
        submission.job_argv(config_file, results),
        results=results,
        workers=max(config.workers),
        threads=base.threads,
        cells=len(cells),
        timeout=config.timeout,
        extra=sbatch_args,
    )
    text = yaml.safe_dump(submission.job_config(), sort_keys=True)
    return script, text, config_file


def submit(script: str, config_text: str, config_file: Path, results: Path) -> tuple[str, Path]:
    """Write the config, then submit the script; (job id, script path)."""
    try:
        config_file.parent.mkdir(parents=True, exist_ok=True)
        config_file.write_text(config_text)
    except OSError as exc:
        raise SlurmError(f"cannot write the job's config {config_file}: {exc.strerror}") from None
    return slurm.submit(script, results, stem=config_file.stem)
