"""Flow policy contract: FPO's log-ratio, the integrators on known fields, bounds, export parity, a bimodal fit.

Shapes: B batch, D obs dim, A action dim, M draws of (noise, flow time) per action.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robopt.core.protocols import Policy, SupportsEntropy, SupportsKL
from robopt.policies import FlowPolicy, GaussianPolicy
from robopt.policies.flow import ExportedFlowPolicy, FlowPolicyConfig, integrate, time_embedding

D, A, B, M = 5, 3, 32, 4


def make_policy(**overrides) -> FlowPolicy:
    """A small flow policy over the box [-1, 2]^A with non-trivial normalizer statistics.

    ``output_scale`` 1 (not the near-zero default) so the velocity field, and hence actions, depend on obs and x.
    """
    fields = {"hidden": (16, 16), "draws": M, "output_scale": 1.0, **overrides}
    policy = FlowPolicy(D, A, -torch.ones(A), 2 * torch.ones(A), FlowPolicyConfig(**fields))
    policy.normalizer.update(torch.randn(100, D) * 3 + 1)
    return policy


class KnownField(nn.Module):
    """v(x, t) = rate * x + time_coef * t^2 + constant, ignoring obs: a field whose flow is worked out by hand."""

    def __init__(self, rate: float = 0.0, time_coef: float = 0.0, constant: float = 0.0) -> None:
        super().__init__()
        self.rate, self.time_coef, self.constant = rate, time_coef, constant

    def forward(self, obs_norm: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.rate * x + self.time_coef * t.unsqueeze(-1).square() + self.constant


# ---------------------------------------------------------------- policy contract


def test_protocols_and_act_shapes():
    policy = make_policy()
    assert isinstance(policy, Policy)
    assert not isinstance(policy, SupportsKL) and not isinstance(policy, SupportsEntropy)  # what TRPO/entropy refuse
    action, info = policy.act(torch.randn(B, D))
    assert action.shape == (B, A) and action.dtype == torch.float32
    assert set(info) == {"noise", "flow_time", "cfm_loss"}
    assert info["noise"].shape == (B, M, A)
    assert info["flow_time"].shape == (B, M) and info["cfm_loss"].shape == (B, M)
    assert torch.all((info["flow_time"] >= 0) & (info["flow_time"] < 1)) and torch.all(info["cfm_loss"] >= 0)


@pytest.mark.parametrize("acting", ["no_grad", "inference_mode"])
@pytest.mark.parametrize(("ratio_mode", "width"), [("per_draw", M), ("average", 1)])
def test_log_ratio_exactly_zero_after_acting(ratio_mode, width, acting):
    policy = make_policy(ratio_mode=ratio_mode)
    obs = torch.randn(B, D) * 2
    if acting == "inference_mode":  # as OnPolicyLoop.collect acts
        with torch.inference_mode():
            action, info = policy.act(obs)
    else:
        action, info = policy.act(obs)
    log_ratio = policy.log_ratio(obs, action, info)
    assert log_ratio.shape == (B, width)
    assert torch.equal(log_ratio, torch.zeros(B, width))
    assert log_ratio.requires_grad  # differentiable in the policy's weights


def test_act_returns_nothing_with_grad():
    policy = make_policy()
    assert torch.is_grad_enabled()
    for deterministic in (False, True):
        action, info = policy.act(torch.randn(B, D), deterministic=deterministic)
        for tensor in (action, *info.values()):
            assert not tensor.requires_grad and tensor.grad_fn is None


def test_one_gradient_step_moves_the_log_ratio_uphill():
    # First order: a small SGD step on J = mean(A * log_ratio) raises J from 0 (about lr * |grad J|^2 > 0).
    policy = make_policy()
    obs = torch.randn(B, D)
    with torch.inference_mode():
        action, info = policy.act(obs)
    advantage = torch.randn(B, 1)
    optimizer = torch.optim.SGD(policy.parameters(), lr=1e-3)
    objective = (advantage * policy.log_ratio(obs, action, info)).mean()
    assert objective.item() == 0.0
    (-objective).backward()
    grad_norm_sq = sum(float(p.grad.square().sum()) for p in policy.parameters() if p.grad is not None)
    optimizer.step()
    with torch.no_grad():
        log_ratio = policy.log_ratio(obs, action, info)
        moved = (advantage * log_ratio).mean().item()
    assert torch.all(log_ratio != 0)  # every draw's loss changed
    assert moved > 0 and moved == pytest.approx(1e-3 * grad_norm_sq, rel=0.1)


@pytest.mark.parametrize("ratio_mode", ["per_draw", "average"])
def test_clamp_bounds_the_log_ratio(ratio_mode):
    bound = 1e-5
    policy = make_policy(ratio_mode=ratio_mode, log_ratio_clamp=bound)
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05)
    policy.log_ratio(obs, action, info).sum().backward()  # the clamp passes gradient while |diff| < bound
    optimizer.step()
    with torch.no_grad():
        log_ratio = policy.log_ratio(obs, action, info)
        unclamped = info["cfm_loss"] - policy.cfm_loss(
            policy._obs_norm(obs), policy.to_normalized(action), info["noise"], info["flow_time"]
        )
    if ratio_mode == "average":
        unclamped = unclamped.mean(-1, keepdim=True)
    assert unclamped.abs().max() > 100 * bound  # the step moved the losses far past the bound ...
    assert log_ratio.abs().max() <= bound  # ... and the clamp holds them to it
    torch.testing.assert_close(log_ratio, unclamped.clamp(-bound, bound), rtol=0, atol=0)


@pytest.mark.parametrize("normalize_obs", [True, False])
def test_deterministic_act_is_repeatable_and_matches_export(normalize_obs):
    policy = make_policy(
        output_scale=3.0, normalize_obs=normalize_obs
    )  # a strong field: some deterministic actions leave the box
    obs = torch.randn(B, D) * 4
    first, _ = policy.act(obs, deterministic=True)
    policy.act(obs)  # a stochastic call in between draws random numbers; the deterministic path uses none
    second, _ = policy.act(obs, deterministic=True)
    assert torch.equal(first, second)
    clipped = torch.maximum(torch.minimum(first, policy.action_high), policy.action_low)
    assert not torch.equal(clipped, first)  # some actions leave the box: the export's clipping is exercised
    exported = policy.export_module()
    assert isinstance(exported, ExportedFlowPolicy)
    assert all(not p.requires_grad for p in exported.parameters())
    torch.testing.assert_close(exported(obs), clipped, rtol=1e-6, atol=1e-6)
    policy.normalizer.update(torch.randn(50, D) * 10)  # the export is a snapshot: later updates do not leak in
    torch.testing.assert_close(exported(obs), clipped, rtol=1e-6, atol=1e-6)


def test_time_embedding_by_hand():
    # width 4: frequencies 2^0, 2^1 -> [sin t, sin 2t, cos t, cos 2t]
    t = torch.tensor([0.0, 0.5])
    expected = torch.tensor([[0.0, 0.0, 1.0, 1.0], [math.sin(0.5), math.sin(1.0), math.cos(0.5), math.cos(1.0)]])
    torch.testing.assert_close(time_embedding(t, 4), expected)
    assert time_embedding(torch.rand(3, 7), 8).shape == (3, 7, 8)


# v = t^2 from x_0 = 0 over 2 steps (h = 0.5); exact x_1 = 1/3.
#   euler:    0.5 v(0) + 0.5 v(0.5) = 0.5 * 0 + 0.5 * 0.25 = 0.125
#   midpoint: 0.5 v(0.25) + 0.5 v(0.75) = 0.5 * 0.0625 + 0.5 * 0.5625 = 0.3125
#   heun:     0.25 (v(0) + v(0.5)) + 0.25 (v(0.5) + v(1)) = 0.0625 + 0.3125 = 0.375
# v = x from x_0 = 1 over 4 steps (h = 0.25); exact e = 2.718...
#   euler: (1 + h)^4 = 1.25^4 = 2.44140625
#   midpoint and heun on a linear field: (1 + h + h^2 / 2)^4 = 1.28125^4 = (41 / 32)^4 = 2825761 / 1048576
@pytest.mark.parametrize(
    ("field", "x0", "steps", "integrator", "expected"),
    [
        (KnownField(time_coef=1.0), 0.0, 2, "euler", 0.125),
        (KnownField(time_coef=1.0), 0.0, 2, "midpoint", 0.3125),
        (KnownField(time_coef=1.0), 0.0, 2, "heun", 0.375),
        (KnownField(rate=1.0), 1.0, 4, "euler", 2.44140625),
        (KnownField(rate=1.0), 1.0, 4, "midpoint", 2825761 / 1048576),
        (KnownField(rate=1.0), 1.0, 4, "heun", 2825761 / 1048576),
        (KnownField(rate=-1.0, constant=0.5), 2.0, 1, "euler", 2.0 + (-2.0 + 0.5)),  # one step: x_0 + v(x_0, 0)
    ],
)
def test_integrators_on_known_fields(field, x0, steps, integrator, expected):
    x = torch.full((3, 2), x0, dtype=torch.float64)
    out = integrate(field, torch.zeros(3, D, dtype=torch.float64), x, steps, integrator)
    torch.testing.assert_close(out, torch.full((3, 2), expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    # The same numbers through the policy: deterministic x_0 = 0, so use the t^2 field, mapped to env units.
    if x0 == 0.0:
        config = FlowPolicyConfig(steps=steps, integrator=integrator)
        policy = FlowPolicy(D, 2, torch.tensor([0.0, -3.0]), torch.tensor([4.0, 1.0]), config)
        policy.velocity = field
        action, _ = policy.act(torch.randn(3, D), deterministic=True)
        # box [0, 4]: a = 2 y + 2; box [-3, 1]: a = 2 y - 1
        torch.testing.assert_close(action, torch.tensor([[2 * expected + 2, 2 * expected - 1]] * 3))


def test_bounds_mapping_centre_and_half_range():
    # dim 0: box [0, 4] (centre 2, half-range 2); dim 1: unbounded (identity)
    low, high = torch.tensor([0.0, -math.inf]), torch.tensor([4.0, math.inf])
    policy = FlowPolicy(D, 2, low, high, FlowPolicyConfig(steps=4))
    torch.testing.assert_close(policy.action_centre, torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(policy.action_half_range, torch.tensor([2.0, 1.0]))
    obs = torch.randn(6, D)
    policy.velocity = KnownField()  # v = 0: the deterministic y = x_0 = 0 maps to the centre
    torch.testing.assert_close(policy.act(obs, deterministic=True)[0], torch.tensor([[2.0, 0.0]] * 6))
    torch.testing.assert_close(policy.export_module()(obs), torch.tensor([[2.0, 0.0]] * 6))
    policy.velocity = KnownField(constant=0.5)  # y = 4 steps * 0.25 * 0.5 = 0.5 -> a = (0.5 * 2 + 2, 0.5)
    torch.testing.assert_close(policy.act(obs, deterministic=True)[0], torch.tensor([[3.0, 0.5]] * 6))
    policy.velocity = KnownField(constant=-2.0)  # y = -2 -> a = (-2, -2): act does not clip, the export does
    torch.testing.assert_close(policy.act(obs, deterministic=True)[0], torch.tensor([[-2.0, -2.0]] * 6))
    torch.testing.assert_close(policy.export_module()(obs), torch.tensor([[0.0, -2.0]] * 6))
    torch.testing.assert_close(policy.to_normalized(torch.tensor([[3.0, 0.5]])), torch.tensor([[0.5, 0.5]]))
    # Sampling with v = 0 returns the noise in env units: a = 2 z + 2 (dim 0), z (dim 1), z ~ N(0, 1).
    policy.velocity = KnownField()
    sample = policy.act(torch.randn(4000, D))[0]
    torch.testing.assert_close(sample.mean(0), torch.tensor([2.0, 0.0]), rtol=0, atol=0.1)
    torch.testing.assert_close(sample.std(0), torch.tensor([2.0, 1.0]), rtol=0.05, atol=0)


def test_cfm_loss_stored_at_act_time_by_hand():
    # v = 0.5 x: l_m = mean_A (0.5 x_t - (y - z_m))^2 with x_t = (1 - t_m) z_m + t_m y, y the normalized action.
    policy = make_policy()
    policy.velocity = KnownField(rate=0.5)
    obs = torch.randn(B, D)
    action, info = policy.act(obs)
    y = ((action - 0.5) / 1.5).unsqueeze(1)  # box [-1, 2]: centre 0.5, half-range 1.5; [B, 1, A]
    z, t = info["noise"], info["flow_time"].unsqueeze(-1)
    x_t = (1 - t) * z + t * y
    torch.testing.assert_close(info["cfm_loss"], (0.5 * x_t - (y - z)).square().mean(-1))


# ---------------------------------------------------------------- export: torch.export and ONNX Runtime


def test_torch_export_matches_eager_on_other_batch_sizes(tmp_path):
    from robopt.sim2real.export import export_pt2, load_torch_file

    policy = make_policy(steps=3, integrator="midpoint")
    exported = policy.export_module().eval()
    export_pt2(exported, torch.randn(4, D), tmp_path / "policy.pt2")  # exported at batch 4, the batch axis dynamic
    loaded = load_torch_file("pt2", tmp_path / "policy.pt2")
    for batch in (1, 7, 64):  # the program's aten ops against eager: equal up to float rounding
        obs = torch.randn(batch, D) * 4
        torch.testing.assert_close(loaded(obs), exported(obs), rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.export's own pytree deprecation
@pytest.mark.parametrize("integrator", ["euler", "heun"])
@pytest.mark.parametrize("steps", [1, 5])
def test_onnx_runtime_matches_torch(tmp_path, steps, integrator):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    policy = make_policy(steps=steps, integrator=integrator)
    exported = policy.export_module().eval()
    path = tmp_path / "flow.onnx"
    batch = torch.export.Dim("batch")
    program = torch.onnx.export(
        exported,
        (torch.randn(4, D),),
        dynamo=True,
        dynamic_shapes={"obs": {0: batch}},
        input_names=["obs"],
        output_names=["action"],
        verbose=False,
    )
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[0] == "batch"  # the batch axis is dynamic, not baked in as 4
    for size in (1, 3, 64):
        obs = torch.randn(size, D) * 4
        (action,) = session.run(None, {"obs": obs.numpy()})
        torch.testing.assert_close(torch.from_numpy(action), exported(obs), rtol=0, atol=1e-5)


# ---------------------------------------------------------------- bimodal fit: a flow keeps both modes


def _bimodal_actions(count: int) -> torch.Tensor:
    """[count, 1] from 0.5 N(-0.6, 0.05^2) + 0.5 N(0.6, 0.05^2)."""
    sign = torch.where(torch.rand(count, 1) < 0.5, -1.0, 1.0)
    return 0.6 * sign + 0.05 * torch.randn(count, 1)


def _mass(action: torch.Tensor) -> tuple[float, float, float]:
    """Fractions of samples within 0.2 of -0.6, within 0.2 of +0.6, and in the middle band |a| < 0.25."""
    return (
        float(((action + 0.6).abs() < 0.2).float().mean()),
        float(((action - 0.6).abs() < 0.2).float().mean()),
        float((action.abs() < 0.25).float().mean()),
    )


def test_bimodal_fit_covers_both_modes_where_a_gaussian_averages_them():
    batch, obs = 256, torch.zeros(256, 1)  # one constant observation: the policy is a 1-D action distribution
    bounds = (-torch.ones(1), torch.ones(1))
    flow = FlowPolicy(1, 1, *bounds, FlowPolicyConfig(hidden=(64, 64), normalize_obs=False))
    optimizer = torch.optim.Adam(flow.parameters(), lr=3e-3)
    losses = []
    for _ in range(500):
        loss = flow.imitation_loss(obs, _bimodal_actions(batch)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # At the N(0, I) prior the loss is about E(y - z)^2 = 0.36 + 0.0025 + 1; the best field still leaves the
    # conditional variance, measured about 0.7 here.
    first, last = sum(losses[:20]) / 20, sum(losses[-50:]) / 50
    assert first > 1.0 and last < 0.8
    near_low, near_high, middle = _mass(flow.act(torch.zeros(4000, 1))[0])
    assert near_low > 0.35 and near_high > 0.35 and middle < 0.15

    gaussian = GaussianPolicy(1, 1, *bounds, hidden=(16,), normalize_obs=False)
    optimizer = torch.optim.Adam(gaussian.parameters(), lr=1e-2)
    for _ in range(300):
        loss = -gaussian.log_prob(obs, _bimodal_actions(batch), {}).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # The NLL optimum is the moment match N(0, 0.6^2 + 0.05^2): std 0.602, P(|a| < 0.25) = 2 Phi(0.415) - 1 = 0.32.
    assert gaussian.log_std.exp().item() == pytest.approx(0.602, abs=0.03)
    gaussian_low, gaussian_high, gaussian_middle = _mass(gaussian.act(torch.zeros(4000, 1))[0])
    assert gaussian_middle > 0.25 and gaussian_middle > 3 * middle
    assert gaussian_low < 0.25 and gaussian_high < 0.25  # 0.16 each for the moment-matched Gaussian


# ---------------------------------------------------------------- bad input: one-line errors at build time
