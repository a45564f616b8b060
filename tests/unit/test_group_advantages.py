"""Group-relative advantages (GRPO, RLOO, Dr. GRPO) and DAPO's equal-reward filter, against hand-worked values.

The main batch has B = 6, G = 3: group 0 rewards (1, 2, 6), group 1 rewards (0, 0, 0).
Group 0: mean 3, deviations (-2, -1, 3), sum of squares 14, sample std (divisor G - 1 = 2) sqrt(7) = 2.6457513.
"""

from __future__ import annotations

import math

import pytest
import torch

from robopt.core.advantages import equal_reward_groups, group_advantage

REWARD = torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 0.0])
SQRT7 = math.sqrt(7.0)


def test_grpo_mean_baseline_with_std_normalization() -> None:
    # (-2, -1, 3) / sqrt(7) = (-0.7559289, -0.3779645, 1.1338934); the all-equal group gives 0.
    # (With the population std sqrt(14 / 3) = 2.1602469 the first entry would be -0.9258201 instead.)
    advantage = group_advantage(REWARD, group_size=3, eps=0.0)
    expected = torch.tensor([-2.0 / SQRT7, -1.0 / SQRT7, 3.0 / SQRT7, 0.0, 0.0, 0.0])
    torch.testing.assert_close(advantage, expected)
    assert advantage[0].item() == pytest.approx(-0.7559289, abs=1e-6)


def test_default_eps_is_added_to_the_std() -> None:
    # 3 / (sqrt(7) + 1e-6) differs from 3 / sqrt(7) only in the 7th digit.
    advantage = group_advantage(REWARD, group_size=3)
    assert advantage[2].item() == pytest.approx(3.0 / (SQRT7 + 1e-6), rel=1e-6)


def test_dr_grpo_mean_baseline_without_std() -> None:
    # Dr. GRPO: r - mean only: (-2, -1, 3), and 0 for the all-equal group.
    advantage = group_advantage(REWARD, group_size=3, normalize_std=False)
    torch.testing.assert_close(advantage, torch.tensor([-2.0, -1.0, 3.0, 0.0, 0.0, 0.0]))


def test_rloo_leave_one_out_baseline() -> None:
    # Baseline of r_i = mean of the other two: (2 + 6) / 2 = 4, (1 + 6) / 2 = 3.5, (1 + 2) / 2 = 1.5.
    # Advantages (1 - 4, 2 - 3.5, 6 - 1.5) = (-3, -1.5, 4.5), i.e. G / (G - 1) = 1.5 times the mean-baseline ones.
    advantage = group_advantage(REWARD, group_size=3, normalize_std=False, leave_one_out=True)
    torch.testing.assert_close(advantage, torch.tensor([-3.0, -1.5, 4.5, 0.0, 0.0, 0.0]))
    # With the std division as well: (-3, -1.5, 4.5) / sqrt(7) = (-1.1338934, -0.5669467, 1.7008401).
    normalized = group_advantage(REWARD, group_size=3, leave_one_out=True, eps=0.0)
    torch.testing.assert_close(normalized, torch.tensor([-3.0, -1.5, 4.5, 0.0, 0.0, 0.0]) / SQRT7)


@pytest.mark.parametrize("eps", [0.0, 1e-6, 1.0])
@pytest.mark.parametrize("leave_one_out", [False, True])
@pytest.mark.parametrize("normalize_std", [False, True])
def test_all_equal_group_is_exactly_zero(eps: float, leave_one_out: bool, normalize_std: bool) -> None:
    # The group std is 0 (or ~1e-9 where the mean rounds), so (r - mean) / (std + eps) is 0 / 0 = NaN at eps = 0
    # (or +-1 after rounding) without the explicit all-equal rule. Group 1 is (1, 3, 5), a normal group.
    reward = torch.tensor([0.1, 0.1, 0.1, 1.0, 3.0, 5.0])
    advantage = group_advantage(reward, 3, normalize_std=normalize_std, leave_one_out=leave_one_out, eps=eps)
    assert torch.isfinite(advantage).all()
    assert advantage[:3].tolist() == [0.0, 0.0, 0.0]
    # Group 1: mean 3, deviations (-2, 0, 2), sample std sqrt(8 / 2) = 2; leave-one-out scales deviations by 1.5.
    scale = (1.5 if leave_one_out else 1.0) / ((2.0 + eps) if normalize_std else 1.0)
    torch.testing.assert_close(advantage[3:], torch.tensor([-2.0, 0.0, 2.0]) * scale)


def test_binary_rewards_as_bool() -> None:
    # Verifiable 0/1 rewards (True, False, False): mean 1/3, deviations (2/3, -1/3, -1/3),
    # sample std sqrt((4/9 + 1/9 + 1/9) / 2) = sqrt(1/3) = 0.5773503 -> (1.1547005, -0.5773503, -0.5773503).
    advantage = group_advantage(torch.tensor([True, False, False]), 3, eps=0.0)
    torch.testing.assert_close(advantage, torch.tensor([1.1547005, -0.5773503, -0.5773503]))


def test_group_of_one_is_zero() -> None:
    # G = 1: each completion is its own (all-equal) group.
    advantage = group_advantage(torch.tensor([1.0, 5.0]), 1)
    assert advantage.tolist() == [0.0, 0.0]


def test_equal_reward_groups_dapo_filter() -> None:
    # Groups (1, 2, 6) mixed; (0, 0, 0) all wrong; (1, 1, 1) all right -> DAPO drops the last two.
    reward = torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    assert equal_reward_groups(reward, 3).tolist() == [False, True, True]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: group_advantage(torch.zeros(5), 3), "5 rows, not a multiple of group_size=3"),
        (lambda: equal_reward_groups(torch.zeros(5), 3), "not a multiple of group_size=3"),
        (lambda: group_advantage(torch.zeros(6), 0), "group_size=0"),
        (lambda: group_advantage(torch.zeros(2, 3), 3), r"expected shape \[B\]"),
        (lambda: group_advantage(torch.zeros(4), 1, leave_one_out=True), "leave_one_out needs group_size >= 2"),
        (lambda: group_advantage(torch.zeros(4), 2, eps=-1.0), "eps=-1.0"),
    ],
)
def test_bad_input_is_one_line_value_error(call, match: str) -> None:
    with pytest.raises(ValueError, match=match) as error:
        call()
    assert "\n" not in str(error.value)
