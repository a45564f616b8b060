"""Noise schedules and denoising-step arithmetic of the diffusion policy, with the tables taken from ``diffusers``.

Shapes: K DDPM training steps, S DDIM steps, [...] any leading dims, X the flat action-chunk width (H * A).

The tables (cumulative products of alpha, betas, DDIM timesteps) come from ``diffusers``' ``DDPMScheduler`` and
``DDIMScheduler`` built with the policy's settings, not from hand-written formulas; what stays here is the batched
form of the step those schedulers take one timestep at a time (a diffusion policy's log-probabilities need every
stored step of a chain at once, at different timesteps). ``tests/contracts/test_diffusion_policy.py`` checks both
steps against ``DDPMScheduler.step`` and ``DDIMScheduler.step``.

Notation (Ho et al. 2020, Song et al. 2021): abar_t = prod_{s <= t} alpha_s, abar_prev = abar_{t-1} (1 at t = 0),
x0_hat = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t), clipped to +-``clip``;
DDPM: mu = c0_t x0_hat + c1_t x_t, c0_t = sqrt(abar_prev) beta_t / (1 - abar_t),
c1_t = sqrt(alpha_t) (1 - abar_prev) / (1 - abar_t), posterior variance beta_t (1 - abar_prev) / (1 - abar_t)
("fixed_small"), with beta_t = 1 - abar_t / abar_prev as diffusers forms it;
DDIM (eta = 0): x_prev = sqrt(abar_prev) x0_hat + sqrt(1 - abar_prev) eps_hat, eps_hat re-derived from the clipped
x0_hat (``use_clipped_model_output=True``).
"""

from __future__ import annotations

import torch

from robopt.options import ConfigError

BETA_SCHEDULES = ("squaredcos_cap_v2", "linear", "scaled_linear")


def _diffusers():
    try:
        import diffusers
    except ImportError:
        raise ConfigError(
            "policy.name=diffusion needs the diffusers package: pip install 'robopt[diffusion]'"
        ) from None
    return diffusers


def ddpm_scheduler(num_steps: int, beta_schedule: str, clip: float):
    """diffusers' DDPMScheduler with the policy's settings (epsilon prediction, x0 clipped, fixed_small variance)."""
    return _diffusers().DDPMScheduler(
        num_train_timesteps=num_steps,
        beta_schedule=beta_schedule,
        clip_sample=True,
        clip_sample_range=clip,
        variance_type="fixed_small",
        prediction_type="epsilon",
    )


def ddim_scheduler(num_steps: int, beta_schedule: str, clip: float, ddim_steps: int):
    """diffusers' DDIMScheduler over the same training schedule, with ``ddim_steps`` inference timesteps set."""
    scheduler = _diffusers().DDIMScheduler(
        num_train_timesteps=num_steps,
        beta_schedule=beta_schedule,
        clip_sample=True,
        clip_sample_range=clip,
        set_alpha_to_one=True,
        prediction_type="epsilon",
    )
    scheduler.set_timesteps(ddim_steps)
    return scheduler


def ddpm_tables(num_steps: int, beta_schedule: str, clip: float) -> dict[str, torch.Tensor]:
    """Per-timestep [K] float32 tables of the DDPM step: abar, x0 and mean coefficients, posterior std."""
    scheduler = ddpm_scheduler(num_steps, beta_schedule, clip)
    abar = scheduler.alphas_cumprod.to(torch.float64)  # [K]
    abar_prev = torch.cat((torch.ones(1, dtype=abar.dtype), abar[:-1]))  # [K]
    beta = 1.0 - abar / abar_prev  # [K], as diffusers' step forms current_beta_t
    c0 = abar_prev.sqrt() * beta / (1.0 - abar)
    c1 = (1.0 - beta).sqrt() * (1.0 - abar_prev) / (1.0 - abar)
    variance = (beta * (1.0 - abar_prev) / (1.0 - abar)).clamp_min(1e-20)
    tables = {"abar": abar, "mean_x0": c0, "mean_xt": c1, "posterior_std": variance.sqrt()}
    return {name: table.to(torch.float32) for name, table in tables.items()}


def ddim_tables(num_steps: int, beta_schedule: str, clip: float, ddim_steps: int) -> dict[str, torch.Tensor]:
    """The DDIM path: ``timesteps`` [S] (int64, descending), ``abar`` [S] and ``abar_prev`` [S] float32."""
    scheduler = ddim_scheduler(num_steps, beta_schedule, clip, ddim_steps)
    timesteps = scheduler.timesteps.to(torch.int64)  # [S]
    ratio = num_steps // ddim_steps
    abar_all = scheduler.alphas_cumprod
    previous = timesteps - ratio
    abar_prev = torch.where(
        previous >= 0, abar_all[previous.clamp_min(0)], scheduler.final_alpha_cumprod.to(abar_all.dtype)
    )
    return {"timesteps": timesteps, "abar": abar_all[timesteps].float(), "abar_prev": abar_prev.float()}


def predict_x0(x: torch.Tensor, eps: torch.Tensor, abar: torch.Tensor, clip: float) -> torch.Tensor:
    """x0_hat [..., X] from x_t and predicted noise, clipped to +-clip; ``abar`` broadcasts ([..., 1] or scalar)."""
    return ((x - (1.0 - abar).sqrt() * eps) / abar.sqrt()).clamp(-clip, clip)


def ddpm_mean(x: torch.Tensor, eps: torch.Tensor, t: torch.Tensor, tables: dict[str, torch.Tensor], clip: float):
    """The DDPM posterior mean mu [..., X] at timesteps ``t`` [...] (int64) for x_t [..., X] and eps [..., X]."""
    abar = tables["abar"][t].unsqueeze(-1)  # [..., 1]
    x0 = predict_x0(x, eps, abar, clip)
    return tables["mean_x0"][t].unsqueeze(-1) * x0 + tables["mean_xt"][t].unsqueeze(-1) * x


def ddim_step(x: torch.Tensor, eps: torch.Tensor, abar: torch.Tensor, abar_prev: torch.Tensor, clip: float):
    """Deterministic DDIM (eta = 0) from x_t [..., X]: x_prev [..., X]; ``abar``, ``abar_prev`` broadcast."""
    x0 = predict_x0(x, eps, abar, clip)
    eps_hat = (x - abar.sqrt() * x0) / (1.0 - abar).sqrt()  # the noise consistent with the clipped x0_hat
    return abar_prev.sqrt() * x0 + (1.0 - abar_prev).sqrt() * eps_hat
