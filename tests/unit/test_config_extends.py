"""``extends: base.yaml`` in a config file (tests/unit/test_config.py has the basics): a base section without a name
merges into any named one (the off-policy bases in configs/base/), a section of another kind replaces the base's,
and the configs that share a base."""

from __future__ import annotations

from pathlib import Path

import pytest

from robopt.config import ConfigError, read_config_file
from robopt.experiment import load_config

CONFIGS = Path(__file__).parents[2] / "configs"


def test_a_base_section_without_a_name_merges_into_a_named_one(tmp_path):
    (tmp_path / "base.yaml").write_text("env: {id: Pendulum-v1}\nalgo: {loop: {batch_size: 32, learning_starts: 7}}\n")
    (tmp_path / "sac.yaml").write_text("extends: base.yaml\nalgo: {name: sac, loop: {batch_size: 16}}\n")
    (tmp_path / "td3.yaml").write_text("extends: base.yaml\nalgo: {name: td3}\n")
    sac, td3 = load_config(tmp_path / "sac.yaml"), load_config(tmp_path / "td3.yaml")
    assert (sac.algo.loop.batch_size, sac.algo.loop.learning_starts) == (16, 7)
    assert type(td3.algo).__name__ == "TD3Config" and td3.algo.loop.learning_starts == 7


def test_another_policy_kind_replaces_the_base_section(tmp_path):
    (tmp_path / "base.yaml").write_text("env: {id: Pendulum-v1}\npolicy: {name: flow, steps: 3, draws: 2}\n")
    (tmp_path / "run.yaml").write_text("extends: base.yaml\npolicy: {name: gaussian, squash: true}\n")
    policy = load_config(tmp_path / "run.yaml").policy
    assert type(policy).__name__ == "GaussianPolicyConfig" and policy.squash  # the flow's fields do not leak


def test_a_file_extends_its_base_relative_to_itself(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "common.yaml").write_text("seed: 7\nenv: {id: Pendulum-v1, num_envs: 2}\n")
    (tmp_path / "run.yaml").write_text("extends: base/common.yaml\nenv: {num_envs: 3}\n")
    config = load_config(tmp_path / "run.yaml")
    assert (config.seed, config.env.id, config.env.num_envs, config.name) == (7, "Pendulum-v1", 3, "run")


def test_replace_takes_a_mapping_whole_instead_of_merging(tmp_path):
    # a student that observes less than the teacher it extends: its observations replace the teacher's
    (tmp_path / "teacher.yaml").write_text("task: {episode_s: 5.0, observations: {a: {}, b: {scale: 2.0}, scan: {}}}\n")
    (tmp_path / "student.yaml").write_text(
        "extends: teacher.yaml\nreplace: [task.observations]\ntask: {observations: {a: {}, b: {}}}\n"
    )
    merged = read_config_file(tmp_path / "student.yaml")
    assert merged["task"] == {"episode_s": 5.0, "observations": {"a": {}, "b": {}}}
    assert "replace" not in merged


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("extends: run.yaml\n", "makes a cycle of config files"),
        ("extends: [a.yaml]\n", "must be the path of another"),
        ("extends: missing.yaml\n", "not found"),
        ("replace: [task.observations]\n", "replace \\['task.observations'\\] needs extends"),
        ("extends: base.yaml\nreplace: task\n", "replace must be a list of dotted keys"),
        ("extends: base.yaml\nreplace: [task.observations]\n", "replace names 'task.observations', which this file"),
    ],
)
def test_bad_extends_is_one_line(tmp_path, text, match):
    (tmp_path / "base.yaml").write_text("task: {observations: {a: {}}}\n")
    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match) as error:
        read_config_file(tmp_path / "run.yaml")
    assert "\n" not in str(error.value)


def test_the_off_policy_configs_share_their_bases():
    sac, td3 = load_config(CONFIGS / "sac_halfcheetah.yaml"), load_config(CONFIGS / "td3_halfcheetah.yaml")
    assert sac.algo.loop.learning_starts == td3.algo.loop.learning_starts == 10_000
    assert sac.policy.state_dependent_std and not td3.policy.state_dependent_std
    iql, fql = load_config(CONFIGS / "iql_hopper.yaml"), load_config(CONFIGS / "fql_hopper.yaml")
    assert iql.algo.loop.dataset == fql.algo.loop.dataset == "hopper/medium-v0" and iql.total_steps == 0
    assert iql.policy.activation == "relu" and fql.policy.activation == "silu"  # gaussian replaced the base's flow
