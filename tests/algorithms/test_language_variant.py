"""Where the language variant comes in: the on-policy builder asks the run's policy kind for its hooks and loss terms.

A language run gets group sampling (or the task counters alone) and, with an update that adds policy-loss terms
(PPO), the token terms; a robot run gets the loop's neutral hooks and no terms, and refuses the ``group`` section.
"""

from __future__ import annotations

import pytest

from robopt.algorithms.kinds import on_policy_variant
from robopt.algorithms.onpolicy import LoopHooks
from robopt.build import build_loop
from robopt.config import ConfigError
from robopt.experiment import load_config
from robopt.llm.env import PromptEnv
from robopt.llm.group_sampling import GroupSampling, TaskCounters
from robopt.llm.variant import token_terms

SMALL = ["env.num_envs=16", "algo.minibatch_size=16", "log.eval_episodes=0"]


def test_a_language_run_gets_its_hooks_and_loss_terms():
    env = PromptEnv(16, task="addition", group_size=8)
    config = load_config("configs/grpo_addition.yaml")
    hooks, loss_terms = on_policy_variant(config, env, True)
    assert type(hooks) is GroupSampling and loss_terms is token_terms
    hooks, loss_terms = on_policy_variant(load_config("configs/grpo_addition.yaml", ["group.enabled=false"]), env, True)
    assert type(hooks) is TaskCounters and loss_terms is token_terms  # GAE, still with the task counters
    # an update without policy-loss terms (TRPO): no terms, and a reference-KL penalty it would drop is refused
    hooks, loss_terms = on_policy_variant(load_config("configs/trpo_addition.yaml"), env, False)
    assert type(hooks) is GroupSampling and loss_terms is None
    with pytest.raises(ConfigError, match="policy.kl_coef=0.04 .* set policy.kl_coef=0") as error:
        on_policy_variant(config, env, False)
    assert "\n" not in str(error.value)


def test_a_robot_run_gets_neither_and_refuses_the_group_section():
    config = load_config("configs/ppo_pendulum.yaml")
    assert on_policy_variant(config, None, True) == (None, None)
    for overrides in (["group.enabled=true"], ["group.enabled=true", "group.normalize_std=false"]):
        with pytest.raises(ConfigError, match="group: options of policy.name=language runs") as error:
            on_policy_variant(load_config("configs/ppo_pendulum.yaml", overrides), None, True)
        assert "\n" not in str(error.value)


def test_built_loops_carry_the_variant_of_their_policy_kind(tmp_path):
    robot = build_loop(load_config("configs/ppo_pendulum.yaml", [f"log.run_root={tmp_path}", "env.num_envs=1"]))
    assert type(robot.hooks) is LoopHooks and robot.algorithm.loss_terms is None
    robot.env.close()
    pytest.importorskip("transformers")
    language = build_loop(load_config("configs/grpo_addition.yaml", [*SMALL, f"log.run_root={tmp_path}"]))
    assert type(language.hooks) is GroupSampling and language.algorithm.loss_terms is token_terms
    trpo = build_loop(load_config("configs/trpo_addition.yaml", [*SMALL[:1], f"log.run_root={tmp_path}"]))
    assert type(trpo.hooks) is GroupSampling  # TRPO takes no loss terms: built without them
