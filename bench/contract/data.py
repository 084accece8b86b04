"""Datasets as numpy arrays behind one interface, and the engine-independent data order.

Nothing downloads: `digits` ships with this package, `synthetic` is generated
from the seed, and `mnist` and `cifar10` are read from the standard files the
user points at. Augmentation (cifar10) is drawn per (seed, epoch, sample index),
so it is the same pixels whichever rank or batch a sample lands in. The data
order is one numpy permutation per (seed, epoch), sharded by rank the same way
for every engine, so that N workers x batch B see exactly the samples that
1 worker x batch N*B sees, step by step.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.core import streams
from bench.core.errors import DataError
from bench.core.streams import Stream


@dataclasses.dataclass(frozen=True)
class Dataset:
    name: str
    train_x: np.ndarray  # float32, [N, C, H, W] or [N, D]
    train_y: np.ndarray  # int64, [N]
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    # standard training augmentation of this dataset, if it has one: pad-and-crop
    # padding in pixels (random horizontal flips come with it)
    crop_pad: int = 0
    pad_value: tuple[float, ...] = ()  # per channel: what black is after normalisation
    # token sequences (x: int64 ids [N, seq], y: the next token at each position)
    # rather than inputs with one label each
    tokens: bool = False

    @property
    def augments(self) -> bool:
        return self.crop_pad > 0

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


def _standardise(train_x: np.ndarray, test_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale by the training set's mean and std (scalars), so the test set leaks nothing.
    Both float32 arrays are fresh copies of the caller's, and are scaled in place."""
    mean, std = float(train_x.mean()), float(train_x.std()) or 1.0
    # In place, on the copies the split made (the same values as `(x - mean) / std` in
    # float32): a fresh array of ResNet-50's 224x224 synthetic set costs seconds of
    # page faults, twice a worker.
    for x in (train_x, test_x):
        x -= mean
        x /= std
    return train_x, test_x


def _split(x: np.ndarray, y: np.ndarray, seed: int, test_fraction: float, name: str) -> Dataset:
    order = streams.rng(seed, Stream.SPLIT).permutation(len(x))
    n_test = round(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    tx, vx = _standardise(x[train], x[test])
    return Dataset(
        name, tx, y[train].astype(np.int64), vx, y[test].astype(np.int64), int(y.max()) + 1
    )


# scikit-learn's copy of the UCI digits, shipped as 45 KB so that no machine needs
# scikit-learn (GPU nodes often lack it): same values, see bench/contract/corpora/README.md.
DIGITS = Path(__file__).resolve().parent / "corpora" / "digits.npz"


def load_digits(seed: int, test_fraction: float, **_: object) -> Dataset:
    """The 1,797 handwritten 8x8 digits (scikit-learn's set, bundled), split by the seed."""
    with np.load(DIGITS) as arrays:
        images, target = arrays["images"], arrays["target"]
    x = images.astype(np.float32)[:, None, :, :] / 16.0
    return _split(x, target.astype(np.int64), seed, test_fraction, "digits")


def load_synthetic(
    seed: int,
    test_fraction: float,
    input_shape: tuple[int, ...] = (1, 28, 28),
    num_classes: int = 10,
    samples: int = 2048,
    tokens: bool = False,
    values: bool = True,
    **_: object,
) -> Dataset:
    """Fixed random inputs and labels: for throughput, where accuracy means nothing.

    For token models: random ids from a SYNTHETIC_VOCAB vocabulary. Without `values`,
    arrays of the same shapes and types holding none (`outline`).
    """
    if not values:
        return _outline(samples, test_fraction, input_shape, num_classes, tokens)
    rng = streams.rng(seed, Stream.SYNTH)
    if tokens:
        (seq,) = input_shape
        ids = rng.integers(0, SYNTHETIC_VOCAB, (samples, seq + 1))
        return _token_split(ids, seed, test_fraction, "synthetic", SYNTHETIC_VOCAB)
    x = rng.standard_normal((samples, *input_shape), dtype=np.float32)
    y = rng.integers(0, num_classes, samples)
    return _split(x, y, seed, test_fraction, "synthetic")


SYNTHETIC_VOCAB = 64
SONNETS = Path(__file__).resolve().parent / "corpora" / "sonnets.txt"
SONNETS_SEQ = 64  # tokens per training sequence


def _token_split(
    windows: np.ndarray, seed: int, test_fraction: float, name: str, vocab: int
) -> Dataset:
    """Windows of seq+1 ids as (input, next-token target) pairs, split by the seed."""
    order = streams.rng(seed, Stream.SPLIT).permutation(len(windows))
    n_test = round(len(windows) * test_fraction)
    test, train = windows[order[:n_test]], windows[order[n_test:]]
    return Dataset(
        name,
        np.ascontiguousarray(train[:, :-1], dtype=np.int64),
        np.ascontiguousarray(train[:, 1:], dtype=np.int64),
        np.ascontiguousarray(test[:, :-1], dtype=np.int64),
        np.ascontiguousarray(test[:, 1:], dtype=np.int64),
        vocab,
        tokens=True,
    )


def load_sonnets(seed: int, test_fraction: float, **_: object) -> Dataset:
    """Shakespeare's sonnets (bench/corpora, public domain), character-level.

    The vocabulary is the corpus's own sorted characters; the text is cut into
    non-overlapping windows of SONNETS_SEQ+1 characters.
    """
    text = SONNETS.read_text(encoding="utf-8")
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    n = len(ids) // (SONNETS_SEQ + 1)
    windows = ids[: n * (SONNETS_SEQ + 1)].reshape(n, SONNETS_SEQ + 1)
    return _token_split(windows, seed, test_fraction, "sonnets", len(chars))


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


CIFAR10_TRAIN = [f"data_batch_{i}.bin" for i in range(1, 6)]
CIFAR10_TEST = "test_batch.bin"
_CIFAR_RECORD = 1 + 3 * 32 * 32  # label byte, then 1024 red, 1024 green, 1024 blue


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 binary batch file: (uint8 images [N, 3, 32, 32], labels [N])."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % _CIFAR_RECORD:
        raise DataError(
            f"{path} is truncated or not a CIFAR-10 binary batch: {raw.size} bytes is not a "
            f"whole number of {_CIFAR_RECORD}-byte records"
        )
    rows = raw.reshape(-1, _CIFAR_RECORD)
    labels = rows[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise DataError(f"{path}: label {labels.max()} out of range 0-9; not a CIFAR-10 file")
    return rows[:, 1:].reshape(-1, 3, 32, 32), labels


def load_cifar10(
    seed: int, test_fraction: float, data_path: str | None = None, **_: object
) -> Dataset:
    """CIFAR-10 from the standard binary batches at `data_path`; standard split.

    Normalised per channel by the training set's mean and std; training batches get
    the standard augmentation (4-pixel pad and random 32x32 crop, random flip).
    """
    files = [*CIFAR10_TRAIN, CIFAR10_TEST]
    if not data_path:
        raise DataError(
            "dataset 'cifar10' needs --data-path DIR, the directory holding the binary "
            f"batches ({', '.join(files)}; cifar-10-batches-bin/ as unpacked); nothing is "
            "downloaded"
        )
    root = Path(data_path)
    if (root / "cifar-10-batches-bin").is_dir():
        root = root / "cifar-10-batches-bin"
    missing = [f for f in files if not (root / f).is_file()]
    if missing:
        raise DataError(
            f"CIFAR-10 file(s) {', '.join(missing)} not found in {root}; unpack the binary "
            "version (cifar-10-binary.tar.gz) there; nothing is downloaded"
        )
    parts = [read_cifar_batch(root / f) for f in CIFAR10_TRAIN]
    train_u8 = np.concatenate([x for x, _ in parts])
    train_y = np.concatenate([y for _, y in parts])
    test_u8, test_y = read_cifar_batch(root / CIFAR10_TEST)
    mean = train_u8.mean(axis=(0, 2, 3), dtype=np.float64) / 255.0
    std = train_u8.std(axis=(0, 2, 3), dtype=np.float64) / 255.0
    std = np.where(std > 0, std, 1.0)

    def norm(x: np.ndarray) -> np.ndarray:
        out = x.astype(np.float32) / np.float32(255.0)
        out -= mean.astype(np.float32)[None, :, None, None]
        out /= std.astype(np.float32)[None, :, None, None]
        return out

    return Dataset(
        "cifar10",
        norm(train_u8),
        train_y,
        norm(test_u8),
        test_y,
        10,
        crop_pad=4,
        pad_value=tuple(float(v) for v in -mean / std),
    )


@functools.lru_cache(maxsize=2)
def _augment_draws(seed: int, epoch: int, n: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Crop offsets [2, n] and flips [n] of every training sample this epoch (drawn once)."""
    rng = streams.rng(seed, Stream.AUGMENT, epoch)
    return rng.integers(0, 2 * pad + 1, size=(2, n)), rng.random(n) < 0.5


def augment(dataset: Dataset, idx: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """The training inputs of samples `idx` this epoch, augmented if the dataset is.

    Crop offsets and flips are drawn for every training index at once from
    (seed, epoch), then looked up by index: a sample's pixels do not depend on the
    rank, batch or engine that trains on it.
    """
    x = dataset.train_x[idx]
    if not dataset.augments:
        return x
    pad = dataset.crop_pad
    offsets, flips = _augment_draws(seed, epoch, len(dataset.train_y), pad)
    oy, ox, flip = offsets[0][idx], offsets[1][idx], flips[idx]
    b, c, h, w = x.shape
    padded = np.empty((b, c, h + 2 * pad, w + 2 * pad), dtype=x.dtype)
    padded[:] = np.asarray(dataset.pad_value, dtype=x.dtype)[None, :, None, None]
    padded[:, :, pad : pad + h, pad : pad + w] = x
    windows = np.lib.stride_tricks.sliding_window_view(padded, (h, w), axis=(2, 3))
    out = windows[np.arange(b), :, oy, ox]  # [b, c, h, w]
    out[flip] = out[flip][..., ::-1]
    return np.ascontiguousarray(out)


LOADERS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "synthetic": load_synthetic,
    "mnist": load_mnist,
    "cifar10": load_cifar10,
    "sonnets": load_sonnets,
}


def outline(name: str, **options: Any) -> Dataset:
    """What `load_dataset(name, **options)` returns, for checks that read only sizes
    (`bench run`'s plan).

    Synthetic data comes as arrays of the right shapes and types holding no values
    (zeros, broadcast: no memory), since generating ResNet-50's 224x224 set takes
    seconds and gigabytes; any other dataset is loaded, as its files must be checked.
    """
    if name != "synthetic":
        return load_dataset(name, **options)
    return load_synthetic(**options, values=False)


def _outline(
    samples: int, test_fraction: float, shape: tuple[int, ...], classes: int, tokens: bool
) -> Dataset:
    """The synthetic set's arrays as `load_synthetic` splits them, holding no values."""
    sizes = (samples - round(samples * test_fraction), round(samples * test_fraction))
    if tokens:
        ids = [_nothing((n, *shape), np.int64) for n in sizes]  # inputs and targets alike
        return Dataset("synthetic", ids[0], ids[0], ids[1], ids[1], SYNTHETIC_VOCAB, tokens=True)
    x = [_nothing((n, *shape), np.float32) for n in sizes]
    y = [_nothing((n,), np.int64) for n in sizes]
    return Dataset("synthetic", x[0], y[0], x[1], y[1], classes)


def _nothing(shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    return np.broadcast_to(np.zeros((), dtype), shape)


def load_dataset(
    name: str,
    *,
    seed: int,
    test_fraction: float,
    data_path: str | None = None,
    input_shape: tuple[int, ...] = (1, 28, 28),
    num_classes: int = 10,
    samples: int = 2048,
    tokens: bool = False,
) -> Dataset:
    """Load a dataset by name; synthetic data takes the model's input shape and kind."""
    if name not in LOADERS:
        raise DataError(f"unknown dataset {name!r}; choose one of: {', '.join(sorted(LOADERS))}")
    return LOADERS[name](
        seed=seed,
        test_fraction=test_fraction,
        data_path=data_path,
        input_shape=input_shape,
        num_classes=num_classes,
        samples=samples,
        tokens=tokens,
    )


# -- data order ---------------------------------------------------------------------


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The one global sample order of this epoch, identical for every engine."""
    return streams.rng(seed, Stream.ORDER, epoch).permutation(n)


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
