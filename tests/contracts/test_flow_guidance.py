"""Q-guided flow sampling: the critic's action gradient by explicit backward pass, the guided integrator, export."""

from __future__ import annotations

import pytest
import torch

from robopt.policies.flow import FlowPolicy, FlowPolicyConfig, integrate
from robopt.policies.guidance import GuidedVelocity, critic_action_gradient, mlp_input_gradient
from robopt.policies.networks import MLP
from robopt.sim2real.export import export_onnx, export_pt2, load_torch_file, onnx_session

D, A = 3, 2


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("activation", ["relu", "tanh", "elu", "silu"])
def test_input_gradient_equals_autograd(activation, layer_norm):
    torch.manual_seed(0)
    mlp = MLP(7, 1, (16, 12), activation, 1.0, False, layer_norm)
    if layer_norm:
        for norm in mlp.norms:
            torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
            torch.nn.init.uniform_(norm.bias, -0.2, 0.2)
    x = torch.randn(9, 7, requires_grad=True)
    mlp(x).sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(mlp_input_gradient(mlp, x), x.grad, rtol=1e-5, atol=1e-6)


def guided_policy(scale: float = 0.5) -> FlowPolicy:
    torch.manual_seed(0)
    config = FlowPolicyConfig(
        hidden=(16, 16),
        steps=4,
        output_scale=1.0,
        guidance_scale=scale,
        guidance_hidden=(16, 16),
        guidance_activation="tanh",
    )
    policy = FlowPolicy(D, A, -torch.ones(A), torch.ones(A), config)
    policy.normalizer.update(torch.randn(64, D) * 2 + 1)
    return policy


def mean_q(policy, obs, action) -> torch.Tensor:
    return policy.guide(obs, action).mean(0)


def test_guided_sampling_is_the_flow_at_zero_scale_and_climbs_q_above():
    policy, obs = guided_policy(), torch.randn(64, D)
    obs_norm, x0 = policy._obs_norm(obs), torch.zeros(64, A)
    plain = integrate(policy.velocity, obs_norm, x0, 4, "euler")
    zero = GuidedVelocity(policy.velocity, policy.guide, 0.0, policy.action_centre, policy.action_half_range)
    torch.testing.assert_close(integrate(zero.bind(obs), obs_norm, x0, 4, "euler"), plain, rtol=0, atol=0)
    guided, _ = policy.act(obs, deterministic=True)
    gain = mean_q(policy, obs, guided) - mean_q(policy, obs, policy.to_env(plain))
    assert float(gain.mean()) > 0.0 and float((gain > 0).float().mean()) > 0.9, gain
    # the guidance is the critics' mean gradient, checked against autograd at one point
    action = torch.randn(5, A, requires_grad=True)
    policy.guide(obs[:5], action).mean(0).sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(
            critic_action_gradient(policy.guide, obs[:5], action), action.grad, rtol=1e-5, atol=1e-6
        )


def test_guided_export_folds_the_critic_in(tmp_path):
    policy, obs = guided_policy(), torch.randn(16, D) * 2
    exported = policy.export_module()
    expected = policy.clip(policy.act(obs, deterministic=True)[0])
    torch.testing.assert_close(exported(obs), expected, rtol=1e-6, atol=1e-6)
    export_pt2(exported, obs[:3], tmp_path / "guided.pt2")  # exported at batch 3, run at 16: the batch axis is dynamic
    torch.testing.assert_close(load_torch_file("pt2", tmp_path / "guided.pt2")(obs), expected, rtol=1e-6, atol=1e-6)
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    path = tmp_path / "guided.onnx"
    export_onnx(exported, obs[:4], path)
    session = onnx_session(path)
    (action,) = session.run(None, {"obs": obs.numpy()})
    torch.testing.assert_close(torch.from_numpy(action), expected, rtol=0, atol=1e-5)


def test_bad_guidance_settings_are_refused():
    with pytest.raises(ValueError, match="guidance_scale must be a finite number >= 0"):
        FlowPolicyConfig(guidance_scale=-1.0)
    with pytest.raises(ValueError, match="a one_step policy does not integrate"):
        FlowPolicyConfig(guidance_scale=0.5, one_step=True)
