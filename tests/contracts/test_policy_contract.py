"""Contract every policy keeps: ratio one at the old parameters, shapes, export parity."""

from __future__ import annotations

import pytest
import torch

from robopt.core.protocols import Policy, SupportsEntropy, SupportsKL, SupportsLogProb, memory_width
from robopt.policies import GaussianPolicy

D, A, B = 5, 3, 32


def _policies():
    low, high = -torch.ones(A), 2 * torch.ones(A)
    return {
        "gaussian": GaussianPolicy(D, A, low, high, hidden=(16, 16)),
        "gaussian_squashed": GaussianPolicy(D, A, low, high, hidden=(16, 16), squash=True),
        "gaussian_no_norm": GaussianPolicy(D, A, low, high, hidden=(16,), normalize_obs=False, activation="relu"),
        "gaussian_state_std": GaussianPolicy(D, A, low, high, hidden=(16,), squash=True, state_dependent_std=True),
    }


@pytest.fixture(params=sorted(_policies()))
def policy(request):
    torch.manual_seed(1)
    policy = _policies()[request.param]
    policy.normalizer.update(torch.randn(100, D) * 3 + 1)  # non-trivial statistics, folded into the export
    return policy


def test_protocols(policy):
    assert isinstance(policy, Policy) and isinstance(policy, SupportsKL)
    assert isinstance(policy, SupportsLogProb) and isinstance(policy, SupportsEntropy)


def test_a_memoryless_policy_steps_with_an_empty_state(policy):
    # the Policy protocol's step: act, with a zero-width state passed through (memory_width 0)
    obs = torch.randn(B, D)
    state = policy.initial_state(B)
    assert state.shape == (B, 0) and memory_width(policy) == 0
    torch.manual_seed(3)
    action, info, next_state = policy.step(obs, state, torch.ones(B, dtype=torch.bool), deterministic=True)
    assert next_state.shape == (B, 0)
    torch.testing.assert_close(action, policy.act(obs, deterministic=True)[0])  # same kernels, same shapes


def test_log_ratio_exactly_zero_after_acting(policy):
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    log_ratio = policy.log_ratio(obs, action, info)
    assert log_ratio.shape[0] == B and log_ratio.dim() == 2
    assert torch.equal(log_ratio, torch.zeros_like(log_ratio))
    assert torch.equal(policy.kl(obs, info), torch.zeros(B))


def test_log_ratio_moves_after_a_parameter_change(policy):
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    with torch.no_grad():
        if policy.state_dependent_std:
            policy.mean_net.layers[-1].bias[A:].add_(0.1)  # the log-std head
        else:
            policy.log_std.add_(0.1)
    log_ratio = policy.log_ratio(obs, action, info)
    assert log_ratio.abs().min() > 0
    assert torch.all(policy.kl(obs, info) > 0)


def test_shapes_and_bounds(policy):
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    assert action.shape == (B, A) and info["log_prob"].shape == (B,)
    assert policy.entropy(obs).shape == (B,)
    assert policy.log_prob(obs, action, info).shape == (B,)
    if policy.squash:
        assert torch.all(action >= policy.action_low) and torch.all(action <= policy.action_high)


def test_log_prob_consistent_with_log_ratio(policy):
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    torch.testing.assert_close(policy.log_prob(obs, action, info), info["log_prob"])


def test_export_parity_and_statelessness(policy, tmp_path):
    obs = torch.randn(B, D) * 4
    exported = policy.export_module()
    deterministic, _ = policy.act(obs, deterministic=True)
    expected = torch.maximum(torch.minimum(deterministic, policy.action_high), policy.action_low)
    torch.testing.assert_close(exported(obs), expected, rtol=1e-6, atol=1e-6)
    assert all(not p.requires_grad for p in exported.parameters())
    policy.normalizer.update(torch.randn(50, D) * 10)  # the export is a snapshot: later updates do not leak in
    torch.testing.assert_close(exported(obs), expected, rtol=1e-6, atol=1e-6)
    from robopt.sim2real.export import export_pt2, load_torch_file

    export_pt2(exported, obs[:4], tmp_path / "policy.pt2")  # exported at batch 4, run at B: the batch axis is dynamic
    torch.testing.assert_close(load_torch_file("pt2", tmp_path / "policy.pt2")(obs), expected, rtol=1e-6, atol=1e-6)


def test_gaussian_log_prob_matches_torch_distributions():
    policy = _policies()["gaussian"]
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    mean, log_std = policy.distribution_params(obs)
    reference = torch.distributions.Normal(mean, log_std.exp()).log_prob(action).sum(-1)
    torch.testing.assert_close(info["log_prob"], reference)
    old = torch.distributions.Normal(mean.detach(), log_std.detach().exp())
    with torch.no_grad():
        policy.log_std.add_(0.3)
    new_mean, new_log_std = policy.distribution_params(obs)
    reference_kl = torch.distributions.kl_divergence(old, torch.distributions.Normal(new_mean, new_log_std.exp()))
    torch.testing.assert_close(policy.kl(obs, info), reference_kl.sum(-1))


def test_squashed_log_prob_matches_transformed_distribution():
    policy = _policies()["gaussian_squashed"]
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    mean, log_std = policy.distribution_params(obs)
    low, high = policy.action_low, policy.action_high
    transforms = [
        torch.distributions.TanhTransform(),
        torch.distributions.AffineTransform((low + high) / 2, (high - low) / 2),
    ]
    dist = torch.distributions.TransformedDistribution(torch.distributions.Normal(mean, log_std.exp()), transforms)
    reference = dist.log_prob(action.clamp(low + 1e-5, high - 1e-5)).sum(-1)
    torch.testing.assert_close(info["log_prob"], reference, rtol=1e-3, atol=1e-3)


def test_state_dependent_std_heads_match_torch_distributions():
    """The second head is the log-std (clamped), per row; log_prob and entropy follow it, the mean path ignores it."""
    torch.manual_seed(3)
    policy = GaussianPolicy(D, A, -torch.ones(A), torch.ones(A), hidden=(8,), state_dependent_std=True)
    with torch.no_grad():
        policy.mean_net.layers[-1].bias[A:] = torch.tensor([-30.0, 5.0, 0.3])  # below, above and inside the clamp
    obs = torch.randn(B, D)
    out = policy.mean_net(obs)  # normalizer at its initial statistics: identity
    mean, log_std = policy.distribution_params(obs)
    assert torch.equal(mean, out[:, :A])
    assert torch.equal(log_std, out[:, A:].clamp(-20.0, 2.0))
    assert float(log_std[:, 0].max()) == -20.0 and float(log_std[:, 1].min()) == 2.0
    assert log_std[:, 2].std() > 0  # differs per row
    action = torch.randn(B, A)
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(action).sum(-1)
    torch.testing.assert_close(policy.log_prob(obs, action, {}), expected)
    torch.testing.assert_close(policy.entropy(obs), torch.distributions.Normal(mean, log_std.exp()).entropy().sum(-1))
    torch.testing.assert_close(policy.export_module()(obs), mean.clamp(-1.0, 1.0))
