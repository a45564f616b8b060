"""Message fields for the deploy map (``robopt.sim2real.ros_map``, ``ros_command``) and the topic robot
(``robopt.sim2real.topic_robot``). Torch-free (numpy, stdlib).

Reading: a field by its dotted path, a field's numbers in order, the gravity direction in the body frame from an
orientation quaternion. Checking a map's entries: one-line errors, QoS, names, numbers, the size of a message field,
and the element transforms applied to a field's numbers (``identity``, ``cos``, ``sin``, ``gravity``, ``{scale,
offset}``, ``{clip}``, ``{hook}``, lists and pipelines).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

import numpy as np

from robopt.options import ConfigError
from robopt.sim2real.ros_messages import MESSAGES, MessageTypeError, field_type, parse_field_type, short_type_name
from robopt.sim2real.transport import QOS_PROFILES, RELIABILITY, Qos

ELEMENT_TRANSFORMS = ("identity", "cos", "sin", "gravity")


def flatten(value) -> np.ndarray:
    """The numbers of a decoded field in declaration order (a message's numeric fields, an array, a number)."""
    if isinstance(value, dict):
        parts = [flatten(v) for v in value.values() if not isinstance(v, str)]
        return np.concatenate(parts) if parts else np.zeros(0)
    if isinstance(value, np.ndarray):
        return value.astype(np.float64, copy=False).reshape(-1)
    if isinstance(value, list):
        raise ValueError("a list of messages is not a vector of numbers")
    return np.asarray([float(value)])


def get_field(message: dict, path: str):
    value = message
    for name in path.split("."):
        value = value[name]
    return value


def gravity_in_body(quaternion: np.ndarray) -> np.ndarray:
    """Unit gravity direction in the body frame, R(q)^T [0, 0, -1], for unit quaternions (x, y, z, w)."""
    q = np.asarray(quaternion, dtype=np.float64).reshape(-1, 4)
    norm = np.linalg.norm(q, axis=1, keepdims=True)
    x, y, z, w = (q / np.where(norm > 0, norm, 1.0)).T
    # third row of R(q), negated: R^T e_z = (2(xz - wy), 2(yz + wx), 1 - 2(x^2 + y^2))
    return -np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1).reshape(-1)


def fail(key: str, message: str) -> ConfigError:
    return ConfigError(f"{key}: {message}")


def qos_of(value, key: str, default: Qos) -> Qos:
    if value is None:
        return default
    if isinstance(value, str):
        if value not in QOS_PROFILES:
            raise fail(key, f"unknown QoS profile {value!r}; allowed: {', '.join(QOS_PROFILES)} or a mapping")
        return Qos(*QOS_PROFILES[value])
    if not isinstance(value, dict) or set(value) - {"reliability", "depth"}:
        raise fail(key, f"expected a profile name or {{reliability, depth}}, got {value!r}")
    reliability, depth = value.get("reliability", default.reliability), value.get("depth", default.depth)
    if reliability not in RELIABILITY:
        raise fail(key, f"reliability {reliability!r} is not allowed; allowed: {', '.join(RELIABILITY)}")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 10_000:
        raise fail(key, f"depth must be an integer in 1..10000, got {depth!r}")
    return Qos(reliability, depth)


def names_of(value, key: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise fail(key, f"{what} must be a list of non-empty strings, got {value!r}")
    if len(set(value)) != len(value):
        raise fail(key, f"{what} repeat: {list(value)}")
    return tuple(value)


def indices_of(value, key: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise fail(key, f"index must be a list of integers, got {value!r}")
    if any(v < 0 for v in value):
        raise fail(key, f"index values must be >= 0, got {list(value)}")
    return tuple(value)


def numbers_of(value, key: str, name: str) -> np.ndarray | float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    ):
        return np.asarray(value, dtype=np.float64)
    raise fail(key, f"{name} must be a finite number or a list of them, got {value!r}")


def numeric_size(full: str, path: str) -> int | None:
    """How many numbers a field holds (None for a sequence: known when a message arrives); ConfigError-ready."""
    spec = field_type(full, path)
    item, size = parse_field_type(spec)
    if item == "string":
        raise MessageTypeError(f"{short_type_name(full)} field {path!r} is a string, not numbers")
    if item in MESSAGES:
        if size is not None:
            raise MessageTypeError(f"{short_type_name(full)} field {path!r} is a list of messages, not numbers")
        sizes = [numeric_size(item, name) for name, spec in MESSAGES[item] if parse_field_type(spec)[0] != "string"]
        return None if any(s is None for s in sizes) else sum(sizes)
    return 1 if size is None else (size or None)


def _hook(spec, key: str) -> Callable[[np.ndarray], np.ndarray]:
    module_name, _, function_name = str(spec).partition(":")
    if not module_name or not function_name:
        raise fail(key, f"hook {spec!r} must read 'package.module:function'")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise fail(key, f"hook {spec!r} cannot be loaded ({type(error).__name__}: {error})") from None
    if not callable(function):
        raise fail(key, f"hook {spec!r} is not callable")
    return lambda vector: np.asarray(function(vector), dtype=np.float64).reshape(-1)


def _transform(item, key: str) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[int], int | None]]:
    """(function, size of its output for an input of n numbers)."""
    if item == "identity":
        return (lambda v: v), (lambda n: n)
    if item == "cos":
        return np.cos, (lambda n: n)
    if item == "sin":
        return np.sin, (lambda n: n)
    if item == "gravity":
        return gravity_in_body, (lambda n: None if n is None else 3 * (n // 4))
    if isinstance(item, dict) and set(item) <= {"scale", "offset"} and item:
        scale = numbers_of(item.get("scale", 1.0), key, "scale")
        offset = numbers_of(item.get("offset", 0.0), key, "offset")
        return (lambda v: scale * v + offset), (lambda n: n)
    if isinstance(item, dict) and set(item) == {"hook"}:
        return _hook(item["hook"], key), (lambda n: None)
    if isinstance(item, dict) and set(item) == {"clip"}:
        bound = numbers_of(item["clip"], key, "clip")
        return (lambda v: np.clip(v, -bound, bound)), (lambda n: n)
    if isinstance(item, list) and item:  # a pipeline: each step takes the one before's output
        steps = [_transform(step, key) for step in item]

        def pipeline(vector: np.ndarray) -> np.ndarray:
            for function, _ in steps:
                vector = np.asarray(function(vector), dtype=np.float64).reshape(-1)
            return vector

        def size(n: int | None) -> int | None:
            for _, out in steps:
                n = None if n is None else out(n)
            return n

        return pipeline, size
    raise fail(
        key,
        f"unknown transform {item!r}; allowed: {', '.join(ELEMENT_TRANSFORMS)}, {{scale, offset}}, "
        "{clip: c}, {hook: 'package.module:function'}, a list of these, or a list in it (a "
        "pipeline)",
    )


def transforms_of(raw, key: str, path: str, size: int | None) -> tuple[tuple[Callable, ...], int | None]:
    """The entry's transforms and the size of their concatenated output for ``size`` selected numbers."""
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise fail(key, "an empty list; use identity")
    transforms, out = [], 0
    for item in items:
        function, out_size = _transform(item, key)
        if item == "gravity" and size is not None and size % 4:
            raise fail(key, f"gravity takes quaternions (4 numbers each), {path} gives {size}")
        transforms.append(function)
        part = out_size(size)
        out = None if part is None or out is None else out + part
    return tuple(transforms), out


def check_scalar_fields(full: str, fields: tuple[str, ...], key: str) -> None:
    """Each dotted path in ``fields`` is one number of message type ``full``; ConfigError naming ``key``."""
    for name in fields:
        try:
            if numeric_size(full, name) != 1:
                raise MessageTypeError(f"{short_type_name(full)} field {name!r} is not one number (e.g. linear.x)")
        except MessageTypeError as error:
            raise fail(key, str(error)) from None
