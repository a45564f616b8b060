"""``option``: a config dataclass field with a default, a one-line doc and optional allowed values.

A leaf module (it imports nothing from robopt) so that every config dataclass can use it, also those that
``robopt.config`` itself imports (``robopt.fleet.config``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def option(default: Any, doc: str, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field with a default, a one-line doc and optional allowed values."""
    metadata = {"doc": doc, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)
