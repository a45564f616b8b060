"""Domain randomization of a native env: model parameters, actuator delay and noise, observation noise, pushes.

Shapes: N envs, M rows being reset, A action dim (= U actuators), D obs dim, Bd bodies, G geoms, V dofs,
L = max delay + 1 (action ring buffer), P privileged dim.

Every knob is off by default and is per env. Draws come from the env's own generators, so a seed reproduces
them and ``state_dict`` resumes them exactly:

- at each reset of a row, on CPU from the env's generator, only for the knobs that are on and in this order:
  the parameter scales (one U(low, high) per element; ``body_inertia`` reuses ``body_mass``'s scale of its
  body), the delay ``d ~ U{low..high}``, the idle steps before the first push;
- at each step, on the env device from the step generator (seeded from the env's generator when the env is
  built and at ``reset(seed)``): action noise, the magnitude, direction and following wait of pushes that
  start, observation noise.

Order inside a step: the policy's action goes into the delay ring buffer; the action given ``d`` steps ago
(zeros in the first ``d`` steps of an episode) gets N(0, action_noise^2) noise and is clipped to the action
bounds; the simulator applies it through the actuator gain (``actuator_gain`` / ``motor_strength``) while
the push force acts on ``push_body``; the returned obs and ``info["final_obs"]`` (equal values for rows
that did not end) carry N(0, obs_noise^2) noise. The task's reward sees the applied action.

The config (``Randomization``, its keys and their checks) is ``robopt.envs.randomization_config``.
"""

from __future__ import annotations

import math

import mujoco
import torch

from robopt.envs.randomization_config import MAX_DELAY, SCALED_PARAMS, Randomization

__all__ = ["MAX_DELAY", "SCALED_PARAMS", "Randomization", "Randomizer", "push_body_id"]


def push_body_id(config: Randomization, model: mujoco.MjModel, key: str = "push_body") -> int:
    """Index of ``config.push_body`` (or ``com_body``; default: body 1, the world's first child); ValueError naming
    the bodies."""
    name = getattr(config, key)
    if name is None:
        return 1
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) for i in range(1, model.nbody)]
    if name not in names:
        raise ValueError(f"randomization {key}={name!r}: unknown body; allowed: {', '.join(names)}")
    return names.index(name) + 1


class Randomizer:
    """The per-env randomization state of one native env (draws, delay buffer, pushes); see the module doc.

    ``privileged()`` [N, P] float32 is made of these blocks, each present only when its knob is on, in order:
    ``body_mass`` scales [Bd - 1] (world body left out; inertia uses the same), ``geom_friction`` scales
    [G * 3] (geom-major), ``dof_damping`` scales [V], ``actuator_gain`` (motor strength) scales [U], the
    centre-of-mass offset [3] (m), the action delay in ticks [1], and 1.0 / 0.0 whether the next step is pushed
    [1]. P = 0 when no such knob is on.
    """

    def __init__(
        self,
        config: Randomization,
        model: mujoco.MjModel,
        nominal: dict[str, torch.Tensor],
        device: torch.device,
        action_dtype: torch.dtype,
        action_bounds: tuple[torch.Tensor, torch.Tensor],
        num_envs: int,
    ) -> None:
        self.config, self.device, self.num_envs = config, device, num_envs
        self.push_body = push_body_id(config, model) if config.pushes else None
        self.com_body = push_body_id(config, model, "com_body") if config.moves_com else None
        self.com_offset = torch.zeros(num_envs, 3, dtype=torch.float64)  # [N, 3] metres
        self.action_low, self.action_high = (bound.to(device, action_dtype) for bound in action_bounds)
        self.scales = {name: torch.ones(num_envs, *nominal[name].shape, dtype=torch.float64) for name in SCALED_PARAMS}
        self._scaled = [name for name in SCALED_PARAMS if getattr(config, name) != (1.0, 1.0)]
        self.delay = torch.zeros(num_envs, dtype=torch.int64, device=device)  # [N] ticks
        history = config.action_delay[1] + 1  # L
        self.action_buffer = torch.zeros(num_envs, history, model.nu, dtype=action_dtype, device=device)  # [N, L, A]
        self.pointer = 0  # the buffer slot the next action goes to
        self.push_timer = torch.zeros(num_envs, dtype=torch.int64, device=device)  # [N] idle steps before a push
        self.push_left = torch.zeros(num_envs, dtype=torch.int64, device=device)  # [N] steps of the push left
        self.push_force = torch.zeros(num_envs, 6, dtype=torch.float64, device=device)  # [N, 6] world-frame wrench
        self.pushing = torch.zeros(num_envs, dtype=torch.bool, device=device)  # [N] force set in the simulator
        self.step_generator = torch.Generator(device=device)
        self.rows = torch.arange(num_envs, device=device)
        self._scale_block = self._scale_rows(torch.arange(num_envs))  # [N, S] privileged scales on the device
        self.privileged_dim = self._scale_block.shape[1] + (config.action_delay[1] > 0) + config.pushes

    @property
    def acts_on_actions(self) -> bool:
        """Whether ``action`` changes anything (delay or action noise on)."""
        return self.config.action_delay[1] > 0 or self.config.action_noise > 0

    def seed_steps(self, generator: torch.Generator) -> None:
        """Seed the step generator from one draw of the env's generator (only when a per-step knob is on)."""
        if self.config.noisy or self.config.pushes:
            self.step_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))

    def draw_params(
        self, env_ids: torch.Tensor, base: dict[str, torch.Tensor], generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        """Fresh scales for rows env_ids [M] (CPU long); the absolute parameters [M, ...] they run with.

        Only knobs that are on draw from ``generator``: rows given their own base values with ``set_model_params``
        and no randomization reset from the same noise stream as nominal rows.
        """
        params = {}
        for name in SCALED_PARAMS:
            low, high = getattr(self.config, name)
            rows = base[name][env_ids]
            if (low, high) == (1.0, 1.0):
                scale = torch.ones_like(rows)
            else:
                scale = low + (high - low) * torch.rand(rows.shape, generator=generator, dtype=torch.float64)
            self.scales[name][env_ids] = scale
            params[name] = rows * scale
        gain_scale = self.scales["actuator_gain"][env_ids, :, None]  # [M, U, 1]: a servo's PD scales with its gain
        params["body_inertia"] = base["body_inertia"][env_ids] * self.scales["body_mass"][env_ids, :, None]
        params["actuator_bias"] = base["actuator_bias"][env_ids] * gain_scale
        params["body_ipos"] = base["body_ipos"][env_ids].clone()
        if self.com_body is not None:
            low, high = self.config.com_offset
            offset = low + (high - low) * torch.rand(env_ids.numel(), 3, generator=generator, dtype=torch.float64)
            self.com_offset[env_ids] = offset
            params["body_ipos"][:, self.com_body] += offset
        self._scale_block[env_ids.to(self.device)] = self._scale_rows(env_ids)
        return params

    def _scale_rows(self, env_ids: torch.Tensor) -> torch.Tensor:
        """The randomized scales of rows env_ids [M] (CPU long), flattened: [M, S] float32 on the env device."""
        parts = [torch.zeros(env_ids.numel(), 0, dtype=torch.float64)]
        for name in self._scaled:  # the world body (0) has no mass to scale
            rows = self.scales[name][env_ids]
            parts.append(rows[:, 1:] if name == "body_mass" else rows.flatten(1))
        if self.com_body is not None:
            parts.append(self.com_offset[env_ids])
        return torch.cat(parts, dim=1).to(self.device, torch.float32)

    def reset_rows(self, env_ids: torch.Tensor, generator: torch.Generator) -> None:
        """Draw delays and first pushes of rows env_ids [M] (CPU long); empty their action history and pushes."""
        config, rows = self.config, env_ids.to(self.device)
        if config.action_delay[1] > 0:
            low, high = config.action_delay
            delay = torch.randint(low, high + 1, (env_ids.numel(),), generator=generator)
            self.delay[rows] = delay.to(self.device)
            self.action_buffer[rows] = 0.0
        if config.pushes:
            low, high = config.push_interval
            wait = torch.randint(low, high + 1, (env_ids.numel(),), generator=generator)
            self.push_timer[rows] = wait.to(self.device)
            self.push_left[rows], self.pushing[rows] = 0, False  # the backend's reset clears the force itself
            self.push_force[rows] = 0.0

    def action(self, action: torch.Tensor) -> torch.Tensor:
        """The action [N, A] the actuators apply this step, from the policy's action [N, A] (env device)."""
        config = self.config
        if config.action_delay[1] > 0:  # ring buffer: write slot t, read slot t - d
            length = self.action_buffer.shape[1]
            self.action_buffer[:, self.pointer] = action
            action = self.action_buffer[self.rows, (self.pointer - self.delay) % length]
            self.pointer = (self.pointer + 1) % length
        if config.action_noise > 0:
            noise = torch.randn(action.shape, generator=self.step_generator, device=self.device)  # same on any backend
            action = (action + config.action_noise * noise.to(action.dtype)).clamp(self.action_low, self.action_high)
        return action

    def push_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance the push schedule by one step: rows [K] whose external force changes and their wrench [K, 6].

        A row idles ``push_timer`` steps, then is pushed for ``push_duration`` steps with a force of fresh
        magnitude U(push_force) in a uniform horizontal direction, then idles for a fresh U{push_interval}.
        """
        config, generator, n = self.config, self.step_generator, self.num_envs
        idle = self.push_left == 0
        start = idle & (self.push_timer == 0)
        self.push_timer -= (idle & ~start).long()
        low, high = config.push_force
        magnitude = low + (high - low) * torch.rand(n, generator=generator, device=self.device, dtype=torch.float64)
        angle = 2 * math.pi * torch.rand(n, generator=generator, device=self.device, dtype=torch.float64)
        wait = torch.randint(
            config.push_interval[0], config.push_interval[1] + 1, (n,), generator=generator, device=self.device
        )
        force = torch.zeros(n, 6, dtype=torch.float64, device=self.device)
        force[:, 0], force[:, 1] = magnitude * torch.cos(angle), magnitude * torch.sin(angle)
        self.push_force = torch.where(start[:, None], force, self.push_force)
        self.push_timer = torch.where(start, wait, self.push_timer)
        self.push_left = torch.where(start, config.push_duration, self.push_left)
        pushing = self.push_left > 0
        changed = (pushing != self.pushing) | start
        self.push_left -= pushing.long()
        self.pushing = pushing
        rows = changed.nonzero()[:, 0]
        return rows, self.push_force[rows] * pushing[rows, None]

    def observe(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [B, D] plus N(0, obs_noise^2) noise (unchanged when obs noise is off)."""
        if self.config.obs_noise <= 0:
            return obs
        noise = torch.randn(obs.shape, generator=self.step_generator, device=obs.device, dtype=obs.dtype)
        return obs + self.config.obs_noise * noise

    def privileged(self) -> torch.Tensor:
        """Per-env randomization values in use, [N, P] float32 on the env device (layout: class doc)."""
        parts = [self._scale_block]
        if self.config.action_delay[1] > 0:
            parts.append(self.delay[:, None].float())
        if self.config.pushes:  # the next step pushes: a push goes on, or one starts
            parts.append(((self.push_left > 0) | (self.push_timer == 0))[:, None].float())
        return torch.cat(parts, dim=1)

    def state_dict(self) -> dict:
        """Draws, delay buffer, push schedule and step generator (CPU tensors)."""
        state = {name: getattr(self, name).cpu().clone() for name in _STATE_TENSORS}
        state["scales"] = {name: value.clone() for name, value in self.scales.items()}
        state["com_offset"] = self.com_offset.clone()
        return {**state, "pointer": self.pointer, "step_generator": self.step_generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict``'s output (from an env with the same randomization config)."""
        for name in _STATE_TENSORS:
            target = getattr(self, name)
            if tuple(state[name].shape) != tuple(target.shape):
                raise ValueError(
                    f"saved randomization {name!r} has shape {list(state[name].shape)}, "
                    f"not {list(target.shape)}: build the env with the same randomization"
                )
            target.copy_(state[name])
        for name, value in state["scales"].items():
            self.scales[name].copy_(value)
        if "com_offset" in state:  # absent from checkpoints written before the knob existed
            self.com_offset.copy_(state["com_offset"])
        self._scale_block = self._scale_rows(torch.arange(self.num_envs))
        self.pointer = int(state["pointer"])
        self.step_generator.set_state(state["step_generator"])


_STATE_TENSORS = ("delay", "action_buffer", "push_timer", "push_left", "push_force", "pushing")
