"""Offline runs of IQL, FQL, QGF and EXPO on the off-policy loop: exact resume, learning on a mixed dataset, warm
starts, the export-time guidance scale, bad input and non-finite stops (unit tests: test_offline_updates.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from robopt.algorithms.iql import IQL
from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass
from robopt.core.errors import NonFiniteError
from robopt.envs import make_env
from robopt.experiment import ExperimentConfig
from robopt.runner import train

ROOT = Path(__file__).parents[2]


def offline_config(
    tmp_path, dataset_root, algo: str = "iql", total_steps: int = 0, hidden=(32, 32), seed: int = 3, **loop
) -> ExperimentConfig:
    hidden = list(hidden)
    policy = {"name": "gaussian", "hidden": hidden}
    if algo == "fql":
        policy = {"name": "flow", "hidden": hidden, "one_step": True, "draws": 1, "steps": 4}
    elif algo == "qgf":
        policy = {"name": "flow", "hidden": hidden, "guidance_scale": 0.1, "guidance_hidden": hidden, "draws": 1,
                  "steps": 4}  # fmt: skip
    elif algo == "expo":
        policy = {"name": "flow", "hidden": hidden, "edit_bound": 0.5, "expo_samples": 4, "guidance_hidden": hidden,
                  "draws": 1, "steps": 4}  # fmt: skip
    elif algo == "bc":
        return build_dataclass(
            ExperimentConfig,
            {
                "name": "bc",
                "seed": seed,
                "env": {"id": "robopt/MultiGoal", "num_envs": 2},
                "policy": policy,
                "algo": {
                    "name": "bc",
                    "dataset": "test/mixed-v0",
                    "dataset_root": str(dataset_root),
                    "epochs": 40,
                    "learning_rate": 3e-3,
                },
                "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 50},
            },
        )
    loop = {"dataset": "test/mixed-v0", "dataset_root": str(dataset_root), "offline_updates": 600,
            "iteration_steps": 200, "batch_size": 64, "buffer_size": 8000, **loop}  # fmt: skip
    return build_dataclass(
        ExperimentConfig,
        {
            "name": f"{algo}_offline",
            "seed": seed,
            "total_steps": total_steps,
            "env": {"id": "robopt/MultiGoal", "num_envs": 2},
            "policy": policy,
            "algo": {"name": algo, "loop": loop, **({} if algo in ("qgf", "expo") else {"critic_hidden": hidden})},
            "log": {
                "run_root": str(tmp_path / "runs"),
                "progress": False,
                "eval_episodes": 50 if seed == 0 else 2,
                "checkpoint_every": 1,
            },
        },
    )


# ------------------------------------------------------------------------------------------- runs


@pytest.mark.parametrize("algo", ["iql", "fql", "qgf", "expo"])
def test_offline_then_online_resumes_exactly(tmp_path, dataset_root, algo):
    config = offline_config(tmp_path, dataset_root, algo, total_steps=400)  # 6 offline + 2 online iterations
    full = train(config)
    assert full.env_steps == 400
    first = train(config, stop_at_iteration=3)  # inside the offline phase
    assert load_checkpoint(first.run_dir / LAST_CHECKPOINT)["loop"]["env_steps"] == 0
    resumed = train(config, resume_dir=first.run_dir)
    a = load_checkpoint(full.run_dir / LAST_CHECKPOINT)["loop"]
    b = load_checkpoint(resumed.run_dir / LAST_CHECKPOINT)["loop"]
    assert a["iteration"] == b["iteration"] == 8 and b["env_steps"] == 400
    for part in ("policy",):
        for key, value in a[part].items():
            torch.testing.assert_close(b[part][key], value, rtol=0, atol=0)
    for key, value in a["algorithm"]["critic"].items():
        torch.testing.assert_close(b["algorithm"]["critic"][key], value, rtol=0, atol=0)
    # the dataset fills the replay before the online steps: 3535 transitions laid over 2 env columns (1 repeated)
    assert a["replay"]["storage"]["steps"] == 1768 + 200


@pytest.fixture(scope="module")
def bc_return(tmp_path_factory, dataset_root) -> float:
    bc = train(offline_config(tmp_path_factory.mktemp("bc"), dataset_root, "bc", hidden=(64, 64), seed=0))
    return json.loads((bc.run_dir / "eval.json").read_text())["mean_return"]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["iql", "fql", "qgf"])
def test_offline_rl_learns_from_a_mixed_dataset_where_cloning_fails(tmp_path, dataset_root, bc_return, algo):
    """75% expert, 25% random episodes (expert 9.7, random -7.9): cloning averages the random actions in (BC
    -9.1 deterministic over 50 episodes). After 2000 updates with 64-wide networks, deterministic returns on
    seeds 0, 1, 2: IQL (advantage weights keep the expert's actions) 6.9, 4.9, 3.0; Q-guided sampling at scale 3
    5.3, 7.6, 5.8 (the same weights at scale 0, the plain flow: -12.3 on one run); FQL with alpha 0.03 8.5, -4.3,
    0.6 (alpha 0.1: 7.8, -12.2, -1.0), so FQL is held to the mean of three seeds and a smaller margin."""
    seeds = (0, 1, 2) if algo == "fql" else (0,)
    results, runs = [], []
    for seed in seeds:
        config = offline_config(
            tmp_path, dataset_root, algo, offline_updates=2000, batch_size=256, hidden=(64, 64), seed=seed
        )
        data = _as_dict(config)
        if algo == "fql":
            data["algo"]["alpha"] = 0.03
        if algo == "qgf":
            data["policy"]["guidance_scale"] = 3.0
        runs.append(train(build_dataclass(ExperimentConfig, data)))
        results.append(json.loads((runs[-1].run_dir / "eval.json").read_text())["mean_return"])
    result, margin = sum(results) / len(results), 3.0 if algo == "fql" else 5.0
    assert result > bc_return + margin and (algo == "fql" or result > 0.0), (results, bc_return)
    run = runs[0]
    if algo == "qgf":  # the same weights without guidance: the cloned flow, which averages the modes
        from robopt.evaluation import evaluate_policy
        from robopt.sim2real.export import load_exportable

        config, plain, _ = load_exportable(run.run_dir, guidance_scale=0.0)
        env = make_env("robopt/MultiGoal", 50)
        unguided = evaluate_policy(plain, env, 50, seed=config.seed + 10_000).mean_return
        assert unguided < result - 5.0, (unguided, result)


def test_init_from_warm_starts_critics_of_an_offline_run(tmp_path, dataset_root):
    source = train(offline_config(tmp_path, dataset_root, "iql"))
    config = offline_config(tmp_path, dataset_root, "iql", total_steps=200, offline_updates=0)
    config = build_dataclass(ExperimentConfig, {**_as_dict(config), "init_from": str(source.run_dir)})
    loop = build_loop(config, initialize=True)
    state = load_checkpoint(source.run_dir / LAST_CHECKPOINT)["loop"]["algorithm"]
    for name in ("critic", "target_critic", "value"):
        for key, value in state[name].items():
            torch.testing.assert_close(getattr(loop.algorithm, name).state_dict()[key], value, rtol=0, atol=0)
    wide = build_dataclass(
        ExperimentConfig, {**_as_dict(config), "algo": {**_as_dict(config)["algo"], "critic_hidden": [8]}}
    )
    with pytest.raises(ConfigError, match="its critic does not fit this config.s critics"):
        build_loop(wide, initialize=True)
    # a Q-guided flow: its critics (in the policy) from the IQL run, with no policy source
    guided = _as_dict(offline_config(tmp_path, dataset_root, "qgf", total_steps=200, offline_updates=0))
    guided["init_critic_from"] = str(source.run_dir)
    loop = build_loop(build_dataclass(ExperimentConfig, guided), initialize=True)
    assert loop.algorithm.critic is loop.policy.guide
    for key, value in state["critic"].items():
        torch.testing.assert_close(loop.policy.guide.state_dict()[key], value, rtol=0, atol=0)
    bc = _as_dict(offline_config(tmp_path, dataset_root, "bc"))
    bc["init_critic_from"] = str(source.run_dir)
    with pytest.raises(ConfigError, match="init_critic_from warm-starts the Q critics of off-policy algorithms"):
        build_loop(build_dataclass(ExperimentConfig, bc), initialize=True)


def _as_dict(config) -> dict:
    from robopt.config import config_to_dict

    return config_to_dict(config)


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("algo", "override", "message"),
    [
        ("fql", {"policy": {"name": "gaussian"}}, "algo.name=fql needs policy.name=flow with policy.one_step=true"),
        ("fql", {"policy": {"name": "flow"}}, "got FlowPolicy without policy.one_step"),
        ("iql", {"policy": {"name": "flow", "one_step": True}}, "only algo.name=fql trains"),
        ("iql", {"policy": {"name": "flow", "guidance_scale": 0.5}}, "only algo.name=qgf and algo.name=expo"),
        ("qgf", {"policy": {"name": "flow"}}, "algo.name=qgf needs policy.name=flow with policy.guidance_scale > 0"),
        ("expo", {"policy": {"name": "flow"}}, "algo.name=expo needs policy.name=flow with policy.edit_bound > 0"),
        ("expo", {"policy": {"name": "gaussian"}}, "algo.name=expo needs policy.name=flow"),
        ("qgf", {"policy": {"name": "flow", "edit_bound": 0.2}}, "policy.edit_bound > 0 is EXPO's"),
        ("iql", {"env": {"id": "Pendulum-v1"}}, "have observation size 3 and action size 2, but env 'Pendulum-v1'"),
        ("iql", {"algo": {"loop": {"buffer_size": 1000}}}, "holds 3535 transitions, more than algo.loop.buffer_size"),
        ("iql", {"algo": {"loop": {"dataset": "test/missing-v0"}}}, "missing"),
        ("iql", {"algo": {"loop": {"batch_size": 4000}}}, "holds 3535 transitions, fewer than algo.loop.batch_size"),
    ],
)
def test_bad_offline_input_is_one_line(tmp_path, dataset_root, algo, override, message):
    base = _as_dict(offline_config(tmp_path, dataset_root, algo))
    for section, values in override.items():
        if section == "algo":
            base["algo"]["loop"].update(values["loop"])
        elif section == "policy":
            base["policy"] = {"hidden": [32, 32], **values}
        else:
            base[section] = {**base[section], **values}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_loop(build_dataclass(ExperimentConfig, base), initialize=True)


@pytest.mark.parametrize(
    ("loop", "message"),
    [
        ({"offline_updates": 10, "dataset": ""}, "loop.offline_updates=10 needs loop.dataset"),
        ({"n_step": 3}, "loop.dataset takes 1-step targets"),
        ({"offline_updates": -1}, "loop.offline_updates must be >= 0"),
    ],
)
def test_bad_offline_schedule_is_refused(tmp_path, dataset_root, loop, message):
    with pytest.raises(ConfigError, match=message):
        offline_config(tmp_path, dataset_root, "iql", **loop)


def test_a_dataset_of_another_task_exits_2_with_one_line(tmp_path, dataset_root):
    command = [sys.executable, "-m", "robopt", "train", str(ROOT / "configs" / "iql_hopper.yaml"),
               f"algo.loop.dataset_root={dataset_root}", "algo.loop.dataset=test/mixed-v0",
               f"log.run_root={tmp_path / 'runs'}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "observation size 3 and action size 2" in lines[0], done.stderr
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_non_finite_td_error_offline_stops_with_the_last_good_checkpoint(tmp_path, dataset_root, monkeypatch):
    calls = {"n": 0}
    update = IQL.update

    def poisoned(self, batch, progress):
        metrics = update(self, batch, progress)
        calls["n"] += 1
        if calls["n"] > 250:  # inside offline iteration 3 (100 updates each)
            metrics["critic_loss"] = metrics["critic_loss"] * float("nan")
        return metrics

    monkeypatch.setattr(IQL, "update", poisoned)
    with pytest.raises(NonFiniteError, match=r"iteration 3 \(offline\): non-finite critic_loss"):
        train(offline_config(tmp_path, dataset_root, "iql"))
    (run_dir,) = (tmp_path / "runs" / "iql_offline").iterdir()
    assert load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["iteration"] == 2


def test_the_guidance_scale_is_an_export_time_knob(tmp_path, dataset_root):
    from robopt.sim2real.export import load_exportable

    run = train(offline_config(tmp_path, dataset_root, "qgf"))
    obs = torch.randn(8, 3)
    _, policy, trained = load_exportable(run.run_dir)
    _, plain_policy, plain = load_exportable(run.run_dir, guidance_scale=0.0)
    _, _, stronger = load_exportable(run.run_dir, guidance_scale=1.0)
    assert plain_policy.guide is None and policy.guide is not None
    with torch.no_grad():
        flow = plain_policy.clip(plain_policy.act(obs, deterministic=True)[0])
        torch.testing.assert_close(plain(obs), flow)  # scale 0: the plain flow of the same weights
        assert not torch.allclose(trained(obs), flow) and not torch.allclose(stronger(obs), trained(obs))
    iql = train(offline_config(tmp_path, dataset_root, "iql"))
    with pytest.raises(ConfigError, match="--guidance-scale re-sets the scale of a Q-guided flow policy"):
        load_exportable(iql.run_dir, guidance_scale=0.5)
