"""Long numeric series as stored: at the resolution they were measured, packed.

Every rank's step times, the windows and every step's loss are most of a record's
bytes when written as 17-digit JSON floats, though a step time is measured to the
microsecond and a loss is a float32. A field that `types.py` marks `Stored(dtype,
divisor)` is written by `store.append` as one object:

    {"data": "<base64>", "divisor": 1000000, "dtype": "<i4", "shape": [2, 785]}

`data` is base64 of the zlib-compressed values, little-endian and byte-shuffled (the
first byte of every value, then every second byte, ...: similar numbers share their
high bytes, which zlib then folds away, as HDF5's and Blosc's shuffle filter does). A
value is stored / divisor; NaN in a float series is null. A series that the form
cannot hold (ragged rows, loss markers such as "nan", a null in an integer series,
a value out of range) stays a JSON list, rounded to the same resolution.

Readers get lists back (`store.load`), or the arrays (`series`) without making lists.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from bench.records.types import Stored

KEYS = frozenset(("data", "divisor", "dtype", "shape"))
_DTYPES = ("<i4", "<f4", "<f8")
# a packed series holds at most this many values, in at most _ROWS rows (ranks): bounds
# on what a damaged shape may make a reader allocate
_MOST = 1 << 28
_ROWS = 1 << 20


def is_packed(value: Any) -> bool:
    """Whether `value` is a packed series (a JSON object of exactly KEYS)."""
    return isinstance(value, dict) and value.keys() == KEYS


def at_resolution(value: Any, stored: Stored) -> Any:
    """`value` (a number, or lists of them, at any depth) rounded to what `stored`
    keeps: an integer count of 1/divisor, or a float32; anything else unchanged."""
    if isinstance(value, list):
        return [at_resolution(v, stored) for v in value]
    if not isinstance(value, int | float) or isinstance(value, bool):
        return value
    if not math.isfinite(value):
        return value
    if stored.dtype == "<i4":
        # round-half-even as numpy's rint, so a list and its packed form agree
        return round(value * stored.divisor) / stored.divisor
    if stored.dtype == "<f4" and abs(value * stored.divisor) < 3.4e38:
        return float(np.float32(value * stored.divisor)) / stored.divisor
    return value


def pack(value: Any, stored: Stored) -> dict[str, Any] | None:
    """`value` (a list, or a list of equally long lists, of numbers and, in a float
    series, nulls) packed; None when the form cannot hold it."""
    arr = _numbers(value)
    if arr is None:
        return None
    scaled = arr * stored.divisor
    if stored.dtype == "<i4":
        if np.isnan(scaled).any() or (scaled.size and np.abs(scaled).max() >= 2**31 - 1):
            return None
        out = np.rint(scaled).astype("<i4")
    else:
        out = scaled.astype(stored.dtype)
        # a finite value beyond float32's range would come back infinite
        if not np.array_equal(np.isfinite(out), ~np.isnan(scaled)):
            return None
    shuffled = np.frombuffer(out.tobytes(), np.uint8).reshape(-1, out.itemsize).T.tobytes()
    return {
        "data": base64.b64encode(zlib.compress(shuffled, 6)).decode("ascii"),
        "divisor": stored.divisor,
        "dtype": stored.dtype,
        "shape": list(out.shape),
    }


def _numbers(value: Any) -> np.ndarray | None:
    """A list of numbers (null: NaN), or of equally long such lists, as float64."""
    if not isinstance(value, list):
        return None
    rows = value if value and isinstance(value[0], list) else None
    flat = [x for row in rows for x in row] if rows is not None else value
    if rows is not None and (
        not all(isinstance(r, list) for r in rows) or len({len(r) for r in rows}) != 1
    ):
        return None
    for x in flat:
        if x is not None and (not isinstance(x, int | float) or isinstance(x, bool)):
            return None
        if isinstance(x, float) and not math.isfinite(x):
            return None  # records.finite writes these as null before a record is packed
    arr = np.array([np.nan if x is None else x for x in flat], dtype=np.float64)
    return arr.reshape(len(rows), -1) if rows is not None else arr


def array(value: Mapping[str, Any]) -> np.ndarray:
    """A packed series' values as float64 (NaN: null), in its shape, read-only; ValueError
    naming what is wrong when it does not decode."""
    dtype, shape, divisor = value.get("dtype"), value.get("shape"), value.get("divisor")
    if dtype not in _DTYPES:
        raise ValueError(f"packed dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    dims = shape if isinstance(shape, list) else []
    if not (1 <= len(dims) <= 2) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in dims
    ):
        raise ValueError(f"packed shape must be 1 or 2 counts, got {shape!r}")
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 1:
        raise ValueError(f"packed divisor must be a positive integer, got {divisor!r}")
    size = math.prod(dims)
    if size > _MOST or (len(dims) == 2 and dims[0] > _ROWS):
        raise ValueError(f"packed shape {shape!r} is larger than any record holds")
    args = (str(value.get("data")), dtype, tuple(dims), divisor)
    return _decoded(*args) if size <= _KEPT else _decoded.__wrapped__(*args)


# A record's series is decoded by its check (stand_in), then by each figure read off it
# (the frame's row: window throughputs, quantiles, losses): the last few decodings are
# kept, read-only, so each series of the record being read is decompressed once. A series
# of more than _KEPT values (more than any run writes; a damaged shape may ask for 2 GiB)
# is decoded and not kept: 16 of those would hold memory no reader asked to keep.
_KEPT = 1 << 20


@functools.lru_cache(maxsize=16)
def _decoded(data: str, dtype: str, dims: tuple[int, ...], divisor: int) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    size = math.prod(dims)
    try:
        raw = zlib.decompress(base64.b64decode(data, validate=True))
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise ValueError(f"packed data does not decode ({exc})") from None
    if len(raw) != size * width:
        raise ValueError(f"packed data holds {len(raw)} bytes, not {size} x {width}")
    values = np.frombuffer(raw, np.uint8).reshape(width, size).T.copy().view(dtype)
    out = values.reshape(dims).astype(np.float64)
    out = out / divisor if divisor != 1 else out
    out.setflags(write=False)
    return out


def stand_in(value: Mapping[str, Any]) -> list[Any]:
    """What the record's check reads in place of a packed series: its shape, with each
    row holding only the series' least and greatest value (and null where it has one).
    Every check of a number (finite, a minimum, null allowed or not) holds for every
    value when it holds for those, so a packed series is checked without making lists."""
    arr = array(value)
    finite = arr[~np.isnan(arr)]
    counts = value["dtype"] == "<i4" and value["divisor"] == 1
    ends = [finite.min(), finite.max()] if finite.size else []
    row: list[Any] = [int(x) if counts else float(x) for x in ends]
    if finite.size < arr.size:
        row.append(None)
    if arr.ndim == 1:
        return row
    return [row if arr.shape[1] else []] * arr.shape[0]


def unpack(value: Mapping[str, Any]) -> list[Any]:
    """A packed series as the lists a record holds (NaN: null)."""
    arr = array(value)
    if value["dtype"] == "<i4" and value["divisor"] == 1:
        return arr.astype(np.int64).tolist()  # counts stay integers
    out = arr.tolist()
    if np.isnan(arr).any():
        return _nulls(out)
    return out


def _nulls(values: list[Any]) -> list[Any]:
    return [
        _nulls(v) if isinstance(v, list) else (None if v != v else v)  # NaN != NaN
        for v in values
    ]


def series(record: Mapping[str, Any], field: str) -> np.ndarray | None:
    """A record's series `field` as float64 (NaN: null or a non-finite marker), packed or
    a list (read-only when packed: `array`); None when absent, empty, ragged or not numbers."""
    value = record.get(field)
    if isinstance(value, dict) and is_packed(value):
        try:
            return array(value)
        except ValueError:
            return None
    if not isinstance(value, list) or not value:
        return None
    nested = isinstance(value[0], list)
    try:
        return np.asarray(
            [_floats(row) for row in value] if nested else _floats(value), dtype=np.float64
        )
    except (TypeError, ValueError):
        return None


def _floats(values: Any) -> list[Any]:
    if not isinstance(values, list):
        raise TypeError("not a list")
    return [np.nan if x is None else x for x in values]


def window_throughput(record: Mapping[str, Any]) -> np.ndarray | None:
    """Each window's global samples/s, timed by its slowest rank: the record's own
    `window_throughput` where it has one (records before schema 5), else read off its
    window times: global batch x the window's steps / its slowest rank's seconds (at the
    microsecond the times were stored at; written out, the series was 17-digit floats
    of what the other two fields hold). None without them, or with no good window."""
    stored = series(record, "window_throughput")
    if stored is not None or "window_throughput" in record:
        return stored
    times, steps, batch = (
        series(record, "window_times_s"),
        series(record, "window_steps"),
        record.get("global_batch"),
    )
    if times is None or steps is None or times.ndim != 2 or steps.ndim != 1:
        return None
    if times.shape[1] != steps.size or not times.shape[0]:
        return None
    if isinstance(batch, bool) or not isinstance(batch, int | float) or batch <= 0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        slowest = times.max(axis=0)
        return np.where(slowest > 0, float(batch) * steps / slowest, np.nan)
