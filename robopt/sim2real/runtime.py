"""The torch-free deploy runtime: an exported ONNX policy driving a robot at a fixed rate behind the safety layer.

Torch-free (numpy, onnxruntime, pyyaml). Shapes: D obs dim, A action dim, H action chunk (actions per model call).
    DeployConfig     the deploy YAML (period, bounds, rate limit, stale timeout, watchdog, e-stop, safe action...)
    ControlLoop      fixed-rate loop: read the robot, SafetyLayer.tick, send, log (safety.py holds the pure core);
                     ``stop()`` ends a deployment with the safe action ramped to its target
    check_log_path   a tick log path that can be written, checked before the loop starts
It exports what it defines. OnnxPolicy, verify_parity, load_export, ChunkedPolicy and median_call_seconds live in
``model.py``; DeployConfig, load_deploy_config, build_safety and check_log_path in ``deploy_config.py``; the safety
layer in ``safety.py``; the tick log in ``tick_log.py``; the tick schedule in ``pacing.py``.
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
    OnnxPolicy,
    RecurrentPolicy,
    median_call_seconds,
)
from robopt.sim2real.pacing import Pacer
from robopt.sim2real.sidecar import DeployError, Sidecar
from robopt.sim2real.stamps import Stamps
from robopt.sim2real.tick_log import TickLog
from robopt.sim2real.window import HistoryWindow

__all__ = ["STOP_SECONDS", "ControlLoop"]

STOP_SECONDS = 2.0  # ``stop()`` ramps the safe action for at most this long


class ControlLoop:
    """Runs ``policy`` on ``robot`` every period behind a SafetyLayer; owns the robot (``close`` closes it).

    Each tick: read the latest observation, ``SafetyLayer.tick``, send, log. Ticks are paced with
    ``time.perf_counter`` by a ``Pacer`` (``pacing.py``): the loop never ticks faster than its period, whatever the
    robot sends or stamps; ``tick_on: clock`` keeps a fixed schedule, ``tick_on: measurement`` ticks in phase with
    the robot's measurements, so a tick acts on a measurement as old as the link's latency rather than up to a
    period older; late and skipped ticks and missed deadlines are counted. A new measurement whose stamp is not a
    finite number, lies more than a period ahead of ``clock`` or goes back from the previous one counts
    ``stamp_faults`` (and the kind, ``stamp_future``/``stamp_backward``/``stamp_invalid``; ``stamps.py``); the
    safety layer decides what the tick sends. A tick whose read-to-send time exceeds the
    watchdog is flagged WATCHDOG and counts as a fault. ``realtime=False`` does not sleep and calls the robot's
    ``step_sync()`` after each tick (a SimRobot on its virtual clock: pass ``clock=robot.clock``), so with no
    delays tick t sees the observation after t env steps and its action drives step t + 1.
    ``cpu_affinity`` and ``realtime_priority`` (deploy config) apply to the thread that calls ``run`` (undone by
    ``close``); what was refused is one notice. A second of ``clock`` time whose rate falls below
    ``min_rate_share`` of 1/period counts ``low_rate_seconds`` and is one notice at the time.
    ``status`` is called with a dict about once a second of ``clock`` time (see ``format_status``); its
    ``loop_notices`` are the loop's one-line reports since the last call.
    A tick never raises: a robot that does counts ``robot_error``, safety checks or a policy that do send
    ``SafetyLayer.fail_safe()`` (flag and counter ``internal_error``). ``run`` may be called again and again;
    ``stop()`` ends the deployment (Ctrl-C in ``run`` calls it, ``deploy`` calls it at the end), ``close()`` closes
    the robot and saves the log.
    A policy with an observation history (the sidecar's ``history``) is wrapped in a ``HistoryWindow`` unless it
    is one: the robot sends raw observations [D] (the dims, obs checks and timing use D), every action sent is
    recorded as the window's previous action, and the window restarts when a robot that counts its episodes
    (``episodes_started``: a simulated robot, a UDP robot's episode-ended flags) reports a new one, as the env's
    window restarts at an auto-reset; a recurrent policy's state is zeroed there too (counter ``episode_resets``).
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
        if (robot.obs_dim, robot.action_dim) != (sidecar.robot_obs_dim, sidecar.action_dim):
            raise DeployError(
                f"the robot has obs_dim {robot.obs_dim}, action_dim {robot.action_dim} but the policy expects "
                f"{sidecar.robot_obs_dim}, {sidecar.action_dim}"
            )
        if sidecar.state_dim and isinstance(policy, OnnxPolicy):  # memory: the state lives here, between ticks
            policy = RecurrentPolicy(policy)
        elif sidecar.state_dim and not callable(getattr(policy, "reset", None)):
            raise DeployError("a policy with memory (state_dim > 0) needs a reset() that zeroes its state")
        if sidecar.history is not None and not isinstance(policy, HistoryWindow):
            policy = HistoryWindow.from_sidecar(policy, sidecar)
        horizon = sidecar.action_chunk
        replan_every = config.chunk_replan_every or horizon
        if replan_every > horizon:
            raise DeployError(f"deploy config: chunk_replan_every {replan_every} exceeds the action chunk H={horizon}")
        self.policy_seconds = median_call_seconds(policy, sidecar.robot_obs_dim)
        if isinstance(policy, (HistoryWindow, RecurrentPolicy)):
            policy.reset()  # the timing calls filled its window or moved its state: a deployment starts from zero
        if self.policy_seconds > self.period:
            raise DeployError(
                f"one policy call takes {self.policy_seconds * 1e3:.2f} ms (median at start) but the control period is "
                f"{self.period * 1e3:.2f} ms: this machine cannot hold it; set a longer period in the deploy config"
            )
        policy_fn = policy if horizon == 1 else ChunkedPolicy(policy, horizon, replan_every)
        stale = config.stale_timeout_ms / 1000.0 or 3 * self.period
        self.safety = build_safety(policy_fn, sidecar, config, stale, future_tolerance=self.period)
        self._sent = getattr(policy_fn, "sent", None)  # a HistoryWindow records each action sent
        self._episode = getattr(robot, "episodes_started", None)
        if config.log_path:
            check_log_path(config.log_path)
        self.log = TickLog(config.log_capacity, sidecar.action_dim)
        self.counters = {"missed_deadline": 0, "late_ticks": 0, "skipped_ticks": 0, "low_rate_seconds": 0,
                         "robot_error": 0, "stop_ticks": 0, "episode_resets": 0}  # fmt: skip
        self.notices: list[str] = []  # one-line reports not yet shown by ``status`` (the stamps' too)
        self.stamps = Stamps(self.safety.future_tolerance, self.notices)  # which measurement is new; stamp faults
        self.in_phase = config.tick_on == "measurement"
        self.pacer = Pacer(self.period, self.in_phase, self.counters, self._stamp_now, self.stamps.is_new)
        self.ticks, self.interrupted, self.seconds = 0, False, 0.0
        self._start: float | None = None
        self._status_time, self._status_ticks, self._window = 0.0, 0, []
        self._last_age, self._closed = math.nan, False
        self._stopped, self._estop_by_stop = False, False
        self._scheduling = None
        self.lowest_rate_hz = math.inf

    def run(self, duration: float | None = None, ticks: int | None = None) -> dict:
        """Run until ``duration`` seconds or ``ticks`` ticks (either or both; neither: until Ctrl-C); the summary.

        Ctrl-C ends the deployment: ``stop()`` (the safe action until it reaches its target), then a normal return.
        """
        if duration is not None and not duration > 0:
            raise DeployError(f"duration must be > 0 seconds, got {duration!r}")
        if duration is not None and not self.realtime:  # virtual time: one period per tick
            ticks = min(ticks, round(duration / self.period)) if ticks is not None else round(duration / self.period)
        step_sync = None if self.realtime else getattr(self.robot, "step_sync", None)
        if self._scheduling is None and (self.config.cpu_affinity or self.config.realtime_priority):
            from robopt.sim2real.scheduling import apply_scheduling

            self._scheduling = apply_scheduling(self.config.cpu_affinity, self.config.realtime_priority)
            self.notices += self._scheduling.notes
        pacer = self.pacer
        start = pacer.start()
        if self._start is None:
            self._start = self.clock()
        self._status_time, self._status_ticks = self.clock(), self.ticks  # a pause between runs is not a slow second
        done, interrupted = 0, False
        try:
            while ticks is None or done < ticks:
                if self.realtime:
                    if duration is not None and pacer.earliest - start >= duration - 1e-9:  # next tick past the end
                        break
                    tick_start = pacer.wait()
                self._tick()
                done += 1
                if step_sync is not None:  # virtual time: the world moves one period between ticks
                    step_sync()
                if self.realtime:
                    pacer.ticked(tick_start)
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
        start, deadline, sent = time.perf_counter(), self.pacer.earliest, 0
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

    def _stamp_now(self) -> float | None:
        """The robot's latest measurement's stamp; None when the link or the stamp is broken."""
        try:
            return float(self.robot.read()[1])
        except Exception:  # noqa: BLE001
            return None

    def _tick(self) -> None:
        start = time.perf_counter()
        try:
            obs, obs_time = self.robot.read()
        except Exception:  # a broken robot link: a tick without observation, never a crash
            self.counters["robot_error"] += 1
            obs, obs_time = None, math.nan
        now = self.clock()
        usable = obs is not None and self.stamps.check(obs_time, now, self.ticks)
        try:
            self._new_episode()
            action, flags = self.safety.tick(obs, obs_time, now)
        except Exception:  # a bug in a check or a policy's reset: the safe action without the policy, rate-limited
            action, flags = self.safety.fail_safe()
        self._send(action)
        compute = time.perf_counter() - start
        if compute > self.watchdog:
            flags |= self.safety.record_overrun()
        try:
            age = now - float(obs_time)  # the log keeps what the stamp says, however wrong
        except Exception:  # no number, too large, or a timestamp whose conversion fails: no age
            age = math.nan
        if usable:  # the status line shows the age of the last sane stamp
            self._last_age = age
        self.log.append(self.ticks, now - self._start, age, compute * 1e6, flags, action)
        self._window.append(compute * 1e6)
        self.ticks += 1

    def _send(self, action: np.ndarray) -> None:
        try:
            self.robot.send(action)
        except Exception:  # the RobotInterface promises not to raise; a link that does is counted
            self.counters["robot_error"] += 1
        if self._sent is not None:
            self._sent(action)

    def _new_episode(self) -> None:
        """Reset the policy (its window, chunk or memory) when the robot reports a new episode (``episodes_started``):
        no state is carried across an episode boundary."""
        episode = getattr(self.robot, "episodes_started", None)
        if episode != self._episode:
            self._episode = episode
            reset = getattr(self.safety.policy, "reset", None)
            if callable(reset):
                reset()
                self.counters["episode_resets"] += 1

    def _maybe_status(self) -> None:
        now = self.clock()
        if now - self._status_time < 1.0:
            return
        rate = (self.ticks - self._status_ticks) / (now - self._status_time)
        self.lowest_rate_hz = min(self.lowest_rate_hz, rate)
        if self.realtime and rate < self.config.min_rate_share / self.period:
            self.counters["low_rate_seconds"] += 1
            if self.counters["low_rate_seconds"] == 1 or self.counters["low_rate_seconds"] % 60 == 0:
                self.notices.append(
                    f"{now - self._start:.1f} s: {rate:.1f} Hz over the last {now - self._status_time:.1f} s, below "
                    f"{self.config.min_rate_share:.0%} of the period's {1 / self.period:.1f} Hz (late ticks "
                    f"{self.counters['late_ticks']}, skipped {self.counters['skipped_ticks']}, stamp faults "
                    f"{self.stamps.counters['stamp_faults']} so far; counted as low_rate_seconds)"
                )
        if self.status is not None:
            window = np.asarray(self._window)
            notices = list(self.notices)
            self.notices.clear()  # in place: the stamps write into the same list
            self.status(
                {
                    "time": now - self._start,
                    "ticks": self.ticks,
                    "rate_hz": rate,
                    "compute_p50_us": float(np.percentile(window, 50)) if window.size else math.nan,
                    "compute_p99_us": float(np.percentile(window, 99)) if window.size else math.nan,
                    "obs_age_ms": self._last_age * 1e3,
                    "fired": {k: v for k, v in self.all_counters().items() if v and k != "ticks"},
                    "notices": self._robot_notices(),
                    "loop_notices": notices,
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
        return {**self.safety.counters, **self.counters, **self.stamps.counters, **robot}

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
            "period_hz": 1.0 / self.period,
            "lowest_rate_hz": self.lowest_rate_hz if math.isfinite(self.lowest_rate_hz) else math.nan,
            "notices": list(self.notices),  # those no status line has shown
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
        if self._scheduling is not None:
            self._scheduling.restore()
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
