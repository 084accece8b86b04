"""Sweeps: a config, its plan of cells, their execution, and the variants (emulated
links, Slurm submission, the allreduce cells of `bench collectives`)."""

from bench.sweep.cells import Cell, check_engines, check_plan, engine_unavailable, plan, spec_flags
from bench.sweep.config import LAUNCHERS, LOCAL, SLURM, SweepConfig, load_config_file
from bench.sweep.execute import (
    CellResult,
    attempt_record,
    cell_argv,
    cell_log_dir,
    completed_cells,
    environment_key,
    record_unavailable,
    run_cell,
    run_sweep,
)

__all__ = [
    "LAUNCHERS",
    "LOCAL",
    "SLURM",
    "Cell",
    "CellResult",
    "SweepConfig",
    "attempt_record",
    "cell_argv",
    "cell_log_dir",
    "check_engines",
    "check_plan",
    "completed_cells",
    "engine_unavailable",
    "environment_key",
    "load_config_file",
    "plan",
    "record_unavailable",
    "run_cell",
    "run_sweep",
    "spec_flags",
]
