"""Shared test setup: deterministic, single-threaded torch so tests are quick and stable on 2 cores."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("WARP_CACHE_PATH", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "warp"))


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield
