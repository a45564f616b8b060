"""GPU physics backend on MuJoCo Warp (``mujoco_warp``); also runs, slowly, on warp's CPU device.

Optional extra ``[gpu]``: warp and mujoco_warp are imported only when a ``WarpBackend`` is built.

Shapes: N envs (worlds), M selected envs, Q = nq, V = nv, U = nu, Bd = nbody, G = ngeom.

State is shared with torch without copies (``wp.to_torch`` views of the Warp ``Data`` arrays) and is
float32. Per-env parameters live in batched Model arrays (leading dim N) and are propagated to derived
fields with ``mujoco_warp.set_const``. Warp launches run on torch's current CUDA stream so torch and warp
work stay ordered.

``graph=True`` (``env.kwargs.graph``) records one env step's substeps once and replays the recording at every
step: a CUDA graph on a GPU (captured on a side stream, replayed on torch's stream), warp's recorded replay in
C++ on its CPU device. Eager stepping launches every MuJoCo Warp kernel from Python (about 2,800 launches per env
step on Ant), which bounded PPO on an H200 to 5-23k env steps/s whatever the number of envs; the replay is
equal to eager stepping (tests/contracts/test_native_env_warp.py, on warp's CPU device).

MuJoCo Warp does not reset unstable worlds itself; ``step`` reports rows whose qpos/qvel are not finite
or exceed 1e10 (MuJoCo's own ``mjMAXVAL`` instability bound).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import sys

import mujoco
import torch

from robopt.envs.physics import check_body, check_fields, check_params, nominal_params_of

logger = logging.getLogger(__name__)
_MAX_VALUE = 1e10  # mjMAXVAL: MuJoCo treats larger qpos/qvel/qacc as unstable
# per-env parameters and the derived fields set_const recomputes from them
_BATCHED = (
    "body_mass",
    "body_inertia",
    "body_subtreemass",
    "body_invweight0",
    "dof_invweight0",
    "actuator_acc0",
    "geom_friction",
    "dof_damping",
    "actuator_gainprm",
    "actuator_biasprm",
    "body_ipos",
)

_announced = False


def _announce_kernels(wp, verbose: bool) -> None:
    """Once per process: warp's per-module load lines only when ``verbose``; one line on where kernels are cached."""
    global _announced
    if not verbose:
        wp.config.quiet = True  # no "Warp initialized" banner
        wp.config.log_level = max(wp.config.log_level, wp.LOG_WARNING)  # no "Module ... load ... took" lines
    if _announced:
        return
    _announced = True
    wp.init()
    print(
        f"mujoco_warp: compiling warp kernels on first use (minutes; cached in {wp.config.kernel_cache_dir}; "
        "env.kwargs.verbose=true lists them)",
        file=sys.stderr,
        flush=True,
    )


_SAVED_DATA = ("time", "qpos", "qvel", "act", "ctrl", "qacc_warmstart", "xfrc_applied")  # what the next step reads
_SAVED_PARAMS = (  # set_const recomputes the rest
    "body_mass",
    "body_inertia",
    "geom_friction",
    "dof_damping",
    "actuator_gainprm",
    "actuator_biasprm",
    "body_ipos",
)
# absent from older checkpoints: left as they are
_ADDED_LATER = ("xfrc_applied", "param_body_inertia", "param_actuator_biasprm", "param_body_ipos")


class WarpBackend:
    """N MuJoCo Warp worlds; implements ``robopt.envs.physics.PhysicsBackend``."""

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        fields: tuple[str, ...],
        device: str | torch.device = "cuda",
        nconmax: int | None = None,
        njmax: int | None = None,
        verbose: bool = False,
        graph: bool = False,
    ) -> None:
        try:
            import mujoco_warp as mjw
            import warp as wp
        except ImportError as error:
            raise ImportError("backend 'mujoco_warp' needs the [gpu] extra: pip install 'robopt[gpu]'") from error
        _announce_kernels(wp, verbose)
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        check_fields(fields)
        self._wp, self._mjw = wp, mjw
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._wp_device = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index}"
        if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:  # MuJoCo Warp has CG and Newton only
            model = copy.copy(model)
            model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
            logger.warning("mujoco_warp has no PGS solver; using Newton (results differ from the CPU backend)")
        self.mj_model, self.num_envs = model, num_envs
        self._rne = "cfrc_ext" in fields
        if not isinstance(graph, bool):
            raise ValueError(f"env.kwargs.graph must be true or false, got {graph!r}")
        self._graph, self._graphs = graph, {}  # nstep -> the recorded substeps
        with wp.ScopedDevice(self._wp_device):
            self._m = mjw.put_model(model, batch_sizes={name: num_envs for name in _BATCHED})
            self._d = mjw.make_data(model, nworld=num_envs, nconmax=nconmax, njmax=njmax)
        self._state = {f: wp.to_torch(getattr(self._d, f)) for f in fields}  # zero-copy views
        self._state["body_mass"] = wp.to_torch(self._m.body_mass)  # [N, Bd]
        self._ctrl = wp.to_torch(self._d.ctrl)  # [N, U]
        self._qpos, self._qvel = wp.to_torch(self._d.qpos), wp.to_torch(self._d.qvel)
        self._nominal = nominal_params_of(model)
        self._forward_all()  # initial derived quantities, as MjData after mj_forward

    def _scope(self):
        """Run warp on this device and, on CUDA, on torch's current stream."""
        wp = self._wp
        stack = contextlib.ExitStack()
        stack.enter_context(wp.ScopedDevice(self._wp_device))
        if self.device.type == "cuda":
            stack.enter_context(wp.ScopedStream(wp.stream_from_torch(torch.cuda.current_stream(self.device))))
        return stack

    def _substeps(self, nstep: int) -> None:
        """Advance ``nstep`` substeps (inside ``_scope``): eagerly, or by replaying the recording for ``nstep``."""
        if not self._graph:
            self._launch_substeps(nstep)
            return
        wp = self._wp
        recording = self._graphs.get(nstep)
        if recording is None:
            with contextlib.ExitStack() as stack:
                if self.device.type == "cuda":  # torch's default stream cannot capture: record on a side stream
                    stack.enter_context(wp.ScopedStream(wp.Stream(self._wp_device)))
                capture = stack.enter_context(wp.ScopedCapture(device=self._wp_device))
                self._launch_substeps(nstep)
            recording = self._graphs[nstep] = capture.graph
        if self.device.type == "cuda":
            wp.capture_launch(recording, stream=wp.stream_from_torch(torch.cuda.current_stream(self.device)))
        else:
            wp.capture_launch(recording)

    def _launch_substeps(self, nstep: int) -> None:
        for _ in range(nstep):
            self._mjw.step(self._m, self._d)
        if self._rne:  # Gymnasium calls mj_rnePostConstraint after every env step
            self._mjw.rne_postconstraint(self._m, self._d)

    def step(self, ctrl: torch.Tensor, nstep: int) -> torch.Tensor:
        """Set ctrl [N, U], advance ``nstep`` substeps; returns unstable [N] bool."""
        self._ctrl.copy_(ctrl)
        with self._scope():
            self._substeps(nstep)
        qpos, qvel = self._qpos, self._qvel
        finite = torch.isfinite(qpos).all(dim=1) & torch.isfinite(qvel).all(dim=1)
        bounded = (qpos.abs() <= _MAX_VALUE).all(dim=1) & (qvel.abs() <= _MAX_VALUE).all(dim=1)
        return ~(finite & bounded)

    def state(self) -> dict[str, torch.Tensor]:
        """Requested fields plus ``body_mass``; float32 views of the Warp arrays (overwritten by later steps)."""
        return self._state

    def set_state(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Reset rows env_ids [M] to qpos [M, Q], qvel [M, V] (reset_data, set, forward, as Gymnasium)."""
        ids = env_ids.to(self.device)
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[ids] = True
        with self._scope():
            self._mjw.reset_data(self._m, self._d, reset=self._wp.from_torch(mask))
        self._qpos[ids] = qpos.to(self.device, torch.float32)
        self._qvel[ids] = qvel.to(self.device, torch.float32)
        # forward runs on every world: other rows' derived quantities are refreshed from their unchanged
        # qpos/qvel/ctrl (warm start untouched), so their next step is unaffected.
        self._forward_all()

    def _forward_all(self) -> None:
        with self._scope():
            self._mjw.forward(self._m, self._d)

    def set_params(self, env_ids: torch.Tensor, params: dict[str, torch.Tensor]) -> None:
        """Set rows env_ids [M] of the batched Model arrays, then ``set_const``; call ``set_state`` next."""
        check_params(params, self._nominal, env_ids.numel())
        ids = env_ids.to(self.device)
        wp = self._wp
        for name, value in params.items():
            value = value.to(self.device, torch.float32)
            if name == "actuator_gain":
                wp.to_torch(self._m.actuator_gainprm)[ids, :, 0] = value
            elif name == "actuator_bias":
                wp.to_torch(self._m.actuator_biasprm)[ids, :, :3] = value
            else:
                wp.to_torch(getattr(self._m, name))[ids] = value
        with self._scope():
            self._mjw.set_const(self._m, self._d)

    def set_external_force(self, env_ids: torch.Tensor, body: int, force: torch.Tensor) -> None:
        """Set ``xfrc_applied[body]`` of worlds env_ids [M] to force [M, 6] (kept until set again or reset)."""
        check_body(body, self.mj_model.nbody)
        xfrc = self._wp.to_torch(self._d.xfrc_applied)  # [N, Bd, 6]
        xfrc[env_ids.to(self.device), body] = force.to(self.device, torch.float32)

    def nominal_params(self) -> dict[str, torch.Tensor]:
        """Nominal parameter values (``body_mass`` [Bd], ...), float64 CPU copies."""
        return {name: value.clone() for name, value in self._nominal.items()}

    def get_state(self) -> dict[str, torch.Tensor]:
        """Per-world time, qpos, qvel, act, ctrl and warm start, and the batched parameters, as CPU tensors."""
        wp = self._wp
        state = {name: wp.to_torch(getattr(self._d, name)).detach().cpu().clone() for name in _SAVED_DATA}
        params = {name: wp.to_torch(getattr(self._m, name)).detach().cpu().clone() for name in _SAVED_PARAMS}
        return {**state, **{f"param_{name}": value for name, value in params.items()}}

    def set_full_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore ``get_state``: parameters (then ``set_const``, only if they changed), then state, then ``forward``.

        ``set_const`` recomputes derived constants in float32, which differ in the last bits from those of
        ``put_model``; skipping it for unchanged parameters keeps a restored env bit-identical.
        """
        wp = self._wp
        changed = False
        for name in _SAVED_PARAMS:
            target = wp.to_torch(getattr(self._m, name))
            saved = state.get(f"param_{name}")
            if saved is None and f"param_{name}" in _ADDED_LATER:
                continue
            if tuple(saved.shape) != tuple(target.shape):
                raise ValueError(f"saved physics parameter {name!r} does not fit this model and N")
            if not torch.equal(saved.to(target.device, target.dtype), target):
                target.copy_(saved.to(target.device, target.dtype))
                changed = True
        if changed:
            with self._scope():
                self._mjw.set_const(self._m, self._d)
        for name in _SAVED_DATA:
            target = wp.to_torch(getattr(self._d, name))
            if name not in state and name in _ADDED_LATER:
                continue
            if tuple(state[name].shape) != tuple(target.shape):
                raise ValueError(
                    f"saved physics state {name!r} has shape {list(state[name].shape)}, not {list(target.shape)}"
                )
            target.copy_(state[name].to(target.device, target.dtype))
        self._forward_all()

    def close(self) -> None:
        """Nothing to release eagerly: Warp frees its arrays with this object."""
