"""What a sweep runs: seeds (``0-4``, ``0,2,5``), grid axes (``key=v1,v2``) and tuning spaces (a YAML file).

Every parse error is one ConfigError line naming the argument and what is allowed.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from robopt.options import ConfigError


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2,5"`` -> [0, 2, 5]; ``"3"`` -> [3] (ranges and lists mix: ``0-2,7``)."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        try:
            values = range(int(first), int(last) + 1) if dash else [int(part)]
        except ValueError:
            raise ConfigError(f"--seeds {text!r}: expected seeds like 0-4 or 0,2,5 (non-negative integers)") from None
        if dash and int(last) < int(first):
            raise ConfigError(f"--seeds {text!r}: the range {part} is empty (write low-high)")
        seeds.extend(values)
    if any(seed < 0 for seed in seeds):
        raise ConfigError(f"--seeds {text!r}: seeds must be >= 0")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: a seed is listed twice")
    return seeds


def _split_values(text: str) -> list[str]:
    """Comma-separated values, commas inside brackets kept (``[64,64],[256,256]`` is two values)."""
    values, depth, current = [], 0, ""
    for char in text:
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            values.append(current)
            current = ""
        else:
            current += char
    values.append(current)
    return [value.strip() for value in values]


def parse_grid(axes: list[str]) -> list[dict[str, str]]:
    """``["a.b=1,2", "c=x,y"]`` -> the 4 points of the product, each ``{key: value text}`` (values parsed later,
    as overrides are: YAML)."""
    keys, choices = [], []
    for axis in axes:
        key, equals, values = axis.partition("=")
        key = key.strip()
        if not equals or not key or not values.strip():
            raise ConfigError(f"--grid {axis!r}: expected key=value1,value2 (e.g. algo.learning_rate=1e-4,3e-4)")
        if key in keys:
            raise ConfigError(f"--grid {axis!r}: {key} is already an axis")
        parsed = _split_values(values)
        if any(not value for value in parsed):
            raise ConfigError(f"--grid {axis!r}: an empty value")
        keys.append(key)
        choices.append(parsed)
    return [dict(zip(keys, point, strict=True)) for point in itertools.product(*choices)]


def parse_point(text: str) -> dict[str, str]:
    """``"a.b=1 c=[64,64]"`` -> one point ``{key: value text}``; ``"default"`` -> the config as written (``{}``)."""
    if text.strip() == "default":
        return {}
    point = {}
    for pair in text.split():
        key, equals, value = pair.partition("=")
        if not equals or not key or not value:
            raise ConfigError(f"--point {text!r}: expected space-separated key=value pairs, or default")
        if key in point:
            raise ConfigError(f"--point {text!r}: {key} is given twice")
        point[key] = value
    if not point:
        raise ConfigError(f"--point {text!r}: expected space-separated key=value pairs, or default")
    return point


def point_overrides(point: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in point.items()]


def point_label(point: dict[str, str]) -> str:
    """``algo.learning_rate=3e-4 algo.epochs=5`` (``default`` for the config as written)."""
    return " ".join(point_overrides(point)) or "default"


DISTRIBUTIONS = ("log_uniform", "uniform", "int", "int_log", "categorical")


@dataclass(frozen=True)
class Dimension:
    """One key of a tuning space: ``kind`` in ``DISTRIBUTIONS``; ``low``/``high`` or ``choices``."""

    key: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple = ()

    def suggest(self, trial):
        """The value Optuna's ``trial`` draws for this key."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind in ("int", "int_log"):
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.kind == "int_log")
        return trial.suggest_float(self.key, self.low, self.high, log=self.kind == "log_uniform")

    def contains(self, value) -> bool:
        """Whether ``value`` (a config's own) is one this dimension can draw."""
        if self.kind == "categorical":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        integral = self.kind not in ("int", "int_log") or float(value).is_integer()
        return integral and self.low <= value <= self.high


def load_space(path: Path) -> list[Dimension]:
    """A tuning space file: ``key: {log_uniform: [low, high]}`` (or ``uniform``, ``int``, ``int_log``: [low, high];
    ``categorical: [a, b, c]``), one entry per config key. Keys are checked against the config by the caller."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"--space {str(path)!r}: cannot read it ({error.strerror or error})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--space {str(path)!r} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"--space {str(path)!r}: expected a mapping of config keys to distributions")
    dimensions = []
    allowed = ", ".join(DISTRIBUTIONS)
    for key, spec in data.items():
        where = f"--space {str(path)!r}: {key}"
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ConfigError(f"{where}: expected one distribution, e.g. {{log_uniform: [1e-5, 1e-3]}} ({allowed})")
        ((kind, args),) = spec.items()
        if kind not in DISTRIBUTIONS:
            raise ConfigError(f"{where}: unknown distribution {kind!r}; allowed: {allowed}")
        if kind == "categorical":
            if not isinstance(args, list) or len(args) < 2:
                raise ConfigError(f"{where}: categorical needs a list of at least 2 choices")
            dimensions.append(Dimension(str(key), kind, choices=tuple(args)))
            continue
        try:  # YAML reads 1e-3 (no dot) as a string: numbers written either way are accepted
            low, high = (float(v) for v in args) if isinstance(args, list) and len(args) == 2 else (None, None)
        except (TypeError, ValueError):
            low = high = None
        if low is None or any(isinstance(v, bool) for v in args):
            raise ConfigError(f"{where}: {kind} needs [low, high] numbers")
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ConfigError(f"{where}: {kind} needs low < high, got [{args[0]}, {args[1]}]")
        if kind in ("log_uniform", "int_log") and low <= 0:
            raise ConfigError(f"{where}: {kind} needs low > 0, got {args[0]}")
        if kind in ("int", "int_log") and not (float(low).is_integer() and float(high).is_integer()):
            raise ConfigError(f"{where}: {kind} needs integer bounds, got [{args[0]}, {args[1]}]")
        dimensions.append(Dimension(str(key), kind, low, high))
    return dimensions
