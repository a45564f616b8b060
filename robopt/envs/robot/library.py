"""The built-in terms, by kind and name: the table ``task`` sections pick from (``robopt.envs.robot.terms``)."""

from __future__ import annotations

from robopt.envs.robot import manipulation, observations, rewards, terminations
from robopt.envs.robot.terms import TermInfo, collect

REGISTRY: dict[str, dict[str, TermInfo]] = collect(observations, rewards, terminations, manipulation)


def describe(kind: str) -> list[tuple[str, str]]:
    """(name, one-line doc) of every built-in term of a kind, sorted (``robopt list`` and docs/robots.md)."""
    return sorted((name, info.doc) for name, info in REGISTRY[kind].items())
