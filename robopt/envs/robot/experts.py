"""Scripted experts of the shipped manipulation tasks (``task.expert``): demonstrations for behaviour cloning.

Shapes: N envs, A actions (the arm's joints, then the gripper's element), O objects.

Each expert is a Cartesian controller on MuJoCo's Jacobian of the end-effector site, with no learned part. Every
control step, per row: the desired tool pose (a position, the tool pointing down, a heading about the vertical) is
compared with the current one; the pose error, limited to ``max_step`` m and ``max_turn`` rad per step, becomes
joint displacements by damped least squares (dq = J^T (J J^T + damping^2 I)^-1 e, over the arm's joints), and the
action is the joint target q + dq in action units (the PD servo's (target - offset) / scale; with
``joint_position_delta`` actions, dq / scale), clipped to the bounds. The gripper element is +1 (open) or -1
(closed). What each expert aims for follows from the state each step: approach above the object, descend, close,
lift (and, for place, carry over the target, lower, open); for Push-T, go behind the block and push it.

The experts read the simulator's state (object poses), not the policy's observation, and they are deliberately
multimodal where the task is: the cube is taken with the fingers along either of its two horizontal axes, chosen
at random per episode; the T block is turned from either side of its bar. Pick and place choose from what the
policy observes; the Push-T expert also keeps two flags per row (turning or not, pushing or not), so a clone sees
most but not all of why it acts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mujoco
import numpy as np
import torch

from robopt.envs.robot.manipulation import inside_t, yaw_of
from robopt.envs.robot.signals import Signals, quat_multiply, yaw_quat


def _axis_angle(quat: np.ndarray) -> np.ndarray:
    """The rotation vector (rad) of a unit quaternion (w, x, y, z), the short way round."""
    if quat[0] < 0:
        quat = -quat
    sine = np.linalg.norm(quat[1:])
    if sine < 1e-9:
        return 2.0 * quat[1:]
    return quat[1:] / sine * 2.0 * math.atan2(sine, quat[0])


class CartesianArm:
    """Damped least-squares steps of a robot env's end effector (the module doc); one MjData for the kinematics."""

    def __init__(self, env, max_step: float = 0.04, max_turn: float = 0.2, damping: float = 0.05) -> None:
        task = env.task
        self.env, self.task, self.robot = env, task, task.robot
        self.model = env.physics.mj_model
        self.data = mujoco.MjData(self.model)
        self.site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, self.robot.end_effector)
        if self.site < 0:
            raise ValueError(
                f"the scripted experts need robot.end_effector to name a site, got {self.robot.end_effector!r}"
            )
        gripper = self.robot.gripper
        self.arm = [i for i in range(len(self.robot.joint_names)) if gripper is None or i != gripper.action_index]
        self.dofs = self.robot.dof_index.cpu().numpy()[self.arm]
        self.qpos_index = self.robot.qpos_index.cpu().numpy()
        self.scale = self.robot.action_scale.cpu().numpy()
        self.offset = self.robot.action_offset.cpu().numpy()
        self.low, self.high = env.action_low.cpu().numpy(), env.action_high.cpu().numpy()
        self.max_step, self.max_turn, self.damping = max_step, max_turn, damping
        self.delta = self.robot.action_type == "joint_position_delta"
        self.down = torch.tensor(self._tool_quat(self.robot.init_qpos.numpy()))  # the tool's default orientation

    def _tool_quat(self, qpos: np.ndarray) -> np.ndarray:
        self.data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, self.data)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
        return quat

    def heading(self) -> float:
        """The world heading (rad) of the fingers' closing axis at the default pose (the hand's y axis)."""
        self.data.qpos[:] = self.robot.init_qpos.numpy()
        mujoco.mj_kinematics(self.model, self.data)
        y_axis = self.data.site_xmat[self.site].reshape(3, 3)[:, 1]
        return math.atan2(y_axis[1], y_axis[0])

    def target_quat(self, yaw: torch.Tensor) -> np.ndarray:
        """Tool orientations [N, 4]: the default (pointing down) turned by ``yaw`` about the vertical."""
        return quat_multiply(yaw_quat(yaw), self.down.expand(yaw.shape[0], 4)).numpy()

    def actions(self, qpos: np.ndarray, position: np.ndarray, yaw: torch.Tensor, gripper: np.ndarray) -> np.ndarray:
        """Actions [N, A] that move each row's tool toward ``position`` [N, 3] (world) with heading ``yaw`` [N]."""
        quat_goal = self.target_quat(yaw)
        actions = np.zeros((qpos.shape[0], len(self.scale)))
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        quat, error_quat = np.zeros(4), np.zeros(4)
        for row in range(qpos.shape[0]):
            self.data.qpos[:] = qpos[row]
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, jacp, jacr, self.site)
            step = position[row] - self.data.site_xpos[self.site]
            length = np.linalg.norm(step)
            if length > self.max_step:
                step *= self.max_step / length
            mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
            mujoco.mju_mulQuat(error_quat, quat_goal[row], np.array([quat[0], -quat[1], -quat[2], -quat[3]]))
            turn = _axis_angle(error_quat)
            angle = np.linalg.norm(turn)
            if angle > self.max_turn:
                turn *= self.max_turn / angle
            jacobian = np.vstack([jacp[:, self.dofs], jacr[:, self.dofs]])  # [6, arm]
            error = np.concatenate([step, turn])
            solve = np.linalg.solve(jacobian @ jacobian.T + self.damping**2 * np.eye(6), error)
            move = jacobian.T @ solve  # [arm] joint displacement (rad)
            if self.delta:
                actions[row, self.arm] = move / self.scale[self.arm]
            else:
                actions[row, self.arm] = (
                    qpos[row, self.qpos_index[self.arm]] + move - self.offset[self.arm]
                ) / self.scale[self.arm]
        if self.robot.gripper is not None:
            actions[:, self.robot.gripper.action_index] = gripper
        return np.clip(actions, self.low, self.high)


def _signals(env) -> Signals:
    task = env.task
    return Signals(env.physics.state(), task.robot, task.context)


class PickExpert:
    """Lift (and place): take the object from above, the fingers along one of its horizontal axes (drawn per
    episode), lift it ``lift_height`` m; with ``place``, carry it over the target, lower it there and let go.

    Its choices are functions of what the policy observes (the tool, the object, the gripper's opening, the
    target), not of a hidden phase: a clone sees why the expert acts as it does. Per row: while the object is not
    held, go above it (``hover`` m) until within ``xy_tolerance`` of its axis, then down to the grasp height, and
    close once there; the object counts as held while the gripper is closed on something (its opening between
    ``held``) with the object between the fingers; held, go up (and, placing, over the target, then down onto it),
    and open once the object is on its target."""

    def __init__(
        self,
        env,
        seed: int,
        place: bool = False,
        lift_height: float = 0.15,
        hover: float = 0.06,
        xy_tolerance: float = 0.01,
        held: tuple[float, float] = (0.2, 0.8),
    ) -> None:
        self.env, self.arm, self.place = env, CartesianArm(env), place
        self.lift_height, self.hover, self.xy_tolerance, self.held = lift_height, hover, xy_tolerance, held
        self.generator = torch.Generator().manual_seed(seed)
        self.yaw = torch.zeros(env.num_envs, dtype=torch.float64)
        self.heading = self.arm.heading()
        self.object = env.task.robot.objects
        self.rest_z = float(self.object.rest_z[0])
        self.grip_z = self.rest_z + 0.008  # the tool site (the fingers' middle) just above the cube's centre

    def _new_episodes(self, rows: np.ndarray, object_yaw: torch.Tensor) -> None:
        """Draw each new episode's grasp: the fingers along the object's x or y axis (the nearer of the two
        equivalent hand headings)."""
        if rows.size == 0:
            return
        quarter = torch.randint(2, (rows.size,), generator=self.generator).to(torch.float64) * (math.pi / 2)
        yaw = object_yaw[rows] + quarter - self.heading
        self.yaw[rows] = torch.remainder(yaw + math.pi / 2, math.pi) - math.pi / 2  # a parallel gripper is symmetric

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        env = self.env
        s = _signals(env)
        qpos = s.state["qpos"].cpu().numpy()
        cube = s.objects_pos[:, 0].cpu().numpy()
        tool = s.ee_pos.cpu().numpy()
        opening = s.gripper_opening.cpu().numpy()
        self._new_episodes(np.nonzero(env.episode_steps.cpu().numpy() == 0)[0], yaw_of(s.objects_quat[:, 0]).cpu())
        between = np.linalg.norm(cube - tool, axis=1) < 0.02  # the object's centre between the fingers
        held = between & (opening > self.held[0]) & (opening < self.held[1])
        off_axis = np.linalg.norm(cube[:, :2] - tool[:, :2], axis=1)
        goal = cube.copy()  # above the object until over its axis, then down to the grasp height
        goal[:, 2] = np.where(off_axis > self.xy_tolerance, cube[:, 2] + self.hover, self.grip_z)
        at_grasp = (off_axis <= self.xy_tolerance) & (np.abs(tool[:, 2] - self.grip_z) < 0.006)
        close = at_grasp | held
        up = tool.copy()
        up[:, 2] = self.rest_z + self.lift_height  # held: straight up from where it is
        goal = np.where(held[:, None], up, goal)
        if self.place:
            target = s.command[:, :3].cpu().numpy() + s.base_frame_pos.cpu().numpy()
            in_hand = tool - cube  # where the tool is from the held object: it is the object that goes on the target
            over = np.linalg.norm(cube[:, :2] - target[:, :2], axis=1) <= self.xy_tolerance
            high = target + in_hand
            high[:, 2] = self.rest_z + self.lift_height
            carry = np.where(over[:, None], target + in_hand, high)
            raised = held & (tool[:, 2] > self.rest_z + 0.5 * self.lift_height)
            goal = np.where((held & (raised | over))[:, None], carry, goal)
            placed = np.linalg.norm(cube - target, axis=1) < 0.006
            close = close & ~placed
            goal = np.where(placed[:, None], target + [0.0, 0.0, 0.008 + self.hover], goal)
        actions = self.arm.actions(qpos, goal, self.yaw, np.where(close, -1.0, 1.0))
        return torch.as_tensor(actions, dtype=torch.float32, device=env.device)


class PushTExpert:
    """Push-T: push the T block onto its target pose with the closed fingers, one contact point per step.

    Per row, from the block's pose and the target's: while the yaw error is above ``turn_above`` rad, or above
    ``turn_below`` once the centre of mass is within ``near_enough`` m of its target (until it is below
    ``turn_below``), push across the bar near one end so that the block turns toward its target heading: from below
    the bar or from above its other end, drawn per episode (the task's multimodality), except that while the block
    is more than ``far`` m away the side whose push also moves it toward the target is taken. Otherwise push through
    the centre of mass toward the target's, the line moved sideways by ``twist`` m per rad of yaw error (at most 2
    cm) so that the push also turns it. The contact is where the line of push leaves the T for the last time (its
    outline, ``inside_t``); the tool goes to ``standoff`` m behind it, along the table when that way misses the
    block and else over it (``clearance`` m above its top), then pushes by the remaining error (at most
    ``push_step`` m a step), so pushes shrink as the block nears its target. The fingers stay closed and the hand
    keeps its default heading (the closed fingers' footprint: 1.6 x 2.4 cm)."""

    def __init__(
        self,
        env,
        seed: int,
        turn_above: float = 0.3,
        turn_below: float = 0.03,
        near_enough: float = 0.01,
        far: float = 0.03,
        twist: float = 0.2,
        standoff: float = 0.02,
        clearance: float = 0.03,
        push_step: float = 0.02,
    ) -> None:
        self.env, self.arm = env, CartesianArm(env)
        objects = env.task.robot.objects
        block = objects.objects[0]
        if block.shape != "t_block":
            raise ValueError(f"the push_t expert pushes a t_block; the task's first object is a {block.shape}")
        self.size = block.size
        bar, width, stem, height = self.size
        bar_area, stem_area = 4 * bar * width, 4 * width * stem
        self.com_y = bar_area * (stem + width) / (bar_area + stem_area)  # the centre of mass on the block's y axis
        self.push_z = objects.table_height + 0.028  # the fingertips (2.5 cm below the tool) 3 mm above the table
        self.safe_z = objects.table_height + 2 * height + clearance + 0.025
        self.turn_above, self.turn_below, self.near_enough, self.twist = turn_above, turn_below, near_enough, twist
        self.far = far
        self.standoff, self.push_step = standoff, push_step
        self.generator = torch.Generator().manual_seed(seed)
        self.turning = np.zeros(env.num_envs, dtype=bool)
        self.side = np.zeros(env.num_envs, dtype=bool)  # turning: push from below the bar (False) or above (True)
        self.pushing = np.zeros(env.num_envs, dtype=bool)  # on the line of push last step (a looser test to stay)
        self.yaw = torch.zeros(env.num_envs, dtype=torch.float64)

    def _new_episodes(self, rows: np.ndarray) -> None:
        if rows.size:
            self.side[rows] = torch.randint(2, (rows.size,), generator=self.generator).numpy().astype(bool)
            self.turning[rows] = self.pushing[rows] = False

    def _exit(self, start: np.ndarray, back: np.ndarray) -> np.ndarray:
        """Where the ray from ``start`` [2] along ``back`` [2] (the block's frame) leaves the T for the last time (1
        mm steps): the T is not convex, and a ray out of the stem can cross the bar again."""
        steps = start + np.arange(0, 0.25, 0.001)[:, None] * back  # [S, 2]
        inside = np.nonzero(inside_t(torch.as_tensor(steps), self.size).numpy())[0]
        return steps[int(inside[-1])] if inside.size else start

    def _clear(self, start: np.ndarray, end: np.ndarray, origin: np.ndarray, turn: np.ndarray) -> bool:
        """Whether the tool can go from ``start`` to ``end`` [2] (world) along the table without touching the block
        at ``origin`` turned by ``turn`` (the T grown by the fingers' half footprint and 5 mm)."""
        points = (start + np.linspace(0.0, 1.0, 25)[:, None] * (end - start) - origin) @ turn  # [25, 2] block frame
        return not bool(inside_t(torch.as_tensor(points), self.size, margin=0.017).any())

    def _contact(self, row: int, error: np.ndarray, yaw_error: float) -> tuple[np.ndarray, np.ndarray, float]:
        """The contact point and push direction in the block's frame, and how far to push (m)."""
        bar, width, stem, _ = self.size
        if self.turning[row]:  # across the bar at one end: a torque of the sign of the yaw error
            below = not self.side[row]
            if np.linalg.norm(error) > self.far:  # far off: the side whose push also moves the block toward it
                below = bool(error[1] >= 0.0)
            end = (bar - 0.012) * (1.0 if (yaw_error > 0) == below else -1.0)
            point = np.array([end, stem if below else stem + 2 * width])
            direction = np.array([0.0, 1.0 if below else -1.0])
            return point, direction, min(self.push_step, abs(yaw_error) * bar)
        distance = float(np.linalg.norm(error))
        direction = error / max(distance, 1e-9)
        normal = np.array([-direction[1], direction[0]])
        com = np.array([0.0, self.com_y])
        start = com - np.clip(self.twist * yaw_error, -0.02, 0.02) * normal  # off the centre: the push turns it too
        point = self._exit(start, -direction)
        return point, direction, min(self.push_step, distance)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        env = self.env
        s = _signals(env)
        self._new_episodes(np.nonzero(env.episode_steps.cpu().numpy() == 0)[0])
        qpos = s.state["qpos"].cpu().numpy()
        tool = s.ee_pos.cpu().numpy()
        block = s.objects_pos[:, 0].cpu().numpy()
        yaw = yaw_of(s.objects_quat[:, 0]).cpu().numpy()
        base = s.base_frame_pos.cpu().numpy()
        target = s.command[:, :2].cpu().numpy() + base[:, :2]
        target_yaw = torch.atan2(s.command[:, 4], s.command[:, 3]).cpu().numpy()
        goal = tool.copy()
        for row in range(env.num_envs):
            yaw_error = math.remainder(float(target_yaw[row] - yaw[row]), 2 * math.pi)
            cos, sin = math.cos(yaw[row]), math.sin(yaw[row])
            turn = np.array([[cos, -sin], [sin, cos]])  # the block's frame -> the world's
            tcos, tsin = math.cos(target_yaw[row]), math.sin(target_yaw[row])
            com_now = block[row, :2] + turn @ [0.0, self.com_y]
            com_goal = target[row] + np.array([[tcos, -tsin], [tsin, tcos]]) @ [0.0, self.com_y]
            error = turn.T @ (com_goal - com_now)  # in the block's frame
            there = np.linalg.norm(error) < self.near_enough  # in place: only the heading is left to correct
            if abs(yaw_error) > self.turn_above or (there and abs(yaw_error) > self.turn_below):
                self.turning[row] = True
            elif abs(yaw_error) < self.turn_below:
                self.turning[row] = False
            point, direction, push = self._contact(row, error, yaw_error)
            contact, along = block[row, :2] + turn @ point, turn @ direction  # world
            ready = contact - along * (self.standoff + 0.008)  # the tool's centre, its face 2 cm behind
            offset = tool[row, :2] - contact
            lateral = abs(offset @ np.array([-along[1], along[0]]))
            behind = offset @ along
            low = tool[row, 2] < self.push_z + 0.02  # the fingertips below the block's top
            near = float(np.linalg.norm(tool[row, :2] - ready))
            on_line = low and (
                (lateral < 0.02 and -0.045 < behind < 0.01)
                if self.pushing[row]
                else (lateral < 0.006 and -0.035 < behind < 0.004 and near < 0.012)
            )
            self.pushing[row] = on_line
            if on_line:  # on the line, behind the face: push
                goal[row, :2], goal[row, 2] = contact - along * 0.008 + along * push, self.push_z
            elif low and (near < 0.02 and behind < -0.008 or self._clear(tool[row, :2], ready, block[row, :2], turn)):
                goal[row, :2], goal[row, 2] = ready, self.push_z  # the way there along the table misses the block
            elif tool[row, 2] < self.safe_z - 0.02 and near > 0.008:  # elsewhere and low: up first
                goal[row, :2], goal[row, 2] = tool[row, :2], self.safe_z
            elif near > 0.008:  # over the block: across to above the ready point
                goal[row, :2], goal[row, 2] = ready, self.safe_z
            else:  # above it: down
                goal[row, :2], goal[row, 2] = ready, self.push_z
        actions = self.arm.actions(qpos, goal, self.yaw, np.full(env.num_envs, -1.0))
        return torch.as_tensor(actions, dtype=torch.float32, device=env.device)


EXPERTS: dict[str, Callable] = {
    "lift": lambda env, seed: PickExpert(env, seed),
    "place": lambda env, seed: PickExpert(env, seed, place=True),
    "push_t": lambda env, seed: PushTExpert(env, seed),
}


def task_expert(env, name: str, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """The scripted expert ``name`` acting in ``env`` (a robot env on the CPU mujoco backend)."""
    if name not in EXPERTS:
        raise ValueError(f"task.expert={name!r} is not a scripted expert; allowed: {', '.join(EXPERTS)}")
    if env.task.robot.objects is None or env.task.robot.end_effector == "":
        raise ValueError(f"the {name} expert needs task.scene.objects and robot.end_effector")
    return EXPERTS[name](env, seed)
