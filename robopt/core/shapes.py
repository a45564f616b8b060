"""Shape glossary shared by every module, and the assert helper used where data crosses modules.

Glossary:
    N: number of parallel environments.
    T: time steps per rollout (per environment).
    B: batch (flattened T * N, or a minibatch of it).
    K: inner axis a policy defines for its log-ratio (1 for Gaussian, denoising steps for diffusion, ...).
    D: observation dimension.
    A: action dimension.
    H: action horizon (action chunking).
    L: token sequence length (language policies).
"""

from __future__ import annotations

import torch


def check_shape(name: str, tensor: torch.Tensor, shape: tuple[int | None, ...]) -> None:
    """Raise ValueError naming ``name`` if ``tensor`` does not match ``shape`` (None matches any size)."""
    if tensor.dim() != len(shape) or any(s is not None and s != t for s, t in zip(shape, tensor.shape)):
        expected = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name}: expected shape {expected}, got {list(tensor.shape)}")
