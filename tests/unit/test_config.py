from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from robopt.config import ConfigError, build_dataclass, config_to_dict
from robopt.experiment import ExperimentConfig, load_config

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_roundtrips(path):
    config = load_config(path)
    assert build_dataclass(ExperimentConfig, config_to_dict(config)) == config


def test_overrides_apply_with_types(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algo: {name: ppo}\n")
    config = load_config(
        path, ["algo.ratio.clip_low=0.1", "env.num_envs=8", "policy.hidden=[32, 32]", "algo.learning_rate=3e-4"]
    )
    assert config.algo.learning_rate == 3e-4  # YAML 1.1 reads 3e-4 as a string; float fields accept it
    assert config.algo.ratio.clip_low == 0.1 and config.env.num_envs == 8 and config.policy.hidden == (32, 32)
    assert config.name == "c"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algo.clipp=0.1"],
            "unknown config key 'algo.clipp'; allowed: compile, desired_kl, drift_metrics, entropy_coef",
        ),
        (["algo.epochs=abc"], "algo.epochs: expected an integer, got 'abc'"),
        (["algo.learning_rate=fast"], "algo.learning_rate: expected a number, got 'fast'"),
        (["policy.activation=gelu"], "policy.activation: 'gelu' is not allowed; allowed: tanh, relu, elu, silu"),
        (["algo.name=nope"], "algo.name: unknown algorithm 'nope'; allowed:"),
        (["bogus=1"], "unknown config key 'bogus'"),
        (["env.num_envs=true"], "env.num_envs: expected an integer, got True"),
        (["algo.epochs=0"], "algo: epochs and minibatch_size must be >= 1"),
        (["noequals"], "is not of the form key=value"),
    ],
)
def test_bad_values_name_key_value_and_allowed(tmp_path, overrides, message):
    path = tmp_path / "c.yaml"
    path.write_text("algo: {name: ppo}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_every_field_is_documented():
    from robopt.algorithms import ALGORITHMS
    from robopt.config import describe_fields

    rows = describe_fields(ExperimentConfig)
    for spec in ALGORITHMS.values():
        rows += describe_fields(spec.config_cls, "algo.")
    from robopt.policies import POLICIES

    for spec in POLICIES.values():
        rows += describe_fields(spec.config_cls, "policy.")
    undocumented = [key for key, _, doc in rows if not doc]
    assert undocumented == []


@pytest.mark.parametrize(
    "device, message",
    [("gpu", "is not a torch device"), ("cuda:x", "is not a torch device"), ("mps", "robopt trains on cpu or cuda")],
)
def test_training_refuses_a_device_it_cannot_use(device, message):
    from robopt.build import check_device

    with pytest.raises(ConfigError, match=message):
        check_device(device)
    assert check_device("cpu").type == "cpu"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is present")
def test_training_on_cuda_without_a_gpu_is_one_line():
    from robopt.build import check_device

    with pytest.raises(ConfigError, match="sees no CUDA device here; use device=cpu"):
        check_device("cuda")


# ---------------------------------------------------------------- extends: a config built on another


def _write(directory, name: str, text: str):
    path = directory / name
    path.write_text(text)
    return path


def test_extends_merges_mappings_and_keeps_the_files_own_name(tmp_path) -> None:
    _write(
        tmp_path,
        "base.yaml",
        "name: base\nseed: 3\nenv: {id: Pendulum-v1, num_envs: 4}\n"
        "algo: {name: ppo, epochs: 7, learning_rate: 0.001}\n",
    )
    child = _write(tmp_path, "child.yaml", "extends: base.yaml\nenv: {num_envs: 8}\nalgo: {epochs: 2}\n")
    config = load_config(child)
    assert config.name == "child" and config.seed == 3
    assert config.env.id == "Pendulum-v1" and config.env.num_envs == 8  # merged key by key
    assert config.algo.epochs == 2 and config.algo.learning_rate == 0.001


def test_extends_with_another_algorithm_replaces_the_section(tmp_path) -> None:
    _write(tmp_path, "base.yaml", "env: {id: Pendulum-v1}\nalgo: {name: ppo, epochs: 7}\n")
    child = _write(tmp_path, "child.yaml", "extends: base.yaml\nalgo: {name: sac}\n")
    # PPO's epochs do not leak into SAC's section (SAC has no such key: that would be an error)
    assert type(load_config(child).algo).__name__ == "SACConfig"


def test_extends_errors_are_one_line(tmp_path) -> None:
    missing = _write(tmp_path, "missing.yaml", "extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"nowhere.yaml' not found \(extended by .*missing.yaml'\)"):
        load_config(missing)
    _write(tmp_path, "a.yaml", "extends: b.yaml\n")
    cycle = _write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match=r"extends 'b.yaml' makes a cycle of config files"):
        load_config(cycle)
    bad = _write(tmp_path, "bad.yaml", "extends: [a, b]\n")
    with pytest.raises(ConfigError, match=r"extends must be the path of another config file"):
        load_config(bad)


def test_a_run_saved_by_an_earlier_robopt_still_loads(tmp_path):
    # issue 52 moved the group options out of rollout (rollout.advantage -> group.enabled) and removed task.history;
    # a run directory saved before that still loads for eval, resume and init_from (each section's migrate)
    from robopt.config import config_to_dict
    from robopt.experiment import ExperimentConfig, load_run_config

    data = config_to_dict(ExperimentConfig())
    del data["group"]
    data["rollout"].update(
        advantage="group", group_std=False, leave_one_out=True, dynamic_sampling=False, refill_rounds=0
    )
    data["task"]["history"] = 1
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    config = load_run_config(tmp_path)
    assert config.group.enabled and not config.group.normalize_std and config.group.leave_one_out
    assert "advantage" not in config_to_dict(config)["rollout"] and "history" not in config_to_dict(config)["task"]
    data["task"]["history"] = 3  # a window the task no longer builds: one line, not a different policy
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"this run used task.history=3, the task-level window robopt no longer"):
        load_run_config(tmp_path)
