"""Fixtures shared by the off-policy generative-policy tests (test_offline.py, test_ogpo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robopt.data.dataset_writer import write_dataset
from robopt.data.recording import record_episodes
from robopt.envs import make_env
from robopt.envs.experts import multigoal_expert


@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory) -> Path:
    """robopt/MultiGoal as ``test/mixed-v0``: 150 expert episodes and 50 of uniform random actions (a
    mixed-quality dataset: expert 9.7, random -7.9)."""
    root = tmp_path_factory.mktemp("offline_datasets")
    env = make_env("robopt/MultiGoal", 10)
    expert = record_episodes(env, multigoal_expert(env, 0), 150, seed=0, progress=False)
    generator = torch.Generator().manual_seed(1)
    random = record_episodes(
        env, lambda obs: torch.rand(obs.shape[0], 2, generator=generator) * 2 - 1, 50, seed=1, progress=False
    )
    bounds = (env.obs_dim, env.action_dim, env.action_low, env.action_high)
    write_dataset("test/mixed-v0", expert + random, "robopt/MultiGoal", *bounds, root=root)
    return root
