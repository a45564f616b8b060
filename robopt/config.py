"""Experiment configuration: YAML -> frozen, typed dataclasses, with ``a.b=value`` overrides.

Every field has a default and a one-line doc (``metadata['doc']``); string fields with a fixed set of
values list them in ``metadata['choices']``. Any unknown key or bad value raises ``ConfigError`` whose
one-line message names the key, the value and what is allowed.

This module is the core that knows no feature (DESIGN.md sections 8 and 9). ``Experiment`` holds what every run
has (name, seed, budget, device, env, logging, where it starts from) and reads its other sections (``algo``,
``rollout``, ``policy``, ``critic``, ``fleet``, ``robot``, ``task``) from the ``Section`` table its class names
(``__sections__``). The composition root, ``robopt.experiment``, defines the run config robopt uses,
``ExperimentConfig``: this base with the one table of robopt's sections, and ``load_config`` / ``load_run_config``
for it. No feature registers itself and nothing is installed globally: a config carries its table with its class,
so every function here works on it whoever imported what. A section is read as an attribute (``config.algo``). A
section may claim the run's kind (``runs_as``: the fleet turns a SAC run into a fleet run) and name the loop
builder of that kind (``loop``); the builder dispatches on it. A config file may start from another
(``extends: base.yaml``, ``read_config_file``).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from robopt.options import ConfigError, coerce, option

__all__ = [
    "ConfigError",
    "EnvConfig",
    "Experiment",
    "LogConfig",
    "Section",
    "apply_overrides",
    "build_dataclass",
    "config_to_dict",
    "describe_fields",
    "option",
    "parse_config_file",
    "parse_run_config",
    "read_config_file",
    "sections_of",
]


@dataclass(frozen=True)
class EnvConfig:
    id: str = option(
        "HalfCheetah-v5",
        "env id: a Gymnasium id (HalfCheetah-v5), a native task (mujoco/HalfCheetah), an Isaac Lab id "
        "(Isaac-<Task>) or a Meta-World task (metaworld/<task>-v3)",
    )
    num_envs: int = option(1, "number of parallel environments N")
    backend: str = option(
        "auto", "simulation backend", ("auto", "gymnasium", "isaaclab", "metaworld", "mujoco", "mujoco_warp", "torch")
    )
    kwargs: dict = option({}, "extra keyword arguments passed to the env constructor")
    observe: tuple[int, ...] = option(
        (), "keep only these observation indices, in this order (a partially observed variant); empty: all"
    )


@dataclass(frozen=True)
class LogConfig:
    run_root: str = option("runs", "directory under which runs/<experiment>/<timestamp>/ are created")
    checkpoint_every: int = option(10, "iterations between checkpoints (a final one is always written)")
    progress: bool = option(True, "show a live progress bar")
    eval_episodes: int = option(10, "episodes for the evaluation at the end of training (0 disables)")
    eval_every: int = option(
        0,
        "env steps between deterministic evaluations during training (log.eval_episodes episodes, the final "
        "evaluation's seeds), logged as eval_return; their time is excluded from wall_time (0: none)",
    )

    def __post_init__(self) -> None:
        if self.eval_every < 0 or self.eval_episodes < 0:
            raise ValueError(f"eval_every and eval_episodes must be >= 0, got {self.eval_every}, {self.eval_episodes}")
        if self.eval_every > 0 and self.eval_episodes == 0:
            raise ValueError(
                f"eval_every={self.eval_every} needs eval_episodes > 0 (the episodes each evaluation runs)"
            )


@dataclass(frozen=True)
class Section:
    """A config section a feature registers: one dataclass, or one per name picked by ``<section>.name``.

    ``choices`` is the feature's own registry (name -> dataclass), read when a config is built, so entries
    registered later are seen. ``noun`` names a choice in messages ("algorithm"). ``runs_as(config)`` returns
    the kind of loop this section makes the run (or None), and ``loop(config, initialize)`` builds that loop: the
    builder dispatches on them. ``env_options(config)`` returns keyword options this section gives the env's
    constructor (the robot's description and task), or {}. ``migrate(data)`` turns the raw mapping of a run config
    saved by an earlier robopt (keys since renamed or removed) into today's, for ``parse_run_config``.
    """

    name: str
    doc: str
    config_cls: type | None = None
    choices: Mapping[str, type] | None = None
    default: str = ""
    noun: str = ""
    runs_as: Callable[[Any], str | None] | None = None
    loop: Callable[..., Any] | None = None
    env_options: Callable[[Any], dict] | None = None
    migrate: Callable[[dict], dict] | None = None

    def default_value(self) -> Any:
        return self.choices[self.default]() if self.choices is not None else self.config_cls()

    def choice_name(self, value: Any) -> str | None:
        """The registered name of a named section's value (None for a plain section)."""
        if self.choices is None:
            return None
        return next(name for name, cls in self.choices.items() if cls is type(value))


def check_sections(sections: Iterable[Section]) -> tuple[Section, ...]:
    """``sections`` as a run config's table: names unique, none shadowing a core field, each one kind of section."""
    names: set[str] = set()
    for section in sections:
        if section.name in _CORE_FIELDS:
            raise ValueError(f"config section {section.name!r} would shadow a core field")
        if (section.config_cls is None) == (section.choices is None):
            raise ValueError(f"config section {section.name!r}: give config_cls or choices, not both")
        if section.name in names:
            raise ValueError(f"config section {section.name!r} is listed twice")
        names.add(section.name)
    return tuple(sections)


def sections_of(config: Any) -> dict[str, Section]:
    """The section table of a run config (its class's ``__sections__``) by name, in order."""
    return {section.name: section for section in type(config).__sections__ or ()}


@dataclass(frozen=True)
class Experiment:
    """What every run has; the sections (``config.algo``, ``config.policy``...) live in ``sections``.

    A base: a run config is a subclass naming its section table in ``__sections__`` (``robopt.experiment.
    ExperimentConfig``), so a config always knows its sections, however it was built.
    """

    __sections__: ClassVar[tuple[Section, ...] | None] = None

    name: str = option("experiment", "experiment name (run directory runs/<name>/<timestamp>)")
    seed: int = option(0, "random seed for torch, numpy and the envs")
    total_steps: int = option(1_000_000, "environment steps to train for (summed over envs)")
    device: str = option("cpu", "torch device for policy, storage and (native) simulation")
    torch_threads: int = option(0, "torch intra-op threads (0: auto, 1 on CPU where small networks gain nothing)")
    update_threads: int = option(
        0,
        "on-policy: torch intra-op threads during the update only, when the simulator's threads are idle (0: as "
        "torch_threads; e.g. 2 on a 2-core machine where the physics uses both cores while collecting)",
    )
    env: EnvConfig = option(EnvConfig(), "environment")
    sections: dict = option({}, "the feature sections by name (read as attributes: config.algo)")
    log: LogConfig = option(LogConfig(), "logging and checkpoints")
    init_from: str = option("", "start from this run directory's policy (weights and normalizer; e.g. a BC run)")
    critic_warmup: int = option(0, "with init_from: iterations that fit the fresh critic with the actor frozen")
    init_critic_from: str = option(
        "",
        "off-policy: load the Q critics (and V) from this run directory instead of init_from's (e.g. an "
        "offline IQL run's critics for a flow cloned in another run)",
    )
    init_normalizer: str = option(
        "frozen",
        "with init_from: keep the pretrained policy's observation statistics 'frozen' (those it was "
        "trained under) or 'update' them from the rollouts as a fresh run does",
        ("frozen", "update"),
    )

    def __post_init__(self) -> None:
        if self.critic_warmup < 0:
            raise ValueError(f"critic_warmup must be >= 0, got {self.critic_warmup}")
        table = _table(type(self))
        unknown = sorted(set(self.sections) - set(table))
        if unknown:
            raise ValueError(f"unknown config section {unknown[0]!r}; sections: {', '.join(table)}")
        filled = {
            name: self.sections[name] if name in self.sections else section.default_value()
            for name, section in table.items()
        }
        object.__setattr__(self, "sections", filled)

    def __getattr__(self, name: str) -> Any:
        # Only reached when ordinary lookup fails: a registered section. Dunder and ``sections`` lookups (pickle
        # and copy probe them before __dict__ is filled) stay plain AttributeErrors.
        sections = self.__dict__.get("sections")
        if name.startswith("__") or name == "sections" or sections is None:
            raise AttributeError(name)
        if name in sections:
            return sections[name]
        raise AttributeError(f"{type(self).__name__} has no field or section {name!r}; sections: {', '.join(sections)}")


_CORE_FIELDS = frozenset(f.name for f in dataclasses.fields(Experiment))


def _table(cls: type) -> dict[str, Section]:
    """The section table of a run config class by name; a ConfigError for the bare base."""
    if cls.__sections__ is None:
        raise ConfigError(
            f"{cls.__name__} is the base of a run config and has no sections: build robopt.experiment.ExperimentConfig "
            "(or a subclass naming its __sections__)"
        )
    return {section.name: section for section in cls.__sections__}


def _is_run_config(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, Experiment)


def build_dataclass(cls: type, data: dict | None, prefix: str = "") -> Any:
    """Build ``cls`` from a nested dict, validating every key and value."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = set(fields)
    table = _table(cls) if _is_run_config(cls) else {}
    if table:  # sections are keys of the config; ``sections`` itself is not
        names = (names - {"sections"}) | set(table)
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown config key '{prefix}{unknown[0]}'; allowed: {', '.join(sorted(names))}")
    values = {}
    for name, spec in fields.items():
        key = f"{prefix}{name}"
        if table and name == "sections":
            values[name] = {sname: build_section(section, data.get(sname)) for sname, section in table.items()}
        elif dataclasses.is_dataclass(hints[name]):
            values[name] = build_dataclass(hints[name], data.get(name), f"{key}.")
        elif name in data:
            values[name] = coerce(
                key, data[name], hints[name], spec.metadata.get("choices"), spec.metadata.get("check")
            )
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:  # __post_init__ validation of derived constraints
        raise ConfigError(_with_section(prefix, str(error))) from None


def _with_section(prefix: str, message: str) -> str:
    """A section's own error as one line naming the whole key: ``task.rewards.x.std: ...`` when the message starts
    with a key relative to the section (``rewards.x.std: ...``), else ``task: <message>``."""
    head = message.split(":", 1)[0]
    if prefix and ":" in message and re.fullmatch(r"[A-Za-z_][\w.\[\]]*", head):
        return prefix + message
    return f"{prefix.rstrip('.') or 'config'}: {message}"


def build_section(section: Section, data: dict | None) -> Any:
    """A registered section from its dict; a named section's ``name`` picks the dataclass from its registry."""
    if section.choices is None:
        return build_dataclass(section.config_cls, data, f"{section.name}.")
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{section.name}: expected a mapping, got {data!r}")
    data = dict(data or {})
    name = data.get("name", section.default)
    if name not in section.choices:
        allowed = ", ".join(sorted(section.choices))
        raise ConfigError(f"{section.name}.name: unknown {section.noun} {name!r}; allowed: {allowed}")
    config_cls = section.choices[name]
    if "name" not in {f.name for f in dataclasses.fields(config_cls)}:
        data.pop("name", None)  # the registry key, not a field of the dataclass (algo.name)
    return build_dataclass(config_cls, data, f"{section.name}.")


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b=value`` strings (value parsed as YAML) to a nested dict; returns a new dict."""
    data = yaml.safe_load(yaml.safe_dump(data, sort_keys=False)) or {}  # a copy; mappings keep their order
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"override {override!r} is not of the form key=value (e.g. algo.clip_low=0.1)")
        key, raw = override.split("=", 1)
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {part!r} is not a section")
        node[parts[-1]] = value
    return data


def parse_config_file(cls: type, path: str | Path, overrides: list[str] | None = None) -> Any:
    """A run config of class ``cls`` from a YAML experiment file (and the files it ``extends``), with overrides,
    validated (``robopt.experiment.load_config`` is this for robopt's ``ExperimentConfig``).

    ``extends: other.yaml`` (a path relative to the file) starts from that file's settings: mappings merge key by
    key, anything else is replaced, and a section whose ``name`` differs from the base's (another algorithm or
    policy kind) replaces the base's section whole, while a base section without a name (``algo: {loop: ...}``,
    shared by several algorithms) merges into any. ``replace: [task.observations, ...]`` lists dotted keys whose
    mapping in this file replaces the base's whole instead of merging into it (a student that observes less than
    the teacher it extends). The run's name is the file's own ``name`` or its file name.
    """
    path = Path(path)
    data = read_config_file(path)
    data.setdefault("name", path.stem)
    return build_dataclass(cls, apply_overrides(data, overrides or []))


def read_config_file(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """A config file's mapping with its ``extends`` chain merged in (the base's ``name`` is not inherited)."""
    if not path.is_file():
        where = f" (extended by {str(chain[-1])!r})" if chain else " (configs live in configs/*.yaml)"
        raise ConfigError(f"config file {str(path)!r} not found{where}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of config keys, got {type(data).__name__}")
    parent = data.pop("extends", None)
    replace = data.pop("replace", [])
    if not isinstance(replace, list) or not all(isinstance(key, str) and key for key in replace):
        raise ConfigError(f"{str(path)!r}: replace must be a list of dotted keys (task.observations), got {replace!r}")
    if parent is None:
        if replace:
            raise ConfigError(f"{str(path)!r}: replace {replace} needs extends (there is no base to replace)")
        return data
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{str(path)!r}: extends must be the path of another config file, got {parent!r}")
    base_path = (path.parent / parent).resolve()
    if base_path in (*chain, path.resolve()):
        raise ConfigError(f"{str(path)!r}: extends {parent!r} makes a cycle of config files")
    base = read_config_file(base_path, (*chain, path.resolve()))
    base.pop("name", None)
    merged = _merge(base, data)
    for key in replace:  # this file's own mapping, whole
        *parents, last = key.split(".")
        source, target = data, merged
        for part in parents:
            source, target = (source or {}).get(part), target.get(part)
        if not isinstance(source, dict) or last not in source:
            raise ConfigError(f"{str(path)!r}: replace names {key!r}, which this file does not set")
        target[last] = source[last]
    return merged


def _merge(base: dict, override: dict) -> dict:
    """``override`` over ``base``: mappings merged key by key; a mapping naming another registry choice than the
    base's replaces it whole; a base mapping without a name (``algo: {loop: ...}``) merges into any named one."""
    merged = dict(base)
    for key, value in override.items():
        old = merged.get(key)
        both = isinstance(old, dict) and isinstance(value, dict)
        renamed = both and "name" in old and "name" in value and value["name"] != old["name"]
        if both and not renamed:
            merged[key] = _merge(old, value)
        else:
            merged[key] = value
    return merged


def parse_run_config(cls: type, run_dir: str | Path) -> Any:
    """The resolved config of class ``cls`` saved in a run directory (``config.yaml``); a missing one is a one-line
    ConfigError (``robopt.experiment.load_run_config``)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    data = yaml.safe_load(path.read_text()) or {}
    for section in _table(cls).values():  # a run saved by an earlier robopt: its renamed and removed keys
        if section.migrate is not None:
            data = section.migrate(data)
    return build_dataclass(cls, data)


def config_to_dict(config: Any) -> dict:
    """Plain nested dict (tuples as lists, a named section with its name) for YAML output."""
    out: dict[str, Any] = {}
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        if isinstance(config, Experiment) and spec.name == "sections":
            table = sections_of(config)
            for name, section_value in value.items():
                as_dict = config_to_dict(section_value)
                choice = table[name].choice_name(section_value)
                out[name] = as_dict if choice is None or "name" in as_dict else {"name": choice, **as_dict}
            continue
        if dataclasses.is_dataclass(value):
            value = config_to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[spec.name] = value
    return out


def describe_fields(cls: type, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(key, default, doc) for every leaf field of ``cls``: used by ``robopt list`` and the README.

    For a run config (``robopt.experiment.ExperimentConfig``) its sections are described with their default dataclass.
    """
    rows = []
    for spec in dataclasses.fields(cls):
        if _is_run_config(cls) and spec.name == "sections":
            for name, section in _table(cls).items():
                rows += describe_fields(type(section.default_value()), f"{prefix}{name}.")
            continue
        default = spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()
        if dataclasses.is_dataclass(default):
            rows += describe_fields(type(default), f"{prefix}{spec.name}.")
        else:
            rows.append((f"{prefix}{spec.name}", default, spec.metadata.get("doc", "")))
    return rows
