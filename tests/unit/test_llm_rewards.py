"""Rewards, the batch verifier and SFT targets of verifiable LLM tasks on hand-made cases (robopt.llm.rewards)."""

from __future__ import annotations

import math
import random

import pytest

from robopt.llm.rewards import (
    REWARDS,
    Verifier,
    combine,
    exact_match,
    extract_answer,
    format_reward,
    partial_credit,
    sft_completion,
)
from robopt.llm.tasks import TASKS, Problem, make_task


def test_extract_and_exact_match() -> None:
    problem = make_task("addition").problem((47, 85))
    assert extract_answer(" 132 \nrest") == "132"
    assert exact_match("132\n", problem) == 1.0
    assert exact_match("132", problem) == 1.0  # no stop token: still the right answer
    assert exact_match("  132\t\n", problem) == 1.0
    assert exact_match("1320\n", problem) == 0.0
    assert exact_match("\n132\n", problem) == 0.0  # the answer is what comes before the first stop
    assert exact_match("", problem) == 0.0
    pair = make_task("multi_answer").problem(7)
    assert exact_match("25\n", pair) == exact_match("70\n", pair) == 1.0 and exact_match("26\n", pair) == 0.0


def test_partial_credit() -> None:
    problem = make_task("addition").problem((47, 85))  # answer "132"
    assert partial_credit("132\n", problem) == 1.0
    assert partial_credit("142\n", problem) == pytest.approx(2 / 3)  # 1 and 2 match, 4 != 3
    assert partial_credit("1320\n", problem) == pytest.approx(3 / 4)  # extra character: 3 of max(3, 4)
    assert partial_credit("13\n", problem) == pytest.approx(2 / 3)  # missing character: 2 of max(3, 2)
    assert partial_credit("931\n", problem) == pytest.approx(1 / 3)  # only the middle 3 matches
    assert partial_credit("", problem) == 0.0
    pair = make_task("multi_answer").problem(7)  # answers 07, 16, 25, 34, 43, 52, 61, 70
    assert partial_credit("29\n", pair) == 0.5  # best: "25" (first digit)
    assert partial_credit("99\n", pair) == 0.0
    assert partial_credit("700\n", pair) == pytest.approx(2 / 3)  # "70" + an extra character


def test_format_reward() -> None:
    problem = make_task("addition").problem((47, 85))  # digits, length 2..3
    assert format_reward("132\n", problem) == 1.0
    assert format_reward("999\n", problem) == 1.0  # wrong but well-formed
    assert format_reward("13\n", problem) == 1.0
    assert format_reward("132", problem) == 0.0  # no stop token
    assert format_reward("1\n", problem) == 0.0  # too short
    assert format_reward("1320\n", problem) == 0.0  # too long
    assert format_reward(" 132\n", problem) == 0.0  # whitespace is not a digit
    assert format_reward("1a2\n", problem) == 0.0
    assert format_reward("13\n\n", problem) == 0.0  # a second stop
    assert format_reward("", problem) == 0.0
    reverse = make_task("reverse").problem("abcd")
    assert format_reward("zzzz\n", reverse) == 1.0 and format_reward("ABCD\n", reverse) == 0.0
    assert format_reward("dcb1\n", reverse) == 0.0
    hand = Problem("x=", ("12",))  # no meta: digits of the answers' lengths
    assert format_reward("95\n", hand) == 1.0 and format_reward("955\n", hand) == 0.0


def test_verifier_scores_a_batch() -> None:
    problem = make_task("addition").problem((47, 85))
    verifier = combine({"exact_match": 1.0, "format": 0.1})
    scores, failures = verifier(["132\n", "132", "131\n", "1320\n", ""], [problem] * 5)
    # 1 + 0.1; 1 + 0 (no stop); 0 + 0.1; 0 + 0 (too long); 0 + 0
    assert scores == pytest.approx([1.1, 1.0, 0.1, 0.0, 0.0]) and failures == 0
    scores, _ = Verifier({"partial_credit": 2.0, "exact_match": -0.5})(["142\n"], [problem])
    assert scores == pytest.approx([2.0 * 2 / 3])  # 2 * (2/3) - 0.5 * 0
    assert set(REWARDS) == {"exact_match", "partial_credit", "format"}


def test_verifier_counts_failing_rows() -> None:
    def raising(completion: str, problem: Problem) -> float:
        if "x" in completion:
            raise KeyError("boom")
        return 1.0

    def bad_value(completion: str, problem: Problem) -> float:
        return {"n": math.nan, "i": math.inf, "s": "1.0", "v": None}.get(completion[:1], 0.5)  # type: ignore[return-value]

    problem = make_task("addition").problem((47, 85))
    verifier = Verifier({"exact_match": 1.0, "raising": 1.0, "bad": 2.0}, {"raising": raising, "bad": bad_value})
    completions = ["132\n", "x\n", "n\n", "i\n", "s\n", "v\n", "nx\n", "7\n"]
    scores, failures = verifier(completions, [problem] * len(completions))
    # row 0: 1 + 1 + 2 * 0.5 = 3; row 7: 0 + 1 + 2 * 0.5 = 2
    # rows 1-6 fail: raise, NaN, inf, str, None, and NaN plus raise (counted once)
    assert scores == [3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0] and failures == 6
    with pytest.raises(ValueError, match="2 completions for 1 problems"):
        verifier(["a", "b"], [problem])


def test_verifier_rejects_bad_weights() -> None:
    with pytest.raises(ValueError, match="unknown reward 'exact'; known: exact_match, partial_credit, format"):
        Verifier({"exact": 1.0})
    with pytest.raises(ValueError, match="must be a finite number"):
        Verifier({"format": math.nan})
    with pytest.raises(ValueError, match="at least one"):
        Verifier({})


def test_sft_completion_error_rate() -> None:
    rng = random.Random(0)
    task = make_task("addition", seed=0)
    problems = task.sample("train", 2000, rng)
    rate = 0.3
    completions = [sft_completion(problem, rate, rng) for problem in problems]
    assert all(c.endswith("\n") and format_reward(c, p) == 1.0 for c, p in zip(completions, problems))
    wrong = sum(exact_match(c, p) == 0.0 for c, p in zip(completions, problems)) / len(problems)
    standard_error = math.sqrt(rate * (1 - rate) / len(problems))  # ~0.0102
    assert abs(wrong - rate) < 3 * standard_error
    # a wrong answer is one symbol away from a right one
    for c, p in zip(completions, problems):
        if exact_match(c, p) == 0.0:
            assert sum(a != b for a, b in zip(c[:-1], p.answers[0])) == 1 and len(c) - 1 == len(p.answers[0])


@pytest.mark.parametrize("name", sorted(TASKS))
def test_sft_completion_extremes(name: str) -> None:
    rng = random.Random(1)
    for problem in make_task(name, seed=0).sample("train", 300, rng):
        right, wrong = sft_completion(problem, 0.0, rng), sft_completion(problem, 1.0, rng)
        assert right.endswith("\n") and right[:-1] in problem.answers
        assert wrong.endswith("\n") and wrong[:-1] not in problem.answers and format_reward(wrong, problem) == 1.0


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan, "0.2"])
def test_sft_completion_rejects_bad_rate(rate: object) -> None:
    problem = make_task("addition").problem((47, 85))
    with pytest.raises(ValueError, match=r"error_rate must be a number in \[0, 1\]"):
        sft_completion(problem, rate, random.Random(0))  # type: ignore[arg-type]
