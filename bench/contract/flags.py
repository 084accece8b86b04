"""Command-line flags for every field of the run spec, shared by the runners and `bench run`."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import typing
from typing import Any

import models
from bench.contract.spec import RunSpec

_FLAG_HELP = {
    "model": "reference model (see `bench models`)",
    "dataset": "synthetic | digits | mnist | cifar10 | sonnets",
    "data_path": "directory holding dataset files (mnist: the four IDX files; cifar10: the binary batches)",
    "batch_size": "per-worker batch (weak scaling) or global batch (strong scaling)",
    "max_steps": "stop after this many training steps in total",
    "warmup_steps": "first steps excluded from timing",
    "lr": "learning rate at the base global batch",
    "lr_base_batch": "global batch at which --lr applies",
    "bucket_mb": "gradient bucket / fusion buffer size in MB, applied to every engine",
    "threads": "intra-op threads per worker (OMP/MKL and the framework's own)",
    "grad_sync": "false: skip gradient averaging (compute-only twin for communication cost)",
    "augment": "the dataset's standard training augmentation (cifar10: pad-4 crop, flip)",
    "grad_compression": "gradients cast to fp16 for the allreduce (horovod, ddp)",
    "bn_momentum": "BatchNorm momentum, torch's convention (paddle gets 1 - m)",
    "bn_buffers": "BatchNorm running statistics: local per rank, or broadcast from rank 0 each step",
    "allow_tf32": "true: fp32 matmuls and convolutions may run in TF32 on GPUs (every engine alike)",
}

# Defaults whose value would mislead in a help text: resolved later (per machine, per
# model, per run) or None, which a reader cannot decode.
_DEFAULT_WORDS = {
    "device": "auto: cuda where a CUDA GPU is visible, else cpu",
    "dataset": "the model's own, as `bench models` lists",
    "data_path": "none; mnist and cifar10 need one",
    "max_steps": "none: every --epochs",
    "lr_base_batch": "the 1-worker global batch",
}


def add_spec_flags(parser: argparse.ArgumentParser, defaults: RunSpec | None = None) -> None:
    """Add one --flag per RunSpec field; values are parsed again by RunSpec.from_dict."""
    defaults = defaults or RunSpec()
    hints = typing.get_type_hints(RunSpec)
    group = parser.add_argument_group("run spec (identical for every engine)")
    for f in dataclasses.fields(RunSpec):
        hint = hints[f.name]
        base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        kind = base[0]
        flag = "--" + f.name.replace("_", "-")
        # argparse's default stays None so that spec_from_args can tell a flag left unset;
        # the help states the spec's default, once, in the words the flag takes
        value = getattr(defaults, f.name)
        words = _DEFAULT_WORDS.get(f.name) if value == f.default else None
        shown = words or _shown(value)
        kwargs: dict[str, Any] = {
            "dest": f.name,
            "default": None,
            "help": (_FLAG_HELP.get(f.name, "") + f" (default: {shown})").strip(),
        }
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            kwargs["choices"] = [m.value for m in kind]
        elif kind is bool:
            kwargs["type"] = _parse_bool
            kwargs["metavar"] = "true|false"
        elif kind in (int, float):
            kwargs["type"] = kind
        group.add_argument(flag, **kwargs)


def _shown(default: object) -> str:
    """A default as its flag takes it: an enum's value, a bool as true|false."""
    if isinstance(default, enum.Enum):
        return str(default.value)
    if isinstance(default, bool):
        return str(default).lower()
    return str(default)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def spec_from_args(args: argparse.Namespace, base: RunSpec | None = None) -> RunSpec:
    """The spec given by parsed flags on top of `base` (flags left unset keep base's values)."""
    base = base or RunSpec()
    data = base.to_dict()
    for name in data:
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    # another model without a dataset: that model's default, unless base chose one
    if (
        getattr(args, "dataset", None) is None
        and data["model"] != base.model
        and models.get(base.model).default_dataset == base.dataset
    ):
        data["dataset"] = ""
    return RunSpec.from_dict(data)


def differing(spec: dict[str, Any]) -> list[str]:
    """The flags that set every field of `spec` (a record's, as JSON) that differs from
    this machine's default spec, in field order; a field it cannot read is left out."""
    defaults = RunSpec().to_dict()
    argv = []
    for name, value in spec.items():
        if name not in defaults or value == defaults[name] or value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        argv += ["--" + name.replace("_", "-"), text]
    return argv
