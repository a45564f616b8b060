"""Balance and arm tasks matching Gymnasium v5: InvertedPendulum, InvertedDoublePendulum, Reacher, Pusher.

Each class mirrors ``gymnasium/envs/mujoco/<task>_v5.py``; keyword options keep Gymnasium's names.

Shapes: N envs, M reset rows, D obs dim, A action dim, Q = nq, V = nv, Bd = nbody.
"""

from __future__ import annotations

import mujoco
import torch

from robopt.envs.tasks.base import body_id, control_cost, init_state, no_position, normal, rejection_sample, uniform


class InvertedPendulum:
    """InvertedPendulum-v5: reward 1 per step while |pole angle| <= 0.2 and the state is finite."""

    name, gymnasium_id, frame_skip, max_episode_steps = "InvertedPendulum", "InvertedPendulum-v5", 2, 1000
    xml_file = "inverted_pendulum.xml"
    fields = ("qpos", "qvel")

    def __init__(self, model: mujoco.MjModel, reset_noise_scale: float = 0.01) -> None:
        self.reset_noise_scale = reset_noise_scale
        self.init_qpos, self.init_qvel = init_state(model)

    def observe(self, state):
        return torch.cat([state["qpos"], state["qvel"]], dim=1)  # [N, 4]

    tracked_position = staticmethod(no_position)

    def reward(self, state, action, position_before, dt):
        obs = self.observe(state)
        terminated = ~torch.isfinite(obs).all(dim=1) | (obs[:, 1].abs() > 0.2)
        return (~terminated).to(obs.dtype), terminated

    def reset_state(self, num, generator):
        s = self.reset_noise_scale
        qpos = self.init_qpos + uniform(generator, -s, s, num, self.init_qpos.numel())
        qvel = self.init_qvel + uniform(generator, -s, s, num, self.init_qvel.numel())
        return qpos, qvel


class InvertedDoublePendulum:
    """InvertedDoublePendulum-v5: alive bonus minus tip-distance and joint-velocity penalties; ends when tip y <= 1."""

    name, gymnasium_id = "InvertedDoublePendulum", "InvertedDoublePendulum-v5"
    frame_skip, max_episode_steps = 5, 1000
    xml_file = "inverted_double_pendulum.xml"
    fields = ("qpos", "qvel", "qfrc_constraint", "site_xpos")

    def __init__(self, model: mujoco.MjModel, healthy_reward: float = 10.0, reset_noise_scale: float = 0.1) -> None:
        self.healthy_reward = healthy_reward
        self.reset_noise_scale = reset_noise_scale
        self.init_qpos, self.init_qvel = init_state(model)

    def observe(self, state):
        qpos = state["qpos"]
        parts = [
            qpos[:, :1],  # cart x
            qpos[:, 1:].sin(),  # link angles
            qpos[:, 1:].cos(),
            state["qvel"].clamp(-10.0, 10.0),
            state["qfrc_constraint"][:, :1].clamp(-10.0, 10.0),
        ]
        return torch.cat(parts, dim=1)  # [N, 9]

    tracked_position = staticmethod(no_position)

    def reward(self, state, action, position_before, dt):
        tip = state["site_xpos"][:, 0]  # [N, 3]
        x, y = tip[:, 0], tip[:, 2]
        terminated = y <= 1.0
        v1, v2 = state["qvel"][:, 1], state["qvel"][:, 2]
        distance_penalty = 0.01 * x**2 + (y - 2.0) ** 2
        velocity_penalty = 1e-3 * v1**2 + 5e-3 * v2**2
        alive_bonus = self.healthy_reward * (~terminated).to(x.dtype)
        return alive_bonus - distance_penalty - velocity_penalty, terminated

    def reset_state(self, num, generator):
        s = self.reset_noise_scale
        qpos = self.init_qpos + uniform(generator, -s, s, num, self.init_qpos.numel())
        qvel = self.init_qvel + s * normal(generator, num, self.init_qvel.numel())
        return qpos, qvel


class Reacher:
    """Reacher-v5: negative fingertip-to-target distance minus control cost; goal drawn in a disc of radius 0.2."""

    name, gymnasium_id, frame_skip, max_episode_steps = "Reacher", "Reacher-v5", 2, 50
    xml_file = "reacher.xml"
    fields = ("qpos", "qvel", "xpos")

    def __init__(self, model: mujoco.MjModel, reward_dist_weight: float = 1.0, reward_control_weight: float = 1.0):
        self.reward_dist_weight = reward_dist_weight
        self.reward_control_weight = reward_control_weight
        self.fingertip, self.target = body_id(model, "fingertip"), body_id(model, "target")
        self.init_qpos, self.init_qvel = init_state(model)

    def _tip_to_target(self, state):
        return state["xpos"][:, self.fingertip] - state["xpos"][:, self.target]  # [N, 3]

    def observe(self, state):
        qpos = state["qpos"]
        theta = qpos[:, :2]
        parts = [theta.cos(), theta.sin(), qpos[:, 2:], state["qvel"][:, :2], self._tip_to_target(state)[:, :2]]
        return torch.cat(parts, dim=1)  # [N, 10]

    tracked_position = staticmethod(no_position)

    def reward(self, state, action, position_before, dt):
        reward_dist = -self._tip_to_target(state).norm(dim=1) * self.reward_dist_weight
        reward = reward_dist - control_cost(action, self.reward_control_weight)
        return reward, torch.zeros_like(reward, dtype=torch.bool)

    def reset_state(self, num, generator):
        qpos = uniform(generator, -0.1, 0.1, num, self.init_qpos.numel()) + self.init_qpos
        goal = rejection_sample(num, lambda k: uniform(generator, -0.2, 0.2, k, 2), lambda g: g.norm(dim=1) < 0.2)
        qpos[:, -2:] = goal
        qvel = self.init_qvel + uniform(generator, -0.005, 0.005, num, self.init_qvel.numel())
        qvel[:, -2:] = 0.0
        return qpos, qvel


class Pusher:
    """Pusher-v5: bring the arm tip near the object and the object to the goal at the origin."""

    name, gymnasium_id, frame_skip, max_episode_steps = "Pusher", "Pusher-v5", 5, 100
    xml_file = "pusher_v5.xml"
    fields = ("qpos", "qvel", "xpos")

    def __init__(
        self,
        model: mujoco.MjModel,
        reward_near_weight: float = 0.5,
        reward_dist_weight: float = 1.0,
        reward_control_weight: float = 0.1,
    ) -> None:
        self.reward_near_weight = reward_near_weight
        self.reward_dist_weight = reward_dist_weight
        self.reward_control_weight = reward_control_weight
        self.bodies = [body_id(model, name) for name in ("tips_arm", "object", "goal")]
        self.init_qpos, self.init_qvel = init_state(model)

    def observe(self, state):
        qpos, qvel, xpos = state["qpos"], state["qvel"], state["xpos"]
        return torch.cat([qpos[:, :7], qvel[:, :7], xpos[:, self.bodies].flatten(1)], dim=1)  # [N, 23]

    tracked_position = staticmethod(no_position)

    def reward(self, state, action, position_before, dt):
        tips_arm, target_object, goal = state["xpos"][:, self.bodies].unbind(dim=1)  # 3 x [N, 3]
        reward_near = -(target_object - tips_arm).norm(dim=1) * self.reward_near_weight
        reward_dist = -(target_object - goal).norm(dim=1) * self.reward_dist_weight
        reward = reward_dist - control_cost(action, self.reward_control_weight) + reward_near
        return reward, torch.zeros_like(reward, dtype=torch.bool)

    def reset_state(self, num, generator):
        qpos = self.init_qpos.repeat(num, 1)

        def sample(k: int) -> torch.Tensor:
            return torch.stack([uniform(generator, -0.3, 0.0, k), uniform(generator, -0.2, 0.2, k)], dim=1)

        qpos[:, -4:-2] = rejection_sample(num, sample, lambda c: c.norm(dim=1) > 0.17)  # goal at the origin
        qpos[:, -2:] = 0.0
        qvel = self.init_qvel + uniform(generator, -0.005, 0.005, num, self.init_qvel.numel())
        qvel[:, -4:] = 0.0
        return qpos, qvel
