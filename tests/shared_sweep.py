"""The session's shared sweep: every engine's short mlp runs, launched once for every
test file that only reads such records (conftest.py's `shared_sweep` fixture makes it).

What it holds: each engine at 1 and 2 workers, each 2-worker cell with its compute-only
twin, profiled and traced; then Horovod at 2 workers again with its timeline armed (a
variant of its own). Its environment carries what some readers check: secrets (which no
file may contain), a fake RAPL package (a static energy counter) and a peak measured
into the results folder before the sweep.

Readers: test_startup and test_utilisation (a run's start-up, energy and peak),
test_breakdown (the profiled cells and their traces), test_env_hygiene (the secrets),
test_engine_options and test_identical_maths (the plain 2-worker runs that their own
variants are compared with), and test_horovod_mpi and test_multinode, which copy the
records they need into folders of their own and add their launches there. The shared
folder itself is never written after the fixture returns, so every reader sees the
same records whatever order the tests run in.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from bench import records
from bench.measure import energy
from bench.records.types import LoadedRecord

# The spec of every run in the sweep: `bench run` flags, and the same for a runner
# started directly (run_engine), for tests that launch a variant of one of its runs.
SPEC = ("--models", "mlp", "--max-steps", "30", "--warmup-steps", "2")
RUNNER_SPEC = ["--model", "mlp", "--max-steps", "30", "--warmup-steps", "2"]
# The sweep's `bench run` settings besides the spec: one repeat, profiled steps (the
# breakdown; conftest.run_bench would turn them off otherwise) and no comparison printed.
SWEEP = ("--repeats", "1", "--no-compare", "--profile-steps", "10", *SPEC)
ARMED = ("--engine-option", "horovod:comm_timeline=true")
COMMANDS = (
    ("peak",),
    ("run", "--engines", "horovod,ddp,paddle", "--workers", "1,2", *SWEEP),
    ("run", "--engines", "horovod", "--workers", "2", *SWEEP, *ARMED),
)


@dataclasses.dataclass(frozen=True)
class SharedSweep:
    """Where the session's sweep lies, the environment it ran in, and what it printed."""

    results: Path
    rapl_package: Path
    cache: Path
    secret: str
    stdout: str = ""
    stderr: str = ""

    @classmethod
    def prepare(cls, root: Path) -> SharedSweep:
        """The folders and the fake energy counter under `root`, and a new secret."""
        package = root / "powercap" / "intel-rapl:0"
        package.mkdir(parents=True)
        (package / "energy_uj").write_text("1000\n")
        (package / "max_energy_range_uj").write_text("1000000000\n")
        return cls(root / "res", package, root / "cache", "s3cr3t-" + uuid.uuid4().hex)

    def environment(self) -> dict[str, str]:
        """What the sweep's commands add to the session's environment."""
        return {
            energy.ROOT_VARIABLE: str(self.rapl_package.parent),
            # the peak is measured for this folder, not taken from the user's cache
            "XDG_CACHE_HOME": str(self.cache),
            "MY_API_TOKEN": self.secret,
            "SOME_UNRELATED_VAR": "plain-" + self.secret,  # not named like a secret
        }

    def records(self) -> list[LoadedRecord]:
        """Every record of the sweep, in the order they were written."""
        return records.load([self.results]).records

    def run(
        self,
        engine: str,
        workers: int,
        *,
        synced: bool = True,
        options: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The one record of `engine` at `workers`: its compute-only twin when not `synced`;
        the plain run unless `options` are the engine options it ran with."""
        found = [
            r
            for r in self.records()
            if r["engine"] == engine
            and r["world_size"] == workers
            and r["spec"]["grad_sync"] == synced
            and (r.get("engine_options") or {}) == (options or {})
        ]
        assert len(found) == 1, f"{len(found)} shared runs of {engine} x{workers}"
        return cast(dict[str, Any], found[0])

    def copy_to(self, folder: Path, keep: Callable[[LoadedRecord], bool]) -> Path:
        """The records `keep` selects, appended to `folder`, a results folder the caller
        may add runs to; returns it."""
        for rec in self.records():
            if keep(rec):
                records.append(folder, {k: v for k, v in rec.items() if not k.startswith("_")})
        return folder
