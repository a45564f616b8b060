"""Trust-region updater: CG, Fisher-vector products, KL scaling and the line search, on hand-worked numbers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robopt.core.protocols import SupportsKL
from robopt.core.trust_region import (
    TrustRegionConfig,
    TrustRegionUpdater,
    conjugate_gradient,
    fisher_vector_product,
    flat_params,
    scale_to_kl_bound,
    set_flat_params,
)


def test_conjugate_gradient_on_a_known_2x2_system() -> None:
    # M = [[4, 1], [1, 3]], b = [1, 2]; det M = 4*3 - 1*1 = 11,
    # x = M^-1 b = [(3*1 - 1*2) / 11, (4*2 - 1*1) / 11] = [1/11, 7/11]. CG is exact after n = 2 iterations.
    matrix = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    x, iterations = conjugate_gradient(lambda v: matrix @ v, b, iterations=10)
    torch.testing.assert_close(x, torch.tensor([1.0 / 11.0, 7.0 / 11.0], dtype=torch.float64))
    assert iterations == 2


def test_conjugate_gradient_matches_linalg_solve_on_random_spd() -> None:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(20, 20, generator=generator, dtype=torch.float64)
    matrix = a @ a.T + 20.0 * torch.eye(20, dtype=torch.float64)  # SPD, condition number ~ small
    b = torch.randn(20, generator=generator, dtype=torch.float64)
    x, _ = conjugate_gradient(lambda v: matrix @ v, b, iterations=50, residual_tol=1e-20)
    torch.testing.assert_close(x, torch.linalg.solve(matrix, b))


class TinyGaussianPolicy(nn.Module):
    """1-D obs, 1-D action: mean = w * obs + b, state-independent log_std s. Implements SupportsKL."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(0.3, dtype=torch.float64))
        self.bias = nn.Parameter(torch.tensor(-0.1, dtype=torch.float64))
        self.log_std = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight * obs, self.log_std.expand_as(obs)  # mean [B], log_std [B]

    def act_info(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        mean, log_std = self.distribution(obs)
        return {"mean": (mean + self.bias).detach(), "log_std": log_std.detach()}

    def kl(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        # KL(N(m0, s0^2) || N(m1, s1^2)) = log(s1/s0) + (s0^2 + (m0 - m1)^2) / (2 s1^2) - 1/2, per row [B].
        mean, log_std = self.distribution(obs)
        mean = mean + self.bias
        var_old, var_new = torch.exp(2 * info["log_std"]), torch.exp(2 * log_std)
        return log_std - info["log_std"] + (var_old + (info["mean"] - mean) ** 2) / (2 * var_new) - 0.5


def test_fisher_vector_product_matches_explicit_kl_hessian() -> None:
    policy = TinyGaussianPolicy()
    assert isinstance(policy, SupportsKL)
    obs = torch.tensor([1.0, 2.0], dtype=torch.float64)
    info = policy.act_info(obs)
    params = list(policy.parameters())  # (w, b, s)

    # Hand-worked Fisher at the old parameters (sigma = exp(0) = 1), batch obs {1, 2}:
    #   mean block: mean_b [x^2, x; x, 1] / sigma^2 = [[(1 + 4)/2, (1 + 2)/2], [(1 + 2)/2, 1]] = [[2.5, 1.5], [1.5, 1]]
    #   log_std block: d^2/du^2 (u + exp(-2u)/2 - 1/2) = 2 exp(-2u) = 2 at u = 0; cross terms vanish at u = 0.
    expected = torch.tensor([[2.5, 1.5, 0.0], [1.5, 1.0, 0.0], [0.0, 0.0, 2.0]], dtype=torch.float64)

    theta_old = flat_params(params)

    def mean_kl_of(theta: torch.Tensor) -> torch.Tensor:
        w, b, s = theta
        mean = w * obs + b
        var_old = torch.exp(2 * info["log_std"])
        return (s - info["log_std"] + (var_old + (info["mean"] - mean) ** 2) / (2 * torch.exp(2 * s)) - 0.5).mean()

    hessian = torch.autograd.functional.hessian(mean_kl_of, theta_old)
    torch.testing.assert_close(hessian, expected)

    damping = 0.1
    product = fisher_vector_product(lambda: policy.kl(obs, info).mean(), params, damping)
    for vector in torch.eye(3, dtype=torch.float64).unbind(0):
        torch.testing.assert_close(product(vector), (expected + damping * torch.eye(3, dtype=torch.float64)) @ vector)
    vector = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    # (F + 0.1 I) v = [2.5*0.5 - 1.5 + 0.05, 1.5*0.5 - 1 - 0.1, 2*2 + 0.2] = [-0.2, -0.35, 4.2]
    torch.testing.assert_close(product(vector), torch.tensor([-0.2, -0.35, 4.2], dtype=torch.float64))


def test_scale_to_kl_bound_hits_the_quadratic_model() -> None:
    # F = diag(2, 2), s = [1, 0], delta = 0.01: s^T F s = 2, scale = sqrt(2 * 0.01 / 2) = 0.1 -> step [0.1, 0];
    # 1/2 step^T F step = 0.5 * 2 * 0.01 = 0.01 = delta.
    direction = torch.tensor([1.0, 0.0], dtype=torch.float64)
    step = scale_to_kl_bound(direction, 2.0 * direction, max_kl=0.01)
    torch.testing.assert_close(step, torch.tensor([0.1, 0.0], dtype=torch.float64))
    assert scale_to_kl_bound(direction, 0.0 * direction, max_kl=0.01).abs().sum() == 0.0


def _quadratic_problem(loss_curvature: float, kl_scale: float = 1.0):
    """theta in R^2 starting at 0; KL = kl_scale/2 |theta|^2; loss = -theta_0 + curvature |theta|^2."""
    theta = nn.Parameter(torch.zeros(2, dtype=torch.float64))

    def loss_fn() -> torch.Tensor:
        return -theta[0] + loss_curvature * (theta**2).sum()

    def kl_fn() -> torch.Tensor:
        return 0.5 * kl_scale * (theta**2).sum()

    return theta, loss_fn, kl_fn


def test_full_step_accepted_on_a_linear_surrogate() -> None:
    theta, loss_fn, kl_fn = _quadratic_problem(loss_curvature=0.0)
    updater = TrustRegionUpdater([theta], TrustRegionConfig(max_kl=0.02, damping=0.1))
    metrics = updater.step(loss_fn, kl_fn)
    # g = [1, 0]; F + 0.1 I = 1.1 I -> s = [1/1.1, 0]; step = sqrt(2 * 0.02 / (s^T 1.1 s)) s has length
    # sqrt(2 * 0.02 / 1.1) = 0.190693; true KL = 0.5 * 0.190693^2 = 0.018182 (= delta / 1.1) <= 0.02: accepted at once.
    step_length = math.sqrt(2 * 0.02 / 1.1)
    torch.testing.assert_close(theta.detach(), torch.tensor([step_length, 0.0], dtype=torch.float64))
    assert metrics["rejected"] == 0.0
    assert metrics["line_search_steps"] == 0.0
    assert metrics["kl"] == pytest.approx(0.02 / 1.1)
    assert metrics["kl_full_step"] == pytest.approx(0.02 / 1.1)
    assert metrics["surrogate_improvement"] == pytest.approx(step_length)


def test_line_search_rejects_a_step_that_lowers_the_surrogate() -> None:
    # The gradient promises improvement along theta_0, but the true loss -t + 1000 t^2 is > 0 for every trial
    # t = 0.8^i * |step| with |step| = sqrt(2 * 0.5 / 1.1) = 0.953 and i <= 9 (smallest t = 0.128 > 1/1000).
    theta, loss_fn, kl_fn = _quadratic_problem(loss_curvature=1000.0)
    updater = TrustRegionUpdater([theta], TrustRegionConfig(max_kl=0.5, damping=0.1))
    metrics = updater.step(loss_fn, kl_fn)
    assert metrics["rejected"] == 1.0
    assert metrics["line_search_steps"] == 10.0
    assert metrics["surrogate_improvement"] == 0.0
    assert metrics["kl"] == 0.0
    assert torch.equal(theta.detach(), torch.zeros(2, dtype=torch.float64))  # old parameters restored exactly


def test_line_search_backtracks_until_the_kl_bound_holds() -> None:
    # Fisher products see KL = 1/2 |theta|^2 but the measured KL is 4x larger: the full step (length
    # sqrt(2 * 0.02 / 1.1)) has KL = 4 * 0.02 / 1.1 = 0.072727 > 0.02. Trial i scales the KL by 0.8^(2i) = 0.64^i:
    # i = 0, 1, 2, 3 -> 0.072727, 0.046545, 0.029789, 0.019065; the first <= 0.02 is i = 3 (three backtracks).
    theta, loss_fn, _ = _quadratic_problem(loss_curvature=0.0)
    fisher_kl = lambda: 0.5 * (theta**2).sum()  # noqa: E731
    measured_kl = lambda: 2.0 * (theta**2).sum()  # noqa: E731
    updater = TrustRegionUpdater([theta], TrustRegionConfig(max_kl=0.02, damping=0.1))
    metrics = updater.step(loss_fn, measured_kl, fisher_kl_fn=fisher_kl)
    assert metrics["rejected"] == 0.0
    assert metrics["line_search_steps"] == 3.0
    assert metrics["kl_full_step"] == pytest.approx(4 * 0.02 / 1.1)
    assert metrics["kl"] == pytest.approx(4 * 0.02 / 1.1 * 0.8**6)
    assert metrics["kl"] <= 0.02


def test_zero_gradient_is_rejected_without_moving() -> None:
    theta = nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    updater = TrustRegionUpdater([theta])
    metrics = updater.step(lambda: 0.0 * theta.sum(), lambda: ((theta - theta.detach()) ** 2).sum())
    assert metrics["rejected"] == 1.0
    assert torch.equal(theta.detach(), torch.tensor([1.0, 2.0], dtype=torch.float64))


def test_set_flat_params_round_trip() -> None:
    layer = nn.Linear(3, 2)
    params = list(layer.parameters())
    flat = torch.arange(8, dtype=torch.float32)  # 6 weights + 2 biases
    set_flat_params(params, flat)
    torch.testing.assert_close(flat_params(params), flat)
    torch.testing.assert_close(layer.bias.detach(), torch.tensor([6.0, 7.0]))


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="max_kl"):
        TrustRegionConfig(max_kl=0.0)
    with pytest.raises(ValueError, match="backtrack_ratio"):
        TrustRegionConfig(backtrack_ratio=1.0)
