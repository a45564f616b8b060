"""Videos of a policy acting in chunks of H = 2 actions: each chunk is played one action (and one frame) per step.

Tiny one-iteration DPPO runs of a horizon-2 diffusion policy on Hopper, native (``mujoco/Hopper``, filmed on the
inner env of its ActionChunkEnv) and Gymnasium (``Hopper-v5``). A spy around the filmed env records what it is
stepped with, so the actions can be checked against the torch policy's deterministic chunks, in order.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import imageio
import numpy as np
import pytest
import torch

from robopt.build import build_env
from robopt.evaluation import _gymnasium_frames, _make_gymnasium_render_env, _native_frames, load_policy, record_video
from robopt.experiment import load_config
from robopt.runner import train

ROOT = Path(__file__).parents[2]
WIDTH, HEIGHT, H, A = 64, 48, 2, 3  # Hopper: 3 torques per step
TINY = ["total_steps=16", "env.num_envs=2", "rollout.num_steps=8", "algo.minibatch_size=16", "algo.epochs=1",
        "log.eval_episodes=0", "log.progress=false", "policy.hidden=[16,16]", "critic.hidden=[16]",
        f"policy.horizon={H}", "policy.denoising_steps=4", "policy.ft_steps=4", "policy.ddim_steps=2"]  # fmt: skip
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def tiny_dppo_run(root: Path, *overrides: str) -> Path:
    config = load_config(ROOT / "configs" / "dppo_pendulum.yaml", [*TINY, f"log.run_root={root}", *overrides])
    return train(config, progress=False).run_dir


@pytest.fixture(scope="module")
def native_run(tmp_path_factory) -> Path:
    return tiny_dppo_run(tmp_path_factory.mktemp("runs"), "env.id=mujoco/Hopper", "env.backend=mujoco")


@pytest.fixture(scope="module")
def gymnasium_run(tmp_path_factory) -> Path:
    return tiny_dppo_run(tmp_path_factory.mktemp("runs"), "env.id=Hopper-v5", "env.backend=gymnasium")


class NativeSpy:
    """The native env with every obs it returned (reset first) and every action [1, A] it was stepped with."""

    def __init__(self, env) -> None:
        self.env, self.obs, self.actions = env, [], []

    def __getattr__(self, name):  # physics, task, num_envs, device... for NativeRowRenderer
        return getattr(self.env, name)

    def reset(self, seed=None):
        self.obs.append(self.env.reset(seed=seed)[0].clone())
        return self.obs[-1][None]

    def step(self, action):
        self.actions.append(action[0].clone())
        out = self.env.step(action)
        self.obs.append(out[0][0].clone())
        return out


class GymSpy(gym.Wrapper):
    """A Gymnasium env recording its observations (reset first) and actions [A]."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.seen_obs, self.actions = [], []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.seen_obs.append(obs)
        return obs, info

    def step(self, action):
        self.actions.append(np.array(action))
        out = self.env.step(action)
        self.seen_obs.append(out[0])
        return out


def expected_actions(policy, observations: list, steps: int) -> np.ndarray:
    """[steps, A]: the policy asked at steps 0, H, 2H... on the obs there; step t plays action t % H of its chunk."""
    out = []
    for t in range(steps):
        if t % H == 0:
            obs = torch.as_tensor(np.asarray(observations[t]), dtype=torch.float32)[None]
            with torch.no_grad():
                flat = policy.act(obs, deterministic=True)[0].clamp(-1.0, 1.0)[0]  # [H * A], Hopper bounds [-1, 1]
        out.append(flat[(t % H) * A : (t % H + 1) * A].numpy())  # row-major: step h is flat[hA:(h+1)A]
    return np.stack(out)


def test_native_chunks_are_filmed_one_step_at_a_time(native_run, tmp_path):
    config, policy = load_policy(native_run)
    env = build_env(config, num_envs=1)
    spy = NativeSpy(env.inner)
    frames = list(_native_frames(spy, policy, 10_000, 5, WIDTH, HEIGHT, horizon=H))
    env.close()
    assert len(frames) == 6 and frames[0].shape == (HEIGHT, WIDTH, 3)  # reset + one per inner step, max_steps = 5
    actions = np.stack([a.numpy() for a in spy.actions])  # [5, A]: the last chunk is cut after its first action
    np.testing.assert_allclose(actions, expected_actions(policy, spy.obs, 5), atol=1e-6)
    assert np.abs(actions[0] - actions[1]).max() > 1e-4  # the chunk's two actions differ: their order is checked
    assert frames[0].std() > 1.0  # a drawn scene, not a blank image
    path = tmp_path / "hopper.mp4"
    # fps above Hopper's 125 Hz control rate: every step drawn (the default 30 fps draws every 4th)
    assert record_video(native_run, path, max_steps=5, fps=1000, width=WIDTH, height=HEIGHT, progress=False) == 6
    assert len(imageio.mimread(str(path))) == 6


def test_native_video_stops_at_a_mid_chunk_episode_end(tmp_path):
    run = tiny_dppo_run(tmp_path, "env.id=mujoco/Hopper", "env.backend=mujoco", "env.kwargs={max_episode_steps: 3}")
    # time limit 3 inner steps (chunks: steps 1-2, then step 3 ends the episode in the second chunk): the native
    # video draws the reset and steps 1 and 2 (the ending step's state is reset away) -> 3 frames
    assert record_video(run, tmp_path / "short.mp4", max_steps=10, fps=1000, width=WIDTH, height=HEIGHT,
                        progress=False) == 3  # fmt: skip


def test_gymnasium_chunks_are_filmed_one_step_at_a_time(gymnasium_run):
    config, policy = load_policy(gymnasium_run)
    spy = GymSpy(_make_gymnasium_render_env(config, WIDTH, HEIGHT))
    frames = list(_gymnasium_frames(spy, policy, 10_000, 5, horizon=H))
    spy.close()
    assert len(frames) == 6 and frames[0].shape == (HEIGHT, WIDTH, 3)
    actions = np.stack(spy.actions)  # [5, A]
    np.testing.assert_allclose(actions, expected_actions(policy, spy.seen_obs, 5), atol=1e-6)
    assert np.abs(actions[0] - actions[1]).max() > 1e-4
    # Gymnasium keeps the last state: a time limit of 3 inner steps gives the reset and 3 steps -> 4 frames
    short = gym.wrappers.TimeLimit(_make_gymnasium_render_env(config, WIDTH, HEIGHT), max_episode_steps=3)
    assert len(list(_gymnasium_frames(short, policy, 10_000, 10, horizon=H))) == 4
    short.close()
