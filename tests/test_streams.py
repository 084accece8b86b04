"""Every purpose draws from its own random stream (bench/streams.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import models
from bench.contract import data as bdata
from bench.contract.spec import RunSpec, SpecError
from bench.core import streams
from bench.core.streams import Stream
from models.base import ModelDef


def _keys(seed: int) -> list[tuple[int, ...]]:
    return [
        (int(stream), *sub)
        for stream in Stream
        for sub in itertools.product(range(3), repeat=streams.SUB_INDICES[stream])
    ]


@pytest.mark.parametrize("seed", [0, 1, 7, 2**32 - 1])
def test_streams_draw_different_numbers(seed: int) -> None:
    draws = {
        key: tuple(streams.rng(seed, Stream(key[0]), *key[1:]).integers(0, 2**63, 4))
        for key in _keys(seed)
    }
    assert len(set(draws.values())) == len(draws)  # no two (purpose, epoch) keys collide


def test_initial_weights_and_first_augmentation_differ() -> None:
    """Once both were seeded [seed, 4] and [seed, 4, 0], which numpy pads to the same key."""
    fake = ModelDef(
        name="fake",
        description="",
        default_dataset="digits",
        default_batch=1,
        synthetic_shape=(4,),
        param_shapes=lambda shape, classes: {"w": ((64,), 1)},
        torch=lambda *a, **k: None,
        paddle=lambda *a, **k: None,
        check_input=lambda shape: None,
    )
    init = models.init_weights(fake, (4,), 2, seed=3)["w"]
    # the numbers augmentation of epoch 0 draws, taken as init_weights takes its own
    aug = streams.rng(3, Stream.AUGMENT, 0).uniform(-1, 1, 64).astype(np.float32)
    same_rule = streams.rng(3, Stream.INIT).uniform(-1, 1, 64).astype(np.float32)
    np.testing.assert_array_equal(init, same_rule)  # the comparison is like for like
    assert not np.array_equal(init, aug)
    offsets, _ = bdata._augment_draws(3, 0, 64, 4)
    assert offsets.shape == (2, 64)


def test_stream_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="sub-index"):
        streams.rng(0, Stream.ORDER)  # an epoch order needs its epoch
    with pytest.raises(ValueError, match="2\\*\\*32"):
        streams.rng(2**32, Stream.INIT)  # would spill into the stream id's word
    with pytest.raises(SpecError, match="seed"):
        RunSpec(seed=-1).validate()
