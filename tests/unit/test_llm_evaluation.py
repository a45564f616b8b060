"""pass@k (robopt.llm.evaluation): the unbiased estimator by hand, and the sampling/grouping plumbing on a stub policy.

The stub knows every prompt's answer and answers the j-th sample of a prompt (j = 0, 1, ...) correctly when
j mod k < quota(prompt): its correct counts per prompt are known before anything runs.
"""

from __future__ import annotations

import math

import pytest
import torch

from robopt.config import ConfigError
from robopt.llm.env import PromptEnv
from robopt.llm.evaluation import MAX_PASS_K, check_pass_k, correct_counts, pass_at_k_estimate
from robopt.llm.tokens import BOS, PAD, ByteTokenizer


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 0, 4, 0.0),  # n = k: none correct
        (4, 1, 4, 1.0),  # n = k: any correct is 1
        (4, 4, 4, 1.0),
        (10, 3, 1, 0.3),  # k = 1: c / n
        (5, 2, 2, 0.7),  # 1 - C(3, 2) / C(5, 2) = 1 - 3 / 10
        (4, 1, 3, 0.75),  # 1 - C(3, 3) / C(4, 3) = 1 - 1 / 4
        (6, 5, 2, 1.0),  # n - c = 1 < k: every pair holds a correct one
        (20, 5, 4, 1.0 - 1365 / 4845),  # 1 - C(15, 4) / C(20, 4) = 0.7182662...
    ],
)
def test_estimator_hand_values(n, c, k, expected):
    assert pass_at_k_estimate(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_estimator_matches_the_binomial_form():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1.0 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k_estimate(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 0, 0), (4, 0, 5), (4, 5, 2), (4, -1, 2)])
def test_estimator_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k_estimate(n, c, k)


def test_check_pass_k():
    check_pass_k("robopt/Text", 1)
    check_pass_k("robopt/Text", MAX_PASS_K)
    with pytest.raises(ConfigError, match=r"--pass-k must be in 1\.\.64 \(0: off\), got 65"):
        check_pass_k("robopt/Text", 65)
    with pytest.raises(ConfigError, match="needs a language run"):
        check_pass_k("mujoco/Hopper", 4)


class QuotaPolicy:
    """Answers the j-th sample of a prompt correctly when j mod k < quota(prompt) = (sum of its bytes) mod (k + 1)."""

    def __init__(self, env: PromptEnv, k: int) -> None:
        self.answers = {p.prompt: p.answers[0] for p in env.problems}
        self.k, self.width, self.seen, self.calls = k, env.action_dim, {}, []
        self.tokenizer = ByteTokenizer()

    def quota(self, prompt: str) -> int:
        return sum(prompt.encode()) % (self.k + 1)

    def act(self, obs: torch.Tensor, deterministic: bool = False):
        self.calls.append((obs.shape[0], deterministic))
        rows = []
        for row in obs.round().long().tolist():
            prompt = self.tokenizer.decode([i for i in row if i not in (PAD, BOS)])
            j = self.seen.get(prompt, 0)
            self.seen[prompt] = j + 1
            text = self.answers[prompt] if j % self.k < self.quota(prompt) else "x"
            ids = self.tokenizer.encode(text + "\n")
            rows.append(ids + [PAD] * (self.width - len(ids)))
        return torch.tensor(rows), {}


def test_correct_counts_per_prompt_from_known_completions():
    prompts, k, seed = 6, 4, 3
    env = PromptEnv(prompts * k, task="addition", group_size=k, split="heldout")
    greedy = PromptEnv(prompts, task="addition", group_size=1, split="heldout")
    greedy.reset(seed=seed)
    greedy_prompts = [p.prompt for p in greedy.problems]
    env.reset(seed=seed)  # the prompts correct_counts will see (it resets to the same seed); the stub learns them
    sampled_prompts = [p.prompt for p in env.problems[::k]]
    assert all(p.prompt == sampled_prompts[i // k] for i, p in enumerate(env.problems))  # groups of k rows
    policy = QuotaPolicy(env, k)
    counts = correct_counts(policy, env, seed, chunk_rows=5)  # chunks of 5 rows straddle the groups of 4
    # The held-out prompts are the greedy evaluation's; quota = byte sum mod 5, e.g. "15+64=": 49+53+43+54+52+61
    # = 312 -> 2, "79+30=": 55+57+43+51+48+61 = 315 -> 0.
    assert sampled_prompts == greedy_prompts
    assert greedy_prompts == ["15+64=", "38+90=", "87+84=", "67+62=", "79+30=", "43+65="]
    assert counts.tolist() == [policy.quota(p) for p in greedy_prompts] == [2, 1, 3, 2, 0, 4]
    assert [size for size, _ in policy.calls] == [5, 5, 5, 5, 4] and not any(d for _, d in policy.calls)
    # pass@4 with n = 4: prompts with a correct sample, 5 of 6; pass@1: mean of c / 4 = 12 / 24
    assert sum(pass_at_k_estimate(k, c, k) for c in counts.tolist()) / prompts == pytest.approx(5 / 6)
    assert sum(pass_at_k_estimate(k, c, 1) for c in counts.tolist()) / prompts == pytest.approx(0.5)


def test_sampling_is_seeded_and_leaves_the_global_generator_alone():
    class CoinPolicy:  # the row's answer on a fair coin flip from torch's global generator, else a wrong one
        def __init__(self, env: PromptEnv) -> None:
            self.env = env

        def act(self, obs: torch.Tensor, deterministic: bool = False):
            coins = (torch.rand(obs.shape[0]) < 0.5).tolist()
            texts = [(p.answers[0] if coin else "x") + "\n" for p, coin in zip(self.env.problems, coins)]
            ids = [ByteTokenizer().encode(text) for text in texts]
            return torch.tensor([row + [PAD] * (self.env.action_dim - len(row)) for row in ids]), {}

    env = PromptEnv(32, task="addition", group_size=4, split="heldout")
    before = torch.random.get_rng_state()
    first = correct_counts(CoinPolicy(env), env, seed=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert torch.equal(correct_counts(CoinPolicy(env), env, seed=7), first)
    torch.manual_seed(7)  # the same coins drawn by hand: counts per group of 4 rows
    expected = (torch.rand(32) < 0.5).reshape(8, 4).sum(1)
    assert first.tolist() == expected.tolist()
    assert correct_counts(CoinPolicy(env), env, seed=8).tolist() != first.tolist()
