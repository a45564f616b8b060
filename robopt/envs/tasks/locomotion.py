"""Locomotion tasks matching Gymnasium v5: HalfCheetah, Hopper, Walker2d, Ant, Humanoid.

Each class mirrors ``gymnasium/envs/mujoco/<task>_v5.py`` (defaults, observation layout, reward terms,
health checks, reset noise); keyword options keep Gymnasium's names.

Shapes: N envs, M reset rows, D obs dim, A action dim, Q = nq, V = nv, Bd = nbody.
"""

from __future__ import annotations

import math

import mujoco
import torch

from robopt.envs.tasks.base import body_id, control_cost, init_state, normal, uniform


def _inside(value: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Strict low < value < high, elementwise."""
    return (value > low) & (value < high)


class HalfCheetah:
    """HalfCheetah-v5: reward = forward_reward_weight * x_velocity - ctrl_cost_weight * |a|^2; never terminates."""

    name, gymnasium_id, frame_skip, max_episode_steps = "HalfCheetah", "HalfCheetah-v5", 5, 1000
    xml_file = "half_cheetah.xml"
    fields = ("qpos", "qvel")

    def __init__(
        self,
        model: mujoco.MjModel,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 0.1,
        reset_noise_scale: float = 0.1,
        exclude_current_positions_from_observation: bool = True,
    ) -> None:
        self.forward_reward_weight = forward_reward_weight
        self.ctrl_cost_weight = ctrl_cost_weight
        self.reset_noise_scale = reset_noise_scale
        self.skip = int(exclude_current_positions_from_observation)
        self.init_qpos, self.init_qvel = init_state(model)

    def observe(self, state):
        return torch.cat([state["qpos"][:, self.skip :], state["qvel"]], dim=1)  # [N, Q - skip + V]

    def tracked_position(self, state):
        return state["qpos"][:, :1].clone()  # [N, 1] x

    def reward(self, state, action, position_before, dt):
        x_velocity = (state["qpos"][:, 0] - position_before[:, 0]) / dt
        reward = self.forward_reward_weight * x_velocity - control_cost(action, self.ctrl_cost_weight)
        return reward, torch.zeros_like(reward, dtype=torch.bool)

    def reset_state(self, num, generator):
        s = self.reset_noise_scale
        qpos = self.init_qpos + uniform(generator, -s, s, num, self.init_qpos.numel())
        qvel = self.init_qvel + s * normal(generator, num, self.init_qvel.numel())
        return qpos, qvel


class Hopper:
    """Hopper-v5: forward velocity + healthy reward - control cost; terminates when unhealthy."""

    name, gymnasium_id, frame_skip, max_episode_steps = "Hopper", "Hopper-v5", 4, 1000
    xml_file = "hopper.xml"
    fields = ("qpos", "qvel")

    def __init__(
        self,
        model: mujoco.MjModel,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 1e-3,
        healthy_reward: float = 1.0,
        terminate_when_unhealthy: bool = True,
        healthy_state_range: tuple[float, float] = (-100.0, 100.0),
        healthy_z_range: tuple[float, float] = (0.7, math.inf),
        healthy_angle_range: tuple[float, float] = (-0.2, 0.2),
        reset_noise_scale: float = 5e-3,
        exclude_current_positions_from_observation: bool = True,
    ) -> None:
        self.forward_reward_weight = forward_reward_weight
        self.ctrl_cost_weight = ctrl_cost_weight
        self.healthy_reward = healthy_reward
        self.terminate_when_unhealthy = terminate_when_unhealthy
        self.healthy_state_range = healthy_state_range
        self.healthy_z_range = healthy_z_range
        self.healthy_angle_range = healthy_angle_range
        self.reset_noise_scale = reset_noise_scale
        self.skip = int(exclude_current_positions_from_observation)
        self.init_qpos, self.init_qvel = init_state(model)

    def observe(self, state):
        return torch.cat([state["qpos"][:, self.skip :], state["qvel"].clamp(-10.0, 10.0)], dim=1)

    def tracked_position(self, state):
        return state["qpos"][:, :1].clone()

    def is_healthy(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """[N] bool: z, torso angle and state_vector()[2:] inside their open ranges."""
        qpos, qvel = state["qpos"], state["qvel"]
        rest = torch.cat([qpos[:, 2:], qvel], dim=1)
        healthy_state = _inside(rest, *self.healthy_state_range).all(dim=1)
        return (
            healthy_state & _inside(qpos[:, 1], *self.healthy_z_range) & _inside(qpos[:, 2], *self.healthy_angle_range)
        )

    def reward(self, state, action, position_before, dt):
        return _walker_reward(self, state, action, position_before, dt)

    def reset_state(self, num, generator):
        return _uniform_reset(self, num, generator)


class Walker2d:
    """Walker2d-v5: as Hopper, with a health check on z and torso angle only."""

    name, gymnasium_id, frame_skip, max_episode_steps = "Walker2d", "Walker2d-v5", 4, 1000
    xml_file = "walker2d_v5.xml"
    fields = ("qpos", "qvel")

    def __init__(
        self,
        model: mujoco.MjModel,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 1e-3,
        healthy_reward: float = 1.0,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (0.8, 2.0),
        healthy_angle_range: tuple[float, float] = (-1.0, 1.0),
        reset_noise_scale: float = 5e-3,
        exclude_current_positions_from_observation: bool = True,
    ) -> None:
        self.forward_reward_weight = forward_reward_weight
        self.ctrl_cost_weight = ctrl_cost_weight
        self.healthy_reward = healthy_reward
        self.terminate_when_unhealthy = terminate_when_unhealthy
        self.healthy_z_range = healthy_z_range
        self.healthy_angle_range = healthy_angle_range
        self.reset_noise_scale = reset_noise_scale
        self.skip = int(exclude_current_positions_from_observation)
        self.init_qpos, self.init_qvel = init_state(model)

    def observe(self, state):
        return torch.cat([state["qpos"][:, self.skip :], state["qvel"].clamp(-10.0, 10.0)], dim=1)

    def tracked_position(self, state):
        return state["qpos"][:, :1].clone()

    def is_healthy(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """[N] bool: torso height and angle inside their open ranges."""
        qpos = state["qpos"]
        return _inside(qpos[:, 1], *self.healthy_z_range) & _inside(qpos[:, 2], *self.healthy_angle_range)

    def reward(self, state, action, position_before, dt):
        return _walker_reward(self, state, action, position_before, dt)

    def reset_state(self, num, generator):
        return _uniform_reset(self, num, generator)


def _walker_reward(task, state, action, position_before, dt):
    """Hopper/Walker2d/Humanoid-style reward: forward + healthy - ctrl; terminated = unhealthy (if enabled)."""
    healthy = task.is_healthy(state)
    velocity = (task.tracked_position(state)[:, 0] - position_before[:, 0]) / dt
    reward = (
        task.forward_reward_weight * velocity
        + task.healthy_reward * healthy.to(velocity.dtype)
        - control_cost(action, task.ctrl_cost_weight)
    )
    return reward, ~healthy & task.terminate_when_unhealthy


def _uniform_reset(task, num, generator):
    """qpos, qvel = init + U(-scale, scale) (Hopper, Walker2d, Humanoid)."""
    s = task.reset_noise_scale
    qpos = task.init_qpos + uniform(generator, -s, s, num, task.init_qpos.numel())
    qvel = task.init_qvel + uniform(generator, -s, s, num, task.init_qvel.numel())
    return qpos, qvel


class Ant:
    """Ant-v5: torso xy velocity (x rewarded), healthy reward, control and clipped contact-force costs."""

    name, gymnasium_id, frame_skip, max_episode_steps = "Ant", "Ant-v5", 5, 1000
    xml_file = "ant.xml"
    fields = ("qpos", "qvel", "xpos", "cfrc_ext")

    def __init__(
        self,
        model: mujoco.MjModel,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 0.5,
        contact_cost_weight: float = 5e-4,
        healthy_reward: float = 1.0,
        main_body: int | str = 1,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (0.2, 1.0),
        contact_force_range: tuple[float, float] = (-1.0, 1.0),
        reset_noise_scale: float = 0.1,
        exclude_current_positions_from_observation: bool = True,
        include_cfrc_ext_in_observation: bool = True,
    ) -> None:
        self.forward_reward_weight = forward_reward_weight
        self.ctrl_cost_weight = ctrl_cost_weight
        self.contact_cost_weight = contact_cost_weight
        self.healthy_reward = healthy_reward
        self.main_body = main_body if isinstance(main_body, int) else body_id(model, main_body)
        self.terminate_when_unhealthy = terminate_when_unhealthy
        self.healthy_z_range = healthy_z_range
        self.contact_force_range = contact_force_range
        self.reset_noise_scale = reset_noise_scale
        self.skip = 2 * int(exclude_current_positions_from_observation)
        self.include_cfrc_ext = include_cfrc_ext_in_observation
        self.init_qpos, self.init_qvel = init_state(model)

    def _contact_forces(self, state):
        return state["cfrc_ext"].clamp(*self.contact_force_range)  # [N, Bd, 6]

    def observe(self, state):
        parts = [state["qpos"][:, self.skip :], state["qvel"]]
        if self.include_cfrc_ext:
            parts.append(self._contact_forces(state)[:, 1:].flatten(1))
        return torch.cat(parts, dim=1)

    def tracked_position(self, state):
        return state["xpos"][:, self.main_body, :2].clone()  # [N, 2]

    def reward(self, state, action, position_before, dt):
        qpos, qvel = state["qpos"], state["qvel"]
        finite = torch.isfinite(qpos).all(dim=1) & torch.isfinite(qvel).all(dim=1)
        z = qpos[:, 2]
        healthy = finite & (z >= self.healthy_z_range[0]) & (z <= self.healthy_z_range[1])  # inclusive in v5
        x_velocity = (state["xpos"][:, self.main_body, 0] - position_before[:, 0]) / dt
        contact = self.contact_cost_weight * self._contact_forces(state).square().sum(dim=(1, 2))
        reward = (
            self.forward_reward_weight * x_velocity
            + self.healthy_reward * healthy.to(x_velocity.dtype)
            - control_cost(action, self.ctrl_cost_weight)
            - contact
        )
        return reward, ~healthy & self.terminate_when_unhealthy

    def reset_state(self, num, generator):
        s = self.reset_noise_scale
        qpos = self.init_qpos + uniform(generator, -s, s, num, self.init_qpos.numel())
        qvel = self.init_qvel + s * normal(generator, num, self.init_qvel.numel())
        return qpos, qvel


class Humanoid:
    """Humanoid-v5: centre-of-mass x velocity, healthy reward, control and contact costs."""

    name, gymnasium_id, frame_skip, max_episode_steps = "Humanoid", "Humanoid-v5", 5, 1000
    xml_file = "humanoid.xml"
    fields = ("qpos", "qvel", "xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")

    def __init__(
        self,
        model: mujoco.MjModel,
        forward_reward_weight: float = 1.25,
        ctrl_cost_weight: float = 0.1,
        contact_cost_weight: float = 5e-7,
        contact_cost_range: tuple[float, float] = (-math.inf, 10.0),
        healthy_reward: float = 5.0,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (1.0, 2.0),
        reset_noise_scale: float = 1e-2,
        exclude_current_positions_from_observation: bool = True,
    ) -> None:
        self.forward_reward_weight = forward_reward_weight
        self.ctrl_cost_weight = ctrl_cost_weight
        self.contact_cost_weight = contact_cost_weight
        self.contact_cost_range = contact_cost_range
        self.healthy_reward = healthy_reward
        self.terminate_when_unhealthy = terminate_when_unhealthy
        self.healthy_z_range = healthy_z_range
        self.reset_noise_scale = reset_noise_scale
        self.skip = 2 * int(exclude_current_positions_from_observation)
        self.init_qpos, self.init_qvel = init_state(model)

    def observe(self, state):
        parts = [
            state["qpos"][:, self.skip :],
            state["qvel"],
            state["cinert"][:, 1:].flatten(1),
            state["cvel"][:, 1:].flatten(1),
            state["qfrc_actuator"][:, 6:],
            state["cfrc_ext"][:, 1:].flatten(1),
        ]
        return torch.cat(parts, dim=1)

    def tracked_position(self, state):
        mass = state["body_mass"].to(state["xipos"].dtype)  # [N, Bd]
        center = (mass.unsqueeze(-1) * state["xipos"]).sum(dim=1) / mass.sum(dim=1, keepdim=True)  # [N, 3]
        return center[:, :2]

    def is_healthy(self, state):
        return _inside(state["qpos"][:, 2], *self.healthy_z_range)

    def reward(self, state, action, position_before, dt):
        reward, terminated = _walker_reward(self, state, action, position_before, dt)
        contact = self.contact_cost_weight * state["cfrc_ext"].square().sum(dim=(1, 2))
        return reward - contact.clamp(*self.contact_cost_range), terminated

    def reset_state(self, num, generator):
        return _uniform_reset(self, num, generator)
