"""Symmetry in PPO (``algo.symmetry``, ``robopt.algorithms.symmetry``): the mirrored half of an augmented batch starts
at ratio 1, its advantages and returns are the collected ones, the mirror loss is its formula and vanishes for a
symmetric policy, and a run trains with both; one line where it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from robopt.algorithms.symmetry import Symmetry, SymmetryConfig
from robopt.buffers.rollout import RolloutBatch
from robopt.cli import app
from robopt.envs import make_env
from robopt.experiment import load_config
from robopt.policies.gaussian import GaussianPolicy
from robopt.runner import train
from tests.robots.conftest import quadruped_sections

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "configs" / "ppo_quadruped_velocity.yaml"
MIRROR = "robot.mirror=[[FL_, FR_], [RL_, RR_]]"
TINY = ["total_steps=256", "env.num_envs=16", "rollout.num_steps=8", "algo.minibatch_size=32", "algo.epochs=2",
        "log.eval_episodes=0", "log.progress=false", "policy.hidden=[16]", "critic.hidden=[16]"]  # fmt: skip


def quadruped_env(num_envs: int = 4):
    robot, task = quadruped_sections()
    robot["mirror"] = [["FL_", "FR_"], ["RL_", "RR_"]]
    return make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=1)


def _batch(env, policy, rows: int = 32) -> RolloutBatch:
    generator = torch.Generator().manual_seed(0)
    obs = torch.randn(rows, env.obs_dim, generator=generator)
    action, info = policy.act(obs)
    advantage, returns = torch.randn(rows, generator=generator), torch.randn(rows, generator=generator)
    done = torch.zeros(rows, dtype=torch.bool)
    return RolloutBatch(obs, action, info, returns - advantage, advantage, returns, done, done)


def test_the_mirrored_half_starts_at_ratio_one_with_the_same_advantages() -> None:
    env = quadruped_env()
    torch.manual_seed(0)
    policy = GaussianPolicy(env.obs_dim, env.action_dim, env.action_low, env.action_high, hidden=(32,))
    symmetry = Symmetry(SymmetryConfig(augment=True), env, policy, privileged=False)
    batch = _batch(env, policy)
    augmented = symmetry.augment(batch, policy)
    assert len(augmented) == 64
    assert torch.equal(augmented.obs[:32], batch.obs) and torch.equal(augmented.action[:32], batch.action)
    assert torch.equal(augmented.obs[32:], symmetry.obs.apply(batch.obs))
    assert torch.equal(augmented.action[32:], symmetry.action.apply(batch.action))
    for name in ("advantage", "return_target", "value"):
        assert torch.equal(getattr(augmented, name)[32:], getattr(batch, name))
    # the policy that acted gives the mirrored rows their old log-probabilities: every ratio starts at exactly 1
    log_ratio = policy.log_ratio(augmented.obs, augmented.action, augmented.policy_info)
    assert torch.equal(log_ratio, torch.zeros_like(log_ratio))
    env.close()


def test_the_mirror_loss_is_its_formula_and_zero_for_a_symmetric_policy() -> None:
    env = quadruped_env()
    torch.manual_seed(0)
    policy = GaussianPolicy(env.obs_dim, env.action_dim, env.action_low, env.action_high, hidden=(32,))
    symmetry = Symmetry(SymmetryConfig(mirror_loss=1.0), env, policy, privileged=False)
    obs = torch.randn(16, env.obs_dim)
    mean = policy.distribution_params(obs)[0]
    mirrored = policy.distribution_params(symmetry.obs.apply(obs))[0]
    expected = (mirrored - symmetry.action.apply(mean)).square().sum(-1).mean()
    torch.testing.assert_close(symmetry.loss(policy, obs), expected, rtol=1e-6, atol=0)
    assert float(expected.detach()) > 1e-3  # a random network is not symmetric

    class Symmetric(torch.nn.Module):  # mu(s) = (f(s) + mirror(f(mirror(s)))) / 2 is symmetric by construction
        def distribution_params(self, x):
            half = 0.5 * (policy.distribution_params(x)[0] + symmetry.action.apply(
                policy.distribution_params(symmetry.obs.apply(x))[0]))  # fmt: skip
            return half, None

    assert float(symmetry.loss(Symmetric(), obs)) < 1e-10
    env.close()


def test_a_run_trains_with_mirrored_transitions_and_the_mirror_loss(tmp_path) -> None:
    overrides = [*TINY, MIRROR, "algo.symmetry.augment=true", "algo.symmetry.mirror_loss=0.5"]
    result = train(load_config(CONFIG, [*overrides, f"log.run_root={tmp_path}"]), progress=False)
    header = (result.run_dir / "progress.csv").read_text().splitlines()[0].split(",")
    assert any(name.endswith("mirror_loss") for name in header)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.symmetry.augment=true"], "algo.symmetry: symmetry needs robot.mirror (the left-right name pairs"),
        ([MIRROR, "algo.symmetry.augment=true", "task.observations.feet_vel={}"], "feet_vel has no mirror"),
        ([MIRROR, "algo.symmetry.mirror_loss=-1"], "algo.symmetry.mirror_loss: expected a finite number >= 0"),
        ([MIRROR, "algo.symmetry.augment=true", "algo.compile=true"], "compile=true does not support symmetry"),
    ],
)
def test_what_symmetry_cannot_do_is_one_line(overrides, message) -> None:
    result = CliRunner().invoke(app, ["train", str(CONFIG), *TINY, *overrides])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert message in result.output
