"""Diffusion step arithmetic: per-step log-probabilities by hand, DDPM and DDIM steps against diffusers' schedulers.

Shapes: B batch, X flat action width, K DDPM steps, K' fine-tuned steps, S DDIM steps, T timesteps under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import DDIMScheduler, DDPMScheduler
from torch import nn

from robopt.policies import diffusion_schedule as schedule
from robopt.policies.diffusion import DiffusionPolicy, DiffusionPolicyConfig

# DDPMScheduler(num_train_timesteps=4, beta_schedule="squaredcos_cap_v2").alphas_cumprod, written out; it is also
# prod_s (1 - beta_s), beta_s = 1 - f((s + 1) / 4) / f(s / 4), f(u) = cos((u + 0.008) / 1.008 * pi / 2)^2.
ABAR_4 = (0.8470121622085571, 0.49384358525276184, 0.1442720890045166, 0.00014427023415919393)


class AffineEps(nn.Module):
    """eps(x) = rate * x + constant, ignoring obs and t: a noise predictor whose step is worked out by hand."""

    def __init__(self, rate: float, constant: float) -> None:
        super().__init__()
        self.rate, self.constant = rate, constant

    def forward(self, obs_norm: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.rate * x + self.constant


def hand_mean(x: float, eps: float, t: int, clip: float = 1.0) -> tuple[float, float]:
    """DDPM posterior mean (Ho et al. eq. 7) and posterior variance at timestep t of the K = 4 cosine schedule."""
    abar, abar_prev = ABAR_4[t], ABAR_4[t - 1] if t > 0 else 1.0
    beta = 1.0 - abar / abar_prev
    x0 = min(max((x - math.sqrt(1.0 - abar) * eps) / math.sqrt(abar), -clip), clip)
    mean = (
        math.sqrt(abar_prev) * beta / (1.0 - abar) * x0 + math.sqrt(1.0 - beta) * (1.0 - abar_prev) / (1.0 - abar) * x
    )
    return mean, beta * (1.0 - abar_prev) / (1.0 - abar)


def normal_log_density(x: float, mean: float, std: float) -> float:
    return -0.5 * ((x - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2.0 * math.pi)


def one_d_policy(action_dim: int = 1, **overrides) -> DiffusionPolicy:
    fields = {"denoising_steps": 4, "ft_steps": 4, "ddim_steps": 2, "hidden": (8,), "normalize_obs": False, **overrides}
    bounds = (-torch.ones(action_dim), torch.ones(action_dim))
    policy = DiffusionPolicy(1, action_dim, *bounds, DiffusionPolicyConfig(**fields))
    policy.denoiser = AffineEps(0.5, 0.2)
    return policy


def test_cosine_table_is_the_written_one():
    scheduler = DDPMScheduler(num_train_timesteps=4, beta_schedule="squaredcos_cap_v2")
    torch.testing.assert_close(scheduler.alphas_cumprod.double(), torch.tensor(ABAR_4, dtype=torch.float64))
    f = lambda u: math.cos((u + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    telescoped = [f((s + 1) / 4) / f(0) for s in range(3)]  # prod_s f((s + 1) / 4) / f(s / 4) telescopes ...
    capped = telescoped[-1] * (1 - 0.999)  # ... but beta_3 = 1 - f(1) / f(3 / 4) = 1 is capped at 0.999
    assert ABAR_4 == pytest.approx([*telescoped, capped], rel=1e-4)  # float32 cumprod in diffusers: 1e-5 off
    torch.testing.assert_close(one_d_policy().ddpm_abar, torch.tensor(ABAR_4))


# ---------------------------------------------------------------- per-step log-probability, by hand


# (t, x_from, x_to): eps = 0.5 x + 0.2. t = 3 clips x0_hat = (1.5 - 0.99993 * 0.95) / 0.012 = 46 to 1; t = 2 does not
# clip (x0_hat = -0.06); t = 0 has posterior std 0, floored at min_logprob_std = 0.1: x_to = 0 is 3.5 std from
# mu = x0_hat = 0.35 (-4.8, kept), x_to = 0.55 is 8 std from mu = -0.26 (-31: clamped to log_prob_min = -5).
@pytest.mark.parametrize(
    ("t", "x_from", "x_to"), [(3, 1.5, 0.9), (2, 0.3, -0.1), (1, 0.8, 0.2), (0, 0.5, 0.0), (0, -0.2, 0.55)]
)
def test_transition_log_prob_by_hand_1d(t, x_from, x_to):
    policy = one_d_policy()
    mean, variance = hand_mean(x_from, 0.5 * x_from + 0.2, t)
    std = max(math.sqrt(variance), 0.1)
    expected = min(max(normal_log_density(x_to, mean, std), -5.0), 2.0)
    log_prob, mu = policy.transition(
        torch.zeros(1, 1), torch.tensor([[x_from]]), torch.tensor([[x_to]]), torch.tensor([t])
    )
    assert log_prob.shape == (1,) and mu.shape == (1, 1)
    assert mu.item() == pytest.approx(mean, abs=1e-6)
    assert log_prob.item() == pytest.approx(expected, abs=1e-5)
    if t == 0:
        assert mean == pytest.approx(
            min(max((x_from - math.sqrt(1 - ABAR_4[0]) * (0.5 * x_from + 0.2)) / math.sqrt(ABAR_4[0]), -1), 1)
        )  # mu = x0_hat at t = 0


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_transition_log_prob_by_hand_2d_reduction_and_clamp(reduce):
    # X = 2, four rows at different timesteps in one call; min_logprob_std 0.02 so the peak density
    # -log 0.02 - 0.92 = 2.99 passes log_prob_max = 2 (row 0, at the mean), and row 1 sits far below -5.
    policy = one_d_policy(action_dim=2, min_logprob_std=0.02, log_prob_reduce=reduce)
    rows = [  # (t, x_from, offset of x_to from the hand mean, per dimension)
        (0, (0.3, -0.7), (0.0, 0.0)),
        (0, (0.3, -0.7), (0.15, -0.1)),
        (1, (0.9, 0.1), (0.2, -0.3)),
        (2, (-0.4, 1.2), (0.5, 0.05)),
    ]
    x_from, x_to, timesteps, expected = [], [], [], []
    for t, start, offset in rows:
        means_vars = [hand_mean(x, 0.5 * x + 0.2, t) for x in start]
        std = max(math.sqrt(means_vars[0][1]), 0.02)
        densities = [normal_log_density(m + d, m, std) for (m, _), d in zip(means_vars, offset)]
        clamped = [min(max(density, -5.0), 2.0) for density in densities]  # per dimension, then reduced (DPPO)
        total = sum(clamped) if reduce == "sum" else sum(clamped) / 2
        x_from.append(start)
        x_to.append([m + d for (m, _), d in zip(means_vars, offset)])
        timesteps.append(t)
        expected.append((total, densities))
    log_prob, _ = policy.transition(
        torch.zeros(4, 1), torch.tensor(x_from), torch.tensor(x_to), torch.tensor(timesteps)
    )
    torch.testing.assert_close(log_prob, torch.tensor([e for e, _ in expected]), rtol=0, atol=1e-4)
    raw = [densities for _, densities in expected]
    assert min(raw[0]) > 2.0 and max(raw[1]) < -5.0 and all(-5.0 < d < 2.0 for d in raw[2])  # both clamps, neither


# ---------------------------------------------------------------- DDPM step against DDPMScheduler.step


@pytest.mark.parametrize("beta_schedule", schedule.BETA_SCHEDULES)
@pytest.mark.parametrize("clip", [1.0, 0.5])
def test_ddpm_step_matches_diffusers(beta_schedule, clip):
    steps, width = 20, 6
    tables = schedule.ddpm_tables(steps, beta_schedule, clip)
    reference = DDPMScheduler(
        num_train_timesteps=steps,
        beta_schedule=beta_schedule,
        clip_sample=True,
        clip_sample_range=clip,
        variance_type="fixed_small",
        prediction_type="epsilon",
    )
    torch.testing.assert_close(tables["abar"], reference.alphas_cumprod, rtol=0, atol=0)
    # diffusers' step forms 1 - abar_t / abar_prev in float32 (relative error 5e-5 where beta_t is 1e-4, in
    # scaled_linear); the tables form it in float64 from the same float32 abar. Run the reference in float64 too.
    reference.alphas_cumprod = reference.alphas_cumprod.double()
    std = torch.stack([reference._get_variance(t) ** 0.5 for t in range(steps)])
    torch.testing.assert_close(tables["posterior_std"], std.float(), rtol=1e-6, atol=1e-9)
    assert tables["posterior_std"][0] < 1e-9  # no noise on the last step: diffusers skips it

    torch.manual_seed(0)
    timesteps = torch.tensor([19, 15, 10, 5, 2, 1, 0, 0])  # [T], one per row of the batched step
    x, eps = 2.0 * torch.randn(len(timesteps), width), torch.randn(len(timesteps), width)
    mean = schedule.ddpm_mean(x, eps, timesteps, tables, clip)  # [T, X]
    abar = reference.alphas_cumprod[timesteps].unsqueeze(-1)
    raw_x0 = (x - (1 - abar).sqrt() * eps) / abar.sqrt()
    assert (raw_x0.abs() > clip).any() and (raw_x0.abs() < clip).any()  # x0 clipping is active, not everywhere
    for row, t in enumerate(timesteps.tolist()):
        x64, eps64 = x[row : row + 1].double(), eps[row : row + 1].double()
        generator = torch.Generator().manual_seed(100 + row)
        expected = reference.step(eps64, t, x64, generator=generator).prev_sample[0]
        # diffusers' draw: torch.randn of the sample's shape and dtype from the generator
        noise = torch.randn(1, width, generator=torch.Generator().manual_seed(100 + row), dtype=torch.float64)[0]
        ours = mean[row] + (tables["posterior_std"][t] * noise.float() if t > 0 else 0.0)
        torch.testing.assert_close(ours, expected.float(), rtol=0, atol=5e-6)
        if t == 0:  # diffusers adds nothing at t = 0: the step is the mean itself (= clipped x0_hat)
            torch.testing.assert_close(mean[row], expected.float(), rtol=0, atol=1e-6)
            torch.testing.assert_close(mean[row], raw_x0[row].clamp(-clip, clip).float(), rtol=0, atol=1e-6)


# ---------------------------------------------------------------- DDIM step against DDIMScheduler.step


@pytest.mark.parametrize(("steps", "ddim_steps"), [(20, 5), (20, 3), (10, 10), (100, 7)])
@pytest.mark.parametrize("beta_schedule", ["squaredcos_cap_v2", "linear"])
def test_ddim_step_matches_diffusers(steps, ddim_steps, beta_schedule):
    clip, width = 1.0, 6
    tables = schedule.ddim_tables(steps, beta_schedule, clip, ddim_steps)
    reference = DDIMScheduler(
        num_train_timesteps=steps,
        beta_schedule=beta_schedule,
        clip_sample=True,
        clip_sample_range=clip,
        set_alpha_to_one=True,
        prediction_type="epsilon",
    )
    reference.set_timesteps(ddim_steps)
    assert torch.equal(tables["timesteps"], reference.timesteps.to(torch.int64))
    assert tables["timesteps"][-1] == 0 and tables["abar_prev"][-1] == 1.0  # the last step lands on x0_hat
    torch.manual_seed(1)
    clipped_somewhere = False
    for i, t in enumerate(tables["timesteps"].tolist()):
        x, eps = 2.5 * torch.randn(4, width), 1.5 * torch.randn(4, width)
        abar = reference.alphas_cumprod[t]
        clipped_somewhere |= bool((((x - (1 - abar).sqrt() * eps) / abar.sqrt()).abs() > clip).any())
        expected = reference.step(eps, t, x, eta=0.0, use_clipped_model_output=True).prev_sample
        ours = schedule.ddim_step(x, eps, tables["abar"][i], tables["abar_prev"][i], clip)
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    assert clipped_somewhere


# ---------------------------------------------------------------- the policy's chain: column j is timestep K' - 1 - j


class StepDependentEps(nn.Module):
    """eps = tanh(x + 0.3 t - obs[0]) + shift: depends on x, t and the observation."""

    def __init__(self, shift: float = 0.0) -> None:
        super().__init__()
        self.shift = shift

    def forward(self, obs_norm: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x + 0.3 * t.unsqueeze(-1) - obs_norm[..., :1]) + self.shift


def diffusers_chain(config: DiffusionPolicyConfig, obs: torch.Tensor, base: nn.Module, tuned: nn.Module, width: int):
    """All K + 1 points and the K means of DPPO's chain, by DDPMScheduler.step, drawing the policy's noises in order.

    diffusers' own noise is drawn from a seeded generator and taken back out to leave its mean mu; the policy's step
    is mu + max(posterior std, min_sampling_std) * clip(z, +-noise_clip), the last point clamped to +-denoised_clip.
    """
    scheduler = DDPMScheduler(
        num_train_timesteps=config.denoising_steps,
        beta_schedule=config.beta_schedule,
        clip_sample=True,
        clip_sample_range=config.denoised_clip,
    )
    x = torch.randn(obs.shape[0], width)
    points, means = [x], []
    for t in range(config.denoising_steps - 1, -1, -1):
        net = base if t >= config.ft_steps else tuned
        eps = net(obs, x, torch.full((obs.shape[0],), t))
        stepped = scheduler.step(eps, t, x, generator=torch.Generator().manual_seed(t)).prev_sample
        diffusers_noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(t))
        std = scheduler._get_variance(t) ** 0.5
        mean = stepped - (std * diffusers_noise if t > 0 else 0.0)
        x = mean + max(float(std), config.min_sampling_std) * torch.randn_like(x).clamp(
            -config.noise_clip, config.noise_clip
        )
        x = x.clamp(-config.denoised_clip, config.denoised_clip) if t == 0 else x
        points.append(x)
        means.append(mean)
    return torch.stack(points, dim=1), torch.stack(means, dim=1)  # [B, K + 1, X], [B, K, X]


@pytest.mark.parametrize("ft_steps", [3, 6])
def test_policy_chain_is_diffusers_ddpm_chain_with_the_same_draws(ft_steps):
    # K = 6; with K' = 3 a frozen base (a different network) runs timesteps 5, 4, 3 and the fine-tuned one 2, 1, 0.
    steps, batch, width = 6, 64, 2
    config = DiffusionPolicyConfig(
        denoising_steps=steps, ft_steps=ft_steps, normalize_obs=False, hidden=(8,), min_sampling_std=0.3, noise_clip=1.0
    )
    policy = DiffusionPolicy(3, width, -torch.ones(width), torch.ones(width), config)
    policy.denoiser = StepDependentEps(0.5)
    if ft_steps < steps:
        policy.base_frozen.fill_(True)  # as freeze_base leaves it, with a base unlike the tuned network
        policy.base_denoiser = StepDependentEps(-0.5)
    obs = torch.randn(batch, 3)
    torch.manual_seed(7)
    _, info = policy.act(obs)
    torch.manual_seed(7)
    points, means = diffusers_chain(config, obs, policy.base_denoiser, policy.denoiser, width)
    torch.testing.assert_close(info["chain"], points[:, steps - ft_steps :], rtol=0, atol=2e-5)
    torch.testing.assert_close(info["mean"], means[:, steps - ft_steps :], rtol=0, atol=2e-5)
    if ft_steps < steps:  # the switch matters: the tuned network everywhere gives another chain
        torch.manual_seed(7)
        other, _ = diffusers_chain(config, obs, policy.denoiser, policy.denoiser, width)
        assert (other[:, steps - ft_steps] - points[:, steps - ft_steps]).abs().max() > 1e-2


def test_base_chain_nll_scores_a_chain_of_the_base_alone():
    # DPPO's BC regularizer: the frozen base samples every step, the tuned network scores the last K' steps.
    steps, ft_steps, batch, width = 6, 3, 64, 2
    config = DiffusionPolicyConfig(denoising_steps=steps, ft_steps=ft_steps, normalize_obs=False, hidden=(8,))
    policy = DiffusionPolicy(3, width, -torch.ones(width), torch.ones(width), config)
    policy.denoiser, policy.base_denoiser = StepDependentEps(0.5), StepDependentEps(-0.5)
    policy.base_frozen.fill_(True)
    obs = torch.randn(batch, 3)
    torch.manual_seed(7)
    nll = policy.base_chain_nll(obs)
    torch.manual_seed(7)
    points, _ = diffusers_chain(config, obs, policy.base_denoiser, policy.base_denoiser, width)
    log_prob, _ = policy.transition(
        obs.unsqueeze(1).expand(-1, ft_steps, -1),
        points[:, steps - ft_steps : -1],
        points[:, steps - ft_steps + 1 :],
        torch.arange(ft_steps - 1, -1, -1).expand(batch, -1),
    )
    assert nll.shape == () and nll.item() == pytest.approx(-log_prob.mean().item(), abs=1e-5)
