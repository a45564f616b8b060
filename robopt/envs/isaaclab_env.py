"""Isaac Lab tasks behind the VecEnv contract (``env.backend: isaaclab``), on Isaac Lab 3.0's kit-less Newton physics.

Any registered Isaac Lab id (``Isaac-Cartpole-Direct``, ``Isaac-Cartpole``...; ``DirectRLEnv`` and
``ManagerBasedRLEnv`` alike) is built from its registered config (``isaaclab_tasks.utils.parse_cfg``) with
``sim.device`` = robopt's device, ``scene.num_envs`` = N and the Newton physics preset (``physics``, default
``newton_mjwarp``), its remote assets replaced by local ones (``robopt.envs.isaac_assets``). Isaac Lab lives in its
own venv (``make isaac``); this module imports it only when such an env is built.

What maps to what (read from ``isaaclab/envs/direct_rl_env.py``, ``manager_based_rl_env.py`` and the
``isaaclab_rl`` wrappers):
- observation: the ``policy`` group [N, D]; a ``critic`` group, where the task has one, is
  ``privileged_obs()`` [N, P] for ``critic.privileged`` (a task without one has P = 0).
- Isaac Lab resets ended envs inside ``step`` ("same-step autoreset"), so the returned observation of an ended
  row belongs to its next episode. The adapter sets the config's ``compute_final_obs`` so that Isaac Lab
  computes the observation once more before resetting and stores it in ``extras["final_obs"]``; that is
  ``info["final_obs"]`` (and ``final_privileged_obs``) for ended rows.
- terminated and truncated are Isaac Lab's ``reset_terminated`` and ``reset_time_outs``, never merged.
- ``extras["log"]`` (per-episode statistics Isaac Lab computes at resets) is ``info["log"]``, a dict of
  scalar tensors that the training loops average and log as ``env/<name>``.
- actions: an unbounded action space (most Isaac Lab tasks) gets bounds +-``clip_actions`` (default 1.0,
  as Isaac Lab's rsl_rl configs use); the task scales them (the cart-pole: 100 N per unit).
Returned tensors are copies: Isaac Lab updates its buffers in place at the next step.
"""

from __future__ import annotations

import math

import torch

from robopt.core.errors import NonFiniteError
from robopt.envs.episode_stats import EpisodeTracker

INSTALL_HINT = "Isaac Lab is not installed in this venv; run `make isaac` and use .venv-isaac/bin/robopt"
PHYSICS = ("newton_mjwarp",)


def import_isaaclab():
    """(gymnasium, parse_env_cfg) with Isaac Lab's tasks registered; a one-line ValueError without Isaac Lab."""
    try:
        import gymnasium as gym
        import isaaclab_tasks  # noqa: F401  (registers the Isaac-* ids)
        from isaaclab_tasks.utils.parse_cfg import parse_env_cfg
    except ImportError as error:
        raise ValueError(f"{INSTALL_HINT} ({error})") from None
    return gym, parse_env_cfg


def isaac_task_ids() -> list[str]:
    gym, _ = import_isaaclab()
    return sorted(k for k in gym.registry if k.startswith("Isaac-"))


class IsaacLabVecEnv:
    """N envs of one Isaac Lab task, stepped by Isaac Lab; see the module docstring."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: str | torch.device = "cpu",
        physics: str = "newton_mjwarp",
        assets_dir: str = "",
        clip_actions: float = 1.0,
        episode_length_s: float | None = None,
        seed: int = 0,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if physics not in PHYSICS:
            raise ValueError(f"env.kwargs.physics={physics!r}: robopt runs Isaac Lab on {', '.join(PHYSICS)} only")
        if not (isinstance(clip_actions, (int, float)) and math.isfinite(clip_actions) and clip_actions > 0):
            raise ValueError(f"env.kwargs.clip_actions must be a positive number, got {clip_actions!r}")
        gym, parse_env_cfg = import_isaaclab()
        if env_id not in gym.registry or not env_id.startswith("Isaac-"):
            known = isaac_task_ids()
            raise ValueError(f"unknown Isaac Lab task {env_id!r}; registered: {', '.join(known[:30])} ...")
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {str(self.device)!r}: torch sees no CUDA device here; Isaac Lab runs on cpu")
        from isaaclab.sim import SimulationContext

        from robopt.envs.isaac_assets import localize_scene

        if SimulationContext.instance() is not None:
            raise ValueError("Isaac Lab runs one simulation per process and one is open; close its env first")

        try:
            cfg = parse_env_cfg(env_id, device=str(self.device), num_envs=num_envs, overrides=[f"physics={physics}"])
        except Exception as error:  # Isaac Lab's config resolution raises many kinds; report one line
            raise ValueError(f"{env_id}: Isaac Lab could not build its config: {error}") from None
        self.replaced_assets = localize_scene(cfg.scene, assets_dir)
        cfg.compute_final_obs = True
        cfg.seed = seed
        if episode_length_s is not None:
            cfg.episode_length_s = float(episode_length_s)
        self.env_id, self.num_envs = env_id, num_envs
        try:
            self._env = gym.make(env_id, cfg=cfg)
        except Exception as error:  # a broken local asset, a scene Newton cannot build...: one line, no open sim
            SimulationContext.clear_instance()
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(f"{env_id}: Isaac Lab could not build the env: {first}") from None
        self.unwrapped = self._env.unwrapped
        obs, _ = self.unwrapped.reset(seed=seed)
        try:
            self._check_groups(obs)
        except ValueError:
            self._env.close()
            raise
        self.obs_dim = int(obs["policy"].shape[-1])
        self.privileged_dim = int(obs["critic"].shape[-1]) if "critic" in obs else 0
        action_space = self.unwrapped.single_action_space
        self.action_dim = int(math.prod(action_space.shape))
        low = torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1)
        high = torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1)
        bounded = torch.isfinite(low).all() and torch.isfinite(high).all()
        self.action_low = (low if bounded else torch.full_like(low, -clip_actions)).to(self.device)
        self.action_high = (high if bounded else torch.full_like(high, clip_actions)).to(self.device)
        self.max_episode_steps = int(self.unwrapped.max_episode_length)
        self.dt = float(self.unwrapped.step_dt)  # seconds per env step (physics dt x decimation): the control period
        self._obs = obs
        self._tracker = EpisodeTracker(num_envs, self.device)
        self.unwrapped.extras.pop("log", None)  # statistics of the resets at construction, not of episodes

    def _check_groups(self, obs) -> None:
        if not isinstance(obs, dict) or "policy" not in obs:
            groups = list(obs) if isinstance(obs, dict) else type(obs).__name__
            raise ValueError(f"{self.env_id}: robopt needs a 'policy' observation group, the task has {groups}")
        for name in ("policy", "critic"):
            if name in obs and (not torch.is_tensor(obs[name]) or obs[name].dim() != 2):
                raise ValueError(f"{self.env_id}: observation group {name!r} must be a flat [N, D] tensor")

    def reset(self, seed: int | None = None) -> torch.Tensor:
        obs, _ = self.unwrapped.reset(seed=seed)
        self._obs = obs
        self._tracker.reset()
        self.unwrapped.extras.pop("log", None)
        return obs["policy"].to(self.device, torch.float32, copy=True)

    def privileged_obs(self) -> torch.Tensor:
        """The ``critic`` group of the current observation, [N, P] ([N, 0] for a task without one)."""
        if self.privileged_dim == 0:
            return torch.zeros(self.num_envs, 0, device=self.device)
        return self._obs["critic"].to(self.device, torch.float32, copy=True)

    def step(self, action: torch.Tensor):
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"action must be [{self.num_envs}, {self.action_dim}], got {list(action.shape)}")
        action = torch.maximum(torch.minimum(action.to(self.device, torch.float32), self.action_high), self.action_low)
        self.unwrapped.extras.pop("final_obs", None)  # set by this step only when rows end
        obs, reward, terminated, truncated, extras = self.unwrapped.step(action)
        reward = reward.to(self.device, torch.float32, copy=True)
        terminated = terminated.to(self.device, torch.bool, copy=True)
        truncated = truncated.to(self.device, torch.bool, copy=True)
        done = terminated | truncated
        policy = obs["policy"].to(self.device, torch.float32, copy=True)
        final = extras.get("final_obs")
        final_obs = policy.clone()
        if final is not None:
            final_obs[done] = final["policy"].to(self.device, torch.float32)[done]
        if not (torch.isfinite(final_obs).all() and torch.isfinite(reward).all()):
            source = "reward" if torch.isfinite(final_obs).all() else "observation"
            raise NonFiniteError(f"non-finite {source} from env {self.env_id}")
        episode_return, episode_length = self._tracker.update(reward, done)
        info = {"final_obs": final_obs, "episode_return": episode_return, "episode_length": episode_length}
        if self.privileged_dim:
            final_critic = obs["critic"].to(self.device, torch.float32, copy=True)
            if final is not None:
                final_critic[done] = final["critic"].to(self.device, torch.float32)[done]
            info["final_privileged_obs"] = final_critic
        log = extras.pop("log", None)
        if log:
            info["log"] = {
                k: torch.as_tensor(v, dtype=torch.float32).detach().reshape(()).clone()
                for k, v in log.items()
                if isinstance(v, (int, float)) or (torch.is_tensor(v) and v.numel() == 1)
            }
        self._obs = obs
        return policy, reward, terminated, truncated, info

    def close(self) -> None:
        self._env.close()
