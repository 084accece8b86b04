from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from bench import data


def test_digits_split_is_fixed_by_seed() -> None:
    a = data.load_digits(seed=0, test_fraction=0.2)
    b = data.load_digits(seed=0, test_fraction=0.2)
    c = data.load_digits(seed=1, test_fraction=0.2)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert len(a.train_y) + len(a.test_y) == 1797
    assert a.input_shape == (1, 8, 8) and a.num_classes == 10
    assert a.train_x.dtype == np.float32 and a.train_y.dtype == np.int64


def test_two_workers_see_exactly_the_one_worker_global_batch() -> None:
    order = data.epoch_order(seed=3, epoch=2, n=1000)
    for step in range(5):
        single = data.shard(order, step, 0, 64, 1)
        pair = np.concatenate([data.shard(order, step, r, 32, 2) for r in range(2)])
        np.testing.assert_array_equal(single, pair)


def test_epoch_orders_differ_by_epoch_and_seed() -> None:
    base = data.epoch_order(0, 0, 100)
    assert sorted(base) == list(range(100))
    assert not np.array_equal(base, data.epoch_order(0, 1, 100))
    assert not np.array_equal(base, data.epoch_order(1, 0, 100))
    np.testing.assert_array_equal(base, data.epoch_order(0, 0, 100))


def test_eval_shards_partition_the_test_set() -> None:
    parts = [data.eval_shard(101, r, 3) for r in range(3)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(101))


def test_too_few_samples_for_one_batch() -> None:
    with pytest.raises(data.DataError, match="fewer than one global batch"):
        data.steps_per_epoch(100, 128)


def _write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> None:
    header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    raw = header + arr.astype(np.uint8).tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(raw))
    else:
        path.write_bytes(raw)


def test_mnist_reads_idx_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    _write_idx(tmp_path / "train-images-idx3-ubyte", rng.integers(0, 255, (20, 28, 28)), gz=True)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", rng.integers(0, 10, 20))
    _write_idx(tmp_path / "t10k-images-idx3-ubyte", rng.integers(0, 255, (5, 28, 28)))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.arange(5))
    ds = data.load_dataset("mnist", seed=0, test_fraction=0.2, data_path=str(tmp_path))
    assert ds.train_x.shape == (20, 1, 28, 28) and ds.test_x.shape == (5, 1, 28, 28)
    np.testing.assert_array_equal(ds.test_y, np.arange(5))


def test_mnist_missing_path_says_what_to_put_where(tmp_path: Path) -> None:
    with pytest.raises(data.DataError, match="needs --data-path"):
        data.load_dataset("mnist", seed=0, test_fraction=0.2)
    with pytest.raises(
        data.DataError, match=r"train-images-idx3-ubyte.*not found in .*nothing is downloaded"
    ):
        data.load_dataset("mnist", seed=0, test_fraction=0.2, data_path=str(tmp_path))


def test_truncated_idx_is_reported(tmp_path: Path) -> None:
    p = tmp_path / "x"
    _write_idx(p, np.zeros((4, 3, 3)))
    p.write_bytes(p.read_bytes()[:-5])
    with pytest.raises(data.DataError, match="truncated or corrupt"):
        data.read_idx(p)


def test_unknown_dataset() -> None:
    with pytest.raises(
        data.DataError, match="unknown dataset 'cifar'; choose one of: digits, mnist, synthetic"
    ):
        data.load_dataset("cifar", seed=0, test_fraction=0.2)
