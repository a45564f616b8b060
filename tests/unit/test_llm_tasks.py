"""Verifiable LLM tasks, rewards, verifier and SFT targets on hand-made cases (robopt.llm.tasks)."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from robopt.config import ConfigError
from robopt.llm.tasks import (
    REWARDS,
    TASKS,
    Problem,
    Verifier,
    combine,
    exact_match,
    extract_answer,
    format_reward,
    make_task,
    partial_credit,
    sft_completion,
)


def _oracle(prompt: str) -> set[str]:
    """Every correct answer, worked out from the prompt text alone."""
    if prompt.startswith("sort:"):
        return {"".join(sorted(prompt[5:-1]))}
    if prompt.startswith("rev:"):
        return {prompt[4:-1][::-1]}
    if prompt.startswith("pair:"):
        target = int(prompt[5:-1])
        return {f"{x}{y}" for x in range(10) for y in range(10) if x + y == target}
    left, right = prompt[:-1].split("+")
    return {str(int(left) + int(right))}


def test_hand_problems() -> None:
    addition = make_task("addition", seed=0)
    problem = addition.problem((47, 85))
    assert (problem.prompt, problem.answers) == ("47+85=", ("132",))  # 47 + 85 = 132
    assert addition.problem((99, 99)).answers == ("198",)
    one_digit = make_task("addition", seed=0, digits=1)
    assert (one_digit.problem((0, 7)).prompt, one_digit.problem((0, 7)).answers) == ("0+7=", ("7",))
    assert make_task("addition", digits=3).problem((100, 999)).answers == ("1099",)
    sort = make_task("sort_digits", seed=0).problem("3142")
    assert (sort.prompt, sort.answers) == ("sort:3142=", ("1234",))
    reverse = make_task("reverse", seed=0).problem("abcd")
    assert (reverse.prompt, reverse.answers) == ("rev:abcd=", ("dcba",))
    assert make_task("reverse", length=6).problem("robopt").answers == ("tpobor",)
    pair = make_task("multi_answer", seed=0).problem(7)
    assert pair.prompt == "pair:7="
    assert pair.answers == ("07", "16", "25", "34", "43", "52", "61", "70")
    assert problem.meta["min_length"] == 2 and problem.meta["max_length"] == 3  # 10+10=20 .. 99+99=198
    with pytest.raises(ValueError, match="not an operand"):
        addition.problem((5, 47))  # 5 has one digit, not two


def test_seeded_samples_are_pinned_and_correct() -> None:
    # Regression pin: seed 0 drew these (string seeds are hashed with SHA-512, stable across runs).
    assert [p.prompt for p in make_task("addition", seed=0).sample("train", 3)] == ["61+88=", "85+55=", "18+37="]
    assert [p.answers for p in make_task("addition", seed=0).sample("train", 3)] == [("149",), ("140",), ("55",)]
    assert [p.prompt for p in make_task("reverse", seed=0).sample("heldout", 2)] == ["rev:djmk=", "rev:nphx="]
    for name, options in [("addition", {}), ("addition", {"digits": 5}), ("sort_digits", {}), ("reverse", {})]:
        for problem in make_task(name, seed=3, **options).sample("train", 200):
            assert set(problem.answers) == _oracle(problem.prompt), problem
            assert problem.prompt.isascii()
    for problem in make_task("multi_answer", seed=3).sample("train", 50):
        assert set(problem.answers) == _oracle(problem.prompt)


def test_multi_answer_lists_every_pair() -> None:
    task = make_task("multi_answer")
    for target in range(19):
        answers = task.problem(target).answers
        expected = {f"{x}{y}" for x in range(10) for y in range(10) if x + y == target}
        assert set(answers) == expected and len(answers) == len(expected) == 10 - abs(target - 9)
    assert task.problem(0).answers == ("00",) and task.problem(18).answers == ("99",)


@pytest.mark.parametrize(
    ("name", "options"),
    [("addition", {}), ("sort_digits", {}), ("reverse", {}), ("reverse", {"length": 3}), ("multi_answer", {})],
)
def test_splits_are_disjoint(name: str, options: dict[str, int]) -> None:
    task = make_task(name, seed=1, **options)
    train = task.sample("train", 5000)
    heldout = task.sample("heldout", 5000)
    assert all(p.meta["split"] == "train" for p in train) and all(p.meta["split"] == "heldout" for p in heldout)
    assert not {p.prompt for p in train} & {p.prompt for p in heldout}
    canonical = task.family.canonical
    assert not {canonical(p.meta["key"]) for p in train} & {canonical(p.meta["key"]) for p in heldout}
    # another seed draws other problems but never moves one across the split
    other = make_task(name, seed=2, **options)
    assert not {p.prompt for p in other.sample("train", 5000)} & {p.prompt for p in heldout}


def test_split_merges_problems_that_give_each_other_away() -> None:
    addition = make_task("addition")
    for a, b in [(12, 34), (47, 85), (17, 62)]:
        assert addition.split_of((a, b)) == addition.split_of((b, a))
    assert addition.split_of((17, 62)) == "heldout"  # drawn as held out above
    reverse = make_task("reverse")
    assert reverse.split_of("djmk") == reverse.split_of("kmjd") == "heldout"
    sort = make_task("sort_digits")
    assert len({sort.split_of(key) for key in ["4862", "2468", "8642", "6248"]}) == 1
    # about one problem in ten is held out: 845 of the 90 * 90 = 8100 two-digit additions
    assert sum(addition.split_of(key) == "heldout" for key in addition.family.keys()) == 845


def test_sampling_is_deterministic() -> None:
    first = make_task("sort_digits", seed=7).sample("train", 20)
    assert make_task("sort_digits", seed=7).sample("train", 20) == first
    assert make_task("sort_digits", seed=8).sample("train", 20) != first
    task = make_task("sort_digits", seed=7)
    assert task.sample("train", 20) == task.sample("train", 20)  # no rng: a fixed set
    stream = task.rng("train")
    batch_1, batch_2 = task.sample("train", 20, stream), task.sample("train", 20, stream)
    assert batch_1 == first and batch_2 != batch_1  # a shared generator: a stream of batches
    assert task.sample("heldout", 5, random.Random(3)) == task.sample("heldout", 5, random.Random(3))
    big = make_task("addition", seed=7, digits=4)  # rejection path (810 000 problems, not listed)
    assert big.sample("heldout", 30) == make_task("addition", seed=7, digits=4).sample("heldout", 30)


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


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: make_task("addition", digits=0), "task 'addition': digits must be an integer in 1..6, got 0"),
        (lambda: make_task("addition", digits=7), "task 'addition': digits must be an integer in 1..6, got 7"),
        (lambda: make_task("addition", digits="2"), "digits must be an integer in 1..6, got '2'"),
        (lambda: make_task("addition", digits=True), "digits must be an integer in 1..6, got True"),
        (lambda: make_task("sort_digits", length=13), "task 'sort_digits': length must be an integer in 1..12"),
        (lambda: make_task("reverse", length=0), "task 'reverse': length must be an integer in 1..12, got 0"),
        (lambda: make_task("reverse", digits=3), "task 'reverse' has no option 'digits'; allowed options: length"),
        (lambda: make_task("multi_answer", length=3), "task 'multi_answer' has no option 'length'; allowed options:"),
        (lambda: make_task("sum"), "unknown task 'sum'; known: addition, sort_digits, reverse, multi_answer"),
        (lambda: make_task("addition", seed=1.5), "task seed must be an integer, got 1.5"),
        (lambda: make_task("addition").sample("test", 3), "unknown split 'test'; allowed: train, heldout"),
        (lambda: make_task("addition").sample("train", -1), "non-negative integer, got -1"),
    ],
)
def test_bad_input_gives_one_line_errors(call, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        call()
    assert message in str(error.value) and "\n" not in str(error.value)
    assert isinstance(error.value, ValueError)


def test_tasks_import_no_torch() -> None:
    code = "import sys, robopt.llm, robopt.llm.tasks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
