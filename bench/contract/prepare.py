"""Checks that need no process group: run on every rank, and by `bench run` before launching."""

from __future__ import annotations

from collections.abc import Callable

import models
from bench.contract import data as bdata
from bench.contract.spec import Device, RunSpec, detect_device
from bench.core.errors import DataError, InputError, SpecError


def prepare(
    spec: RunSpec, world_size: int, load: Callable[..., bdata.Dataset] | None = None
) -> tuple[models.ModelDef, bdata.Dataset, int]:
    """Check everything about the input that does not need a process group.

    Returns (model, dataset, steps per epoch) or raises InputError naming the problem.
    `load` replaces bdata.load_dataset (the sweep's checks pass a cached one: the
    same data checked at several worker counts is generated once).
    """
    try:
        spec.validate(world_size)
        model = models.get(spec.model)
        dataset = (load or bdata.load_dataset)(
            spec.dataset,
            seed=spec.seed,
            test_fraction=spec.test_fraction,
            data_path=spec.data_path,
            input_shape=model.synthetic_shape,
            samples=spec.synthetic_samples,
            tokens=model.tokens,
        )
        if dataset.tokens != model.tokens:
            kind = {True: "token sequences", False: "images/feature vectors"}
            fits = sorted(m for m in models.names() if models.get(m).tokens == dataset.tokens)
            raise InputError(
                f"dataset {spec.dataset!r} holds {kind[dataset.tokens]} but model "
                f"{spec.model!r} reads {kind[model.tokens]}; models for this dataset: "
                + ", ".join(fits)
            )
        try:
            model.check_input(dataset.input_shape)
        except ValueError as exc:
            raise InputError(
                f"dataset {spec.dataset!r} does not fit model {spec.model!r}: {exc}"
            ) from None
        spe = bdata.steps_per_epoch(len(dataset.train_y), spec.global_batch(world_size))
    except (SpecError, models.UnknownModelError, DataError) as exc:
        raise InputError(str(exc)) from None
    except ModuleNotFoundError as exc:  # a loader's optional package, absent on this machine
        raise InputError(
            f"model {spec.model!r} on dataset {spec.dataset!r} needs the Python package "
            f"{exc.name!r}, not installed here; install it or choose another --dataset "
            "(synthetic needs nothing)"
        ) from None
    total = total_steps(spec, spe)
    if spec.warmup_steps >= total:
        raise InputError(
            f"warmup_steps={spec.warmup_steps} leaves no timed step: the run has only {total} "
            f"steps ({spe} per epoch at {world_size} worker(s)); lower --warmup-steps or raise --epochs"
        )
    return model, dataset, spe


def total_steps(spec: RunSpec, steps_per_epoch: int) -> int:
    total = steps_per_epoch * spec.epochs
    return min(total, spec.max_steps) if spec.max_steps else total


def check_device(spec: RunSpec) -> None:
    """device=cuda on a machine without a CUDA GPU, refused before anything starts."""
    if spec.device is Device.CUDA and detect_device() is not Device.CUDA:
        raise InputError(
            "device=cuda but no CUDA GPU is visible on this machine (torch.cuda.is_available() "
            "is false); use --device cpu, or auto to pick what is there"
        )
