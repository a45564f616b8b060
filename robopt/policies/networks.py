"""MLP builder with orthogonal initialization (Saxe et al. 2014; gains as in OpenAI baselines / CleanRL)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def mlp(
    in_dim: int,
    out_dim: int,
    hidden: Sequence[int],
    activation: str = "tanh",
    output_gain: float = 1.0,
    orthogonal_init: bool = True,
) -> nn.Sequential:
    """Linear layers of widths ``hidden`` with ``activation`` between them; orthogonal init when asked.

    Hidden layers get gain sqrt(2), the output layer ``output_gain`` (0.01 for a policy mean, 1 for a value).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; allowed: {', '.join(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    widths = [in_dim, *hidden]
    for width_in, width_out in zip(widths[:-1], widths[1:]):
        layers += [_linear(width_in, width_out, math.sqrt(2.0), orthogonal_init), ACTIVATIONS[activation]()]
    layers.append(_linear(widths[-1], out_dim, output_gain, orthogonal_init))
    return nn.Sequential(*layers)


def _linear(width_in: int, width_out: int, gain: float, orthogonal_init: bool) -> nn.Linear:
    layer = nn.Linear(width_in, width_out)
    if orthogonal_init:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer
