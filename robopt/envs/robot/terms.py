"""A term is declared once (DESIGN.md section 10): ``term`` on its function, or on a class for a term with state.

Shapes: N envs, M rows being reset.

A term computes ``fn(signals, **params)`` (``robopt.envs.robot.signals.Signals``): ``[N, d]`` for an observation,
``[N]`` for a reward (unweighted), a termination or a success (bool: the task's one ``task.success`` term says
whether an episode has succeeded; rewards and terminations read it as ``signals.success``). Its declaration holds
everything else robopt knows of it, and every part of robopt reads that declaration rather than a table of its own:

- ``needs``: what of the robot and task it reads (``Need``: a floating base, feet, an end effector, a command of a
  kind, contact sensors on the bodies a parameter names). The task checks them when the env is built (one line
  naming what provides each), and the builder adds the sensors they ask for (``contact_groups``).
- ``params``: the allowed values of its parameters (``robopt.options.Check``: positive, an angle, a share...),
  checked with the rest of the config when it is loaded.
- ``elements``: how its output's elements are named in the export sidecar (the joints, the feet, x y z...).
- ``deploy``: how a robot computer computes it (``Deploy``: a topic and field of a message, a value the runtime
  holds, the command input), written into the sidecar, where the deploy map reads it.
- ``mirror``: its output's left-right mirror image (``robopt.envs.robot.mirror``: joints swapped with their axis
  signs, feet swapped, a vector's signs), for symmetry in training; a term without one cannot be mirrored.

A term with state across steps (feet air time, the previous joint velocities) is a class: ``cls(first)`` is built on
the env's first ``Signals``; ``update(signals)`` runs after every physics step before the rewards; ``reset(rows,
signals)`` when rows start an episode; calling it is the term. Its state is its tensor attributes (saved with the
task for an exact resume). A user's hook (``hook: package.module:function``) is declared the same way, by this
decorator on their function or class, or left undeclared (needs nothing, any parameter values, elements numbered,
no deploy source). In YAML a term is ``name: {params}``; the options every entry of a kind takes (``weight`` for
rewards; ``scale``, ``noise``, ``bias``, ``clip`` for observations) are not passed to ``fn``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from robopt.options import FINITE, NON_NEGATIVE, POSITIVE, Check

KINDS = ("observation", "reward", "termination", "success")
# options of an entry that the task applies itself (never passed to the term function), and their allowed values
ENTRY_OPTIONS: dict[str, dict[str, Check]] = {
    "observation": {"scale": FINITE, "noise": NON_NEGATIVE, "bias": NON_NEGATIVE, "clip": POSITIVE},
    "reward": {"weight": FINITE},
    "termination": {},
    "success": {"hold_s": NON_NEGATIVE},
}


@dataclass(frozen=True)
class Need:
    """Something a term reads that a robot or task may lack: ``present(task)`` on the built task (a ``TermTask``:
    its ``robot`` and ``command``), ``advice`` names what provides it. ``contacts`` names the term parameter whose
    body patterns need contact sensors (the builder adds them)."""

    name: str
    advice: str
    present: Callable[[Any], bool] = lambda task: True
    contacts: str = ""


FLOATING = Need("floating", "a base with a free joint", lambda task: task.robot.floating)
FEET = Need("feet", "robot.feet", lambda task: task.robot.num_feet > 0)
END_EFFECTOR = Need("end_effector", "robot.end_effector", lambda task: bool(task.robot.end_effector))
GRIPPER = Need("gripper", "robot.gripper.joints", lambda task: task.robot.gripper is not None)
OBJECTS = Need("objects", "task.scene.objects", lambda task: task.robot.objects is not None)


def command(kind: str) -> Need:
    """A command whose kind provides ``kind`` (``robopt.envs.robot.commands``: velocity, pose...)."""
    return Need(
        f"{kind} command",
        f"task.commands.type: {kind}",
        lambda task: task.command is not None and kind in task.command.provides,
    )


def contacts(param: str) -> Need:
    """Contact sensors on the bodies that the term's parameter ``param`` names (regular expressions)."""
    return Need(f"contacts of {param}", "", contacts=param)


@dataclass(frozen=True)
class Deploy:
    """How a robot computer computes an observation term: the source the deploy map reads (JSON in the sidecar).

    ``topic`` (a key of the deploy config's ``robot.topics``, ``/<topic>`` by default) with its message ``type`` and
    ``field``; ``by_joint``: the field is an array over joints, picked by the policy's joint names; ``offset:
    default_pose``: the default pose is subtracted; ``convert``: a conversion the map applies first (``gravity``: an
    orientation quaternion to gravity in the base frame). Or ``runtime``: a value the deploy runtime holds itself
    (``last_action``). Or ``command``: the task's command input (its kind says which message carries it).
    """

    topic: str = ""
    type: str = ""
    field: str = ""
    by_joint: bool = False
    offset: str = ""
    convert: str = ""
    runtime: str = ""
    command: bool = False

    def to_json(self) -> dict:
        return {name: value for name, value in vars(self).items() if value}


def joint_names(task) -> list[str]:
    return list(task.robot.joint_names)


def foot_names(task) -> list[str]:
    return list(task.robot.foot_names)


def command_names(task) -> list[str]:
    return list(task.command.names) if task.command is not None else []


def named(*names: str) -> Callable[[Any], list[str]]:
    """Elements with fixed names (x, y, z...)."""
    return lambda task: list(names)


XYZ = named("x", "y", "z")


@dataclass(frozen=True)
class TermInfo:
    """A term's declaration (the module doc): its function (or stateful class) and everything robopt knows of it."""

    fn: Callable
    kind: str = ""
    needs: tuple[Need, ...] = ()
    params: dict[str, Check] = field(default_factory=dict)
    elements: Callable[[Any], list[str]] | None = None
    deploy: Deploy | None = None
    doc: str = ""
    mirror: Callable[[Any, dict, int], Any] | None = None  # (task, params, width) -> robopt.envs.robot.mirror.Mirror

    @property
    def stateful(self) -> bool:
        return inspect.isclass(self.fn)

    def element_names(self, task, width: int) -> list[str]:
        """A name per element of an output of ``width``: the declared ones when they fit, else numbers."""
        names = self.elements(task) if self.elements is not None else []
        return names if len(names) == width else [str(i) for i in range(width)]


def term(
    kind: str,
    needs: tuple[Need, ...] = (),
    params: dict[str, Check] | None = None,
    elements: Callable[[Any], list[str]] | None = None,
    deploy: Deploy | None = None,
    name: str = "",
    mirror: Callable[[Any, dict, int], Any] | None = None,
) -> Callable[[Callable], Callable]:
    """Declare ``fn`` (a function, or a class for a term with state) as a term of ``kind`` (the module doc); the
    built-in terms' declarations are collected by ``robopt.envs.robot.library.REGISTRY``, a hook's are read where its
    entry names it. ``name`` defaults to the function's name (a class's in snake case)."""
    if kind not in KINDS:
        raise ValueError(f"term kind {kind!r} is not one of {', '.join(KINDS)}")

    def declare(fn: Callable) -> Callable:
        doc = inspect.getdoc(fn) or ""
        unknown = sorted(set(params or {}) - {p.name for p in _parameters(fn)})
        if unknown:
            raise ValueError(f"term {fn.__name__}: params names {unknown[0]!r}, which it does not take")
        fn.term_name = name or (_snake(fn.__name__) if inspect.isclass(fn) else fn.__name__)
        fn.term_info = TermInfo(fn, kind, tuple(needs), dict(params or {}), elements, deploy, _first_line(doc), mirror)
        return fn

    return declare


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _first_line(doc: str) -> str:
    return doc.split("\n\n")[0].replace("\n", " ") if doc else ""


def _parameters(fn: Callable) -> list[inspect.Parameter]:
    """The term's own parameters: those after the Signals (of ``__call__`` for a class)."""
    target = fn.__call__ if inspect.isclass(fn) else fn
    parameters = list(inspect.signature(target).parameters.values())
    return parameters[2:] if inspect.isclass(fn) else parameters[1:]  # (self,) signals, then the parameters


@dataclass(frozen=True)
class Term:
    """One parsed entry of a term section: its declaration, the parameters given, and the entry's options."""

    name: str
    kind: str
    info: TermInfo
    params: dict = field(default_factory=dict)
    weight: float = 1.0  # rewards
    scale: float | tuple[float, ...] = 1.0  # observations: multiply, then add noise
    noise: float = 0.0  # observations: U(-noise, noise) per element and step (after scaling)
    bias: float = 0.0  # observations: U(-bias, bias) per element and episode (after scaling)
    clip: float = math.inf  # observations: |value| <= clip after everything
    hold_s: float = 0.0  # success: the task succeeds once the term held this long (s)
    source: str = ""  # "hook pkg.mod:fn" for messages

    @property
    def fn(self) -> Callable:
        return self.info.fn

    @property
    def needs(self) -> tuple[Need, ...]:
        return self.info.needs


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


def _hook_info(key: str, kind: str, fn: Callable, path: str) -> TermInfo:
    """A hook's declaration (``term`` on the user's function), or a bare one for an undeclared function."""
    info = getattr(fn, "term_info", None)
    if info is None:
        return TermInfo(fn, kind)
    if info.kind != kind:
        raise ValueError(f"{key}.hook={path!r} is declared as a {info.kind} term; this section takes {kind} terms")
    return info


def _check_params(key: str, info: TermInfo, params: dict, source: str) -> None:
    """Every param is a keyword of the term (unless it takes **kwargs), required ones are given, declared ranges
    hold."""
    parameters = _parameters(info.fn)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        allowed = [p.name for p in parameters]
        unknown = [name for name in params if name not in allowed]
        if unknown:
            options = ", ".join(allowed) or "(none)"
            raise ValueError(f"{key}: unknown parameter {unknown[0]!r} of {source}; allowed: {options}")
        missing = [p.name for p in parameters if p.default is inspect.Parameter.empty and p.name not in params]
        if missing:
            raise ValueError(f"{key}: {source} needs parameter {missing[0]!r}")
    for name, check in info.params.items():
        if name in params:
            check.check(f"{key}.{name}", params[name])


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
        info, source = _hook_info(key, kind, import_hook(key, hook), hook), f"hook {hook}"
    else:
        if name not in registry:
            raise ValueError(
                f"{key}: unknown {kind} term {name!r}; allowed: {', '.join(sorted(registry))} "
                f"(or hook: package.module:function)"
            )
        info, source = registry[name], f"{kind} term {name!r}"
    options = {option: entry.pop(option) for option in ENTRY_OPTIONS[kind] if option in entry}
    _check_params(key, info, entry, source)
    parsed: dict = {}
    for option, value in options.items():
        check = ENTRY_OPTIONS[kind][option]
        if option == "scale" and isinstance(value, (list, tuple)):
            parsed[option] = tuple(float(check.check(f"{key}.scale", v)) for v in value)
        else:
            parsed[option] = float(check.check(f"{key}.{option}", value))
    return Term(name, kind, info, entry, source=source, **parsed)


def parse_terms(kind: str, section: str, entries, registry: dict[str, TermInfo]) -> tuple[Term, ...]:
    """Every entry of a term section, in order; ValueError naming the first bad key."""
    if entries is None:
        return ()
    if not isinstance(entries, dict):
        raise ValueError(f"{section}: expected a mapping of term names to options, got {entries!r}")
    return tuple(parse_entry(kind, section, str(name), entry, registry) for name, entry in entries.items())


def collect(*modules) -> dict[str, dict[str, TermInfo]]:
    """The terms declared in ``modules``, by kind and name."""
    table: dict[str, dict[str, TermInfo]] = {kind: {} for kind in KINDS}
    for module in modules:
        for value in vars(module).values():
            info = getattr(value, "term_info", None)
            if info is not None and getattr(value, "__module__", None) == module.__name__:
                table[info.kind][value.term_name] = info
    return table


def contact_groups(sections: dict[str, Iterable[Term]]) -> dict[tuple[str, ...], str]:
    """The body groups (regular-expression tuples) whose contacts the terms' ``contacts`` needs ask for -> the key
    naming them (for the builder's messages)."""
    groups: dict[tuple[str, ...], str] = {}
    for section, terms in sections.items():
        for entry in terms:
            for need in entry.needs:
                if need.contacts:
                    bodies = entry.params.get(need.contacts)
                    key = f"task.{section}.{entry.name}.{need.contacts}"
                    if isinstance(bodies, str) or not isinstance(bodies, (list, tuple)) or not bodies:
                        raise ValueError(f"{key}: expected a list of body regular expressions, got {bodies!r}")
                    groups.setdefault(tuple(str(b) for b in bodies), key)
    return groups
