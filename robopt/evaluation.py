"""Deterministic evaluation of a trained run, and MP4 recording through MuJoCo offscreen rendering."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from robopt.build import (
    available_device,
    build_env,
    build_policy,
    evaluation_env_options,
    resolve_torch_threads,
)
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError
from robopt.envs.render import (
    DEFAULT_HEIGHT,
    DEFAULT_VIDEO_FPS,
    DEFAULT_WIDTH,
    NativeRowRenderer,
    gymnasium_camera_kwargs,
)
from robopt.experiment import ExperimentConfig, load_config, load_run_config
from robopt.options import WARP_ONLY_OPTIONS
from robopt.policies.recurrent import PolicyActor


@dataclass(frozen=True)
class EvalResult:
    mean_return: float
    std_return: float
    mean_length: float
    returns: list[float]
    success_rate: float | None = None  # goal tasks (envs reporting info["is_success"]): fraction of successes
    mean_score: float | None = None  # envs reporting info["success_score"] (Push-T's coverage): mean at the end


class PeriodicEvaluation:
    """Deterministic evaluations during training every ``log.eval_every`` env steps (rank 0), on an env of its own
    built at the first one, with the final evaluation's episodes and seeds. The global RNG streams are restored
    after each, so a run trains the same with or without them; ``seconds`` is their total time."""

    def __init__(self, config: ExperimentConfig, env_steps: int) -> None:
        if config.env.backend == "isaaclab":
            raise ConfigError(
                "log.eval_every builds a second env, and Isaac Lab runs one simulation per process; set "
                "log.eval_every=0 (the final evaluation runs after the training envs close)"
            )
        self.config, self.every, self.env, self.seconds = config, config.log.eval_every, None, 0.0
        self.next_at = (env_steps // self.every + 1) * self.every

    def __call__(self, policy, env_steps: int) -> dict[str, float]:
        """``eval_return`` (and its std, success rate) when ``env_steps`` reached the next evaluation; else {}."""
        if env_steps < self.next_at:
            return {}
        from robopt.checkpoint import rng_state, set_rng_state

        start, state, config = time.perf_counter(), rng_state(), self.config
        try:
            if self.env is None:
                self.env = build_env(config, num_envs=config.log.eval_episodes, **evaluation_env_options(config))
            result = evaluate_policy(policy, self.env, config.log.eval_episodes, seed=config.seed + 10_000)
        finally:
            set_rng_state(state)
            self.seconds += time.perf_counter() - start
        self.next_at = (env_steps // self.every + 1) * self.every
        values = {"eval_return": result.mean_return, "eval_return_std": result.std_return}
        if result.success_rate is not None:
            values["eval_success_rate"] = result.success_rate
        if result.mean_score is not None:
            values["eval_score"] = result.mean_score
        return values

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def load_policy(run_dir: Path, config: ExperimentConfig | None = None) -> tuple[ExperimentConfig, torch.nn.Module]:
    """The run's config and its policy restored from the last checkpoint (built from ``config`` if given).

    Sets torch's intra-op threads as training did (``resolve_torch_threads``: 1 on CPU unless ``torch_threads``
    says otherwise): with torch's default, evaluating beside other processes spins against them (a batched EXPO
    Hopper action, 20 rows, beside two training runs on 2 cores: 23.5 ms with torch's 2 threads, 6 ms with 1)."""
    config = config or load_run_config(run_dir)
    torch.set_num_threads(resolve_torch_threads(config)[0])
    path = Path(run_dir) / LAST_CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"run {str(run_dir)!r} has no checkpoint yet ({LAST_CHECKPOINT})")
    env = build_env(config, num_envs=1, **evaluation_env_options(config))
    policy = build_policy(config, env)
    env.close()
    try:
        policy.load_state_dict(load_checkpoint(path)["loop"]["policy"])
    except pickle.UnpicklingError:  # not a torch file at all (torch's own message suggests weights_only=False)
        raise ConfigError(f"checkpoint {str(path)!r} is corrupt (not a readable torch file)") from None
    except (RuntimeError, KeyError, EOFError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"checkpoint {str(path)!r} does not match this robopt version or the run's config: {first}"
        ) from None
    return config, policy.eval()


@torch.no_grad()
def evaluate_policy(policy, env, episodes: int, seed: int) -> EvalResult:
    """Run exactly one episode per env row (env.num_envs == episodes) with the deterministic action.

    The policy and the env may live on different devices (a policy trained on CUDA evaluated on a Gymnasium env):
    observations go to the policy's device and actions back to the env's."""
    obs = env.reset(seed=seed)
    parameter = next(policy.parameters(), None) if isinstance(policy, torch.nn.Module) else None
    policy_device = parameter.device if parameter is not None else obs.device
    env_device = obs.device
    returns = torch.full((env.num_envs,), float("nan"))
    lengths = torch.zeros(env.num_envs)
    success = torch.zeros(env.num_envs, dtype=torch.bool)
    score = torch.full((env.num_envs,), float("nan"))
    has_success = False
    actor = PolicyActor(policy, env.num_envs)  # carries a recurrent policy's state, reset where episodes end
    while torch.isnan(returns[:episodes]).any():
        action, _ = actor.act(obs.to(policy_device), deterministic=True)
        action = action.to(env_device)
        action = torch.maximum(torch.minimum(action, env.action_high), env.action_low)
        obs, _, terminated, truncated, info = env.step(action)
        actor.episode_ended(terminated | truncated)
        first = (terminated | truncated).cpu() & torch.isnan(returns)
        returns[first] = info["episode_return"].cpu()[first]
        lengths[first] = info["episode_length"].cpu().float()[first]
        if "is_success" in info:
            has_success = True
            success[first] = info["is_success"].cpu()[first]
        if "success_score" in info:
            score[first] = info["success_score"].cpu().float()[first]
    values = returns[:episodes].tolist()
    rate = float(success[:episodes].float().mean()) if has_success else None
    final = None if torch.isnan(score[:episodes]).all() else float(score[:episodes].nanmean())
    return EvalResult(
        float(np.mean(values)), float(np.std(values)), float(lengths[:episodes].mean()), values, rate, final
    )


def evaluate_run(run_dir: Path, episodes: int = 10, seed: int = 10_000) -> EvalResult:
    if episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {episodes}")
    config, policy = load_policy(run_dir)
    env = build_env(config, num_envs=episodes, **evaluation_env_options(config))
    try:
        return evaluate_policy(policy, env, episodes, seed)
    finally:
        env.close()


def task_expert_env(path: Path, num_envs: int, seed: int) -> tuple[object, Callable, dict]:
    """A robot task's env (the config file's, ``num_envs`` rows), its scripted expert (``task.expert``) and the
    metadata a dataset of its episodes records."""
    from robopt.envs.robot.experts import task_expert

    config = load_config(path)
    if config.env.id != "robot" or not config.task.expert:
        raise ConfigError(
            f"--expert {str(path)!r}: its task has no scripted expert (task.expert: lift, place or push_t); the "
            "shipped tasks with one: configs/ppo_lift_cube.yaml, configs/ppo_place_cube.yaml, configs/ppo_push_t.yaml"
        )
    env = build_env(config, num_envs=num_envs, policy_side=False)
    if hasattr(env, "inner"):  # wrapped: the expert steps the native env and records its whole observation
        raise ConfigError(
            f"--expert {str(path)!r}: env.observe selects observations; record the task's whole observation"
        )
    try:
        act = task_expert(env, config.task.expert, seed)
    except ValueError as error:
        raise ConfigError(f"--expert {str(path)!r}: {error}") from None
    metadata = {"source": "expert", "algorithm_name": f"scripted expert ({config.task.expert})", "config": str(path)}
    return env, act, metadata


class ScriptedPolicy:
    """A scripted expert (``act(obs) -> action``, reading its env's state) where a policy is expected: its action is
    deterministic and bounded by the env's; no parameters, no memory."""

    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor], env) -> None:
        self._act, self.action_low, self.action_high = act, env.action_low, env.action_high

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self._act(obs), {}


def evaluate_expert(config_path: Path, episodes: int = 10, seed: int = 10_000) -> EvalResult:
    """The scripted expert of a robot task's config (``task.expert``) over ``episodes`` episodes, as
    ``evaluate_run`` scores a policy (its success rate from ``info["is_success"]``)."""
    if episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {episodes}")
    env, act, _ = task_expert_env(Path(config_path), episodes, seed)
    try:
        return evaluate_policy(ScriptedPolicy(act, env), env, episodes, seed)
    finally:
        env.close()


@torch.no_grad()
def record_expert_video(
    config_path: Path,
    path: Path,
    seed: int = 10_000,
    max_steps: int = 1000,
    progress: bool = True,
    fps: float = DEFAULT_VIDEO_FPS,
) -> int:
    """Film one episode of the scripted expert of a robot task's config, as ``record_video`` films a run."""
    _check_video(max_steps, fps)
    env, act, _ = task_expert_env(Path(config_path), 1, seed)
    try:
        every = frame_stride(1.0 / env.dt, fps)
        frames = _native_frames(env, ScriptedPolicy(act, env), seed, max_steps, DEFAULT_WIDTH, DEFAULT_HEIGHT,
                                every=every)  # fmt: skip
        return _write_video(Path(path), frames, 1.0 / (env.dt * every), max_steps // every + 1, progress)
    finally:
        env.close()


def frame_stride(control_rate: float, fps: float) -> int:
    """Env steps per video frame: the control rate brought down to about ``fps`` by drawing every k-th step (k >= 1,
    the nearest whole number), so the video plays in real time at control_rate / k frames per second."""
    return max(1, round(control_rate / fps))


def _check_video(max_steps: int, fps: float) -> None:
    if max_steps < 0:
        raise ConfigError(f"video max_steps must be at least 0, got {max_steps}")
    if not fps > 0:
        raise ConfigError(f"video fps must be > 0 (frames drawn per second of the episode), got {fps}")


@torch.no_grad()
def record_video(
    run_dir: Path,
    path: Path,
    seed: int = 10_000,
    max_steps: int = 1000,
    fps: float = DEFAULT_VIDEO_FPS,
    width: int = DEFAULT_WIDTH,
    height: int = DEFAULT_HEIGHT,
    progress: bool = True,
) -> int:
    """Render one deterministic episode (at most ``max_steps`` steps) to ``path`` (MP4); returns the frame count.

    Native ``mujoco/<Task>`` runs are filmed from the native env itself, built with the run's own env options
    (randomization, time limit...); Gymnasium runs through ``gym.make(render_mode="rgb_array")``. Both use the
    task's camera from ``robopt.envs.render`` (the robot's tracking camera for locomotion). ``progress`` shows
    frames rendered on stderr (software rendering on a CPU-only machine: 0.05-0.15 s per 640x480 frame).
    Without a display, set ``MUJOCO_GL=egl`` (or ``osmesa``) before ``mujoco`` is first imported.
    A policy acting in chunks of H > 1 actions (``policy.horizon``) has each deterministic chunk played one action
    per step (``max_steps`` counting those steps), on the inner env of its ``ActionChunkEnv`` or the Gymnasium env.
    Frames are drawn at about ``fps`` per second of the episode, not at every control step: every k-th step
    (``frame_stride``; a 50 Hz task at the default 30 fps draws every 2nd step and plays at 25 fps), the video in
    real time. Rendering is most of a video's time, so this divides it by k.
    """
    _check_video(max_steps, fps)
    if width < 16 or height < 16:
        raise ConfigError(f"video size must be at least 16x16 pixels, got {width}x{height}")
    config = load_run_config(run_dir)
    if config.env.id.startswith("robopt/"):  # torch-native tasks (robopt/MultiGoal) have no MuJoCo scene to film
        raise ConfigError(f"video needs a MuJoCo task; {config.env.id} is a torch-native task without a renderer")
    config = video_config(config)
    _, policy = load_policy(run_dir, config)
    policy = PolicyActor(policy, 1)  # one episode, one state (a memoryless policy acts straight through)
    horizon = getattr(config.policy, "horizon", 1)  # actions per decision (build_env chunks the env when > 1)
    if config.env.backend == "gymnasium":
        env = _make_gymnasium_render_env(config, width, height)
        rate = float(env.metadata.get("render_fps", 30))  # a MuJoCo v5 env's control rate, 1 / dt
        every = frame_stride(rate, fps)
        frames = _gymnasium_frames(env, policy, seed, max_steps, horizon, every=every)
    else:
        env = build_env(config, num_envs=1)
        inner = env.inner if horizon > 1 else env  # the ActionChunkEnv's task env: its physics, one action a step
        rate = 1.0 / inner.dt
        every = frame_stride(rate, fps)
        frames = _native_frames(inner, policy, seed, max_steps, width, height, horizon, every=every)
    try:
        return _write_video(Path(path), frames, rate / every, max_steps // every + 1, progress)
    finally:
        env.close()


def video_config(config: ExperimentConfig) -> ExperimentConfig:
    """The run's config as a video is recorded from it: on the CPU when no GPU is present, one resolved backend.

    ``env.backend`` becomes ``gymnasium`` (filmed through ``gym.make``) or the native backend the run trained on
    (``auto`` is resolved as training resolved it); ``mujoco_warp`` without a GPU becomes ``mujoco`` (same task,
    options and randomization; Warp-only options dropped).
    """
    from robopt.envs.registry import resolve_backend

    device = available_device(config.device)
    kwargs = dict(config.env.kwargs)
    try:
        backend = resolve_backend(config.env.id, config.env.backend, device, config.env.num_envs, bool(kwargs))
    except ValueError as error:
        raise ConfigError(f"env.id={config.env.id!r}: {error}") from None
    if backend == "mujoco_warp" and device.type != "cuda":
        backend = "mujoco"
        kwargs = {key: value for key, value in kwargs.items() if key not in WARP_ONLY_OPTIONS}
    env = replace(config.env, backend=backend, kwargs=kwargs)
    return replace(config, device=str(device), env=env)


def _make_gymnasium_render_env(config: ExperimentConfig, width: int, height: int):
    """``gym.make`` of the run's Gymnasium id (or a native id's Gymnasium twin) with the task's camera."""
    import gymnasium as gym

    from robopt.envs.physics import quiet_known_asset_warnings
    from robopt.envs.registry import gymnasium_twin

    env_id = gymnasium_twin(config.env.id)
    kwargs = dict(config.env.kwargs)
    camera = gymnasium_camera_kwargs(env_id, kwargs)
    if camera:  # a MuJoCo v5 env: it also takes the image size
        kwargs = {"width": width, "height": height, **kwargs, **camera}
    with quiet_known_asset_warnings():
        return gym.make(env_id, render_mode="rgb_array", **kwargs)


def _deterministic_action(policy, obs: torch.Tensor) -> torch.Tensor:
    """The policy's mean action for obs [1, D], clipped to its bounds: [1, A] (a chunk: [1, H * A])."""
    action, _ = policy.act(obs, deterministic=True)
    return torch.maximum(torch.minimum(action, policy.action_high), policy.action_low)


def _deterministic_chunk(policy, obs: torch.Tensor, horizon: int) -> torch.Tensor:
    """The clipped deterministic chunk for obs [1, D] as its H actions in order: [H, 1, A] (row-major chunk)."""
    chunk = _deterministic_action(policy, obs)  # [1, H * A]
    return chunk.reshape(1, horizon, -1).transpose(0, 1)  # step h is chunk[:, h * A:(h + 1) * A]


def _gymnasium_frames(env, policy, seed: int, max_steps: int, horizon: int = 1, every: int = 1) -> Iterator[np.ndarray]:
    """Frames [H, W, 3] of one Gymnasium episode: the reset state, then one after every ``every``-th step (each
    chunk action counts as a step)."""
    obs, _ = env.reset(seed=seed)
    yield env.render()
    device = policy.action_low.device
    steps = 0
    while steps < max_steps:
        obs = torch.as_tensor(obs, dtype=torch.float32, device=device).reshape(1, -1)  # [1, D]
        for action in _deterministic_chunk(policy, obs, horizon)[: max_steps - steps]:  # [1, A] each
            obs, _, terminated, truncated, _ = env.step(action[0].cpu().numpy())
            steps += 1
            if steps % every == 0:
                yield env.render()
            if terminated or truncated:
                return


def _native_frames(
    env, policy, seed: int, max_steps: int, width: int, height: int, horizon: int = 1, every: int = 1
) -> Iterator[np.ndarray]:
    """Frames [H, W, 3] of row 0's first episode: the reset state, then one after every ``every``-th step (each
    chunk action counts as a step).

    ``env`` is the task env itself (an ActionChunkEnv's ``inner``), stepped one action [1, A] at a time. The env
    resets a row inside the step that ends its episode, so that step's state is gone by the time it could be
    drawn: the video stops one frame before a Gymnasium one would.
    """
    renderer = NativeRowRenderer(env, row=0, width=width, height=height)
    try:
        obs = env.reset(seed=seed)  # [1, D]
        yield renderer.render()
        steps = 0
        while steps < max_steps:
            chunk = _deterministic_chunk(policy, obs.to(policy.action_low.device), horizon).to(env.device)
            for action in chunk[: max_steps - steps]:  # [1, A] each
                obs, _, terminated, truncated, _ = env.step(action)
                steps += 1
                if bool(terminated[0] | truncated[0]):
                    return
                if steps % every == 0:
                    yield renderer.render()
    finally:
        renderer.close()


def _write_video(path: Path, frames: Iterator[np.ndarray], fps: float, max_frames: int, progress: bool) -> int:
    """Stream frames to an MP4 file (never all in memory) with a progress display; returns the frame count."""
    import imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with imageio.get_writer(str(path), fps=fps) as writer, FrameProgress(max_frames, enabled=progress) as bar:
        for frame in frames:
            writer.append_data(frame)
            count += 1
            bar.update(count)
    return count


class FrameProgress:
    """Frames rendered so far on stderr: a rich bar on a terminal, else one line per tenth; a no-op when disabled."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self._console = Console(stderr=True)
        self._bar = None
        self._next_line = 0
        self._start = time.monotonic()

    def __enter__(self) -> FrameProgress:
        self._start = time.monotonic()
        if self.enabled and self._console.is_terminal:
            self._bar = Progress(
                TextColumn("[bold]video"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self._console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("video", total=self.total)
        return self

    def update(self, frames: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=frames)
        elif self.enabled and frames >= self._next_line:
            self._console.print(f"video: {frames}/{self.total} frames, {time.monotonic() - self._start:.0f} s")
            self._next_line = frames + max(1, self.total // 10)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
