"""Language-run metrics: ``completion_length`` and ``token_nll`` from ppo_loss with the language loss terms,
``verifier_failures`` from the loop with the language hooks; a robot run's loss and loop get neither.

Hand-made numbers through stubs (no language model): a policy whose stored log-probabilities and mask are known,
and one that answers a known number of rows per step with a completion the verifier fails on.
"""

from __future__ import annotations

import torch

from robopt.algorithms.onpolicy import LoopHooks, OnPolicyLoop, RolloutConfig
from robopt.algorithms.ppo import PPOConfig, ppo_loss
from robopt.buffers.rollout import RolloutBatch
from robopt.core.ratio_control import RatioControl
from robopt.llm.env import PromptEnv
from robopt.llm.group_sampling import GroupConfig, GroupSampling
from robopt.llm.policy import NoNormalizer
from robopt.llm.rewards import Verifier, exact_match
from robopt.llm.tokens import PAD, ByteTokenizer
from robopt.llm.variant import token_terms
from robopt.policies import ValueCritic

D, T = 3, 4


class StoredRatioPolicy:
    """log_ratio is 0 on every valid token (the acting weights): the loss reads only what act stored."""

    def log_ratio(self, obs: torch.Tensor, action: torch.Tensor, info: dict) -> torch.Tensor:
        return torch.zeros(obs.shape[0], T)


def token_batch(mask: torch.Tensor, log_prob: torch.Tensor) -> RolloutBatch:
    rows = mask.shape[0]
    no_end = torch.zeros(rows, dtype=torch.bool)
    return RolloutBatch(
        obs=torch.zeros(rows, D),
        action=torch.zeros(rows, T),
        policy_info={"mask": mask, "log_prob": log_prob},
        value=torch.zeros(rows),
        advantage=torch.tensor([1.0, -1.0, 0.5]),
        return_target=torch.zeros(rows),
        terminated=no_end,
        truncated=no_end,
    )


def test_completion_length_and_token_nll_by_hand():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    log_prob = torch.tensor([[-0.5, -1.0, -1.5, 0.0], [-2.0, 0.0, 0.0, 0.0], [-0.1, -0.2, -0.3, -0.4]])
    batch = token_batch(mask, log_prob)
    critic = ValueCritic(D, hidden=(8,))
    config, control = PPOConfig(), RatioControl()
    _, metrics = ppo_loss(StoredRatioPolicy(), critic, batch, config, control, True, loss_terms=token_terms)
    # lengths 3, 1, 4 -> mean 8 / 3; nll over the 8 valid tokens: (0.5 + 1 + 1.5 + 2 + 0.1 + 0.2 + 0.3 + 0.4) / 8 = 0.75
    torch.testing.assert_close(metrics["completion_length"], torch.tensor(8.0 / 3.0))
    torch.testing.assert_close(metrics["token_nll"], torch.tensor(0.75))
    _, bare = ppo_loss(StoredRatioPolicy(), critic, batch, config, control, False, loss_terms=token_terms)
    assert bare == {}
    # without loss terms (a robot run's PPO) the loss is the same and carries no token metric
    loss, generic = ppo_loss(StoredRatioPolicy(), critic, batch, config, control, True)
    with_terms, _ = ppo_loss(StoredRatioPolicy(), critic, batch, config, control, True, loss_terms=token_terms)
    assert "completion_length" not in generic and "token_nll" not in generic
    torch.testing.assert_close(loss, with_terms)  # no kl_coef on this stub: the terms add metrics only


class ScriptedPolicy:
    """Per step, the first ``wrong[t]`` rows answer 'x' (the picky reward raises on it), the others correctly."""

    def __init__(self, env: PromptEnv, wrong: list[int]) -> None:
        self.env, self.wrong, self.step = env, wrong, 0
        self.normalizer = NoNormalizer()

    def act(self, obs: torch.Tensor, deterministic: bool = False):
        failing, self.step = self.wrong[self.step], self.step + 1
        texts = ["x\n" if i < failing else p.answers[0] + "\n" for i, p in enumerate(self.env.problems)]
        ids = [ByteTokenizer().encode(text) for text in texts]
        return torch.tensor([row + [PAD] * (self.env.action_dim - len(row)) for row in ids]), {}


class NoUpdate:
    def update(self, batch, progress):
        return {}


def picky(completion: str, problem) -> float:
    if completion.startswith("x"):
        raise ValueError("not a number")
    return exact_match(completion, problem)


def test_loop_logs_verifier_failures_per_iteration():
    env = PromptEnv(8, task="addition", group_size=4)
    env.verifier = Verifier({"exact_match": 1.0, "picky": 0.0}, {"picky": picky})
    policy = ScriptedPolicy(env, wrong=[1, 3, 2, 0])
    hooks, critic = GroupSampling(GroupConfig(enabled=True), env), ValueCritic(env.obs_dim, hidden=(8,))
    loop = OnPolicyLoop(env, policy, critic, NoUpdate(), RolloutConfig(num_steps=2), hooks=hooks)
    first, second = loop.iteration(0.0), loop.iteration(0.5)
    # iteration 1: steps with 1 and 3 failing rows -> 4; iteration 2: 2 and 0 -> 2 (a sum per iteration)
    assert first["verifier_failures"] == 4.0 and second["verifier_failures"] == 2.0
    # the failing rows are also the wrong ones: accuracy (7/8 + 5/8) / 2 = 0.75, then (6/8 + 8/8) / 2 = 0.875
    assert first["accuracy"] == 0.75 and second["accuracy"] == 0.875
    assert env.failures == 6


def test_the_generic_loop_has_neutral_hooks():
    env = PromptEnv(8, task="addition", group_size=4)
    policy, critic = ScriptedPolicy(env, wrong=[1, 3]), ValueCritic(env.obs_dim, hidden=(8,))
    loop = OnPolicyLoop(env, policy, critic, NoUpdate(), RolloutConfig(num_steps=2))
    assert type(loop.hooks) is LoopHooks
    values = loop.iteration(0.0)  # GAE; the task counters are the language variant's, not the loop's
    assert "verifier_failures" not in values and "accuracy" not in values and values["episodes"] == 16.0
