"""The ``isaaclab`` backend from the main venv, where Isaac Lab is not installed: one-line errors, no import of it."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from robopt.config import ConfigError
from robopt.experiment import load_config

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("isaaclab") is not None, reason="Isaac Lab is installed here (tests/isaac covers it)"
)


def test_an_isaac_task_without_isaac_lab_says_make_isaac(tmp_path):
    from robopt.build import build_env

    config = load_config("configs/ppo_isaac_cartpole.yaml", ["env.num_envs=2"])
    with pytest.raises(ConfigError, match=r"Isaac Lab is not installed in this venv; run `make isaac`"):
        build_env(config)
    assert "isaaclab" not in sys.modules


@pytest.mark.parametrize(
    "env_id, backend, message",
    [
        ("Isaac-Cartpole-Direct", "mujoco", "is an Isaac Lab task; allowed backends: auto, isaaclab"),
        ("HalfCheetah-v5", "isaaclab", "backend 'isaaclab' runs Isaac Lab task ids"),
        ("mujoco/Hopper", "isaaclab", "backend 'isaaclab' runs Isaac Lab task ids"),
    ],
)
def test_isaac_ids_and_the_isaaclab_backend_go_together(env_id, backend, message):
    from robopt.envs import make_env

    with pytest.raises(ValueError, match=message):
        make_env(env_id, 2, backend=backend)
