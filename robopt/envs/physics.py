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
    ``qfrc_constraint`` [N, V], ``site_xpos`` [N, S, 3], ``sensordata`` [N, nsensordata] (the model's sensors, as
    MuJoCo computes them in the last substep), ``actuator_force`` [N, U].

Per-env model parameters (domain randomization), absolute values, set with ``set_params``:
    ``body_mass`` [N, Bd], ``body_inertia`` [N, Bd, 3] (diagonal, in the body's inertial frame),
    ``geom_friction`` [N, G, 3], ``dof_damping`` [N, V], ``actuator_gain`` [N, U] (``actuator_gainprm[:, 0]``;
    the ported tasks use plain motors, whose force is gain * ctrl), ``actuator_bias`` [N, U, 3]
    (``actuator_biasprm[:, :3]``: a servo's affine bias b0 + b1 * length + b2 * velocity), ``body_ipos`` [N, Bd, 3]
    (each body's centre of mass in its own frame).

External forces (random pushes): ``set_external_force`` sets rows' ``xfrc_applied`` of one body, a world-frame
wrench [force 3, torque 3] at the body's centre of mass that stays applied until set again or the row is reset.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
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
    "sensordata",
    "actuator_force",
)
PARAM_NAMES = (
    "body_mass",
    "geom_friction",
    "dof_damping",
    "actuator_gain",
    "body_inertia",
    "actuator_bias",
    "body_ipos",
)


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
        """Reset rows env_ids [M] to qpos [M, Q], qvel [M, V] (mj_resetData, set, mj_forward, as Gymnasium).

        The reset clears the rows' external forces.
        """
        ...

    def set_params(self, env_ids: torch.Tensor, params: dict[str, torch.Tensor]) -> None:
        """Set per-env model parameters (absolute values, ``[M, ...]``) for rows env_ids [M]."""
        ...

    def set_external_force(self, env_ids: torch.Tensor, body: int, force: torch.Tensor) -> None:
        """Apply wrench force [M, 6] (world frame: force, torque) at body ``body``'s centre of mass in rows env_ids."""
        ...

    def nominal_params(self) -> dict[str, torch.Tensor]:
        """The model's own parameter values, unbatched (``body_mass`` [Bd], ...), float64 on CPU."""
        ...

    def get_state(self) -> dict[str, torch.Tensor]:
        """Every row's full simulator state and current model parameters, as CPU tensors (for checkpoints)."""
        ...

    def set_full_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore ``get_state``'s output: the next ``step`` continues exactly where the saved one left off."""
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


# Warnings MuJoCo prints for Gymnasium's own assets that a robopt user cannot act on (substrings of the message).
KNOWN_ASSET_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)


def load_asset_model(xml_file: str) -> mujoco.MjModel:
    """Compile a Gymnasium MJCF asset without MuJoCo's deprecation warning for ``settotalmass``.

    The compiler attribute is cleared and the same rescaling is done on the compiled model: ``mj_setTotalmass``
    scales every body's mass and inertia to the total, then ``mj_setConst`` recomputes what depends on them.
    """
    spec = mujoco.MjSpec.from_file(gymnasium_asset(xml_file))
    total_mass = spec.compiler.settotalmass
    spec.compiler.settotalmass = -1.0
    model = spec.compile()
    if total_mass > 0:
        mujoco.mj_setTotalmass(model, total_mass)
        mujoco.mj_setConst(model, mujoco.MjData(model))
    return model


@contextlib.contextmanager
def quiet_known_asset_warnings() -> Iterator[None]:
    """Drop MuJoCo's ``KNOWN_ASSET_WARNINGS`` while the block runs; every other MuJoCo warning is still printed."""
    previous = mujoco.get_mju_user_warning()

    def handler(message: str) -> None:
        if any(known in message for known in KNOWN_ASSET_WARNINGS):
            return
        if previous is not None:
            previous(message)
        else:  # MuJoCo's default handler's format
            print(f"WARNING: {message}\n", file=sys.stderr, flush=True)

    mujoco.set_mju_user_warning(handler)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


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
        "body_inertia": torch.tensor(model.body_inertia, dtype=torch.float64),
        "actuator_bias": torch.tensor(model.actuator_biasprm[:, :3], dtype=torch.float64).reshape(model.nu, 3),
        "body_ipos": torch.tensor(model.body_ipos, dtype=torch.float64),
    }


def check_body(body: int, nbody: int) -> None:
    """Raise ValueError unless body is the index of a body other than the world (1 <= body < nbody)."""
    if not 1 <= body < nbody:
        raise ValueError(f"external force body index must be in [1, {nbody - 1}], got {body}")


def check_saved_state(state: dict[str, torch.Tensor], key: str, num_envs: int, width: int) -> None:
    """Raise ValueError unless ``state[key]`` is a saved ``[num_envs, width]`` array (same model, same N)."""
    value = state.get(key)
    if value is None or tuple(value.shape) != (num_envs, width):
        shape = None if value is None else list(value.shape)
        raise ValueError(
            f"saved physics state {key!r} has shape {shape}, expected {[num_envs, width]} (same task and N)"
        )
