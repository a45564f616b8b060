"""Meta-World rows in a process of the Meta-World venv (``make metaworld``), driven by ``robopt.envs.metaworld_env``.

Meta-World 3.1.1 pins ``mujoco==3.3.0`` and does not run on robopt's MuJoCo, so its envs never load in robopt's
process: each worker is this file run by the Meta-World venv's Python (``python metaworld_worker.py``), holding some
rows of one task and answering requests on its stdin/stdout. Module level imports only the standard library and
numpy, so robopt's side imports the message codec from here; Meta-World is imported in ``main`` alone.

Messages are frames: a 4-byte little-endian length, a JSON header, then the raw bytes of the arrays the header lists
(``arrays``: ``[dtype, shape]`` each). Requests (``cmd``) and replies:
    ``init``   {task, seeds, benchmark_seed, reward, terminate_on_success}
               -> {obs_dim, action_dim, max_episode_steps, dt}, arrays (action_low [A], action_high [A])
    ``reset``  {seeds: a seed per row or null} -> obs [n, D] float32
    ``step``   action [n, A] float32 -> obs, final_obs [n, D] float32, reward [n] float64, terminated, truncated,
               success [n] bool (the episode succeeded at some step so far; at its end, the episode's success)
    ``expert`` -> the task's scripted policy (``metaworld.policies``) at each row's observation [n, A] float32
    ``close``  -> the worker exits
A failure is a reply ``{"error": "<one line>"}``; the worker then waits for the next request.

Shapes: n rows of this worker, D = 39 observation width, A = 4 action width.
"""

from __future__ import annotations

import json
import struct
import sys
from typing import BinaryIO

import numpy as np

REWARDS = ("sparse", "dense")


def write_message(stream: BinaryIO, header: dict, arrays: tuple[np.ndarray, ...] = ()) -> None:
    """One frame: the header (with the arrays' dtypes and shapes) and the arrays' bytes, flushed."""
    arrays = tuple(np.ascontiguousarray(array) for array in arrays)
    head = json.dumps({**header, "arrays": [[array.dtype.str, list(array.shape)] for array in arrays]}).encode()
    stream.write(struct.pack("<I", len(head)) + head + b"".join(array.tobytes() for array in arrays))
    stream.flush()


def read_message(stream: BinaryIO) -> tuple[dict, list[np.ndarray]]:
    """The next frame's header and arrays; EOFError when the other side has closed the stream."""
    (length,) = struct.unpack("<I", _read_exact(stream, 4))
    header = json.loads(_read_exact(stream, length))
    arrays = []
    for dtype, shape in header.pop("arrays"):
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        arrays.append(np.frombuffer(_read_exact(stream, size), dtype=dtype).reshape(shape).copy())
    return header, arrays


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the stream closed inside a frame" if data else "the stream closed")
        data += chunk
    return data


class Rows:
    """n rows of one Meta-World task (MT1: the task's 50 goal variations, one drawn per episode by the row's seed)."""

    def __init__(self, task: str, seeds: list[int], benchmark_seed: int, reward: str, terminate_on_success: bool):
        import metaworld
        import metaworld.policies

        if task not in metaworld.ALL_V3_ENVIRONMENTS:
            raise ValueError(f"unknown Meta-World task {task!r}")
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; allowed: {', '.join(REWARDS)}")
        benchmark = metaworld.MT1(task, seed=benchmark_seed)  # the task's goal variations, as Meta-World draws them
        self.variations = benchmark.train_tasks
        self.envs = [benchmark.train_classes[task]() for _ in seeds]
        self.policy = metaworld.policies.ENV_POLICY_MAP[task]()
        self.reward, self.terminate_on_success = reward, terminate_on_success
        self.rngs = [np.random.default_rng(seed) for seed in seeds]  # each row's draw of goal variations
        self.obs = [None] * len(seeds)  # each row's last observation, float64 as Meta-World returns it
        self.succeeded = np.zeros(len(seeds), dtype=bool)
        for env, seed in zip(self.envs, seeds):
            env.seed(seed)

    def spec(self) -> tuple[dict, tuple[np.ndarray, ...]]:
        env = self.envs[0]
        header = {
            "obs_dim": int(np.prod(env.observation_space.shape)),
            "action_dim": int(np.prod(env.action_space.shape)),
            "max_episode_steps": int(env.max_path_length),
            "dt": float(env.dt),
        }
        return header, (env.action_space.low.astype(np.float32), env.action_space.high.astype(np.float32))

    def reset(self, seeds: list[int] | None) -> np.ndarray:
        if seeds is not None:
            self.rngs = [np.random.default_rng(seed) for seed in seeds]
            for env, seed in zip(self.envs, seeds):
                env.seed(seed)
        for row in range(len(self.envs)):
            self._reset_row(row)
        return np.stack(self.obs).astype(np.float32)

    def _reset_row(self, row: int) -> None:
        env = self.envs[row]
        env.set_task(self.variations[int(self.rngs[row].integers(len(self.variations)))])
        self.obs[row], _ = env.reset()
        self.succeeded[row] = False

    def step(self, action: np.ndarray) -> tuple[np.ndarray, ...]:
        count = len(self.envs)
        obs, final_obs = np.empty((2, count, len(self.obs[0])), dtype=np.float32)
        reward = np.empty(count, dtype=np.float64)
        terminated, truncated = np.zeros((2, count), dtype=bool)
        success = np.zeros(count, dtype=bool)
        for row, env in enumerate(self.envs):
            observation, dense, _, truncated[row], info = env.step(action[row])
            now = bool(info["success"])
            self.succeeded[row] |= now
            success[row] = self.succeeded[row]
            reward[row] = float(now) if self.reward == "sparse" else float(dense)
            terminated[row] = now and self.terminate_on_success
            truncated[row] = (truncated[row] or env.curr_path_length >= env.max_path_length) and not terminated[row]
            final_obs[row] = observation
            self.obs[row] = observation
            if terminated[row] or truncated[row]:
                self._reset_row(row)
            obs[row] = self.obs[row]
        return obs, final_obs, reward, terminated, truncated, success

    def expert(self) -> np.ndarray:
        return np.stack([self.policy.get_action(obs) for obs in self.obs]).astype(np.float32)


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer requests until ``close`` or the end of stdin."""
    rows = None
    while True:
        try:
            header, arrays = read_message(stdin)
        except EOFError:
            return
        command = header.get("cmd")
        try:
            if command == "close":
                write_message(stdout, {"ok": True})
                return
            if command == "init":
                rows = Rows(
                    header["task"],
                    header["seeds"],
                    header["benchmark_seed"],
                    header["reward"],
                    header["terminate_on_success"],
                )
                reply = rows.spec()
            elif rows is None:
                raise ValueError(f"request {command!r} before init")
            elif command == "reset":
                reply = {}, (rows.reset(header["seeds"]),)
            elif command == "step":
                reply = {}, rows.step(arrays[0])
            elif command == "expert":
                reply = {}, (rows.expert(),)
            else:
                raise ValueError(f"unknown request {command!r}")
        except Exception as error:  # one line back to robopt, which raises it there; the worker stays up
            text = " ".join(str(error).split()) or type(error).__name__
            write_message(stdout, {"error": f"{type(error).__name__}: {text}"})
            continue
        write_message(stdout, *reply)


def main() -> None:
    import warnings

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever Meta-World prints goes to stderr, never into the frames
    warnings.filterwarnings("ignore")  # Gymnasium's space checks and the experts' gain warnings, once per row
    serve(stdin, stdout)


if __name__ == "__main__":
    main()
