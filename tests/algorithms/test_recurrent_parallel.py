"""Data-parallel PPO on a recurrent actor-critic: each rank's share of the sequences, one averaged step.

Two gloo ranks (spawned processes, as tests/algorithms/test_data_parallel.py) each update on half of the sequences of
one recurrent rollout; one process updates on all of them. The gradient average is exact and only the order of
float32 sums differs, so the weights agree within 1e-6 (DESIGN.md section 8).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robopt.algorithms.ppo import PPO, PPOConfig
from robopt.build import build_loop
from tests.algorithms.test_data_parallel import WEIGHT_ATOL, _join, _spawn
from tests.algorithms.test_recurrent import _config

pytestmark = pytest.mark.xdist_group("data_parallel")


def _loop_and_batch():
    """A GRU loop on Pendulum after one rollout (2 envs x 256 steps = 32 sequences of 16) and its sequence batch."""
    torch.manual_seed(0)
    loop = build_loop(_config(), initialize=True)
    loop.collect()
    return loop, loop.advantages()


def _worker(rank: int, tmp_path: Path) -> None:
    collective = _join(rank, tmp_path)
    loop, batch = _loop_and_batch()
    half = batch.index(torch.arange(256 * rank, 256 * (rank + 1)))  # 16 whole sequences each
    ppo = PPO(PPOConfig(epochs=3, minibatch_size=256), loop.policy, loop.critic)  # one minibatch per epoch
    ppo.use_collective(collective)
    ppo.update(half, 0.0)
    torch.save(ppo.updater.flat.detach().clone(), tmp_path / f"{rank}.pt")
    collective.close(synchronize=True)


def test_recurrent_update_on_two_ranks_equals_one_process_on_all_sequences(tmp_path):
    _spawn(_worker, tmp_path)
    loop, batch = _loop_and_batch()
    ppo = PPO(PPOConfig(epochs=3, minibatch_size=512), loop.policy, loop.critic)
    start = ppo.updater.flat.detach().clone()
    ppo.update(batch, 0.0)
    ranks = [torch.load(tmp_path / f"{rank}.pt") for rank in (0, 1)]
    assert torch.equal(ranks[0], ranks[1])  # every rank applied the same averaged step
    assert (ppo.updater.flat - start).abs().max() > 1e-4  # the update moved the weights: the check has teeth
    torch.testing.assert_close(ranks[0], ppo.updater.flat.detach(), rtol=0.0, atol=WEIGHT_ATOL)
