"""Recording a policy that acts in chunks of H actions: per-step actions, rewards and observations.

``record_episodes(..., horizon=H)`` plays each row's chunk one action per step and replans a row after H steps or
when its episode ended; ``robopt collect RUN_DIR`` does so on the inner env of a chunked run's ActionChunkEnv.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robopt.config import ConfigError
from robopt.data import load_demonstrations, record_episodes
from robopt.experiment import load_config

ROOT = Path(__file__).parents[2]


class CountingEnv:
    """A fake VecEnv of 2 rows whose episodes last 3 (row 0) and 4 (row 1) steps; obs [t, row], reward = action."""

    num_envs, obs_dim, action_dim, env_id, device = 2, 2, 1, "fake/Counting", torch.device("cpu")
    action_low, action_high = torch.tensor([-1e3]), torch.tensor([1e3])

    def __init__(self) -> None:
        self.t, self.lengths = torch.zeros(2), torch.tensor([3.0, 4.0])

    def _obs(self) -> torch.Tensor:
        return torch.stack((self.t, torch.arange(2.0)), dim=1)  # [N, 2]

    def reset(self, seed=None) -> torch.Tensor:
        self.t = torch.zeros(2)
        return self._obs()

    def step(self, action: torch.Tensor):
        self.t = self.t + 1
        truncated = self.t >= self.lengths
        final_obs = self._obs()
        self.t = torch.where(truncated, torch.zeros_like(self.t), self.t)
        return self._obs(), action[:, 0].clone(), torch.zeros(2, dtype=torch.bool), truncated, {"final_obs": final_obs}

    def close(self) -> None:
        pass


def test_each_row_replans_after_h_steps_or_at_its_episode_end():
    calls = []

    def act(obs: torch.Tensor) -> torch.Tensor:  # chunk [N, 2]: step h of a chunk asked at episode step s
        calls.append(obs[:, 0].tolist())
        step_in_episode, row = obs[:, 0], obs[:, 1]
        first = 10 * step_in_episode + 100 * row  # is 10 s + 100 row; the second action is that + 1
        return torch.stack((first, first + 1), dim=1)

    episodes = record_episodes(CountingEnv(), act, 4, horizon=2, progress=False)
    # Per row, chunks start at episode steps 0 and 2: the action at step t is 10 (t - t % 2) + t % 2 + 100 row.
    # Row 0 (3 steps): 0, 1, 20 (the chunk asked at step 2 is cut by the episode end); row 1 (4 steps): 100, 101,
    # 120, 121. Global step k (episode step of row 0, row 1) -> who asks:
    #   k=0 (0, 0) both | k=1 (1, 1) - | k=2 (2, 2) both, row 0 ends | k=3 (0, 3) row 0, row 1 ends
    #   k=4 (1, 0) row 1 | k=5 (2, 1) row 0, row 0 ends | k=6 (0, 2) both | k=7 (1, 3) -, row 1 ends: 4 episodes
    assert [e.actions[:, 0].tolist() for e in episodes] == [[0, 1, 20], [100, 101, 120, 121]] * 2
    assert [e.rewards.tolist() for e in episodes] == [e.actions[:, 0].tolist() for e in episodes]
    assert episodes[1].observations[:, 0].tolist() == [0, 1, 2, 3, 4]  # per-step observations, final one included
    assert calls == [[0, 0], [2, 2], [0, 3], [1, 0], [2, 1], [0, 2]]  # the obs (episode steps) at each call


def test_chunk_width_is_checked_and_horizon_must_be_positive():
    with pytest.raises(ValueError, match=r"shape \(2, 1\), expected \[2, 2\]"):
        record_episodes(CountingEnv(), lambda obs: torch.zeros(2, 1), 1, horizon=2, progress=False)
    with pytest.raises(ConfigError, match="integer >= 1, got 0"):
        record_episodes(CountingEnv(), lambda obs: torch.zeros(2, 1), 1, horizon=0, progress=False)


def _pendulum_reward(obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Gymnasium Pendulum-v1: r = -(angle^2 + 0.1 thetadot^2 + 0.001 u^2) of the state before the step."""
    angle = np.arctan2(obs[:, 1], obs[:, 0])
    return -(angle**2 + 0.1 * obs[:, 2] ** 2 + 0.001 * action[:, 0] ** 2)


def test_collect_from_a_chunked_run_records_per_step_transitions(tmp_path):
    pytest.importorskip("minari")
    from robopt.commands.collect import collect
    from robopt.evaluation import load_policy
    from robopt.runner import train

    overrides = ["total_steps=16", "env.num_envs=2", "rollout.num_steps=8", "algo.minibatch_size=16",
                 "algo.epochs=1", "log.eval_episodes=0", "log.progress=false", "policy.hidden=[16,16]",
                 "critic.hidden=[16]", "policy.horizon=2", "policy.denoising_steps=4", "policy.ft_steps=4",
                 "policy.ddim_steps=2", "env.kwargs={max_episode_steps: 5}",
                 f"log.run_root={tmp_path / 'runs'}"]  # fmt: skip
    run_dir = train(load_config(ROOT / "configs" / "dppo_pendulum.yaml", overrides), progress=False).run_dir
    result = collect("pend/dppo", 3, run_dir=run_dir, root=tmp_path / "data", progress=False)
    assert (result.episodes, result.transitions) == (3, 15)  # 5 steps per episode, not 3 chunks
    demos = load_demonstrations("pend/dppo", root=tmp_path / "data")
    assert demos.action.shape == (15, 1) and demos.metadata["policy_horizon"] == 2
    _, policy = load_policy(run_dir)
    for episode in range(3):
        rows = demos.episode_index == episode
        obs, action, next_obs = demos.obs[rows], demos.action[rows], demos.next_obs[rows]  # [5, 3], [5, 1], [5, 3]
        torch.testing.assert_close(next_obs[:-1], obs[1:])  # consecutive per-step observations
        with torch.no_grad():  # chunks asked at steps 0, 2, 4 (the last one cut by the time limit at 5)
            chunks = policy.act(obs[[0, 2, 4]], deterministic=True)[0].clamp(-2.0, 2.0)  # [3, 2]: (a_s, a_s+1)
        expected = chunks.reshape(-1)[:5, None]  # steps 0..4: c0[0], c0[1], c2[0], c2[1], c4[0]
        torch.testing.assert_close(action, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            demos.reward[rows].numpy(), _pendulum_reward(obs.numpy(), action.numpy()), rtol=1e-4, atol=1e-4
        )
    assert (demos.action[0] - demos.action[1]).abs().item() > 1e-4  # a chunk's two actions differ: order matters
