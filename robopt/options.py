"""``option`` (a config dataclass field with a default, a one-line doc and optional allowed values), ``coerce`` (a
YAML value as a field's type), ``ConfigError`` and ``WARP_ONLY_OPTIONS``.

A leaf module (it imports nothing from robopt): every module that declares config fields or reports a config
problem uses it, from the torch-free deploy runtime to the algorithms, without importing ``robopt.config``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field
from typing import Any

# env.kwargs that only the mujoco_warp backend takes (evaluation on the CPU mujoco backend drops them)
WARP_ONLY_OPTIONS = ("nconmax", "njmax", "verbose", "graph")


class ConfigError(ValueError):
    """A config problem, reported to the user as one line (the CLI exits with code 2)."""


def option(default: Any, doc: str, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field with a default, a one-line doc and optional allowed values."""
    metadata = {"doc": doc, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def coerce(key: str, value: Any, tp: Any, choices: tuple[str, ...] | None) -> Any:
    """``value`` (read from YAML) as a field of type ``tp`` (with allowed ``choices``), or a one-line ConfigError
    naming ``key``, the value and what is expected."""
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
        return tuple(coerce(f"{key}[{i}]", item, item_tp, None) for i, item in enumerate(value))
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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        if choices and value not in choices:
            raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(choices)}")
        return value
    raise ConfigError(f"{key}: unsupported field type {tp}")
