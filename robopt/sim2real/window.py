"""The observation history on the deploy side: the window a policy with ``policy.history`` K > 1 was trained on.

Torch-free (numpy). Shapes: K frames, D raw obs dim (what the robot sends), A action dim, F = D + A frame dim.
The layout is ``robopt.envs.history``'s (the sidecar's ``history["layout"]``): K frames, oldest first, each
``[obs_t, a_{t-1}]``, flat [K * F]. ``HistoryWindow(policy, K, D, A, action_low, action_high)`` is a callable
obs [D] -> action [A] that keeps that window:
    ``__call__(obs)``  after a reset (and at the first call) fills the window with obs K times, each with the zero
                       action clipped into the bounds; otherwise shifts in the frame [obs, last action sent]; then
                       calls ``policy`` on the window [K * F] float32
    ``sent(action)``   the action actually sent to the robot (after the safety layer's clamp and rate limit): the
                       previous action of the next frame, as the env's window holds the clamped action it applied.
                       ``ControlLoop`` calls it after every send, the safe action's included
    ``reset()``        forget the window: the next observation starts a new one (the safety layer calls it after a
                       fault and at e-stop release, the control loop when a simulated robot starts an episode)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from robopt.sim2real.sidecar import DeployError, Sidecar

__all__ = ["HistoryWindow"]


class HistoryWindow:
    """obs [D] -> ``policy(window [K * (D + A)])`` -> action [A], the window kept as the env keeps it."""

    def __init__(
        self,
        policy: Callable[[np.ndarray], np.ndarray],
        frames: int,
        obs_dim: int,
        action_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
    ) -> None:
        if min(frames, obs_dim, action_dim) < 1:
            raise DeployError(
                f"history: frames, obs_dim and action_dim must be >= 1, got {frames}, {obs_dim}, {action_dim}"
            )
        self.policy, self.frames, self.obs_dim, self.action_dim = policy, frames, obs_dim, action_dim
        low, high = np.asarray(action_low, dtype=np.float32), np.asarray(action_high, dtype=np.float32)
        if low.shape != (action_dim,) or high.shape != (action_dim,):
            raise DeployError(f"history: action bounds must hold {action_dim} numbers, got {low.size} and {high.size}")
        self._zero = np.minimum(np.maximum(np.zeros(action_dim, np.float32), low), high)  # [A]
        self._window = np.zeros((frames, obs_dim + action_dim), dtype=np.float32)  # [K, F]
        self._previous = self._zero.copy()  # [A]: the action sent since the last call
        self._empty = True

    @classmethod
    def from_sidecar(cls, policy: Callable[[np.ndarray], np.ndarray], sidecar: Sidecar) -> HistoryWindow:
        """The window of an export whose sidecar has a ``history`` block."""
        if sidecar.history is None:
            raise DeployError("policy.json has no history block: this policy takes the raw observation")
        history = sidecar.history
        return cls(
            policy,
            history["frames"],
            history["obs_dim"],
            history["action_dim"],
            sidecar.action_low,
            sidecar.action_high,
        )

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """obs [D] -> action [A] of the policy on the window ending at obs."""
        obs = np.asarray(obs, dtype=np.float32).reshape(self.obs_dim)
        if self._empty:
            self._window[:, : self.obs_dim] = obs
            self._window[:, self.obs_dim :] = self._zero
            self._empty = False
        else:
            self._window[:-1] = self._window[1:].copy()
            self._window[-1, : self.obs_dim], self._window[-1, self.obs_dim :] = obs, self._previous
        return self.policy(self._window.reshape(-1).copy())

    def sent(self, action: np.ndarray) -> None:
        """Record the action [A] sent to the robot: the previous action of the next frame."""
        self._previous = np.asarray(action, dtype=np.float32).reshape(self.action_dim).copy()

    def reset(self) -> None:
        """Start a new window at the next observation (the previous action goes back to zero, clipped); a policy
        inside with its own reset (memory) is reset too."""
        self._empty = True
        self._previous = self._zero.copy()
        inner_reset = getattr(self.policy, "reset", None)
        if callable(inner_reset):
            inner_reset()

    def window(self) -> np.ndarray:
        """A copy of the current window [K * (D + A)] (for logs and tests)."""
        return self._window.reshape(-1).copy()
