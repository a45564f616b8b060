"""DAPO's dynamic sampling with refill on the on-policy loop, and advantage normalization of group advantages.

A scripted policy answers ``robopt/Text`` prompts right or wrong by a plan (one row of booleans per rollout), so
which groups have all-equal rewards, and so what is dropped and refilled, is known by hand.
"""

from __future__ import annotations

import pytest
import torch

from robopt.algorithms.onpolicy import OnPolicyLoop, RolloutConfig
from robopt.config import ConfigError
from robopt.core.advantages import group_advantage
from robopt.experiment import load_config
from robopt.llm.env import PromptEnv
from robopt.llm.group_sampling import GroupConfig, GroupSampling
from robopt.llm.policy import NoNormalizer
from robopt.llm.tokens import PAD, ByteTokenizer
from robopt.policies import ValueCritic


class PlannedPolicy:
    """Rollout r answers row i correctly iff ``plan[r][i]`` (a wrong answer is 'x')."""

    def __init__(self, env: PromptEnv, plan: list[list[bool]]) -> None:
        self.env, self.plan, self.rollout, self.seen = env, plan, 0, []
        self.normalizer = NoNormalizer()

    def act(self, obs: torch.Tensor, deterministic: bool = False):
        self.seen.append(obs.clone())
        right, self.rollout = self.plan[self.rollout], self.rollout + 1
        texts = [p.answers[0] + "\n" if ok else "x\n" for ok, p in zip(right, self.env.problems)]
        ids = [ByteTokenizer().encode(text) for text in texts]
        return torch.tensor([row + [PAD] * (self.env.action_dim - len(row)) for row in ids]), {}


class Recorder:
    def __init__(self) -> None:
        self.batches = []

    def update(self, batch, progress):
        self.batches.append(batch)
        return {}


ALL, NONE, HALF = [True] * 4, [False] * 4, [True, False, True, False]


def run(plan: list[list[bool]], normalize_advantage: bool = False, **group) -> tuple[OnPolicyLoop, Recorder, dict]:
    env = PromptEnv(8, task="addition", group_size=4)  # 2 prompts x 4 per rollout
    hooks = GroupSampling(GroupConfig(**{"enabled": True, "dynamic_sampling": True, **group}), env)
    recorder = Recorder()
    rollout = RolloutConfig(num_steps=1, normalize_advantage=normalize_advantage)
    critic = ValueCritic(env.obs_dim, hidden=(8,))
    loop = OnPolicyLoop(env, PlannedPolicy(env, plan), critic, recorder, rollout, hooks=hooks)
    return loop, recorder, loop.iteration(0.0)


def test_refill_tops_up_the_batch_with_groups_that_have_signal_and_cuts_it_to_size():
    # rollout 1: group 0 all right (dropped), group 1 half right (kept: 4 rows); rollout 2: both halves (8 rows)
    loop, recorder, metrics = run([ALL + HALF, HALF + HALF, HALF + HALF], refill_rounds=3)
    (batch,) = recorder.batches
    assert len(batch) == 8  # 4 + 8 kept, cut to T x N = 8: whole groups
    assert loop.env_steps == 16 and metrics["refill_rounds"] == 1.0  # one refill was enough
    assert metrics["dropped_fraction"] == pytest.approx(4 / 16)  # rows dropped over rows generated
    assert metrics["accuracy"] == pytest.approx((6 / 8 + 4 / 8) / 2)  # both rollouts' accuracy
    assert metrics["episodes"] == 16.0
    seen = loop.policy.seen  # the prompts of each rollout [8, P]: rollout 1's group 1, then rollout 2's group 0
    torch.testing.assert_close(batch.obs, torch.cat([seen[0][4:], seen[1][:4]]).to(batch.obs.dtype))
    expected = group_advantage(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4, True, False)  # each kept group alike
    torch.testing.assert_close(batch.advantage, expected.repeat(2))


def test_refill_stops_after_refill_rounds_and_an_empty_batch_skips_the_update():
    loop, recorder, metrics = run([ALL + NONE] * 3, refill_rounds=2)
    assert recorder.batches == [] and loop.env_steps == 24  # 1 + 2 rollouts, nothing with signal
    assert metrics["dropped_fraction"] == 1.0 and metrics["refill_rounds"] == 2.0


def test_without_refill_the_batch_shrinks():
    loop, recorder, metrics = run([ALL + HALF])
    assert len(recorder.batches[0]) == 4 and loop.env_steps == 8 and metrics["dropped_fraction"] == 0.5
    assert "refill_rounds" not in metrics


def test_normalize_advantage_runs_over_the_kept_rows_only():
    _, recorder, _ = run([ALL + [True, True, True, False]], normalize_advantage=True)
    advantage = recorder.batches[0].advantage  # 4 kept rows: raw group advantages of [1, 1, 1, 0], normalized
    raw = group_advantage(torch.tensor([1.0, 1.0, 1.0, 0.0]), 4, True, False)
    torch.testing.assert_close(advantage, (raw - raw.mean()) / (raw.std() + 1e-8), atol=1e-5, rtol=1e-5)


def test_normalize_advantage_applies_to_group_advantages():
    _, recorder, _ = run([HALF + [True, True, True, False]], dynamic_sampling=False, normalize_advantage=True)
    advantage = recorder.batches[0].advantage
    assert abs(float(advantage.mean())) < 1e-6 and float(advantage.std()) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(
    ("group", "match"),
    [
        ({"enabled": True, "refill_rounds": -1}, "refill_rounds must be >= 0"),
        ({"enabled": True, "refill_rounds": 2}, "set group.dynamic_sampling"),
        ({"leave_one_out": True}, "options of group.enabled=true"),
    ],
)
def test_bad_group_options_are_one_line_config_errors(tmp_path, group, match):
    path = tmp_path / "c.yaml"
    path.write_text("env: {id: robopt/Text}\n")
    with pytest.raises(ConfigError, match=match) as error:
        load_config(str(path), [f"group.{k}={v}" for k, v in group.items()])
    assert "\n" not in str(error.value)


def test_a_group_run_needs_rows_in_groups_and_dynamic_sampling_one_process():
    class Ungrouped:  # an env without group_size (a robot task)
        env_id = "Pendulum-v1"

    with pytest.raises(ConfigError, match="group.enabled=true needs an env whose rows come in groups") as error:
        GroupSampling(GroupConfig(enabled=True), Ungrouped())
    assert "\n" not in str(error.value)
    env = PromptEnv(8, task="addition", group_size=4)
    GroupSampling(GroupConfig(enabled=True), env).check_data_parallel()  # fixed batch size: fine on several ranks
    with pytest.raises(ConfigError, match="group.dynamic_sampling changes each rank's batch size"):
        GroupSampling(GroupConfig(enabled=True, dynamic_sampling=True), env).check_data_parallel()
