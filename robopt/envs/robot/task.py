"""``TermTask``: a task made of terms over a robot, behind the ``Task`` protocol (``robopt.envs.tasks.base``).

Shapes: N envs, M rows being reset, A actuated joints (= action dim), F feet, C command dim, D observation dim,
P privileged dim.

The task's own state: a ``Context`` (the command the policy saw, its last two actions), the command generator's
(``robopt.envs.robot.commands``: values and timers), the state of each stateful term (air time...: the term object
keeps it), the per-episode observation biases and the current observation. The env calls the ``ContextTask`` hooks
in a fixed order (``robopt.envs.tasks.base.ContextTask``); stateless terms are pure functions. Noise draws come from
the task's step generator (seeded by the env), reset draws from the env's generator, so a seed gives the same run.
The reward is ``sum_i weight_i * term_i * dt``; an episode ends ``terminated`` when any termination term holds and
``truncated`` at the time limit (the env's ``max_episode_steps``). A policy that sees a window of past steps gets
it from ``policy.history`` (``robopt.envs.history``), the one window layout the export and the runtime share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from robopt.envs.render import CameraView
from robopt.envs.robot.command_curriculum import CommandCurriculum
from robopt.envs.robot.commands import Command, parse_command
from robopt.envs.robot.config import TaskConfig, parse_task_terms
from robopt.envs.robot.link import Link, topic_columns
from robopt.envs.robot.mirror import Mirror
from robopt.envs.robot.model import RobotModel
from robopt.envs.robot.signals import Context, Signals, quat_multiply, yaw_quat
from robopt.envs.robot.task_mirror import task_mirror
from robopt.envs.robot.task_scene import camera_view, check_target_on_table, render_targets
from robopt.envs.robot.term_options import OPTIONS, block_options, refuse_noise
from robopt.envs.robot.terms import Term
from robopt.envs.robot.terrain_rows import TerrainRows
from robopt.envs.tasks.base import uniform as draw_uniform

FIELDS = ("qpos", "qvel", "sensordata", "actuator_force")


class TermTask:
    """Observations, rewards, terminations and commands from terms (``task`` section) over a ``RobotModel``."""

    gymnasium_id = None

    def __init__(
        self, robot: RobotModel, config: TaskConfig, num_envs: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.sections = parse_task_terms(config)
        self.robot, self.config, self.num_envs = robot, config, num_envs
        self.device, self.dtype = torch.device(device), dtype
        self.name = f"Robot[{robot.name}]"
        self.frame_skip = robot.decimation
        self.dt = robot.control_dt
        self.max_episode_steps = max(1, round(config.episode_s / self.dt))
        self.fields = FIELDS
        self.observation_terms, self.critic_terms = self.sections["observations"], self.sections["critic"]
        self.reward_terms, self.termination_terms = self.sections["rewards"], self.sections["terminations"]
        self.success_terms = self.sections["success"]
        self.reports_success = bool(self.success_terms)  # the env reports info["is_success"]
        hold_s = self.success_terms[0].hold_s if self.success_terms else 0.0
        self._hold_steps = max(1, math.ceil(hold_s / self.dt - 1e-6))  # steps the success term must hold
        self.command: Command | None = parse_command(config.commands)
        self._check_needs()
        check_target_on_table(self)
        self.action_low, self.action_high = self._action_bounds()
        self.action_bounds = self.action_to_ctrl = None  # the env's actuator ranges and ctrl = action, unless delta
        if robot.action_type == "joint_position_delta":
            self.action_low, self.action_high = -torch.ones_like(self.action_low), torch.ones_like(self.action_high)
            self.action_bounds = (self.action_low, self.action_high)
            self.action_to_ctrl = self._delta_ctrl
        self.step_generator = torch.Generator(device=self.device)
        # each row's tile on a generated terrain, and the curriculum (robopt.envs.robot.terrain_rows)
        self.terrain = TerrainRows(robot.terrain, num_envs, config.episode_s) if robot.terrain is not None else None
        self._placed: tuple[torch.Tensor, torch.Tensor] | None = None  # tile centres and heights of the next reset
        self.command_curriculum = self._command_curriculum()
        self._robot_tensors()
        self.context: Context | None = None  # built by ``bind`` once a first state is known
        self._log: dict[str, torch.Tensor] = {}
        self.privileged_dim = 0

    # -- construction ----------------------------------------------------------------------------------------------
    def _check_needs(self) -> None:
        """Each term's declared needs, against this robot and command: one line naming what provides a missing one."""
        for section, terms in self.sections.items():
            for entry in terms:
                for need in entry.needs:
                    if not need.present(self):
                        raise ValueError(f"task.{section}.{entry.name} needs {need.advice}")
        if not self.observation_terms:
            raise ValueError("task.observations is empty: list the policy's observation terms")
        if not self.reward_terms:
            raise ValueError("task.rewards is empty: list the reward terms with their weights")

    def _command_curriculum(self) -> CommandCurriculum | None:
        curriculum = self.config.command_curriculum
        if not curriculum.reward:
            return None
        names = [entry.name for entry in self.reward_terms]
        if curriculum.reward not in names:
            raise ValueError(
                f"task.command_curriculum.reward: {curriculum.reward!r} is not a term of task.rewards "
                f"({', '.join(names)})"
            )
        return CommandCurriculum(curriculum, self.command, self.num_envs, self.max_episode_steps, self.device)

    @property
    def success(self) -> torch.Tensor:
        """Whether the success term has held for ``hold_s`` [N] bool, as of the last ``reward``."""
        return self.success_held >= self._hold_steps

    def _delta_ctrl(self, action: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """``joint_position_delta``: the actuators' ctrl [N, A] whose PD targets are the measured joint positions
        moved by scale * action (the servo's target is offset + scale * ctrl); a gripper's element is absolute."""
        robot = self.robot
        scale, offset = robot.action_scale.to(action), robot.action_offset.to(action)
        ctrl = (state["qpos"][:, robot.qpos_index].to(action) - offset) / scale + action
        if robot.gripper is not None:
            ctrl[:, robot.gripper.action_index] = action[:, robot.gripper.action_index]
        return ctrl

    # -- rendering (robopt.envs.render.NativeRowRenderer reads these; robopt.envs.robot.task_scene) ----------------
    def camera_view(self) -> CameraView | None:
        """A video's view: the table from across it when the task has a scene; None leaves the renderer's default."""
        return camera_view(self)

    def render_targets(self, row: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Where an object should go in ``row`` (``task_scene.render_targets``)."""
        return render_targets(self, row)

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
        if robot.objects is not None:
            for name in ("pos_index", "quat_index", "lin_index", "ang_index"):
                object.__setattr__(robot.objects, name, getattr(robot.objects, name).to(self.device))
        if robot.terrain is not None:
            object.__setattr__(robot, "terrain", robot.terrain.to(self.device, self.dtype))

    def bind(self, state: dict[str, torch.Tensor]) -> None:
        """Build the context and the stateful terms from a first state; every term is run once, so a hook that fails
        or returns the wrong shape is a one-line ValueError here, not a traceback in training."""
        n, a = self.num_envs, self.robot.qpos_index.numel()
        zeros = lambda *shape: torch.zeros(*shape, device=self.device, dtype=self.dtype)  # noqa: E731
        if self.command is not None:
            command = self.command.bind(n, self.device, self.dtype, self.dt)
        else:
            command = zeros(n, 0)
        self.context = Context(command, zeros(n, a), zeros(n, a))
        signals = Signals(state, self.robot, self.context)
        self._bound = {
            section: [(entry, _instance(entry, signals, section)) for entry in terms]
            for section, terms in self.sections.items()
        }
        self._stateful = [fn for bound in self._bound.values() for entry, fn in bound if entry.info.stateful]
        success = self._bound["success"]  # at most one term; its graded score, if it declares one (Push-T's coverage)
        self._success_score = getattr(success[0][1], "score", None) if success else None
        parts = self._run_checked("observations", signals)
        self.obs_width = sum(part.shape[1] for part in parts)
        self.term_widths = [part.shape[1] for part in parts]
        # per-element scale, noise, bias amplitude and clip of the observation [D]
        self._scale, self._noise, self._bias, self._clip = (
            option.to(self.device, self.dtype)
            for option in block_options(self.observation_terms, self.term_widths, "observations", OPTIONS)
        )
        self._noisy, self._biased = bool((self._noise > 0).any()), bool((self._bias > 0).any())
        self.link = None
        if self.config.link.active:  # late and lost measurements, by the topic each term is measured on
            topics = topic_columns(self.observation_terms, self.term_widths)
            self.link = Link(self.config.link, topics, zeros(n, self.obs_width))
        self.frame_scale = self._scale.cpu().to(torch.float64)  # [D], for the export sidecar
        self.bias = zeros(n, self.obs_width)  # [N, D] per-episode observation offsets
        self.frame = zeros(n, self.obs_width)  # [N, D] the current observation
        if self.critic_terms:
            self.critic_widths = [part.shape[1] for part in self._run_checked("critic", signals)]
            refuse_noise(self.critic_terms, self.critic_widths, "critic")
            scale, clip = block_options(self.critic_terms, self.critic_widths, "critic", ("scale", "clip"))
            self._critic_scale, self._critic_clip = scale.to(self.device, self.dtype), clip.to(self.device, self.dtype)
            self.privileged_dim = sum(self.critic_widths)
        self.success_held = torch.zeros(n, dtype=torch.long, device=self.device)  # [N] steps it has held
        self.success_score: torch.Tensor | None = None  # [N] the success term's score, where it has one
        for section in ("success", "rewards", "terminations"):
            for entry, fn in self._bound[section]:
                value = _call(entry, fn, signals, section)
                if tuple(value.shape) != (n,):
                    raise ValueError(
                        f"task.{section}.{entry.name} ({entry.source}) returned shape "
                        f"{list(value.shape)}; a {entry.kind} term returns [N] = [{n}]"
                    )

    def _run_checked(self, section: str, signals: Signals) -> list[torch.Tensor]:
        parts = []
        for entry, fn in self._bound[section]:
            value = _call(entry, fn, signals, section)
            if value.dim() != 2 or value.shape[0] != self.num_envs:
                raise ValueError(
                    f"task.{section}.{entry.name} ({entry.source}) returned shape {list(value.shape)}; "
                    f"an observation term returns [N, d] with N = {self.num_envs}"
                )
            parts.append(value)
        return parts

    def _values(self, section: str, signals: Signals) -> list[tuple[Term, torch.Tensor]]:
        return [(entry, fn(signals, **entry.params)) for entry, fn in self._bound[section]]

    def _signals(self, state: dict[str, torch.Tensor]) -> Signals:
        """This step's Signals: the one ``update_context`` made for the same state (its quantities computed once per
        step), or a new one."""
        signals = self._step_signals
        return signals if signals is not None and signals.state is state else Signals(state, self.robot, self.context)

    _step_signals: Signals | None = None
    link: Link | None = None  # late and lost measurements (task.link), built by ``bind``

    # -- the Task protocol -----------------------------------------------------------------------------------------
    def observe(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The observation [N, D]: the terms of ``task.observations`` in order, scaled, noised, biased, clipped."""
        return self.frame.clone()

    def tracked_position(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        return state["qpos"].new_zeros(state["qpos"].shape[0], 0)

    def reward(self, state, action, position_before, dt):
        """sum_i weight_i * term_i * dt [N] (without dt: ``rewards_per_second: false``) and terminated [N]."""
        signals = self._signals(state)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        log: dict[str, torch.Tensor] = {}
        for entry, holds in self._values("success", signals):
            self.success_held = torch.where(holds.bool(), self.success_held + 1, 0)
            if self._success_score is not None:
                self.success_score = self._success_score(signals, **entry.params)
            signals.success = self.success
            log["success_now"] = signals.success.to(self.dtype).mean()
        for entry, ended in self._values("terminations", signals):
            terminated = terminated | ended
            log[f"terminated/{entry.name}"] = ended.to(self.dtype).mean()
        signals.terminated = terminated
        total = torch.zeros(self.num_envs, device=self.device, dtype=self.dtype)
        scale = self.dt if self.config.rewards_per_second else 1.0
        curriculum = self.command_curriculum
        for entry, value in self._values("rewards", signals):
            if curriculum is not None and entry.name == curriculum.config.reward:
                curriculum.add(value)
            value = entry.weight * scale * value
            total = total + value
            log[f"reward/{entry.name}"] = value.mean()
        if self.terrain is not None:
            log.update(self.terrain.log())
        if curriculum is not None:
            log["command_scale"] = curriculum.scale
        if self.command is not None and "velocity" in self.command.provides:
            log["error/lin_vel_xy"] = (signals.command[:, :2] - signals.base_lin_vel[:, :2]).norm(dim=1).mean()
            log["error/ang_vel_z"] = (signals.command[:, 2] - signals.base_ang_vel[:, 2]).abs().mean()
        self._log = log
        return total, terminated

    def reset_state(self, num: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The default pose at the standing height, spread by ``task.reset``: qpos [M, Q], qvel [M, V] float64 CPU."""
        robot, spread = self.robot, self.config.reset
        qpos = robot.init_qpos.expand(num, -1).clone()
        qvel = torch.zeros(num, robot.model.nv, dtype=torch.float64)
        uniform = partial(draw_uniform, generator)  # U(low, high) [*shape] float64 on the CPU
        if "joint_pos" in spread:
            low, high = spread["joint_pos"]
            index = robot.qpos_index.cpu()
            qpos[:, index] += uniform(low, high, num, index.numel())
            joint_range = robot.joint_range.cpu().to(torch.float64)
            qpos[:, index] = qpos[:, index].clamp(joint_range[:, 0], joint_range[:, 1])
        if robot.objects is not None:
            for index, obj in enumerate(robot.objects.objects):
                pos = robot.objects.pos_index[index].cpu()
                qpos[:, pos[0]] = uniform(*obj.x, num)
                qpos[:, pos[1]] = uniform(*obj.y, num)
                qpos[:, pos[2]] = float(robot.objects.rest_z[index])
                qpos[:, robot.objects.quat_index[index].cpu()] = yaw_quat(uniform(*obj.yaw, num))
        if robot.floating:
            adr, dof = robot.free_qpos, robot.free_dof
            if spread.get("base_xy", 0) > 0:
                qpos[:, adr : adr + 2] += uniform(-spread["base_xy"], spread["base_xy"], num, 2)
            if spread.get("base_yaw", 0) > 0:
                yaw = uniform(-spread["base_yaw"], spread["base_yaw"], num)
                qpos[:, adr + 3 : adr + 7] = quat_multiply(yaw_quat(yaw), qpos[:, adr + 3 : adr + 7])
            if spread.get("base_velocity", 0) > 0:
                qvel[:, dof : dof + 6] = uniform(-spread["base_velocity"], spread["base_velocity"], num, 6)
            if self._placed is not None:  # on the terrain: each row's tile, at its platform's height
                rows, (centres, heights) = self._placed
                qpos[:, adr : adr + 2] += centres
                qpos[:, adr + 2] += heights
                self.terrain.started_at(rows, qpos[:, adr : adr + 2])
                self._placed = None
        return qpos, qvel

    def place_rows(self, rows: torch.Tensor, state: Callable[[], dict], ended: bool, generator) -> None:
        """Before ``reset_state`` of ``rows`` [M] (CPU long): the curricula see the episodes that ``ended`` (the
        command's ranges; on a terrain, their levels, from ``state()``, the simulator's state before the reset), and
        on a terrain the next ``reset_state`` puts the rows on their tiles."""
        if self.command_curriculum is not None:
            (self.command_curriculum.ended if ended else self.command_curriculum.restarted)(rows)
        if self.terrain is None:
            return
        if ended:
            adr = self.robot.free_qpos
            base_xy = state()["qpos"][rows.to(self.device), adr : adr + 2].cpu()
            command = self.context.command if self.context is not None else None
            if command is not None and self.command is not None and "velocity" in self.command.provides:
                speed = command[rows.to(self.device), :2].norm(dim=1).cpu()
            else:
                speed = torch.zeros(rows.numel(), dtype=torch.float64)
        else:
            base_xy, speed = torch.zeros(rows.numel(), 2, dtype=torch.float64), torch.zeros(rows.numel())
        self._placed = (rows, self.terrain.place(rows, base_xy, speed, ended, generator))

    # -- the ContextTask hooks -------------------------------------------------------------------------------------
    def seed_steps(self, generator: torch.Generator) -> None:
        self.step_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))

    def update_context(self, state: dict[str, torch.Tensor], action: torch.Tensor) -> None:
        """The action of this step (clipped to the bounds), then each stateful term's update (air time...)."""
        context = self.context
        context.previous_action = context.action
        context.action = torch.maximum(torch.minimum(action, self.action_high), self.action_low)
        self._step_signals = signals = Signals(state, self.robot, context)
        for stateful in self._stateful:
            stateful.update(signals)

    def advance(self, state: dict[str, torch.Tensor]) -> None:
        """New commands for rows whose interval ran out, then the new observation."""
        if self.command is not None:
            self.command.advance(self.step_generator)
        frame = self._frame(self._signals(state))
        self.frame = frame if self.link is None else self.link.step(frame, self.step_generator)
        self._step_signals = None

    def frame_of(self, signals: Signals) -> torch.Tensor:
        """This task's observation [N, D] of ``signals`` (another task's state and context: a teacher's view)."""
        return self._frame(signals)

    def _frame(self, signals: Signals) -> torch.Tensor:
        """The observation [N, D]: terms scaled, with noise U(-noise, noise) and the episode's bias, clipped."""
        frame = torch.cat([value for _, value in self._values("observations", signals)], dim=1) * self._scale
        if self._noisy:
            draw = torch.rand(frame.shape, generator=self.step_generator, device=self.device, dtype=frame.dtype)
            frame = frame + (2.0 * draw - 1.0) * self._noise
        if self._biased:
            frame = frame + self.bias
        return torch.maximum(torch.minimum(frame, self._clip), -self._clip)

    def reset_context(self, rows: torch.Tensor, state: dict[str, torch.Tensor], generator: torch.Generator) -> None:
        """Zero actions, stateful terms reset, fresh commands and biases, the first observation of the new episodes."""
        context = self.context
        context.action[rows] = 0.0
        context.previous_action[rows] = 0.0
        self.success_held[rows] = 0
        signals = Signals(state, self.robot, context)
        for stateful in self._stateful:
            stateful.reset(rows, signals)
        if self.command is not None:
            self.command.reset(rows, generator)
        if self._biased:
            draw = torch.rand(rows.numel(), self.obs_width, generator=generator, dtype=torch.float64)
            self.bias[rows] = ((2.0 * draw - 1.0).to(self.device, self.dtype)) * self._bias
        first = self._frame(signals)[rows]
        if self.link is not None:  # late and lost measurements start from the first one
            self.link.reset(rows, first, generator)
        self.frame[rows] = first

    def mirror(self) -> dict[str, Mirror]:
        """The left-right mirror of the observation, the action and the privileged block (``task_mirror``)."""
        return task_mirror(self)

    def privileged(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The critic's privileged block [N, P]: the terms of ``task.critic`` in order, scaled and clipped."""
        signals = Signals(state, self.robot, self.context)
        block = torch.cat([value for _, value in self._values("critic", signals)], dim=1) * self._critic_scale
        return torch.maximum(torch.minimum(block, self._critic_clip), -self._critic_clip)

    def log(self) -> dict[str, torch.Tensor]:
        return self._log

    def state_dict(self) -> dict:
        """Everything a step depends on besides the simulator: an exact resume."""
        context = self.context
        terms = {
            f"{section}.{entry.name}": _tensors(fn)
            for section, bound in self._bound.items()
            for entry, fn in bound
            if entry.info.stateful
        }
        return {
            "context": {
                "action": context.action.cpu().clone(),
                "previous_action": context.previous_action.cpu().clone(),
            },
            "bias": self.bias.cpu().clone(),
            "frame": self.frame.cpu().clone(),
            "command": self.command.state_dict() if self.command is not None else None,
            "terms": terms,
            "success": {"held": self.success_held.cpu().clone()},
            "step_generator": self.step_generator.get_state(),
            "terrain": self.terrain.state_dict() if self.terrain is not None else None,
            "command_curriculum": self.command_curriculum.state_dict() if self.command_curriculum is not None else None,
            "link": self.link.state_dict() if self.link is not None else None,
        }

    def load_state_dict(self, state: dict) -> None:
        if "terms" not in state:
            raise ValueError(
                "this checkpoint's robot task state predates declared terms (robopt before the term "
                "declarations); start the run anew rather than resuming it"
            )
        context = self.context
        context.action.copy_(state["context"]["action"])
        context.previous_action.copy_(state["context"]["previous_action"])
        self.bias.copy_(state["bias"])
        self.frame.copy_(state["frame"])
        if self.command is not None:
            self.command.load_state_dict(state["command"])
        for section, bound in self._bound.items():
            for entry, fn in bound:
                if entry.info.stateful:
                    for name, value in state["terms"][f"{section}.{entry.name}"].items():
                        setattr(fn, name, value.to(self.device))
        if "success" in state:
            self.success_held.copy_(state["success"]["held"])
        self.step_generator.set_state(state["step_generator"])
        if self.terrain is not None:
            if state.get("terrain") is None:
                raise ValueError("this checkpoint was saved without task.terrain; resume it with the same task section")
            self.terrain.load_state_dict(state["terrain"])
        if self.command_curriculum is not None:
            if state.get("command_curriculum") is None:
                raise ValueError(
                    "this checkpoint was saved without task.command_curriculum; resume it with the same task section"
                )
            self.command_curriculum.load_state_dict(state["command_curriculum"])
        if self.link is not None:
            if state.get("link") is None:
                raise ValueError("this checkpoint was saved without task.link; resume it with the same task section")
            self.link.load_state_dict(state["link"])


def _instance(entry: Term, signals: Signals, section: str) -> Callable:
    """What computes a term: its function, or a stateful term's object built on the first state (one line if the
    constructor fails)."""
    if not entry.info.stateful:
        return entry.fn
    try:
        return entry.fn(signals)
    except Exception as error:  # noqa: BLE001  (a user's stateful hook: one line)
        raise ValueError(
            f"task.{section}.{entry.name} ({entry.source}) failed to start on the first state: "
            f"{type(error).__name__}: {error}"
        ) from None


def _tensors(obj) -> dict[str, torch.Tensor]:
    """A stateful term's state: its tensor attributes, on the CPU."""
    return {name: value.detach().cpu().clone() for name, value in vars(obj).items() if isinstance(value, torch.Tensor)}


def _call(term: Term, fn: Callable, signals: Signals, section: str) -> torch.Tensor:
    """A term's value on a first state; what it raises, or a non-tensor, is a one-line ValueError."""
    try:
        value = fn(signals, **term.params)
    except Exception as error:  # noqa: BLE001  (a user's hook or a bad parameter value: one line)
        raise ValueError(
            f"task.{section}.{term.name} ({term.source}) failed on the first state: {type(error).__name__}: {error}"
        ) from None
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"task.{section}.{term.name} ({term.source}) returned {type(value).__name__}, not a tensor")
    return value
