"""``robopt collect``: record a trained run's deterministic policy (or a scripted expert) as a Minari dataset.

A policy acting in chunks of H > 1 actions (``policy.horizon``) is recorded one action per step: the inner env of
its ``ActionChunkEnv`` is stepped with each action of the chunk in turn (see ``robopt.data.recording``), so the
dataset holds per-step observations, actions [A] and rewards, as a horizon-1 policy's would.

Every check that can fail (counts, dataset name, an existing dataset, Minari installed, run directory, expert id)
runs before the first env step, so bad input costs nothing and writes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robopt.build import available_device, build_env
from robopt.config import config_to_dict
from robopt.core.protocols import memory_width
from robopt.data.dataset_writer import check_can_write, write_dataset
from robopt.data.demonstrations import normalize_dataset_id, require_minari
from robopt.data.recording import record_episodes
from robopt.evaluation import load_policy, task_expert_env
from robopt.experiment import load_run_config
from robopt.options import ConfigError

MAX_DEFAULT_ENVS = 16
FORMATS = ("minari", "lerobot")
METAWORLD_EXPERT = "metaworld:"  # --expert metaworld:<task>: the task's policy in metaworld.policies


@dataclass(frozen=True)
class CollectResult:
    path: Path
    episodes: int
    transitions: int
    mean_return: float
    std_return: float
    success_rate: float | None = None  # envs that report info["is_success"]

    def summary(self) -> str:
        success = "" if self.success_rate is None else f", success {self.success_rate:.3f}"
        return (
            f"wrote {self.path}: {self.episodes} episodes, {self.transitions} transitions, "
            f"return {self.mean_return:.1f} +- {self.std_return:.1f}{success}"
        )


def collect(
    out: str,
    episodes: int,
    run_dir: Path | None = None,
    expert: str | None = None,
    action_noise: float = 0.0,
    root: str | Path | None = None,
    force: bool = False,
    seed: int = 0,
    num_envs: int | None = None,
    progress: bool = True,
    fmt: str = "minari",
    fps: float | None = None,
) -> CollectResult:
    """Record ``episodes`` episodes of a run's policy (``run_dir``) or of a scripted ``expert`` into ``out``: a
    Minari dataset id under ``root`` (``fmt="minari"``), or a LeRobot dataset folder (``fmt="lerobot"``, ``out`` its
    path; ``fps`` the env's control rate unless given)."""
    if (run_dir is None) == (expert is None):
        raise ConfigError("give either RUN_DIR (a trained run) or --expert ENV_ID, not both or neither")
    if episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {episodes}")
    if not action_noise >= 0.0:
        raise ConfigError(f"--action-noise must be at least 0, got {action_noise}")
    num_envs = min(episodes, MAX_DEFAULT_ENVS) if num_envs is None else num_envs
    if num_envs < 1:
        raise ConfigError(f"--envs must be at least 1, got {num_envs}")
    if fmt not in FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fps is not None and not fps > 0:
        raise ConfigError(f"--fps must be positive, got {fps}")
    if fmt == "minari":
        dataset_id = normalize_dataset_id(out)
        check_can_write(dataset_id, root, force)
        require_minari()
    elif Path(out).expanduser().exists() and not force:
        raise ConfigError(f"{out!r} already exists; pass --force to replace it")
    horizon = 1
    if run_dir is not None:
        env, act_fn, metadata, horizon = _from_run(Path(run_dir), num_envs)
    else:
        env, act_fn, metadata = _from_expert(expert, num_envs, seed)
    metadata.update(action_noise=action_noise, seed=seed, episodes=episodes)
    try:
        recorded = record_episodes(
            env, act_fn, episodes, action_noise=action_noise, seed=seed, progress=progress, horizon=horizon
        )
        successes = [e.success for e in recorded]
        if all(value is not None for value in successes):
            metadata["episode_success"] = successes  # per episode, in the dataset's order
        if fmt == "lerobot":
            path = _write_lerobot(Path(out).expanduser(), recorded, env, fps, metadata, force)
        else:
            path = write_dataset(
                dataset_id,
                recorded,
                env.env_id,
                env.obs_dim,
                env.action_dim,
                env.action_low,
                env.action_high,
                root=root,
                force=force,
                metadata=metadata,
            )
    finally:
        env.close()
    returns = np.array([e.episode_return for e in recorded])
    transitions = sum(e.length for e in recorded)
    rate = float(np.mean(metadata["episode_success"])) if "episode_success" in metadata else None
    return CollectResult(path, len(recorded), transitions, float(returns.mean()), float(returns.std()), rate)


def _from_run(run_dir: Path, num_envs: int) -> tuple[object, Callable, dict, int]:
    """The run's per-step env (its own config, ``num_envs`` rows), its policy's deterministic action (a chunk
    [N, H * A] when the policy acts in chunks) and metadata, and the chunk length H (1: one action per decision)."""
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {str(run_dir)!r} not found")
    config = load_run_config(run_dir)
    config = dataclasses.replace(config, device=str(available_device(config.device)))  # a GPU run, collected on CPU
    config, policy = load_policy(run_dir, config)
    if memory_width(policy) > 0:
        raise ConfigError(
            f"{str(run_dir)!r} has a recurrent policy (policy.recurrent.type={config.policy.recurrent.type}); robopt "
            "collect records memoryless policies (a dataset row holds no state): collect a memoryless or "
            "policy.history run, or a scripted --expert"
        )
    env = build_env(config, num_envs=num_envs)
    horizon = getattr(config.policy, "horizon", 1)
    if horizon > 1:  # build_env's ActionChunkEnv: record on its inner env, one action per step
        env = env.inner

    def act(obs: torch.Tensor) -> torch.Tensor:
        return policy.act(obs, deterministic=True)[0]

    algorithm = str(config_to_dict(config).get("algo", {}).get("name", "robopt"))
    metadata = {"source": "run", "run_dir": str(run_dir), "algorithm_name": algorithm}
    if horizon > 1:
        metadata["policy_horizon"] = horizon
    return env, act, metadata, horizon


def _from_expert(env_id: str, num_envs: int, seed: int) -> tuple[object, Callable, dict]:
    """A fresh env of ``env_id`` and its scripted expert from ``robopt.envs.experts.EXPERTS``; a config file (``.yaml``)
    names a robot task whose ``task.expert`` acts instead."""
    if env_id.startswith(METAWORLD_EXPERT):
        return _metaworld_expert(env_id.removeprefix(METAWORLD_EXPERT), num_envs)
    if env_id.endswith((".yaml", ".yml")):
        if not Path(env_id).is_file():
            raise ConfigError(f"--expert {env_id!r}: no such config file")
        return task_expert_env(Path(env_id), num_envs, seed)
    try:
        from robopt.envs.experts import EXPERTS
    except ImportError:
        raise ConfigError("no scripted experts are available in this robopt (robopt.envs.experts is missing)") from None
    if env_id not in EXPERTS:
        available = ", ".join(sorted(EXPERTS)) or "(none)"
        raise ConfigError(
            f"no scripted expert for env {env_id!r}; available: {available}, {METAWORLD_EXPERT}<task> (a Meta-World "
            "task's own scripted policy), or a robot task's config file with task.expert (configs/ppo_lift_cube.yaml, "
            "configs/ppo_place_cube.yaml, configs/ppo_push_t.yaml)"
        )
    from robopt.envs import make_env

    try:
        env = make_env(env_id, num_envs)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"--expert {env_id!r}: {error}") from None
    return env, EXPERTS[env_id](env, seed), {"source": "expert", "algorithm_name": "scripted expert"}


def _metaworld_expert(task: str, num_envs: int) -> tuple[object, Callable, dict]:
    """Rows of a Meta-World task (``push-v3``, or ``push``) and its own scripted policy (``metaworld.policies``, run in
    the Meta-World workers on each row's observation), on the sparse success reward."""
    from robopt.envs import make_env

    task = task if task.endswith("-v3") else f"{task}-v3"
    try:
        env = make_env(f"metaworld/{task}", num_envs)
    except (ValueError, RuntimeError) as error:
        raise ConfigError(f"--expert {METAWORLD_EXPERT}{task}: {error}") from None

    def act(obs: torch.Tensor) -> torch.Tensor:
        return env.expert_action()  # the workers hold each row's observation: the one ``obs`` is

    metadata = {"source": "expert", "algorithm_name": f"Meta-World scripted policy ({task})"}
    return env, act, metadata


def _write_lerobot(path: Path, recorded, env, fps: float | None, metadata: dict, force: bool) -> Path:
    """The episodes as a LeRobot dataset at ``path``, at ``fps`` or the env's control rate (1 / ``env.dt``)."""
    from robopt.data.lerobot_format import write_lerobot

    if fps is None:
        dt = getattr(env, "dt", None)
        if dt is None:
            raise ConfigError(f"{env.env_id} does not say its control period: give the dataset's rate with --fps")
        fps = 1.0 / float(dt)
    return write_lerobot(path, recorded, env.env_id, fps, task=env.env_id, metadata=metadata, force=force)
