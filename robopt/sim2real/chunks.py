"""Action chunks in an export: a policy acting in chunks of H actions exported as [B, H, A] with per-step metadata.

Shapes: B batch, D obs dim, H action chunk (the policy's ``horizon``), A action dim per step.

A chunked policy's ``export_module()`` maps obs [B, D] -> the flat chunk [B, H * A], row-major (step h is
``[:, h * A:(h + 1) * A]``, as ``robopt.envs.chunking.ActionChunkEnv`` executes it). The deploy runtime
(``robopt.sim2real.model.ChunkedPolicy``) plays a [B, H, A] output one action [A] per control tick, so the export
wraps the module in ``ChunkedExport`` and describes the inner env (one action's bounds and period) in the sidecar.
"""

from __future__ import annotations

import torch
from torch import nn

from robopt.envs.chunking import ActionChunkEnv

__all__ = ["ChunkedExport", "step_env"]


class ChunkedExport(nn.Module):
    """``module`` (obs [B, D] -> flat chunk [B, H * A]) with its output viewed as [B, H, A]."""

    def __init__(self, module: nn.Module, horizon: int, action_dim: int) -> None:
        super().__init__()
        self.module, self.horizon, self.action_dim = module, horizon, action_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        flat = self.module(obs)  # [B, H * A]
        return flat.reshape(-1, self.horizon, self.action_dim)  # [B, H, A]: row-major, step h is flat[:, hA:(h+1)A]


def step_env(env) -> tuple[object, int]:
    """The env one action steps and the chunk H: ``(env.inner, env.horizon)`` for an ActionChunkEnv, else (env, 1)."""
    if isinstance(env, ActionChunkEnv):
        return env.inner, env.horizon
    return env, 1
