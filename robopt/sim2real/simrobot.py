"""A simulated robot behind RobotInterface: a robopt env (N = 1) with the faults of a real link.

Shapes: D obs dim, A action dim. The env is stepped once per ``period`` seconds, in a background thread
(``realtime=True``) or by ``step_sync()`` on a virtual clock that advances one period per call (``realtime=False``:
fast and deterministic for tests; ``clock()`` is then that virtual time). Faults:
    actuator delay   the action sent during tick t is applied from tick t + delay_ticks (zero before any arrives)
    sensor noise     N(0, obs_noise^2) added to each observation value
    sensor latency   an observation becomes readable latency_ms after it was measured; ``read`` reports the
                     measurement time, so the runtime sees its true age
    dropped packets  each observation is lost with probability ``drop`` (counted in ``counters["dropped"]``)
Episodes restart automatically (the VecEnv auto-resets); finished episodes' returns go to ``episode_returns``.
``episodes_started`` counts the episodes started after the first, as of the latest readable measurement (it
changes when ``read`` first returns an observation of a new episode), so a control loop can reset a policy's
state (an observation history window) exactly when the robot's episode restarts.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

import numpy as np
import torch

from robopt.sim2real.serving import make_sim_env


class SimRobot:
    """A robopt env driven like a robot: ``read`` the latest observation, ``send`` an action, ``close``."""

    def __init__(
        self,
        env_id: str,
        period: float,
        obs_noise: float = 0.0,
        latency_ms: float = 0.0,
        delay_ticks: int = 0,
        drop: float = 0.0,
        seed: int = 0,
        realtime: bool = True,
    ) -> None:
        if not 0.0 < period < math.inf:
            raise ValueError(f"period must be a positive number of seconds, got {period!r}")
        if obs_noise < 0 or latency_ms < 0 or delay_ticks < 0 or not 0.0 <= drop < 1.0:
            raise ValueError("obs_noise, latency_ms and delay_ticks must be >= 0 and drop in [0, 1)")
        self.period, self.obs_noise, self.latency = float(period), float(obs_noise), float(latency_ms) / 1000.0
        self.delay_ticks, self.drop, self.realtime = int(delay_ticks), float(drop), realtime
        self.env = make_sim_env(env_id)  # an env id, a config file or a run directory
        self.obs_dim, self.action_dim = self.env.obs_dim, self.env.action_dim
        self.action_low = self.env.action_low.cpu().numpy().astype(np.float64)  # [A]
        self.action_high = self.env.action_high.cpu().numpy().astype(np.float64)  # [A]
        self.counters = {"steps": 0, "dropped": 0, "bad_action": 0, "send_failed": 0, "sim_error": 0, "overruns": 0}
        self.episode_returns: list[float] = []
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._pending: deque[tuple[int, np.ndarray]] = deque()  # (tick it applies from, action [A])
        self._applied = np.clip(np.zeros(self.action_dim), self.action_low, self.action_high)  # [A]
        self._in_flight: deque[tuple[float, np.ndarray, int]] = deque()  # (measure time, obs [D], episode)
        self._latest: tuple[float, np.ndarray, int] | None = None
        self._episodes, self.episodes_started = 0, 0  # episodes started (auto-resets): by the env, as measured
        self._tick, self._virtual_time, self._closed = 0, 0.0, False
        self._measure(self.env.reset(seed=seed)[0].cpu().numpy())
        self._stop = threading.Event()
        self._thread = None
        if realtime:
            self._thread = threading.Thread(target=self._run, name="SimRobot", daemon=True)
            self._thread.start()

    def clock(self) -> float:
        """Seconds on this robot's clock: ``time.monotonic()``, or the virtual time when not realtime."""
        return time.monotonic() if self.realtime else self._virtual_time

    def read(self) -> tuple[np.ndarray | None, float]:
        with self._lock:
            now = self.clock()
            while self._in_flight and self._in_flight[0][0] + self.latency <= now:
                self._latest = self._in_flight.popleft()
            if self._latest is None:
                return None, math.nan
            self.episodes_started = self._latest[2]
            return self._latest[1].copy(), self._latest[0]

    def send(self, action: np.ndarray) -> None:
        try:
            if self._closed:
                self.counters["send_failed"] += 1
                return
            action = np.asarray(action, dtype=np.float64).reshape(-1)
            if action.shape != (self.action_dim,) or not np.isfinite(action).all():
                self.counters["bad_action"] += 1
                return
            with self._lock:
                self._pending.append(
                    (self._tick + self.delay_ticks, np.clip(action, self.action_low, self.action_high))
                )
        except (TypeError, ValueError):
            self.counters["bad_action"] += 1

    def step_sync(self) -> None:
        """Advance one period of virtual time: apply the due action, step the env, measure (``realtime=False``)."""
        if self.realtime:
            raise RuntimeError("step_sync is for a SimRobot built with realtime=False")
        self._step()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.env.close()

    def _run(self) -> None:
        deadline = time.perf_counter()
        while not self._stop.is_set():
            deadline += self.period
            self._step()
            delay = deadline - time.perf_counter()
            if delay > 0:
                self._stop.wait(delay)
            else:  # the simulator cannot keep the period: count it and restart the schedule from now
                self.counters["overruns"] += 1
                deadline = time.perf_counter()

    def _step(self) -> None:
        with self._lock:
            while self._pending and self._pending[0][0] <= self._tick:
                self._applied = self._pending.popleft()[1]
            action = torch.as_tensor(self._applied[None], dtype=torch.float32)  # [1, A]
            self._tick += 1
        try:
            obs, _reward, terminated, truncated, info = self.env.step(action)
        except Exception:  # a diverged simulation (NonFiniteError...): start a new episode, as a robot would be reset
            self.counters["sim_error"] += 1
            obs = self.env.reset()
            self._episodes += 1
        else:
            if bool(terminated[0] or truncated[0]):
                self.episode_returns.append(float(info["episode_return"][0]))
                self._episodes += 1
        self.counters["steps"] += 1
        if not self.realtime:
            self._virtual_time += self.period
        self._measure(obs[0].cpu().numpy())

    def _measure(self, obs: np.ndarray) -> None:
        obs = obs.astype(np.float64)  # [D]
        if self.obs_noise > 0:
            obs = obs + self._rng.normal(0.0, self.obs_noise, size=obs.shape)
        if self.drop > 0 and self._rng.random() < self.drop:
            self.counters["dropped"] += 1
            return
        with self._lock:
            self._in_flight.append((self.clock(), obs, self._episodes))
