"""Rewards of verifiable text tasks, a batch verifier and supervised (SFT) targets.

A reward is a pure function ``(completion, problem) -> float`` of a completion (the text after the prompt, ending
with ``STOP``) and its ``Problem`` (robopt.llm.tasks). A ``Verifier`` sums weighted rewards over a batch (lists of
length B) and counts the rows whose reward functions failed. ``sft_completion`` makes the targets of a
supervised warm start, right or, at a given rate, one symbol wrong.

Pure Python: no torch.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Mapping, Sequence

from robopt.llm.tasks import DIGITS, LETTERS, STOP, Problem
from robopt.options import ConfigError

RewardFn = Callable[[str, Problem], float]


def extract_answer(completion: str) -> str:
    """The completion up to its first stop token, stripped of surrounding whitespace."""
    return completion.split(STOP, 1)[0].strip()


def exact_match(completion: str, problem: Problem) -> float:
    """1.0 when the extracted answer is one of the problem's answers, else 0.0."""
    return 1.0 if extract_answer(completion) in problem.answers else 0.0


def partial_credit(completion: str, problem: Problem) -> float:
    """Position-wise matching characters over max(len(answer), len(extracted)), best over the answers.

    Extra or missing characters count as wrong: "123" against "12" scores 2 / 3.
    """
    text = extract_answer(completion)
    best = 0.0
    for answer in problem.answers:
        longest = max(len(answer), len(text))
        matches = sum(a == b for a, b in zip(text, answer))
        best = max(best, matches / longest if longest else 1.0)
    return best


def _format_bounds(problem: Problem) -> tuple[str, int, int]:
    meta = problem.meta
    if "alphabet" in meta:
        return meta["alphabet"], meta["min_length"], meta["max_length"]
    symbols = "".join(problem.answers)  # a hand-made problem: infer from the answers
    alphabet = DIGITS if symbols.isdigit() else LETTERS if symbols.isalpha() and symbols.islower() else symbols
    lengths = [len(answer) for answer in problem.answers]
    return alphabet, min(lengths), max(lengths)


def format_reward(completion: str, problem: Problem) -> float:
    """1.0 when the completion is symbols of the task's alphabet, within its length bounds, then one stop token."""
    alphabet, min_length, max_length = _format_bounds(problem)
    if not completion.endswith(STOP):
        return 0.0
    body = completion[: -len(STOP)]
    return 1.0 if min_length <= len(body) <= max_length and all(ch in alphabet for ch in body) else 0.0


REWARDS: dict[str, RewardFn] = {"exact_match": exact_match, "partial_credit": partial_credit, "format": format_reward}


class Verifier:
    """A weighted sum of rewards over a batch: ``Verifier({"exact_match": 1.0, "format": 0.1})``.

    Names come from ``REWARDS`` or from ``functions`` (which may add or override). A row where any reward
    function raises an ``Exception`` or returns a non-real or non-finite value scores 0 and counts once in
    ``failures``; the exception never propagates.
    """

    def __init__(self, weights: Mapping[str, float], functions: Mapping[str, RewardFn] | None = None) -> None:
        table = {**REWARDS, **(functions or {})}
        if not weights:
            raise ConfigError(f"a verifier needs at least one reward weight; known rewards: {', '.join(table)}")
        for name, weight in weights.items():
            if name not in table:
                raise ConfigError(f"unknown reward {name!r}; known: {', '.join(table)}")
            if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
                raise ConfigError(f"reward weight {name}={weight!r} must be a finite number")
        self.weights = {name: float(weight) for name, weight in weights.items()}
        self.functions = {name: table[name] for name in weights}

    def __repr__(self) -> str:
        return f"Verifier({self.weights})"

    def score(self, completion: str, problem: Problem) -> float | None:
        """The weighted reward of one row, or None when a reward function failed on it."""
        total = 0.0
        for name, weight in self.weights.items():
            try:
                value = self.functions[name](completion, problem)
            except Exception:
                return None
            if not isinstance(value, numbers.Real) or not math.isfinite(value):
                return None
            total += weight * float(value)
        return total if math.isfinite(total) else None

    def __call__(self, completions: Sequence[str], problems: Sequence[Problem]) -> tuple[list[float], int]:
        """Scores [B] and the number of rows that failed (scored 0)."""
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
        scores = [self.score(completion, problem) for completion, problem in zip(completions, problems)]
        return [0.0 if score is None else score for score in scores], sum(score is None for score in scores)


def combine(weights: Mapping[str, float], functions: Mapping[str, RewardFn] | None = None) -> Verifier:
    """``Verifier(weights, functions)``."""
    return Verifier(weights, functions)


# ------------------------------------------------------------------------------------------- warm start


def sft_completion(problem: Problem, error_rate: float, rng: random.Random) -> str:
    """A supervised target: a correct answer, or with probability ``error_rate`` one with a symbol changed.

    The wrong answer is drawn uniformly from the one-symbol edits (within the task's alphabet) that are
    not correct answers. Always ends with the stop token.
    """
    if not isinstance(error_rate, numbers.Real) or not 0.0 <= error_rate <= 1.0:
        raise ConfigError(f"error_rate must be a number in [0, 1], got {error_rate!r}")
    answer = rng.choice(problem.answers)
    if rng.random() >= error_rate:  # random() < 1, so error_rate 1 is always wrong and 0 never
        return answer + STOP
    alphabet = _format_bounds(problem)[0]
    wrong = [
        answer[:i] + symbol + answer[i + 1 :]
        for i in range(len(answer))
        for symbol in alphabet
        if symbol != answer[i] and answer[:i] + symbol + answer[i + 1 :] not in problem.answers
    ]
    if not wrong:
        raise ValueError(f"no one-symbol edit of {answer!r} is a wrong answer to {problem.prompt!r}")
    return rng.choice(wrong) + STOP
