"""MLP with orthogonal initialization (Saxe et al. 2014; gains as in OpenAI baselines / CleanRL).

The forward pass calls ``F.linear`` on each layer's parameters directly instead of going through a
``nn.Sequential`` of modules, and reads them from each layer's ``_parameters`` dict through a tuple of the
layers kept at build time: for the small networks of robot control, per-module call overhead and
``nn.Module.__getattr__`` (about 1 us per attribute) are a large share of a CPU forward pass (one env step,
one 64-sample minibatch); together they were 13 of the 28 us of a [1, 17] -> 64 -> 64 -> [1, 6] forward.
``torch.func.functional_call`` swaps tensors inside ``_parameters``, so it sees through this.
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
        layer_norm: bool = False,
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
        # The same modules in a plain tuple (a tuple is not registered again): read without nn.Module.__getattr__.
        self._hidden_and_output = (tuple(self.layers[:-1]), self.layers[-1])
        # layer_norm: LayerNorm (with its affine) after each hidden linear layer, before the activation (the
        # critics of FQL and other offline methods; it bounds Q outside the data's actions)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for width in hidden) if layer_norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, output = self._hidden_and_output
        if self.norms is not None:
            for layer, norm in zip(hidden, self.norms):
                x = norm(functional.linear(x, layer._parameters["weight"], layer._parameters["bias"]))
                x = self.activation(x)
            hidden = ()
        for layer in hidden:
            parameters = layer._parameters
            x = self.activation(functional.linear(x, parameters["weight"], parameters["bias"]))
        parameters = output._parameters
        return functional.linear(x, parameters["weight"], parameters["bias"])


def _linear(width_in: int, width_out: int, gain: float, orthogonal_init: bool) -> nn.Linear:
    layer = nn.Linear(width_in, width_out)
    if orthogonal_init:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def register_action_bounds(module: nn.Module, low, high, action_dim: int) -> None:
    """Buffers ``action_low``, ``action_high`` [A] and the affine map to normalized units on ``module``.

    ``action_centre`` and ``action_half_range`` give y = (a - centre) / half_range in [-1, 1] on dimensions with
    finite bounds, and the identity (centre 0, half-range 1) on unbounded ones (flow and diffusion policies).
    """
    low = torch.as_tensor(low, dtype=torch.float32).reshape(action_dim)
    high = torch.as_tensor(high, dtype=torch.float32).reshape(action_dim)
    finite = torch.isfinite(low) & torch.isfinite(high)
    module.register_buffer("action_low", low)
    module.register_buffer("action_high", high)
    module.register_buffer("action_centre", torch.where(finite, (high + low) / 2, torch.zeros_like(low)))
    module.register_buffer("action_half_range", torch.where(finite, (high - low) / 2, torch.ones_like(low)))
