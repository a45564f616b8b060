"""``option`` (a config dataclass field with a default, a one-line doc and optional allowed values), ``Check`` (the
allowed values of a number or a list: a field's ``check``, a task term's parameter ranges), ``coerce`` (a YAML value
as a field's type, checked), ``ConfigError`` and ``WARP_ONLY_OPTIONS``.

A leaf module (it imports nothing from robopt): every module that declares config fields or reports a config
problem uses it, from the torch-free deploy runtime to the algorithms, without importing ``robopt.config``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

# env.kwargs that only the mujoco_warp backend takes (evaluation on the CPU mujoco backend drops them)
WARP_ONLY_OPTIONS = ("nconmax", "njmax", "verbose", "graph")


class ConfigError(ValueError):
    """A config problem, reported to the user as one line (the CLI exits with code 2)."""


@dataclass(frozen=True)
class Check:
    """What a value may be: ``test(value)`` holds, or ``check(key, value)`` raises a one-line ConfigError that names
    the key, the value and ``rule`` (what is allowed)."""

    rule: str
    test: Callable[[Any], bool]

    def check(self, key: str, value: Any) -> Any:
        if not self.test(value):
            raise ConfigError(f"{key}: expected {self.rule}, got {value!r}")
        return value


def is_number(value: Any) -> bool:
    """A real number that is not a bool and not NaN (infinities pass: a bound decides)."""
    return isinstance(value, Real) and not isinstance(value, bool) and not math.isnan(value)


def between(low: float, high: float, rule: str, low_open: bool = False, high_open: bool = False) -> Check:
    """Numbers in [low, high], with either end open (an infinite end is always open: the number is finite)."""

    def test(value: Any) -> bool:
        if not is_number(value) or not math.isfinite(value):
            return False
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        return above and below

    return Check(rule, test)


FINITE = between(-math.inf, math.inf, "a finite number")
POSITIVE = between(0.0, math.inf, "a finite number > 0", low_open=True)
NON_NEGATIVE = between(0.0, math.inf, "a finite number >= 0")
PROBABILITY = between(0.0, 1.0, "a number in [0, 1]")
ANGLE = between(0.0, math.pi, "an angle in (0, pi] (rad)", low_open=True)
AT_LEAST_ONE = between(1, math.inf, "an integer >= 1")
NAMES = Check(
    "a non-empty list of names (regular expressions)",
    lambda value: isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, str) and v for v in value),
)


def low_high(key: str, value: Any) -> tuple[float, float]:
    """A range ``[low, high]`` of finite numbers with low <= high; a one-line ConfigError naming the key otherwise."""
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(v) and math.isfinite(v) for v in value)
    if not ok or value[0] > value[1]:
        raise ConfigError(f"{key}: expected [low, high] with finite low <= high, got {value!r}")
    return float(value[0]), float(value[1])


def option(default: Any, doc: str, choices: tuple[str, ...] | None = None, check: Check | None = None) -> Any:
    """A dataclass field with a default, a one-line doc, optional allowed values (``choices`` for a string, ``check``
    for a number: each element of a list of numbers), checked when a config is read (``coerce``)."""
    metadata = {"doc": doc, "choices": choices, "check": check}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def coerce(key: str, value: Any, tp: Any, choices: tuple[str, ...] | None, check: Check | None = None) -> Any:
    """``value`` (read from YAML) as a field of type ``tp`` (with allowed ``choices``, numbers passing ``check``), or a
    one-line ConfigError naming ``key``, the value and what is expected. A float is never NaN."""
    value = _coerce(key, value, tp, choices, check)
    if check is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        check.check(key, value)
    return value


def _coerce(key: str, value: Any, tp: Any, choices: tuple[str, ...] | None, check: Check | None) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        tp = next(o for o in options if o is not type(None))
        origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is tuple:
        (item_tp, *_rest) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list of {_type_name(item_tp)}, got {value!r}")
        return tuple(coerce(f"{key}[{i}]", item, item_tp, None, check) for i, item in enumerate(value))
    if tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        if choices and value not in choices:
            raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(choices)}")
        return value
    raise ConfigError(f"{key}: unsupported field type {tp}")
