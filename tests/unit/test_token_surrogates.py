"""Per-token surrogates of language policies: reductions, GSPO's sequence ratio and KL estimators, by hand.

Ragged batch for the reductions (B = 2, T = 4, plain control so the per-entry objective is r A):
row 0 has 2 valid tokens with r = (1, 2) and padding r = (5, 7); row 1 has 4 valid tokens with r = (0.5, 1, 1.5, 1).
Advantages A = (1, -2): objectives row 0 (1, 2), row 1 (-1, -2, -3, -2); sum over valid tokens -5, 6 tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from robopt.core.losses import kl_estimate
from robopt.core.ratio_control import RatioControl
from robopt.core.surrogates import REDUCTIONS, masked_mean, plain_surrogate, sequence_log_ratio, surrogate

RATIO = torch.tensor([[1.0, 2.0, 5.0, 7.0], [0.5, 1.0, 1.5, 1.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True, False, False], [True, True, True, True]])
ADVANTAGE = torch.tensor([1.0, -2.0], dtype=torch.float64)
PLAIN = RatioControl("plain")


def loss_and_grad(control: RatioControl, log_ratio: torch.Tensor, advantage: torch.Tensor, mask: torch.Tensor, **kw):
    log_ratio = log_ratio.clone().requires_grad_(True)
    loss, metrics = surrogate(log_ratio, advantage, control, mask=mask, **kw)
    (grad,) = torch.autograd.grad(loss, log_ratio)
    return loss.item(), grad, metrics


@pytest.mark.parametrize(
    ("reduction", "normalizer", "loss"),
    [
        ("mean", None, 5.0 / 6.0),  # -(-5 / 6)
        ("token_mean", None, 5.0 / 6.0),  # the same number (DAPO)
        ("sequence_mean", None, 0.25),  # rows: (1 + 2) / 2 = 1.5, (-1 - 2 - 3 - 2) / 4 = -2; -(1.5 - 2) / 2
        ("constant", 4.0, 0.625),  # -(-5) / (B * 4) = 5 / 8 (Dr. GRPO, max length 4)
        ("constant", 5.0, 0.5),  # -(-5) / (2 * 5)
    ],
)
def test_reductions_on_ragged_batch(reduction: str, normalizer: float | None, loss: float) -> None:
    got, _, _ = loss_and_grad(PLAIN, torch.log(RATIO), ADVANTAGE, MASK, reduction=reduction, normalizer=normalizer)
    assert got == pytest.approx(loss, abs=1e-12)


def test_mean_is_unchanged_and_token_mean_equals_it() -> None:
    # The default stays the masked mean of r A over valid entries: the legacy plain_surrogate and masked_mean
    # on the same objective, with gradients equal too (d loss / d log_ratio = -r A / 6 on valid tokens, 0 on pads).
    log_ratio = torch.log(RATIO)
    default, grad_default, metrics_default = loss_and_grad(PLAIN, log_ratio, ADVANTAGE, MASK)
    token, grad_token, metrics_token = loss_and_grad(PLAIN, log_ratio, ADVANTAGE, MASK, reduction="token_mean")
    legacy, _ = plain_surrogate(log_ratio, ADVANTAGE, mask=MASK)
    direct = -masked_mean(RATIO * ADVANTAGE.unsqueeze(-1), MASK)
    assert default == token == legacy.item() == pytest.approx(direct.item(), abs=1e-15)
    expected_grad = torch.tensor([[-1.0, -2.0, 0.0, 0.0], [1.0, 2.0, 3.0, 2.0]], dtype=torch.float64) / 6.0
    torch.testing.assert_close(grad_default, expected_grad)
    torch.testing.assert_close(grad_token, expected_grad)
    assert metrics_default.keys() == metrics_token.keys()


def test_clip_default_reduction_matches_masked_mean_on_tokens() -> None:
    # clip eps=0.2, same batch: row 0 (r=1, A=1) -> 1, (r=2, A=1) -> min(2, 1.2) = 1.2;
    # row 1 (A=-2): r=0.5 -> min(-1, -1.6) = -1.6, r=1 -> -2, r=1.5 -> min(-3, -2.4) = -3, r=1 -> -2.
    # Sum 2.2 - 8.6 = -6.4 over 6 tokens -> loss 6.4 / 6 = 1.0666667. sequence_mean: (1.1 - 2.15) / 2 -> 0.525.
    log_ratio = torch.log(RATIO)
    mean, _, metrics = loss_and_grad(RatioControl("clip"), log_ratio, ADVANTAGE, MASK)
    rows, _, _ = loss_and_grad(RatioControl("clip"), log_ratio, ADVANTAGE, MASK, reduction="sequence_mean")
    assert mean == pytest.approx(6.4 / 6.0, abs=1e-12)
    assert rows == pytest.approx(0.525, abs=1e-12)
    # Off the band among the 6 valid tokens: r = 2, 0.5, 1.5 -> 3 / 6 (the padded r = 5, 7 do not count).
    assert metrics["clip_fraction"].item() == pytest.approx(0.5)


def test_sequence_mean_gradient_weighs_each_row_equally() -> None:
    # loss = -(1/2) sum_b (1/n_b) sum_t r A: d loss / d log_ratio_bt = -r A / (2 n_b).
    # Row 0 (n=2): -(1, 2) / 4 = (-0.25, -0.5); row 1 (n=4): -(-1, -2, -3, -2) / 8 = (0.125, 0.25, 0.375, 0.25).
    _, grad, _ = loss_and_grad(PLAIN, torch.log(RATIO), ADVANTAGE, MASK, reduction="sequence_mean")
    expected = torch.tensor([[-0.25, -0.5, 0.0, 0.0], [0.125, 0.25, 0.375, 0.25]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected)


def test_reduction_applies_after_weights_and_metrics_stay_masked_means() -> None:
    # Weight (1, 0.5, 1, 1): row 0 (1, 1), row 1 (-1, -1, -3, -2).
    # sequence_mean: (1 + (-7 / 4)) / 2 = -0.375 -> loss 0.375; constant 4: -(2 - 7) / 8 = 0.625.
    weight = torch.tensor([1.0, 0.5, 1.0, 1.0], dtype=torch.float64)
    log_ratio = torch.log(RATIO)
    rows, _, metrics = loss_and_grad(PLAIN, log_ratio, ADVANTAGE, MASK, weight=weight, reduction="sequence_mean")
    const, _, metrics_const = loss_and_grad(
        PLAIN, log_ratio, ADVANTAGE, MASK, weight=weight, reduction="constant", normalizer=4.0
    )
    assert rows == pytest.approx(0.375, abs=1e-12)
    assert const == pytest.approx(0.625, abs=1e-12)
    # ratio_mean_abs_dev over the 6 valid tokens: (0 + 1 + 0.5 + 0 + 0.5 + 0) / 6 = 1/3, whatever the reduction.
    assert metrics["ratio_mean_abs_dev"].item() == pytest.approx(1.0 / 3.0)
    assert metrics_const["ratio_mean_abs_dev"].item() == pytest.approx(1.0 / 3.0)


def test_sequence_mean_skips_rows_without_valid_tokens() -> None:
    # A third, fully padded row changes nothing: still (1.5 - 2) / 2 -> loss 0.25.
    ratio = torch.cat([RATIO, torch.full((1, 4), 3.0, dtype=torch.float64)])
    mask = torch.cat([MASK, torch.zeros(1, 4, dtype=torch.bool)])
    advantage = torch.tensor([1.0, -2.0, 10.0], dtype=torch.float64)
    got, _, _ = loss_and_grad(PLAIN, torch.log(ratio), advantage, mask, reduction="sequence_mean")
    assert got == pytest.approx(0.25, abs=1e-12)


def test_bad_reduction_and_missing_normalizer() -> None:
    log_ratio = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="allowed: mean, token_mean, sequence_mean, constant"):
        surrogate(log_ratio, torch.ones(2), PLAIN, reduction="sum")
    for normalizer in (None, 0.0):
        with pytest.raises(ValueError, match="reduction='constant' needs normalizer > 0"):
            surrogate(log_ratio, torch.ones(2), PLAIN, reduction="constant", normalizer=normalizer)
    assert REDUCTIONS[0] == "mean"


# GSPO batch: B = 2, T = 3. Row 0 (2 valid tokens) log-ratios (0.1, 0.3), padding 9.0; s_0 = 0.2,
# r_0 = exp(0.2) = 1.2214028 > 1.2 (off the band). Row 1 (3 tokens) (0, -0.3, 0.15): s_1 = -0.05,
# r_1 = exp(-0.05) = 0.9512294 (inside). A = (1, -1), clip eps = 0.2.
GSPO_LOG_RATIO = torch.tensor([[0.1, 0.3, 9.0], [0.0, -0.3, 0.15]], dtype=torch.float64)
GSPO_MASK = torch.tensor([[True, True, False], [True, True, True]])
GSPO_ADVANTAGE = torch.tensor([1.0, -1.0], dtype=torch.float64)
GSPO = RatioControl("clip", level="sequence")


def test_sequence_log_ratio_is_masked_row_mean() -> None:
    got = sequence_log_ratio(GSPO_LOG_RATIO, GSPO_MASK)
    torch.testing.assert_close(got, torch.tensor([[0.2], [-0.05]], dtype=torch.float64))
    # An inf or NaN in the padding does not leak in; no mask: the plain row mean (0.1 + 0.3 + 9) / 3.
    padded = GSPO_LOG_RATIO.clone()
    padded[0, 2] = float("nan")
    torch.testing.assert_close(sequence_log_ratio(padded, GSPO_MASK), got)
    assert sequence_log_ratio(GSPO_LOG_RATIO)[0, 0].item() == pytest.approx(9.4 / 3.0)


def test_gspo_sequence_ratio_clipped_by_hand() -> None:
    # Row 0: min(1.2214028 * 1, 1.2 * 1) = 1.2 (clipped: no gradient to either token).
    # Row 1: min(-0.9512294, -clip(0.9512294)) = -0.9512294. sequence_mean: (1.2 - 0.9512294) / 2 = 0.1243853.
    # Gradient row 1: d loss / d log_ratio_1t = -(1/2) (d obj / d s_1) (d s_1 / d log_ratio_1t)
    #   = -(1/2) (r_1 A_1) (1/3) = 0.9512294 / 6 = 0.1585382 on each valid token.
    loss, grad, metrics = loss_and_grad(GSPO, GSPO_LOG_RATIO, GSPO_ADVANTAGE, GSPO_MASK, reduction="sequence_mean")
    assert loss == pytest.approx(-0.1243853, abs=1e-7)
    expected = torch.tensor([[0.0, 0.0, 0.0], [0.1585382] * 3], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, atol=1e-7, rtol=0.0)
    # clip_fraction over valid tokens: row 0's two tokens lie off the band through r_0, row 1's three do not: 2 / 5.
    assert metrics["clip_fraction"].item() == pytest.approx(0.4)
    # approx_kl stays on the token log-ratios: k3(x) = e^x - 1 - x over (0.1, 0.3, 0, -0.3, 0.15)
    # = (0.0051709 + 0.0498588 + 0 + 0.0408182 + 0.0118342) / 5 = 0.0215364.
    assert metrics["approx_kl"].item() == pytest.approx(0.0215364, abs=1e-7)


def test_gspo_with_token_mean_weighs_rows_by_length() -> None:
    # Each valid token carries its row's objective: (2 * 1.2 + 3 * -0.9512294) / 5 = -0.0907377 -> loss 0.0907377.
    loss, _, _ = loss_and_grad(GSPO, GSPO_LOG_RATIO, GSPO_ADVANTAGE, GSPO_MASK, reduction="token_mean")
    assert loss == pytest.approx(0.0907377, abs=1e-7)


def test_token_level_differs_on_the_same_batch() -> None:
    # Token ratios: row 0 (e^0.1 = 1.1051709 inside, e^0.3 = 1.3498588 -> 1.2); row 1, A = -1:
    # r = 1 -> -1, r = e^-0.3 = 0.7408182 -> min(-0.7408, -0.8) = -0.8, r = e^0.15 = 1.1618342 -> -1.1618342.
    # Rows (1.1051709 + 1.2) / 2 = 1.1525855 and -2.9618342 / 3 = -0.9872781; mean 0.0826537 -> loss -0.0826537.
    token = RatioControl("clip")
    loss, _, _ = loss_and_grad(token, GSPO_LOG_RATIO, GSPO_ADVANTAGE, GSPO_MASK, reduction="sequence_mean")
    assert loss == pytest.approx(-0.0826537, abs=1e-7)


def test_sequence_level_is_token_level_when_k_is_one() -> None:
    # A robot policy's [B, 1] log-ratio: the row mean is the entry itself, so both levels agree.
    log_ratio = torch.log(torch.tensor([[0.5], [1.5], [1.1]]))
    advantage = torch.tensor([1.0, -1.0, 2.0])
    token, _ = surrogate(log_ratio, advantage, RatioControl("clip"))
    sequence, _ = surrogate(log_ratio, advantage, RatioControl("clip", level="sequence"))
    assert sequence.item() == pytest.approx(token.item())


def test_unknown_level_lists_allowed() -> None:
    with pytest.raises(ValueError, match="level='seq' is unknown; allowed: token, sequence"):
        RatioControl(level="seq")


def test_kl_estimators_hand_values() -> None:
    # p(x) = 0.5, q(x) = 0.25: r = q / p = 0.5, log r = -0.6931472.
    # k1 = -log r = 0.6931472; k2 = (log r)^2 / 2 = 0.2402265; k3 = (r - 1) - log r = -0.5 + 0.6931472 = 0.1931472.
    log_p, log_q = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert kl_estimate(log_p, log_q, "k1").item() == pytest.approx(0.6931472, abs=1e-6)
    assert kl_estimate(log_p, log_q, "k2").item() == pytest.approx(0.2402265, abs=1e-6)
    assert kl_estimate(log_p, log_q).item() == pytest.approx(0.1931472, abs=1e-6)  # k3 is the default
    # At r = 1 every estimator is exactly 0.
    assert kl_estimate(log_p, log_p, "k3").item() == 0.0


def test_kl_estimators_unbiased_on_a_categorical() -> None:
    # 6 tokens, p the current policy (sampled), q the reference; exact KL(p || q) = sum p log(p / q).
    p = torch.tensor([0.30, 0.25, 0.15, 0.12, 0.10, 0.08], dtype=torch.float64)
    q = torch.tensor([0.10, 0.20, 0.25, 0.05, 0.30, 0.10], dtype=torch.float64)
    exact = (p * (p / q).log()).sum().item()
    n = 200_000
    x = torch.multinomial(p, n, replacement=True, generator=torch.Generator().manual_seed(0))
    for estimator in ("k1", "k3"):
        sample = kl_estimate(p.log()[x], q.log()[x], estimator)
        standard_error = sample.std().item() / math.sqrt(n)
        assert abs(sample.mean().item() - exact) < 3.0 * standard_error, estimator
    k1 = kl_estimate(p.log()[x], q.log()[x], "k1")
    k3 = kl_estimate(p.log()[x], q.log()[x], "k3")
    assert (k1 < 0).any()  # k1 takes negative values on tokens where q > p ...
    assert (k3 >= 0).all()  # ... k3 never does
    # k3 >= 0 for any pair of log-probs, including far-apart ones.
    grid = torch.linspace(-20.0, 5.0, 501, dtype=torch.float64)
    assert (kl_estimate(grid.unsqueeze(1).expand(501, 501), grid.unsqueeze(0).expand(501, 501)) >= 0).all()


def test_kl_estimate_bad_input() -> None:
    with pytest.raises(ValueError, match="allowed: k1, k2, k3"):
        kl_estimate(torch.zeros(3), torch.zeros(3), "k4")
    with pytest.raises(ValueError, match=r"ref_log_prob shape \[2\] does not match log_prob \[3\]"):
        kl_estimate(torch.zeros(3), torch.zeros(2))
