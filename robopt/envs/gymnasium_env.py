"""Any Gymnasium env id as N environments in one process, behind the torch VecEnv contract.

Shapes: N envs, D obs dim, A action dim. Rows auto-reset inside ``step``; the last observation of a
row that ended is in ``info["final_obs"]`` so truncated episodes can be bootstrapped.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from robopt.core.errors import NonFiniteError
from robopt.envs import deploy_conditions
from robopt.envs.episode_stats import EpisodeTracker
from robopt.envs.physics import quiet_known_asset_warnings


class GymnasiumVecEnv:
    """N copies of a Gymnasium env with a continuous (Box) action space and a flat Box observation."""

    def __init__(self, env_id: str, num_envs: int, device: str | torch.device = "cpu", **env_kwargs) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if env_id not in gym.registry:
            known = sorted(k for k in gym.registry if "-v" in k)
            raise ValueError(f"unknown Gymnasium env id {env_id!r}; registered ids include: {', '.join(known[:40])}")
        self.env_id = env_id
        self.num_envs = num_envs
        self.device = torch.device(device)
        conditions = env_kwargs.pop("deploy_conditions", None)  # the deploy runtime's actuation, in training
        with quiet_known_asset_warnings():  # Gymnasium's MJCF assets trigger a deprecation warning per env
            self.envs = [gym.make(env_id, **env_kwargs) for _ in range(num_envs)]
        if conditions is not None:
            self.envs = [deploy_conditions.wrap(env, conditions) for env in self.envs]
        obs_space, act_space = self.envs[0].observation_space, self.envs[0].action_space
        if not isinstance(act_space, gym.spaces.Box) or not isinstance(obs_space, gym.spaces.Box):
            raise ValueError(f"{env_id}: robopt needs Box observation and action spaces, got {obs_space} / {act_space}")
        self.obs_dim = int(np.prod(obs_space.shape))
        self.action_dim = int(np.prod(act_space.shape))
        self.action_low = torch.as_tensor(act_space.low.reshape(-1), dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(act_space.high.reshape(-1), dtype=torch.float32, device=self.device)
        self._obs = np.zeros((num_envs, self.obs_dim), dtype=np.float32)
        self._tracker = EpisodeTracker(num_envs, device=None)  # numpy counters: this adapter steps in numpy

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset all rows; env i is seeded with ``seed + i`` when a seed is given."""
        for i, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seed is None else seed + i)
            if seed is not None:
                env.action_space.seed(seed + i)
            self._obs[i] = np.asarray(obs, dtype=np.float32).reshape(-1)
        self._tracker.reset()
        return self._tensor(self._obs.copy())

    def step(self, action: torch.Tensor):
        """Step every row with action [N, A]; see ``robopt.core.protocols.VecEnv``."""
        action_np = self._check_action(action)
        obs_out = np.empty((self.num_envs, self.obs_dim), dtype=np.float32)
        final_obs = np.empty((self.num_envs, self.obs_dim), dtype=np.float32)
        reward = np.empty(self.num_envs, dtype=np.float32)
        terminated = np.empty(self.num_envs, dtype=bool)
        truncated = np.empty(self.num_envs, dtype=bool)
        for i, env in enumerate(self.envs):
            obs, reward[i], terminated[i], truncated[i], _ = env.step(action_np[i])
            final_obs[i] = np.reshape(obs, -1)
            if terminated[i] or truncated[i]:
                obs, _ = env.reset()
            obs_out[i] = np.reshape(obs, -1)
        if not (np.isfinite(final_obs).all() and np.isfinite(reward).all()):
            source = "reward" if np.isfinite(final_obs).all() else "observation"
            raise NonFiniteError(f"non-finite {source} from env {self.env_id}")
        episode_return, episode_length = self._tracker.update(reward, terminated | truncated)
        info = {
            "final_obs": self._tensor(final_obs),
            "episode_return": self._tensor(episode_return),
            "episode_length": self._tensor(episode_length),
        }
        self._obs = obs_out
        return self._tensor(obs_out), self._tensor(reward), self._tensor(terminated), self._tensor(truncated), info

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _check_action(self, action: torch.Tensor) -> np.ndarray:
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"{self.env_id}: action must be a torch.Tensor [N, A], got {type(action).__name__}")
        if tuple(action.shape) != (self.num_envs, self.action_dim):
            raise ValueError(
                f"{self.env_id}: action must have shape [{self.num_envs}, {self.action_dim}], got {list(action.shape)}"
            )
        if not action.dtype.is_floating_point:
            raise TypeError(f"{self.env_id}: action must be a floating-point tensor, got {action.dtype}")
        action_np = action.detach().cpu().numpy()
        if not np.isfinite(action_np).all():
            raise ValueError(f"{self.env_id}: action contains NaN or Inf")
        return action_np

    def state_dict(self) -> dict | None:
        """Exact simulator state of every row (MuJoCo and classic-control envs), or None if unsupported.

        Holds qpos/qvel/act/time (MuJoCo) or ``state`` (classic control), the env RNG, the time-limit
        counter and the episode trackers, so a resumed run continues the very same episodes.
        """
        rows = [_env_state(env) for env in self.envs]
        if any(row is None for row in rows):
            return None
        return {
            "rows": rows,
            "returns": torch.from_numpy(self._tracker.returns.copy()),
            "lengths": torch.from_numpy(self._tracker.lengths.copy()),
        }

    def load_state_dict(self, state: dict) -> None:
        for env, row in zip(self.envs, state["rows"]):
            _set_env_state(env, row)
        self._tracker.returns[:] = state["returns"].numpy()
        self._tracker.lengths[:] = state["lengths"].numpy()

    def render(self, index: int = 0) -> np.ndarray | None:
        """RGB frame of env ``index`` (the env must have been made with ``render_mode='rgb_array'``)."""
        return self.envs[index].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()


_MUJOCO_FIELDS = ("qpos", "qvel", "act", "ctrl", "qacc_warmstart")


def _wrappers(env: gym.Env):
    while True:
        yield env
        if not hasattr(env, "env"):
            return
        env = env.env


def _env_state(env: gym.Env) -> dict | None:
    unwrapped = env.unwrapped
    row: dict = {"rng": unwrapped.np_random.bit_generator.state}
    row["elapsed"] = [getattr(w, "_elapsed_steps", None) for w in _wrappers(env)]
    data = getattr(unwrapped, "data", None)
    if data is not None and hasattr(data, "qpos"):
        row["mujoco"] = {name: torch.from_numpy(getattr(data, name).copy()) for name in _MUJOCO_FIELDS}
        row["time"] = float(data.time)
    elif isinstance(getattr(unwrapped, "state", None), (np.ndarray, tuple, list)):
        row["state"] = torch.as_tensor(np.asarray(unwrapped.state, dtype=np.float64))
        row["last_u"] = getattr(unwrapped, "last_u", None)
        row["last_u"] = None if row["last_u"] is None else float(np.asarray(row["last_u"]).reshape(-1)[0])
    else:
        return None
    conditions = [w.state() for w in _wrappers(env) if isinstance(w, deploy_conditions.DeployConditions)]
    if conditions:
        row["deploy_conditions"] = conditions
    return row


def _set_env_state(env: gym.Env, row: dict) -> None:
    unwrapped = env.unwrapped
    unwrapped.np_random.bit_generator.state = row["rng"]
    for wrapper, elapsed in zip(_wrappers(env), row["elapsed"]):
        if elapsed is not None:
            wrapper._elapsed_steps = elapsed
    conditions = [w for w in _wrappers(env) if isinstance(w, deploy_conditions.DeployConditions)]
    for wrapper, state in zip(conditions, row.get("deploy_conditions", [])):
        wrapper.load_state(state)
    if "mujoco" in row:
        for name, value in row["mujoco"].items():
            getattr(unwrapped.data, name)[:] = value.numpy()
        unwrapped.data.time = row["time"]
        import mujoco

        mujoco.mj_forward(unwrapped.model, unwrapped.data)
    else:
        unwrapped.state = row["state"].numpy().copy()
        if hasattr(unwrapped, "last_u"):
            unwrapped.last_u = row["last_u"]
