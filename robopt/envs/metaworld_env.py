"""Meta-World's 50 Sawyer tasks (``metaworld/<task>-v3``) behind the torch VecEnv contract, stepped in worker processes.

Meta-World 3.1.1 pins ``mujoco==3.3.0``; robopt's venv has MuJoCo 4, on which Meta-World's mocap weld data has the
wrong length. So Meta-World lives in its own venv (``make metaworld`` builds ``.venv-metaworld``: numpy, mujoco
3.3.0, metaworld, nothing of robopt's) and robopt never imports it: each worker is that venv's Python running
``robopt/envs/metaworld_worker.py``, holding a contiguous block of rows, and the rows' blocks step in parallel (one
worker per core by default). The policy, the losses and the data stay in robopt's process.

One task per run, as Meta-World's MT1 defines it: the task's 50 goal variations (``metaworld.MT1(task,
seed=benchmark_seed)``), one drawn per episode from the row's own seed. Rewards: ``sparse`` (1.0 at a step where the
task's ``success`` holds; with ``terminate_on_success``, the episode ends there: the success is a terminal state) or
``dense`` (Meta-World's v2 shaped reward, 0 to 10 a step). The 500-step limit truncates. ``info["is_success"]`` is
whether the episode has succeeded at some step so far, so at an episode's end it is Meta-World's episode success
(its own evaluation ends an episode at the first success).

Shapes: N envs (rows), D = 39 observation width, A = 4 action width (end-effector delta xyz and the gripper).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from robopt.core.errors import NonFiniteError
from robopt.envs.episode_stats import EpisodeTracker
from robopt.envs.metaworld_worker import REWARDS, read_message, write_message

PREFIX = "metaworld/"
PYTHON_VARIABLE = "ROBOPT_METAWORLD_PYTHON"
VENV = ".venv-metaworld"
WORKER = Path(__file__).with_name("metaworld_worker.py")

# The difficulty groups of Seo et al. 2022 (Masked World Models, appendix), which 3D Diffusion Policy and later
# Meta-World fine-tuning papers report by: 28 easy, 11 medium, 6 hard, 5 very hard.
# fmt: off
GROUPS: dict[str, tuple[str, ...]] = {
    "easy": (
        "button-press", "button-press-topdown", "button-press-topdown-wall", "button-press-wall", "coffee-button",
        "dial-turn", "door-close", "door-lock", "door-open", "door-unlock", "drawer-close", "drawer-open",
        "faucet-close", "faucet-open", "handle-press", "handle-press-side", "handle-pull", "handle-pull-side",
        "lever-pull", "peg-unplug-side", "plate-slide", "plate-slide-back", "plate-slide-back-side",
        "plate-slide-side", "reach", "reach-wall", "window-close", "window-open",
    ),
    "medium": (
        "basketball", "bin-picking", "box-close", "coffee-pull", "coffee-push", "hammer", "peg-insert-side",
        "push-wall", "soccer", "sweep", "sweep-into",
    ),
    "hard": ("assembly", "hand-insert", "pick-out-of-hole", "pick-place", "push", "push-back"),
    "very hard": ("disassemble", "pick-place-wall", "shelf-place", "stick-pull", "stick-push"),
}
# fmt: on
TASKS: dict[str, str] = {f"{name}-v3": group for group, names in GROUPS.items() for name in names}  # task -> group


def task_name(env_id: str) -> str:
    """``metaworld/<task>-v3`` -> ``<task>-v3``; an unknown task is a ValueError that lists the 50."""
    name = env_id.removeprefix(PREFIX)
    if name not in TASKS:
        listed = "; ".join(f"{group}: {', '.join(f'{n}-v3' for n in names)}" for group, names in GROUPS.items())
        raise ValueError(f"unknown Meta-World task {name!r}; the 50 tasks ({PREFIX}<task>) are {listed}")
    return name


def metaworld_python(python: str | None = None) -> str:
    """The Python that runs the workers: ``python``, else ``$ROBOPT_METAWORLD_PYTHON``, else ``.venv-metaworld`` in the
    working directory or in robopt's source tree; none of them is a one-line ValueError saying how to build it."""
    named = python or os.environ.get(PYTHON_VARIABLE)
    if named:
        if not Path(named).is_file():
            raise ValueError(f"the Meta-World Python {named!r} does not exist")
        return str(named)
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        candidate = root / VENV / "bin" / "python"
        if candidate.is_file():
            return str(candidate)
    raise ValueError(
        f"Meta-World runs in its own venv (it pins mujoco 3.3.0, robopt's venv has MuJoCo 4): run `make metaworld` "
        f"to build {VENV}, or set {PYTHON_VARIABLE} to a Python with metaworld==3.1.1"
    )


class MetaWorldVecEnv:
    """N rows of one Meta-World task, in ``workers`` processes of the Meta-World venv."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: str | torch.device = "cpu",
        reward: str = "sparse",
        terminate_on_success: bool = True,
        benchmark_seed: int = 0,
        workers: int | None = None,
        python: str | None = None,
    ) -> None:
        self.task = task_name(env_id)
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if reward not in REWARDS:
            raise ValueError(f"unknown Meta-World reward {reward!r}; allowed: {', '.join(REWARDS)}")
        workers = min(num_envs, os.cpu_count() or 1) if workers is None else workers
        if not 1 <= workers <= num_envs:
            raise ValueError(f"workers must be between 1 and num_envs={num_envs}, got {workers}")
        self.env_id, self.num_envs, self.device = PREFIX + self.task, num_envs, torch.device(device)
        bounds = np.linspace(0, num_envs, workers + 1).round().astype(int)
        self._blocks = [(int(start), int(stop)) for start, stop in zip(bounds[:-1], bounds[1:])]  # rows per worker
        self._workers: list[tuple[subprocess.Popen, object]] = []
        python = metaworld_python(python)
        try:
            self._start(python, benchmark_seed, reward, terminate_on_success)
        except BaseException:
            self.close()
            raise
        self._tracker = EpisodeTracker(num_envs, device=None)

    def _start(self, python: str, benchmark_seed: int, reward: str, terminate_on_success: bool) -> None:
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        for _ in self._blocks:
            log = tempfile.TemporaryFile()  # the worker's stderr: its last lines explain a crash
            process = subprocess.Popen(
                [python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=environment
            )
            self._workers.append((process, log))
        for (process, _), (start, stop) in zip(self._workers, self._blocks):
            request = {"task": self.task, "seeds": list(range(start, stop)), "benchmark_seed": benchmark_seed}
            request.update(cmd="init", reward=reward, terminate_on_success=bool(terminate_on_success))
            self._send(process, request)
        replies = [self._receive(process) for process, _ in self._workers]
        header, (low, high) = replies[0]
        self.obs_dim, self.action_dim = header["obs_dim"], header["action_dim"]
        self.max_episode_steps, self.dt = header["max_episode_steps"], header["dt"]  # dt: the control period, s
        self.action_low = torch.as_tensor(low, device=self.device)
        self.action_high = torch.as_tensor(high, device=self.device)

    def _send(self, process: subprocess.Popen, header: dict, arrays: tuple[np.ndarray, ...] = ()) -> None:
        try:
            write_message(process.stdin, header, arrays)
        except (BrokenPipeError, OSError):
            raise RuntimeError(self._crash(process)) from None

    def _receive(self, process: subprocess.Popen) -> tuple[dict, list[np.ndarray]]:
        try:
            header, arrays = read_message(process.stdout)
        except EOFError:
            raise RuntimeError(self._crash(process)) from None
        if "error" in header:
            error = header["error"]
            if "No module named 'metaworld'" in error:
                error += f" (that Python has no Meta-World: run `make metaworld`, or point {PYTHON_VARIABLE} at one)"
            raise ValueError(f"{self.env_id}: {error}")
        return header, arrays

    def _crash(self, process: subprocess.Popen) -> str:
        """One line: the worker's exit and the last line of its stderr."""
        code = process.wait(timeout=10)
        log = next(log for worker, log in self._workers if worker is process)
        log.seek(0)
        lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
        last = lines[-1] if lines else "no output"
        return f"{self.env_id}: a Meta-World worker exited (code {code}): {last}"

    def _ask(self, requests: list[tuple[dict, tuple[np.ndarray, ...]]]) -> list[list[np.ndarray]]:
        """One request per worker, sent to all before any reply is read (the workers step at once)."""
        for (process, _), (header, arrays) in zip(self._workers, requests):
            self._send(process, header, arrays)
        return [self._receive(process)[1] for process, _ in self._workers]

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset all rows; row i draws its goal variations from ``seed + i`` when a seed is given."""
        requests = [
            ({"cmd": "reset", "seeds": None if seed is None else list(range(seed + start, seed + stop))}, ())
            for start, stop in self._blocks
        ]
        obs = np.concatenate([arrays[0] for arrays in self._ask(requests)])
        self._tracker.reset()
        return self._tensor(obs)

    def step(self, action: torch.Tensor):
        """Step every row with action [N, A]; see ``robopt.core.protocols.VecEnv``."""
        action_np = self._check_action(action)
        replies = self._ask([({"cmd": "step"}, (action_np[start:stop],)) for start, stop in self._blocks])
        obs, final_obs, reward, terminated, truncated, success = (np.concatenate(part) for part in zip(*replies))
        if not np.isfinite(reward).all():
            raise NonFiniteError(f"non-finite reward from env {self.env_id}")
        done = terminated | truncated
        episode_return, episode_length = self._tracker.update(reward, done)
        info = {
            "final_obs": self._tensor(final_obs),
            "episode_return": self._tensor(episode_return),
            "episode_length": self._tensor(episode_length),
            "is_success": self._tensor(success),
            "log": {"success": (int((success & done).sum()), int(done.sum()))},  # env/success: over episodes ended
        }
        reward = reward.astype(np.float32)
        return self._tensor(obs), self._tensor(reward), self._tensor(terminated), self._tensor(truncated), info

    def expert_action(self) -> torch.Tensor:
        """The task's scripted policy (``metaworld.policies``) at each row's current observation, [N, A]."""
        actions = self._ask([({"cmd": "expert"}, ()) for _ in self._blocks])
        return self._tensor(np.concatenate([arrays[0] for arrays in actions]))

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _check_action(self, action: torch.Tensor) -> np.ndarray:
        if not isinstance(action, torch.Tensor) or not action.dtype.is_floating_point:
            raise TypeError(f"{self.env_id}: action must be a floating-point torch.Tensor [N, A]")
        if tuple(action.shape) != (self.num_envs, self.action_dim):
            raise ValueError(
                f"{self.env_id}: action must have shape [{self.num_envs}, {self.action_dim}], got {list(action.shape)}"
            )
        action_np = action.detach().cpu().numpy().astype(np.float32)
        if not np.isfinite(action_np).all():
            raise ValueError(f"{self.env_id}: action contains NaN or Inf")
        return action_np

    def close(self) -> None:
        """Ask every worker to exit, and end those that do not within a few seconds."""
        for process, log in self._workers:
            try:
                if process.poll() is None:
                    write_message(process.stdin, {"cmd": "close"})
                    process.stdin.close()
                process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                process.kill()
                process.wait()
            finally:
                if process.stdout is not None:
                    process.stdout.close()
                log.close()
        self._workers = []

    def __del__(self) -> None:
        if getattr(self, "_workers", None):
            self.close()
