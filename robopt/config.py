"""Experiment configuration: YAML -> frozen, typed dataclasses, with ``a.b=value`` overrides.

Every field has a default and a one-line doc (``metadata['doc']``); string fields with a fixed set of
values list them in ``metadata['choices']``. Any unknown key or bad value raises ``ConfigError`` whose
one-line message names the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from robopt.fleet.config import FleetConfig
from robopt.options import option


class ConfigError(ValueError):
    """A config problem, reported to the user as one line (the CLI exits with code 2)."""


@dataclass(frozen=True)
class EnvConfig:
    id: str = option("HalfCheetah-v5", "env id: a Gymnasium id (HalfCheetah-v5) or a native task (mujoco/HalfCheetah)")
    num_envs: int = option(1, "number of parallel environments N")
    backend: str = option("auto", "simulation backend", ("auto", "gymnasium", "mujoco", "mujoco_warp", "torch"))
    kwargs: dict = option({}, "extra keyword arguments passed to the env constructor")


@dataclass(frozen=True)
class PolicyConfig:
    """The Gaussian policy's section; ``policy.name`` picks another kind's dataclass (see POLICY_CONFIGS)."""

    name: str = option("gaussian", "policy kind (gaussian, flow)", ("gaussian",))
    hidden: tuple[int, ...] = option((64, 64), "hidden layer widths of the mean network")
    activation: str = option("tanh", "hidden activation", ("tanh", "relu", "elu", "silu"))
    log_std_init: float = option(0.0, "initial log standard deviation of the Gaussian")
    squash: bool = option(False, "tanh-squash actions into the env bounds (otherwise clip)")
    normalize_obs: bool = option(True, "running observation normalization inside the policy")
    orthogonal_init: bool = option(True, "orthogonal weight initialization")
    state_dependent_std: bool = option(False, "log-std from a second network head (SAC's usual actor) not a vector")


@dataclass(frozen=True)
class CriticConfig:
    hidden: tuple[int, ...] = option((64, 64), "hidden layer widths of the value network")
    activation: str = option("tanh", "hidden activation", ("tanh", "relu", "elu", "silu"))
    privileged: bool = option(
        False, "the critic also sees env.privileged_obs() (randomized parameters; the policy does not): "
        "on-policy algorithms on a native env with env.kwargs.randomization"
    )  # fmt: skip


@dataclass(frozen=True)
class RolloutConfig:
    num_steps: int = option(2048, "steps collected per env per iteration T (batch = T * N)")
    gamma: float = option(0.99, "discount factor")
    gae_lambda: float = option(0.95, "GAE lambda")
    normalize_advantage: bool = option(
        True, "normalize advantages to zero mean, unit std per batch (group advantages too: Dr. GRPO sets false, "
        "which keeps the std scaling out)"
    )  # fmt: skip
    normalize_reward: bool = option(False, "scale rewards by the running std of the discounted return")
    advantage: str = option(
        "gae", "advantage estimator: gae, or group (rewards of consecutive groups of env.kwargs.group_size rows "
        "that share a prompt, against the group's mean: GRPO; no critic needed)", ("gae", "group"),
    )  # fmt: skip
    group_std: bool = option(True, "group: divide by the group's std (GRPO); false: Dr. GRPO")
    leave_one_out: bool = option(False, "group: baseline each row with the mean of the others (RLOO)")
    dynamic_sampling: bool = option(
        False, "group: drop groups whose rewards are all equal from the update (DAPO's filter)"
    )
    refill_rounds: int = option(
        0, "dynamic_sampling: extra rollouts at most per iteration that refill the batch with groups whose rewards "
        "differ, up to the batch size (DAPO's max_num_gen_batches - 1); 0: no refill, the batch shrinks"
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.refill_rounds < 0:
            raise ValueError(f"rollout.refill_rounds must be >= 0, got {self.refill_rounds}")
        if self.refill_rounds > 0 and not self.dynamic_sampling:
            raise ValueError(
                "rollout.refill_rounds refills what dynamic sampling drops: set rollout.dynamic_sampling=true"
            )


@dataclass(frozen=True)
class LogConfig:
    run_root: str = option("runs", "directory under which runs/<experiment>/<timestamp>/ are created")
    checkpoint_every: int = option(10, "iterations between checkpoints (a final one is always written)")
    progress: bool = option(True, "show a live progress bar")
    eval_episodes: int = option(10, "episodes for the evaluation at the end of training (0 disables)")


ALGO_CONFIGS: dict[str, type] = {}
POLICY_CONFIGS: dict[str, type] = {"gaussian": PolicyConfig}


def register_algo_config(name: str, config_cls: type) -> None:
    """Map ``algo.name`` to its config dataclass (explicit registry, no import strings)."""
    ALGO_CONFIGS[name] = config_cls


def register_policy_config(name: str, config_cls: type) -> None:
    """Map ``policy.name`` to its config dataclass: each policy kind has its own fields (DESIGN.md section 7)."""
    POLICY_CONFIGS[name] = config_cls


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = option("experiment", "experiment name (run directory runs/<name>/<timestamp>)")
    seed: int = option(0, "random seed for torch, numpy and the envs")
    total_steps: int = option(1_000_000, "environment steps to train for (summed over envs)")
    device: str = option("cpu", "torch device for policy, storage and (native) simulation")
    torch_threads: int = option(0, "torch intra-op threads (0: auto, 1 on CPU where small networks gain nothing)")
    env: EnvConfig = option(EnvConfig(), "environment")
    policy: Any = option(PolicyConfig(), "policy section; policy.name picks the kind (gaussian, flow, diffusion)")
    critic: CriticConfig = option(CriticConfig(), "value critic")
    rollout: RolloutConfig = option(RolloutConfig(), "on-policy rollout and advantage estimation")
    algo: Any = option(None, "algorithm section; algo.name picks the algorithm")
    log: LogConfig = option(LogConfig(), "logging and checkpoints")
    fleet: FleetConfig = option(FleetConfig(), "fleet: robots on Ray feeding one SAC/TD3 learner (num_robots > 0)")
    init_from: str = option("", "start from this run directory's policy (weights and normalizer; e.g. a BC run)")
    critic_warmup: int = option(0, "with init_from: iterations that fit the fresh critic with the actor frozen")
    init_normalizer: str = option(
        "frozen", "with init_from: keep the pretrained policy's observation statistics 'frozen' (those it was "
        "trained under) or 'update' them from the rollouts as a fresh run does", ("frozen", "update"),
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.critic_warmup < 0:
            raise ValueError(f"critic_warmup must be >= 0, got {self.critic_warmup}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(key: str, value: Any, tp: Any, choices: tuple[str, ...] | None) -> Any:
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
        return tuple(_coerce(f"{key}[{i}]", item, item_tp, None) for i, item in enumerate(value))
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


def build_dataclass(cls: type, data: dict | None, prefix: str = "") -> Any:
    """Build ``cls`` from a nested dict, validating every key and value."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown config key '{prefix}{unknown[0]}'; allowed: {', '.join(sorted(fields))}")
    values = {}
    for name, spec in fields.items():
        key = f"{prefix}{name}"
        if cls is ExperimentConfig and name == "algo":
            values[name] = build_algo(data.get("algo"), key)
        elif cls is ExperimentConfig and name == "policy":
            values[name] = build_policy_section(data.get("policy"), key)
        elif dataclasses.is_dataclass(hints[name]):
            values[name] = build_dataclass(hints[name], data.get(name), f"{key}.")
        elif name in data:
            values[name] = _coerce(key, data[name], hints[name], spec.metadata.get("choices"))
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:  # __post_init__ validation of derived constraints
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: {error}") from None


def build_algo(data: dict | None, key: str = "algo") -> Any:
    """The algorithm section: ``name`` picks the dataclass from ``ALGO_CONFIGS``."""
    import robopt.algorithms  # noqa: F401  (registers the algorithm configs)

    data = dict(data or {"name": "ppo"})
    name = data.pop("name", "ppo")
    if name not in ALGO_CONFIGS:
        raise ConfigError(f"{key}.name: unknown algorithm {name!r}; allowed: {', '.join(sorted(ALGO_CONFIGS))}")
    return build_dataclass(ALGO_CONFIGS[name], data, f"{key}.")


def build_policy_section(data: dict | None, key: str = "policy") -> Any:
    """The policy section: ``name`` picks the dataclass from ``POLICY_CONFIGS``."""
    import robopt.policies  # noqa: F401  (registers the policy configs)

    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{key}: expected a mapping, got {data!r}")
    data = dict(data or {})
    name = data.get("name", "gaussian")
    if name not in POLICY_CONFIGS:
        raise ConfigError(f"{key}.name: unknown policy {name!r}; allowed: {', '.join(sorted(POLICY_CONFIGS))}")
    return build_dataclass(POLICY_CONFIGS[name], data, f"{key}.")


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b=value`` strings (value parsed as YAML) to a nested dict; returns a new dict."""
    data = yaml.safe_load(yaml.safe_dump(data)) or {}
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


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML experiment file, apply overrides and validate."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found (configs live in configs/*.yaml)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {str(error).splitlines()[0]}") from None
    data.setdefault("name", path.stem)
    return build_dataclass(ExperimentConfig, apply_overrides(data, overrides or []))


def config_to_dict(config: Any) -> dict:
    """Plain nested dict (tuples as lists, algo with its name) for YAML output."""
    out: dict[str, Any] = {}
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        if dataclasses.is_dataclass(value):
            value = config_to_dict(value)
            if spec.name == "algo":
                name = next(k for k, v in ALGO_CONFIGS.items() if v is type(config.algo))
                value = {"name": name, **value}
        elif isinstance(value, tuple):
            value = list(value)
        out[spec.name] = value
    return out


def describe_fields(cls: type, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(key, default, doc) for every leaf field of ``cls``: used by ``robopt list`` and the README."""
    rows = []
    for spec in dataclasses.fields(cls):
        default = spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()
        if dataclasses.is_dataclass(default):
            rows += describe_fields(type(default), f"{prefix}{spec.name}.")
        else:
            rows.append((f"{prefix}{spec.name}", default, spec.metadata.get("doc", "")))
    return rows
