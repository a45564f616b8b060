"""1-D temporal U-Net noise predictor for diffusion policies (Chi et al. 2023 "Diffusion Policy"; Ren et al. 2024 DPPO).

Shapes: H action horizon (chunk length), A action dim, C cond dim, L levels = len(channels), c_i = channels[i].

``TemporalUNet1D(x, cond)``: x [..., H, A] noisy action chunk, cond [..., C] (the normalized observation concatenated
with the denoising-step embedding, by the caller) -> predicted noise [..., H, A]. Leading dims are flattened to one
batch axis inside and restored on output; rows never mix (GroupNorm is per sample).

Structure (convolutions run over the time axis, the action dims are channels, "same" padding):

    x [N, A, H]
    level i = 0 .. L-1 (time length H / 2^i):  block(c_{i-1} -> c_i), block(c_i -> c_i) -> skip_i
                                              then, below the last level, stride-2 conv: length halves
    middle:                                    block(c_{L-1} -> c_{L-1}) twice
    level i = L-2 .. 0:                        transposed conv c_{i+1} -> c_i (length doubles),
                                              concat skip_i, block(2 c_i -> c_i), block(c_i -> c_i)
    head:                                      conv(c_0 -> c_0), GroupNorm, Mish, 1x1 conv c_0 -> A
    out [N, A, H] -> [..., H, A]

with c_{-1} = A. A block is two Conv1d(kernel_size) + GroupNorm(groups) + Mish layers with FiLM conditioning
(Perez et al. 2018) between them, h <- h * (1 + scale(cond)) + bias(cond) per channel, scale and bias one linear
map of cond, and a residual path (1x1 conv when the channel count changes). The head's 1x1 conv has its weights
multiplied by ``output_scale`` and a zero bias at init, so the initial prediction is small (and exactly
proportional to ``output_scale``).

H must be divisible by 2^(L-1) so that every down-sampled length is exact and the transposed convs restore it.
``forward`` has no data-dependent Python control flow: it traces (torch.jit.trace) and exports
(torch.onnx.export(..., dynamo=True)).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional


class TemporalUNet1D(nn.Module):
    """Noise predictor eps(x, cond): [..., H, A], [..., C] -> [..., H, A] (see the module docstring)."""

    def __init__(
        self,
        action_dim: int,
        horizon: int,
        cond_dim: int,
        channels: Sequence[int] = (64, 128),
        kernel_size: int = 5,
        groups: int = 8,
        output_scale: float = 0.01,
    ) -> None:
        super().__init__()
        channels = tuple(channels)
        _check_arguments(action_dim, horizon, cond_dim, channels, kernel_size, groups, output_scale)
        self.action_dim, self.horizon, self.cond_dim, self.channels = action_dim, horizon, cond_dim, channels

        def block(width_in: int, width_out: int) -> _ConditionalBlock:
            return _ConditionalBlock(width_in, width_out, cond_dim, kernel_size, groups)

        levels = len(channels)
        widths_in = (action_dim, *channels[:-1])
        self.down_blocks = nn.ModuleList(
            nn.ModuleList([block(width_in, width), block(width, width)]) for width_in, width in zip(widths_in, channels)
        )
        self.downsample = nn.ModuleList(
            nn.Conv1d(channels[i], channels[i], 3, stride=2, padding=1) for i in range(levels - 1)
        )  # L_out = floor((L_in + 2 - 3) / 2) + 1 = L_in / 2 for even L_in
        self.middle_blocks = nn.ModuleList([block(channels[-1], channels[-1]), block(channels[-1], channels[-1])])
        self.upsample = nn.ModuleList(
            nn.ConvTranspose1d(channels[i + 1], channels[i], 4, stride=2, padding=1) for i in range(levels - 1)
        )  # L_out = (L_in - 1) * 2 - 2 + 4 = 2 L_in
        self.up_blocks = nn.ModuleList(
            nn.ModuleList([block(2 * channels[i], channels[i]), block(channels[i], channels[i])])
            for i in range(levels - 1)
        )
        self.head = nn.Sequential(
            nn.Conv1d(channels[0], channels[0], kernel_size, padding=kernel_size // 2),
            nn.GroupNorm(groups, channels[0]),
            nn.Mish(),
        )
        self.output = nn.Conv1d(channels[0], action_dim, 1)
        with torch.no_grad():
            self.output.weight.mul_(output_scale)
            self.output.bias.zero_()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """x [..., H, A] noisy chunk, cond [..., C] -> predicted noise [..., H, A]."""
        if not torch.jit.is_tracing():  # shape checks only: the tracer would warn on each Python bool of a shape
            _check_shapes(x, cond, self.horizon, self.action_dim, self.cond_dim)
        leading = x.shape[:-2]
        h = x.reshape(-1, self.horizon, self.action_dim).transpose(1, 2)  # [N, A, H]
        cond = cond.reshape(-1, self.cond_dim)  # [N, C]
        skips = []
        for level, (first, second) in enumerate(self.down_blocks):
            h = second(first(h, cond), cond)  # [N, c_i, H / 2^i]
            skips.append(h)
            if level < len(self.downsample):
                h = self.downsample[level](h)
        for middle in self.middle_blocks:
            h = middle(h, cond)
        for level in range(len(self.upsample) - 1, -1, -1):
            h = self.upsample[level](h)  # [N, c_i, H / 2^i]
            first, second = self.up_blocks[level]
            h = second(first(torch.cat([h, skips[level]], dim=1), cond), cond)
        h = self.output(self.head(h))  # [N, A, H]
        return h.transpose(1, 2).reshape(*leading, self.horizon, self.action_dim)


class _ConditionalBlock(nn.Module):
    """Residual block [N, c_in, T], [N, C] -> [N, c_out, T]: conv-norm-Mish, FiLM, conv-norm-Mish, plus residual."""

    def __init__(self, width_in: int, width_out: int, cond_dim: int, kernel_size: int, groups: int) -> None:
        super().__init__()
        padding = kernel_size // 2  # odd kernel: the time length is kept
        self.conv_in = nn.Conv1d(width_in, width_out, kernel_size, padding=padding)
        self.norm_in = nn.GroupNorm(groups, width_out)
        self.film = nn.Linear(cond_dim, 2 * width_out)  # per-channel (scale, bias)
        self.conv_out = nn.Conv1d(width_out, width_out, kernel_size, padding=padding)
        self.norm_out = nn.GroupNorm(groups, width_out)
        self.residual = nn.Conv1d(width_in, width_out, 1) if width_in != width_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = functional.mish(self.norm_in(self.conv_in(x)))
        scale, bias = self.film(cond).unsqueeze(-1).chunk(2, dim=1)  # [N, c_out, 1] each
        h = h * (1.0 + scale) + bias  # FiLM (Perez et al. 2018), centred on the identity
        h = functional.mish(self.norm_out(self.conv_out(h)))
        return h + self.residual(x)


def _check_shapes(x: torch.Tensor, cond: torch.Tensor, horizon: int, action_dim: int, cond_dim: int) -> None:
    """One-line ValueErrors for inputs that are not x [..., H, A] and cond [..., C] with the same leading dims."""
    if x.shape[-2:] != (horizon, action_dim) or cond.shape[-1] != cond_dim:
        raise ValueError(
            f"expected x [..., {horizon}, {action_dim}] and cond [..., {cond_dim}], "
            f"got {tuple(x.shape)} and {tuple(cond.shape)}"
        )
    if cond.shape[:-1] != x.shape[:-2]:
        raise ValueError(f"leading dims of x {tuple(x.shape)} and cond {tuple(cond.shape)} differ")


def _check_arguments(
    action_dim: int,
    horizon: int,
    cond_dim: int,
    channels: tuple[int, ...],
    kernel_size: int,
    groups: int,
    output_scale: float,
) -> None:
    """One-line ValueErrors for sizes the U-Net cannot be built with."""
    for name, value in (("action_dim", action_dim), ("horizon", horizon), ("cond_dim", cond_dim)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if not channels or min(channels) < 1:
        raise ValueError(f"channels must be a non-empty sequence of positive widths, got {channels}")
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be odd and >= 1 (so convolutions keep the length), got {kernel_size}")
    if groups < 1 or any(width % groups for width in channels):
        raise ValueError(f"groups {groups} must divide every channel count {channels}: use a common divisor")
    factor = 2 ** (len(channels) - 1)
    if horizon % factor:
        raise ValueError(
            f"horizon {horizon} is not divisible by {factor} for channels {channels}: "
            f"use a horizon divisible by {factor} or fewer levels"
        )
    if not output_scale > 0.0:
        raise ValueError(f"output_scale must be > 0, got {output_scale}")
