"""Deterministic evaluation of a trained run, and MP4 recording through MuJoCo offscreen rendering."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robopt.checkpoint import load_checkpoint
from robopt.config import ConfigError, ExperimentConfig
from robopt.runner import LAST_CHECKPOINT, build_env, build_policy, load_run_config


@dataclass(frozen=True)
class EvalResult:
    mean_return: float
    std_return: float
    mean_length: float
    returns: list[float]


def load_policy(run_dir: Path) -> tuple[ExperimentConfig, torch.nn.Module]:
    """The run's config and its policy restored from the last checkpoint."""
    config = load_run_config(run_dir)
    path = Path(run_dir) / LAST_CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"run {str(run_dir)!r} has no checkpoint yet ({LAST_CHECKPOINT})")
    env = build_env(config, num_envs=1)
    policy = build_policy(config, env)
    env.close()
    try:
        policy.load_state_dict(load_checkpoint(path)["loop"]["policy"])
    except (RuntimeError, KeyError, EOFError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"checkpoint {str(path)!r} does not match this robopt version or the run's config: {first}"
        ) from None
    return config, policy.eval()


@torch.no_grad()
def evaluate_policy(policy, env, episodes: int, seed: int) -> EvalResult:
    """Run exactly one episode per env row (env.num_envs == episodes) with the deterministic action."""
    obs = env.reset(seed=seed)
    returns = torch.full((env.num_envs,), float("nan"))
    lengths = torch.zeros(env.num_envs)
    while torch.isnan(returns[:episodes]).any():
        action, _ = policy.act(obs, deterministic=True)
        action = torch.maximum(torch.minimum(action, env.action_high), env.action_low)
        obs, _, terminated, truncated, info = env.step(action)
        first = (terminated | truncated).cpu() & torch.isnan(returns)
        returns[first] = info["episode_return"].cpu()[first]
        lengths[first] = info["episode_length"].cpu().float()[first]
    values = returns[:episodes].tolist()
    return EvalResult(float(np.mean(values)), float(np.std(values)), float(lengths[:episodes].mean()), values)


def evaluate_run(run_dir: Path, episodes: int = 10, seed: int = 10_000) -> EvalResult:
    if episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {episodes}")
    config, policy = load_policy(run_dir)
    env = build_env(config, num_envs=episodes)
    try:
        return evaluate_policy(policy, env, episodes, seed)
    finally:
        env.close()


@torch.no_grad()
def record_video(run_dir: Path, path: Path, seed: int = 10_000, max_steps: int = 1000, fps: int | None = None) -> int:
    """Render one deterministic episode to ``path`` (MP4); returns the number of frames."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import gymnasium as gym
    import imageio

    from robopt.envs.registry import NATIVE_TASKS, _ensure_native_tasks_loaded

    config, policy = load_policy(run_dir)
    env_id = config.env.id
    if env_id.startswith("mujoco/"):
        _ensure_native_tasks_loaded()
        env_id = NATIVE_TASKS[env_id].gymnasium_id
    env = gym.make(env_id, render_mode="rgb_array", **config.env.kwargs)
    obs, _ = env.reset(seed=seed)
    frames = [env.render()]
    for _ in range(max_steps):
        action, _ = policy.act(torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1), deterministic=True)
        action = action[0].clamp(policy.action_low, policy.action_high).numpy()
        obs, _, terminated, truncated, _ = env.step(action)
        frames.append(env.render())
        if terminated or truncated:
            break
    fps = fps or int(env.metadata.get("render_fps", 30))
    env.close()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    imageio.mimsave(str(path), frames, fps=fps)
    return len(frames)
