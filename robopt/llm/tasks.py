"""Verifiable text tasks for language policies: problems, task families, train/held-out splits, ``make_task``.

A ``Problem`` is an ASCII prompt (``"47+85="``) and the tuple of every correct answer (``("132",)``). The
policy's completion is the text that follows the prompt; it ends with ``STOP`` (a newline), which the model
emits to stop. The rewards, the batch ``Verifier`` and the supervised targets are in ``robopt.llm.rewards``.

Splits: a problem is held out iff the SHA-256 of ``"<task>|<canonical operands>"`` falls in bucket 0 of
``HELDOUT_BUCKETS`` (about 10%), so train and held-out never overlap, whatever the seed or the number drawn.
The canonical operands merge problems that give each other away (``a+b`` and ``b+a``; the orderings of one
multiset of digits to sort; a string and its reverse). The seed only picks which problems are drawn.

Pure Python: no torch.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import string
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from robopt.options import ConfigError

STOP = "\n"  # the stop token: every completion ends with it
SPLITS = ("train", "heldout")
HELDOUT_BUCKETS = 10  # 1 bucket in 10 is held out
DIGITS = string.digits
LETTERS = string.ascii_lowercase
_ENUMERATE_LIMIT = 20_000  # spaces up to this many problems are listed per split; larger ones use rejection
_MAX_REJECTIONS = 1_000  # 0.9 ** 1000 ~ 1e-46: a miss this long means the split is empty


@dataclass(frozen=True)
class Problem:
    """One prompt with all its correct answers (without the stop token).

    ``meta`` holds ``task``, ``key`` (the operands), ``split``, and the format bounds ``alphabet``,
    ``min_length``, ``max_length`` that ``format_reward`` checks.
    """

    prompt: str
    answers: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict, hash=False)


class _Family(Protocol):
    """The operands of one task kind: how to draw, list, canonicalize and pose them."""

    alphabet: str
    lengths: tuple[int, int]  # min and max answer length

    def size(self) -> int: ...
    def draw(self, rng: random.Random) -> Hashable: ...
    def keys(self) -> Iterator[Hashable]: ...
    def valid(self, key: Hashable) -> bool: ...
    def canonical(self, key: Hashable) -> str: ...
    def pose(self, key: Hashable) -> tuple[str, tuple[str, ...]]: ...


@dataclass(frozen=True)
class _Addition:
    """``"a+b="`` -> the decimal sum; a and b have ``digits`` digits (0..9 when digits is 1)."""

    digits: int
    alphabet: str = DIGITS

    @property
    def lengths(self) -> tuple[int, int]:
        return (self.digits, self.digits + 1)  # d-digit + d-digit has d or d + 1 digits (1-digit: 0..18)

    def _range(self) -> range:
        return range(0 if self.digits == 1 else 10 ** (self.digits - 1), 10**self.digits)

    def size(self) -> int:
        return len(self._range()) ** 2

    def draw(self, rng: random.Random) -> tuple[int, int]:
        operands = self._range()
        return (rng.choice(operands), rng.choice(operands))

    def keys(self) -> Iterator[tuple[int, int]]:
        return itertools.product(self._range(), repeat=2)

    def valid(self, key: Hashable) -> bool:
        return (
            isinstance(key, tuple)
            and len(key) == 2
            and all(type(value) is int and value in self._range() for value in key)
        )

    def canonical(self, key: tuple[int, int]) -> str:
        return f"{min(key)}+{max(key)}"

    def pose(self, key: tuple[int, int]) -> tuple[str, tuple[str, ...]]:
        return f"{key[0]}+{key[1]}=", (str(key[0] + key[1]),)


@dataclass(frozen=True)
class _Strings:
    """``length`` symbols of ``alphabet``; ``kind`` "sort" -> sorted symbols, "rev" -> the string reversed."""

    kind: str
    length: int
    alphabet: str

    @property
    def lengths(self) -> tuple[int, int]:
        return (self.length, self.length)

    def size(self) -> int:
        return len(self.alphabet) ** self.length

    def draw(self, rng: random.Random) -> str:
        return "".join(rng.choice(self.alphabet) for _ in range(self.length))

    def keys(self) -> Iterator[str]:
        return map("".join, itertools.product(self.alphabet, repeat=self.length))

    def valid(self, key: Hashable) -> bool:
        return isinstance(key, str) and len(key) == self.length and all(ch in self.alphabet for ch in key)

    def _answer(self, key: str) -> str:
        return "".join(sorted(key)) if self.kind == "sort" else key[::-1]

    def canonical(self, key: str) -> str:
        return "".join(sorted(key)) if self.kind == "sort" else min(key, key[::-1])

    def pose(self, key: str) -> tuple[str, tuple[str, ...]]:
        return f"{self.kind}:{key}=", (self._answer(key),)


@dataclass(frozen=True)
class _Pairs:
    """``"pair:t="`` -> any two digits ``"xy"`` with x + y = t, t in 0..18 (every such pair is correct)."""

    alphabet: str = DIGITS
    lengths: tuple[int, int] = (2, 2)

    def size(self) -> int:
        return 19

    def draw(self, rng: random.Random) -> int:
        return rng.randrange(19)

    def keys(self) -> Iterator[int]:
        return iter(range(19))

    def valid(self, key: Hashable) -> bool:
        return type(key) is int and 0 <= key <= 18

    def canonical(self, key: int) -> str:
        return str(key)

    def pose(self, key: int) -> tuple[str, tuple[str, ...]]:
        return f"pair:{key}=", tuple(f"{x}{key - x}" for x in range(max(0, key - 9), min(9, key) + 1))


@dataclass(frozen=True)
class OptionSpec:
    """An integer task option: default and inclusive bounds."""

    default: int
    low: int
    high: int
    doc: str


@dataclass(frozen=True)
class TaskSpec:
    """A registered task: its options and the factory of its operand family."""

    name: str
    doc: str
    options: dict[str, OptionSpec]
    family: Callable[..., _Family]


_LENGTH = OptionSpec(4, 1, 12, "symbols in the prompt string")
TASKS: dict[str, TaskSpec] = {
    "addition": TaskSpec(
        "addition", '"47+85=" -> "132"', {"digits": OptionSpec(2, 1, 6, "digits per operand")}, _Addition
    ),
    "sort_digits": TaskSpec(
        "sort_digits", '"sort:3142=" -> "1234"', {"length": _LENGTH}, lambda length: _Strings("sort", length, DIGITS)
    ),
    "reverse": TaskSpec(
        "reverse", '"rev:abcd=" -> "dcba"', {"length": _LENGTH}, lambda length: _Strings("rev", length, LETTERS)
    ),
    "multi_answer": TaskSpec("multi_answer", '"pair:7=" -> "07", "16", ..., "70"', {}, _Pairs),
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")


class Task:
    """Problems of one task kind, split into train and held-out; built by ``make_task``."""

    def __init__(self, name: str, seed: int, options: Mapping[str, int], family: _Family) -> None:
        self.name = name
        self.seed = seed
        self.options = dict(options)
        self.family = family
        self.alphabet = family.alphabet
        self.min_length, self.max_length = family.lengths
        self._listed: dict[str, list[Hashable]] | None = None
        if family.size() <= _ENUMERATE_LIMIT:  # small space: list each split once, so an empty one fails here
            self._listed = {split: [] for split in SPLITS}
            for key in family.keys():
                self._listed[self.split_of(key)].append(key)
            for split, keys in self._listed.items():
                if not keys:
                    settings = ", ".join(f"{k}={v}" for k, v in self.options.items()) or "no options"
                    raise ConfigError(f"task {name!r} ({settings}) has no {split} problems; use a larger size option")

    def __repr__(self) -> str:
        settings = "".join(f", {key}={value}" for key, value in self.options.items())
        return f"Task({self.name!r}, seed={self.seed}{settings})"

    def split_of(self, key: Hashable) -> str:
        """The split of the problem with operands ``key``: fixed by a hash of the task name and canonical key."""
        digest = hashlib.sha256(f"{self.name}|{self.family.canonical(key)}".encode("ascii")).digest()
        return "heldout" if int.from_bytes(digest[:8], "big") % HELDOUT_BUCKETS == 0 else "train"

    def problem(self, key: Hashable) -> Problem:
        """The problem with operands ``key``: a pair of ints (addition), a string (sort, reverse), an int (pairs)."""
        if not self.family.valid(key):
            raise ConfigError(f"{key!r} is not an operand of task {self.name!r} ({self.family})")
        prompt, answers = self.family.pose(key)
        meta = {
            "task": self.name,
            "key": key,
            "split": self.split_of(key),
            "alphabet": self.alphabet,
            "min_length": self.min_length,
            "max_length": self.max_length,
        }
        return Problem(prompt, answers, meta)

    def rng(self, split: str) -> random.Random:
        """A fresh generator for ``split`` determined by the task name and seed (string seeds are hashed stably)."""
        _check_split(split)
        return random.Random(f"robopt.llm.tasks|{self.name}|{self.seed}|{split}")

    def sample(self, split: str, n: int, rng: random.Random | None = None) -> list[Problem]:
        """``n`` problems drawn uniformly, with replacement, from ``split``.

        Without ``rng`` every call returns the same problems (``self.rng(split)``: a fixed evaluation set);
        pass one generator across calls for a stream of training batches.
        """
        _check_split(split)
        if not _is_int(n) or n < 0:
            raise ConfigError(f"number of problems must be a non-negative integer, got {n!r}")
        rng = self.rng(split) if rng is None else rng
        if self._listed is not None:
            return [self.problem(rng.choice(self._listed[split])) for _ in range(n)]
        return [self.problem(self._draw(split, rng)) for _ in range(n)]

    def _draw(self, split: str, rng: random.Random) -> Hashable:
        for _ in range(_MAX_REJECTIONS):  # uniform over the space, kept when in the split: uniform over the split
            key = self.family.draw(rng)
            if self.split_of(key) == split:
                return key
        raise RuntimeError(f"task {self.name!r}: no {split} problem in {_MAX_REJECTIONS} draws")


def make_task(name: str, seed: int = 0, **options: int) -> Task:
    """The task ``name`` with validated integer options (see ``TASKS[name].options``)."""
    spec = TASKS.get(name)
    if spec is None:
        raise ConfigError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    unknown = [key for key in options if key not in spec.options]
    if unknown:
        allowed = ", ".join(spec.options) or "none"
        raise ConfigError(f"task {name!r} has no option {unknown[0]!r}; allowed options: {allowed}")
    values = {}
    for key, option in spec.options.items():
        value = options.get(key, option.default)
        if not _is_int(value) or not option.low <= value <= option.high:
            raise ConfigError(f"task {name!r}: {key} must be an integer in {option.low}..{option.high}, got {value!r}")
        values[key] = value
    if not _is_int(seed):
        raise ConfigError(f"task seed must be an integer, got {seed!r}")
    return Task(name, seed, values, spec.family(**values))
