"""Ratio controls of the shared surrogate against hand-worked values at and across each boundary.

Each case is one entry (B = 1, K = 1). ``loss`` is the negated objective; ``grad`` is d loss / d log_ratio,
which equals -r * d objective / d r.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from robopt.core.ratio_control import RATIO_CONTROLS, RatioControl, adapt_kl_coef
from robopt.core.surrogates import clipped_surrogate, plain_surrogate, surrogate


def loss_and_grad(ratio: float, advantage: float, control: RatioControl, **kwargs) -> tuple[float, float]:
    log_ratio = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    loss, _ = surrogate(log_ratio, torch.tensor([advantage], dtype=torch.float64), control, **kwargs)
    (grad,) = torch.autograd.grad(loss, log_ratio)
    return loss.item(), grad.item()


CASES = [
    # name, control, r, A, loss, grad (arithmetic in the comment)
    # plain: obj = rA; grad = -rA.
    ("plain r=1.5 A=1", RatioControl("plain"), 1.5, 1.0, -1.5, -1.5),
    # clip eps=0.2. Inside: r=1.1, A=1: min(1.1, 1.1) = 1.1, grad -1.1.
    ("clip inside", RatioControl("clip"), 1.1, 1.0, -1.1, -1.1),
    # At the edge r=1.2: min(1.2, 1.2) = 1.2.  Across it r=1.5: min(1.5, 1.2) = 1.2, clipped so grad 0.
    ("clip across upper", RatioControl("clip"), 1.5, 1.0, -1.2, 0.0),
    # A<0, r=1.5 above the band: min(-1.5, -1.2) = -1.5 (pessimistic, unclipped), grad = -(1.5 * -1) = 1.5.
    ("clip A<0 above band", RatioControl("clip"), 1.5, -1.0, 1.5, 1.5),
    # A<0, r=0.5 below the band: min(-0.5, -0.8) = -0.8, clipped so grad 0.
    ("clip A<0 below band", RatioControl("clip"), 0.5, -1.0, 0.8, 0.0),
    # A>0, r=0.5 below the band: min(0.5, 0.8) = 0.5, unclipped, grad -0.5.
    ("clip A>0 below band", RatioControl("clip"), 0.5, 1.0, -0.5, -0.5),
    # clip-higher eps_low=0.2, eps_high=0.28: r=1.25 passes (symmetric clip would give 1.2): grad -1.25.
    ("asym inside high", RatioControl("clip_asymmetric", clip_high=0.28), 1.25, 1.0, -1.25, -1.25),
    # r=1.3 across the upper edge: min(1.3, 1.28) = 1.28, grad 0.
    ("asym across high", RatioControl("clip_asymmetric", clip_high=0.28), 1.3, 1.0, -1.28, 0.0),
    # r=0.75, A=-1 across the lower edge 0.8: min(-0.75, -0.8) = -0.8, grad 0.
    ("asym across low", RatioControl("clip_asymmetric", clip_high=0.28), 0.75, -1.0, 0.8, 0.0),
    # dual clip c=3, A=-1. r=2: clip obj min(-2, -1.2) = -2, floor cA = -3, max(-2, -3) = -2, grad = -(2 * -1) = 2.
    ("dual inside", RatioControl("dual_clip"), 2.0, -1.0, 2.0, 2.0),
    # r=5 across c: clip obj -5, max(-5, -3) = -3, grad 0 (the loss of a runaway ratio is bounded).
    ("dual across", RatioControl("dual_clip"), 5.0, -1.0, 3.0, 0.0),
    # A>0 is untouched by the floor: r=5, min(5, 1.2) = 1.2, grad 0.
    ("dual A>0", RatioControl("dual_clip"), 5.0, 1.0, -1.2, 0.0),
    # KL penalty beta=0.5, k3 KL = (r - 1) - log r. r=2, A=1: k3 = 1 - 0.693147 = 0.306853,
    # obj = 2 - 0.5 * 0.306853 = 1.846574; d obj / d r = A - beta (1 - 1/r) = 1 - 0.25 = 0.75, grad = -2 * 0.75 = -1.5.
    ("kl penalty r=2", RatioControl("kl_penalty_adaptive", kl_coef=0.5), 2.0, 1.0, -1.846574, -1.5),
    # At r=1 the penalty and its gradient vanish: obj = A = 1, grad -1.
    ("kl penalty r=1", RatioControl("kl_penalty_adaptive", kl_coef=0.5), 1.0, 1.0, -1.0, -1.0),
    # SPO eps=0.2: obj = rA - |A| / 0.4 (r - 1)^2, d obj / d r = A - |A| / 0.2 (r - 1).
    # r=1: obj 1, d/dr = 1, grad -1.
    ("spo r=1", RatioControl("spo_penalty"), 1.0, 1.0, -1.0, -1.0),
    # At the boundary r=1.2: obj = 1.2 - 2.5 * 0.04 = 1.1; d/dr = 1 - 5 * 0.2 = 0: the optimum, grad 0.
    ("spo at boundary", RatioControl("spo_penalty"), 1.2, 1.0, -1.1, 0.0),
    # Across it r=1.4: obj = 1.4 - 2.5 * 0.16 = 1.0; d/dr = 1 - 5 * 0.4 = -1, grad = -1.4 * -1 = 1.4 (pulled back).
    ("spo across", RatioControl("spo_penalty"), 1.4, 1.0, -1.0, 1.4),
    # A=-1 at the lower boundary r=0.8: obj = -0.8 - 2.5 * 0.04 = -0.9; d/dr = -1 - 5 * (-0.2) = 0.
    ("spo A<0 at boundary", RatioControl("spo_penalty"), 0.8, -1.0, 0.9, 0.0),
    # Sigmoid gate tau_pos=2, tau_neg=4: obj = (4/tau) sigmoid(tau (r - 1)) A; d obj/d r = 4 s (1 - s) A.
    # r=1: obj = 2 * 0.5 = 1, d/dr = 4 * 0.25 = 1 (plain gradient on-policy), grad -1.
    (
        "gate r=1",
        RatioControl("sigmoid_gate", gate_temperature_pos=2.0, gate_temperature_neg=4.0),
        1.0,
        1.0,
        -1.0,
        -1.0,
    ),
    # r=1.5, A=1: s = sigmoid(1) = 0.7310586, obj = 2 s = 1.4621172; d/dr = 4 * 0.7310586 * 0.2689414 = 0.7864477,
    # grad = -1.5 * 0.7864477 = -1.1796716 (decayed, not cut to 0 as with clip).
    (
        "gate r=1.5 A>0",
        RatioControl("sigmoid_gate", gate_temperature_pos=2.0, gate_temperature_neg=4.0),
        1.5,
        1.0,
        -1.4621172,
        -1.1796716,
    ),
    # r=1.5, A=-1 uses tau_neg=4: s = sigmoid(2) = 0.8807971, obj = -(4/4) s = -0.8807971;
    # d/dr = -4 * 0.8807971 * 0.1192029 = -0.4199743, grad = -1.5 * -0.4199743 = 0.6299615.
    (
        "gate r=1.5 A<0",
        RatioControl("sigmoid_gate", gate_temperature_pos=2.0, gate_temperature_neg=4.0),
        1.5,
        -1.0,
        0.8807971,
        0.6299615,
    ),
]


@pytest.mark.parametrize(("label", "control", "ratio", "advantage", "loss", "grad"), CASES, ids=[c[0] for c in CASES])
def test_ratio_control_hand_worked(
    label: str, control: RatioControl, ratio: float, advantage: float, loss: float, grad: float
) -> None:
    got_loss, got_grad = loss_and_grad(ratio, advantage, control)
    assert got_loss == pytest.approx(loss, abs=1e-6), label
    assert got_grad == pytest.approx(grad, abs=1e-6), label


def test_clip_value_at_the_edge() -> None:
    # r = 1.2 exactly: min(1.2 A, 1.2 A) = 1.2 for A = 1 (value only: the gradient at a tie is a subgradient).
    got_loss, _ = loss_and_grad(1.2, 1.0, RatioControl("clip"))
    assert got_loss == pytest.approx(-1.2)


def test_dual_clip_at_c() -> None:
    # r = 3 = c, A = -1: clip obj -3 equals the floor -3 -> loss 3.
    got_loss, _ = loss_and_grad(3.0, -1.0, RatioControl("dual_clip"))
    assert got_loss == pytest.approx(3.0)


def test_kl_penalty_uses_exact_kl_when_given() -> None:
    # r = 2, A = 1, beta = 0.5, exact KL 0.1: obj = 2 - 0.05 = 1.95.
    log_ratio = torch.tensor([[math.log(2.0)]], dtype=torch.float64)
    control = RatioControl("kl_penalty_adaptive", kl_coef=0.5)
    loss, metrics = surrogate(log_ratio, torch.tensor([1.0]), control, kl=torch.tensor([0.1], dtype=torch.float64))
    assert loss.item() == pytest.approx(-1.95)
    assert metrics["kl_penalty"].item() == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("measured", "expected"),
    [
        (0.005, 0.25),  # 0.005 < 0.01 / 1.5 = 0.006667 -> halve 0.5
        (0.0067, 0.5),  # just inside [0.006667, 0.015] -> keep
        (0.015, 0.5),  # at the upper edge 0.01 * 1.5 (strict >) -> keep
        (0.02, 1.0),  # 0.02 > 0.015 -> double 0.5
    ],
)
def test_adapt_kl_coef(measured: float, expected: float) -> None:
    assert adapt_kl_coef(0.5, measured, target=0.01) == pytest.approx(expected)
    control = RatioControl("kl_penalty_adaptive", kl_coef=0.5, kl_target=0.01)
    assert control.adapted(measured).kl_coef == pytest.approx(expected)


def test_adapted_is_identity_for_other_controls() -> None:
    control = RatioControl("clip")
    assert control.adapted(1.0) is control


def test_clip_matches_legacy_clipped_surrogate_with_weight_and_mask() -> None:
    log_ratio = torch.log(torch.tensor([[0.5, 1.1], [1.5, 1.0]]))  # [B=2, K=2]
    advantage = torch.tensor([1.0, -2.0])
    weight = torch.tensor([1.0, 0.5])
    mask = torch.tensor([[True, True], [True, False]])
    # Entries (r, A, w): (0.5, 1, 1) -> min(0.5, 0.8) = 0.5; (1.1, 1, 0.5) -> 1.1 * 0.5 = 0.55;
    # (1.5, -2, 1) -> min(-3, -2.4) = -3; (1.0, -2, 0.5) masked. Mean of 3: (0.5 + 0.55 - 3) / 3 = -0.65.
    loss, metrics = surrogate(log_ratio, advantage, RatioControl("clip"), weight=weight, mask=mask)
    legacy, _ = clipped_surrogate(log_ratio, advantage, 0.2, None, weight, mask)
    assert loss.item() == pytest.approx(0.65)
    assert legacy.item() == pytest.approx(0.65)
    # Clipped entries among the unmasked: r = 0.5 and r = 1.5 -> 2 / 3.
    assert metrics["clip_fraction"].item() == pytest.approx(2.0 / 3.0)
    plain, _ = plain_surrogate(log_ratio, advantage, weight, mask)
    # (0.5 + 0.55 - 3) / 3 = -0.65 as well here, since the only clipped entries lie on the pessimistic side.
    assert plain.item() == pytest.approx(0.65)


def test_per_k_clip_bounds_through_clipped_surrogate() -> None:
    # K = 2 with eps = (0.1, 0.3), r = 1.25 on both, A = 1: min(1.25, 1.1) = 1.1 and min(1.25, 1.3) = 1.25.
    # Loss = -(1.1 + 1.25) / 2 = -1.175.
    log_ratio = torch.full((1, 2), math.log(1.25))
    loss, _ = clipped_surrogate(log_ratio, torch.tensor([1.0]), torch.tensor([0.1, 0.3]))
    assert loss.item() == pytest.approx(-1.175)


def test_ratio_metrics_drift() -> None:
    # r = (0.5, 1.5): mean |r - 1| = 0.5, max r = 1.5.
    log_ratio = torch.log(torch.tensor([[0.5], [1.5]]))
    _, metrics = surrogate(log_ratio, torch.tensor([1.0, 1.0]), RatioControl("spo_penalty"))
    assert metrics["ratio_mean_abs_dev"].item() == pytest.approx(0.5)
    assert metrics["ratio_max"].item() == pytest.approx(1.5)


def test_every_control_is_one_on_policy_gradient() -> None:
    # At r = 1 every control's gradient w.r.t. log_ratio equals the policy gradient -A (here A = 2 -> -2).
    for name in RATIO_CONTROLS:
        control = RatioControl(name, clip_high=0.28 if name == "clip_asymmetric" else None)
        _, grad = loss_and_grad(1.0, 2.0, control)
        assert grad == pytest.approx(-2.0), name


def test_unknown_name_lists_allowed() -> None:
    with pytest.raises(ValueError, match="allowed: plain, clip, clip_asymmetric"):
        RatioControl("ppo_clip")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "clip", "clip_high": 0.3}, "clip_asymmetric"),
        ({"name": "clip_asymmetric"}, "needs clip_high"),
        ({"name": "dual_clip", "dual_clip": 1.0}, "dual_clip=1.0"),
        ({"name": "clip", "clip_low": 1.5}, "clip_low"),
        ({"name": "spo_penalty", "spo_eps": 0.0}, "spo_eps"),
        ({"name": "sigmoid_gate", "gate_temperature_neg": -1.0}, "gate_temperature_neg"),
    ],
)
def test_bad_constants_fail_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RatioControl(**kwargs)


def _control_of(path: Path) -> str:
    return path.stem.removeprefix("ppo_").removesuffix("_halfcheetah")


RATIO_CONFIGS = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "configs").glob("ppo_*_halfcheetah.yaml")
    if _control_of(p) in RATIO_CONTROLS  # other ppo_*_halfcheetah files (e.g. a backend variant) are not ours
)


@pytest.mark.parametrize("path", RATIO_CONFIGS, ids=[p.stem for p in RATIO_CONFIGS])
def test_ppo_ratio_control_configs_load(path: Path) -> None:
    # configs/ppo_<control>_halfcheetah.yaml selects exactly <control> through algo.ratio.name.
    from robopt.experiment import load_config

    assert load_config(path).algo.ratio.name == _control_of(path)


def test_one_config_per_ratio_control() -> None:
    names = {_control_of(p) for p in RATIO_CONFIGS}
    assert set(RATIO_CONTROLS) - {"plain", "clip"} <= names  # clip is configs/ppo_halfcheetah.yaml
