"""The run record's schema: each known field's type, and which statuses require it.

Plain Python, no framework: `bench.records` validates every record against it on
load. The static type of a record is `bench/record.py` (`RunRecord`); a test keeps
the two naming the same fields for the current version, nested objects included.
Known fields are type-checked wherever they appear; fields not listed here are
tolerated, so that a new optional field never makes older readers drop records.
Numbers are finite JSON numbers (never booleans); a loss may also be null or a
non-finite marker string ("nan", "inf", "-inf") in a run that diverged.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

STATUSES = ("ok", "failed", "timeout", "diverged", "unavailable")
KINDS = ("train", "collective", "prediction")  # prediction: bench predict, never measured
NONFINITE_MARKERS = ("nan", "inf", "-inf", "NaN", "Infinity", "-Infinity")


class Type:
    """A JSON value's expected type; `check` returns what is wrong, or None."""

    name = "a value"

    def check(self, value: Any, path: str) -> str | None:
        raise NotImplementedError


def _got(value: Any) -> str:
    text = repr(value)
    return f"{text[:40]}{'...' if len(text) > 40 else ''} ({type(value).__name__})"


class _Any(Type):
    name = "any value"

    def check(self, value: Any, path: str) -> str | None:
        return None


class _Str(Type):
    name = "a string"

    def __init__(self, pattern: str | None = None, name: str | None = None) -> None:
        self.pattern = re.compile(pattern) if pattern else None
        if name:
            self.name = name

    def check(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or (self.pattern and not self.pattern.fullmatch(value)):
            return f"{path}: expected {self.name}, got {_got(value)}"
        return None


class _Int(Type):
    name = "an integer"

    def __init__(self, minimum: int | None = None) -> None:
        self.minimum = minimum
        if minimum is not None:
            self.name = f"an integer >= {minimum}"

    def check(self, value: Any, path: str) -> str | None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or (self.minimum is not None and value < self.minimum)
        ):
            return f"{path}: expected {self.name}, got {_got(value)}"
        return None


class _Num(Type):
    name = "a finite number"

    def check(self, value: Any, path: str) -> str | None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            return f"{path}: expected {self.name}, got {_got(value)}"
        return None


class _Bool(Type):
    name = "true or false"

    def check(self, value: Any, path: str) -> str | None:
        if not isinstance(value, bool):
            return f"{path}: expected {self.name}, got {_got(value)}"
        return None


class Enum(Type):
    def __init__(self, *values: str) -> None:
        self.values = values
        self.name = "one of " + ", ".join(values)

    def check(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or value not in self.values:
            return f"{path}: expected {self.name}, got {_got(value)}"
        return None


class Opt(Type):
    """`inner` or null."""

    def __init__(self, inner: Type) -> None:
        self.inner = inner
        self.name = f"{inner.name} or null"

    def check(self, value: Any, path: str) -> str | None:
        if value is None:
            return None
        problem = self.inner.check(value, path)
        return None if problem is None else f"{problem} (null also allowed)"


class OneOf(Type):
    def __init__(self, *options: Type) -> None:
        self.options = options
        self.name = " or ".join(o.name for o in options)

    def check(self, value: Any, path: str) -> str | None:
        if any(o.check(value, path) is None for o in self.options):
            return None
        return f"{path}: expected {self.name}, got {_got(value)}"


class ListOf(Type):
    def __init__(self, item: Type) -> None:
        self.item = item
        self.name = f"a list of {item.name}"

    def check(self, value: Any, path: str) -> str | None:
        if not isinstance(value, list):
            return f"{path}: expected {self.name}, got {_got(value)}"
        numbers = isinstance(self.item, _Num)
        for i, item in enumerate(value):
            # fast path for the long lists of step times: a finite float or an int
            kind = type(item)
            if numbers and ((kind is float and item - item == 0.0) or kind is int):
                continue
            problem = self.item.check(item, f"{path}[{i}]")
            if problem:
                return problem
        return None


class Matrix(Type):
    """A non-empty list of equally long lists of numbers (e.g. ranks x steps)."""

    name = "a non-empty list of equally long lists of finite numbers"

    def check(self, value: Any, path: str) -> str | None:
        problem = ListOf(ListOf(NUM)).check(value, path)
        if problem:
            return problem
        if not value or len({len(row) for row in value}) != 1 or not value[0]:
            return f"{path}: expected {self.name}, got rows of lengths {[len(r) for r in value]}"
        return None


class MapOf(Type):
    """An object with string keys and values of one type."""

    def __init__(self, value: Type) -> None:
        self.value = value
        self.name = f"an object of {value.name}"

    def check(self, value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return f"{path}: expected {self.name}, got {_got(value)}"
        for key, item in value.items():
            problem = self.value.check(item, f"{path}.{key}")
            if problem:
                return problem
        return None


@dataclasses.dataclass(frozen=True)
class Field:
    """One known field: its type, and the statuses under which it must be present.

    `required` lists statuses ("*" for all) under which a record of one of `kinds`
    must have it. `when_ok` is a stricter type for ok records, whose numbers every
    report reads, where a failed or diverged run may hold nulls.
    """

    type: Type
    required: tuple[str, ...] = ()
    kinds: tuple[str, ...] = KINDS  # record kinds the requirement applies to
    when_ok: Type | None = None


class Obj(Type):
    """An object with known fields (type-checked) and any other fields (tolerated)."""

    name = "an object"

    def __init__(self, fields: Mapping[str, Type | Field]) -> None:
        self.fields = {k: v if isinstance(v, Field) else Field(v) for k, v in fields.items()}

    def check(self, value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return f"{path}: expected {self.name}, got {_got(value)}"
        for key, field in self.fields.items():
            if key in value:
                problem = field.type.check(value[key], f"{path}.{key}" if path else key)
                if problem:
                    return problem
        return None


STR, INT, NUM, BOOL, ANY = _Str(), _Int(), _Num(), _Bool(), _Any()
COUNT = _Int(minimum=0)
NAME = _Str(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", "a name (letters, digits, _ . + -)")
LOSS = OneOf(NUM, Enum(*NONFINITE_MARKERS))  # a diverged run may hold markers
NUMS = ListOf(NUM)
ARGV = ListOf(STR)
# Labels: free-form KEY=VALUE from the command line; known numeric ones are numbers.
LABEL_VALUE = OneOf(STR, NUM, BOOL)
LABEL_NUMBERS: dict[str, type[int] | type[float]] = {
    "repeat": int,
    "launched_at": float,
    "link_rate_bps": int,
}
LABEL_TYPES: dict[str, Type] = {"repeat": COUNT, "launched_at": NUM, "link_rate_bps": _Int(1)}
ISO_TIME = _Str(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)", "an ISO-8601 time")

SPEC = Obj(
    {
        "model": STR,
        "dataset": STR,
        "data_path": Opt(STR),
        "batch_size": _Int(1),
        "scaling": STR,
        "epochs": _Int(1),
        "max_steps": Opt(_Int(1)),
        "warmup_steps": COUNT,
        "optimizer": STR,
        "lr": NUM,
        "lr_rule": STR,
        "lr_base_batch": Opt(_Int(1)),
        "lr_warmup_epochs": NUM,
        "lr_schedule": STR,
        "momentum": NUM,
        "weight_decay": NUM,
        "seed": COUNT,
        "threads": _Int(1),
        "precision": STR,
        "device": STR,
        "bucket_mb": NUM,
        "grad_sync": BOOL,
        "grad_compression": STR,
        "augment": BOOL,
        "bn_momentum": NUM,
        "bn_eps": NUM,
        "bn_buffers": STR,
        "test_fraction": NUM,
        "synthetic_samples": _Int(1),
    }
)

ENV = Obj(
    {
        "hostname": STR,
        "platform": STR,
        "python": STR,
        "cpu": STR,
        "cpu_count": Opt(_Int(1)),
        "gpus": ListOf(MapOf(Opt(OneOf(STR, NUM)))),
        "libraries": MapOf(Opt(STR)),
        "git": Obj({"commit": Opt(STR), "dirty": Opt(BOOL)}),
        "env_vars": MapOf(STR),
        "executable": STR,
    }
)

EPOCH = Obj(
    {
        "epoch": COUNT,
        "steps": COUNT,
        "samples_seen": COUNT,
        "train_loss": Opt(LOSS),
        "test_loss": Opt(LOSS),
        "test_accuracy": Opt(NUM),
        "train_time_s": Opt(NUM),
        "samples_per_s": Opt(NUM),
    }
)

LAUNCHER = Obj(
    {
        "name": STR,
        "argv": OneOf(ARGV, ListOf(ARGV)),
        "runner_argv": ARGV,
        "parent_argv": Opt(ARGV),
    }
)

_TRAIN_OK = ("ok",)
_FINGERPRINTS = Obj(
    {
        "init_weights": STR,
        "init_weights_ranks_agree": BOOL,
        "final_weights": STR,
        "final_weights_ranks_agree": BOOL,
        "data_order": STR,
        "data_order_per_rank": ListOf(STR),
    }
)
_GPU_MB = Opt(ListOf(Opt(NUM)))
_RESOURCES = Obj(
    {"peak_rss_mb": ListOf(Opt(NUM)), "cpu_utilisation": ListOf(Opt(NUM)), "peak_gpu_mb": _GPU_MB}
)
_RESOURCES_OK = Obj({"peak_rss_mb": NUMS, "cpu_utilisation": NUMS, "peak_gpu_mb": Opt(NUMS)})

# Version 1: the layout written before the record gained timestamps and machine info.
FIELDS_V1: dict[str, Field] = {
    "schema_version": Field(_Int(1), ("*",)),
    "run_id": Field(STR, ("*",)),
    "created": Field(STR),
    "status": Field(Enum(*STATUSES), ("*",)),
    "error": Field(Opt(STR)),
    "kind": Field(Enum(*KINDS)),
    "engine": Field(NAME, ("*",)),
    "spec": Field(SPEC, ("*",)),
    "world_size": Field(_Int(1), ("*",)),
    "labels": Field(MapOf(STR)),
    "launcher": Field(LAUNCHER),
    "env": Field(ENV),
    "engine_options": Field(MapOf(STR)),
    "engine_versions": Field(MapOf(ANY)),
    "knobs": Field(MapOf(ANY)),
    "threads": Field(MapOf(ANY)),
    "hosts": Field(ListOf(STR)),
    "nodes": Field(_Int(1)),
    "per_worker_batch": Field(_Int(1)),
    "global_batch": Field(_Int(1)),
    "steps_per_epoch": Field(COUNT),
    "steps": Field(COUNT),
    "timed_steps": Field(COUNT),
    "lr_peak": Field(NUM),
    "dataset": Field(
        Obj(
            {
                "name": STR,
                "train_samples": COUNT,
                "test_samples": COUNT,
                "input_shape": ListOf(COUNT),
                "fingerprint": STR,
            }
        )
    ),
    "fingerprints": Field(_FINGERPRINTS),
    # A non-finite float is stored as null (records.finite); reports read ok records only,
    # so only those must hold numbers throughout.
    "resources": Field(_RESOURCES, when_ok=_RESOURCES_OK),
    "input_pipeline": Field(
        Obj({"ms_per_step": ListOf(Opt(NUM)), "augmented": BOOL, "vs_step_time": Opt(NUM)}),
        when_ok=Obj({"ms_per_step": NUMS, "augmented": BOOL, "vs_step_time": Opt(NUM)}),
    ),
    "nonfinite_fields": Field(ListOf(STR)),
    "diverged_at_step": Field(Opt(COUNT)),
    # Required (and so never null) in an ok training record: every report reads them.
    "step_times_s": Field(ListOf(ListOf(Opt(NUM))), _TRAIN_OK, ("train",), when_ok=Matrix()),
    "throughput": Field(Opt(NUM), _TRAIN_OK, ("train",), when_ok=NUM),
    "per_rank_throughput": Field(ListOf(Opt(NUM)), when_ok=NUMS),
    "loop_throughput": Field(Opt(NUM)),
    "flops_per_sample": Field(Opt(Obj({"forward": NUM, "train": NUM}))),
    "epochs": Field(ListOf(EPOCH)),
    "step_losses": Field(ListOf(Opt(LOSS))),
    "final_accuracy": Field(Opt(NUM)),
    "final_loss": Field(Opt(LOSS)),
    "wall_time_s": Field(Opt(NUM)),
    "saved": Field(MapOf(ANY)),
    "results": Field(ListOf(Obj({"bytes": COUNT, "busbw_gbps": NUM, "latency_s": NUM}))),
}
# Version 2: wall times named for what they measure, timestamps, full machine info,
# numbers as numbers (bench/records.py MIGRATIONS[1] turns a v1 record into this).
FIELDS_V2: dict[str, Field] = {
    k: v for k, v in FIELDS_V1.items() if k not in ("wall_time_s", "labels", "env", "epochs")
}
FIELDS_V2.update(
    {
        # the spec of a training run (RunSpec), or of a collective run (op and its sizes)
        "spec": Field(
            Obj(
                {
                    **SPEC.fields,
                    "allow_tf32": BOOL,
                    "op": STR,
                    "dtype": STR,
                    "sizes": ListOf(COUNT),
                    "iters": _Int(1),
                    "warmup": COUNT,
                }
            ),
            ("*",),
        ),
        "labels": Field(MapOf(LABEL_VALUE)),
        "env": Field(
            Obj(
                {
                    **ENV.fields,
                    "git": Field(
                        Obj(
                            {
                                "commit": Opt(STR),
                                "dirty": Opt(BOOL),
                                "branch": Opt(STR),
                                "commit_time": Opt(STR),
                            }
                        )
                    ),
                    "machine": Field(Obj({"cpu": MapOf(ANY), "cpu_source": STR})),
                }
            )
        ),
        "fingerprints": Field(
            Obj({**_FINGERPRINTS.fields, "init_optimizer_state_tensors": Field(COUNT)})
        ),
        "resources": Field(
            Obj({**_RESOURCES.fields, "staged_batches_gpu_mb": Field(_GPU_MB)}),
            when_ok=Obj({**_RESOURCES_OK.fields, "staged_batches_gpu_mb": Field(_GPU_MB)}),
        ),
        # the timed windows (runners/protocol.py): seconds per rank, steps, and global
        # samples/s of each (timed by its slowest rank), and how measuring stopped
        "window_times_s": Field(ListOf(ListOf(Opt(NUM)))),
        "window_steps": Field(ListOf(COUNT)),
        "window_throughput": Field(ListOf(Opt(NUM))),
        "measurement": Field(
            Obj(
                {
                    "window_steps": _Int(1),
                    "windows": COUNT,
                    "step_clock": STR,
                    "target_ci": NUM,
                    "cap_s": NUM,
                    "stopped_by": STR,
                    "window_median": Opt(NUM),
                    "window_ci": ListOf(Opt(NUM)),
                    "ci_half_width": Opt(NUM),
                    "training_timed_steps": COUNT,
                    "extra_steps": COUNT,
                }
            )
        ),
        # what else used the CPUs while each rank was timed (bench/contention.py)
        "contention": Field(
            ListOf(
                Opt(
                    Obj(
                        {
                            "seconds": NUM,
                            "other_cpu_cores": Opt(NUM),
                            "own_cpu_cores": Opt(NUM),
                            "steal_fraction": NUM,
                            "loadavg_1m": Opt(NUM),
                            "cpu_count": Opt(_Int(1)),
                            "contended": BOOL,
                        }
                    )
                )
            )
        ),
        "contended": Field(BOOL),
        "results": Field(
            ListOf(
                Obj(
                    {
                        "bytes": COUNT,
                        "latency_s": NUM,
                        "latency_p95_s": NUM,
                        "algbw_gbps": NUM,
                        "busbw_gbps": NUM,
                    }
                )
            )
        ),
        # Horovod's timeline summary when the run wrote one (bench/timeline.py)
        "timeline": Field(MapOf(ANY)),
        "epochs": Field(ListOf(Obj({**EPOCH.fields, "elapsed_s": Field(Opt(NUM))}))),
        "knobs": Field(Obj({"cycle_time_ms": Opt(NUM)})),
        # the runner's start (entry) and stop (record written), UTC
        "run_start": Field(ISO_TIME),
        "run_stop": Field(ISO_TIME),
        # wall time of the training phase: first batch prepared to last result gathered
        # (evaluation and input pipeline included; start-up and process groups not)
        "training_wall_s": Field(Opt(NUM)),
        # from the sweep's launch to the record written (label launched_at), runner side
        "launch_to_stop_s": Field(Opt(NUM)),
        # from the sweep's launch to the launcher's exit, in records the sweep writes
        "launch_to_exit_s": Field(Opt(NUM)),
        # more worker threads on a host than usable CPUs (env.oversubscription)
        "oversubscribed": Field(BOOL),
        "cpu_budget": Field(
            Obj({"workers_on_host": COUNT, "threads_per_worker": COUNT, "usable_cpus": COUNT})
        ),
        # the measurement protocol (records.PROTOCOL_VERSION); absent: version 1
        "protocol_version": Field(_Int(1)),
        # a record of kind "prediction" (bench/predict.py): the model's figures at
        # `workers` on a link, with the inputs it used; measured tables never read it
        "predicted": Field(
            Obj(
                {
                    "variant": STR,
                    "workers": _Int(1),
                    "link_rate_bps": Opt(_Int(1)),
                    "throughput": NUM,
                    "throughput_interval": NUMS,
                    "efficiency": NUM,
                    "efficiency_interval": NUMS,
                    "step_time_s": NUM,
                    "inputs": MapOf(ANY),
                }
            )
        ),
        # the network the run crossed when it was emulated (bench/netns.py): the
        # token-bucket rate in bits/s, both directions, and the tbf settings
        "link": Field(
            Obj(
                {
                    "rate_bps": _Int(1),
                    "emulated": BOOL,
                    "qdisc": STR,
                    "burst_bytes": COUNT,
                    "latency": STR,
                }
            )
        ),
    }
)

SCHEMAS: dict[int, dict[str, Field]] = {1: FIELDS_V1, 2: FIELDS_V2}


def validate(record: Mapping[str, Any], version: int | None = None) -> str | None:
    """What is wrong with `record` under its schema version (field path first), or None.

    Checks, in order: required fields for its status and kind, then each known
    field's type. Only the first problem is returned: one line per bad record.
    """
    version = record.get("schema_version") if version is None else version
    if not isinstance(version, int) or version not in SCHEMAS:
        return f"schema_version: no schema for {version!r}"
    fields = SCHEMAS[version]
    status = record.get("status")
    problem = fields["status"].type.check(status, "status")
    if problem:
        return problem
    kind = record.get("kind", "train")
    missing = [
        name
        for name, field in fields.items()
        if ("*" in field.required or (status in field.required and kind in field.kinds))
        and name not in record
    ]
    if missing:
        return f"missing field(s) for status {status}: {', '.join(missing)}"
    for name, field in fields.items():
        if name not in record:
            continue
        strict = field.when_ok if status == "ok" and field.when_ok else None
        problem = (strict or field.type).check(record[name], name)
        if problem:
            return problem + (" in an ok record" if strict else "")
    for key, ltype in LABEL_TYPES.items():
        labels = record.get("labels")
        if version >= 2 and isinstance(labels, dict) and key in labels:
            problem = ltype.check(labels[key], f"labels.{key}")
            if problem:
                return problem
    return None
