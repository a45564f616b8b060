"""Observation history: a VecEnv whose observation is the window of the last K control steps (``policy.history``).

Shapes: N envs, K frames, D inner obs dim, A action dim, F = D + A frame dim, P privileged dim.

The layout, one for the env, the export sidecar (``history``) and the deploy runtime
(``robopt.sim2real.window.HistoryWindow``): the window is K frames, oldest first, each frame
``[obs_t (D), a_{t-1} (A)]``, the observation and the action applied just before it (clamped into the action
bounds: what the env actually received). Flat, the window is ``[N, K * (D + A)]``: frame k is
``window[:, k * F:(k + 1) * F]``, frame K - 1 the newest. At reset, and for a row whose episode ended (after the
inner env's auto-reset), the window is the episode's first observation K times, each with the zero action clipped
into the bounds as its previous action. ``HistoryEnv(env, K)``:

``step(action [N, A])``: clamps the action into the bounds, steps the inner env with it and shifts the window
by one frame ``[next obs, clamped action]``. ``info["final_obs"]`` [N, K * F] is the window ending at the ended
episode's final observation (the inner ``final_obs``) for rows that ended, so a truncated row bootstraps from the
history it was in; for the other rows it is the returned window. Other info values are the inner env's
(``final_privileged_obs`` [N, P] stays the raw privileged obs: a privileged critic sees no history).

Off-policy replay stores whole windows (obs and next_obs rows are [K * F]): no change to the buffers, at K times
the memory per row, and every transition carries its own past. Goal tasks (``compute_reward``) are refused:
hindsight relabelling rewrites the goal inside the raw observation layout, which a window hides.

Attributes: ``obs_dim = K * (D + A)``; ``action_dim``, ``action_low``/``action_high``, ``num_envs``, ``device``,
``env_id`` are the inner env's; ``dt``, ``max_episode_steps``, ``privileged_obs()``/``privileged_dim`` and
``render`` pass through when the inner env has them. ``state_dict()``/``load_state_dict()`` exist when the inner
env has them and hold the inner state and the window. ``obs_bounds()`` gives the window's declared bounds (each
frame's obs bounds and action bounds) or (None, None). Anything else backend-specific is reached through
``inner``.
"""

from __future__ import annotations

import torch

from robopt.core.protocols import VecEnv
from robopt.envs.native_env import check_action
from robopt.envs.observe import declared_obs_bounds
from robopt.envs.wrapper import WrappedEnv
from robopt.options import ConfigError

__all__ = ["HISTORY_DOC", "HistoryEnv", "LAYOUT", "check_history", "history_frames"]

HISTORY_DOC = (
    "observation history K: the policy sees the observations and previous actions of the last K control steps "
    "(robopt.envs.history; 1: off)"
)


def check_history(history: int) -> None:
    """ValueError unless ``policy.history`` is an integer >= 1 (shared by the Gaussian, flow and diffusion configs)."""
    if isinstance(history, bool) or not isinstance(history, int) or history < 1:
        raise ValueError(f"history must be an integer >= 1 (control steps the policy sees; 1: off), got {history!r}")


LAYOUT = "frames oldest first: [obs, previous action]"  # the sidecar's history["layout"]
_PASS_THROUGH = ("privileged_obs", "privileged_dim", "render", "dt", "max_episode_steps")


class HistoryEnv(WrappedEnv):
    """``env`` observed as a window of its last K frames; implements ``robopt.core.protocols.VecEnv``."""

    def __init__(self, env: VecEnv, frames: int) -> None:
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
            raise ConfigError(f"{env.env_id}: policy.history must be an integer >= 1 (frames), got {frames!r}")
        if hasattr(env, "compute_reward"):
            raise ConfigError(
                f"policy.history={frames}: observation history is not supported on goal tasks ({env.env_id}: "
                "hindsight relabelling needs the raw goal layout of the observation); use policy.history=1"
            )
        self.inner, self.frames = env, frames
        self.frame_dim = env.obs_dim + env.action_dim  # F
        self.obs_dim = frames * self.frame_dim
        self.action_dim, self.action_low, self.action_high = env.action_dim, env.action_low, env.action_high
        zero = torch.zeros_like(env.action_low)
        self._zero_action = torch.maximum(torch.minimum(zero, env.action_high), env.action_low)  # [A]
        self._window: torch.Tensor | None = None  # [N, K, F]
        self.pass_through(_PASS_THROUGH)
        if hasattr(env, "state_dict") and hasattr(env, "load_state_dict"):
            self.state_dict, self.load_state_dict = self._state_dict, self._load_state_dict

    def _fresh(self, obs: torch.Tensor) -> torch.Tensor:
        """The window [N, K, F] of episodes starting at obs [N, D]: K frames [obs, zero action clipped]."""
        zero = self._zero_action.to(obs.device, obs.dtype).expand(obs.shape[0], -1)  # [N, A]
        frame = torch.cat([obs, zero], dim=-1)  # [N, F]
        return frame[:, None, :].expand(-1, self.frames, -1).clone()

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every inner env; returns the window [N, K * F]."""
        self._window = self._fresh(self.inner.reset(seed=seed))
        return self._window.reshape(self.num_envs, self.obs_dim)

    def step(self, action: torch.Tensor):
        """Step with action [N, A]; returns window [N, K * F], reward [N], terminated, truncated [N], info."""
        if self._window is None:
            raise RuntimeError(f"{self.env_id}: reset the HistoryEnv before stepping it")
        check_action(self.env_id, action, self.num_envs, self.action_dim)
        applied = torch.maximum(torch.minimum(action, self.action_high), self.action_low)  # [N, A]
        obs, reward, terminated, truncated, info = self.inner.step(applied)
        applied = applied.to(obs.device, obs.dtype)
        older = self._window[:, 1:]  # [N, K - 1, F]
        final = torch.cat([older, torch.cat([info["final_obs"], applied], dim=-1)[:, None]], dim=1)  # [N, K, F]
        shifted = torch.cat([older, torch.cat([obs, applied], dim=-1)[:, None]], dim=1)  # [N, K, F]
        ended = (terminated | truncated).to(obs.device)[:, None, None]  # [N, 1, 1]
        window = torch.where(ended, self._fresh(obs), shifted)  # no host sync: every row computed both ways
        self._window = window
        out = dict(info)
        out["final_obs"] = final.reshape(self.num_envs, self.obs_dim)
        return window.reshape(self.num_envs, self.obs_dim), reward, terminated, truncated, out

    def obs_bounds(self):
        """Declared window bounds (low [K * F], high [K * F]) as numpy arrays, or (None, None)."""
        import numpy as np

        low, high = declared_obs_bounds(self.inner)
        if low is None:
            return None, None
        action_low, action_high = self.action_low.cpu().numpy(), self.action_high.cpu().numpy()
        tile = lambda obs, act: np.tile(np.concatenate([obs, act]), self.frames)  # noqa: E731
        return tile(low, action_low), tile(high, action_high)

    def _state_dict(self) -> dict | None:
        """The inner env's state and the window (None when the inner env cannot save its state)."""
        inner = self.inner.state_dict()
        if inner is None or self._window is None:
            return None
        return {"inner": inner, "window": self._window.clone()}

    def _load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state["inner"])
        window = torch.as_tensor(state["window"]).to(self.device)
        if tuple(window.shape) != (self.num_envs, self.frames, self.frame_dim):
            raise ValueError(
                f"{self.env_id}: saved history window has shape {list(window.shape)}, expected "
                f"[{self.num_envs}, {self.frames}, {self.frame_dim}]"
            )
        self._window = window.clone()


def history_frames(env) -> tuple[object, int]:
    """The env under an observation history and its K: ``(env.inner, env.frames)`` for a HistoryEnv, else (env, 1)."""
    if isinstance(env, HistoryEnv):
        return env.inner, env.frames
    return env, 1
