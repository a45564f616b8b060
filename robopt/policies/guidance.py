"""Q-guided flow sampling: the flow's velocity plus a critic's action gradient, at integration time.

Shapes: B batch, D obs dim, A action dim, C critics, H hidden width.

With ``policy.guidance_scale`` w > 0 a flow policy integrates the guided velocity

    v_g(x, t, s) = v(x, t, s) + w t h * grad_a Qbar(s, a)|_{a = to_env(x + (1 - t) v(x, t, s))}

where x + (1 - t) v is the one-step estimate of the clean action from x_t (exact for straight flows), Qbar the
mean of the critics, h the action half-range (the chain rule from env units to the policy's normalized units), and
the factor t lets guidance grow as the estimate becomes reliable (w(t) = w t: the schedule is robopt's choice, the
method only asks for some w(t)). No weights change: the scale is a sampling knob, w = 0 is the plain flow.

The action gradient of an MLP critic is computed by an explicit backward pass (``mlp_input_gradient``: linear
layers, LayerNorm, relu, tanh, elu or silu), not autograd, so the guided sampler runs under ``torch.no_grad``
and traces into TorchScript and ONNX with the critic folded in (what the deploy runtime runs).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


def _activation_derivative(name: str, pre: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return (pre > 0.0).to(pre.dtype)
    if name == "tanh":
        return 1.0 - torch.tanh(pre).square()
    if name == "elu":
        return torch.where(pre > 0.0, torch.ones_like(pre), torch.exp(pre))
    if name == "silu":
        sigmoid = torch.sigmoid(pre)
        return sigmoid * (1.0 + pre * (1.0 - sigmoid))
    raise ValueError(f"no derivative for activation {name!r}")


def mlp_input_gradient(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """d sum(mlp(x)) / d x [B, in] of a robopt MLP with one output, by an explicit backward pass."""
    hidden, output = mlp._hidden_and_output
    norms = list(mlp.norms) if mlp.norms is not None else [None] * len(hidden)
    saved = []
    for layer, norm in zip(hidden, norms):
        pre = functional.linear(x, layer.weight, layer.bias)
        if norm is not None:
            mean, var = pre.mean(-1, keepdim=True), pre.var(-1, unbiased=False, keepdim=True)
            inv_std = torch.rsqrt(var + norm.eps)
            normalized = (pre - mean) * inv_std
            pre_act = normalized * norm.weight + norm.bias
            saved.append((layer, norm, normalized, inv_std, pre_act))
        else:
            pre_act = pre
            saved.append((layer, None, None, None, pre_act))
        x = mlp.activation(pre_act)
    grad = output.weight.expand(x.shape[0], -1)  # [B, H] (one output)
    for layer, norm, normalized, inv_std, pre_act in reversed(saved):
        grad = grad * _activation_derivative(mlp.activation_name, pre_act)
        if norm is not None:  # LayerNorm's backward: (g - mean(g) - x_hat mean(g x_hat)) / sigma, g = gamma grad
            g = grad * norm.weight
            grad = (g - g.mean(-1, keepdim=True) - normalized * (g * normalized).mean(-1, keepdim=True)) * inv_std
        grad = grad @ layer.weight
    return grad


def critic_action_gradient(critic: nn.Module, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """grad_a of the mean over critics of Q_c(s, a), [B, A], for a robopt ``QCritic``."""
    normalizer = critic.normalizer
    x = torch.cat((normalizer.forward(obs) if normalizer.enabled else obs, action), dim=-1)  # [B, D + A]
    grads = [mlp_input_gradient(net, x) for net in critic.nets]
    return (torch.stack(grads).mean(0))[:, obs.shape[-1] :]


class GuidedVelocity(nn.Module):
    """v_g(x, t) for one batch of observations (``bind``): the velocity plus the scaled critic gradient."""

    def __init__(self, velocity: nn.Module, critic: nn.Module, scale: float, centre, half_range) -> None:
        super().__init__()
        self.velocity, self.critic, self.scale = velocity, critic, float(scale)
        self.register_buffer("centre", centre.detach().clone())
        self.register_buffer("half_range", half_range.detach().clone())

    def bind(self, obs: torch.Tensor):
        """The field ``(obs_norm, x, t) -> v_g`` for raw observations ``obs`` (the critic normalizes its own)."""

        def field(obs_norm: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            v = self.velocity(obs_norm, x, t)
            clean = (x + (1.0 - t).unsqueeze(-1) * v) * self.half_range + self.centre  # env units
            grad = critic_action_gradient(self.critic, obs, clean) * self.half_range
            return v + self.scale * t.unsqueeze(-1) * grad

        return field
