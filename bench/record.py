"""The run record as a type: one definition that writers build and readers read.

`RunRecord` names every field a record of the current schema version may hold
(`bench/schema.py` FIELDS_V2 checks their values at run time, and
tests/test_records.py checks that the two name the same fields, nested objects
included), so the type checker rejects a misspelt or unknown field in any
reader or writer. `LoadedRecord` adds what `records.load` and
`records.load_summaries` attach to a record read from a file; the reports take
those. Every field is optional except the ones every record has whatever its
status (`RunRecord`'s own); the others are `RunFields`, which a writer may add
any subset of: a failed run stops at whatever it had.

Measured arrays are typed as an ok record holds them (numbers), which is what
readers read; in a failed or diverged run a value that was not finite is null
(`records.finite`; the schema's `when_ok` types are the stricter ones).

Plain `TypedDict`s: a record stays the JSON object it always was (no class to
serialise, no copy on load), and older versions are migrated as dicts before
they are typed (`records.migrate`).
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypedDict

# The version these types describe; records.SCHEMA_VERSION is this.
SCHEMA_VERSION: Final = 2

# A loss as stored: a number, null (a non-finite float written by records.finite), or
# a non-finite marker string in a run that diverged.
Loss = float | str | None


class Spec(TypedDict, total=False):
    """`RunSpec.to_dict()` for a training run; a collective run's own few fields."""

    model: str
    dataset: str
    data_path: str | None
    batch_size: int
    scaling: str
    epochs: int
    max_steps: int | None
    warmup_steps: int
    optimizer: str
    lr: float
    lr_rule: str
    lr_base_batch: int | None
    lr_warmup_epochs: float
    lr_schedule: str
    momentum: float
    weight_decay: float
    seed: int
    threads: int
    precision: str
    allow_tf32: bool
    device: str
    bucket_mb: float
    grad_sync: bool
    grad_compression: str
    augment: bool
    bn_momentum: float
    bn_eps: float
    bn_buffers: str
    test_fraction: float
    synthetic_samples: int
    # a collective record's spec (runners/collective_bench.py)
    op: str
    dtype: str
    sizes: list[int]
    iters: int
    warmup: int


class Git(TypedDict, total=False):
    commit: str | None
    dirty: bool | None
    branch: str | None
    commit_time: str | None


class Env(TypedDict, total=False):
    hostname: str
    platform: str
    python: str
    cpu: str
    cpu_count: int | None
    machine: dict[str, Any]  # bench.env.machine_info: cpu, cores, memory, kernel
    gpus: list[dict[str, str | float | None]]
    libraries: dict[str, str | None]
    git: Git
    env_vars: dict[str, str]
    executable: str


class Launcher(TypedDict, total=False):
    name: str
    argv: list[str] | list[list[str]]  # one launcher, or one per host
    runner_argv: list[str]
    parent_argv: list[str] | None


class Dataset(TypedDict, total=False):
    name: str
    train_samples: int
    test_samples: int
    input_shape: list[int]
    fingerprint: str


class Fingerprints(TypedDict, total=False):
    init_weights: str
    init_weights_ranks_agree: bool
    init_optimizer_state_tensors: int
    final_weights: str
    final_weights_ranks_agree: bool
    data_order: str
    data_order_per_rank: list[str]


class Resources(TypedDict, total=False):
    peak_rss_mb: list[float]
    cpu_utilisation: list[float]
    peak_gpu_mb: list[float] | None
    staged_batches_gpu_mb: list[float] | None


class InputPipeline(TypedDict, total=False):
    ms_per_step: list[float]
    augmented: bool
    vs_step_time: float | None


class Flops(TypedDict):
    forward: float
    train: float


class Epoch(TypedDict, total=False):
    epoch: int
    steps: int
    samples_seen: int
    train_loss: Loss
    test_loss: Loss
    test_accuracy: float | None
    train_time_s: float | None
    samples_per_s: float | None
    elapsed_s: float | None


class CollectiveResult(TypedDict, total=False):
    bytes: int
    latency_s: float  # median over iterations of the slowest rank
    latency_p95_s: float
    algbw_gbps: float
    busbw_gbps: float


class CpuBudget(TypedDict):
    workers_on_host: int
    threads_per_worker: int
    usable_cpus: int


class Measurement(TypedDict, total=False):
    window_steps: int
    windows: int
    step_clock: str
    target_ci: float
    cap_s: float
    stopped_by: str  # target_ci | time_cap | disabled
    window_median: float | None
    window_ci: list[float | None]
    ci_half_width: float | None
    training_timed_steps: int
    extra_steps: int


class Contention(TypedDict, total=False):
    """One rank's view of what else used the CPUs while it was timed (bench/contention.py)."""

    seconds: float
    other_cpu_cores: float | None
    own_cpu_cores: float | None
    steal_fraction: float
    loadavg_1m: float | None
    cpu_count: int | None
    contended: bool


class Predicted(TypedDict, total=False):
    variant: str
    workers: int
    link_rate_bps: int | None
    throughput: float
    throughput_interval: list[float]
    efficiency: float
    efficiency_interval: list[float]
    step_time_s: float
    inputs: dict[str, Any]


class Link(TypedDict, total=False):
    rate_bps: int
    emulated: bool
    qdisc: str
    burst_bytes: int
    latency: str


class RunFields(TypedDict, total=False):
    """The fields of a record that a run may lack (a failed one stops at what it had);
    what a writer fills in after `records.new_record`, any subset at a time."""

    protocol_version: int
    created: str
    error: str | None
    kind: str  # train (absent: train), collective, prediction
    labels: dict[str, Any]  # free-form KEY=VALUE; repeat, launched_at... as numbers
    launcher: Launcher
    env: Env
    link: Link
    engine_options: dict[str, str]
    engine_versions: dict[str, Any]
    knobs: dict[str, Any]  # per engine; cycle_time_ms, controller, math where known
    threads: dict[str, Any]
    hosts: list[str]
    nodes: int
    oversubscribed: bool
    cpu_budget: CpuBudget
    per_worker_batch: int
    global_batch: int
    steps_per_epoch: int
    steps: int
    timed_steps: int
    lr_peak: float
    dataset: Dataset
    fingerprints: Fingerprints
    resources: Resources
    input_pipeline: InputPipeline
    nonfinite_fields: list[str]
    diverged_at_step: int | None
    step_times_s: list[list[float]]  # [rank][timed step]
    window_times_s: list[list[float]]  # [rank][window]
    window_steps: list[int]
    window_throughput: list[float]
    measurement: Measurement
    contention: list[Contention | None]  # per rank
    contended: bool
    throughput: float | None
    per_rank_throughput: list[float]
    loop_throughput: float | None
    flops_per_sample: Flops | None
    epochs: list[Epoch]
    step_losses: list[Loss]
    final_accuracy: float | None
    final_loss: Loss
    timeline: dict[str, Any]  # Horovod's timeline summary (bench/timeline.py)
    saved: dict[str, Any]
    results: list[CollectiveResult]
    predicted: Predicted
    run_start: str
    run_stop: str
    training_wall_s: float | None
    launch_to_stop_s: float | None
    launch_to_exit_s: float | None


class RunRecord(RunFields):
    """One run as stored in a results file (schema version SCHEMA_VERSION): the fields
    every record has, whatever its status, and any of `RunFields`."""

    schema_version: int
    run_id: str
    status: str  # records.Status
    engine: str
    spec: Spec
    world_size: int


class StepQuantiles(TypedDict):
    p50: float
    p95: float
    n: int


class LoadedRecord(RunRecord, total=False):
    """A record as `records.load` returns it: where it was read, and for a summary
    (`records.summarise`) the step-time quantiles in place of the per-step arrays."""

    _source: str  # FILE:LINE
    _summary: Literal[True]
    step_time_quantiles: StepQuantiles
