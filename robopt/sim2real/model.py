"""The exported model on the deploy side: policy.onnx in ONNX Runtime, its start-up checks, action chunks.

Torch-free (numpy, onnxruntime). Shapes: K parity observations, D obs dim, A action dim, H action chunk.
    OnnxPolicy       policy.onnx in an ONNX Runtime session (1 thread): obs [D] float32 -> action [A] (or [H, A])
    verify_parity    the model against parity.npz (obs [K, D], action [K, A] or [K, H, A]) within 1e-5
    load_export      read and check an export directory: sidecar, hashes, graph dims, parity.npz
    ChunkedPolicy    executes an action chunk [H, A] one action per tick, replanning every k ticks
    RecurrentPolicy  a policy with memory (sidecar ``state_dim`` M > 0): holds its state [M] between ticks, zeroed by
                     ``reset()`` (at start, after a fault or an e-stop, at an episode boundary the robot reports)
    median_call_seconds  the median time of one policy call (the control loop refuses a period shorter than it)
"""

from __future__ import annotations

import statistics
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from robopt.sim2real.sidecar import DeployError, Sidecar, check_files, file_sha256, read_sidecar

PARITY_NAME, PARITY_TOLERANCE = "parity.npz", 1e-5


class OnnxPolicy:
    """policy.onnx in a single-threaded ONNX Runtime session; checks the graph against the sidecar at load."""

    def __init__(self, path: str | Path, sidecar: Sidecar) -> None:
        try:
            import onnxruntime
        except ImportError:
            raise DeployError("onnxruntime is not installed: pip install 'robopt[deploy]'") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own exception types for unreadable models
            raise DeployError(f"{str(path)!r} is not a loadable ONNX model ({str(error).splitlines()[0]})") from None
        self.input_name, self.output_name = sidecar.onnx_input, sidecar.onnx_output
        self.obs_dim, self.action_dim, self.chunk = sidecar.obs_dim, sidecar.action_dim, sidecar.action_chunk
        self.state_dim = sidecar.state_dim  # M > 0: the graph also takes and returns the policy's state
        self.state_names = (sidecar.onnx_state_input, sidecar.onnx_state_output)
        inputs = {node.name: node for node in self.session.get_inputs()}
        outputs = {node.name for node in self.session.get_outputs()}
        wanted_in = {self.input_name} | ({self.state_names[0]} if self.state_dim else set())
        wanted_out = {self.output_name} | ({self.state_names[1]} if self.state_dim else set())
        if set(inputs) != wanted_in or not wanted_out <= outputs:
            raise DeployError(
                f"policy.json names inputs {sorted(wanted_in)} and outputs {sorted(wanted_out)} but the ONNX graph has "
                f"inputs {sorted(inputs)} and outputs {sorted(outputs)}"
                + (
                    " (a graph that carries a state the sidecar does not declare: state_dim?)"
                    if len(inputs) > len(wanted_in)
                    else " (a policy with memory exported without its state?)"
                    if len(inputs) < len(wanted_in)
                    else ""
                )
            )
        width = inputs[self.input_name].shape[-1] if inputs[self.input_name].shape else None
        if isinstance(width, int) and width != self.obs_dim:
            raise DeployError(
                f"policy.onnx takes {width} observation values but policy.json says obs_dim {self.obs_dim}"
            )
        expected = (1, self.action_dim) if self.chunk == 1 else (1, self.chunk, self.action_dim)
        try:
            shape = self.batch(np.zeros((1, self.obs_dim), dtype=np.float32)).shape
        except Exception as error:  # wrong input rank or width the graph only finds at run time
            raise DeployError(
                f"policy.onnx fails on a [1, {self.obs_dim}] observation: {str(error).splitlines()[0]}"
            ) from None
        if shape != expected:
            raise DeployError(
                f"policy.onnx outputs shape {list(shape)} for one observation but policy.json says {list(expected)} "
                f"(action_dim {self.action_dim}, action_chunk {self.chunk})"
            )

    def batch(self, obs: np.ndarray) -> np.ndarray:
        """obs [K, D] float32 -> action [K, A] (or [K, H, A]); a policy with memory from the episode-start state."""
        if self.state_dim:
            return self.step(obs, np.zeros((len(obs), self.state_dim), dtype=np.float32))[0]
        return self.session.run([self.output_name], {self.input_name: obs})[0]

    def step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A policy with memory: obs [K, D] and state [K, M] float32 -> action [K, A] and next state [K, M]."""
        feeds = {self.input_name: obs, self.state_names[0]: state}
        action, next_state = self.session.run([self.output_name, self.state_names[1]], feeds)
        return action, next_state

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """obs [D] float32 -> action [A] (or [H, A]); a policy with memory from the episode-start state."""
        if self.state_dim:
            return self.batch(obs[None])[0]
        return self.session.run([self.output_name], {self.input_name: obs[None]})[0][0]


class RecurrentPolicy:
    """A policy with memory behind the runtime's ``obs [D] -> action [A]`` call: the state [1, M] it carries from tick
    to tick, zeroed by ``reset()`` (the control loop calls it at start, after a fault or an e-stop and when the robot
    reports a new episode; a state is never carried across one)."""

    def __init__(self, model: OnnxPolicy) -> None:
        self.model = model
        self.state = np.zeros((1, model.state_dim), dtype=np.float32)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        action, next_state = self.model.step(obs[None], self.state)
        self.state = next_state  # only once the step succeeded: a failing call leaves the state as it was
        return action[0]

    def reset(self) -> None:
        self.state = np.zeros_like(self.state)


def _read_parity(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(obs, action) arrays of parity.npz; DeployError when the file is not an npz archive holding numeric ones."""
    errors = (OSError, TypeError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
    try:
        data = np.load(path, allow_pickle=False)
    except errors as error:
        raise DeployError(f"{str(path)!r} is not a readable npz archive ({error})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):  # a plain .npy array under that name
        raise DeployError(f"{str(path)!r} is not an npz archive (it holds one {type(data).__name__})")
    try:
        with data:
            obs, expected = np.asarray(data["obs"]), np.asarray(data["action"])
    except errors as error:
        raise DeployError(f"{str(path)!r} is corrupt or lacks the obs/action arrays ({error})") from None
    for name, array in (("obs", obs), ("action", expected)):
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise DeployError(f"{str(path)!r}: {name} holds {array.dtype} values, not numbers")
    return obs, expected


def verify_parity(policy: OnnxPolicy, path: Path, tolerance: float = PARITY_TOLERANCE) -> float:
    """Max |ONNX Runtime - recorded torch export| over parity.npz; DeployError when above ``tolerance``."""
    obs, expected = _read_parity(path)
    shape = (policy.action_dim,) if policy.chunk == 1 else (policy.chunk, policy.action_dim)
    if obs.ndim != 2 or obs.shape[1] != policy.obs_dim or expected.shape != (obs.shape[0], *shape):
        raise DeployError(
            f"{str(path)!r} holds obs {list(obs.shape)} and action {list(expected.shape)}, not [K, D] / "
            f"[K, {', '.join(map(str, shape))}] for this policy"
        )
    if len(obs) == 0:
        return 0.0
    if policy.state_dim:
        return _verify_sequence(policy, path, obs, expected, tolerance)
    try:
        got = policy.batch(obs.astype(np.float32))
    except Exception:  # a graph with a fixed batch of 1
        got = np.stack([policy(row) for row in obs.astype(np.float32)])
    diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    if not (diff <= tolerance).all():  # NaN fails too
        raise DeployError(
            f"policy.onnx does not reproduce {PARITY_NAME}: max |diff| {np.nanmax(diff):.3g} > {tolerance:g} "
            "(the model or the ONNX Runtime build differs from the export's)"
        )
    return float(diff.max())


def _verify_sequence(policy: OnnxPolicy, path: Path, obs: np.ndarray, expected: np.ndarray, tolerance: float) -> float:
    """A policy with memory against parity.npz's sequence: stepped one tick at a time with a ``RecurrentPolicy``,
    reset where ``episode_start`` is set, as the control loop runs it."""
    with np.load(path, allow_pickle=False) as data:
        if "episode_start" not in data:
            raise DeployError(f"{str(path)!r} lacks episode_start: not the parity sequence of a policy with memory")
        starts = np.asarray(data["episode_start"], dtype=bool)
    if starts.shape != (len(obs),):
        raise DeployError(f"{str(path)!r}: episode_start has shape {list(starts.shape)}, not [{len(obs)}]")
    runner, got = RecurrentPolicy(policy), []
    for row, start in zip(obs.astype(np.float32), starts):
        if start:
            runner.reset()
        got.append(runner(row))
    diff = np.abs(np.stack(got).astype(np.float64) - expected.astype(np.float64))
    if not (diff <= tolerance).all():  # NaN fails too
        raise DeployError(
            f"policy.onnx does not reproduce the {len(obs)}-step sequence of {PARITY_NAME}: max |diff| "
            f"{np.nanmax(diff):.3g} > {tolerance:g} (the model or the ONNX Runtime build differs from the export's)"
        )
    return float(diff.max())


def load_export(directory: str | Path) -> tuple[Sidecar, OnnxPolicy]:
    """The sidecar and ONNX policy of an export directory after every start-up check (DeployError, one line)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DeployError(f"export directory {str(directory)!r} does not exist")
    sidecar = read_sidecar(directory)
    policy = OnnxPolicy(check_files(directory, sidecar, "onnx"), sidecar)
    parity = directory / PARITY_NAME
    if parity.is_file():
        expected = sidecar.files_sha256.get(PARITY_NAME)
        if expected and file_sha256(parity) != expected:
            raise DeployError(f"{str(parity)!r} does not match the sha256 recorded in policy.json")
        verify_parity(policy, parity)
    return sidecar, policy


class ChunkedPolicy:
    """Executes an action chunk [H, A] tick by tick, calling the model every ``replan_every`` ticks."""

    def __init__(self, policy: Callable[[np.ndarray], np.ndarray], horizon: int, replan_every: int) -> None:
        self.policy, self.horizon, self.replan_every = policy, horizon, replan_every
        self._chunk: np.ndarray | None = None
        self._index = 0

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self._chunk is None or self._index >= self.replan_every:
            chunk = np.asarray(self.policy(obs), dtype=np.float64)
            self._chunk, self._index = chunk.reshape(self.horizon, -1), 0  # [H, A]
        self._index += 1
        return self._chunk[self._index - 1]

    def reset(self) -> None:
        """Drop the current chunk: the next call replans (the safety layer calls this after a fault)."""
        self._chunk = None


def median_call_seconds(policy: Callable, obs_dim: int, calls: int = 25) -> float:
    """Median wall time of one policy call on a zero observation (after 3 warm-up calls)."""
    obs = np.zeros(obs_dim, dtype=np.float32)
    times = []
    try:
        for i in range(calls + 3):
            start = time.perf_counter()
            policy(obs)
            if i >= 3:
                times.append(time.perf_counter() - start)
    except Exception as error:  # a model that fails at start is a start-up error, not a tick fault
        raise DeployError(f"the policy fails on a zero observation: {str(error).splitlines()[0]}") from None
    return statistics.median(times)
