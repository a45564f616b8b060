"""Privileged (asymmetric) critic: V sees cat(obs, env.privileged_obs()), the policy obs only (Pinto et al. 2018).

The env is the native mujoco/InvertedPendulum (D = 4) with body_mass randomized: privileged_obs() holds the mass
scales of the cart and the pole (P = 2; the world body is left out). The expected scales are read independently
from the simulator's own masses (``physics.state()["body_mass"]`` over the nominal ones).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from robopt.buffers.rollout import RolloutStorage
from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass
from robopt.experiment import ExperimentConfig
from robopt.runner import train

ROOT = Path(__file__).parents[2]
PENDULUM = {
    "id": "mujoco/InvertedPendulum", "num_envs": 3, "backend": "mujoco",
    "kwargs": {"randomization": {"body_mass": [0.5, 1.5]}, "max_episode_steps": 4},
}  # fmt: skip


def small_config(tmp_path, **overrides) -> ExperimentConfig:
    data = {
        "name": "privileged", "seed": 5, "total_steps": 4 * 3 * 16,  # 4 iterations of T=16 x N=3
        "env": PENDULUM, "policy": {"hidden": [16]}, "critic": {"hidden": [16], "privileged": True},
        "rollout": {"num_steps": 16, "normalize_advantage": False, "gamma": 0.9, "gae_lambda": 0.8},
        "algo": {"name": "ppo", "epochs": 2, "minibatch_size": 16},
        "log": {"run_root": str(tmp_path / "runs"), "checkpoint_every": 1, "progress": False, "eval_episodes": 0},
    }  # fmt: skip
    for key, value in overrides.items():  # sections are merged, except algo (another algorithm has other keys)
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) and key != "algo" else value
    return build_dataclass(ExperimentConfig, data)


class MassRecorder:
    """Wraps a native env; before each step records the simulator's mass scales [N, 2] of the cart and pole."""

    def __init__(self, env) -> None:
        self.env, self.scales = env, []
        self.nominal = env.physics.nominal_params()["body_mass"][1:]  # [2]

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        self.scales.append((self.env.physics.state()["body_mass"][:, 1:] / self.nominal).float())
        return self.env.step(action)


def test_critic_input_is_obs_and_privileged_and_only_the_value_depends_on_it(tmp_path):
    loop = build_loop(small_config(tmp_path))
    try:
        env, critic, policy = loop.env, loop.critic, loop.policy
        assert (env.obs_dim, env.privileged_dim) == (4, 2)
        assert critic.net.layers[0].in_features == 6 and critic.normalizer.mean.shape == (6,)  # D + P
        obs = loop.obs[:1]  # [1, 4]
        light, heavy = torch.tensor([[0.5, 0.5]]), torch.tensor([[1.5, 1.5]])
        with torch.no_grad():
            v_light = critic(torch.cat((obs, light), dim=-1))
            v_heavy = critic(torch.cat((obs, heavy), dim=-1))
        assert abs(float(v_light - v_heavy)) > 1e-3  # the value reads the masses
        # The policy reads obs only: its deterministic action is one function of the 4 observations.
        export = policy.export_module()
        # the export is another module (frozen normalizer, copied weights, clamp to the bounds), compared as
        # test_policy_contract.py compares it: 1e-6
        torch.testing.assert_close(export(obs), policy.act(obs, deterministic=True)[0], rtol=1e-6, atol=1e-6)
        with pytest.raises(RuntimeError):
            export(torch.cat((obs, light), dim=-1))  # 6 inputs do not fit the actor
    finally:
        loop.env.close()


def test_stored_privileged_obs_and_truncation_bootstrap(tmp_path):
    loop = build_loop(small_config(tmp_path))
    try:
        recorder = loop.env = MassRecorder(loop.env)
        loop.collect()
        batch = loop.advantages()
        storage, gamma = loop.storage, loop.rollout.gamma
        expected = torch.stack(recorder.scales)  # [T, N, 2], the masses each step ran with
        torch.testing.assert_close(storage.privileged_obs, expected, rtol=0, atol=1e-6)
        assert torch.equal(batch.critic_obs, torch.cat((storage.obs, storage.privileged_obs), -1).reshape(48, 6))
        ended = (storage.terminated | storage.truncated).nonzero().tolist()
        truncated = (storage.truncated & ~storage.terminated).nonzero().tolist()  # bootstrapped from V(final)
        assert len(truncated) >= 9  # every 4 steps x 3 envs, unless the pole fell first
        # The final privileged obs of an ended step are those of its own episode, not the freshly drawn ones.
        for t, n in ended:
            torch.testing.assert_close(storage.final_privileged_obs[t, n], expected[t, n], rtol=0, atol=1e-6)
        t, n = next((t, n) for t, n in truncated if t < 15)  # one whose next row (a new episode) is in the rollout
        assert float((expected[t + 1, n] - expected[t, n]).abs().max()) > 1e-3  # the reset redrew the masses
        # By hand: a truncated step cuts GAE, so A_t = r_t + gamma V(final_obs_t, final scales_t) - V(obs_t, scales_t).
        with torch.no_grad():
            v_final = loop.critic(torch.cat((storage.final_obs[t, n], expected[t, n]))[None])[0]
            v_wrong = loop.critic(torch.cat((storage.final_obs[t, n], expected[t + 1, n]))[None])[0]
            v_t = loop.critic(torch.cat((storage.obs[t, n], expected[t, n]))[None])[0]
        advantage = batch.advantage.reshape(16, 3)[t, n]
        torch.testing.assert_close(advantage, storage.reward[t, n] + gamma * v_final - v_t, rtol=0, atol=1e-5)
        assert abs(float(gamma * (v_wrong - v_final))) > 1e-4  # the next episode's masses would give another number
    finally:
        loop.env.close()


def test_storage_gives_the_critic_final_privileged_obs_at_final_obs():
    # T = 2, N = 1, D = 1, P = 1. Within an episode a privileged value may change (the push flag does), so the
    # final obs of step 0 pairs with final_privileged 7, not with step 0's privileged 5 nor step 1's 6.
    storage = RolloutStorage(2, 1, 1, 1, torch.device("cpu"), privileged_dim=1)
    no = torch.tensor([False])
    for t in range(2):
        obs, final_obs = torch.tensor([[float(t)]]), torch.tensor([[10.0 + t]])
        privileged, final_privileged = torch.tensor([[5.0 + t]]), torch.tensor([[7.0 + t]])
        storage.insert(t, obs, obs, {}, torch.zeros(1), no, no, final_obs, privileged, final_privileged)
    storage.commit()
    rows = (torch.tensor([0]), torch.tensor([0]))
    assert storage.final_critic_input(rows).tolist() == [[10.0, 7.0]]
    assert storage.critic_input().tolist() == [[[0.0, 5.0]], [[1.0, 6.0]]]
    batch = storage.flatten(torch.zeros(2, 1), torch.zeros(2, 1))
    assert batch.critic_input.tolist() == [[0.0, 5.0], [1.0, 6.0]] and batch.obs.tolist() == [[0.0], [1.0]]
    assert batch.index(torch.tensor([1])).critic_input.tolist() == [[1.0, 6.0]]
    assert [block.critic_input.tolist() for block in batch.split(1)] == [[[0.0, 5.0]], [[1.0, 6.0]]]


@pytest.mark.parametrize("algo", ["ppo", "trpo", "fpo"])
def test_each_on_policy_algorithm_updates_a_privileged_critic(tmp_path, algo):
    overrides = {"algo": {"name": algo, "epochs": 1, "minibatch_size": 48} if algo != "trpo" else {"name": "trpo"}}
    if algo == "fpo":
        overrides["policy"] = {"name": "flow", "hidden": [16]}
    if algo == "trpo":
        overrides["algo"] |= {"critic_epochs": 1}
    config = small_config(tmp_path, **overrides)
    loop = build_loop(config)
    try:
        before = [p.detach().clone() for p in loop.critic.parameters()]
        metrics = loop.iteration(progress=0.0)
        assert all(math.isfinite(value) for value in metrics.values())
        assert any(not torch.equal(b, p) for b, p in zip(before, loop.critic.parameters()))
        assert loop.critic.normalizer.count > 0 and loop.critic.normalizer.mean.shape == (6,)
    finally:
        loop.env.close()


def _state(run_dir: Path) -> dict[str, torch.Tensor]:
    loop = load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]
    return {
        **{f"policy.{k}": v for k, v in loop["policy"].items()},
        **{f"critic.{k}": v for k, v in loop["critic"].items()},
    }


def test_resume_with_a_privileged_critic_is_exact_and_eval_runs(tmp_path):
    # Episodes of 5 steps and rollouts of 16: the run stops mid-episode. Pushes add a privileged value that
    # changes within an episode (the flag "next step pushed"): P = 2 masses + 1 flag.
    randomization = {"body_mass": [0.5, 1.5], "push_force": [1.0, 2.0], "push_interval": [1, 3]}
    config = small_config(tmp_path, env={"kwargs": {"randomization": randomization, "max_episode_steps": 5}})
    full = train(config)
    partial = train(config, stop_at_iteration=2)
    resumed = train(config, resume_dir=partial.run_dir)
    assert resumed.iterations == full.iterations == 4 and resumed.env_steps == full.env_steps
    expected, got = _state(full.run_dir), _state(resumed.run_dir)
    assert expected.keys() == got.keys() and expected["critic.normalizer.mean"].shape == (7,)
    for key, value in expected.items():
        assert torch.equal(value, got[key]), key
    result = subprocess.run(
        [sys.executable, "-m", "robopt.cli", "eval", str(resumed.run_dir), "--episodes", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0 and "over 2 episodes" in result.stdout, result.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"env": {"id": "Pendulum-v1", "num_envs": 2, "backend": "auto", "kwargs": {}}},
            "critic.privileged=true needs a native env with privileged observations (env.id=mujoco/<Task>); "
            "Pendulum-v1 on",
        ),
        (
            {"env": {"kwargs": {}}},
            "critic.privileged=true needs env.kwargs.randomization with at least one of body_mass, geom_friction",
        ),
        (  # noise has no privileged values
            {"env": {"kwargs": {"randomization": {"obs_noise": 0.1}}}},
            "critic.privileged=true needs env.kwargs.randomization with at least one of",
        ),
        (
            {"algo": {"name": "sac"}, "policy": {"hidden": [16], "state_dependent_std": True, "squash": True}},
            "critic.privileged=true is for the value critic of the on-policy algorithms (dppo, fpo, ppo, trpo), "
            "not algo.name=sac",
        ),
    ],
    ids=["gymnasium", "no_randomization", "noise_only", "sac"],
)
def test_bad_privileged_configs_are_one_line_errors(tmp_path, overrides, message):
    env = {**PENDULUM, **overrides.pop("env", {})}
    config = small_config(tmp_path, env=env, **overrides)
    with pytest.raises(ConfigError) as error:
        build_loop(config)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_cli_refuses_a_privileged_critic_without_randomization():
    result = subprocess.run(
        [sys.executable, "-m", "robopt.cli", "train", "configs/ppo_hopper_native.yaml", "critic.privileged=true"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "critic.privileged=true needs env.kwargs.randomization" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
