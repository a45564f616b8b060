"""The torch-free deploy runtime: an exported ONNX policy driving a robot at a fixed rate behind the safety layer.

Torch-free (numpy, onnxruntime, pyyaml). Shapes: D obs dim, A action dim, H action chunk (actions per model call).
    DeployConfig     the deploy YAML (period, bounds, rate limit, stale timeout, watchdog, e-stop, safe action...)
    OnnxPolicy       policy.onnx in an ONNX Runtime session (1 thread): obs [D] float32 -> action [A] (or [H, A])
    load_export      read and check an export directory: sidecar, hashes, graph dims, parity.npz
    ControlLoop      fixed-rate loop: read the robot, SafetyLayer.tick, send, log (safety.py holds the pure core)
"""

from __future__ import annotations

import math
import statistics
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robopt.config import ConfigError, build_dataclass, option
from robopt.sim2real.safety import FLAG_NAMES, SafetyLayer, TickLog, flag_names, load_log
from robopt.sim2real.sidecar import DeployError, Sidecar, check_files, file_sha256, read_sidecar

__all__ = [
    "FLAG_NAMES",
    "ChunkedPolicy",
    "ControlLoop",
    "DeployConfig",
    "OnnxPolicy",
    "SafetyLayer",
    "TickLog",
    "build_safety",
    "flag_names",
    "format_status",
    "format_summary",
    "load_deploy_config",
    "load_export",
    "load_log",
    "median_call_seconds",
    "verify_parity",
]
PARITY_NAME, PARITY_TOLERANCE = "parity.npz", 1e-5


@dataclass(frozen=True)
class DeployConfig:
    period: float = option(0.0, "control period in seconds (0: the policy's control_period from policy.json)")
    obs_low: Any = option(None, "observation lower bounds (a number or D numbers) replacing policy.json's; null: keep")
    obs_high: Any = option(None, "observation upper bounds (a number or D numbers) replacing policy.json's; null: keep")
    obs_bound_action: str = option("safe", "an observation outside its bounds: safe action or clip", ("safe", "clip"))
    max_action_delta: Any = option(None, "largest action change per tick (a number or A numbers > 0); null: no limit")
    stale_timeout_ms: float = option(0.0, "an observation older than this is stale (0: three control periods)")
    watchdog_ms: float = option(0.0, "compute budget per tick; a tick over it is a fault (0: the period)")
    estop_after: int = option(10, "consecutive faulty ticks that latch the e-stop (0: never)")
    safe_action: str = option("hold", "action target on a fault or e-stop", ("hold", "zero", "posture"))
    posture: Any = option(None, "the safe posture (A numbers within the action bounds) for safe_action: posture")
    chunk_replan_every: int = option(0, "action chunks (H > 1): call the policy every k ticks (0: every H ticks)")
    log_capacity: int = option(100_000, "ticks kept in the ring log")
    log_path: str = option("", "save the tick log here (.npy) when the loop closes; empty: no file")

    def __post_init__(self) -> None:
        checks = {
            "period": self.period >= 0,
            "stale_timeout_ms": self.stale_timeout_ms >= 0,
            "watchdog_ms": self.watchdog_ms >= 0,
            "estop_after": self.estop_after >= 0,
            "chunk_replan_every": self.chunk_replan_every >= 0,
        }
        for name, ok in checks.items():
            if not ok or not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)!r}")
        if self.log_capacity < 1:
            raise ValueError(f"log_capacity must be >= 1, got {self.log_capacity}")


def load_deploy_config(source: str | Path | dict | None = None) -> DeployConfig:
    """A DeployConfig from a YAML file, a dict or None (defaults); ConfigError (one line) on a bad key or value."""
    if source is None or isinstance(source, dict):
        return build_dataclass(DeployConfig, source)
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"deploy config file {str(path)!r} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"deploy config {str(path)!r} is not valid YAML: {str(error).splitlines()[0]}") from None
    return build_dataclass(DeployConfig, data)


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
        inputs = {node.name: node for node in self.session.get_inputs()}
        outputs = {node.name for node in self.session.get_outputs()}
        if self.input_name not in inputs or self.output_name not in outputs:
            raise DeployError(
                f"policy.json names input {self.input_name!r} and output {self.output_name!r} but the ONNX graph has "
                f"inputs {sorted(inputs)} and outputs {sorted(outputs)}"
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
        """obs [K, D] float32 -> action [K, A] (or [K, H, A])."""
        return self.session.run([self.output_name], {self.input_name: obs})[0]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """obs [D] float32 -> action [A] (or [H, A])."""
        return self.session.run([self.output_name], {self.input_name: obs[None]})[0][0]


def verify_parity(policy: OnnxPolicy, path: Path, tolerance: float = PARITY_TOLERANCE) -> float:
    """Max |ONNX Runtime - recorded torch export| over parity.npz; DeployError when above ``tolerance``."""
    try:
        with np.load(path, allow_pickle=False) as data:
            obs, expected = data["obs"], data["action"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise DeployError(f"{str(path)!r} is corrupt or lacks the obs/action arrays ({error})") from None
    shape = (policy.action_dim,) if policy.chunk == 1 else (policy.chunk, policy.action_dim)
    if obs.ndim != 2 or obs.shape[1] != policy.obs_dim or expected.shape != (obs.shape[0], *shape):
        raise DeployError(f"{str(path)!r} holds obs {list(obs.shape)} and action {list(expected.shape)}, not [K, D] / "
                          f"[K, {', '.join(map(str, shape))}] for this policy")  # fmt: skip
    if len(obs) == 0:
        return 0.0
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


def _config_vector(name: str, value, size: int) -> np.ndarray | None:
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(value, (list, tuple)) and len(value) == size:
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not ok:
        raise DeployError(f"deploy config: {name} must be a number or a list of {size} numbers, got {value!r:.80}")
    return np.asarray(value, dtype=np.float64)


def build_safety(policy: Callable, sidecar: Sidecar, config: DeployConfig, stale_timeout: float) -> SafetyLayer:
    """The SafetyLayer for this policy and deploy config; DeployError (one line) for a value that cannot work."""
    obs_low = _config_vector("obs_low", config.obs_low, sidecar.obs_dim)
    obs_high = _config_vector("obs_high", config.obs_high, sidecar.obs_dim)
    try:
        return SafetyLayer(
            policy,
            sidecar.obs_dim,
            sidecar.action_low,
            sidecar.action_high,
            obs_low=sidecar.obs_low if obs_low is None else obs_low,
            obs_high=sidecar.obs_high if obs_high is None else obs_high,
            clip_obs=config.obs_bound_action == "clip",
            max_action_delta=_config_vector("max_action_delta", config.max_action_delta, sidecar.action_dim),
            stale_timeout=stale_timeout,
            estop_after=config.estop_after,
            safe_action=config.safe_action,
            posture=_config_vector("posture", config.posture, sidecar.action_dim),
        )
    except ValueError as error:
        raise DeployError(f"deploy config: {error}") from None


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


class ControlLoop:
    """Runs ``policy`` on ``robot`` every period behind a SafetyLayer; owns the robot (``close`` closes it).

    Each tick: read the latest observation, ``SafetyLayer.tick``, send, log. Ticks are paced with
    ``time.perf_counter`` (sleep to the next deadline; a tick that ends past the next deadline counts
    ``missed_deadline`` and the schedule restarts from now, no burst of catch-up ticks). A tick whose read-to-send
    time exceeds the watchdog is flagged WATCHDOG and counts as a fault. ``realtime=False`` does not sleep and calls
    the robot's ``step_sync()`` after each tick (a SimRobot on its virtual clock: pass ``clock=robot.clock``), so
    with no delays tick t sees the observation after t env steps and its action drives step t + 1.
    ``status`` is called with a dict about once a second of ``clock`` time (see ``format_status``).
    """

    def __init__(
        self,
        policy: Callable[[np.ndarray], np.ndarray],
        robot,
        sidecar: Sidecar,
        config: DeployConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        realtime: bool = True,
        status: Callable[[dict], None] | None = None,
    ) -> None:
        config = config or DeployConfig()
        self.robot, self.sidecar, self.config = robot, sidecar, config
        self.clock, self.realtime, self.status = clock, realtime, status
        self.period = config.period or sidecar.control_period
        self.watchdog = config.watchdog_ms / 1000.0 or self.period
        if (robot.obs_dim, robot.action_dim) != (sidecar.obs_dim, sidecar.action_dim):
            raise DeployError(
                f"the robot has obs_dim {robot.obs_dim}, action_dim {robot.action_dim} but the policy expects "
                f"{sidecar.obs_dim}, {sidecar.action_dim}"
            )
        horizon = sidecar.action_chunk
        replan_every = config.chunk_replan_every or horizon
        if replan_every > horizon:
            raise DeployError(f"deploy config: chunk_replan_every {replan_every} exceeds the action chunk H={horizon}")
        self.policy_seconds = median_call_seconds(policy, sidecar.obs_dim)
        if self.policy_seconds > self.period:
            raise DeployError(
                f"one policy call takes {self.policy_seconds * 1e3:.2f} ms (median at start) but the control period is "
                f"{self.period * 1e3:.2f} ms: this machine cannot hold it; set a longer period in the deploy config"
            )
        policy_fn = policy if horizon == 1 else ChunkedPolicy(policy, horizon, replan_every)
        self.safety = build_safety(policy_fn, sidecar, config, config.stale_timeout_ms / 1000.0 or 3 * self.period)
        self.log = TickLog(config.log_capacity, sidecar.action_dim)
        self.counters = {"missed_deadline": 0, "robot_error": 0}
        self.ticks, self.interrupted, self.seconds = 0, False, 0.0
        self._start: float | None = None
        self._status_time, self._status_ticks, self._window = 0.0, 0, []
        self._last_age, self._closed = math.nan, False

    def run(self, duration: float | None = None, ticks: int | None = None) -> dict:
        """Run until ``duration`` seconds or ``ticks`` ticks (either or both; neither: until Ctrl-C); the summary.

        Ctrl-C latches the e-stop, sends one (rate-limited) safe action and returns normally.
        """
        if duration is not None and not duration > 0:
            raise DeployError(f"duration must be > 0 seconds, got {duration!r}")
        if duration is not None and not self.realtime:  # virtual time: one period per tick
            ticks = min(ticks, round(duration / self.period)) if ticks is not None else round(duration / self.period)
        step_sync = None if self.realtime else getattr(self.robot, "step_sync", None)
        start = deadline = time.perf_counter()
        if self._start is None:
            self._start = self._status_time = self.clock()
        done = 0
        try:
            while ticks is None or done < ticks:
                if self.realtime:
                    if duration is not None and deadline - start >= duration - 1e-9:  # next tick past the end
                        break
                    wait = deadline - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                self._tick()
                done += 1
                if step_sync is not None:  # virtual time: the world moves one period between ticks
                    step_sync()
                deadline += self.period
                if self.realtime and time.perf_counter() > deadline:
                    self.counters["missed_deadline"] += 1
                    deadline = time.perf_counter()
                self._maybe_status()
        except KeyboardInterrupt:
            self.interrupted = True
            self.safety.estop()
            action, _flags = self.safety.tick(None, math.nan, self.clock())
            self._send(action)
        self.seconds += time.perf_counter() - start
        return self.summary()

    def _tick(self) -> None:
        start = time.perf_counter()
        try:
            obs, obs_time = self.robot.read()
        except Exception:  # a broken robot link: a tick without observation, never a crash
            self.counters["robot_error"] += 1
            obs, obs_time = None, math.nan
        now = self.clock()
        action, flags = self.safety.tick(obs, obs_time, now)
        self._send(action)
        compute = time.perf_counter() - start
        if compute > self.watchdog:
            flags |= self.safety.record_overrun()
        try:
            self._last_age = now - float(obs_time)
        except (TypeError, ValueError):
            self._last_age = math.nan
        self.log.append(self.ticks, now - self._start, self._last_age, compute * 1e6, flags, action)
        self._window.append(compute * 1e6)
        self.ticks += 1

    def _send(self, action: np.ndarray) -> None:
        try:
            self.robot.send(action)
        except Exception:  # the RobotInterface promises not to raise; a link that does is counted
            self.counters["robot_error"] += 1

    def _maybe_status(self) -> None:
        now = self.clock()
        if now - self._status_time < 1.0:
            return
        if self.status is not None:
            window = np.asarray(self._window)
            self.status(
                {
                    "time": now - self._start,
                    "ticks": self.ticks,
                    "rate_hz": (self.ticks - self._status_ticks) / (now - self._status_time),
                    "compute_p50_us": float(np.percentile(window, 50)) if window.size else math.nan,
                    "compute_p99_us": float(np.percentile(window, 99)) if window.size else math.nan,
                    "obs_age_ms": self._last_age * 1e3,
                    "fired": {k: v for k, v in self.all_counters().items() if v and k != "ticks"},
                }
            )
        self._status_time, self._status_ticks, self._window = now, self.ticks, []

    def all_counters(self) -> dict[str, int]:
        """The safety layer's checks, the loop's own and the robot's (prefixed ``robot.``)."""
        try:
            robot = {f"robot.{k}": int(v) for k, v in dict(self.robot.counters).items()}
        except Exception:
            robot = {}
        return {**self.safety.counters, **self.counters, **robot}

    def summary(self) -> dict:
        """ticks, seconds, rate_hz, compute p50/p99 (read to send, us, over the logged ticks), counters, returns."""
        compute = self.log.records()["compute_us"]
        try:
            returns = [float(r) for r in self.robot.episode_returns]
        except Exception:
            returns = []
        return {
            "ticks": self.ticks,
            "seconds": self.seconds,
            "rate_hz": self.ticks / self.seconds if self.seconds > 0 else math.nan,
            "compute_p50_us": float(np.percentile(compute, 50)) if compute.size else math.nan,
            "compute_p99_us": float(np.percentile(compute, 99)) if compute.size else math.nan,
            "policy_median_us": self.policy_seconds * 1e6,
            "counters": self.all_counters(),
            "episode_returns": returns,
            "estopped": self.safety.estopped,
            "interrupted": self.interrupted,
        }

    def close(self) -> Path | None:
        """Close the robot and save the tick log to ``config.log_path`` (its path, or None without one)."""
        if self._closed:
            return None
        self._closed = True
        try:
            self.robot.close()
        except Exception:
            self.counters["robot_error"] += 1
        return self.log.save(self.config.log_path) if self.config.log_path else None


def format_status(status: dict) -> str:
    """One status line: time, ticks, rate, compute p50/p99, observation age and the checks that fired."""
    fired = " ".join(f"{k}={v}" for k, v in status["fired"].items()) or "no checks fired"
    return (
        f"{status['time']:7.1f}s  {status['ticks']} ticks  {status['rate_hz']:.1f} Hz  compute p50 "
        f"{status['compute_p50_us']:.0f} us p99 {status['compute_p99_us']:.0f} us  obs age "
        f"{status['obs_age_ms']:.1f} ms  {fired}"
    )


def format_summary(summary: dict) -> str:
    """The final report, several lines."""
    lines = [
        f"ticks: {summary['ticks']} in {summary['seconds']:.2f} s ({summary['rate_hz']:.1f} Hz)"
        + ("  (stopped by Ctrl-C)" if summary["interrupted"] else ""),
        f"tick latency (read to send): p50 {summary['compute_p50_us']:.0f} us, p99 {summary['compute_p99_us']:.0f} us;"
        f" policy call (median at start) {summary['policy_median_us']:.0f} us",
        "counters: " + ", ".join(f"{k}={v}" for k, v in summary["counters"].items()),
    ]
    if summary["estopped"]:
        lines.append("e-stop: LATCHED")
    if summary["episode_returns"]:
        returns = np.asarray(summary["episode_returns"])
        lines.append(f"episodes: {returns.size}, return mean {returns.mean():.2f} (min {returns.min():.2f}, max "
                     f"{returns.max():.2f})")  # fmt: skip
    return "\n".join(lines)
