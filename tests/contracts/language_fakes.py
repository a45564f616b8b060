"""Helpers shared by the language policy tests: the tiny policy they build, a logits override, a one-line check.

Shapes: B batch, P prompt width (obs, BOS included), T completion length (max_new_tokens), V vocabulary (259).
Every model is the tiny one built in code (2 layers, hidden 64, 4 heads) on CPU.
"""

from __future__ import annotations

import pytest
import torch

from robopt.llm.policy import LanguagePolicy, LanguagePolicyConfig

P, T = 10, 6
PROMPTS = ["12+3=", "hello", "a", "sort:cba="]
A_BYTE, B_BYTE, C_BYTE, NEWLINE = ord("a"), ord("b"), ord("c"), ord("\n")


def make_policy(**overrides) -> LanguagePolicy:
    """A tiny policy with T = 6 new tokens and prompt width P = 10; ``overrides`` are config fields."""
    return LanguagePolicy(LanguagePolicyConfig(**{"max_new_tokens": T, **overrides}), prompt_width=P)


def zeros_like_float(action: torch.Tensor) -> torch.Tensor:
    return torch.zeros(action.shape, dtype=torch.float32)


def override_logits(policy: LanguagePolicy, rule) -> None:
    """Replace the LM head's output by ``rule(input_ids [B, L], logits [B, L', V])`` (L' <= L: logits_to_keep).

    A forward pre-hook on the model records the input ids of each call, so the rule can depend on the token at
    each position: the same rule then holds for the cached generation steps and the full scoring pass.
    """
    seen = {}
    model = policy.model

    def remember(module, args, kwargs):
        seen["ids"] = kwargs["input_ids"]

    def replace(module, args, output):
        ids = seen["ids"][:, -output.shape[1] :]
        return rule(ids, output)

    model.register_forward_pre_hook(remember, with_kwargs=True)
    model.get_output_embeddings().register_forward_hook(replace)


def assert_one_line(error: pytest.ExceptionInfo, *fragments: str) -> None:
    """The exception's message is one line and holds every fragment."""
    message = str(error.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
