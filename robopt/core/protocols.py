"""Protocols every backend, policy and ability implements (see DESIGN.md section 3).

Shapes follow ``robopt.core.shapes``: N envs, B batch, K inner log-ratio axis, D obs dim, A action dim.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from robopt.options import ConfigError


@runtime_checkable
class VecEnv(Protocol):
    """N environments stepped as one batch; everything is a torch tensor on ``device``.

    ``step`` auto-resets rows that ended. Its ``info`` dict always holds:
        ``final_obs``       [N, D] float32: last observation of rows that ended (other rows: the next obs).
        ``episode_return``  [N] float32: undiscounted return of the episode that ended (0 elsewhere).
        ``episode_length``  [N] int64: length of the episode that ended (0 elsewhere).
    Terminated and truncated are never merged. Tensors a step returns are never modified by later steps
    (the rollout storage keeps them by reference until the rollout ends).
    """

    num_envs: int
    obs_dim: int
    action_dim: int
    action_low: torch.Tensor  # [A]
    action_high: torch.Tensor  # [A]
    device: torch.device
    env_id: str

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every env; returns obs [N, D] float32."""
        ...

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Step with action [N, A]; returns obs [N, D], reward [N], terminated [N] bool, truncated [N] bool, info."""
        ...

    def close(self) -> None:
        """Release simulator resources."""
        ...


@runtime_checkable
class Policy(Protocol):
    """What the on-policy loop needs from any policy (Gaussian, recurrent Gaussian, diffusion, flow, language).

    Memory is state the policy owns (DESIGN.md section 9): ``initial_state(n)`` is the state of n rows at an
    episode's start, [n, M]; ``step`` acts from a state and returns the next one. A memoryless policy has M = 0 and
    passes the empty state through (``Memoryless``); ``memory_width`` tells the two apart, once, where a loop or an
    export is built.
    """

    def initial_state(self, n: int) -> torch.Tensor:
        """The state [n, M] of n rows at an episode's start (M = 0 without memory)."""
        ...

    def step(
        self, obs: torch.Tensor, state: torch.Tensor, episode_start: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """Act on obs [N, D] from ``state`` [N, M], zeroed first where ``episode_start`` [N] is set: action [N, A],
        the per-row info this policy needs later for ``log_ratio``, and the next state [N, M]."""
        ...

    def log_ratio(self, obs: torch.Tensor, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """log(pi_new / pi_old) as [B, K]; exactly 0 at the parameters that produced ``info``."""
        ...

    def export_module(self) -> nn.Module:
        """Stateless deterministic module ``obs [B, D] -> action [B, A]`` with normalization folded in."""
        ...


class Memoryless(Protocol):
    """A policy without memory: its ``act(obs, deterministic) -> action, info`` is its step, and its state is empty.

    Subclassed explicitly (``class GaussianPolicy(nn.Module, Memoryless)``), it gives ``initial_state`` and ``step``
    of the ``Policy`` protocol from ``act``."""

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Returns action [N, A] and the per-row info this policy needs later for ``log_ratio``."""
        ...

    def initial_state(self, n: int) -> torch.Tensor:
        """An empty state [n, 0] on the policy's device."""
        device = next(iter(self.parameters()), torch.empty(0)).device  # an nn.Module's
        return torch.zeros(n, 0, device=device)

    def step(
        self, obs: torch.Tensor, state: torch.Tensor, episode_start: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """``act``, with the empty state passed through."""
        action, info = self.act(obs, deterministic)
        return action, info, state


def memory_width(module: Any) -> int:
    """M of a policy's (or a critic's) state: 0 for one without memory (no ``initial_state``, or an empty one)."""
    initial_state = getattr(module, "initial_state", None)
    return 0 if initial_state is None else int(initial_state(0).shape[-1])


@runtime_checkable
class SupportsLogProb(Protocol):
    """Policies with a tractable log-density (SAC, reference-KL)."""

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """log pi(action | obs) as [B]."""
        ...


@runtime_checkable
class SupportsKL(Protocol):
    """Policies with a closed-form KL to their acting-time distribution (TRPO, adaptive learning rates)."""

    def kl(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """KL(pi_old || pi_new) per row as [B], where pi_old is described by ``info``."""
        ...


@runtime_checkable
class SupportsEntropy(Protocol):
    """Policies with a closed-form (or estimated) entropy."""

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """Entropy per row as [B]."""
        ...


@runtime_checkable
class SupportsImitation(Protocol):
    """Policies that behaviour cloning can fit (Gaussian: negative log-likelihood; flow: flow matching)."""

    def imitation_loss(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Per-row loss [B] whose minimization fits the policy to demonstrated (obs, action) pairs."""
        ...


class PolicyKindError(ConfigError, TypeError):
    """A config pairs an algorithm with a policy kind lacking an ability it needs (one line, CLI exit code 2)."""


def require(obj: Any, protocol: type, what: str, why: str) -> None:
    """Fail at build time with a readable message if ``obj`` lacks ``protocol`` (e.g. TRPO with a flow policy)."""
    if not isinstance(obj, protocol):
        raise PolicyKindError(f"{what} needs a policy that {protocol.__name__}: {type(obj).__name__} does not ({why})")
