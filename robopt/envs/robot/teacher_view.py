"""A teacher's observation on a student's env: another task's observation terms, computed on the same robot, state and
context (command, last action) as the env's own task, for distillation (``algo.name: distill``).

Shapes: N envs, D' the teacher's observation width.

The teacher was trained with its own ``task.observations`` (a height scan, base velocity, contact forces: what a
simulator knows). The student's env computes its own observation for the student; this view computes the teacher's,
each step, from the simulator's state and the student task's context, with the teacher's scales, noise and clips (it
saw its observation noise in training). A teacher term with state across steps would need the env's updates and is
refused, as is a teacher observation with per-episode biases (the view does not see resets). A teacher's ``task.link``
(late and lost measurements) is not applied: the teacher labels the state as it is.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from robopt.envs.robot.config import TaskConfig
from robopt.envs.robot.link import LinkConfig
from robopt.envs.robot.signals import Signals
from robopt.envs.robot.task import TermTask


class TeacherView:
    """The teacher's observation [N, D'] on ``env`` (a robot env: ``NativeVecEnv`` over a ``TermTask``)."""

    def __init__(self, env, task: TaskConfig) -> None:
        while hasattr(env, "inner"):  # a wrapper (a history window): the view reads the simulator's env
            env = env.inner
        own = getattr(env, "task", None)
        if not isinstance(own, TermTask):
            raise ValueError(f"a teacher's view needs a robot env (env.id: robot), got {type(env).__name__}")
        view = TermTask(own.robot, replace(task, link=LinkConfig()), own.num_envs, own.device, own.dtype)
        for entry in view.observation_terms:
            if entry.info.stateful:
                raise ValueError(f"the teacher's observation term {entry.name} keeps state across steps; not supported")
            if entry.bias > 0:
                raise ValueError(f"the teacher's observation term {entry.name} has a per-episode bias; not supported")
        view.bind(env.physics.state())
        self.env, self.view, self.obs_dim = env, view, view.obs_width

    def observe(self) -> torch.Tensor:
        """The teacher's observation of the env's current state [N, D'] (float32, the env's device)."""
        own = self.env.task
        signals = Signals(self.env.physics.state(), own.robot, own.context)
        return self.view.frame_of(signals).to(self.env.device, torch.float32)
