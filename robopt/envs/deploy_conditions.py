"""The deploy runtime's actuation and sensing, in training: a Gymnasium wrapper (``env.kwargs.deploy_conditions``).

A policy trained without actuator delay or a rate limit can fail when deployed with them: a bang-bang SAC policy
on Pendulum swings up in training and does not under one tick of delay and a 1 N m per tick rate limit (issue 26).
Training under the same conditions the deployment imposes is the remedy. Per env step, as the deploy path does it:

    rate limit        the action is clamped into the action bounds, then moved at most ``max_action_delta`` from
                      the previous sent action (which starts at zero clamped into the bounds), as the deploy
                      runtime's safety layer (robopt.sim2real.safety)
    actuator delay    the action sent at step t is applied from step t + ``delay_ticks``; zero before any arrives,
                      as the simulated robot (robopt.sim2real.simrobot). ``[low, high]`` draws the delay per
                      episode (from the env's RNG): a deployed observation is up to one control period old as
                      well (latency and the phase between robot and controller), so its effective delay varies
    sensor noise      N(0, ``obs_noise``^2) added to each observation value, drawn from the env's own RNG

For Gymnasium envs (backend ``gymnasium``); native ``mujoco/<Task>`` envs have ``randomization.action_delay`` and
``obs_noise`` instead. The state (previous action, pending actions) is in checkpoints with the env's own.
"""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np

from robopt.rates import limit_rate  # numpy only

OPTIONS = ("delay_ticks", "max_action_delta", "obs_noise")


class DeployConditions(gym.Wrapper):
    """Rate limit, actuator delay and sensor noise around one Gymnasium env with a Box action space."""

    def __init__(self, env: gym.Env, delay_ticks=0, max_action_delta=None, obs_noise: float = 0.0) -> None:
        super().__init__(env)
        bounds = list(delay_ticks) if isinstance(delay_ticks, (list, tuple)) else [delay_ticks, delay_ticks]
        if (
            len(bounds) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 1000 for b in bounds)
            or bounds[0] > bounds[1]
        ):
            raise ValueError(
                "env.kwargs.deploy_conditions.delay_ticks must be an integer in [0, 1000] or [low, high] integers "
                f"with low <= high, got {delay_ticks!r}"
            )
        if isinstance(obs_noise, bool) or not isinstance(obs_noise, (int, float)) or not 0 <= obs_noise < np.inf:
            raise ValueError(f"env.kwargs.deploy_conditions.obs_noise must be a number >= 0, got {obs_noise!r}")
        space = env.action_space
        self.low, self.high = space.low.astype(np.float64), space.high.astype(np.float64)
        self.delta = None
        if max_action_delta is not None:
            try:
                delta = np.broadcast_to(np.asarray(max_action_delta, dtype=np.float64), space.shape).copy()
            except (TypeError, ValueError):
                delta = None
            if delta is None or not (np.isfinite(delta) & (delta > 0)).all():
                raise ValueError(
                    f"env.kwargs.deploy_conditions.max_action_delta must be a number > 0 or {space.shape[0]} "
                    f"numbers > 0 (null: no limit), got {max_action_delta!r}"
                )
            self.delta = delta
        self.delay_range, self.obs_noise = (int(bounds[0]), int(bounds[1])), float(obs_noise)
        self._start_episode(self.delay_range[0])

    def _start_episode(self, delay: int) -> None:
        zero = np.clip(np.zeros(self.low.shape), self.low, self.high)
        self.last_sent = zero
        self.pending = deque(np.zeros(self.low.shape) for _ in range(delay))  # applied next, in order

    def _sense(self, obs):
        if self.obs_noise == 0.0:
            return obs
        noisy = obs + self.env.unwrapped.np_random.normal(0.0, self.obs_noise, size=np.shape(obs))
        return noisy.astype(np.asarray(obs).dtype)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        low, high = self.delay_range
        delay = low if low == high else int(self.env.unwrapped.np_random.integers(low, high + 1))
        self._start_episode(delay)
        return self._sense(obs), info

    def step(self, action):
        sent = np.clip(np.asarray(action, dtype=np.float64), self.low, self.high)
        sent = self.last_sent = limit_rate(sent, self.last_sent, self.delta, self.low, self.high)
        self.pending.append(sent)
        applied = self.pending.popleft()
        obs, reward, terminated, truncated, info = self.env.step(applied.astype(self.env.action_space.dtype))
        return self._sense(obs), reward, terminated, truncated, info

    def state(self) -> dict:
        """Previous sent action and pending actions as lists of floats (checkpoints load with weights_only)."""
        return {"last_sent": self.last_sent.tolist(), "pending": [a.tolist() for a in self.pending]}

    def load_state(self, state: dict) -> None:
        self.last_sent = np.asarray(state["last_sent"], dtype=np.float64).copy()
        self.pending = deque(np.asarray(a, dtype=np.float64).copy() for a in state["pending"])


def wrap(env: gym.Env, options) -> gym.Env:
    """``env`` under ``options`` (the ``deploy_conditions`` mapping); unknown keys: one-line ValueError."""
    if not isinstance(options, dict):
        raise ValueError(f"env.kwargs.deploy_conditions must be a mapping of {', '.join(OPTIONS)}, got {options!r}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"env.kwargs.deploy_conditions: unknown {', '.join(unknown)}; allowed: {', '.join(OPTIONS)}")
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ValueError("env.kwargs.deploy_conditions needs a Box action space")
    return DeployConditions(env, **options)
