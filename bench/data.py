"""Datasets as numpy arrays behind one interface, and the engine-independent data order.

Nothing downloads: `digits` ships inside scikit-learn, `synthetic` is generated
from the seed, and `mnist` is read from IDX files the user points at. The data
order is one numpy permutation per (seed, epoch), sharded by rank the same way
for every engine, so that N workers x batch B see exactly the samples that
1 worker x batch N*B sees, step by step.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Distinct stream tags so that the split, the epoch orders and synthetic data
# never share random numbers even with the same user seed.
_SPLIT_STREAM = 1
_ORDER_STREAM = 2
_SYNTH_STREAM = 3


class DataError(ValueError):
    """A dataset that cannot be loaded or does not fit; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    name: str
    train_x: np.ndarray  # float32, [N, C, H, W] or [N, D]
    train_y: np.ndarray  # int64, [N]
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def fingerprint(self) -> str:
        """Hash of the arrays themselves: proves every engine trained on the same bytes."""
        h = hashlib.sha256()
        for arr in (self.train_x, self.train_y, self.test_x, self.test_y):
            h.update(str(arr.shape).encode())
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()[:16]


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *stream])))


def _standardise(train_x: np.ndarray, test_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale by the training set's mean and std (scalars), so the test set leaks nothing."""
    mean, std = float(train_x.mean()), float(train_x.std()) or 1.0
    return (
        ((train_x - mean) / std).astype(np.float32),
        ((test_x - mean) / std).astype(np.float32),
    )


def _split(x: np.ndarray, y: np.ndarray, seed: int, test_fraction: float, name: str) -> Dataset:
    order = _rng(seed, _SPLIT_STREAM).permutation(len(x))
    n_test = round(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    tx, vx = _standardise(x[train], x[test])
    return Dataset(
        name, tx, y[train].astype(np.int64), vx, y[test].astype(np.int64), int(y.max()) + 1
    )


def load_digits(seed: int, test_fraction: float, **_: object) -> Dataset:
    """scikit-learn's 1,797 handwritten 8x8 digits, split by the seed."""
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    x = np.asarray(bunch.images, dtype=np.float32)[:, None, :, :] / 16.0
    return _split(x, np.asarray(bunch.target), seed, test_fraction, "digits")


def load_synthetic(
    seed: int,
    test_fraction: float,
    input_shape: tuple[int, ...] = (1, 28, 28),
    num_classes: int = 10,
    samples: int = 2048,
    **_: object,
) -> Dataset:
    """Fixed random inputs and labels: for throughput, where accuracy means nothing."""
    rng = _rng(seed, _SYNTH_STREAM)
    x = rng.standard_normal((samples, *input_shape), dtype=np.float32)
    y = rng.integers(0, num_classes, samples)
    return _split(x, y, seed, test_fraction, "synthetic")


_MNIST_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped), checking its header against its size."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataError(f"{path} is not an unsigned-byte IDX file (bad magic number)")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = raw[4 + 4 * ndim :]
    if len(body) != int(np.prod(dims)):
        raise DataError(
            f"{path} is truncated or corrupt: header says {dims}, body has {len(body)} bytes"
        )
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def load_mnist(
    seed: int, test_fraction: float, data_path: str | None = None, **_: object
) -> Dataset:
    """MNIST from the four standard IDX files (plain or .gz) in `data_path`; standard split."""
    if not data_path:
        raise DataError(
            "dataset 'mnist' needs --data-path DIR, a directory holding "
            + ", ".join(_MNIST_FILES.values())
            + " (plain or .gz); nothing is downloaded"
        )
    root = Path(data_path)
    arrays = {}
    for key, stem in _MNIST_FILES.items():
        candidates = [root / stem, root / (stem + ".gz")]
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            raise DataError(
                f"MNIST file {stem} (or {stem}.gz) not found in {root}; put the four IDX files "
                f"{', '.join(_MNIST_FILES.values())} there (nothing is downloaded)"
            )
        arrays[key] = read_idx(found)
    train_x = arrays["train_x"].astype(np.float32)[:, None] / 255.0
    test_x = arrays["test_x"].astype(np.float32)[:, None] / 255.0
    tx, vx = _standardise(train_x, test_x)
    return Dataset(
        "mnist", tx, arrays["train_y"].astype(np.int64), vx, arrays["test_y"].astype(np.int64), 10
    )


LOADERS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "synthetic": load_synthetic,
    "mnist": load_mnist,
}


def load_dataset(
    name: str,
    *,
    seed: int,
    test_fraction: float,
    data_path: str | None = None,
    input_shape: tuple[int, ...] = (1, 28, 28),
    num_classes: int = 10,
    samples: int = 2048,
) -> Dataset:
    """Load a dataset by name; synthetic data takes the model's input shape."""
    if name not in LOADERS:
        raise DataError(f"unknown dataset {name!r}; choose one of: {', '.join(sorted(LOADERS))}")
    return LOADERS[name](
        seed=seed,
        test_fraction=test_fraction,
        data_path=data_path,
        input_shape=input_shape,
        num_classes=num_classes,
        samples=samples,
    )


# -- data order ---------------------------------------------------------------------


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The one global sample order of this epoch, identical for every engine."""
    return _rng(seed, _ORDER_STREAM, epoch).permutation(n)


def steps_per_epoch(n_train: int, global_batch: int) -> int:
    """Whole global batches per epoch (the remainder is dropped, as every engine sees it)."""
    steps = n_train // global_batch
    if steps < 1:
        raise DataError(
            f"the training split has {n_train} samples, fewer than one global batch of "
            f"{global_batch}; lower the batch size or the number of workers"
        )
    return steps


def shard(order: np.ndarray, step: int, rank: int, per_worker: int, world: int) -> np.ndarray:
    """Indices rank `rank` trains on at `step`: its contiguous slice of the global batch."""
    start = step * per_worker * world + rank * per_worker
    return order[start : start + per_worker]


def eval_shard(n: int, rank: int, world: int) -> np.ndarray:
    """Test indices evaluated by `rank`; the shards partition the whole test set."""
    return np.arange(rank, n, world)
