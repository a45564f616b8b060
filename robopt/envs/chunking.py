"""Action chunks: a VecEnv whose one step executes H steps of an inner VecEnv (DPPO's multi-step wrapper).

Shapes: N envs, H action horizon (chunk length), A inner action dim, D obs dim, P privileged dim.

Diffusion policies (DPPO, Ren et al. 2024) output a chunk of H actions and the env executes the whole chunk
before the policy is asked again, the chunk's rewards summed. ``ActionChunkEnv(env, H)`` is that env:

``step(action [N, H * A])``: sub-step h (0..H-1) applies ``action[:, h * A:(h + 1) * A]`` (row-major
``action.reshape(N, H, A)``) to the inner env. Per row, for the episode running at chunk start:
    reward      [N]: sum of the sub-step rewards up to and including the sub-step where the episode ended (all
                     H when it did not end); the rewards after that belong to the next episode and are not added.
    terminated, truncated [N] bool: those of the row's first end in the chunk (never merged; False elsewhere).
    info["final_obs"] [N, D]: the obs at that end for rows that ended, else the returned next obs.
    info["episode_return"] [N], info["episode_length"] [N]: the inner env's, from that end (0 elsewhere); the
        length counts inner steps, not chunks.
    Every other info tensor whose leading dim is N (``final_privileged_obs`` [N, P], ``is_success`` [N],
    ``unstable`` [N]...): from the end sub-step for rows that ended, else from the last sub-step. ``info["log"]``'s
    (sum, count) statistics (``env/success`` over the episodes that ended) are summed over the sub-steps. Other
    info values are those of the last sub-step.
    obs [N, D]: the inner obs after the last sub-step.

Rows that end mid-chunk: the inner vector env auto-resets the row and keeps stepping every row, so for the rest
of the chunk that row receives the neutral action (the midpoint of the bounds; 0, clipped into the bounds, where
a bound is infinite), not the rest of its old chunk. Those sub-steps act as part of the reset: their rewards go
to no chunk reward, but the inner env counts them in the next episode (its time limit, ``episode_return`` and
``episode_length``), and the obs returned for the row is the one after them. A second end of the same row in one
chunk (an episode that started and ended inside the reset sub-steps) is ignored: it changes no output (its
episode is missing from the episode statistics) and the row keeps receiving the neutral action.

Attributes: ``action_dim = H * A``; ``action_low``/``action_high`` [H * A] are the inner bounds tiled H times;
``num_envs``, ``obs_dim``, ``device``, ``env_id`` are the inner env's; ``dt = inner.dt * H`` and
``max_episode_steps = ceil(inner.max_episode_steps / H)`` exist when the inner env has them. ``privileged_obs()``
and ``privileged_dim``, ``state_dict()``/``load_state_dict()`` and ``render`` are the inner env's own, present
only when it has them (the wrapper keeps no state between steps, so the inner state is all a checkpoint needs;
``privileged_obs()`` read before a step gives the values of the obs at chunk start). Anything else
backend-specific (``set_model_params``, the native renderer's ``physics``/``task``) is reached through ``inner``.
Goal-task attributes (``compute_reward``, ``achieved_goal``, ``desired_goal``) are deliberately not exposed:
chunked goal tasks are not supported, as hindsight relabelling assumes one action per transition.
"""

from __future__ import annotations

import torch

from robopt.core.protocols import VecEnv
from robopt.envs.native_env import check_action
from robopt.envs.wrapper import WrappedEnv

__all__ = ["ActionChunkEnv", "neutral_action"]

_PASS_THROUGH = ("privileged_obs", "privileged_dim", "state_dict", "load_state_dict", "render")


def neutral_action(low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """The action [A] given after a mid-chunk end: midpoint of finite bounds, else 0 clipped into the bounds."""
    finite = torch.isfinite(low) & torch.isfinite(high)
    midpoint = 0.5 * low + 0.5 * high  # no overflow near the float limits
    zero = torch.maximum(torch.minimum(torch.zeros_like(low), high), low)
    return torch.where(finite, midpoint, zero)


class ActionChunkEnv(WrappedEnv):
    """``env`` stepped H sub-steps per ``step``; implements ``robopt.core.protocols.VecEnv`` (see the module doc)."""

    def __init__(self, env: VecEnv, horizon: int) -> None:
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"{env.env_id}: action horizon must be an integer >= 1, got {horizon!r}")
        self.inner, self.horizon = env, horizon
        self.action_dim = horizon * env.action_dim
        self.action_low = env.action_low.repeat(horizon)  # [H * A]
        self.action_high = env.action_high.repeat(horizon)  # [H * A]
        self._neutral = neutral_action(env.action_low, env.action_high)  # [A]
        self._label = f"{env.env_id} with action horizon {horizon}"
        if hasattr(env, "dt"):
            self.dt = env.dt * horizon
        if getattr(env, "max_episode_steps", None) is not None:
            self.max_episode_steps = -(-env.max_episode_steps // horizon)
        self.pass_through(_PASS_THROUGH)

    @property
    def obs_dim(self) -> int:
        return self.inner.obs_dim

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every inner env; returns obs [N, D]."""
        return self.inner.reset(seed=seed)

    def step(self, action: torch.Tensor):
        """Execute the chunk action [N, H * A]; returns obs [N, D], reward [N], terminated, truncated [N], info."""
        num_envs, inner_dim = self.num_envs, self.inner.action_dim
        check_action(self._label, action, num_envs, self.action_dim)
        chunk = action.reshape(num_envs, self.horizon, inner_dim)  # [N, H, A]
        neutral = self._neutral.to(action.device, action.dtype).expand(num_envs, inner_dim)  # [N, A]
        ended = torch.zeros(num_envs, dtype=torch.bool, device=self.device)  # [N]: ended earlier in this chunk
        total = terminated = truncated = None
        captured: dict[str, torch.Tensor] = {}  # leading-dim-N info tensors: first end's value for rows that ended
        counted: dict[str, tuple] = {}  # info["log"]'s (sum, count) statistics over every sub-step
        for h in range(self.horizon):
            sub_action = torch.where(ended.to(action.device)[:, None], neutral, chunk[:, h])  # [N, A]
            obs, reward, sub_terminated, sub_truncated, info = self.inner.step(sub_action)
            active = ~ended  # the row's chunk-start episode is still running at this sub-step
            first_end = (sub_terminated | sub_truncated) & active  # [N]
            masked = torch.where(active, reward, torch.zeros_like(reward))
            if total is None:
                total, terminated, truncated = masked, sub_terminated & active, sub_truncated & active
            else:
                total = total + masked
                terminated = torch.where(first_end, sub_terminated, terminated)
                truncated = torch.where(first_end, sub_truncated, truncated)
            for name, value in info.get("log", {}).items():
                if isinstance(value, tuple):  # (sum, count) statistics: summed over the sub-steps
                    before = counted.get(name)
                    counted[name] = value if before is None else (before[0] + value[0], before[1] + value[1])
            for key, value in info.items():
                if _per_row(value, num_envs):
                    previous = captured.get(key, value)
                    captured[key] = torch.where(_rows(first_end, value), value, previous)
            ended = ended | first_end
        out = {}
        for key, value in info.items():  # the last sub-step's info; per-row tensors of ended rows from their end
            out[key] = torch.where(_rows(ended, value), captured[key], value) if key in captured else value
        out["final_obs"] = torch.where(ended[:, None], captured["final_obs"], obs)
        if counted:
            out["log"] = {**out.get("log", {}), **counted}
        return obs, total, terminated, truncated, out


def _per_row(value: object, num_envs: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == num_envs


def _rows(mask: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Row mask [N] shaped to broadcast against value [N, ...] on its device."""
    return mask.to(value.device).view(-1, *([1] * (value.dim() - 1)))
