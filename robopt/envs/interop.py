"""Views of any robopt VecEnv for other libraries' trainers: Gymnasium 1.x vector API and Stable-Baselines3.

Shapes: N envs, D obs dim, A action dim. Both views step the robopt env with one batched call, convert torch
tensors to numpy once per step and keep robopt's auto-reset, which resets a row inside the step that ended it
(Gymnasium's ``AutoresetMode.SAME_STEP``; SB3's ``terminal_observation`` convention). The views hold no
simulator state of their own: the robopt env stays the single source of truth.

``GymnasiumVectorView`` needs only Gymnasium (a robopt dependency). ``SB3VecEnvView`` subclasses SB3's
``VecEnv``; the class is built on first access, so this module imports without stable-baselines3.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from robopt.core.protocols import VecEnv as RoboptVecEnv

__all__ = ["GymnasiumVectorView"]  # SB3VecEnvView too, resolved lazily by the module __getattr__ below

SB3_MISSING = "SB3VecEnvView needs stable-baselines3: pip install stable-baselines3"
CONTRACT_INFO_KEYS = ("final_obs", "episode_return", "episode_length")


def _check_robopt_env(env: Any, view_name: str) -> None:
    if not isinstance(env, RoboptVecEnv):
        raise TypeError(
            f"{view_name} needs a robopt VecEnv (from robopt.envs.make_env), got {type(env).__name__}; "
            "for a Gymnasium env use gymnasium's own vector envs"
        )


def single_spaces(env: RoboptVecEnv) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    """One row's spaces: unbounded float32 observation [D] and the env's action bounds [A] as float32."""
    low = env.action_low.detach().cpu().numpy().astype(np.float32)  # [A]
    high = env.action_high.detach().cpu().numpy().astype(np.float32)  # [A]
    observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(env.obs_dim,), dtype=np.float32)
    return observation_space, gym.spaces.Box(low, high, dtype=np.float32)


def action_tensor(env: RoboptVecEnv, actions: Any) -> torch.Tensor:
    """Numpy (or array-like) actions [N, A] as a float32 tensor on the env device; bad input is a one-line error."""
    try:
        array = np.array(actions, dtype=np.float32)  # a copy: the caller may reuse its buffer
    except (TypeError, ValueError):
        raise TypeError(
            f"{env.env_id}: actions must be a numeric array of shape [{env.num_envs}, {env.action_dim}], "
            f"got {type(actions).__name__}"
        ) from None
    if array.shape != (env.num_envs, env.action_dim):
        raise ValueError(
            f"{env.env_id}: actions must have shape [{env.num_envs}, {env.action_dim}], got {list(array.shape)}"
        )
    return torch.from_numpy(array).to(env.device)


def to_numpy(tensor: torch.Tensor, dtype: type | np.dtype) -> np.ndarray:
    """A fresh numpy copy of ``tensor`` (any device) as ``dtype``: later steps never change it."""
    return tensor.detach().cpu().numpy().astype(dtype)


def extra_infos(info: dict[str, Any], num_envs: int) -> dict[str, np.ndarray]:
    """Per-row entries of a robopt step info beyond the contract keys (native: ``unstable`` [N]) as numpy."""
    extras = {}
    for key, value in info.items():
        if key not in CONTRACT_INFO_KEYS and isinstance(value, torch.Tensor) and value.ndim >= 1:
            if value.shape[0] == num_envs:
                extras[key] = value.detach().cpu().numpy()
    return extras


def batched_info(values: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """Gymnasium's batched info layout: each ``key`` [N, ...] zeroed where mask [N] is False, plus ``_key`` = mask."""
    batched = {}
    for key, value in values.items():
        shaped = mask.reshape(mask.shape + (1,) * (value.ndim - 1))
        batched[key], batched[f"_{key}"] = np.where(shaped, value, np.zeros_like(value)), mask.copy()
    return batched


class GymnasiumVectorView(VectorEnv):
    """A robopt VecEnv as a ``gymnasium.vector.VectorEnv`` (numpy in and out), autoreset mode SAME_STEP.

    Autoreset convention (the same as ``SyncVectorEnv(..., autoreset_mode=AutoresetMode.SAME_STEP)`` in
    Gymnasium 1.x): a row that terminates or truncates is reset inside the same ``step`` call, so the returned
    ``obs[i]`` of that row is the FIRST observation of its next episode, while ``reward[i]``, ``terminated[i]``
    and ``truncated[i]`` belong to the step that ended the old one. For those rows ``infos`` holds:

        ``infos["final_obs"]``    object array [N]: the last observation [D] of each ended row, None elsewhere
        ``infos["_final_obs"]``   bool [N]: which rows ended
        ``infos["final_info"]``   dict: that step's per-row info of the ended rows, in Gymnasium's batched
                                  layout (each key with a ``_key`` mask): robopt's extra per-row entries
                                  (native backend: ``unstable``) and ``episode`` = ``{"r", "l", "t"}``, laid out as
                                  per-env ``gymnasium.wrappers.RecordEpisodeStatistics`` would be under
                                  SyncVectorEnv SAME_STEP (``r`` float64, ``l`` int64, ``t`` seconds)
        ``infos["_final_info"]``  bool [N]: which rows ended

    No key is added on a step where no row ended (``infos == {}`` unless the backend has extra per-row info, which
    then sits at the top level for the rows that did not end, as SyncVectorEnv places step infos). Terminated and
    truncated stay apart: bootstrap a truncated row from ``infos["final_obs"][i]``, never from ``obs[i]``.
    Gymnasium's vector ``RecordEpisodeStatistics`` wrapper (top-level ``infos["episode"]``) works on this view.

    Differences from SyncVectorEnv: observations are float32 (robopt's dtype) while Gymnasium's MuJoCo envs give
    float64; rewards are float64 as SyncVectorEnv's; the Gymnasium envs' own info keys (``x_position``...) are not
    produced; ``reset`` takes an int seed (not a list) and no options. ``reset(seed=s)`` seeds row ``i`` with
    ``s + i`` on the ``gymnasium`` backend (like SyncVectorEnv) and restarts the single reset-noise stream of
    the native backends.

    Args:
        env: Any robopt VecEnv (``robopt.envs.make_env``: native ``mujoco``/``mujoco_warp`` or ``gymnasium``).
    """

    def __init__(self, env: RoboptVecEnv) -> None:
        _check_robopt_env(env, "GymnasiumVectorView")
        self.env = env
        self.num_envs = env.num_envs
        self.single_observation_space, self.single_action_space = single_spaces(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)  # [N, D]
        self.action_space = batch_space(self.single_action_space, self.num_envs)  # [N, A]
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.render_mode = None
        self._episode_start = np.full(self.num_envs, time.perf_counter())  # [N] for episode["t"]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every row; returns obs [N, D] float32 and an empty info dict.

        Args:
            seed: None, or an int (row ``i`` gets ``seed + i`` on the gymnasium backend).
            options: None or empty: robopt envs take no reset options (``reset_mask`` partial resets included).
        """
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"{self.env.env_id}: reset seed must be an int or None, got {type(seed).__name__}")
        if options:
            raise ValueError(f"{self.env.env_id}: robopt envs take no reset options, got {sorted(options)}")
        super().reset(seed=None if seed is None else int(seed))
        obs = self.env.reset(seed=None if seed is None else int(seed))
        self._episode_start[:] = time.perf_counter()
        return to_numpy(obs, np.float32), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every row with actions [N, A]; returns obs [N, D], reward [N], terminated [N], truncated [N], infos."""
        obs, reward, terminated, truncated, info = self.env.step(action_tensor(self.env, actions))
        terminated_np, truncated_np = to_numpy(terminated, np.bool_), to_numpy(truncated, np.bool_)
        ended = terminated_np | truncated_np  # [N]
        extras = extra_infos(info, self.num_envs)
        infos: dict[str, Any] = batched_info(extras, ~ended) if not ended.all() else {}
        if ended.any():
            self._add_final_infos(infos, info, extras, ended)
        return to_numpy(obs, np.float32), to_numpy(reward, np.float64), terminated_np, truncated_np, infos

    def _add_final_infos(
        self, infos: dict[str, Any], info: dict[str, torch.Tensor], extras: dict[str, np.ndarray], ended: np.ndarray
    ) -> None:
        """Add final_obs/final_info (and masks) for the rows that ended, as SyncVectorEnv's SAME_STEP mode does."""
        final_obs = to_numpy(info["final_obs"], np.float32)  # [N, D]
        final_obs_objects = np.full(self.num_envs, None, dtype=object)
        for row in np.flatnonzero(ended):
            final_obs_objects[row] = final_obs[row]
        now = time.perf_counter()
        episode = {
            "r": to_numpy(info["episode_return"], np.float64),
            "l": to_numpy(info["episode_length"], np.int64),
            "t": np.round(now - self._episode_start, 6),
        }
        self._episode_start[ended] = now
        final_info = batched_info(extras, ended)
        final_info["episode"], final_info["_episode"] = batched_info(episode, ended), ended.copy()
        infos["final_obs"], infos["_final_obs"] = final_obs_objects, ended.copy()
        infos["final_info"], infos["_final_info"] = final_info, ended.copy()

    def close_extras(self, **kwargs: Any) -> None:
        """Close the robopt env (``close`` calls this once)."""
        self.env.close()

    def __repr__(self) -> str:
        return f"GymnasiumVectorView({self.env.env_id}, num_envs={self.num_envs})"


class SB3ViewMethods:
    """A robopt VecEnv as a Stable-Baselines3 ``VecEnv`` (the methods of ``SB3VecEnvView``; use that name).

    ``SB3VecEnvView(env)`` is this class mixed into ``stable_baselines3.common.vec_env.VecEnv``, built when the name
    is first looked up so robopt imports without SB3. SB3 conventions, as ``DummyVecEnv`` over ``Monitor``-wrapped
    envs gives them:

        ``reset()`` -> obs [N, D] float32, seeded by the last ``seed(s)`` call (row ``i`` gets ``s + i`` on the
        gymnasium backend; the native backends restart their reset-noise stream from ``s``).
        ``step_wait()`` -> obs [N, D] float32, rewards [N] float32, dones [N] bool (terminated | truncated) and
        infos, a list of N dicts. Each has ``"TimeLimit.truncated"`` = truncated and not terminated (SB3's on-policy
        algorithms bootstrap those rows from ``V(terminal_observation)``); rows that ended also have
        ``"terminal_observation"`` (the last obs [D]; the returned obs is already the next episode's first) and
        ``"episode"`` = ``{"r", "l", "t"}`` as Monitor writes it (``t``: seconds since the view was made), so the
        SB3 logger shows ``ep_rew_mean`` and ``evaluate_policy`` counts episodes. Extra per-row entries of the
        robopt info (native backend: ``unstable``) are copied into each row's dict.

    One robopt object serves every row, so ``get_attr``/``env_method`` read or call it once and repeat the result for
    each requested index, ``set_attr`` sets it for all rows (a subset of rows is an error), and ``env_is_wrapped``
    answers True only for SB3's ``Monitor`` (whose episode infos the view already gives).

    Args:
        env: Any robopt VecEnv (``robopt.envs.make_env``: native ``mujoco``/``mujoco_warp`` or ``gymnasium``).
    """

    def __init__(self, env: RoboptVecEnv) -> None:
        _check_robopt_env(env, "SB3VecEnvView")
        self.env = env
        self._actions: torch.Tensor | None = None  # [N, A] between step_async and step_wait
        self._start_time = time.time()  # Monitor's clock for episode["t"]
        observation_space, action_space = single_spaces(env)
        super().__init__(env.num_envs, observation_space, action_space)

    def reset(self) -> np.ndarray:
        """Reset every row with the seed set by ``seed()`` (used once); returns obs [N, D] float32."""
        if any(self._options):
            raise ValueError(f"{self.env.env_id}: robopt envs take no reset options, got {self._options[0]}")
        obs = self.env.reset(seed=self._seeds[0])
        self._reset_seeds()
        self._reset_options()
        self._actions = None
        return to_numpy(obs, np.float32)

    def step_async(self, actions: np.ndarray) -> None:
        """Store actions [N, A] for ``step_wait``."""
        self._actions = action_tensor(self.env, actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every row with the stored actions; returns obs [N, D], rewards [N], dones [N], infos (N dicts)."""
        if self._actions is None:
            raise RuntimeError(f"{self.env.env_id}: step_wait called without step_async")
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        self._actions = None
        terminated_np, truncated_np = to_numpy(terminated, np.bool_), to_numpy(truncated, np.bool_)
        dones = terminated_np | truncated_np  # [N]
        infos = [{"TimeLimit.truncated": bool(flag)} for flag in truncated_np & ~terminated_np]
        for key, value in extra_infos(info, self.num_envs).items():
            for row, row_info in enumerate(infos):
                row_info[key] = value[row]
        if dones.any():
            final_obs = to_numpy(info["final_obs"], np.float32)  # [N, D]
            episode_return = to_numpy(info["episode_return"], np.float64)  # [N]
            episode_length = to_numpy(info["episode_length"], np.int64)  # [N]
            elapsed = round(time.time() - self._start_time, 6)
            for row in np.flatnonzero(dones):
                infos[row]["terminal_observation"] = final_obs[row]
                infos[row]["episode"] = {
                    "r": round(float(episode_return[row]), 6),
                    "l": int(episode_length[row]),
                    "t": elapsed,
                }
        return to_numpy(obs, np.float32), to_numpy(reward, np.float32), dones, infos

    def close(self) -> None:
        """Close the robopt env."""
        self.env.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The robopt env's attribute, once per requested row (``render_mode`` is None when the env has none)."""
        if hasattr(self.env, attr_name):
            value = getattr(self.env, attr_name)
        elif attr_name == "render_mode":
            value = None
        else:
            raise AttributeError(f"{self.env.env_id}: robopt env has no attribute {attr_name!r}")
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Set an attribute of the robopt env; it is shared by all rows, so ``indices`` must cover every row."""
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError(
                f"{self.env.env_id}: set_attr({attr_name!r}) sets the one robopt env shared by all rows; "
                "pass indices=None (all rows)"
            )
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: Any = None, **method_kwargs) -> list[Any]:
        """Call a method of the robopt env once; its result is repeated for each requested row."""
        method = getattr(self.env, method_name, None)
        if not callable(method):
            raise AttributeError(f"{self.env.env_id}: robopt env has no method {method_name!r}")
        result = method(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        """True for SB3's ``Monitor`` only: the view reports episodes as Monitor does; no other wrapper is present."""
        from stable_baselines3.common.monitor import Monitor

        return [wrapper_class is Monitor for _ in self._get_indices(indices)]

    def __repr__(self) -> str:
        return f"SB3VecEnvView({self.env.env_id}, num_envs={self.num_envs})"


@functools.cache
def sb3_view_class() -> type:
    """``SB3ViewMethods`` mixed into SB3's ``VecEnv`` (built once); a missing SB3 is a one-line ImportError."""
    try:
        from stable_baselines3.common.vec_env import VecEnv as SB3VecEnv
    except ImportError:
        raise ImportError(SB3_MISSING) from None
    namespace = {"__module__": __name__, "__qualname__": "SB3VecEnvView", "__doc__": SB3ViewMethods.__doc__}
    return type("SB3VecEnvView", (SB3ViewMethods, SB3VecEnv), namespace)


def __getattr__(name: str) -> Any:
    """Resolve ``SB3VecEnvView`` on first use (PEP 562), so importing this module never imports SB3."""
    if name == "SB3VecEnvView":
        return sb3_view_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
