"""Offline algorithms unit by unit: losses by hand, IQL and FQL updates against their formulas, FQL's actor on a
known critic, and the one-step and EXPO flow policies (acting rule, log-probability, exports, bad settings)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from robopt.algorithms.fql import FQL, FQLConfig
from robopt.algorithms.iql import IQL, IQLConfig
from robopt.core.q_losses import advantage_weights, aggregate_q, expectile_loss
from robopt.policies import GaussianPolicy
from robopt.policies.flow import FlowPolicy, FlowPolicyConfig, integrate
from robopt.sim2real.export import export_onnx, onnx_session

# ------------------------------------------------------------------------------------------- losses by hand


def test_expectile_loss_and_advantage_weights_by_hand():
    diff = torch.tensor([2.0, -1.0, 0.0])
    torch.testing.assert_close(expectile_loss(diff, 0.7), torch.tensor([2.8, 0.3, 0.0]))
    torch.testing.assert_close(expectile_loss(diff, 0.5), 0.5 * diff.square())  # 0.5: half the squared error
    weights = advantage_weights(torch.tensor([0.0, 1.0, 10.0], requires_grad=True), 3.0, 100.0)
    torch.testing.assert_close(weights, torch.tensor([1.0, math.exp(3.0), 100.0]))
    assert not weights.requires_grad
    q = torch.tensor([[1.0, 5.0], [3.0, -1.0]])
    torch.testing.assert_close(aggregate_q(q, "min"), torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(aggregate_q(q, "mean"), torch.tensor([2.0, 2.0]))


class FakeEnv:
    obs_dim, action_dim, device = 3, 2, torch.device("cpu")
    action_low, action_high = -torch.ones(2), torch.ones(2)


def batch_of(size: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(size, 3, generator=g),
        "next_obs": torch.randn(size, 3, generator=g),
        "action": torch.rand(size, 2, generator=g) * 2 - 1,
        "reward": torch.randn(size, generator=g),
        "terminated": torch.rand(size, generator=g) < 0.2,
        "discount": torch.full((size,), 0.99),
        "weights": torch.ones(size),
    }


def test_iql_update_equals_its_formulas():
    torch.manual_seed(0)
    env = FakeEnv()
    policy = GaussianPolicy(3, 2, env.action_low, env.action_high, hidden=(16,), normalize_obs=False)
    config = IQLConfig(expectile=0.8, temperature=2.0, max_weight=5.0, reward_scale=0.5, critic_hidden=(16,))
    iql = IQL(config, policy, FakeEnv())
    before, batch = copy.deepcopy(iql), batch_of()
    metrics = iql.update(batch, 0.0)
    with torch.no_grad():
        target_q = before.target_critic(batch["obs"], batch["action"]).min(0).values
        v = before.value(batch["obs"])
        value_loss = torch.where(target_q - v < 0, 0.2, 0.8) * (target_q - v).square()
        q_target = 0.5 * batch["reward"] + 0.99 * (~batch["terminated"]).float() * before.value(batch["next_obs"])
        q = before.critic(batch["obs"], batch["action"])
        weight = torch.exp(2.0 * (target_q - v)).clamp(max=5.0)
        actor_loss = (weight * -before.policy.log_prob(batch["obs"], batch["action"], {})).mean()
    torch.testing.assert_close(metrics["value_loss"], value_loss.mean(), rtol=1e-5, atol=1e-6)
    # the critic's target reads V(s') before the value step
    critic_loss = (q - q_target).square().mean(1).sum()
    torch.testing.assert_close(metrics["critic_loss"], critic_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics["actor_loss"], actor_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics["weight_mean"], weight.mean(), rtol=1e-5, atol=1e-6)


def one_step_policy(**overrides) -> FlowPolicy:
    config = FlowPolicyConfig(hidden=(16, 16), draws=1, steps=3, one_step=True, normalize_obs=False, **overrides)
    return FlowPolicy(3, 2, FakeEnv.action_low, FakeEnv.action_high, config)


def test_fql_update_equals_its_formulas():
    torch.manual_seed(0)
    policy = one_step_policy()
    config = FQLConfig(alpha=3.0, critic_hidden=(16,), reward_scale=2.0)
    fql = FQL(config, policy, FakeEnv())
    before, batch = copy.deepcopy(fql), batch_of()
    torch.manual_seed(7)
    metrics = fql.update(batch, 0.0)
    torch.manual_seed(7)  # the same draws in the same order: z', flow-matching (noise, t), z
    p = before.policy
    with torch.no_grad():
        z_next = torch.randn(32, 2)
        next_action = p.to_env(p.one_step_y(batch["next_obs"], z_next)).clamp(-1, 1)
        target = 2.0 * batch["reward"] + 0.99 * (~batch["terminated"]).float() * before.target_critic(
            batch["next_obs"], next_action
        ).mean(0)
        critic_loss = (before.critic(batch["obs"], batch["action"]) - target).square().mean(1).sum()
        noise, t = torch.randn(32, 1, 2), torch.rand(32, 1)
        flow_loss = p.cfm_loss(batch["obs"], p.to_normalized(batch["action"]), noise, t).mean()
        z = torch.randn(32, 2)
        y = p.one_step_y(batch["obs"], z)
        flow_y = integrate(p.velocity, batch["obs"], z, 3, "euler").clamp(-1, 1)
        distill = (y - flow_y).square().mean()
        q_pi = fql.critic(batch["obs"], p.to_env(y).clamp(-1, 1)).mean(0)  # the critic after its own step
        q_loss = -q_pi.mean() / q_pi.abs().mean()
    for name, value in (
        ("critic_loss", critic_loss),
        ("flow_loss", flow_loss),
        ("distill_loss", distill),
        ("q_loss", q_loss),
        ("actor_loss", flow_loss + 3.0 * distill + q_loss),
    ):
        torch.testing.assert_close(metrics[name], value, rtol=1e-5, atol=1e-6, msg=name)


class QuadraticCritic(torch.nn.Module):
    """Q(s, a) = -|a - a*|^2 for both critics (a known maximum at a*)."""

    def __init__(self, best: torch.Tensor) -> None:
        super().__init__()
        self.best, self.unused = best, torch.nn.Parameter(torch.zeros(1))

    def forward(self, obs, action):
        q = -(action - self.best).square().sum(-1) + 0.0 * self.unused
        return torch.stack((q, q))


def test_fql_actor_climbs_a_known_critic():
    torch.manual_seed(0)
    policy = one_step_policy()
    fql = FQL(FQLConfig(alpha=0.0, normalize_q_loss=False, learning_rate=1e-3, tau=1e-9), policy, FakeEnv())
    best = torch.tensor([0.5, -0.3])
    fql.critic, fql.target_critic = QuadraticCritic(best), QuadraticCritic(best)
    fql.critic_optimizer = torch.optim.SGD(fql.critic.parameters(), lr=0.0)
    obs = torch.randn(64, 3)
    start = float((policy.act(obs, deterministic=True)[0] - best).norm(dim=-1).mean())
    for step in range(400):
        fql.update(batch_of(64, seed=step), 0.0)
    end = float((policy.act(obs, deterministic=True)[0] - best).norm(dim=-1).mean())
    assert start > 0.4 and end < 0.05, (start, end)


# ------------------------------------------------------------------------------------------- one-step policy


def test_one_step_policy_acts_exports_and_loads_a_cloned_flow(tmp_path):
    torch.manual_seed(0)
    policy = one_step_policy(output_scale=1.0)
    obs = torch.randn(16, 3) * 2
    action, _ = policy.act(obs, deterministic=True)
    expected = policy.to_env(policy.one_step_y(obs, torch.zeros(16, 2)))
    torch.testing.assert_close(action, expected)  # z = 0, one network call, unclipped (the loop clips)
    exported = policy.export_module()
    torch.testing.assert_close(exported(obs), expected.clamp(-1, 1))
    # a cloned flow (no one-step weights) loads: velocity equal, the one-step network keeps its own weights
    cloned = FlowPolicy(
        3, 2, FakeEnv.action_low, FakeEnv.action_high, FlowPolicyConfig(hidden=(16, 16), steps=3, normalize_obs=False)
    )
    one_step_before = copy.deepcopy(policy.one_step.state_dict())
    policy.load_state_dict(cloned.state_dict())
    for key, value in cloned.velocity.state_dict().items():
        torch.testing.assert_close(policy.velocity.state_dict()[key], value, rtol=0, atol=0)
    for key, value in one_step_before.items():
        torch.testing.assert_close(policy.one_step.state_dict()[key], value, rtol=0, atol=0)
    wrong = {**cloned.state_dict(), "surprise": torch.zeros(1)}
    with pytest.raises(RuntimeError, match="unexpected"):
        policy.load_state_dict(wrong)
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    path = tmp_path / "fql.onnx"
    export_onnx(exported, obs[:4], path)
    session = onnx_session(path)
    (onnx_action,) = session.run(None, {"obs": obs.numpy()})
    torch.testing.assert_close(torch.from_numpy(onnx_action), exported(obs), rtol=0, atol=1e-5)


def test_expo_acts_by_the_argmax_q_of_base_samples_and_their_edits(tmp_path):
    torch.manual_seed(0)
    config = FlowPolicyConfig(
        hidden=(16, 16),
        steps=3,
        output_scale=1.0,
        edit_bound=0.3,
        expo_samples=5,
        guidance_hidden=(16, 16),
        normalize_obs=False,
    )
    policy = FlowPolicy(3, 2, FakeEnv.action_low, FakeEnv.action_high, config)
    best = torch.tensor([0.5, -0.3])
    policy.guide = QuadraticCritic(best)
    obs = torch.randn(6, 3)
    action, _ = policy.act(obs, deterministic=True)
    # by hand: 5 base samples from the fixed noise (the first 0), their deterministic edits, 10 candidates
    base = integrate(policy.velocity, obs.repeat_interleave(5, 0), policy.expo_noise.repeat(6, 1), 3, "euler")
    delta = policy.edit.deterministic(obs.repeat_interleave(5, 0), base)
    assert float(delta.abs().max()) <= 0.3 and torch.equal(policy.expo_noise[0], torch.zeros(2))
    candidates = torch.cat(((base).clamp(-1, 1).reshape(6, 5, 2), (base + delta).clamp(-1, 1).reshape(6, 5, 2)), 1)
    chosen = candidates[torch.arange(6), (-(candidates - best).square().sum(-1)).argmax(1)]
    torch.testing.assert_close(action, chosen, rtol=0, atol=0)
    # the edit's log-probability: a tanh-squashed Gaussian scaled by the bound, checked against torch.distributions
    y = torch.randn(64, 2)
    torch.manual_seed(1)
    delta, log_prob = policy.edit.rsample(obs[:1].expand(64, -1), y)
    mean, log_std = policy.edit._gaussian(obs[:1].expand(64, -1), y)
    u = torch.atanh(delta / 0.3)
    reference = torch.distributions.Normal(mean, log_std.exp()).log_prob(u) - torch.log(0.3 * (1 - torch.tanh(u) ** 2))
    torch.testing.assert_close(log_prob, reference.sum(-1), rtol=1e-4, atol=1e-4)


def test_expo_export_folds_in_base_edit_and_critics(tmp_path):
    torch.manual_seed(0)
    config = FlowPolicyConfig(
        hidden=(16, 16), steps=3, output_scale=1.0, edit_bound=0.3, expo_samples=4, guidance_hidden=(16, 16)
    )
    policy = FlowPolicy(3, 2, FakeEnv.action_low, FakeEnv.action_high, config)
    policy.normalizer.update(torch.randn(64, 3) * 2)
    obs = torch.randn(8, 3)
    exported = policy.export_module()
    torch.testing.assert_close(exported(obs), policy.act(obs, deterministic=True)[0], rtol=1e-6, atol=1e-6)
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    path = tmp_path / "expo.onnx"
    export_onnx(exported, obs[:4], path)
    session = onnx_session(path)
    (action,) = session.run(None, {"obs": obs.numpy()})
    torch.testing.assert_close(torch.from_numpy(action), exported(obs), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"edit_bound": -0.1}, "edit_bound must be a finite number >= 0"),
     ({"edit_bound": 0.1, "expo_samples": 0}, "expo_samples must be >= 1"),
     ({"edit_bound": 0.1, "one_step": True}, "edit_bound > 0 \\(EXPO\\) excludes one_step")],
)  # fmt: skip
def test_bad_expo_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        FlowPolicyConfig(**changes)
