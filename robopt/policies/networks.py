"""MLP with orthogonal initialization (Saxe et al. 2014; gains as in OpenAI baselines / CleanRL).

The forward pass calls ``F.linear`` on each layer's parameters directly instead of going through a
``nn.Sequential`` of modules: for the small networks of robot control, per-module call overhead is a
large share of the time of a CPU forward pass (one env step, one 64-sample minibatch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional

ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "elu": functional.elu, "silu": functional.silu}


class MLP(nn.Module):
    """Linear layers of widths ``hidden`` with ``activation`` between them: [B, in_dim] -> [B, out_dim]."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int],
        activation: str = "tanh",
        output_gain: float = 1.0,
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; allowed: {', '.join(ACTIVATIONS)}")
        self.activation_name = activation
        self.activation = ACTIVATIONS[activation]
        widths = [in_dim, *hidden, out_dim]
        gains = [math.sqrt(2.0)] * len(hidden) + [output_gain]  # hidden sqrt(2), output 0.01 (policy) or 1 (value)
        self.layers = nn.ModuleList(
            _linear(width_in, width_out, gain, orthogonal_init)
            for width_in, width_out, gain in zip(widths[:-1], widths[1:], gains)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = self.activation(functional.linear(x, layer.weight, layer.bias))
        return functional.linear(x, last.weight, last.bias)


def _linear(width_in: int, width_out: int, gain: float, orthogonal_init: bool) -> nn.Linear:
    layer = nn.Linear(width_in, width_out)
    if orthogonal_init:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer
