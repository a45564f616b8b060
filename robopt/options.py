"""``option`` (a config dataclass field with a default, a one-line doc and optional allowed values),
``ConfigError`` and ``WARP_ONLY_OPTIONS``.

A leaf module (it imports nothing from robopt): every module that declares config fields or reports a config
problem uses it, from the torch-free deploy runtime to the algorithms, without importing ``robopt.config``.
"""

from __future__ import annotations

import dataclasses
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
