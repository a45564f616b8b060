"""Terms and the parsing of a task's term sections (``task.observations``, ``rewards``, ``terminations``).

A term is ``fn(signals, **params) -> tensor`` (``robopt.envs.robot.signals.Signals``): ``[N, d]`` for an
observation, ``[N]`` for a reward (unweighted) or a termination (bool). Built-in terms are marked with the ``term``
decorator, stating what of the robot they need (``feet``, ``end_effector``, a ``floating`` base, a ``velocity`` or
``pose`` command), checked when the env is built; ``library.REGISTRY`` lists them, module by module. In YAML a term
is ``name: {params}``; ``hook: package.module:fn`` names a user's function instead of a built-in (the entry's name
is then free). The options every entry of a kind takes (``weight`` for rewards; ``scale``, ``noise``, ``bias``,
``clip`` for observations) are not passed to ``fn``.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real

KINDS = ("observation", "reward", "termination")
REQUIREMENTS = ("feet", "end_effector", "floating", "velocity", "pose")
# options of an entry that the task applies itself (never passed to the term function)
ENTRY_OPTIONS = {
    "observation": ("scale", "noise", "bias", "clip"),
    "reward": ("weight",),
    "termination": (),
}


@dataclass(frozen=True)
class TermInfo:
    """A registered term: its function, what it needs and its one-line doc."""

    fn: Callable
    requires: tuple[str, ...] = ()
    doc: str = ""


def term(kind: str, requires: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Decorator: mark ``fn`` as a built-in term of ``kind`` (``fn.term_info``), listed by ``library.REGISTRY``."""
    if kind not in KINDS or any(need not in REQUIREMENTS for need in requires):
        raise ValueError(f"term kind {kind!r} or requirements {requires} not in {KINDS} / {REQUIREMENTS}")

    def mark(fn: Callable) -> Callable:
        doc = inspect.getdoc(fn) or ""
        fn.term_info = (kind, TermInfo(fn, tuple(requires), doc.splitlines()[0] if doc else ""))
        return fn

    return mark


@dataclass(frozen=True)
class Term:
    """One parsed entry of a term section."""

    name: str
    kind: str
    fn: Callable
    params: dict = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    weight: float = 1.0  # rewards
    scale: float | tuple[float, ...] = 1.0  # observations: multiply, then add noise
    noise: float = 0.0  # observations: U(-noise, noise) per element and step (after scaling)
    bias: float = 0.0  # observations: U(-bias, bias) per element and episode (after scaling)
    clip: float = math.inf  # observations: |value| <= clip after everything
    source: str = ""  # "hook pkg.mod:fn" for messages


def _number(key: str, value, rule: str = "a number") -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(float(value)):
        raise ValueError(f"{key}: expected {rule}, got {value!r}")
    return float(value)


def import_hook(key: str, path) -> Callable:
    """The function ``package.module:function`` names; a ValueError naming the key if it cannot be imported."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise ValueError(f"{key}.hook: expected 'package.module:function', got {path!r}")
    module_name, function_name = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001  (any import failure is the user's hook: one line)
        raise ValueError(
            f"{key}.hook={path!r}: cannot import {module_name!r} ({type(error).__name__}: {error})"
        ) from None
    fn = getattr(module, function_name, None)
    if not callable(fn):
        raise ValueError(f"{key}.hook={path!r}: module {module_name!r} has no function {function_name!r}")
    return fn


def _check_params(key: str, fn: Callable, params: dict, source: str) -> None:
    """Every param must be a keyword of fn (unless fn takes **kwargs); required keywords must be given."""
    signature = inspect.signature(fn)
    parameters = list(signature.parameters.values())[1:]  # the first is the Signals
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    allowed = [p.name for p in parameters]
    unknown = [name for name in params if name not in allowed]
    if unknown:
        options = ", ".join(allowed) or "(none)"
        raise ValueError(f"{key}: unknown parameter {unknown[0]!r} of {source}; allowed: {options}")
    missing = [p.name for p in parameters if p.default is inspect.Parameter.empty and p.name not in params]
    if missing:
        raise ValueError(f"{key}: {source} needs parameter {missing[0]!r}")


def parse_entry(kind: str, section: str, name: str, entry, registry: dict[str, TermInfo]) -> Term:
    """One YAML entry ``name: {options and params}`` of a term section; ValueError naming the key."""
    key = f"{section}.{name}"
    if entry is None:
        entry = {}
    if not isinstance(entry, dict):
        raise ValueError(f"{key}: expected a mapping of options, got {entry!r}")
    entry = dict(entry)
    hook = entry.pop("hook", None)
    if hook is not None:
        fn, requires, source = import_hook(key, hook), (), f"hook {hook}"
    else:
        if name not in registry:
            raise ValueError(
                f"{key}: unknown {kind} term {name!r}; allowed: {', '.join(sorted(registry))} "
                f"(or hook: package.module:function)"
            )
        fn, requires, source = registry[name].fn, registry[name].requires, f"{kind} term {name!r}"
    options = {k: entry.pop(k) for k in ENTRY_OPTIONS[kind] if k in entry}
    _check_params(key, fn, entry, source)
    parsed: dict = {}
    if "weight" in options:
        parsed["weight"] = _number(f"{key}.weight", options["weight"])
    if "scale" in options:
        scale = options["scale"]
        if isinstance(scale, (list, tuple)):
            parsed["scale"] = tuple(_number(f"{key}.scale", value) for value in scale)
        else:
            parsed["scale"] = _number(f"{key}.scale", scale)
    for option in ("noise", "bias"):
        if option in options:
            value = _number(f"{key}.{option}", options[option], "a number >= 0")
            if value < 0:
                raise ValueError(f"{key}.{option}: expected a number >= 0, got {options[option]!r}")
            parsed[option] = value
    if "clip" in options:
        value = _number(f"{key}.clip", options["clip"], "a number > 0")
        if value <= 0:
            raise ValueError(f"{key}.clip: expected a number > 0, got {options['clip']!r}")
        parsed["clip"] = value
    return Term(name, kind, fn, entry, requires, source=source, **parsed)


def parse_terms(kind: str, section: str, entries, registry: dict[str, TermInfo]) -> tuple[Term, ...]:
    """Every entry of a term section, in order; ValueError naming the first bad key."""
    if entries is None:
        return ()
    if not isinstance(entries, dict):
        raise ValueError(f"{section}: expected a mapping of term names to options, got {entries!r}")
    return tuple(parse_entry(kind, section, str(name), entry, registry) for name, entry in entries.items())


def collect(*modules) -> dict[str, dict[str, TermInfo]]:
    """The terms marked in ``modules``, by kind and name."""
    table: dict[str, dict[str, TermInfo]] = {kind: {} for kind in KINDS}
    for module in modules:
        for value in vars(module).values():
            marked = getattr(value, "term_info", None)
            if marked is not None and getattr(value, "__module__", None) == module.__name__:
                table[marked[0]][value.__name__] = marked[1]
    return table
