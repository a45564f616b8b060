"""A run started from another run's weights (``init_from``, ``init_critic_from``): the policy, and an off-policy
algorithm's critics, loaded from that run's last checkpoint after checking that it is the same task and policy kind.
Every mismatch is a one-line ConfigError.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
import yaml

from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, Experiment, config_to_dict

__all__ = ["WARM_START_MODULES", "initialize_critics", "initialize_policy", "same_task"]


def same_task(first: str, second: str) -> bool:
    """Whether two env ids name one task (a native ``mujoco/<Task>`` id and its Gymnasium twin do)."""
    from robopt.envs.registry import gymnasium_twin

    def canonical(env_id: str) -> str:
        return gymnasium_twin(env_id) if env_id.startswith("mujoco/") else env_id

    try:
        return canonical(first) == canonical(second)
    except ValueError:
        return first == second


def initialize_policy(policy: torch.nn.Module, config: Experiment) -> None:
    """Load ``config.init_from``'s policy (weights and normalizer) into ``policy``; mismatches are one-line errors."""
    run_dir = Path(config.init_from)
    saved = _saved_config(run_dir)
    source = _source_identity(saved)
    if source is None or not (run_dir / LAST_CHECKPOINT).is_file():
        raise ConfigError(f"init_from={str(run_dir)!r} is not a run directory with a checkpoint ({LAST_CHECKPOINT})")
    source_env, source_policy = source
    if not same_task(source_env, config.env.id):
        raise ConfigError(f"init_from={str(run_dir)!r} was trained on {source_env}, this config runs {config.env.id}")
    _check_robot_task(saved, run_dir, config)
    if source_policy != config.policy.name:
        raise ConfigError(
            f"init_from={str(run_dir)!r} holds a {source_policy} policy, this config a {config.policy.name} policy"
        )
    try:
        state = load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["policy"]
        policy.load_state_dict(state)
    except (RuntimeError, KeyError, EOFError, OSError, pickle.UnpicklingError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"init_from={str(run_dir)!r}: its policy does not fit this config's (policy sizes differ?): {first}"
        ) from None


WARM_START_MODULES = ("critic", "target_critic", "value")


def initialize_critics(algorithm, config: Experiment) -> list[str]:
    """Warm-start an off-policy algorithm's critics (Q, target Q, V) from ``config.init_critic_from``'s (else
    ``init_from``'s) checkpoint when it has them (an IQL, FQL, QGF, SAC or TD3 run): offline pretraining, then
    online fine-tuning. Returns what was loaded; a critic of another size is a one-line error. An ``init_from``
    source without critics (behaviour cloning) loads none; an explicit ``init_critic_from`` that holds none of this
    algorithm's critics (a PPO run) is a one-line error."""
    run_dir = Path(config.init_critic_from or config.init_from)
    if not (run_dir / LAST_CHECKPOINT).is_file():
        raise ConfigError(f"init_critic_from={str(run_dir)!r} is not a run directory with a checkpoint")
    state = load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"].get("algorithm")
    loaded = []
    for name in WARM_START_MODULES:
        module = getattr(algorithm, name, None)
        if not isinstance(state, dict) or name not in state or not isinstance(module, torch.nn.Module):
            continue
        try:
            module.load_state_dict(state[name])
        except RuntimeError as error:
            first = str(error).strip().splitlines()[0]
            raise ConfigError(
                f"{str(run_dir)!r}: its {name} does not fit this config's critics (hidden widths or number of "
                f"critics differ?): {first}"
            ) from None
        loaded.append(name)
    if not loaded and config.init_critic_from:  # asked for explicitly: loading nothing is an error, not a no-op
        source = _source_algorithm(_saved_config(run_dir))
        raise ConfigError(
            f"init_critic_from={config.init_critic_from!r} holds no Q critics ({', '.join(WARM_START_MODULES)}: "
            f"none found{f'; it is a {source} run' if source else ''}); give an off-policy run (IQL, FQL, QGF, "
            "SAC, TD3...) or drop init_critic_from"
        )
    return loaded


def _saved_config(run_dir: Path) -> dict:
    """A run directory's saved config (``config.yaml``) as plain YAML; {} when there is none or it does not parse."""
    path = run_dir / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _source_algorithm(data: dict) -> str:
    """``algo.name`` of a saved config; '' when there is none."""
    algo = data.get("algo")
    return str(algo.get("name", "")) if isinstance(algo, dict) else ""


def _check_robot_task(data: dict, run_dir: Path, config: Experiment) -> None:
    """A robot run (``env.id: robot``) starts only from a run of the same robot and task observations: every robot
    task shares the env id, so its description and its observation terms tell tasks apart."""
    if config.env.id != "robot":
        return
    robot, task = (data.get("robot") or {}), (data.get("task") or {})
    theirs = (str(robot.get("mjcf", "")), list(task.get("observations") or {}))
    ours = (config.robot.mjcf, list(config.task.observations))
    if theirs != ours:
        raise ConfigError(
            f"init_from={str(run_dir)!r} is a run of another robot task ({theirs[0]}, observations "
            f"{', '.join(theirs[1])}); this config's is {ours[0]} with {', '.join(ours[1])}"
        )


def _source_identity(data: dict) -> tuple[str, str] | None:
    """(env id, policy name) of a saved config; None when there is none."""
    if not data:
        return None
    env, policy = data.get("env") or {}, data.get("policy") or {}
    if not isinstance(env, dict) or not isinstance(policy, dict):
        return None
    return str(env.get("id", "")), str(policy.get("name", "gaussian"))


def load_teacher(config: Experiment, env) -> tuple[torch.nn.Module, object]:
    """Distillation's teacher (``algo.teacher_from``): its policy with its trained weights and normalizer, and its
    observation computed on ``env`` (``robopt.envs.robot.teacher_view``). One line when it is not a run directory, is
    a run of another robot or task (naming what differs), or when the student observes a term a robot computer
    cannot compute (no deploy source: a height scan, the base height)."""
    from types import SimpleNamespace

    from robopt.config import build_dataclass
    from robopt.envs.robot.config import TaskConfig, parse_task_terms
    from robopt.envs.robot.teacher_view import TeacherView
    from robopt.policies import POLICIES

    run_dir = Path(config.algo.teacher_from)
    key = f"algo.teacher_from={str(run_dir)!r}"
    saved = _saved_config(run_dir)
    if not saved or not (run_dir / LAST_CHECKPOINT).is_file():
        raise ConfigError(f"{key} is not a run directory with a checkpoint ({LAST_CHECKPOINT})")
    if config.env.id != "robot" or (saved.get("env") or {}).get("id") != "robot":
        raise ConfigError(f"{key}: distillation runs between robot tasks (env.id: robot) on both sides")
    ours = _plain(config_to_dict(config))
    _same_sections(key, _plain(saved), ours)
    for entry in parse_task_terms(config.task)["observations"]:
        if entry.info.deploy is None:
            raise ConfigError(
                f"task.observations.{entry.name}: the student observes what a robot computer can compute (terms "
                "with a deploy source); this one is privileged: leave it to the teacher"
            )
    try:
        task = build_dataclass(TaskConfig, saved["task"], "task.")
        view = TeacherView(env, task)
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None
    name = str((saved.get("policy") or {}).get("name", "gaussian"))
    spec = POLICIES[name]
    shape = SimpleNamespace(
        obs_dim=view.obs_dim,
        action_dim=env.action_dim,
        action_low=env.action_low,
        action_high=env.action_high,
        device=env.device,
        env_id=config.env.id,
    )
    try:
        teacher = spec.build(build_dataclass(spec.config_cls, saved["policy"], "policy."), shape)
        teacher.load_state_dict(load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["policy"])
    except (RuntimeError, KeyError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"{key}: its policy cannot be rebuilt from its config: {first}") from None
    return teacher.to(config.device), view


def _plain(value):
    """Tuples as lists, recursively: a saved YAML config and a live one compare equal."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _same_sections(key: str, theirs: dict, ours: dict) -> None:
    """The teacher's robot and task (all but what each observes and how it is rewarded) are the student's."""
    for section, ignored in (("robot", ("mirror",)), ("task", ("observations", "critic", "rewards", "terminations"))):
        mine, other = ours.get(section) or {}, theirs.get(section) or {}
        for name in sorted(set(mine) | set(other)):
            if name in ignored or mine.get(name) == other.get(name):
                continue
            raise ConfigError(
                f"{key} is a run of another {section}: {section}.{name} differs ({other.get(name)!r} there, "
                f"{mine.get(name)!r} here)"
            )
