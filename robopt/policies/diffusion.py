"""Diffusion policy: actions denoised from Gaussian noise by a learned noise predictor, with DPPO's per-step ratio.

Shapes: B batch (or N envs), D obs dim, H action-chunk length, A action dim per step, X = H * A the flat chunk
(the policy's action, what a chunked env steps through; see ``robopt.envs.chunking``), K DDPM steps, K' fine-tuned
steps, E step-embedding width.

Training (behaviour cloning, Ho et al. 2020; Chi et al. 2023): eps_theta(x_t, t, s) regresses the noise of
x_t = sqrt(abar_t) y + sqrt(1 - abar_t) eps for the demonstrated chunk y in normalized action units
(y = (a - centre) / half_range on bounded dimensions). Schedules and step arithmetic: ``diffusion_schedule``
(tables from diffusers).

Acting (DPPO, Ren et al. 2024): the K-step DDPM chain is an inner MDP whose every step is a Gaussian
x_{t-1} ~ N(mu_theta(x_t, t, s), sigma_t^2), sigma_t = max(posterior std, ``min_sampling_std``) while sampling and
max(posterior std, ``min_logprob_std``) in log-probabilities; the noise is clipped to +-``noise_clip`` and the
final action to +-``denoised_clip``. ``act`` stores the last K'+1 points of the chain (``chain`` [B, K'+1, X]) and
their per-step log-probabilities and means under the acting weights; ``log_ratio`` returns [B, K'] per-step
log-ratios, column j the step from chain[:, j] to chain[:, j + 1] (timestep K' - 1 - j; the last column makes the
action), or [B, 1] for rows of (env step, denoising step) pairs made by ``pair_info``. Log-probabilities are
clamped per dimension to [``log_prob_min``, max] and averaged over the X dimensions (``log_prob_reduce``, DPPO's
choice).
Once ``freeze_base`` has run (the on-policy loop does it when RL starts), the first K - K' steps use a frozen
copy of the pretrained network, as in the paper. ``kl`` is the exact per-step KL of the two Gaussians ([B, K']).

Deterministic actions (evaluation, export, deployment) run ``ddim_steps`` steps of deterministic DDIM from x_K = 0,
or (``deterministic: ddpm``) the K DDPM steps along their means from x_K = 0: the chain DPPO fine-tunes, without its
noise (on the place task's clone: 0.82 of 100 episodes against DDIM's 0.73, docs/manipulation.md).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from robopt.core.normalization import FrozenNormalizer, RunningNormalizer
from robopt.core.protocols import Memoryless
from robopt.envs.history import HISTORY_DOC, check_history
from robopt.options import option
from robopt.policies import diffusion_schedule as schedule
from robopt.policies.networks import MLP, register_action_bounds

NETWORKS = ("mlp", "unet")
REDUCTIONS = ("mean", "sum")


@dataclass(frozen=True)
class DiffusionPolicyConfig:
    name: str = option("diffusion", "policy kind", ("diffusion",))
    network: str = option("mlp", "noise predictor: an MLP on the flat chunk, or a 1-D temporal U-Net", NETWORKS)
    hidden: tuple[int, ...] = option((256, 256), "mlp: hidden layer widths")
    activation: str = option("silu", "mlp: hidden activation", ("tanh", "relu", "elu", "silu"))
    unet_channels: tuple[int, ...] = option((32, 64), "unet: channels per level (H divisible by 2^(levels - 1))")
    horizon: int = option(1, "action chunk H: actions per decision, executed in turn by the env")
    denoising_steps: int = option(20, "K: DDPM training (and acting) steps")
    ft_steps: int = option(10, "K': the last denoising steps fine-tuned by DPPO (log_ratio is [B, K'])")
    ddim_steps: int = option(5, "deterministic DDIM steps for evaluation, export and deployment")
    deterministic: str = option(
        "ddim",
        "deterministic actions (evaluation, export, deployment): ddim (ddim_steps DDIM steps) or ddpm (the K-step "
        "DDPM chain DPPO samples, along its means, without noise)",
        ("ddim", "ddpm"),
    )
    beta_schedule: str = option("squaredcos_cap_v2", "diffusers beta schedule", schedule.BETA_SCHEDULES)
    min_sampling_std: float = option(0.1, "floor on each step's std while sampling (exploration)")
    min_logprob_std: float = option(0.1, "floor on each step's std in log-probabilities (> 0)")
    noise_clip: float = option(3.0, "clip each step's standard-normal noise to +-this")
    denoised_clip: float = option(1.0, "clip the predicted x0 and the final action to +-this (normalized units)")
    log_prob_reduce: str = option("mean", "per-step log-probability over the X dims: mean (DPPO) or sum", REDUCTIONS)
    log_prob_min: float = option(-5.0, "clamp each dimension's log-density from below (DPPO: -5)")
    log_prob_max: float = option(2.0, "clamp each dimension's log-density from above (DPPO: 2)")
    time_embedding: int = option(16, "width E of the sinusoidal step embedding (even)")
    output_scale: float = option(0.1, "gain of the noise predictor's output layer at initialization")
    normalize_obs: bool = option(True, "running observation normalization inside the policy")
    orthogonal_init: bool = option(True, "orthogonal weight initialization (mlp)")
    history: int = option(1, HISTORY_DOC)

    def __post_init__(self) -> None:
        check_history(self.history)
        if self.history > 1 and self.horizon > 1:
            raise ValueError(
                f"history={self.history} needs horizon 1 (an observation history holds one action per control step; "
                f"horizon={self.horizon} acts in chunks): set history=1 or horizon=1"
            )
        k = self.denoising_steps
        if not 1 <= k <= 1000:
            raise ValueError(f"denoising_steps must be in [1, 1000], got {k}")
        if not 1 <= self.ft_steps <= k:
            raise ValueError(
                f"ft_steps (K') must be in [1, denoising_steps={k}] (the chain has {k} steps), got {self.ft_steps}"
            )
        if not 1 <= self.ddim_steps <= k:
            raise ValueError(
                f"ddim_steps must be in [1, denoising_steps={k}] (the scheduler's training steps), "
                f"got {self.ddim_steps}"
            )
        if not self.min_logprob_std > 0.0:
            raise ValueError(
                f"min_logprob_std must be > 0 (the last step's posterior std is 0: its log-probability "
                f"would be infinite), got {self.min_logprob_std}"
            )
        if self.min_sampling_std < 0.0 or not self.noise_clip > 0.0 or not self.denoised_clip > 0.0:
            raise ValueError(
                f"min_sampling_std must be >= 0, noise_clip and denoised_clip > 0, got "
                f"{self.min_sampling_std}, {self.noise_clip}, {self.denoised_clip}"
            )
        if not self.log_prob_min < self.log_prob_max:
            raise ValueError(f"log_prob_min must be < log_prob_max, got {self.log_prob_min}, {self.log_prob_max}")
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1 (actions per decision), got {self.horizon}")
        if self.time_embedding < 2 or self.time_embedding % 2:
            raise ValueError(f"time_embedding must be an even number >= 2, got {self.time_embedding}")
        if self.output_scale <= 0.0:
            raise ValueError(f"output_scale must be > 0, got {self.output_scale}")


def step_embedding(t: torch.Tensor, width: int) -> torch.Tensor:
    """Sinusoidal embedding [..., E] of integer timesteps t [...] (Vaswani et al. 2017 frequencies)."""
    half = width // 2
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / max(half - 1, 1))
    angles = t.to(torch.float32).unsqueeze(-1) * frequencies  # [..., E / 2]
    return torch.cat((torch.sin(angles), torch.cos(angles)), dim=-1)


class NoisePredictor(nn.Module):
    """eps_theta(x_t, t, s): [..., D], [..., X], [...] int64 -> [..., X] (MLP on the flat chunk, or a U-Net)."""

    def __init__(self, obs_dim: int, chunk_dim: int, config: DiffusionPolicyConfig) -> None:
        super().__init__()
        self.width, self.network, self.horizon = config.time_embedding, config.network, config.horizon
        c = config
        if c.network == "unet":
            from robopt.policies.unet1d import TemporalUNet1D

            self.net = TemporalUNet1D(
                chunk_dim // c.horizon,
                c.horizon,
                obs_dim + c.time_embedding,
                c.unet_channels,
                output_scale=c.output_scale,
            )
        else:
            in_dim = obs_dim + chunk_dim + c.time_embedding
            self.net = MLP(in_dim, chunk_dim, c.hidden, c.activation, c.output_scale, c.orthogonal_init)

    def forward(self, obs_norm: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        embedding = step_embedding(t, self.width)
        if self.network == "unet":
            chunk = x.reshape(*x.shape[:-1], self.horizon, -1)  # [..., H, A]
            return self.net(chunk, torch.cat((obs_norm, embedding), dim=-1)).reshape(x.shape)
        return self.net.forward(torch.cat((obs_norm, x, embedding), dim=-1))


class DiffusionPolicy(nn.Module, Memoryless):
    """A DDPM actor over a (bounded) action chunk with DPPO's per-denoising-step log-ratio (see module docstring)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        action_low: torch.Tensor,
        action_high: torch.Tensor,
        config: DiffusionPolicyConfig | None = None,
    ) -> None:
        super().__init__()
        config = config or DiffusionPolicyConfig()
        if action_dim % config.horizon:
            raise ValueError(f"action_dim {action_dim} is not a whole number of chunks of horizon {config.horizon}")
        self.config, self.obs_dim, self.action_dim = config, obs_dim, action_dim
        self.normalizer = RunningNormalizer(obs_dim, enabled=config.normalize_obs)
        self.denoiser = NoisePredictor(obs_dim, action_dim, config)
        self.base_denoiser = copy.deepcopy(self.denoiser).requires_grad_(False)  # used once base_frozen is set
        self.register_buffer("base_frozen", torch.tensor(False))
        c = config
        for name, table in schedule.ddpm_tables(c.denoising_steps, c.beta_schedule, c.denoised_clip).items():
            self.register_buffer(f"ddpm_{name}", table, persistent=False)  # from the config, not the weights
        ddim = schedule.ddim_tables(c.denoising_steps, c.beta_schedule, c.denoised_clip, c.ddim_steps)
        for name, table in ddim.items():
            self.register_buffer(f"ddim_{name}", table, persistent=False)
        register_action_bounds(self, action_low, action_high, action_dim)
        # timestep of chain column j -> j + 1, for j = 0 .. K' - 1
        self.register_buffer("ft_timesteps", torch.arange(c.ft_steps - 1, -1, -1, dtype=torch.int64), persistent=False)

    # -- helpers ---------------------------------------------------------------------------------------------------
    @property
    def tables(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, f"ddpm_{name}") for name in ("abar", "mean_x0", "mean_xt", "posterior_std")}

    def _obs_norm(self, obs: torch.Tensor) -> torch.Tensor:
        normalizer = self.normalizer
        return normalizer.forward(obs) if normalizer.enabled else obs

    def to_normalized(self, action: torch.Tensor) -> torch.Tensor:
        return (action - self.action_centre) / self.action_half_range

    def to_env(self, y: torch.Tensor) -> torch.Tensor:
        return y * self.action_half_range + self.action_centre

    def freeze_base(self) -> None:
        """Copy the current noise predictor into the frozen base that runs the first K - K' steps from now on."""
        self.base_denoiser.load_state_dict(self.denoiser.state_dict())
        self.base_frozen.fill_(True)

    def _network(self, t: int, base_active: bool) -> nn.Module:
        return self.base_denoiser if base_active and t >= self.config.ft_steps else self.denoiser

    # -- acting ----------------------------------------------------------------------------------------------------
    def sample_chain(self, obs_norm: torch.Tensor, use_base: bool = False) -> torch.Tensor:
        """Run the K-step DDPM chain with the sampling std floor: the last K' + 1 points [B, K' + 1, X].

        ``use_base``: every step by the frozen pretrained network (DPPO's behaviour-cloning regularizer).
        """
        c, tables = self.config, self.tables
        base_active = bool(self.base_frozen)
        x = torch.randn(obs_norm.shape[0], self.action_dim, dtype=obs_norm.dtype, device=obs_norm.device)
        chain = [x] if c.ft_steps == c.denoising_steps else []
        for t in range(c.denoising_steps - 1, -1, -1):
            t_row = torch.full(x.shape[:-1], t, dtype=torch.int64, device=x.device)
            network = self.base_denoiser if use_base else self._network(t, base_active)
            eps = network(obs_norm, x, t_row)
            mean = schedule.ddpm_mean(x, eps, t_row, tables, c.denoised_clip)
            std = tables["posterior_std"][t].clamp_min(c.min_sampling_std)
            x = mean + std * torch.randn_like(x).clamp_(-c.noise_clip, c.noise_clip)
            if t == 0:
                x = x.clamp(-c.denoised_clip, c.denoised_clip)
            if t <= c.ft_steps:  # x is now the input of step t - 1 (or the action)
                chain.append(x)
        return torch.stack(chain, dim=1)

    def deterministic_action(self, obs_norm: torch.Tensor) -> torch.Tensor:
        """``ddim_steps`` steps of deterministic DDIM from x_K = 0, in normalized units [B, X] (unrolled); with
        ``deterministic: ddpm`` the K DDPM steps along their means from x_K = 0."""
        c = self.config
        base_active = bool(self.base_frozen)
        x = obs_norm.new_zeros(obs_norm.shape[0], self.action_dim)
        if c.deterministic == "ddpm":
            for t in range(c.denoising_steps - 1, -1, -1):
                t_row = torch.full(x.shape[:-1], t, dtype=torch.int64, device=x.device)
                x = schedule.ddpm_mean(
                    x, self._network(t, base_active)(obs_norm, x, t_row), t_row, self.tables, c.denoised_clip
                )
            return x.clamp(-c.denoised_clip, c.denoised_clip)
        timesteps = self.ddim_timesteps.tolist()
        for i, t in enumerate(timesteps):
            t_row = torch.full(x.shape[:-1], t, dtype=torch.int64, device=x.device)
            eps = self._network(t, base_active)(obs_norm, x, t_row)
            x = schedule.ddim_step(x, eps, self.ddim_abar[i], self.ddim_abar_prev[i], c.denoised_clip)
        return x.clamp(-c.denoised_clip, c.denoised_clip)

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Action [B, X] in env units; info (stochastic): ``chain`` [B, K'+1, X], ``log_prob`` and ``mean``."""
        if torch.is_grad_enabled():
            with torch.no_grad():
                return self.act(obs, deterministic)
        obs_norm = self._obs_norm(obs)
        if deterministic:
            return self.to_env(self.deterministic_action(obs_norm)), {}
        chain = self.sample_chain(obs_norm)  # [B, K' + 1, X]
        # the acting weights' log-probabilities, computed as log_ratio computes them: they agree to the last bit
        log_prob, mean = self._chain_log_prob(obs_norm, chain)
        return self.to_env(chain[:, -1]), {"chain": chain, "log_prob": log_prob, "mean": mean}

    # -- likelihoods -----------------------------------------------------------------------------------------------
    def transition(self, obs_norm, x_from, x_to, t) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-step log N(x_to; mu_theta(x_from, t, s), sigma_t^2) [...] (reduced, clamped) and mu [..., X]."""
        c = self.config
        mean = schedule.ddpm_mean(x_from, self.denoiser(obs_norm, x_from, t), t, self.tables, c.denoised_clip)
        std = self.ddpm_posterior_std[t].clamp_min(c.min_logprob_std).unsqueeze(-1)  # [..., 1]
        log_density = -0.5 * ((x_to - mean) / std).square() - std.log() - 0.5 * math.log(2.0 * math.pi)
        log_density = log_density.clamp(c.log_prob_min, c.log_prob_max)  # per dimension, then reduced (as DPPO)
        reduced = log_density.mean(-1) if c.log_prob_reduce == "mean" else log_density.sum(-1)
        return reduced, mean

    def _chain_log_prob(self, obs_norm: torch.Tensor, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        steps = chain.shape[1] - 1
        obs_rep = obs_norm.unsqueeze(1).expand(-1, steps, -1)  # [B, K', D]
        t = self.ft_timesteps.expand(chain.shape[0], -1)  # [B, K']
        return self.transition(obs_rep, chain[:, :-1], chain[:, 1:], t)

    def pair_info(self, info: dict[str, torch.Tensor], rows: torch.Tensor, step: torch.Tensor) -> dict:
        """Info of (env step ``rows`` [b], denoising step ``step`` [b]) pairs: what ``log_ratio`` needs for [b, 1]."""
        chain = info["chain"]
        return {
            "x_from": chain[rows, step],
            "x_to": chain[rows, step + 1],
            "timestep": self.ft_timesteps[step],
            "log_prob": info["log_prob"][rows, step].unsqueeze(-1),
            "mean": info["mean"][rows, step].unsqueeze(1),
        }

    def _new_log_prob(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        obs_norm = self._obs_norm(obs)
        if "chain" in info:
            return self._chain_log_prob(obs_norm, info["chain"])  # [B, K'], [B, K', X]
        log_prob, mean = self.transition(obs_norm, info["x_from"], info["x_to"], info["timestep"])
        return log_prob.unsqueeze(-1), mean.unsqueeze(1)  # [b, 1], [b, 1, X]

    def log_ratio(self, obs: torch.Tensor, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-step log pi_new - log pi_old: [B, K'] (full chains, exactly 0 after acting) or [b, 1] (``pair_info``
        rows: 0 up to float rounding, the recomputation batching the rows differently)."""
        return self._new_log_prob(obs, info)[0] - info["log_prob"]

    def kl(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """Exact per-step KL(pi_old || pi_new) of the two Gaussians (shared std), [B, K'] or [b, 1]."""
        _, mean = self._new_log_prob(obs, info)
        if "chain" in info:
            t = self.ft_timesteps  # [K']
        else:
            t = info["timestep"].unsqueeze(-1)  # [b, 1]
        std = self.ddpm_posterior_std[t].clamp_min(self.config.min_logprob_std).unsqueeze(-1)
        per_dim = 0.5 * ((info["mean"] - mean) / std).square()
        return per_dim.mean(-1) if self.config.log_prob_reduce == "mean" else per_dim.sum(-1)

    def base_chain_nll(self, obs: torch.Tensor) -> torch.Tensor:
        """Mean negative per-step log-probability, under the fine-tuned network, of chains the frozen base samples."""
        obs_norm = self._obs_norm(obs)
        with torch.no_grad():
            chain = self.sample_chain(obs_norm, use_base=True)
        return -self._chain_log_prob(obs_norm, chain)[0].mean()

    def imitation_loss(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: the noise-regression loss [B] of demonstrated chunks at random timesteps."""
        y = self.to_normalized(action).clamp(-self.config.denoised_clip, self.config.denoised_clip)
        t = torch.randint(0, self.config.denoising_steps, y.shape[:-1], device=y.device)
        noise = torch.randn_like(y)
        abar = self.ddpm_abar[t].unsqueeze(-1)
        x_t = abar.sqrt() * y + (1.0 - abar).sqrt() * noise
        return (self.denoiser(self._obs_norm(obs), x_t, t) - noise).square().mean(-1)

    def export_module(self) -> nn.Module:
        """Deterministic ``obs [B, D] -> action [B, X]``: normalizer folded in, DDIM unrolled, clipped to bounds."""
        return ExportedDiffusionPolicy(self).eval()


class ExportedDiffusionPolicy(nn.Module):
    """Stateless deterministic action path of a DiffusionPolicy: ``ddim_steps`` unrolled DDIM steps from x_K = 0 (or
    the K DDPM means, ``deterministic: ddpm``)."""

    def __init__(self, policy: DiffusionPolicy) -> None:
        super().__init__()
        c = policy.config
        self.clip, self.action_dim = c.denoised_clip, policy.action_dim
        self.steps = [
            (int(t), float(a), float(p))
            for t, a, p in zip(policy.ddim_timesteps, policy.ddim_abar, policy.ddim_abar_prev)
        ]
        if c.deterministic == "ddpm":  # x_prev = mean_x0[t] x0_hat + mean_xt[t] x_t: the chain's mean path
            tables = policy.tables
            self.steps = [
                (t, float(tables["abar"][t]), float(tables["mean_x0"][t]), float(tables["mean_xt"][t]))
                for t in range(c.denoising_steps - 1, -1, -1)
            ]
        self.ddpm = c.deterministic == "ddpm"
        base_active = bool(policy.base_frozen)
        self.use_base = [base_active and step[0] >= c.ft_steps for step in self.steps]
        for name in ("action_low", "action_high", "action_centre", "action_half_range"):
            self.register_buffer(name, getattr(policy, name).detach().clone())
        self.normalizer = FrozenNormalizer(policy.normalizer)
        self.denoiser = copy.deepcopy(policy.denoiser).eval().requires_grad_(False)
        self.base_denoiser = copy.deepcopy(policy.base_denoiser).eval().requires_grad_(False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs_norm = self.normalizer(obs)
        x = obs_norm.new_zeros(obs_norm.shape[0], self.action_dim)
        for step, use_base in zip(self.steps, self.use_base):
            t_row = torch.full(x.shape[:-1], step[0], dtype=torch.int64, device=x.device)
            eps = (self.base_denoiser if use_base else self.denoiser)(obs_norm, x, t_row)
            if self.ddpm:
                _, abar, mean_x0, mean_xt = step
                x = mean_x0 * schedule.predict_x0(x, eps, x.new_tensor(abar), self.clip) + mean_xt * x
            else:
                x = schedule.ddim_step(x, eps, x.new_tensor(step[1]), x.new_tensor(step[2]), self.clip)
        action = x.clamp(-self.clip, self.clip) * self.action_half_range + self.action_centre
        return torch.maximum(torch.minimum(action, self.action_high), self.action_low)


def build_diffusion_policy(config: DiffusionPolicyConfig, env) -> DiffusionPolicy:
    return DiffusionPolicy(env.obs_dim, env.action_dim, env.action_low, env.action_high, config)
