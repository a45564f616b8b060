"""Critics: the state-value V(norm(s)) and the state-action Q_c(norm(s), a). Shapes: B batch, D obs, A action."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from robopt.core.normalization import RunningNormalizer
from robopt.options import option
from robopt.policies.networks import MLP


@dataclass(frozen=True)
class CriticConfig:
    hidden: tuple[int, ...] = option((64, 64), "hidden layer widths of the value network")
    activation: str = option("tanh", "hidden activation", ("tanh", "relu", "elu", "silu"))
    privileged: bool = option(
        False,
        "the critic also sees env.privileged_obs() (randomized parameters; the policy does not): "
        "on-policy algorithms on a native env with env.kwargs.randomization",
    )


class ValueCritic(nn.Module):
    """V(s) [B] with its own running observation normalizer (updated by the loop alongside the policy's)."""

    def __init__(
        self,
        obs_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        normalize_obs: bool = True,
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize_obs)
        self.net = MLP(obs_dim, 1, hidden, activation, output_gain=1.0, orthogonal_init=orthogonal_init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # The submodules' forward is called directly: nn.Module.__call__ and a disabled normalizer's call cost
        # about 7 us per minibatch on CPU (module hooks are not run here).
        normalizer = self.normalizer
        return self.net.forward(normalizer.forward(obs) if normalizer.enabled else obs).squeeze(-1)


class QCritic(nn.Module):
    """C independent state-action critics Q_c(s, a) -> [C, B] (C = 2: the clipped double-Q of SAC and TD3).

    Each critic is an MLP on [norm(s), a]; the observation normalizer is shared and, as the value critic's,
    updated by the loop. Actions enter in env units (bounded actions are already of order 1).
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        num_critics: int = 2,
        normalize_obs: bool = True,
        orthogonal_init: bool = False,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if num_critics < 1:
            raise ValueError(f"num_critics must be >= 1, got {num_critics}")
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize_obs)
        self.nets = nn.ModuleList(
            MLP(obs_dim + action_dim, 1, hidden, activation, 1.0, orthogonal_init, layer_norm)
            for _ in range(num_critics)
        )

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        normalizer = self.normalizer
        x = torch.cat((normalizer.forward(obs) if normalizer.enabled else obs, action), dim=-1)  # [B, D + A]
        return torch.stack([net.forward(x).squeeze(-1) for net in self.nets])  # [C, B]
