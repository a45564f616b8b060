"""Native batched MuJoCo env: a task (batched torch functions) over a physics backend, as a VecEnv.

Shapes: N envs, M rows being reset, D obs dim, A action dim.

Per-env model parameters: ``set_model_params`` sets a row's base values (absolute), applied at that row's
next reset; a ``Randomization`` multiplies them by fresh U(low, high) scales (one per element) at every
reset. Rows left at their nominal values with no randomization never pay for it. The other randomization
knobs (action delay and noise, observation noise, pushes) and ``privileged_obs()`` are described in
``robopt.envs.randomization``; with every knob off the env steps exactly as without them.

Unstable simulation (MuJoCo reset the row itself, or its state is not finite): the row ends with
``terminated=True``, reward 0 and ``final_obs`` = its last good observation (so nothing NaN reaches the
learner and nothing is bootstrapped from a broken state), is reset from the task's distribution, is
flagged in ``info["unstable"]``, is counted in ``unstable_count`` and logs a warning.

Tasks with a context (``robopt.envs.robot.task.TermTask``: velocity commands, the last action, feet air time)
implement the optional hooks of ``robopt.envs.tasks.base.ContextTask``; the env calls them at fixed points of
``step`` and of a row's reset, and adds their ``privileged`` block and ``log`` statistics (``info["log"]``).

Goal-conditioned tasks (a task with ``achieved_goal``, ``robopt.envs.tasks.goal``): the env also has the obs
slices ``achieved_goal`` and ``desired_goal``, ``compute_reward(achieved_goal [B, G], desired_goal [B, G]) -> [B]``
(for hindsight relabelling) and ``info["is_success"]`` [N] bool from ``final_obs`` at every step. Other envs have
none of these attributes, so ``hasattr(env, "compute_reward")`` tells the two apart. A term task with a success term
(``reports_success``) also gives ``info["is_success"]`` (its success in the state the step reached), and the share of
the episodes ending at the step that succeeded as ``info["log"]["success"]`` (``env/success``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import mujoco
import torch

from robopt.envs.episode_stats import EpisodeTracker
from robopt.envs.physics import PARAM_NAMES, PhysicsBackend, load_asset_model
from robopt.envs.randomization import Randomization, Randomizer
from robopt.options import WARP_ONLY_OPTIONS

__all__ = ["NativeVecEnv", "Randomization", "check_action", "load_model", "make_native_env"]

if TYPE_CHECKING:
    from robopt.envs.tasks.base import Task

logger = logging.getLogger(__name__)


def check_action(env_id: str, action: torch.Tensor, num_envs: int, action_dim: int) -> None:
    """Raise TypeError/ValueError naming the env unless action is a finite float tensor [N, A]."""
    if not isinstance(action, torch.Tensor):
        raise TypeError(f"{env_id}: action must be a torch.Tensor [N, A], got {type(action).__name__}")
    if tuple(action.shape) != (num_envs, action_dim):
        raise ValueError(f"{env_id}: action must have shape [{num_envs}, {action_dim}], got {list(action.shape)}")
    if not action.dtype.is_floating_point:
        raise TypeError(f"{env_id}: action must be a floating-point tensor, got {action.dtype}")
    if not torch.isfinite(action).all():
        raise ValueError(f"{env_id}: action contains NaN or Inf")


class NativeVecEnv:
    """A task stepped on a physics backend; implements ``robopt.core.protocols.VecEnv``."""

    def __init__(
        self,
        task: Task,
        physics: PhysicsBackend,
        env_id: str,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        randomization: Randomization | dict | None = None,
        max_episode_steps: int | None = None,
    ) -> None:
        self.task, self.physics, self.env_id = task, physics, env_id
        self.max_episode_steps = task.max_episode_steps if max_episode_steps is None else int(max_episode_steps)
        if self.max_episode_steps < 1:
            raise ValueError(f"{env_id}: max_episode_steps must be at least 1, got {max_episode_steps}")
        self.num_envs = physics.num_envs
        self.device = torch.device(device)
        model = physics.mj_model
        self.action_dim = model.nu
        ctrl_range = torch.tensor(model.actuator_ctrlrange, dtype=torch.float32, device=self.device)  # [A, 2]
        self.action_low, self.action_high = ctrl_range[:, 0].contiguous(), ctrl_range[:, 1].contiguous()
        bounds = getattr(task, "action_bounds", None)  # a task whose action is not the actuators' ctrl
        if bounds is not None:
            self.action_low, self.action_high = (bound.to(self.device, torch.float32).contiguous() for bound in bounds)
        self._to_ctrl = getattr(task, "action_to_ctrl", None)  # ctrl(action [N, A], state) for the actuators
        self.dt = model.opt.timestep * task.frame_skip
        self.randomization = Randomization.from_config(randomization)
        self._context = hasattr(task, "update_context")  # a ContextTask (robopt.envs.tasks.base)
        self.unstable_count = 0
        self._generator = torch.Generator()
        self._generator.manual_seed(seed) if seed is not None else self._generator.seed()
        nominal = physics.nominal_params()
        self._base_params = {k: v.expand(self.num_envs, *v.shape).clone() for k, v in nominal.items()}
        dtype = physics.state()["qpos"].dtype
        bounds = (self.action_low, self.action_high)
        self._randomizer = Randomizer(self.randomization, model, nominal, self.device, dtype, bounds, self.num_envs)
        self.privileged_dim = self._randomizer.privileged_dim + getattr(task, "privileged_dim", 0)
        self._randomizer.seed_steps(self._generator)
        if self._context:
            task.seed_steps(self._generator)
        self._custom = torch.zeros(self.num_envs, dtype=torch.bool)  # rows with non-nominal base params
        self._elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)  # [N]
        self._tracker = EpisodeTracker(self.num_envs, self.device)
        self._obs, self._position = self._reset_rows(torch.arange(self.num_envs), ended=False)  # [N, D], [N, P]
        self.obs_dim = self._obs.shape[1]
        self._reports_success = bool(getattr(task, "reports_success", False))
        self._goal_task = hasattr(task, "achieved_goal")
        if self._goal_task:  # instance attributes only: envs without goals must not have them
            self.achieved_goal, self.desired_goal = task.achieved_goal, task.desired_goal
            self.compute_reward = self._compute_reward

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every row; a seed restarts the reset-noise stream (same seed, same episodes)."""
        if seed is not None:
            self._generator.manual_seed(seed)
            self._randomizer.seed_steps(self._generator)
            if self._context:
                self.task.seed_steps(self._generator)
        self._obs, self._position = self._reset_rows(torch.arange(self.num_envs), ended=False)
        self._elapsed.zero_()
        self._tracker.reset()
        return self._obs.clone()

    def step(self, action: torch.Tensor):
        """Step every row with action [N, A]; see ``robopt.core.protocols.VecEnv``. Adds info["unstable"] [N]."""
        check_action(self.env_id, action, self.num_envs, self.action_dim)
        randomizer, task = self._randomizer, self.task
        commanded = action.detach().to(self.physics.device, self._position.dtype)  # the policy's, for the context
        if randomizer.acts_on_actions:  # the action the actuators apply (delayed, noisy)
            action = randomizer.action(action.detach().to(self.device, self._position.dtype))
        action = action.detach().to(self.physics.device, self._position.dtype)
        if self._to_ctrl is not None:
            action = self._to_ctrl(action, self.physics.state())
        if self.randomization.pushes:
            rows, force = randomizer.push_step()
            self.physics.set_external_force(rows, randomizer.push_body, force)
        unstable = self.physics.step(action, task.frame_skip)  # [N]
        state = self.physics.state()
        position = task.tracked_position(state)  # [N, P], the next step's "before"
        if self._context:  # actions, contacts, counters after the physics step; read by the reward
            task.update_context(state, commanded)
        reward, terminated = task.reward(state, action, self._position, self.dt)
        success = task.success.to(self.device) if self._reports_success else None  # before any reset zeroes it
        reward, terminated = reward.to(self.device, torch.float32), terminated.to(self.device)
        if self._context:  # commands whose time is up change, then the new observation frame
            task.advance(state)
        clean_obs = task.observe(state).to(self.device, torch.float32)  # [N, D]
        obs = randomizer.observe(clean_obs)  # what the policy sees, also as final_obs
        unstable = unstable.to(self.device)
        self._elapsed += 1
        truncated = self._elapsed >= self.max_episode_steps
        if bool(unstable.any()):
            count = int(unstable.sum())
            self.unstable_count += count
            logger.warning("%s: %d env(s) became unstable (NaN or MuJoCo warning); resetting them", self.env_id, count)
            obs = torch.where(unstable[:, None], self._obs, obs)
            reward = reward.masked_fill(unstable, 0.0)
            terminated, truncated = terminated | unstable, truncated & ~unstable
        done = terminated | truncated
        next_obs = obs.clone()  # never the same tensor as info["final_obs"]
        final_privileged = self.privileged_obs() if self.privileged_dim else None
        ended = done.nonzero()[:, 0]
        if ended.numel() > 0:
            next_obs[ended], position[ended.to(position.device)] = self._reset_rows(ended.cpu())
            self._elapsed[ended] = 0
        episode_return, episode_length = self._tracker.update(reward, done)
        info = {"final_obs": obs, "episode_return": episode_return, "episode_length": episode_length}
        info["unstable"] = unstable
        if self._context:
            info["log"] = task.log()
        if final_privileged is not None:
            info["final_privileged_obs"] = final_privileged
        if self._reports_success:  # a term task's success term (its hold time included) in the step's state
            success = success & ~unstable
            info["is_success"] = success
            if getattr(task, "success_score", None) is not None:  # a graded success (Push-T's coverage) [N]
                info["success_score"] = task.success_score.clone()
            info.setdefault("log", {})["success"] = ((success & done).sum(), done.sum())  # over episodes that ended
        if self._goal_task:  # the success of an episode that ended is that of its last (noise-free) observation
            last = torch.where(unstable[:, None], self._obs, clean_obs)
            info["is_success"] = self.task.is_success(last[:, self.achieved_goal], last[:, self.desired_goal])
        self._obs, self._position = next_obs, position
        return next_obs.clone(), reward, terminated, truncated, info

    @property
    def episode_steps(self) -> torch.Tensor:
        """Steps each row's running episode has taken [N] (0 right after its reset): a scripted expert's clock."""
        return self._elapsed

    def privileged_obs(self) -> torch.Tensor:
        """Per-env randomization values in use, [N, privileged_dim] float32 on the env device; [N, 0] when off.

        Blocks, each present only when its knob is on, in this order: ``body_mass`` scales [Bd - 1] (the world
        body left out; each body's inertia has its mass's scale), ``geom_friction`` scales [G * 3],
        ``dof_damping`` scales [V], ``actuator_gain`` (motor strength) scales [U], the action delay in ticks
        [1], and 1.0 if the next step is pushed else 0.0 [1]; then a context task's own block (its privileged
        observation terms: foot contacts, friction...). After a step these are the values of the episodes the
        returned obs belong to; ``info["final_privileged_obs"]`` has those of ``final_obs``.
        """
        if not self._context or not self.task.privileged_dim:
            return self._randomizer.privileged()
        task_block = self.task.privileged(self.physics.state()).to(self.device, torch.float32)
        return torch.cat([self._randomizer.privileged(), task_block], dim=1)

    def mirror(self) -> dict:
        """The left-right mirror of the observation (``obs``), the action (``action``) and, where every block of it
        has one, the privileged observation (``privileged``): ``robopt.envs.robot.mirror.Mirror`` each, from a robot
        task with ``robot.mirror``. A one-line ValueError for a task without symmetry."""
        task_mirror = getattr(self.task, "mirror", None)
        if task_mirror is None:
            raise ValueError(f"{self.env_id}: symmetry needs a robot task (env.id: robot) with robot.mirror")
        out = task_mirror()
        if self._randomizer.privileged_dim:  # randomized parameters per body or geom have no mirror here
            out.pop("privileged", None)
        return out

    def _compute_reward(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """The task's reward for goals achieved [B, G] and desired [B, G]: [B] float32 on the env device."""
        return self.task.compute_reward(achieved_goal, desired_goal).to(self.device, torch.float32)

    def set_model_params(self, params: dict[str, torch.Tensor], env_ids: torch.Tensor | None = None) -> None:
        """Set base model parameters (absolute, ``[M, ...]``) of rows env_ids; applied at their next reset."""
        ids = torch.arange(self.num_envs) if env_ids is None else env_ids.detach().cpu().long()
        for name, value in params.items():
            if name not in self._base_params:
                raise ValueError(f"{self.env_id}: unknown model parameter {name!r}; allowed: {', '.join(PARAM_NAMES)}")
            expected = (ids.numel(), *self._base_params[name].shape[1:])
            if tuple(value.shape) != expected:
                raise ValueError(f"{self.env_id}: {name} must have shape {list(expected)}, got {list(value.shape)}")
            self._base_params[name][ids] = value.detach().to("cpu", torch.float64)
        self._custom[ids] = True

    def model_params(self) -> dict[str, torch.Tensor]:
        """Base parameter values per row (``body_mass`` [N, Bd], ...), float64 CPU copies."""
        return {name: value.clone() for name, value in self._base_params.items()}

    def _reset_rows(self, env_ids: torch.Tensor, ended: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Reset rows env_ids [M] (CPU long): parameters, then state; returns their obs [M, D] and position [M, P].
        ``ended``: their episodes ended in a step (a task's curriculum reads them), not ``reset``.

        The tracked position is kept from here and from the end of each step (as Gymnasium reads it before
        ``do_simulation``), so ``step`` never re-reads state another row's reset may have refreshed.
        """
        if self.randomization.params_active or bool(self._custom[env_ids].any()):
            self.physics.set_params(env_ids, self._randomizer.draw_params(env_ids, self._base_params, self._generator))
        self._randomizer.reset_rows(env_ids, self._generator)
        place = getattr(self.task, "place_rows", None)  # a task that puts rows somewhere (a terrain's tiles)
        if place is not None:
            place(env_ids, self.physics.state, ended, self._generator)
        qpos, qvel = self.task.reset_state(env_ids.numel(), self._generator)
        self.physics.set_state(env_ids, qpos, qvel)
        state = self.physics.state()
        rows = env_ids.to(self.physics.device)
        if self._context:  # commands, last action, counters and observation history of the new episodes
            self.task.reset_context(rows, state, self._generator)
        obs = self._randomizer.observe(self.task.observe(state)[rows].to(self.device, torch.float32))
        return obs, self.task.tracked_position(state)[rows]

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue these very episodes (checkpointed by the runner).

        The simulator state of every row (the backend's full integration state, warm start included), the model
        parameters each row is running with (randomized draws included) and its base values, the reset-noise RNG,
        the time-limit counters, the episode trackers, the last observation and tracked position, and the
        randomization state (scales, delays and their action history, the push schedule, the step generator).
        """
        return {
            "physics": self.physics.get_state(),
            "base_params": self.model_params(),
            "custom": self._custom.clone(),
            "generator": self._generator.get_state(),
            "elapsed": self._elapsed.clone(),
            "returns": self._tracker.returns.clone(),
            "lengths": self._tracker.lengths.clone(),
            "obs": self._obs.clone(),
            "position": self._position.clone(),
            "unstable_count": self.unstable_count,
            "randomization": self._randomizer.state_dict(),
            **({"task": self.task.state_dict()} if self._context else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict``'s output from an env built with the same task, backend and ``num_envs``."""
        expected = tuple(self._obs.shape)
        if tuple(state["obs"].shape) != expected:
            raise ValueError(
                f"{self.env_id}: saved env state is for obs {list(state['obs'].shape)}, not {list(expected)}"
            )
        for name, value in state["base_params"].items():
            self._base_params[name].copy_(value)
        self._custom.copy_(state["custom"])
        self._generator.set_state(state["generator"])
        self.physics.set_full_state(state["physics"])
        self._elapsed.copy_(state["elapsed"])
        self._tracker.returns.copy_(state["returns"])
        self._tracker.lengths.copy_(state["lengths"])
        self._obs = state["obs"].to(self.device)
        self._position = state["position"].to(self._position.device)
        self.unstable_count = int(state["unstable_count"])
        if "randomization" in state:  # absent from checkpoints written before these knobs existed
            self._randomizer.load_state_dict(state["randomization"])
        if self._context:
            self.task.load_state_dict(state["task"])

    def close(self) -> None:
        """Release the physics backend."""
        self.physics.close()


def load_model(task_cls: type) -> mujoco.MjModel:
    """The task's own ``build_model()`` if it has one, else its MJCF from the installed gymnasium package."""
    if hasattr(task_cls, "build_model"):
        return task_cls.build_model()
    return load_asset_model(task_cls.xml_file)


def make_native_env(task_cls: type, backend: str, num_envs: int, device: str | torch.device = "cpu", **kwargs):
    """Build ``mujoco/<Task>`` on ``backend`` ('mujoco' or 'mujoco_warp').

    Keyword options: ``seed``, ``randomization`` (mapping or Randomization), ``max_episode_steps`` (time
    limit, default Gymnasium's), ``num_threads`` (mujoco), ``nconmax``/``njmax``/``verbose``/``graph``
    (mujoco_warp; ``verbose`` lists warp's kernel loads, ``graph`` replays a recording of each step's kernel
    launches); anything else goes to the task (Gymnasium's v5 option names).
    """
    seed, randomization = kwargs.pop("seed", None), kwargs.pop("randomization", None)
    max_episode_steps = kwargs.pop("max_episode_steps", None)
    model = load_model(task_cls)
    env_id = f"mujoco/{task_cls.name}"
    backend_options = pop_backend_options(env_id, backend, kwargs)
    task = _make_task(task_cls, model, env_id, kwargs)
    physics = make_physics(model, backend, num_envs, task.fields, device, backend_options, env_id)
    return NativeVecEnv(
        task,
        physics,
        env_id,
        device=device,
        seed=seed,
        randomization=randomization,
        max_episode_steps=max_episode_steps,
    )


def pop_backend_options(env_id: str, backend: str, kwargs: dict) -> dict:
    """Take the backend's own options out of ``kwargs`` (``num_threads`` on mujoco, ``WARP_ONLY_OPTIONS`` on
    mujoco_warp); an option of the other backend, or an unknown backend, is a ValueError naming it."""
    if backend == "mujoco":
        misplaced = [key for key in WARP_ONLY_OPTIONS if key in kwargs]
        if misplaced:
            raise ValueError(f"env.kwargs {', '.join(misplaced)}: options of backend mujoco_warp, not of mujoco")
        return {"num_threads": kwargs.pop("num_threads", 2)}
    if backend == "mujoco_warp":
        return {k: kwargs.pop(k) for k in WARP_ONLY_OPTIONS if k in kwargs}
    raise ValueError(f"{env_id}: unknown native backend {backend!r}; allowed: mujoco, mujoco_warp")


def make_physics(
    model: mujoco.MjModel,
    backend: str,
    num_envs: int,
    fields: tuple[str, ...],
    device: str | torch.device,
    options: dict,
    env_id: str,
) -> PhysicsBackend:
    """N copies of ``model`` on ``backend`` ('mujoco': CPU threads; 'mujoco_warp': MuJoCo Warp, imported lazily)."""
    if backend == "mujoco":
        from robopt.envs.mujoco_backend import MujocoBackend

        return MujocoBackend(model, num_envs, fields, **options)
    if backend == "mujoco_warp":
        from robopt.envs.warp_backend import WarpBackend  # imports warp lazily (extra [gpu])

        return WarpBackend(model, num_envs, fields, device=device, **options)
    raise ValueError(f"{env_id}: unknown native backend {backend!r}; allowed: mujoco, mujoco_warp")


def _make_task(task_cls: type, model: mujoco.MjModel, env_id: str, options: dict) -> Task:
    try:
        return task_cls(model, **options)
    except TypeError as error:
        raise TypeError(f"{env_id}: bad task option ({error})") from None
