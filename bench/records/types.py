"""The run record, defined once: the types writers build, readers read and the loader checks.

`RunRecord` names every field a record of the current schema version may hold.
The same annotations drive the run-time check (`bench/records/schema.py` reads
them): what the type checker holds a reader or writer to is exactly what a
record read from disk is held to. Where a JSON value needs more than a Python
type says, the annotation carries it (`Annotated[int, Min(1)]`, a name pattern,
`Required(...)` for fields some statuses must have, `NullIfFailed` for numbers
that a failed run may hold as null, `OkStrict` for a nullable value an ok record
must hold).

Plain `TypedDict`s: a record stays the JSON object it always was (no class to
serialise, no copy on load), and older versions are migrated as dicts before
they are checked (`bench/records/migrations.py`).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any, Final, TypedDict

# The version these types describe; bump it (and add a migration) when a field is
# renamed or changes meaning. 4: the per-step series at the resolution they were
# measured, stored packed (`Stored`, bench/records/packed.py).
SCHEMA_VERSION: Final = 5


class Status(enum.StrEnum):
    """How a run ended."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    DIVERGED = "diverged"  # a loss became NaN/inf; the record says at which step
    # the engine is not installed on this machine: the cell was recorded, not launched
    UNAVAILABLE = "unavailable"


class Kind(enum.StrEnum):
    """What a record holds; a record without the field is a training run."""

    TRAIN = "train"
    COLLECTIVE = "collective"  # bench collectives: allreduce latency and bandwidth
    PREDICTION = "prediction"  # bench predict: a model's figures, never a measurement


# -- constraints the loader checks beyond the Python type ----------------------------


@dataclasses.dataclass(frozen=True)
class Min:
    """An integer of at least `value`."""

    value: int


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A string matching `regex` (whole), described to the user as `name`."""

    regex: str
    name: str


@dataclasses.dataclass(frozen=True)
class Required:
    """The field must be present in records of these statuses ("*": all) and kinds."""

    statuses: tuple[str, ...] = ("*",)
    kinds: tuple[str, ...] = tuple(Kind)


@dataclasses.dataclass(frozen=True)
class Stored:
    """A numeric series written packed (bench/records/packed.py): each value as a `dtype`
    ("<i4", "<f4", "<f8") count of 1/`divisor` of its unit, the resolution it was
    measured at. Readers get the same lists back, at that resolution."""

    dtype: str
    divisor: int = 1


# Times measured to the microsecond, and held as integer microseconds.
MICROSECONDS: Final = Stored("<i4", 1_000_000)


class Values:
    """A mapping whose values all have this type (for JSON objects read as dict[str, Any])."""

    def __init__(self, hint: Any) -> None:
        self.hint = hint  # hashed by identity: each annotation is made once


class Keys:
    """A mapping whose listed keys, where present, have the given types (others: any)."""

    def __init__(self, types: dict[str, Any]) -> None:
        self.types = dict(types)  # hashed by identity: each annotation is made once


class _OkStrict:
    """`X | None`, but never null in an ok record (every report reads the value)."""


class _NullIfFailed:
    """In a record that is not ok, any number inside may be null: `records.finite` writes
    each non-finite float of a failed or diverged run as null."""


class _Matrix:
    """In an ok record, a non-empty list of equally long, non-empty lists (ranks x steps)."""


class _LossValue:
    """A loss: a number, null, or a non-finite marker ("nan", "inf") of a diverged run."""


OkStrict: Final = _OkStrict()
NullIfFailed: Final = _NullIfFailed()
Matrix: Final = _Matrix()
LossValue: Final = _LossValue()
NONFINITE_MARKERS = ("nan", "inf", "-inf", "NaN", "Infinity", "-Infinity")

Count = Annotated[int, Min(0)]
Positive = Annotated[int, Min(1)]
Loss = Annotated[float | str | None, LossValue]
IsoTime = Annotated[
    str, Pattern(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)", "an ISO-8601 time")
]
EngineName = Annotated[
    str, Pattern(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", "a name (letters, digits, _ . + -)")
]
# Labels are free-form KEY=VALUE from the command line; these known ones are numbers.
LABEL_TYPES: Final[dict[str, Any]] = {
    "repeat": Count,
    "launched_at": float,
    "link_rate_bps": Positive,
    # the precision of `bench run --decide-at` for runs its loop launched: compare then
    # reads their pairs at the loop's looks, not with one look
    "decide_at": float,
}
Labels = Annotated[dict[str, Any], Values(str | float | bool), Keys(LABEL_TYPES)]
# Every record has these, whatever its status and kind.
EVERY_RECORD = Required(("*",))
OK_TRAINING = Required((Status.OK,), (Kind.TRAIN,))


class Spec(TypedDict, total=False):
    """`RunSpec.to_dict()` for a training run; a collective run's own few fields.

    `RunSpec` (bench/contract/spec.py) is the contract; this is how a record stores it,
    which may be an older spec (tests hold the two to the same fields and types).
    """

    model: str
    dataset: str
    data_path: str | None
    batch_size: Positive
    scaling: str
    epochs: Positive
    max_steps: Positive | None
    warmup_steps: Count
    optimizer: str
    lr: float
    lr_rule: str
    lr_base_batch: Positive | None
    lr_warmup_epochs: float
    lr_schedule: str
    momentum: float
    weight_decay: float
    seed: Count
    threads: Positive
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
    synthetic_samples: Positive
    # a collective record's spec (runners/protocol/allreduce.py)
    op: str
    dtype: str
    sizes: list[Count]
    iters: Positive
    warmup: Count


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
    cpu_count: Positive | None
    # bench.core.machine.machine_info: cpu, cores, memory, kernel
    machine: Annotated[dict[str, Any], Keys({"cpu": dict[str, Any], "cpu_source": str})]
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
    train_samples: Count
    test_samples: Count
    input_shape: list[Count]
    num_classes: Positive  # the model's outputs (a transformer's vocabulary)
    fingerprint: str


class Fingerprints(TypedDict, total=False):
    init_weights: str
    init_weights_ranks_agree: bool
    init_optimizer_state_tensors: Count
    final_weights: str
    final_weights_ranks_agree: bool
    data_order: str
    data_order_per_rank: list[str]


class Resources(TypedDict, total=False):
    peak_rss_mb: Annotated[list[float], NullIfFailed]
    cpu_utilisation: Annotated[list[float], NullIfFailed]
    peak_gpu_mb: Annotated[list[float] | None, NullIfFailed]
    staged_batches_gpu_mb: Annotated[list[float] | None, NullIfFailed]


class InputPipeline(TypedDict, total=False):
    ms_per_step: Annotated[list[float], NullIfFailed]
    augmented: bool
    vs_step_time: float | None


class Flops(TypedDict):
    forward: float
    train: float


class Epoch(TypedDict, total=False):
    epoch: Count
    steps: Count
    samples_seen: Count
    train_loss: Loss
    test_loss: Loss
    test_accuracy: float | None
    train_time_s: float | None
    samples_per_s: float | None
    elapsed_s: float | None


class CollectiveResult(TypedDict, total=False):
    bytes: Count
    latency_s: float  # median over iterations of the slowest rank
    latency_p95_s: float
    algbw_gbps: float
    busbw_gbps: float


class CpuBudget(TypedDict):
    workers_on_host: Count
    threads_per_worker: Count
    usable_cpus: Count


class Measurement(TypedDict, total=False):
    window_steps: Positive
    windows: Count
    step_clock: str
    target_ci: float
    cap_s: float
    stopped_by: str  # target_ci | time_cap | disabled
    window_median: float | None
    window_ci: list[float | None]
    ci_half_width: float | None
    training_timed_steps: Count
    extra_steps: Count


class Contention(TypedDict, total=False):
    """One rank's view of what else used the CPUs while it was timed (bench/measure/contention.py)."""

    seconds: float
    other_cpu_cores: float | None
    own_cpu_cores: float | None
    steal_fraction: float
    loadavg_1m: float | None
    cpu_count: Positive | None
    contended: bool
    # the share of the time its main thread was held back from outside its process (ready
    # to run but not running, less what its own other threads ran), and what its cgroup's
    # CPU quota stopped it for (ms); None where the kernel does not say
    held_share: float | None
    throttled_ms: float | None


class Predicted(TypedDict, total=False):
    variant: str
    workers: Positive
    link_rate_bps: Positive | None
    throughput: float
    throughput_interval: list[float]
    # "lower": the throughput is at least this; "between": it lies between
    # throughput_lower (no overlap) and throughput_upper (full overlap), the point
    # chosen as bench predict's docs say
    bound: str | None
    bound_reasons: list[str]  # why it is bounded (empty: a point)
    throughput_upper: float | None
    throughput_lower: float | None
    compute_share: float  # compute / step
    compute_share_interval: list[float]
    efficiency: float  # what records before compute_share called compute / step
    efficiency_interval: list[float]
    step_time_s: float
    per_worker_batch: Positive
    global_batch: Positive
    interval: dict[str, Any]
    inputs: dict[str, Any]


class Peak(TypedDict, total=False):
    """The measured matrix-multiply peak a run's utilisation is divided by (bench/measure/peak.py)."""

    gflops: float
    n: Positive
    threads: Positive
    precision: str
    device: str
    rounds: Positive
    multiplies_per_round: Positive
    measured: str  # when it was measured (UTC)
    # "measured" (for the results folder the run read it from) or "user cache" (copied
    # from the per-user cache, its path in copied_from); absent from older caches
    origin: str
    copied_from: str
    key: str
    source: str  # the file the run read it from


class Link(TypedDict, total=False):
    """The network a run crossed when it was emulated (bench/launch/netns.py)."""

    rate_bps: Positive  # the token-bucket rate in bits/s, both directions
    emulated: bool
    qdisc: str
    burst_bytes: Count  # tbf's bucket: what passes at line speed after an idle spell
    latency: str  # how long a packet may queue in tbf before it is dropped
    # each end's MTU, and GSO on the veth ("on": tbf cuts GSO packets bigger than its
    # bucket into MTU frames); absent from records of the earlier shaping (MTU 1500,
    # GSO on, a bucket of 66 KB or more)
    mtu: Positive
    gso: str


class Trace(TypedDict, total=False):
    """A trace a run kept, for its engine's viewer (Perfetto, chrome://tracing): the
    profiler's traced steps (runners/protocol/trace.py) or Horovod's timeline."""

    # relative to the folder of the results file when inside it; rank 0's file, rank N's
    # beside it with N in its name
    path: str
    format: str  # chrome-json (an object with traceEvents) | chrome-json-array (Horovod's)
    tool: str  # torch.profiler | paddle.profiler | horovod timeline
    steps: Count  # the steps it covers
    ranks: list[Count]  # the ranks that wrote a file of it
    error: str  # why no file was kept (the run itself went on)


class RunFields(TypedDict, total=False):
    """The fields of a record that a run may lack (a failed one stops at what it had);
    what a writer fills in after `records.new_record`, any subset at a time."""

    protocol_version: Positive  # the measurement protocol (bench/measure/window.py)
    created: str
    error: str | None
    kind: Kind  # absent: train
    labels: Labels
    launcher: Launcher
    env: Env
    link: Link
    engine_options: dict[str, str]
    engine_versions: dict[str, Any]
    # engine settings with differing defaults, as they took effect (they vary per engine)
    knobs: Annotated[dict[str, Any], Keys({"cycle_time_ms": float | None})]
    threads: dict[str, Any]
    hosts: list[str]
    nodes: Positive
    oversubscribed: bool  # more worker threads on a host than usable CPUs
    cpu_budget: CpuBudget
    per_worker_batch: Positive
    global_batch: Positive
    steps_per_epoch: Count
    steps: Count
    timed_steps: Count
    lr_peak: float
    dataset: Dataset
    fingerprints: Fingerprints
    resources: Resources
    input_pipeline: InputPipeline
    nonfinite_fields: list[str]
    diverged_at_step: Count | None
    # [rank][timed step]; required (and never null) in an ok training record
    step_times_s: Annotated[list[list[float]], OK_TRAINING, NullIfFailed, Matrix, MICROSECONDS]
    # [rank][window], one synchronisation per window
    window_times_s: Annotated[list[list[float]], NullIfFailed, MICROSECONDS]
    window_steps: Annotated[list[Count], Stored("<i4")]
    # global samples/s of each window, timed by its slowest rank: written before schema
    # 5 only; readers take packed.window_throughput, which reads it off the window times
    window_throughput: Annotated[list[float], NullIfFailed, Stored("<f8")]
    measurement: Measurement
    contention: list[Contention | None]  # per rank
    contended: bool
    throughput: Annotated[float | None, OK_TRAINING, OkStrict]
    per_rank_throughput: Annotated[list[float], NullIfFailed]
    loop_throughput: float | None
    flops_per_sample: Flops | None
    peak: Peak
    epochs: list[Epoch]
    step_losses: Annotated[list[Loss], Stored("<f4")]  # each step's loss is a float32
    final_accuracy: float | None
    final_loss: Loss
    energy: dict[str, Any]  # joules over the timed span, with sources (bench/measure/energy.py)
    startup: dict[str, Any]  # launch to first timed step, in phases (runners/protocol/startup.py)
    breakdown: dict[str, Any]  # profiled steps' phases per rank (runners/protocol/profile.py)
    timeline: dict[str, Any]  # Horovod's timeline summary (bench/measure/timeline.py)
    traces: list[Trace]  # the traces it kept, for each engine's own viewer
    saved: dict[str, Any]
    results: list[CollectiveResult]
    predicted: Predicted
    run_start: IsoTime  # the runner's start (entry), UTC
    run_stop: IsoTime  # the record written, UTC
    # the training phase: first batch prepared to last result gathered
    training_wall_s: float | None
    launch_to_stop_s: float | None  # from the sweep's launch to the record written
    launch_to_exit_s: float | None  # in a record the sweep wrote: launch to launcher exit
    injected: str  # a test-only fault the run was told to inject (runners/protocol/faults.py)


class RunRecord(RunFields):
    """One run as stored in a results file (schema version SCHEMA_VERSION): the fields
    every record has, whatever its status, and any of `RunFields`."""

    schema_version: Positive
    run_id: str
    status: Status
    engine: EngineName
    spec: Spec
    world_size: Positive


class StepQuantiles(TypedDict):
    p50: float
    p95: float
    n: int


class LoadedRecord(RunRecord, total=False):
    """A record as `records.load` returns it: where it was read, and for a summary
    (`summaries.summarise`) the step-time quantiles in place of the per-step arrays."""

    _source: str  # FILE:LINE
    _summary: bool
    step_time_quantiles: StepQuantiles
