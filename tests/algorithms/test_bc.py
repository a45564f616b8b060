"""Behaviour cloning (``algo.name: bc``), ``init_from`` and the critic warm-up with a frozen actor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass
from robopt.core.errors import NonFiniteError
from robopt.data.dataset_writer import write_dataset
from robopt.data.recording import record_episodes
from robopt.envs import make_env
from robopt.experiment import ExperimentConfig
from robopt.runner import train

ROOT = Path(__file__).parents[2]
# A known linear controller on MultiGoal's observation (x, y, time fraction): a = W s + b, inside [-1, 1].
W = torch.tensor([[-0.8, 0.3, 0.5], [0.2, -0.6, -0.4]])
B = torch.tensor([0.3, -0.2])


def linear_controller(obs: torch.Tensor) -> torch.Tensor:
    return obs @ W.T + B


@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory) -> Path:
    """A Minari dataset of 120 episodes of the linear controller on robopt/MultiGoal (50 steps each)."""
    root = tmp_path_factory.mktemp("datasets")
    env = make_env("robopt/MultiGoal", 8)
    episodes = record_episodes(env, linear_controller, 120, seed=0, progress=False)
    write_dataset(
        "test/linear-v0",
        episodes,
        "robopt/MultiGoal",
        env.obs_dim,
        env.action_dim,
        env.action_low,
        env.action_high,
        root=root,
    )
    return root


def bc_config(tmp_path, dataset_root, policy="gaussian", **algo) -> ExperimentConfig:
    return build_dataclass(
        ExperimentConfig,
        {
            "name": f"bc_{policy}",
            "env": {"id": "robopt/MultiGoal", "num_envs": 4},
            "policy": {"name": policy, "hidden": [64, 64]},
            "algo": {
                "name": "bc",
                "dataset": "test/linear-v0",
                "dataset_root": str(dataset_root),
                "epochs": 40,
                "patience": 40,
                "learning_rate": 3e-3,
                **algo,
            },
            "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 4, "checkpoint_every": 1},
        },
    )


@pytest.mark.parametrize("policy", ["gaussian", "flow"])
def test_bc_reproduces_a_known_linear_controller(tmp_path, dataset_root, policy):
    result = train(bc_config(tmp_path, dataset_root, policy))
    assert (result.run_dir / "eval.json").is_file() and (result.run_dir / "config.yaml").is_file()
    from robopt.evaluation import load_policy

    _, cloned = load_policy(result.run_dir)
    # states of fresh episodes, not the training data
    env = make_env("robopt/MultiGoal", 64)
    episodes = record_episodes(env, linear_controller, 64, seed=7, progress=False)
    states = torch.cat([torch.as_tensor(e.observations) for e in episodes])
    with torch.no_grad():
        action, _ = cloned.act(states, deterministic=True)
    error = (action - linear_controller(states)).abs()
    assert float(error.mean()) < 0.03 and float(error.max()) < 0.15, (float(error.mean()), float(error.max()))
    # the normalizer was fitted on the data: its mean is the data's observation mean
    torch.testing.assert_close(cloned.normalizer.mean.float()[:2], states[:, :2].mean(0), atol=0.15, rtol=0)


def test_bc_early_stopping_keeps_the_best_validation_weights(tmp_path, dataset_root):
    # A learning rate this high makes validation loss bounce: patience 2 stops early, best weights restored.
    config = bc_config(tmp_path, dataset_root, learning_rate=0.05, patience=2, epochs=40)
    result = train(config)
    rows = (result.run_dir / "progress.csv").read_text().splitlines()
    header, values = rows[0].split(","), [dict(zip(rows[0].split(","), r.split(","))) for r in rows[1:]]
    assert "validation_loss" in header and len(values) < 40  # stopped before the last epoch
    best = min(float(v["validation_loss"]) for v in values)
    assert float(values[-1]["best_validation_loss"]) == pytest.approx(best)
    from robopt.evaluation import load_policy

    _, policy = load_policy(result.run_dir)
    from robopt.algorithms.bc import BehaviorCloningLoop

    loop = BehaviorCloningLoop(config.algo, make_env("robopt/MultiGoal", 1), policy, seed=config.seed)
    assert loop.validation_loss() == pytest.approx(best, rel=1e-5)  # the checkpoint holds the best epoch


def test_init_from_loads_policy_and_critic_warmup_freezes_the_actor(tmp_path, dataset_root):
    bc = train(bc_config(tmp_path, dataset_root, "flow", epochs=3))
    bc_policy = load_checkpoint(bc.run_dir / LAST_CHECKPOINT)["loop"]["policy"]
    config = build_dataclass(
        ExperimentConfig,
        {
            "env": {"id": "robopt/MultiGoal", "num_envs": 8},
            "policy": {"name": "flow", "hidden": [64, 64]},
            "rollout": {"num_steps": 16},
            "algo": {"name": "fpo", "epochs": 2, "minibatch_size": 64},
            "init_from": str(bc.run_dir),
            "critic_warmup": 2,
        },
    )
    loop = build_loop(config, initialize=True)
    for key, value in bc_policy.items():
        torch.testing.assert_close(loop.policy.state_dict()[key], value, rtol=0, atol=0)
    actor = [p.detach().clone() for p in loop.policy.parameters()]
    critic = [p.detach().clone() for p in loop.critic.parameters()]
    for _ in range(2):
        metrics = loop.iteration(0.0)
        assert metrics["critic_warmup"] == 1.0
    assert all(torch.equal(a, p) for a, p in zip(actor, loop.policy.parameters()))
    assert not all(torch.equal(c, p) for c, p in zip(critic, loop.critic.parameters()))
    loop.iteration(0.0)  # the third iteration is FPO's: the actor moves
    assert not all(torch.equal(a, p) for a, p in zip(actor, loop.policy.parameters()))
    # the cloned policy's observation statistics stay the dataset's (init_normalizer: frozen, the default)
    assert torch.equal(loop.policy.normalizer.mean, bc_policy["normalizer.mean"])
    loop.env.close()


def test_init_normalizer_update_merges_the_rollouts_statistics(tmp_path, dataset_root):
    bc = train(bc_config(tmp_path, dataset_root, "gaussian", epochs=1))
    bc_count = load_checkpoint(bc.run_dir / LAST_CHECKPOINT)["loop"]["policy"]["normalizer.count"]
    config = build_dataclass(
        ExperimentConfig,
        {
            "env": {"id": "robopt/MultiGoal", "num_envs": 8},
            "policy": {"name": "gaussian", "hidden": [64, 64]},
            "rollout": {"num_steps": 16},
            "algo": {"name": "ppo", "epochs": 1, "minibatch_size": 64},
            "init_from": str(bc.run_dir),
            "init_normalizer": "update",
        },
    )
    loop = build_loop(config, initialize=True)
    loop.iteration(0.0)
    assert float(loop.policy.normalizer.count) == float(bc_count) + 8 * 16
    loop.env.close()


def test_init_from_mismatches_are_one_line_errors(tmp_path, dataset_root):
    gaussian = train(bc_config(tmp_path, dataset_root, "gaussian", epochs=1))
    base = {"env": {"id": "robopt/MultiGoal", "num_envs": 2}, "policy": {"name": "flow"}, "algo": {"name": "fpo"}}
    cases = [
        ({"init_from": str(gaussian.run_dir)}, "holds a gaussian policy, this config a flow policy"),
        ({"init_from": str(tmp_path / "nowhere")}, "is not a run directory with a checkpoint"),
        (
            {
                "init_from": str(gaussian.run_dir),
                "env": {"id": "Pendulum-v1"},
                "policy": {"name": "gaussian"},
                "algo": {"name": "ppo"},
            },
            "was trained on robopt/MultiGoal, this config runs Pendulum-v1",
        ),
        ({"init_from": str(gaussian.run_dir), "policy": {"name": "gaussian", "hidden": [8]}}, "policy sizes differ"),
    ]
    for override, message in cases:
        with pytest.raises(ConfigError, match=message):
            build_loop(build_dataclass(ExperimentConfig, {**base, **override}), initialize=True)
    with pytest.raises(ConfigError, match="critic_warmup=3 needs init_from=RUN_DIR"):
        build_loop(build_dataclass(ExperimentConfig, {**base, "critic_warmup": 3}), initialize=True)


def test_incompatible_dataset_is_refused_by_the_cli_and_nothing_is_written(tmp_path, dataset_root):
    config = tmp_path / "bc.yaml"
    config.write_text(
        "env: {id: Pendulum-v1}\nalgo: {name: bc, dataset: test/linear-v0, dataset_root: " + str(dataset_root) + "}\n"
        f"log: {{run_root: {tmp_path / 'runs'}}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "robopt.cli", "train", str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "observation" in result.stderr or "robopt/MultiGoal" in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


def test_nan_in_the_flow_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, dataset_root, monkeypatch):
    from robopt.algorithms.bc import BehaviorCloningLoop

    config = bc_config(tmp_path, dataset_root, "flow", epochs=6)
    original = BehaviorCloningLoop._loss

    def poisoned(self, obs, action):  # the flow-matching loss turns NaN in the 4th epoch
        loss, metrics = original(self, obs, action)
        return (loss * float("nan"), metrics) if self.iteration_count >= 3 else (loss, metrics)

    monkeypatch.setattr(BehaviorCloningLoop, "_loss", poisoned)
    with pytest.raises(NonFiniteError, match="epoch 4: non-finite imitation loss"):
        train(config)
    (run_dir,) = (tmp_path / "runs" / "bc_flow").iterdir()
    assert load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["iteration"] == 3


def test_robopt_pretrain_writes_a_run_directory_and_refuses_other_kinds(tmp_path, dataset_root):
    from typer.testing import CliRunner

    from robopt.cli import app

    config = tmp_path / "bc.yaml"
    config.write_text(
        "env: {id: robopt/MultiGoal, num_envs: 2}\n"
        f"algo: {{name: bc, dataset: test/linear-v0, dataset_root: {dataset_root}, epochs: 2}}\n"
        f"log: {{run_root: {tmp_path / 'runs'}, eval_episodes: 2, progress: false}}\n"
    )
    result = CliRunner().invoke(app, ["pretrain", str(config)])
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs" / "bc").iterdir()
    assert {p.name for p in run_dir.iterdir()} >= {"config.yaml", "checkpoints", "progress.csv", "eval.json"}
    assert list(run_dir.glob("events.out.tfevents*")) or list(run_dir.glob("**/events.out.tfevents*"))
    refused = CliRunner().invoke(app, ["pretrain", str(ROOT / "configs/ppo_pendulum.yaml")])
    assert refused.exit_code == 2
    expected = "robopt: error: robopt pretrain runs bc, distill; algo.name=ppo is trained with `robopt train`"
    assert refused.stderr.strip() == expected


def test_resuming_a_finished_bc_run_trains_no_further(tmp_path, dataset_root):
    config = bc_config(tmp_path, dataset_root, learning_rate=0.05, patience=2, epochs=40)
    result = train(config)
    before = load_checkpoint(result.run_dir / LAST_CHECKPOINT)["loop"]
    assert before["finished"] and before["iteration"] < 40
    again = train(config, resume_dir=result.run_dir)
    assert again.iterations == before["iteration"]
    after = load_checkpoint(result.run_dir / LAST_CHECKPOINT)["loop"]["policy"]
    assert all(torch.equal(after[key], value) for key, value in before["policy"].items())


def test_a_lerobot_copy_of_expert_episodes_clones_the_same_diffusion_policy_as_the_minari_copy(tmp_path):
    """robopt collect writes MultiGoal's scripted expert, same seed, once as Minari and once as LeRobot; the diffusion
    policy robopt pretrain clones from each is the same (same transitions, same kernels and shapes: bit-equal)."""
    from robopt.commands.collect import collect
    from robopt.evaluation import load_policy

    minari = collect("multigoal/expert", 12, expert="robopt/MultiGoal", root=tmp_path / "minari", progress=False)
    lerobot = collect(str(tmp_path / "lerobot"), 12, expert="robopt/MultiGoal", progress=False, fmt="lerobot")
    assert minari.transitions == lerobot.transitions and minari.mean_return == lerobot.mean_return
    weights = []
    for name, dataset in (("minari", "multigoal/expert-v0"), ("lerobot", str(lerobot.path))):
        config = build_dataclass(
            ExperimentConfig,
            {
                "name": f"bc_{name}",
                "env": {"id": "robopt/MultiGoal", "num_envs": 4},
                "policy": {
                    "name": "diffusion",
                    "hidden": [32, 32],
                    "horizon": 2,
                    "denoising_steps": 4,
                    "ft_steps": 2,
                    "ddim_steps": 2,
                },
                "algo": {"name": "bc", "dataset": dataset, "dataset_root": str(tmp_path / "minari"), "epochs": 3},
                "log": {"run_root": str(tmp_path / "runs"), "progress": False, "eval_episodes": 0},
            },
        )
        weights.append(load_policy(train(config).run_dir)[1].state_dict())
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
