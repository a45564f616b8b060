"""Diffusion policy contract: DPPO's per-step log-ratio, sampling bounds, DDIM export parity, a bimodal fit, refusals.

Shapes: B batch, D obs dim, A action dim, X = H * A the flat chunk, K DDPM steps, K' fine-tuned steps.
The step arithmetic itself (log-probabilities by hand, DDPM/DDIM against diffusers) is in test_diffusion_schedule.py.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from diffusers import DDIMScheduler

from robopt.config import ConfigError
from robopt.core.protocols import Policy, SupportsImitation, SupportsKL
from robopt.experiment import load_config
from robopt.policies.diffusion import DiffusionPolicy, DiffusionPolicyConfig, ExportedDiffusionPolicy

D, A, B = 5, 3, 16
K, K_FT, S = 8, 3, 4  # DDIM timesteps 6, 4, 2, 0: the first two (t >= K') run the frozen base once it is frozen


def make_policy(**overrides) -> DiffusionPolicy:
    """A small diffusion policy over the box [-1, 2]^A with non-trivial normalizer statistics.

    ``output_scale`` 1 (not the near-zero default) so the predicted noise, hence the actions, depend on obs and x.
    """
    fields = {"hidden": (16, 16), "denoising_steps": K, "ft_steps": K_FT, "ddim_steps": S, "output_scale": 1.0}
    policy = DiffusionPolicy(D, A, -torch.ones(A), 2 * torch.ones(A), DiffusionPolicyConfig(**{**fields, **overrides}))
    policy.normalizer.update(torch.randn(100, D) * 3 + 1)
    return policy


@torch.no_grad()
def perturb(module: torch.nn.Module, scale: float = 0.05) -> None:
    for parameter in module.parameters():
        parameter.add_(scale * torch.randn_like(parameter))


# ---------------------------------------------------------------- policy contract


@pytest.mark.parametrize("ft_steps", [K_FT, K])
def test_protocols_and_act_shapes(ft_steps):
    policy = make_policy(ft_steps=ft_steps)
    assert isinstance(policy, Policy) and isinstance(policy, SupportsKL) and isinstance(policy, SupportsImitation)
    action, info = policy.act(torch.randn(B, D))
    assert action.shape == (B, A) and action.dtype == torch.float32
    assert set(info) == {"chain", "log_prob", "mean"}
    assert info["chain"].shape == (B, ft_steps + 1, A)
    assert info["log_prob"].shape == (B, ft_steps) and info["mean"].shape == (B, ft_steps, A)
    torch.testing.assert_close(action, 1.5 * info["chain"][:, -1] + 0.5)  # box [-1, 2]: centre 0.5, half-range 1.5
    for tensor in (action, *info.values()):
        assert not tensor.requires_grad and tensor.grad_fn is None


@pytest.mark.parametrize("acting", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("ft_steps", [K_FT, K])
def test_log_ratio_and_kl_exactly_zero_after_acting(ft_steps, acting):
    policy = make_policy(ft_steps=ft_steps)
    policy.freeze_base()
    obs = torch.randn(B, D) * 2
    if acting == "inference_mode":  # as the on-policy loop collects
        with torch.inference_mode():
            action, info = policy.act(obs)
    else:
        action, info = policy.act(obs)
    log_ratio = policy.log_ratio(obs, action, info)
    assert log_ratio.shape == (B, ft_steps) and log_ratio.requires_grad
    # bit equality holds: act computes info["log_prob"] by the same _chain_log_prob on the same [B, K'] batch
    assert torch.equal(log_ratio, torch.zeros(B, ft_steps))
    assert torch.equal(policy.kl(obs, info), torch.zeros(B, ft_steps))
    # Pair rows rerun the network on a [b, ...] batch, not [B, K', ...]: another matmul blocking (and thread split,
    # and BLAS kernel on another CPU), so mu may differ from the acting one in its last bits (-5.96e-8 seen on an
    # AVX-512 Xeon and under MKL_CBWR=COMPATIBLE). The log-density's slope |x - mu| / std^2 is at most
    # noise_clip / min_logprob_std = 30, so an ulp of mu (<= 2.4e-7 for |mu| < 4) moves the log-ratio by up to 7e-6
    # (seen up to 3.9e-6 over 10000 random pairs): atol 2e-5, about 3 ulps. The KL is 0.5 (delta mu / std)^2, the
    # square of that (seen up to 4e-11): atol 1e-9.
    rows, step = torch.tensor([0, 3, 3, 7, 15]), torch.tensor([0, ft_steps - 1, 1, 2, 0])
    pairs = policy.pair_info(info, rows, step)
    assert torch.equal(pairs["timestep"], ft_steps - 1 - step)
    pair_ratio = policy.log_ratio(obs[rows], None, pairs)
    assert pair_ratio.shape == (5, 1)
    torch.testing.assert_close(pair_ratio, torch.zeros(5, 1), rtol=0, atol=2e-5)  # pair rows: another batch shape
    torch.testing.assert_close(policy.kl(obs[rows], pairs), torch.zeros(5, 1), rtol=0, atol=1e-9)  # the same


def test_log_ratio_after_a_weight_change_has_gradient_in_the_denoiser_only():
    # Clamps out of the way: where x0_hat is clipped in every dim (or the log-probability clamped) a step's log-ratio
    # does not depend on the weights at all (DPPO's clamps). An untrained network under the cosine schedule clips
    # x0_hat = (x - sqrt(1 - abar) eps) / sqrt(abar) from the first step (abar_7 = 1e-4) and the chain runs to
    # +-denoised_clip; the linear schedule keeps abar >= 0.9 at K = 8, so the chain stays O(1), far inside +-10.
    policy = make_policy(
        beta_schedule="linear", denoised_clip=10.0, output_scale=0.1, log_prob_min=-1e6, log_prob_max=1e6
    )
    policy.freeze_base()  # the first K - K' acting steps now use the frozen copy; log-ratios never do
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    perturb(policy.denoiser)
    log_ratio = policy.log_ratio(obs, action, info)
    assert torch.all(log_ratio != 0)
    log_ratio.sum().backward()
    for name, parameter in policy.denoiser.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert all(p.grad is None and not p.requires_grad for p in policy.base_denoiser.parameters())

    # pair rows: the matching entries of the full-chain log-ratio and KL, recomputed on another batch shape: up to
    # about 3 ulps of mu times the log-density's slope (at most 30, see the test above): atol 2e-5 (this seed: 0 and
    # 1.8e-12; the worst over 200 seeds 8.3e-7 and 2.1e-7, on this CPU)
    rows, step = torch.tensor([1, 1, 4, 9, 15, 15]), torch.tensor([0, 2, 1, 2, 0, 1])
    pairs = policy.pair_info(info, rows, step)
    with torch.no_grad():
        full, pair = policy.log_ratio(obs, action, info), policy.log_ratio(obs[rows], None, pairs)
        torch.testing.assert_close(pair[:, 0], full[rows, step], rtol=0, atol=2e-5)
        kl, pair_kl = policy.kl(obs, info), policy.kl(obs[rows], pairs)
        torch.testing.assert_close(pair_kl[:, 0], kl[rows, step], rtol=0, atol=2e-5)
        # KL of two Gaussians sharing the std of column j (timestep K' - 1 - j), averaged over X
        _, new_mean = policy._chain_log_prob(policy._obs_norm(obs), info["chain"])
        std = policy.ddpm_posterior_std[torch.tensor([2, 1, 0])].clamp_min(0.1)  # [K']
        expected = 0.5 * ((info["mean"] - new_mean) / std[:, None]).square().mean(-1)
    assert torch.all(kl > 0)
    torch.testing.assert_close(kl, expected, rtol=1e-5, atol=1e-9)


# ---------------------------------------------------------------- deterministic path: DDIM, export, trace, ONNX


def diffusers_ddim_action(policy: DiffusionPolicy, obs: torch.Tensor, base_from: int | None) -> torch.Tensor:
    """The deterministic action by diffusers' DDIMScheduler: x_K = 0, S steps, base network at t >= base_from."""
    c = policy.config
    scheduler = DDIMScheduler(
        num_train_timesteps=c.denoising_steps,
        beta_schedule=c.beta_schedule,
        clip_sample=True,
        clip_sample_range=c.denoised_clip,
    )
    scheduler.set_timesteps(c.ddim_steps)
    obs_norm, x = policy._obs_norm(obs), torch.zeros(obs.shape[0], policy.action_dim)
    with torch.no_grad():
        for t in scheduler.timesteps.tolist():
            net = policy.base_denoiser if base_from is not None and t >= base_from else policy.denoiser
            eps = net(obs_norm, x, torch.full((obs.shape[0],), t))
            x = scheduler.step(eps, t, x, eta=0.0, use_clipped_model_output=True).prev_sample
    return policy.to_env(x.clamp(-c.denoised_clip, c.denoised_clip))


def frozen_then_changed() -> DiffusionPolicy:
    """K' = 4: DDIM timesteps 6 and 4 (t >= K', the boundary included) run the frozen base, 2 and 0 the tuned net."""
    policy = make_policy(ft_steps=4)
    policy.freeze_base()
    perturb(policy.denoiser, 0.5)  # base and fine-tuned networks now differ
    return policy


@pytest.mark.parametrize("frozen", [False, True])
def test_deterministic_act_is_ddim_and_matches_export(frozen):
    policy = frozen_then_changed() if frozen else make_policy()
    obs = torch.randn(B, D) * 3
    first, info = policy.act(obs, deterministic=True)
    assert info == {} and first.shape == (B, A)
    policy.act(obs)  # a stochastic call in between draws random numbers; the deterministic path uses none
    assert torch.equal(policy.act(obs, deterministic=True)[0], first)
    torch.testing.assert_close(first, diffusers_ddim_action(policy, obs, 4 if frozen else None), rtol=0, atol=1e-5)
    if frozen:  # the base/fine-tuned switch at t >= K' matters
        everywhere = diffusers_ddim_action(policy, obs, None)
        assert (first - everywhere).abs().max() > 1e-2
    exported = policy.export_module()
    assert isinstance(exported, ExportedDiffusionPolicy) and not exported.training
    assert all(not p.requires_grad for p in exported.parameters())
    torch.testing.assert_close(exported(obs), first, rtol=0, atol=1e-6)
    policy.normalizer.update(torch.randn(50, D) * 10)  # the export is a snapshot: later changes do not leak in
    perturb(policy.denoiser)
    torch.testing.assert_close(exported(obs), first, rtol=0, atol=1e-6)


@pytest.mark.parametrize("frozen", [False, True])
def test_deterministic_ddpm_is_the_chain_without_its_noise_and_matches_export(frozen, monkeypatch):
    policy = make_policy(deterministic="ddpm")
    if frozen:
        policy.freeze_base()
        perturb(policy.denoiser, 0.5)
    obs = torch.randn(B, D) * 3
    first = policy.act(obs, deterministic=True)[0]
    ddim = make_policy(deterministic="ddim")
    ddim.load_state_dict(policy.state_dict())
    assert (ddim.act(obs, deterministic=True)[0] - first).abs().max() > 1e-3  # another path through the same net
    torch.testing.assert_close(policy.export_module()(obs), first, rtol=0, atol=1e-6)
    # the sampled chain with every draw zero (x_K = 0, no step noise) is the mean path: the same action
    monkeypatch.setattr(torch, "randn", lambda *shape, dtype=None, device=None: torch.zeros(*shape, dtype=dtype))
    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    chain = policy.sample_chain(policy._obs_norm(obs))
    torch.testing.assert_close(policy.to_env(chain[:, -1]), first, rtol=0, atol=1e-6)


def test_torch_export_matches_eager_on_other_batch_sizes(tmp_path):
    from robopt.sim2real.export import export_pt2, load_torch_file

    exported = frozen_then_changed().export_module()
    export_pt2(exported, torch.randn(4, D), tmp_path / "policy.pt2")  # exported at batch 4, the batch axis dynamic
    loaded = load_torch_file("pt2", tmp_path / "policy.pt2")
    for batch in (1, 7, 64):  # the program's aten ops against eager: equal up to float rounding
        obs = torch.randn(batch, D) * 4
        torch.testing.assert_close(loaded(obs), exported(obs), rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.export's own pytree deprecation
@pytest.mark.parametrize("frozen", [False, True])
def test_onnx_runtime_matches_torch(tmp_path, frozen):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    exported = (frozen_then_changed() if frozen else make_policy()).export_module()
    path = tmp_path / "diffusion.onnx"
    program = torch.onnx.export(
        exported,
        (torch.randn(4, D),),
        dynamo=True,
        dynamic_shapes={"obs": {0: torch.export.Dim("batch")}},
        input_names=["obs"],
        output_names=["action"],
        verbose=False,
    )
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[0] == "batch"  # the batch axis is dynamic, not baked in as 4
    for size in (1, 4, 33):
        obs = torch.randn(size, D) * 4
        (action,) = session.run(None, {"obs": obs.numpy()})
        torch.testing.assert_close(torch.from_numpy(action), exported(obs), rtol=0, atol=1e-5)


# ---------------------------------------------------------------- sampling: clipped noise, bounds, the first point


def test_step_noise_is_clipped_and_actions_stay_in_bounds():
    # std floor 0.5 above every posterior std but the first steps', noise clipped to +-0.2 std
    low, high = torch.tensor([-1.0, 0.0, -3.0]), torch.tensor([2.0, 5.0, -2.0])
    config = DiffusionPolicyConfig(
        denoising_steps=K,
        ft_steps=K,
        hidden=(16,),
        output_scale=3.0,
        min_sampling_std=0.5,
        noise_clip=0.2,
        denoised_clip=1.0,
    )
    policy = DiffusionPolicy(D, A, low, high, config)
    action, info = policy.act(torch.randn(2000, D) * 3)
    chain, mean = info["chain"], info["mean"]  # mean: mu_theta of each step, under the acting weights
    std = policy.ddpm_posterior_std.flip(0).clamp_min(0.5)  # column j is timestep K - 1 - j
    assert std[-1] == 0.5 and std[0] > 0.5  # both the floor and the posterior std are exercised
    scaled = (chain[:, 1:] - mean) / std[:, None]  # [B, K, X], noise in units of the step's std
    before_clamp = scaled[:, :-1]  # the last step is also clamped to +-denoised_clip, which moves x towards mu
    assert before_clamp.abs().max() <= 0.2 + 1e-4
    assert (before_clamp.abs() > 0.2 - 1e-4).float().mean() > 0.6  # P(|z| > 0.2) = 0.84: the clip is active
    assert scaled[:, -1].abs().max() <= 0.2 + 1e-4
    assert torch.all(mean[:, -1].abs() <= 1.0 + 1e-6)  # the last mean is the clipped x0_hat
    assert torch.all((action >= low) & (action <= high))
    assert torch.any(action == low) or torch.any(action == high)  # the final clamp is reached, not just respected


def test_first_chain_point_is_standard_noise_when_every_step_is_fine_tuned():
    policy = make_policy(ft_steps=K, noise_clip=0.5)
    obs = torch.randn(4000, D)
    torch.manual_seed(3)
    expected = torch.randn(4000, A)  # the chain's first random draw
    torch.manual_seed(3)
    _, info = policy.act(obs)
    assert torch.equal(info["chain"][:, 0], expected)  # not clipped to +-noise_clip, not scaled
    first = info["chain"][:, 0]
    assert first.mean().abs() < 0.05 and (first.std() - 1).abs() < 0.05
    _, partial = make_policy(ft_steps=K_FT).act(obs)  # K' < K: the chain starts K - K' steps in
    assert not torch.equal(partial["chain"][:, 0], expected)


# ---------------------------------------------------------------- behaviour cloning: both modes of a bimodal target


def test_bimodal_bc_covers_both_modes():
    batch, obs = 256, torch.zeros(256, 1)  # one constant observation: the policy is a 1-D action distribution
    config = DiffusionPolicyConfig(denoising_steps=10, ft_steps=10, hidden=(64, 64), normalize_obs=False)
    policy = DiffusionPolicy(1, 1, -torch.ones(1), torch.ones(1), config)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    losses = []
    for _ in range(800):
        actions = torch.where(torch.rand(batch, 1) < 0.5, -0.8, 0.8)  # +-0.8 with probability 1/2 each
        loss = policy.imitation_loss(obs, actions)
        assert loss.shape == (batch,) and torch.all(loss >= 0)
        optimizer.zero_grad()
        loss.mean().backward()
        optimizer.step()
        losses.append(loss.mean().item())
    assert sum(losses[:20]) / 20 > 0.5 and sum(losses[-100:]) / 100 < 0.35  # measured: 0.72 -> 0.20
    sample = policy.act(torch.zeros(4000, 1))[0]
    near_low, near_high = ((sample + 0.8).abs() < 0.2).float().mean(), ((sample - 0.8).abs() < 0.2).float().mean()
    middle = (sample.abs() < 0.3).float().mean()  # where a fit of the mean (0) would put its mass
    assert near_low > 0.25 and near_high > 0.25 and middle < 0.1  # measured: 0.40, 0.48, 0.04
    assert sample.mean().abs() < 0.3 and sample.abs().mean() > 0.6  # mean near 0, but no mass sits there


# ---------------------------------------------------------------- bad input: one-line errors


REFUSALS = [
    ({"denoising_steps": 10, "ft_steps": 11}, r"ft_steps \(K'\) must be in \[1, denoising_steps=10\]"),
    ({"denoising_steps": 10, "ddim_steps": 12}, r"ddim_steps must be in \[1, denoising_steps=10\]"),
    ({"min_logprob_std": 0.0}, "min_logprob_std must be > 0"),
    ({"horizon": 0}, "horizon must be >= 1"),
    ({"log_prob_min": 2.0, "log_prob_max": 2.0}, "log_prob_min must be < log_prob_max"),
    ({"time_embedding": 7}, "time_embedding must be an even number >= 2, got 7"),
]


@pytest.mark.parametrize(("fields", "message"), REFUSALS)
def test_config_refusals(fields, message):
    with pytest.raises(ValueError, match=message) as error:
        DiffusionPolicyConfig(**fields)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("fields", "message"), REFUSALS)
def test_config_file_refusals(tmp_path, fields, message):
    path = tmp_path / "c.yaml"
    path.write_text("algo: {name: ppo}\npolicy: {name: diffusion}\n")
    assert load_config(path).policy == DiffusionPolicyConfig()
    with pytest.raises(ConfigError, match="policy: " + message) as error:
        load_config(path, [f"policy.{key}={value}" for key, value in fields.items()])
    assert "\n" not in str(error.value)


def test_action_dim_must_be_whole_chunks():
    with pytest.raises(ValueError, match="action_dim 5 is not a whole number of chunks of horizon 2"):
        DiffusionPolicy(D, 5, -torch.ones(5), torch.ones(5), DiffusionPolicyConfig(horizon=2))


# ---------------------------------------------------------------- the 1-D temporal U-Net noise predictor


@pytest.mark.skipif(
    importlib.util.find_spec("robopt.policies.unet1d") is None, reason="robopt/policies/unet1d.py absent"
)
def test_unet_policy_acts_with_zero_log_ratio_and_exports():
    horizon, per_step = 4, 2
    config = DiffusionPolicyConfig(
        network="unet",
        horizon=horizon,
        unet_channels=(8, 16),
        denoising_steps=K,
        ft_steps=K_FT,
        ddim_steps=S,
        output_scale=1.0,
    )
    policy = DiffusionPolicy(D, horizon * per_step, -torch.ones(8), torch.ones(8), config)
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    assert action.shape == (B, 8) and info["chain"].shape == (B, K_FT + 1, 8)
    assert torch.equal(policy.log_ratio(obs, action, info), torch.zeros(B, K_FT))
    deterministic, _ = policy.act(obs, deterministic=True)
    torch.testing.assert_close(policy.export_module()(obs), deterministic, rtol=0, atol=1e-6)
    assert deterministic.std(0).max() > 1e-3  # actions depend on obs: the comparison is not vacuous
