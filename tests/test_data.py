from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from bench.contract import data


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
        data.DataError,
        match="unknown dataset 'imagenet'; choose one of: cifar10, digits, mnist, sonnets, synthetic",
    ):
        data.load_dataset("imagenet", seed=0, test_fraction=0.2)


# -- CIFAR-10 ------------------------------------------------------------------------


def write_cifar(root: Path, per_file: int = 20, seed: int = 0) -> np.ndarray:
    """Standard-format CIFAR-10 binary batches with random pixels; returns the test images."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    test = None
    for name in [*data.CIFAR10_TRAIN, data.CIFAR10_TEST]:
        images = rng.integers(0, 256, (per_file, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, 10, per_file, dtype=np.uint8)
        rows = np.concatenate([labels[:, None], images.reshape(per_file, -1)], axis=1)
        (root / name).write_bytes(rows.tobytes())
        test = images
    assert test is not None
    return test


def test_cifar10_reader_layout_and_normalisation(tmp_path: Path) -> None:
    test_u8 = write_cifar(tmp_path / "cifar-10-batches-bin")
    ds = data.load_dataset("cifar10", seed=0, test_fraction=0.2, data_path=str(tmp_path))
    assert ds.train_x.shape == (100, 3, 32, 32) and ds.test_x.shape == (20, 3, 32, 32)
    assert ds.train_x.dtype == np.float32 and ds.num_classes == 10 and ds.augments
    # per-channel standardisation by the training set
    np.testing.assert_allclose(ds.train_x.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(ds.train_x.std(axis=(0, 2, 3)), 1, atol=1e-4)
    # channel planes stay in R, G, B order: the test images map back pixel for pixel
    for c in range(3):
        a = test_u8[:, c].astype(np.float64).ravel()
        b = ds.test_x[:, c].astype(np.float64).ravel()
        assert np.corrcoef(a, b)[0, 1] > 0.9999


def test_cifar10_bad_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(data.DataError, match="needs --data-path"):
        data.load_dataset("cifar10", seed=0, test_fraction=0.2)
    write_cifar(tmp_path)
    (tmp_path / "data_batch_3.bin").unlink()
    with pytest.raises(data.DataError, match=r"data_batch_3\.bin not found"):
        data.load_dataset("cifar10", seed=0, test_fraction=0.2, data_path=str(tmp_path))
    write_cifar(tmp_path)
    p = tmp_path / "test_batch.bin"
    p.write_bytes(p.read_bytes()[:-7])
    with pytest.raises(data.DataError, match="truncated or not a CIFAR-10 binary batch"):
        data.load_dataset("cifar10", seed=0, test_fraction=0.2, data_path=str(tmp_path))


def _augment_reference(ds: data.Dataset, i: int, oy: int, ox: int, flip: bool) -> np.ndarray:
    """One sample by hand: pad with black, crop at (oy, ox), maybe mirror."""
    pad = ds.crop_pad
    img = np.empty((3, 32 + 2 * pad, 32 + 2 * pad), dtype=np.float32)
    for c in range(3):
        img[c] = ds.pad_value[c]
    img[:, pad:-pad, pad:-pad] = ds.train_x[i]
    crop = img[:, oy : oy + 32, ox : ox + 32]
    return crop[:, :, ::-1] if flip else crop


def test_augmentation_is_per_sample_index_and_standard(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    ds = data.load_dataset("cifar10", seed=0, test_fraction=0.2, data_path=str(tmp_path))
    idx = np.arange(len(ds.train_y))
    full = data.augment(ds, idx, seed=7, epoch=3)
    # the same sample gets the same pixels in any batch, in any position
    for part in (idx[::-1][:13], idx[40:47], np.array([5])):
        np.testing.assert_array_equal(data.augment(ds, part, seed=7, epoch=3), full[part])
    # every sample is one of the 9x9x2 standard pad-4 crops (with or without a flip)
    for i in (0, 17, 99):
        matches = [
            (oy, ox, f)
            for oy in range(9)
            for ox in range(9)
            for f in (False, True)
            if np.array_equal(full[i], _augment_reference(ds, i, oy, ox, f))
        ]
        assert matches, f"sample {i} is not a pad-4 crop of itself"
    # a new epoch or seed draws anew; black padding shows up where crops reach the edge
    assert not np.array_equal(full, data.augment(ds, idx, seed=7, epoch=4))
    assert not np.array_equal(full, data.augment(ds, idx, seed=8, epoch=3))
    assert np.isclose(full[:, 0], ds.pad_value[0]).any()
    # datasets without augmentation come back untouched
    digits = data.load_dataset("digits", seed=0, test_fraction=0.2)
    np.testing.assert_array_equal(data.augment(digits, idx[:5], 0, 0), digits.train_x[:5])


# -- text ----------------------------------------------------------------------------


def test_sonnets_corpus_as_next_character_pairs() -> None:
    ds = data.load_dataset("sonnets", seed=0, test_fraction=0.2)
    assert ds.tokens and ds.train_x.dtype == np.int64 and ds.input_shape == (data.SONNETS_SEQ,)
    # the target is the input shifted by one character
    np.testing.assert_array_equal(ds.train_x[:, 1:], ds.train_y[:, :-1])
    assert ds.num_classes == len(set(data.SONNETS.read_text())) == 61
    assert len(ds.train_y) + len(ds.test_y) == len(data.SONNETS.read_text()) // 65


def test_models_and_datasets_of_the_wrong_kind_are_refused() -> None:
    from bench.contract.prepare import prepare
    from bench.contract.spec import RunSpec
    from bench.core.errors import InputError

    with pytest.raises(InputError, match="model 'mlp' reads images/feature vectors; models"):
        prepare(RunSpec(model="mlp", dataset="sonnets"), 1)
    with pytest.raises(InputError, match="holds images/feature vectors but model 'transformer'"):
        prepare(RunSpec(model="transformer", dataset="digits"), 1)
    # without a dataset, each model gets its own
    assert RunSpec(model="transformer").dataset == "sonnets"
    assert RunSpec(model="resnet18").dataset == "synthetic"


def test_bundled_digits_equal_scikit_learns() -> None:
    sk = pytest.importorskip("sklearn.datasets").load_digits()
    with np.load(data.DIGITS) as arrays:
        np.testing.assert_array_equal(arrays["images"], sk.images)
        np.testing.assert_array_equal(arrays["target"], sk.target)


def test_digits_load_where_scikit_learn_is_absent(tmp_path: Path) -> None:
    """GPU nodes often lack scikit-learn; the default dataset of mlp and lenet must not need it."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class _Absent(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'sklearn':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Absent())\n"
    )
    root = Path(__file__).resolve().parent.parent
    code = "from bench.contract import data; d = data.load_dataset('digits', seed=0, test_fraction=0.2); print(len(d.train_y) + len(d.test_y))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{root}"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1797"


def test_a_loader_missing_its_package_is_one_clear_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.contract.prepare import prepare
    from bench.contract.spec import RunSpec
    from bench.core.errors import InputError

    def needs_a_package(**_: object) -> data.Dataset:
        raise ModuleNotFoundError("No module named 'absentpkg'", name="absentpkg")

    monkeypatch.setitem(data.LOADERS, "digits", needs_a_package)
    with pytest.raises(InputError, match=r"needs the Python package 'absentpkg', not installed"):
        prepare(RunSpec(model="lenet", dataset="digits"), 1)


@pytest.mark.parametrize(
    "shape, tokens, samples",
    [((3, 16, 16), False, 203), ((12,), False, 50), ((9,), True, 77), ((3, 8, 8), False, 1)],
)
def test_an_outline_has_the_loaded_datasets_sizes_and_types(
    shape: tuple[int, ...], tokens: bool, samples: int
) -> None:
    """What `bench run` checks its plan on: synthetic data's sizes without its values."""
    kwargs = dict(seed=3, test_fraction=0.2, input_shape=shape, num_classes=4, samples=samples)
    real = data.load_dataset("synthetic", tokens=tokens, **kwargs)  # type: ignore[arg-type]
    sketch = data.outline("synthetic", tokens=tokens, **kwargs)
    for field in ("train_x", "train_y", "test_x", "test_y"):
        a, b = getattr(real, field), getattr(sketch, field)
        assert (a.shape, a.dtype) == (b.shape, b.dtype), field
        assert b.nbytes == 0 or b.strides == (0,) * b.ndim  # holds no values
    assert (sketch.tokens, sketch.name, sketch.input_shape) == (real.tokens, "synthetic", shape)
    if tokens or len(set(real.train_y.tolist())) == 4:
        assert sketch.num_classes == real.num_classes


def test_an_outline_of_data_from_files_is_the_data() -> None:
    loaded = data.outline("digits", seed=1, test_fraction=0.25)
    again = data.load_dataset("digits", seed=1, test_fraction=0.25)
    assert loaded.fingerprint() == again.fingerprint()
    with pytest.raises(data.DataError, match="needs --data-path"):
        data.outline("mnist", seed=1, test_fraction=0.25)
