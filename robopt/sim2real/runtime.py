"""The torch-free deploy runtime: an exported ONNX policy driving a robot at a fixed rate behind the safety layer.

Torch-free (numpy, onnxruntime, pyyaml). Shapes: D obs dim, A action dim, H action chunk (actions per model call).
    DeployConfig     the deploy YAML (period, bounds, rate limit, stale timeout, watchdog, e-stop, safe action...)
    ControlLoop      fixed-rate loop: read the robot, SafetyLayer.tick, send, log (safety.py holds the pure core);
                     ``stop()`` ends a deployment with the safe action ramped to its target
    check_log_path   a tick log path that can be written, checked before the loop starts
It exports what it defines. OnnxPolicy, verify_parity, load_export, ChunkedPolicy and median_call_seconds live in
``model.py``; DeployConfig, load_deploy_config, build_safety and check_log_path in ``deploy_config.py``; the safety
layer in ``safety.py``; the tick log in ``tick_log.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from robopt.sim2real.deploy_config import DeployConfig, build_safety, check_log_path
from robopt.sim2real.model import (
    ChunkedPolicy,
    OnnxPolicy,  # noqa: F401  (OnnxPolicy, load_export, verify_parity: their old import path, pinned by a test)
    load_export,  # noqa: F401
    median_call_seconds,
    verify_parity,  # noqa: F401
)
from robopt.sim2real.sidecar import DeployError, Sidecar
from robopt.sim2real.tick_log import TickLog

__all__ = ["POLL_S", "STOP_SECONDS", "WAKE_EARLY", "ControlLoop"]

STOP_SECONDS = 2.0  # ``stop()`` ramps the safe action for at most this long
WAKE_EARLY = 0.25  # tick_on: measurement: wake this fraction of a period before the next measurement is due
POLL_S = 0.0005  # tick_on: measurement: seconds between looks for a new observation


class ControlLoop:
    """Runs ``policy`` on ``robot`` every period behind a SafetyLayer; owns the robot (``close`` closes it).

    Each tick: read the latest observation, ``SafetyLayer.tick``, send, log. Ticks are paced with
    ``time.perf_counter`` (sleep to the next deadline; a tick that ends past the next deadline counts
    ``missed_deadline`` and the schedule restarts from now, no burst of catch-up ticks). A tick whose read-to-send
    time exceeds the watchdog is flagged WATCHDOG and counts as a fault. ``realtime=False`` does not sleep and calls
    the robot's ``step_sync()`` after each tick (a SimRobot on its virtual clock: pass ``clock=robot.clock``), so
    with no delays tick t sees the observation after t env steps and its action drives step t + 1.
    ``tick_on: measurement`` (deploy config) ticks in phase with the robot instead: a quarter period before the
    next measurement is due it looks for an observation newer than the last tick's every 0.5 ms and ticks when one
    arrives (or one period past the usual deadline without one, where the stale check decides), so a tick acts on
    a measurement as old as the link's latency rather than up to a period older.
    ``status`` is called with a dict about once a second of ``clock`` time (see ``format_status``).
    A tick never raises: a robot that does counts ``robot_error``, safety checks or a policy that do send
    ``SafetyLayer.fail_safe()`` (flag and counter ``internal_error``). ``run`` may be called again and again;
    ``stop()`` ends the deployment (Ctrl-C in ``run`` calls it, ``deploy`` calls it at the end), ``close()`` closes
    the robot and saves the log.
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
        stale = config.stale_timeout_ms / 1000.0 or 3 * self.period
        self.safety = build_safety(policy_fn, sidecar, config, stale, future_tolerance=self.period)
        if config.log_path:
            check_log_path(config.log_path)
        self.log = TickLog(config.log_capacity, sidecar.action_dim)
        self.counters = {"missed_deadline": 0, "robot_error": 0, "stop_ticks": 0}
        self.ticks, self.interrupted, self.seconds = 0, False, 0.0
        self._start: float | None = None
        self._status_time, self._status_ticks, self._window = 0.0, 0, []
        self._last_age, self._closed, self._deadline = math.nan, False, time.perf_counter()
        self._stopped, self._estop_by_stop = False, False
        self.in_phase, self._last_stamp = config.tick_on == "measurement", -math.inf

    def run(self, duration: float | None = None, ticks: int | None = None) -> dict:
        """Run until ``duration`` seconds or ``ticks`` ticks (either or both; neither: until Ctrl-C); the summary.

        Ctrl-C ends the deployment: ``stop()`` (the safe action until it reaches its target), then a normal return.
        """
        if duration is not None and not duration > 0:
            raise DeployError(f"duration must be > 0 seconds, got {duration!r}")
        if duration is not None and not self.realtime:  # virtual time: one period per tick
            ticks = min(ticks, round(duration / self.period)) if ticks is not None else round(duration / self.period)
        step_sync = None if self.realtime else getattr(self.robot, "step_sync", None)
        start = deadline = time.perf_counter()
        if self._start is None:
            self._start = self._status_time = self.clock()
        done, interrupted = 0, False
        try:
            while ticks is None or done < ticks:
                if self.realtime:
                    if duration is not None and deadline - start >= duration - 1e-9:  # next tick past the end
                        break
                    wait = deadline - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    if self.in_phase:
                        self._await_measurement(deadline + WAKE_EARLY * self.period + self.period)
                tick_start = time.perf_counter()
                self._tick()
                done += 1
                if step_sync is not None:  # virtual time: the world moves one period between ticks
                    step_sync()
                if self.realtime and self.in_phase:  # the next measurement is due one period after this one
                    deadline = tick_start + (1.0 - WAKE_EARLY) * self.period
                    if time.perf_counter() > tick_start + self.period:
                        self.counters["missed_deadline"] += 1
                else:
                    deadline += self.period
                    if self.realtime and time.perf_counter() > deadline:
                        self.counters["missed_deadline"] += 1
                        deadline = time.perf_counter()
                self._deadline = deadline
                self._maybe_status()
        except KeyboardInterrupt:
            interrupted = True
        self.seconds += time.perf_counter() - start
        if interrupted:
            self.interrupted = True
            self.stop()
        return self.summary()

    def stop(self, max_seconds: float = STOP_SECONDS) -> int:
        """End the deployment: latch the e-stop and tick the safe action every period until it reaches its target.

        That takes ceil(max |target - last action| / max_action_delta) ticks with a rate limit, one without (and
        one for ``hold``, whose target is the last action), at most ``max_seconds`` worth; the ticks are logged
        (flags estop, safe_action) and counted ``stop_ticks``. Only the first call (before ``close``) does anything;
        a second Ctrl-C cuts the ramp short. Returns the ticks sent.
        """
        if self._stopped or self._closed:
            return 0
        self._stopped, self._estop_by_stop = True, not self.safety.estopped
        self.safety.estop()
        gap = np.abs(self.safety.safe_target() - self.safety.last_action)  # [A]
        delta = self.safety.max_action_delta
        needed = 1 if delta is None else max(1, math.ceil(float((gap / delta).max(initial=0.0))))
        step_sync = None if self.realtime else getattr(self.robot, "step_sync", None)
        start, deadline, sent = time.perf_counter(), self._deadline, 0
        try:
            while sent < min(needed, max(1, math.ceil(max_seconds / self.period))):
                wait = deadline - time.perf_counter()
                if self.realtime and wait > 0:
                    time.sleep(wait)
                self._tick()
                sent += 1
                self.counters["stop_ticks"] += 1
                if step_sync is not None:
                    step_sync()
                deadline = max(deadline + self.period, time.perf_counter())
        except KeyboardInterrupt:
            pass
        self.seconds += time.perf_counter() - start
        return sent

    def _await_measurement(self, limit: float) -> None:
        """Sleep until the robot holds an observation newer than the last tick's, or until ``limit``."""
        while time.perf_counter() < limit:
            try:
                stamp = float(self.robot.read()[1])
            except Exception:  # a broken link or a bad timestamp: the tick counts it
                return
            if stamp > self._last_stamp:
                return
            time.sleep(POLL_S)

    def _tick(self) -> None:
        start = time.perf_counter()
        try:
            obs, obs_time = self.robot.read()
        except Exception:  # a broken robot link: a tick without observation, never a crash
            self.counters["robot_error"] += 1
            obs, obs_time = None, math.nan
        try:
            self._last_stamp = max(self._last_stamp, float(obs_time))
        except Exception:  # noqa: BLE001 - no usable timestamp: the next tick waits for any newer one
            pass
        now = self.clock()
        try:
            action, flags = self.safety.tick(obs, obs_time, now)
        except Exception:  # a bug in a check or a policy's reset: the safe action without the policy, rate-limited
            action, flags = self.safety.fail_safe()
        self._send(action)
        compute = time.perf_counter() - start
        if compute > self.watchdog:
            flags |= self.safety.record_overrun()
        try:
            self._last_age = now - float(obs_time)
        except Exception:  # no number, too large, or a timestamp whose conversion fails: no age
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
                    "notices": self._robot_notices(),
                }
            )
        self._status_time, self._status_ticks, self._window = now, self.ticks, []

    def _robot_notices(self) -> list[str]:
        """One-line reports of a robot link that has them (a silent topic, an unknown joint...), each once."""
        take = getattr(self.robot, "take_notices", None)
        try:
            return list(take()) if take is not None else []
        except Exception:
            return []

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
            "estopped": self.safety.estopped and not self._estop_by_stop,  # by faults or by hand, not by stop()
            "stopped": self._stopped,
            "interrupted": self.interrupted,
        }

    def close(self) -> Path | None:
        """Close the robot, then save the tick log to ``config.log_path`` (its path, or None without one).

        DeployError (one line) when the log cannot be written; the robot is closed first either way.
        """
        if self._closed:
            return None
        self._closed = True
        try:
            self.robot.close()
        except Exception:
            self.counters["robot_error"] += 1
        if not self.config.log_path:
            return None
        try:
            return self.log.save(self.config.log_path)
        except OSError as error:
            raise DeployError(
                f"cannot save the tick log to {self.config.log_path!r}: {error.strerror or error}"
            ) from None
