"""Every random stream the suite draws from, in one table.

A stream's generator is seeded with the key [seed, stream id, *sub-indices]. numpy
pads short keys with zeros, so [s, 4] and [s, 4, 0] give the same numbers, and a
seed of 2**32 or more spills into a second word; this is what once gave initial
weights and epoch 0's augmentation the same draws. Here every purpose has its own
id (keys of different purposes differ in their second word), each purpose always
takes the same number of sub-indices (no key of one purpose is a zero-padded
prefix of another of the same purpose), and the seed must fit one 32-bit word.
Changing an id changes every number drawn from that stream: data splits, orders,
weights or augmentation of every past run would no longer be reproduced.
"""

from __future__ import annotations

import enum

import numpy as np

SEED_LIMIT = 2**32  # seeds are one 32-bit word of the key


@enum.unique
class Stream(enum.IntEnum):
    SPLIT = 1  # train/test split of a dataset
    ORDER = 2  # sample order of an epoch (sub-index: epoch)
    SYNTH = 3  # synthetic dataset values
    AUGMENT = 4  # crop offsets and flips of an epoch (sub-index: epoch)
    INIT = 5  # initial weights of a model


# how many sub-indices each stream's key takes after the stream id
SUB_INDICES = {
    Stream.SPLIT: 0,
    Stream.ORDER: 1,
    Stream.SYNTH: 0,
    Stream.AUGMENT: 1,
    Stream.INIT: 0,
}


def rng(seed: int, stream: Stream, *sub: int) -> np.random.Generator:
    """The generator of `stream` for this seed (and epoch, where the stream has one)."""
    if len(sub) != SUB_INDICES[stream]:
        raise ValueError(
            f"stream {stream.name} takes {SUB_INDICES[stream]} sub-index(es), got {len(sub)}"
        )
    for value in (seed, *sub):
        if not 0 <= value < SEED_LIMIT:
            raise ValueError(f"seed and stream indices must be in [0, 2**32), got {value}")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, int(stream), *sub])))
