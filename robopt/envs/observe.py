"""Partially observed variants: a VecEnv that keeps only some observation indices (``env.observe``).

Shapes: N envs, D inner obs dim, S selected dims (``len(indices)``).

``ObservationSelectEnv(env, indices)`` returns ``obs[:, indices]`` [N, S] from ``reset`` and ``step`` and selects
``info["final_obs"]`` the same way (other info values, ``final_privileged_obs`` included, are the inner env's: a
privileged critic still sees the full state). It is the robot's sensors, so the simulated robot of a deployment
uses it too. Indices keep their order (``[2, 0]`` is a valid, reordered selection); an index outside
``0..D-1`` or a repeated one is a one-line ConfigError naming the env's obs_dim. Pendulum-v1 ``[0, 1]`` keeps
(cos, sin) without the angular velocity; native ``mujoco/Hopper`` ``[0, 1, 2, 3, 4]`` the positions without the
six velocities.

Attributes: ``obs_dim = S``; the action attributes, ``num_envs``, ``device``, ``env_id`` are the inner env's;
``dt``, ``max_episode_steps``, ``privileged_obs()``/``privileged_dim``, ``state_dict()``/``load_state_dict()``
and ``render`` pass through when the inner env has them (the selection holds no state). ``obs_bounds()`` gives
the selected declared bounds or (None, None). Goal-task attributes are not exposed (``build_env`` refuses a
selection on goal tasks).

``declared_obs_bounds(env)``: (low [D], high [D]) numpy arrays of an env's declared observation bounds (possibly
infinite), asked of a wrapper through its ``obs_bounds()`` or read from a Gymnasium env's observation space;
(None, None) when the env declares none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from robopt.core.protocols import VecEnv
from robopt.envs.wrapper import WrappedEnv
from robopt.options import ConfigError

__all__ = ["ObservationSelectEnv", "declared_obs_bounds"]

_PASS_THROUGH = ("privileged_obs", "privileged_dim", "state_dict", "load_state_dict", "render", "dt",
                 "max_episode_steps")  # fmt: skip


def declared_obs_bounds(env) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(low [D], high [D]) float64 declared by ``env`` (a wrapper's ``obs_bounds()``, a Gymnasium env's
    observation space), possibly infinite; (None, None) when it declares none."""
    own = getattr(env, "obs_bounds", None)
    if callable(own):
        return own()
    space = env.envs[0].observation_space if hasattr(env, "envs") else None
    if space is None or not hasattr(space, "low"):
        return None, None
    return np.asarray(space.low, dtype=np.float64).reshape(-1), np.asarray(space.high, dtype=np.float64).reshape(-1)


class ObservationSelectEnv(WrappedEnv):
    """``env`` with only the observation indices ``indices``; implements ``robopt.core.protocols.VecEnv``."""

    def __init__(self, env: VecEnv, indices: Sequence[int]) -> None:
        indices = list(indices)
        dim = env.obs_dim
        bad = [i for i in indices if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < dim]
        if not indices or bad or len(set(indices)) != len(indices):
            problem = f"index {bad[0]!r} is out of range" if bad else "indices repeat" if indices else "it is empty"
            raise ConfigError(
                f"env.observe={indices}: {problem}; {env.env_id} has obs_dim {dim}, so give distinct indices "
                f"from 0 to {dim - 1}"
            )
        self.inner, self.indices = env, tuple(indices)
        self._index = torch.as_tensor(indices, dtype=torch.long, device=env.device)  # [S]
        self.obs_dim = len(indices)
        self.action_dim, self.action_low, self.action_high = env.action_dim, env.action_low, env.action_high
        self.pass_through(_PASS_THROUGH)

    def _select(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.index_select(-1, self._index.to(obs.device))  # [N, S]: a fresh tensor

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every inner env; returns obs [N, S]."""
        return self._select(self.inner.reset(seed=seed))

    def step(self, action: torch.Tensor):
        """Step with action [N, A]; returns obs [N, S], reward [N], terminated, truncated [N], info."""
        obs, reward, terminated, truncated, info = self.inner.step(action)
        out = dict(info)
        out["final_obs"] = self._select(info["final_obs"])
        return self._select(obs), reward, terminated, truncated, out

    def obs_bounds(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Declared bounds of the selected observation (low [S], high [S]), or (None, None)."""
        low, high = declared_obs_bounds(self.inner)
        if low is None:
            return None, None
        return low[list(self.indices)], high[list(self.indices)]
