"""Shared pieces of the robot tests: the shipped quadruped's config sections, and small MJCF files written here."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_quadruped_velocity.yaml"


def quadruped_sections() -> tuple[dict, dict]:
    """(robot, task) of configs/ppo_quadruped_velocity.yaml, as plain mappings (copies)."""
    data = yaml.safe_load(CONFIG.read_text())
    return copy.deepcopy(data["robot"]), copy.deepcopy(data["task"])


# A one-joint arm on a fixed base: a 1 kg point mass 0.5 m from a hinge about y, no actuators, no floor.
# Inertia about the hinge I = m r^2 = 0.25 kg m^2 (plus the joint's armature 0.01).
PENDULUM_ARM = """<mujoco model="arm1">
  <compiler angle="radian"/>
  <option gravity="0 0 0"/>
  <worldbody>
    <body name="base" pos="0 0 1">
      <body name="link">
        <joint name="shoulder" type="hinge" axis="0 1 0" range="-1.5 1.5" armature="0.01"/>
        <geom name="rod" type="capsule" fromto="0 0 0 0.5 0 0" size="0.01" mass="0"/>
        <geom name="tip" type="sphere" pos="0.5 0 0" size="0.02" mass="1"/>
        <site name="tip_site" pos="0.5 0 0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture
def arm_file(tmp_path) -> Path:
    path = tmp_path / "arm1.xml"
    path.write_text(PENDULUM_ARM)
    return path
