"""Policies with memory: the recurrent Gaussian actor and value critic, and the actor that carries state for loops.

Shapes: N envs, B batch rows, L sequence length, S = B / L sequences, D obs dim, A action dim, H hidden size,
M the flat state width (GRU: layers * H; LSTM: 2 * layers * H, each layer's h then c).

A recurrent policy owns its state (DESIGN.md section 9; the ``Policy`` protocol of ``robopt.core.protocols``):
``initial_state(n)`` [n, M] and ``step(obs, state, episode_start) -> action, info, next_state``, which zeroes the
state of rows whose episode starts at this step before using it. ``info`` keeps that state and the
``episode_start`` flags, so a batch whose rows are whole sequences of ``sequence_length`` consecutive steps of one
env (time order inside each) can be replayed by ``log_ratio`` and ``kl``: the state at each sequence's first row,
reset again wherever an episode starts inside (truncated back-propagation through time over L steps).
``PolicyActor`` carries the state of N env rows for loops and evaluation (a memoryless policy passes straight
through it).

The cells it runs (GRU, LSTM) and ``policy.recurrent``'s config live in ``robopt.policies.cells``.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from robopt.core.normalization import FrozenNormalizer, RunningNormalizer
from robopt.core.protocols import memory_width
from robopt.options import ConfigError
from robopt.policies.cells import RecurrentConfig, RecurrentTorso
from robopt.policies.gaussian import GaussianPolicy
from robopt.policies.networks import MLP

__all__ = [
    "PolicyActor",
    "RecurrentConfig",
    "RecurrentGaussianPolicy",
    "RecurrentValueCritic",
    "check_sequence_length",
    "check_sequence_minibatch",
    "policy_memory",
]


class RecurrentGaussianPolicy(nn.Module):
    """pi(a | o_1..o_t) = N(mu(h_t), sigma^2) with h_t = cell(norm(o_t), h_{t-1}): the memory torso in front of a
    ``GaussianPolicy`` (its MLP, log-std and bounds) that reads the torso's output instead of the observation. A
    ``Policy``: it acts only through ``step``, with its state."""

    def __init__(self, obs_dim: int, action_dim: int, action_low, action_high, config) -> None:
        super().__init__()
        memory = config.recurrent
        self.obs_dim, self.action_dim, self.sequence_length = obs_dim, action_dim, memory.sequence_length
        self.normalizer = RunningNormalizer(obs_dim, enabled=config.normalize_obs)
        self.memory = RecurrentTorso(obs_dim, memory.hidden, memory.layers, memory.type)
        self.head = GaussianPolicy(
            memory.hidden,
            action_dim,
            action_low,
            action_high,
            config.hidden,
            config.activation,
            config.log_std_init,
            config.squash,
            normalize_obs=False,
            orthogonal_init=config.orthogonal_init,
        )

    @property
    def squash(self) -> bool:
        return self.head.squash

    @property
    def action_low(self) -> torch.Tensor:
        return self.head.action_low

    @property
    def action_high(self) -> torch.Tensor:
        return self.head.action_high

    def initial_state(self, n: int) -> torch.Tensor:
        """The state of n rows at an episode start: zeros [n, M]."""
        return self.memory.initial_state(n)

    def _normalized(self, obs: torch.Tensor) -> torch.Tensor:
        return self.normalizer(obs) if self.normalizer.enabled else obs

    def step(
        self, obs: torch.Tensor, state: torch.Tensor, episode_start: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """Act on obs [N, D] from ``state`` [N, M], zeroed first where ``episode_start`` [N] is set.

        Returns action [N, A], info (the head's, plus the ``state`` used and ``episode_start``) and the next state.
        """
        with torch.no_grad():
            state = torch.where(episode_start.unsqueeze(-1), torch.zeros_like(state), state)
            features, next_state = self.memory.step(self._normalized(obs), state)
            action, info = self.head.act(features, deterministic)
        info["state"], info["episode_start"] = state, episode_start
        return action, info, next_state

    def features(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """The torso's output [B, H] over rows that are whole sequences of L steps (``info`` from ``step``)."""
        return self.memory.over_rows(
            self._normalized(obs), info["state"], info["episode_start"], self.sequence_length, "recurrent policy batch"
        )

    def log_ratio(self, obs: torch.Tensor, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """log pi_new - log pi_old [B, 1] over whole sequences; 0 at the acting parameters up to float rounding
        (the sequence pass and the step-by-step one multiply matrices of other shapes)."""
        return self.head.log_ratio(self.features(obs, info), action, info)

    def kl(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """KL(pi_old || pi_new) [B] over whole sequences."""
        return self.head.kl(self.features(obs, info), info)

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """[B]: the log-std is a vector (state-independent), so the entropy does not depend on the memory."""
        return self.head.entropy(obs)

    def export_module(self) -> nn.Module:
        """Deterministic ``(obs [B, D], state [B, M]) -> (action [B, A], next_state [B, M])``."""
        return ExportedRecurrentPolicy(self)


class ExportedRecurrentPolicy(nn.Module):
    """One deterministic step of a RecurrentGaussianPolicy: normalize, cell, mean head, squash or clip.

    The caller holds the state: zeros [B, M] at an episode start (the deploy runtime resets it)."""

    def __init__(self, policy: RecurrentGaussianPolicy) -> None:
        super().__init__()
        self.normalizer = FrozenNormalizer(policy.normalizer)
        self.memory = copy.deepcopy(policy.memory).eval().requires_grad_(False)
        self.head = policy.head.export_module()
        self.state_dim = policy.memory.state_dim

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features, next_state = self.memory.step(self.normalizer(obs), state)
        return self.head(features), next_state


class RecurrentValueCritic(nn.Module):
    """V(o_1..o_t) [B] = MLP(h_t) with its own torso (the actor's and the critic's memories are separate), its own
    normalizer, and the state of each row given with the batch (``critic_state`` of a sequence batch)."""

    def __init__(
        self,
        obs_dim: int,
        memory: RecurrentConfig,
        hidden,
        activation: str,
        normalize_obs: bool = True,
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        self.sequence_length = memory.sequence_length
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize_obs)
        self.memory = RecurrentTorso(obs_dim, memory.hidden, memory.layers, memory.type)
        self.net = MLP(memory.hidden, 1, hidden, activation, output_gain=1.0, orthogonal_init=orthogonal_init)

    def initial_state(self, n: int) -> torch.Tensor:
        return self.memory.initial_state(n)

    def _normalized(self, obs: torch.Tensor) -> torch.Tensor:
        return self.normalizer(obs) if self.normalizer.enabled else obs

    def forward(
        self, obs: torch.Tensor, state: torch.Tensor | None = None, episode_start: torch.Tensor | None = None
    ) -> torch.Tensor:
        """V [B] of rows that are whole sequences of L steps: obs [B, D], the state of each row [B, M] (the first of
        each sequence is used) and ``episode_start`` [B]."""
        if state is None or episode_start is None:
            raise ValueError("a recurrent critic needs the rows' state and episode starts (a sequence batch)")
        features = self.memory.over_rows(
            self._normalized(obs), state, episode_start, self.sequence_length, "recurrent critic batch"
        )
        return self.net(features).squeeze(-1)

    def value_step(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """V [N] of obs [N, D] after the state [N, M] (no reset: a truncated episode's final observation)."""
        features, _ = self.memory.step(self._normalized(obs), state)
        return self.net(features).squeeze(-1)

    def rollout(
        self, obs: torch.Tensor, state: torch.Tensor, episode_start: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A whole rollout obs [T, N, D] from ``state`` [N, M] with ``episode_start`` [T, N].

        Returns V [T, N], the state each step started from [T, N, M] (after its reset) and the state after each step
        [T, N, M] (before the next step's reset).
        """
        out, after = self.memory.sequence(self._normalized(obs).transpose(0, 1), state, episode_start.T)
        value = self.net(out).squeeze(-1).T  # [T, N]
        after = after.transpose(0, 1)  # [T, N, M]
        before = torch.cat((state.unsqueeze(0), after[:-1]))
        before = torch.where(episode_start.unsqueeze(-1), torch.zeros_like(before), before)
        return value, before, after


class PolicyActor:
    """Acts for N env rows with any policy: a memoryless one's ``act``, or one with memory through its ``step`` with
    the state this object carries (``memory_width`` > 0). ``episode_ended(done [N])`` after each env step marks the
    rows whose next step starts an episode (their state is zeroed there)."""

    def __init__(self, policy, num_envs: int) -> None:
        self.policy, self.num_envs = policy, num_envs
        self.recurrent = memory_width(policy) > 0
        self.state = self.episode_start = None
        if self.recurrent:
            self.reset()

    @property
    def action_low(self) -> torch.Tensor:
        return self.policy.action_low

    @property
    def action_high(self) -> torch.Tensor:
        return self.policy.action_high

    def reset(self) -> None:
        """Every row starts an episode at its next step."""
        if self.recurrent:
            self.state = self.policy.initial_state(self.num_envs)
            self.episode_start = torch.ones(self.num_envs, dtype=torch.bool, device=self.state.device)

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if not self.recurrent:
            return self.policy.act(obs, deterministic)
        action, info, self.state = self.policy.step(obs, self.state, self.episode_start, deterministic)
        return action, info

    def episode_ended(self, done: torch.Tensor) -> None:
        if self.recurrent:
            self.episode_start = done.to(device=self.state.device, dtype=torch.bool)

    def state_dict(self) -> dict:
        return {} if not self.recurrent else {"state": self.state, "episode_start": self.episode_start}

    def load_state_dict(self, state: dict) -> None:
        if self.recurrent and state:
            self.state = state["state"].to(self.state.device)
            self.episode_start = state["episode_start"].to(self.state.device)


def check_sequence_minibatch(policy, size: int, name: str) -> None:
    """A recurrent policy's minibatches are whole sequences: ``size`` must be a multiple of its sequence length."""
    length = policy.sequence_length if memory_width(policy) > 0 else 1
    if size % length != 0:
        raise ConfigError(
            f"{name}={size} is not a whole number of sequences of policy.recurrent.sequence_length={length}: use a "
            f"multiple of {length}"
        )


def check_sequence_length(length: int, num_steps: int) -> None:
    """A recurrent policy's sequences of ``length`` steps must tile the rollout of ``num_steps``: one line if not."""
    if length > num_steps or num_steps % length != 0:
        raise ConfigError(
            f"policy.recurrent.sequence_length={length} must divide the rollout (rollout.num_steps={num_steps})"
            f"{' and is longer than it' if length > num_steps else ''}: use a sequence length that divides num_steps"
        )


def policy_memory(policy_config) -> RecurrentConfig | None:
    """The ``policy.recurrent`` section of a policy config when it turns memory on (only the Gaussian kind has one)."""
    memory = getattr(policy_config, "recurrent", None)
    return memory if memory is not None and memory.enabled else None
