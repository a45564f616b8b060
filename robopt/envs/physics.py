"""Physics backend interface shared by the CPU (``mujoco``) and GPU (``mujoco_warp``) native backends.

A backend owns N copies of one MJCF model and exposes their state as batched torch tensors. Tasks
(``robopt.envs.tasks``) read that state and never touch MuJoCo objects, so one task definition runs on
both backends.

Shapes: N envs, M selected envs, Q = nq, V = nv, U = nu (actuators), Bd = nbody, G = ngeom, S = nsite.

State fields a task may request (all ``[N, ...]``, read right after ``step``, exactly as Gymnasium reads
``MjData`` after ``mj_step``: positions/velocities are post-integration, body quantities are those MuJoCo
computed at the start of the last substep):
    ``qpos`` [N, Q], ``qvel`` [N, V], ``xpos`` [N, Bd, 3], ``xipos`` [N, Bd, 3], ``cinert`` [N, Bd, 10],
    ``cvel`` [N, Bd, 6], ``cfrc_ext`` [N, Bd, 6] (after ``mj_rnePostConstraint``), ``qfrc_actuator`` [N, V],
    ``qfrc_constraint`` [N, V], ``site_xpos`` [N, S, 3].

Per-env model parameters (domain randomization), absolute values, set with ``set_params``:
    ``body_mass`` [N, Bd], ``geom_friction`` [N, G, 3], ``dof_damping`` [N, V], ``actuator_gain`` [N, U]
    (``actuator_gainprm[:, 0]``; every ported task uses plain motors, whose force is gain * ctrl).
"""

from __future__ import annotations

import os
from typing import Protocol

import mujoco
import torch

STATE_FIELDS = (
    "qpos",
    "qvel",
    "xpos",
    "xipos",
    "cinert",
    "cvel",
    "cfrc_ext",
    "qfrc_actuator",
    "qfrc_constraint",
    "site_xpos",
)
PARAM_NAMES = ("body_mass", "geom_friction", "dof_damping", "actuator_gain")


class PhysicsBackend(Protocol):
    """N simulations of one model; state as batched torch tensors on ``device``."""

    num_envs: int
    device: torch.device
    mj_model: mujoco.MjModel  # the nominal host model (read-only for callers)

    def step(self, ctrl: torch.Tensor, nstep: int) -> torch.Tensor:
        """Set ctrl [N, U], advance ``nstep`` substeps; returns unstable [N] bool (rows MuJoCo had to reset)."""
        ...

    def state(self) -> dict[str, torch.Tensor]:
        """The requested state fields plus ``body_mass`` [N, Bd]; tensors are overwritten by the next call."""
        ...

    def set_state(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Reset rows env_ids [M] to qpos [M, Q], qvel [M, V] (mj_resetData, set, mj_forward, as Gymnasium)."""
        ...

    def set_params(self, env_ids: torch.Tensor, params: dict[str, torch.Tensor]) -> None:
        """Set per-env model parameters (absolute values, ``[M, ...]``) for rows env_ids [M]."""
        ...

    def nominal_params(self) -> dict[str, torch.Tensor]:
        """The model's own parameter values, unbatched (``body_mass`` [Bd], ...), float64 on CPU."""
        ...

    def close(self) -> None:
        """Release simulator resources."""
        ...


def gymnasium_asset(xml_file: str) -> str:
    """Path of an MJCF file shipped inside the installed gymnasium package (never copied into robopt)."""
    import gymnasium.envs.mujoco

    path = os.path.join(os.path.dirname(gymnasium.envs.mujoco.__file__), "assets", xml_file)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"gymnasium asset {xml_file!r} not found at {path}; is gymnasium[mujoco] installed?")
    return path


def check_fields(fields: tuple[str, ...]) -> None:
    """Raise ValueError naming any unknown state field."""
    unknown = [f for f in fields if f not in STATE_FIELDS]
    if unknown:
        raise ValueError(f"unknown physics state fields {unknown}; allowed: {', '.join(STATE_FIELDS)}")


def check_params(params: dict[str, torch.Tensor], nominal: dict[str, torch.Tensor], num_rows: int) -> None:
    """Raise ValueError if a parameter name or shape ``[M, *nominal_shape]`` is wrong, or a value is not finite."""
    for name, value in params.items():
        if name not in PARAM_NAMES:
            raise ValueError(f"unknown model parameter {name!r}; allowed: {', '.join(PARAM_NAMES)}")
        expected = (num_rows, *nominal[name].shape)
        if tuple(value.shape) != expected:
            raise ValueError(f"model parameter {name!r} must have shape {list(expected)}, got {list(value.shape)}")
        if not torch.isfinite(value).all():
            raise ValueError(f"model parameter {name!r} contains NaN or Inf")


def nominal_params_of(model: mujoco.MjModel) -> dict[str, torch.Tensor]:
    """Parameter values of a host MjModel, float64 CPU tensors (copies)."""
    return {
        "body_mass": torch.tensor(model.body_mass, dtype=torch.float64),
        "geom_friction": torch.tensor(model.geom_friction, dtype=torch.float64),
        "dof_damping": torch.tensor(model.dof_damping, dtype=torch.float64),
        "actuator_gain": torch.tensor(model.actuator_gainprm[:, 0], dtype=torch.float64),
    }
