"""CPU physics backend: one MjModel, N MjData, stepped in C on a small thread pool.

Shapes: N envs, M selected envs, Q = nq, V = nv, U = nu, Bd = nbody (see ``robopt.envs.physics``).

Threading: env rows are split into small contiguous chunks (4 per thread) that the calling thread and
``num_threads - 1`` pool threads take in turn from a shared counter; each chunk is stepped by a Python loop
calling ``mujoco.mj_step(model, data, nstep)``, which releases the GIL while it runs, so the threads' C work
overlaps and only the short per-env Python glue (~2 us) is serialized. Taking chunks dynamically (as
``mujoco.rollout`` does) keeps a thread that the OS does not schedule, on a loaded machine, from holding
back the whole step. ``benchmarks/env_throughput.py``
compares this with ``mujoco.rollout``: rollout cannot be used here because it returns only the
integration state (no ``xpos``, ``cfrc_ext``...) and drops the solver warm start between calls, which
breaks exact parity with Gymnasium.

Per-env model parameters: the N MjData share the nominal MjModel until a row gets its own parameters;
that row then gets a private ``copy.copy`` of the model (a few KB to ~100 KB), edited in place followed by
``mj_setConst``. Swapping parameters into a shared model before each env's step would race between
threads, so private copies are both the correct and the fast choice.

Instability: MuJoCo resets an MjData itself (and prints a warning) when qpos/qvel/qacc become NaN or huge.
``step`` detects that from the simulation clock (time did not advance by ``nstep * timestep``) or from a
non-finite state, and reports the row as unstable.
"""

from __future__ import annotations

import copy
import itertools
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np
import torch

from robopt.envs.physics import check_body, check_fields, check_params, check_saved_state, nominal_params_of

_STATE_SPEC = mujoco.mjtState.mjSTATE_TIME | mujoco.mjtState.mjSTATE_QPOS | mujoco.mjtState.mjSTATE_QVEL
# Everything mj_step reads: time, qpos, qvel, act, warm start, ctrl and the other user inputs (checkpoints)
_FULL_SPEC = mujoco.mjtState.mjSTATE_INTEGRATION


class MujocoBackend:
    """N MjData over one MjModel on CPU threads; implements ``robopt.envs.physics.PhysicsBackend``."""

    def __init__(
        self, model: mujoco.MjModel, num_envs: int, fields: tuple[str, ...], num_threads: int = 2, device="cpu"
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {num_threads}")
        check_fields(fields)
        self.device = torch.device(device)
        if self.device.type != "cpu":
            raise ValueError(f"the 'mujoco' backend simulates on CPU; device must be 'cpu', got {device!r}")
        self.mj_model = model
        self.num_envs = num_envs
        nq, nv = model.nq, model.nv
        self._models = [model] * num_envs
        self._datas = [mujoco.MjData(model) for _ in range(num_envs)]
        self._ctrl = np.zeros((num_envs, model.nu))  # [N, U]
        self._ctrl_views = [d.ctrl for d in self._datas]
        self._state_buf = np.zeros((num_envs, mujoco.mj_stateSize(model, _STATE_SPEC)))  # [N, 1 + Q + V]
        self._rne = "cfrc_ext" in fields
        extra = [f for f in fields if f not in ("qpos", "qvel")]
        self._buffers = {f: np.zeros((num_envs, *getattr(self._datas[0], f).shape)) for f in extra}
        self._copies = [[(self._buffers[f][i], getattr(d, f)) for f in extra] for i, d in enumerate(self._datas)]
        self._body_mass = np.tile(model.body_mass, (num_envs, 1))  # [N, Bd]
        self._state = {f: torch.from_numpy(buf) for f, buf in self._buffers.items()}
        self._state["qpos"] = torch.from_numpy(self._state_buf[:, 1 : 1 + nq])
        self._state["qvel"] = torch.from_numpy(self._state_buf[:, 1 + nq : 1 + nq + nv])
        self._state["body_mass"] = torch.from_numpy(self._body_mass)
        num_threads = min(num_threads, num_envs)
        bounds = np.linspace(0, num_envs, min(4 * num_threads, num_envs) + 1).astype(int)
        self._chunks = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
        self._pool = ThreadPoolExecutor(num_threads - 1) if num_threads > 1 else None
        self._num_helpers = num_threads - 1
        self._nominal = nominal_params_of(model)

    def step(self, ctrl: torch.Tensor, nstep: int) -> torch.Tensor:
        """Set ctrl [N, U] and advance ``nstep`` substeps; returns unstable [N] bool."""
        self._ctrl[:] = ctrl.detach().to("cpu", torch.float64).numpy()
        expected_time = self._state_buf[:, 0] + nstep * self.mj_model.opt.timestep  # [N]
        counter = itertools.count()  # next() on it is atomic under the GIL
        futures = [self._pool.submit(self._take_chunks, counter, nstep) for _ in range(self._num_helpers)]
        self._take_chunks(counter, nstep)
        for future in futures:
            future.result()
        clock_jumped = np.abs(self._state_buf[:, 0] - expected_time) > 0.5 * self.mj_model.opt.timestep
        unstable = clock_jumped | ~np.isfinite(self._state_buf).all(axis=1)
        return torch.from_numpy(unstable)

    def _take_chunks(self, counter: itertools.count, nstep: int) -> None:
        chunks = self._chunks
        for index in counter:
            if index >= len(chunks):
                return
            self._step_rows(*chunks[index], nstep)

    def _step_rows(self, lo: int, hi: int, nstep: int) -> None:
        models, datas, ctrl, ctrl_views = self._models, self._datas, self._ctrl, self._ctrl_views
        state_buf, copies, rne = self._state_buf, self._copies, self._rne
        for i in range(lo, hi):
            model, data = models[i], datas[i]
            np.copyto(ctrl_views[i], ctrl[i])
            mujoco.mj_step(model, data, nstep)
            if rne:  # Gymnasium calls it after every step so that cfrc_ext is filled in
                mujoco.mj_rnePostConstraint(model, data)
            mujoco.mj_getState(model, data, state_buf[i], _STATE_SPEC)
            for destination, source in copies[i]:
                np.copyto(destination, source)

    def state(self) -> dict[str, torch.Tensor]:
        """Requested fields plus ``body_mass``; CPU float64 views overwritten by the next step/reset."""
        return self._state

    def set_state(self, env_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Reset rows env_ids [M] to qpos [M, Q], qvel [M, V] (mj_resetData, set, mj_forward, as Gymnasium)."""
        qpos_np = qpos.detach().to("cpu", torch.float64).numpy()
        qvel_np = qvel.detach().to("cpu", torch.float64).numpy()
        for row, i in enumerate(env_ids.tolist()):
            model, data = self._models[i], self._datas[i]
            mujoco.mj_resetData(model, data)
            data.qpos[:] = qpos_np[row]
            data.qvel[:] = qvel_np[row]
            mujoco.mj_forward(model, data)  # no mj_rnePostConstraint: Gymnasium's reset leaves cfrc_ext at 0
            mujoco.mj_getState(model, data, self._state_buf[i], _STATE_SPEC)
            for destination, source in self._copies[i]:
                np.copyto(destination, source)

    def set_params(self, env_ids: torch.Tensor, params: dict[str, torch.Tensor]) -> None:
        """Give rows env_ids [M] their own parameter values ([M, ...] each); call ``set_state`` on them next."""
        ids = env_ids.tolist()
        check_params(params, self._nominal, len(ids))
        values = {name: value.detach().to("cpu", torch.float64).numpy() for name, value in params.items()}
        for row, i in enumerate(ids):
            if self._models[i] is self.mj_model:
                self._models[i] = copy.copy(self.mj_model)
            model = self._models[i]
            for name, value in values.items():
                if name == "actuator_gain":
                    model.actuator_gainprm[:, 0] = value[row]
                elif name == "actuator_bias":
                    model.actuator_biasprm[:, :3] = value[row]
                else:
                    getattr(model, name)[:] = value[row]
            mujoco.mj_setConst(model, self._datas[i])  # body_subtreemass, dof_M0... follow the new masses
            self._body_mass[i] = model.body_mass

    def set_external_force(self, env_ids: torch.Tensor, body: int, force: torch.Tensor) -> None:
        """Set ``data.xfrc_applied[body]`` of rows env_ids [M] to force [M, 6] (kept until set again or reset)."""
        check_body(body, self.mj_model.nbody)
        values = force.detach().to("cpu", torch.float64).numpy()
        for row, i in enumerate(env_ids.tolist()):
            self._datas[i].xfrc_applied[body] = values[row]

    def nominal_params(self) -> dict[str, torch.Tensor]:
        """Nominal parameter values (``body_mass`` [Bd], ``geom_friction`` [G, 3], ...), float64 CPU copies."""
        return {name: value.clone() for name, value in self._nominal.items()}

    def get_state(self) -> dict[str, torch.Tensor]:
        """Each row's ``mjSTATE_INTEGRATION`` state [N, S] and, for rows with their own model, its parameters."""
        model = self.mj_model
        full = np.zeros((self.num_envs, mujoco.mj_stateSize(model, _FULL_SPEC)))
        for i, data in enumerate(self._datas):
            mujoco.mj_getState(self._models[i], data, full[i], _FULL_SPEC)
        own = [i for i, m in enumerate(self._models) if m is not model]
        rows = [nominal_params_of(self._models[i]) for i in own]
        params = {name: torch.stack([row[name] for row in rows]) for name in self._nominal} if own else {}
        return {
            "integration": torch.from_numpy(full),
            "own_model_rows": torch.tensor(own, dtype=torch.int64),
            "own_model_params": params,
        }

    def set_full_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore ``get_state``: private models (with their parameters), then every row's integration state."""
        check_saved_state(state, "integration", self.num_envs, mujoco.mj_stateSize(self.mj_model, _FULL_SPEC))
        own = state["own_model_rows"]
        if own.numel() > 0:
            self.set_params(own, state["own_model_params"])
        full = state["integration"].numpy()
        for i, data in enumerate(self._datas):
            model = self._models[i]
            mujoco.mj_setState(model, data, full[i], _FULL_SPEC)
            mujoco.mj_forward(model, data)
            mujoco.mj_getState(model, data, self._state_buf[i], _STATE_SPEC)
            for destination, source in self._copies[i]:
                np.copyto(destination, source)
        self._ctrl[:] = np.stack([d.ctrl for d in self._datas])

    def close(self) -> None:
        """Stop the worker threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
