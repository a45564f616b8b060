"""``TermTask``: a task made of terms over a robot, behind the ``Task`` protocol (``robopt.envs.tasks.base``).

Shapes: N envs, M rows being reset, A actuated joints (= action dim), F feet, C command dim, D observation dim
of one step, K history length, P privileged dim.

The task's own state is a ``Context`` (commands and their timers, the last two actions, joint velocities a step
ago, feet air time, per-episode observation biases, the observation history). The env calls the ``ContextTask``
hooks in a fixed order (``robopt.envs.tasks.base.ContextTask``); the terms themselves are pure. Noise draws come
from the task's step generator (seeded by the env), reset draws from the env's generator, so a seed gives the same
run. The reward is ``sum_i weight_i * term_i * dt``; an episode ends ``terminated`` when any termination term holds
and ``truncated`` at the time limit (the env's ``max_episode_steps``).
"""

from __future__ import annotations

import torch

from robopt.envs.robot.commands import Command, parse_command
from robopt.envs.robot.config import TaskConfig, parse_task_terms
from robopt.envs.robot.context import Context
from robopt.envs.robot.model import RobotModel
from robopt.envs.robot.signals import Signals, quat_multiply, yaw_quat
from robopt.envs.robot.terms import Term

FIELDS = ("qpos", "qvel", "sensordata", "actuator_force")


class TermTask:
    """Observations, rewards, terminations and commands from terms (``task`` section) over a ``RobotModel``."""

    gymnasium_id = None

    def __init__(self, robot: RobotModel, config: TaskConfig, num_envs: int, device: torch.device,
                 dtype: torch.dtype) -> None:  # fmt: skip
        terms = parse_task_terms(config)
        self.robot, self.config, self.num_envs = robot, config, num_envs
        self.device, self.dtype = torch.device(device), dtype
        self.name = f"Robot[{robot.name}]"
        self.frame_skip = robot.decimation
        self.dt = robot.control_dt
        self.max_episode_steps = max(1, round(config.episode_s / self.dt))
        self.fields = FIELDS
        self.observation_terms, self.critic_terms = terms["observations"], terms["critic"]
        self.reward_terms, self.termination_terms = terms["rewards"], terms["terminations"]
        self.command: Command | None = parse_command(config.commands)
        self._check_requirements()
        self.action_low, self.action_high = self._action_bounds()
        self.step_generator = torch.Generator(device=self.device)
        self._robot_tensors()
        self.context: Context | None = None  # built by ``bind`` once the observation width is known
        self._log: dict[str, torch.Tensor] = {}
        self.privileged_dim = 0

    # -- construction ----------------------------------------------------------------------------------------------
    def _check_requirements(self) -> None:
        have = {"feet": self.robot.num_feet > 0, "end_effector": bool(self.robot.end_effector),
                "floating": self.robot.floating, "velocity": getattr(self.command, "kind", "") == "velocity",
                "pose": getattr(self.command, "kind", "") == "pose"}  # fmt: skip
        advice = {"feet": "robot.feet", "end_effector": "robot.end_effector", "floating": "a base with a free joint",
                  "velocity": "task.commands.type: velocity", "pose": "task.commands.type: pose"}  # fmt: skip
        sections = (("observations", self.observation_terms), ("critic", self.critic_terms),
                    ("rewards", self.reward_terms), ("terminations", self.termination_terms))  # fmt: skip
        for section, terms in sections:
            for term in terms:
                for need in term.requires:
                    if not have[need]:
                        raise ValueError(f"task.{section}.{term.name} needs {advice[need]}")
        if not self.observation_terms:
            raise ValueError("task.observations is empty: list the policy's observation terms")
        if not self.reward_terms:
            raise ValueError("task.rewards is empty: list the reward terms with their weights")

    def _action_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        model = self.robot.model
        ctrl = torch.tensor(model.actuator_ctrlrange, dtype=self.dtype)  # [U, 2]
        limited = torch.tensor(model.actuator_ctrllimited, dtype=torch.bool)
        low = torch.where(limited, ctrl[:, 0], torch.full_like(ctrl[:, 0], -torch.inf))
        high = torch.where(limited, ctrl[:, 1], torch.full_like(ctrl[:, 1], torch.inf))
        index = self.robot.actuator_index
        return low[index].to(self.device), high[index].to(self.device)

    def _robot_tensors(self) -> None:
        """Move the robot's index tables next to the state once (Signals reads them every step)."""
        robot = self.robot
        for name in ("qpos_index", "dof_index", "actuator_index"):
            object.__setattr__(robot, name, getattr(robot, name).to(self.device))
        for name in ("joint_range", "default_pose", "foot_radius", "base_world_pos", "base_world_quat"):
            object.__setattr__(robot, name, getattr(robot, name).to(self.device, self.dtype))

    def bind(self, state: dict[str, torch.Tensor]) -> None:
        """Build the context from a first state: every term is run once, so a hook that fails or returns the wrong
        shape is a one-line ValueError here, not a traceback in training."""
        n, a, f = self.num_envs, self.robot.qpos_index.numel(), self.robot.num_feet
        zeros = lambda *shape: torch.zeros(*shape, device=self.device, dtype=self.dtype)  # noqa: E731
        command = zeros(n, self.command.dim if self.command else 0)
        self.context = Context(
            command,
            torch.zeros(n, dtype=torch.long, device=self.device),
            zeros(n, a),
            zeros(n, a),
            zeros(n, a),
            zeros(n, f),
            zeros(n, f),
            torch.zeros(n, f, dtype=torch.bool, device=self.device),
            zeros(n, 0),
            zeros(n, 1, 0),
        )
        signals = Signals(state, self.robot, self.context)
        parts = self._run_checked(self.observation_terms, signals, "observations")
        self.obs_width = sum(part.shape[1] for part in parts)
        self.term_widths = [part.shape[1] for part in parts]
        # per-element scale, noise, bias amplitude and clip of the frame [D]
        self._scale, self._noise, self._bias, self._clip = (
            torch.cat([_expand(getattr(term, name), part.shape[1], term) for term, part in
                       zip(self.observation_terms, parts, strict=True)]).to(self.device, self.dtype)
            for name in ("scale", "noise", "bias", "clip")
        )  # fmt: skip
        self._noisy, self._biased = bool((self._noise > 0).any()), bool((self._bias > 0).any())
        self.frame_scale = self._scale.cpu().to(torch.float64)  # [D], for the export sidecar
        self.context.bias = zeros(n, self.obs_width)
        self.context.history = zeros(n, self.config.history, self.obs_width)
        if self.critic_terms:
            self.privileged_dim = sum(part.shape[1] for part in self._run_checked(self.critic_terms, signals, "critic"))
        for section, terms in (("rewards", self.reward_terms), ("terminations", self.termination_terms)):
            for term in terms:
                value = _call(term, signals, section)
                if tuple(value.shape) != (n,):
                    raise ValueError(f"task.{section}.{term.name} ({term.source}) returned shape "
                                     f"{list(value.shape)}; a {term.kind} term returns [N] = [{n}]")  # fmt: skip

    def _run_checked(self, terms: tuple[Term, ...], signals: Signals, section: str) -> list[torch.Tensor]:
        parts = []
        for term in terms:
            value = _call(term, signals, section)
            if value.dim() != 2 or value.shape[0] != self.num_envs:
                raise ValueError(f"task.{section}.{term.name} ({term.source}) returned shape {list(value.shape)}; "
                                 f"an observation term returns [N, d] with N = {self.num_envs}")  # fmt: skip
            parts.append(value)
        return parts

    def _parts(self, signals: Signals) -> list[torch.Tensor]:
        return [term.fn(signals, **term.params) for term in self.observation_terms]

    # -- the Task protocol -----------------------------------------------------------------------------------------
    def observe(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The stacked history of observation frames [N, K * D] (the newest last)."""
        return self.context.history.flatten(1).clone()

    def tracked_position(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        return state["qpos"].new_zeros(state["qpos"].shape[0], 0)

    def reward(self, state, action, position_before, dt):
        """sum_i weight_i * term_i * dt [N] (without dt: ``rewards_per_second: false``) and terminated [N]."""
        signals = Signals(state, self.robot, self.context)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        log: dict[str, torch.Tensor] = {}
        for term in self.termination_terms:
            ended = term.fn(signals, **term.params)
            terminated = terminated | ended
            log[f"terminated/{term.name}"] = ended.to(self.dtype).mean()
        signals.terminated = terminated
        total = torch.zeros(self.num_envs, device=self.device, dtype=self.dtype)
        scale = self.dt if self.config.rewards_per_second else 1.0
        for term in self.reward_terms:
            value = term.weight * scale * term.fn(signals, **term.params)
            total = total + value
            log[f"reward/{term.name}"] = value.mean()
        if self.command is not None and self.command.kind == "velocity":
            log["error/lin_vel_xy"] = (signals.command[:, :2] - signals.base_lin_vel[:, :2]).norm(dim=1).mean()
            log["error/ang_vel_z"] = (signals.command[:, 2] - signals.base_ang_vel[:, 2]).abs().mean()
        self._log = log
        return total, terminated

    def reset_state(self, num: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The default pose at the standing height, spread by ``task.reset``: qpos [M, Q], qvel [M, V] float64 CPU."""
        robot, spread = self.robot, self.config.reset
        qpos = robot.init_qpos.expand(num, -1).clone()
        qvel = torch.zeros(num, robot.model.nv, dtype=torch.float64)
        uniform = lambda low, high, *shape: low + (high - low) * torch.rand(*shape, generator=generator,  # noqa: E731
                                                                             dtype=torch.float64)  # fmt: skip
        if "joint_pos" in spread:
            low, high = spread["joint_pos"]
            index = robot.qpos_index.cpu()
            qpos[:, index] += uniform(low, high, num, index.numel())
            joint_range = robot.joint_range.cpu().to(torch.float64)
            qpos[:, index] = qpos[:, index].clamp(joint_range[:, 0], joint_range[:, 1])
        if robot.floating:
            adr, dof = robot.free_qpos, robot.free_dof
            if spread.get("base_xy", 0) > 0:
                qpos[:, adr : adr + 2] += uniform(-spread["base_xy"], spread["base_xy"], num, 2)
            if spread.get("base_yaw", 0) > 0:
                yaw = uniform(-spread["base_yaw"], spread["base_yaw"], num)
                qpos[:, adr + 3 : adr + 7] = quat_multiply(yaw_quat(yaw), qpos[:, adr + 3 : adr + 7])
            if spread.get("base_velocity", 0) > 0:
                qvel[:, dof : dof + 6] = uniform(-spread["base_velocity"], spread["base_velocity"], num, 6)
        return qpos, qvel

    # -- the ContextTask hooks -------------------------------------------------------------------------------------
    def seed_steps(self, generator: torch.Generator) -> None:
        self.step_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))

    def update_context(self, state: dict[str, torch.Tensor], action: torch.Tensor) -> None:
        """The action of this step (clipped to the bounds), joint velocities a step ago, feet air time."""
        context = self.context
        context.previous_action = context.action
        context.action = torch.maximum(torch.minimum(action, self.action_high), self.action_low)
        if self.robot.num_feet:
            contact = Signals(state, self.robot, context).feet_contact
            context.air_time = context.air_time + self.dt
            landed = contact & ~context.in_contact
            context.landed_air_time = context.air_time * landed
            context.air_time = context.air_time * ~contact
            context.in_contact = contact
        context.command_timer = context.command_timer - 1

    def advance(self, state: dict[str, torch.Tensor]) -> None:
        """New commands for rows whose interval ran out, then the new observation frame into the history."""
        context = self.context
        if self.command is not None:
            rows = (context.command_timer <= 0).nonzero()[:, 0]
            if rows.numel() > 0:
                self._draw_commands(rows, self.step_generator)
        context.previous_joint_vel = Signals(state, self.robot, context).joint_vel.clone()
        frame = self._frame(Signals(state, self.robot, context))
        if self.config.history == 1:
            context.history[:, 0] = frame
        else:
            context.history = torch.cat([context.history[:, 1:], frame[:, None, :]], dim=1)

    def _draw_commands(self, rows: torch.Tensor, generator: torch.Generator) -> None:
        """Commands and their next resampling time for rows [M] (draws on the generator's device)."""
        context, command = self.context, self.command
        context.command[rows] = command.sample(rows.numel(), generator).to(self.device, self.dtype)
        low, high = command.resample_s
        seconds = low + (high - low) * torch.rand(rows.numel(), generator=generator, device=generator.device,
                                                  dtype=torch.float64)  # fmt: skip
        context.command_timer[rows] = torch.clamp(torch.round(seconds / self.dt), min=1).long().to(self.device)

    def _frame(self, signals: Signals) -> torch.Tensor:
        """One observation frame [N, D]: terms scaled, with noise U(-noise, noise) and the episode's bias, clipped."""
        frame = torch.cat(self._parts(signals), dim=1) * self._scale
        if self._noisy:
            draw = torch.rand(frame.shape, generator=self.step_generator, device=self.device, dtype=frame.dtype)
            frame = frame + (2.0 * draw - 1.0) * self._noise
        if self._biased:
            frame = frame + self.context.bias
        return torch.maximum(torch.minimum(frame, self._clip), -self._clip)

    def reset_context(self, rows: torch.Tensor, state: dict[str, torch.Tensor], generator: torch.Generator) -> None:
        """Fresh commands, zero actions and air time, new biases, a history filled with the first frame."""
        context = self.context
        for name in ("action", "previous_action", "air_time", "landed_air_time"):
            getattr(context, name)[rows] = 0.0
        signals = Signals(state, self.robot, context)
        if self.robot.num_feet:  # feet standing at the reset have not just landed at the first step
            context.in_contact[rows] = signals.feet_contact[rows]
        context.previous_joint_vel[rows] = signals.joint_vel[rows]
        if self.command is not None:
            self._draw_commands(rows, generator)
        if self._biased:
            draw = torch.rand(rows.numel(), self.obs_width, generator=generator, dtype=torch.float64)
            context.bias[rows] = ((2.0 * draw - 1.0).to(self.device, self.dtype)) * self._bias
        frame = self._frame(signals)[rows]
        context.history[rows] = frame[:, None, :].expand(-1, self.config.history, -1)

    def privileged(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        signals = Signals(state, self.robot, self.context)
        return torch.cat([term.fn(signals, **term.params) for term in self.critic_terms], dim=1)

    def log(self) -> dict[str, torch.Tensor]:
        return self._log

    def state_dict(self) -> dict:
        return {"context": self.context.state_dict(), "step_generator": self.step_generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.context.load_state_dict(state["context"])
        self.step_generator.set_state(state["step_generator"])


def _call(term: Term, signals: Signals, section: str) -> torch.Tensor:
    """A term's value on a first state; what it raises, or a non-tensor, is a one-line ValueError."""
    try:
        value = term.fn(signals, **term.params)
    except Exception as error:  # noqa: BLE001  (a user's hook or a bad parameter value: one line)
        raise ValueError(f"task.{section}.{term.name} ({term.source}) failed on the first state: "
                         f"{type(error).__name__}: {error}") from None  # fmt: skip
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"task.{section}.{term.name} ({term.source}) returned {type(value).__name__}, not a tensor")
    return value


def _expand(value, width: int, term: Term) -> torch.Tensor:
    """A term's option as [width] (a number for every element, or one per element)."""
    if isinstance(value, tuple):
        if len(value) != width:
            raise ValueError(f"task.observations.{term.name}.scale: {len(value)} values for a term of width {width}")
        return torch.tensor(value, dtype=torch.float64)
    return torch.full((width,), float(value), dtype=torch.float64)
