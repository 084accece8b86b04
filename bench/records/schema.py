"""The run-time check of a record, read off its type (bench/records/types.py).

`validate(record)` walks `RunRecord`'s annotations: a Python type says what a
JSON value must be (`int` an integer and never a boolean, `float` a finite
number, `X | None` may be null, a `TypedDict` an object whose required keys are
there and whose known keys have their types, with unknown keys tolerated so
that a new optional field never makes older readers drop records), and the
`Annotated` metadata adds the rest (minimums, name patterns, fields an ok
record must have, arrays that may hold nulls only in a failed run). Checkers
are built once per type and cached. Only the first problem is reported, field
path first: one line per bad record.
"""

from __future__ import annotations

import enum
import functools
import math
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from bench.records import packed
from bench.records.types import (
    NONFINITE_MARKERS,
    Keys,
    Kind,
    Min,
    Pattern,
    Required,
    RunRecord,
    Status,
    Stored,
    Values,
    _LossValue,
    _Matrix,
    _NullIfFailed,
    _OkStrict,
)

# (value, path, mode) -> the problem, or None. The mode says where the value sits: in a
# record not ok, in an ok one, under OkStrict in an ok one (no null), under
# NullIfFailed in one not ok (any null).
FAILED, OK, STRICT, RELAXED = 0, 1, 2, 3
Check = Callable[[Any, str, int], str | None]


class Checker:
    """One type's check and the name it is described by in a problem; `sure`, the exact
    types that pass it in every mode, and `finite`, whether a finite float does (tested
    inline by the loops over a list's, an object's or a mapping's values: most of a
    record's values are such strings and numbers; any other goes through `check`)."""

    def __init__(self, name: str, check: Check) -> None:
        self.name = name
        self._check = check
        self.sure: frozenset[type] = frozenset()
        self.finite = False

    def check(self, value: Any, path: str, mode: int) -> str | None:
        if value is None and mode == RELAXED:
            return None
        return self._check(value, path, mode)


def _got(value: Any) -> str:
    text = repr(value)
    return f"{text[:40]}{'...' if len(text) > 40 else ''} ({type(value).__name__})"


def _simple(name: str, test: Callable[[Any], bool]) -> Checker:
    def check(value: Any, path: str, mode: int) -> str | None:
        return None if test(value) else f"{path}: expected {name}, got {_got(value)}"

    return Checker(name, check)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):  # JSON's integers have no bound; a float's range is the one read
        return -sys.float_info.max <= v <= sys.float_info.max
    return isinstance(v, float) and math.isfinite(v)


_PRIMITIVES = {
    str: _simple("a string", lambda v: isinstance(v, str)),
    bool: _simple("true or false", lambda v: isinstance(v, bool)),
    int: _simple("an integer", _is_int),
    float: _simple("a finite number", _is_num),
    Any: Checker("any value", lambda value, path, strict: None),
}
_PRIMITIVES[str].sure = frozenset({str})
_PRIMITIVES[bool].sure = frozenset({bool})
_PRIMITIVES[int].sure = frozenset({int})  # exact: True is a bool, never an int here
_PRIMITIVES[float].finite = True  # `v - v == 0.0` inline: NaN and infinities fail it


def _same_sure(made: Checker, *parts: Checker) -> Checker:
    """`made` passes whatever any of `parts` surely passes (a union of them, or one of
    them under constraints that add no check)."""
    made.sure = frozenset().union(*(p.sure for p in parts))
    made.finite = any(p.finite for p in parts)
    return made


@functools.cache
def checker(hint: Any) -> Checker:
    """The checker of a type annotation (cached: types are built once)."""
    if hint in _PRIMITIVES:
        return _PRIMITIVES[hint]
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(hint)
        return _annotated(checker(base), tuple(meta))
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(hint))
    if origin is list:
        return _list(checker(typing.get_args(hint)[0]))
    if origin is dict:
        return _mapping(checker(typing.get_args(hint)[1]))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = tuple(m.value for m in hint)
        return _simple("one of " + ", ".join(values), lambda v: isinstance(v, str) and v in values)
    if typing.is_typeddict(hint):
        return _object(hint)
    raise TypeError(f"no record check for the type {hint!r}")


def _union(args: tuple[Any, ...]) -> Checker:
    nullable = type(None) in args
    options = [checker(a) for a in args if a is not type(None)]
    inner = options[0] if len(options) == 1 else None
    name = " or ".join(o.name for o in options)

    def check(value: Any, path: str, mode: int) -> str | None:
        if value is None and nullable and mode != STRICT:
            return None
        if inner is not None:
            problem = inner.check(value, path, mode)
            if problem is None or not nullable or mode == STRICT:
                return problem
            return f"{problem} (null also allowed)"
        if any(o.check(value, path, mode) is None for o in options):
            return None
        also = " or null" if nullable and mode != STRICT else ""
        return f"{path}: expected {name}{also}, got {_got(value)}"

    return _same_sure(Checker(f"{name} or null" if nullable else name, check), *options)


def _list(item: Checker) -> Checker:
    sure, finite = item.sure, item.finite
    name = f"a list of {item.name}"

    def check(value: Any, path: str, mode: int) -> str | None:
        if not isinstance(value, list):
            return f"{path}: expected {name}, got {_got(value)}"
        for i, element in enumerate(value):
            kind = type(element)
            if kind in sure or (finite and kind is float and element - element == 0.0):
                continue
            problem = item.check(element, f"{path}[{i}]", mode)
            if problem:
                return problem
        return None

    return Checker(name, check)


def _mapping(value_check: Checker) -> Checker:
    name = f"an object of {value_check.name}"
    sure, finite = value_check.sure, value_check.finite

    def check(value: Any, path: str, mode: int) -> str | None:
        if not isinstance(value, dict):
            return f"{path}: expected {name}, got {_got(value)}"
        for key, item in value.items():
            kind = type(item)
            if kind in sure or (finite and kind is float and item - item == 0.0):
                continue
            problem = value_check.check(item, f"{path}.{key}", mode)
            if problem:
                return problem
        return None

    return Checker(name, check)


def _object(td: type) -> Checker:
    hints = typing.get_type_hints(td, include_extras=True)
    required = sorted(td.__required_keys__)  # type: ignore[attr-defined]
    # built lazily: nested types may refer to each other
    fields: dict[str, tuple[Checker, frozenset[type], bool]] = {}

    def check(value: Any, path: str, mode: int) -> str | None:
        if not isinstance(value, dict):
            return f"{path}: expected an object, got {_got(value)}"
        if not fields:
            fields.update(
                {k: (c, c.sure, c.finite) for k, h in hints.items() for c in [checker(h)]}
            )
        missing = [k for k in required if k not in value]
        if missing:
            return f"{path}: missing field(s) {', '.join(missing)}"
        for key, (field, sure, finite) in fields.items():
            if key in value:
                item = value[key]
                kind = type(item)
                if kind in sure or (finite and kind is float and item - item == 0.0):
                    continue
                problem = field.check(item, f"{path}.{key}" if path else key, mode)
                if problem:
                    return problem
        return None

    return Checker("an object", check)


def _annotated(base: Checker, meta: tuple[Any, ...]) -> Checker:
    name = base.name
    check: Check = base.check
    for m in meta:
        if isinstance(m, Min):
            name, check = _with_min(name, check, m.value)
        elif isinstance(m, Pattern):
            name, check = _with_pattern(m)
        elif isinstance(m, Keys):
            check = _with_keys(check, m)
        elif isinstance(m, Values):
            name, check = _with_values(check, m)
        elif isinstance(m, _OkStrict):
            check = _strict_subtree(check)
        elif isinstance(m, _NullIfFailed):
            check = _relaxed_subtree(check)
        elif isinstance(m, _Matrix):
            check = _with_matrix(check)
        elif isinstance(m, _LossValue):
            name, check = _loss()
        elif not isinstance(m, Required | Stored):
            raise TypeError(f"unknown record constraint {m!r}")
    if any(isinstance(m, Stored) for m in meta):
        check = _or_packed(check)
    made = Checker(name, check)
    return _same_sure(made, base) if check == base.check else made


def _with_min(name: str, check: Check, least: int) -> tuple[str, Check]:
    name = f"an integer >= {least}"

    def checked(value: Any, path: str, mode: int) -> str | None:
        if not _is_int(value) or value < least:
            return f"{path}: expected {name}, got {_got(value)}"
        return None

    return name, checked


def _with_pattern(pattern: Pattern) -> tuple[str, Check]:
    compiled = re.compile(pattern.regex)

    def checked(value: Any, path: str, mode: int) -> str | None:
        if not isinstance(value, str) or not compiled.fullmatch(value):
            return f"{path}: expected {pattern.name}, got {_got(value)}"
        return None

    return pattern.name, checked


def _with_keys(check: Check, keys: Keys) -> Check:
    known = {k: checker(h) for k, h in keys.types.items()}

    def checked(value: Any, path: str, mode: int) -> str | None:
        problem = check(value, path, mode)
        if problem or not isinstance(value, dict):
            return problem
        for key, kc in known.items():
            if key in value:
                problem = kc.check(value[key], f"{path}.{key}", mode)
                if problem:
                    return problem
        return None

    return checked


def _with_values(check: Check, values: Values) -> tuple[str, Check]:
    inner = _mapping(checker(values.hint))

    def checked(value: Any, path: str, mode: int) -> str | None:
        return check(value, path, mode) or inner.check(value, path, mode)

    return inner.name, checked


def _strict_subtree(check: Check) -> Check:
    """No null below this point in an ok record."""

    def checked(value: Any, path: str, mode: int) -> str | None:
        return check(value, path, STRICT if mode != FAILED else FAILED)

    return checked


def _relaxed_subtree(check: Check) -> Check:
    """Any null below this point in a record that is not ok."""

    def checked(value: Any, path: str, mode: int) -> str | None:
        return check(value, path, RELAXED if mode == FAILED else mode)

    return checked


def _with_matrix(check: Check) -> Check:
    name = "a non-empty list of equally long lists of finite numbers"

    def checked(value: Any, path: str, mode: int) -> str | None:
        problem = check(value, path, mode)
        if problem or mode in (FAILED, RELAXED):
            return problem
        if not value or len({len(row) for row in value}) != 1 or not value[0]:
            return f"{path}: expected {name}, got rows of lengths {[len(r) for r in value]}"
        return None

    return checked


def _or_packed(check: Check) -> Check:
    """A packed series (bench/records/packed.py) is checked as its stand-in: the same
    checks, on its shape and its least and greatest value."""

    def checked(value: Any, path: str, mode: int) -> str | None:
        if not packed.is_packed(value):
            return check(value, path, mode)
        try:
            return check(packed.stand_in(value), path, mode)
        except ValueError as exc:
            return f"{path}: {exc}"

    return checked


def _loss() -> tuple[str, Check]:
    name = "a finite number or one of " + ", ".join(NONFINITE_MARKERS) + " or null"

    def checked(value: Any, path: str, mode: int) -> str | None:
        if value is None or _is_num(value) or value in NONFINITE_MARKERS:
            return None
        return f"{path}: expected {name}, got {_got(value)}"

    return name, checked


_FIELDS = typing.get_type_hints(RunRecord, include_extras=True)


def _required(hint: Any) -> Required | None:
    if typing.get_origin(hint) is typing.Annotated:
        return next((m for m in typing.get_args(hint)[1:] if isinstance(m, Required)), None)
    return None


# field -> (statuses, kinds) under which it must be present ("*": every status)
REQUIREMENTS: dict[str, Required] = {
    **{k: Required() for k in RunRecord.__required_keys__},
    **{k: r for k, h in _FIELDS.items() if (r := _required(h)) is not None},
}
# Fields written packed (bench/records/packed.py), and how.
STORED: dict[str, Stored] = {
    k: m
    for k, h in _FIELDS.items()
    if typing.get_origin(h) is typing.Annotated
    for m in typing.get_args(h)[1:]
    if isinstance(m, Stored)
}
# Fields every record must have, whatever its status and kind.
EVERY_RECORD = tuple(sorted(k for k, r in REQUIREMENTS.items() if "*" in r.statuses))


@functools.cache
def _field_checks() -> list[tuple[str, Check]]:
    """Each field's check, looked up once (a type annotation hashes slowly)."""
    return [(name, checker(hint).check) for name, hint in _FIELDS.items()]


def validate(record: Mapping[str, Any]) -> str | None:
    """What is wrong with `record` under the current schema (field path first), or None.

    Checks, in order: its status, the fields its status and kind require, then each
    known field's type (an ok record's measured arrays hold no null).
    """
    status = record.get("status")
    problem = checker(Status).check(status, "status", FAILED)
    if problem:
        return problem
    kind = record.get("kind", Kind.TRAIN)
    missing = [
        name
        for name, req in REQUIREMENTS.items()
        if ("*" in req.statuses or (status in req.statuses and kind in req.kinds))
        and name not in record
    ]
    if missing:
        return f"missing field(s) for status {status}: {', '.join(missing)}"
    mode = OK if status == Status.OK else FAILED
    for name, check in _field_checks():
        if name in record:
            problem = check(record[name], name, mode)
            if problem:
                # what a failed run may hold and an ok one may not
                strict = mode == OK and check(record[name], name, FAILED) is None
                return problem + (" in an ok record" if strict else "")
    return None
