"""The deploy runtime's safety layer: pure numpy, no I/O, no clock of its own (the tick log is ``tick_log.py``).

Shapes: D obs dim, A action dim. ``SafetyLayer.tick(obs, obs_time, now) -> (action [A], flags)`` checks, in order:
    e-stop latched                          -> safe action
    no observation, or stale: now - obs_time > stale_timeout, obs_time more than future_tolerance ahead of now,
        or obs_time not a finite number                     -> safe action
    wrong size (or not convertible to numbers) -> safe action
    NaN / Inf (also values that overflow float32) -> safe action
    outside [obs_low, obs_high]             -> safe action, or clipped into the bounds (``clip_obs``)
    the policy (a callable obs [D] float32 -> action [A]); it raising or returning NaN/Inf/wrong size -> safe action
    clamp into [action_low, action_high]    (flag CLAMPED)
    rate limit: |action - previous sent action| <= max_action_delta per tick (flag RATE_LIMITED)
    ``estop_after`` consecutive faulty ticks latch the e-stop until ``reset()``.
The safe action's target is the last sent action (``hold``), zero clipped into the bounds (``zero``), a fixed
``posture``, or the action whose joint targets are the last measured joint positions (``measured``, given a
``measure`` function obs [D] -> action [A], NaN for an element that keeps the last action sent, e.g. a gripper's,
built from the sidecar by ``deploy_config.measured_pose``); it is
rate-limited toward that target like any action, so a posture far away is approached gradually. Once the e-stop
latched, the target is ``estop_action``'s (default: the same as ``safe_action``); with ``measured`` the valid
observations that still arrive keep moving the target to the pose the robot is in (a PD servo then only damps: the
damping stop), without calling the policy.
Hence every action returned is finite, within the action bounds and (with a rate limit) within max_action_delta of
the previous one. The previous action starts as ``initial_action`` (default: zero clipped into the bounds).
Faulty ticks: every check above that sends the safe action, plus watchdog overruns (``record_overrun``); an
observation clipped into its bounds, a clamped or rate-limited action are corrections, not faults. Ticks before the
first observation ever arrives are flagged WAITING and are not faults (a robot that has not started yet).
``fail_safe()`` is the tick for when ``tick`` itself raised (a bug, or a policy whose ``reset`` raises): the
rate-limited safe action, without the policy or any check, flagged INTERNAL_ERROR (a fault).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from robopt.rates import limit_rate

ESTOP = 1 << 0  # the e-stop is latched: the safe action was sent
WAITING = 1 << 1  # no observation has ever arrived (not a fault)
NO_OBS = 1 << 2
STALE = 1 << 3
WRONG_SIZE = 1 << 4
NON_FINITE_OBS = 1 << 5
OBS_BOUNDS = 1 << 6  # an observation outside its bounds (safe action, or clipped with clip_obs)
BAD_ACTION = 1 << 7  # the policy raised or returned NaN/Inf or the wrong size
CLAMPED = 1 << 8
RATE_LIMITED = 1 << 9
WATCHDOG = 1 << 10  # the tick's compute exceeded the watchdog budget (set by the control loop)
SAFE_ACTION = 1 << 11  # the action sent was the (rate-limited) safe action
ESTOP_TRIPPED = 1 << 12  # this tick latched the e-stop
INTERNAL_ERROR = 1 << 13  # the checks raised: the safe action from ``fail_safe`` (a fault)
FLAG_NAMES = {
    ESTOP: "estop",
    WAITING: "waiting",
    NO_OBS: "no_obs",
    STALE: "stale",
    WRONG_SIZE: "wrong_size",
    NON_FINITE_OBS: "non_finite_obs",
    OBS_BOUNDS: "obs_bounds",
    BAD_ACTION: "bad_action",
    CLAMPED: "clamped",
    RATE_LIMITED: "rate_limited",
    WATCHDOG: "watchdog",
    SAFE_ACTION: "safe_action",
    ESTOP_TRIPPED: "estop_trips",
    INTERNAL_ERROR: "internal_error",
}
SAFE_ACTIONS = ("hold", "zero", "posture", "measured")


def flag_names(flags: int) -> list[str]:
    """The names of the bits set in ``flags``."""
    return [name for bit, name in FLAG_NAMES.items() if flags & bit]


def _vector(name: str, value, size: int) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        array = np.full(size, float(array))
    if array.shape != (size,):
        raise ValueError(f"{name} must be a number or a list of {size} numbers, got shape {list(array.shape)}")
    return array


class SafetyLayer:
    """Turns (observation, its time, now) into an action that is always safe to send; see the module docstring."""

    def __init__(
        self,
        policy: Callable[[np.ndarray], np.ndarray],
        obs_dim: int,
        action_low,
        action_high,
        *,
        obs_low=None,
        obs_high=None,
        clip_obs: bool = False,
        max_action_delta=None,
        stale_timeout: float = math.inf,
        future_tolerance: float = 0.0,
        estop_after: int = 0,
        safe_action: str = "hold",
        posture=None,
        initial_action=None,
        estop_action: str | None = None,
        measure: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.policy, self.obs_dim = policy, int(obs_dim)
        self.action_low = np.asarray(action_low, dtype=np.float64).reshape(-1)  # [A]
        self.action_high = np.asarray(action_high, dtype=np.float64).reshape(-1)  # [A]
        action_dim = self.action_dim = self.action_low.size
        if self.action_high.shape != (action_dim,) or not np.isfinite([self.action_low, self.action_high]).all():
            raise ValueError("action_low and action_high must be finite vectors of the same size")
        if (self.action_low > self.action_high).any():
            raise ValueError("action_low must be <= action_high")
        self.obs_low = None if obs_low is None else _vector("obs_low", obs_low, self.obs_dim)  # [D]
        self.obs_high = None if obs_high is None else _vector("obs_high", obs_high, self.obs_dim)  # [D]
        for name, bound in (("obs_low", self.obs_low), ("obs_high", self.obs_high)):
            if bound is not None and np.isnan(bound).any():
                raise ValueError(f"{name} must not hold NaN")
        if self.obs_low is not None and self.obs_high is not None and (self.obs_low > self.obs_high).any():
            raise ValueError("obs_low must be <= obs_high")
        self.clip_obs = clip_obs
        self.max_action_delta = None
        if max_action_delta is not None:
            self.max_action_delta = _vector("max_action_delta", max_action_delta, action_dim)  # [A]
            if not (self.max_action_delta > 0).all():  # also refuses NaN
                raise ValueError(f"max_action_delta must be > 0 (null: no limit), got {max_action_delta!r}")
        if not stale_timeout > 0:
            raise ValueError(f"stale_timeout must be > 0 seconds, got {stale_timeout!r}")
        if not 0 <= future_tolerance < math.inf:
            raise ValueError(f"future_tolerance must be a finite number >= 0 seconds, got {future_tolerance!r}")
        if estop_after < 0:
            raise ValueError(f"estop_after must be >= 0 (0: never), got {estop_after!r}")
        self.stale_timeout, self.estop_after = float(stale_timeout), int(estop_after)
        self.future_tolerance = float(future_tolerance)  # a clock step or jitter: a timestamp this far ahead is fine
        estop_action = safe_action if estop_action is None else estop_action
        for name, kind in (("safe_action", safe_action), ("estop_action", estop_action)):
            if kind not in SAFE_ACTIONS:
                raise ValueError(f"{name} {kind!r} is not allowed; allowed: {', '.join(SAFE_ACTIONS)}")
            if kind == "measured" and measure is None:
                raise ValueError(
                    f"{name} measured needs the measured joint positions: a policy exported from a robot task "
                    "with joint position actions and a joint_pos observation"
                )
        self.safe_action, self.estop_action, self.measure = safe_action, estop_action, measure
        self._measured: np.ndarray | None = None  # [A] the action that targets the last measured pose
        zero = np.clip(np.zeros(action_dim), self.action_low, self.action_high)  # [A]
        self.posture = zero
        if "posture" in (safe_action, estop_action):
            if posture is None:
                raise ValueError("safe_action or estop_action posture needs a posture (a list of action values)")
            self.posture = _vector("posture", posture, action_dim)
            if not np.isfinite(self.posture).all() or (self.posture < self.action_low).any():
                raise ValueError("posture must be finite and within the action bounds")
            if (self.posture > self.action_high).any():
                raise ValueError("posture must be finite and within the action bounds")
        initial = zero if initial_action is None else _vector("initial_action", initial_action, action_dim)
        self.last_action = np.clip(initial, self.action_low, self.action_high)  # [A]: the previous action sent
        self.counters = {name: 0 for name in FLAG_NAMES.values()}
        self.counters["ticks"] = 0
        self.estopped, self.consecutive_faults = False, 0
        self._seen_obs = False
        self._fault_mask = NO_OBS | STALE | WRONG_SIZE | NON_FINITE_OBS | BAD_ACTION | WATCHDOG | INTERNAL_ERROR
        if not clip_obs:
            self._fault_mask |= OBS_BOUNDS
        self._last_tick_faulty, self._faults_before = False, 0

    def tick(self, obs, obs_time, now: float) -> tuple[np.ndarray, int]:
        """The action [A] float64 to send now and the flags (bitmask) of the checks that fired."""
        target, flags = None, 0
        if self.estopped:
            flags = ESTOP
            if self.estop_action == "measured":  # the damping stop follows the pose the robot is in
                self._note_measured(self._check_obs(obs, obs_time, now)[0])
        else:
            obs32, flags = self._check_obs(obs, obs_time, now)
            self._note_measured(obs32)
            if obs32 is not None:
                target, flags = self._policy_action(obs32, flags)
            faulty = bool(flags & self._fault_mask)
            self._note_fault(faulty)
            if faulty and self.estop_after and self.consecutive_faults >= self.estop_after:
                self.estopped = True
                flags |= ESTOP_TRIPPED
        if target is None:
            target = self.safe_target()
            flags |= SAFE_ACTION
        return self._finish(target, flags)

    def fail_safe(self) -> tuple[np.ndarray, int]:
        """The tick for when ``tick`` raised: the rate-limited safe action, no policy, no check; a faulty tick."""
        flags = INTERNAL_ERROR | SAFE_ACTION
        if self.estopped:
            flags |= ESTOP
        else:  # the fault bookkeeping of ``_note_fault`` without the policy's reset, which may be what raised
            self._last_tick_faulty, self._faults_before = True, self.consecutive_faults
            self.consecutive_faults += 1
            if self.estop_after and self.consecutive_faults >= self.estop_after:
                self.estopped = True
                flags |= ESTOP_TRIPPED
        try:
            self._reset_policy()  # no chunk continues past a fault
        except Exception:  # noqa: BLE001 - the safe action goes out whatever the policy does
            pass
        return self._finish(self.safe_target(), flags)

    def safe_target(self) -> np.ndarray:
        """[A] the safe action's target (``estop_action``'s once the e-stop latched): the last action sent (hold),
        zero clipped into the bounds, the posture, or the action at the last measured pose (measured; the last
        action sent until a valid observation has arrived)."""
        kind = self.estop_action if self.estopped else self.safe_action
        if kind == "hold" or (kind == "measured" and self._measured is None):
            return self.last_action
        if kind == "measured":  # NaN elements (a gripper's) keep the last action sent
            return np.where(np.isnan(self._measured), self.last_action, self._measured)
        return self.posture

    def _note_measured(self, obs32: np.ndarray | None) -> None:
        """Remember the action at the measured pose of an accepted observation (a failing map keeps the last)."""
        if obs32 is None or self.measure is None:
            return
        try:
            action = np.asarray(self.measure(obs32), dtype=np.float64).reshape(-1)
        except Exception:  # noqa: BLE001 - a bad map must not stop the loop: the last measured pose stays
            return
        if action.shape == (self.action_dim,) and not np.isinf(action).any():
            self._measured = np.minimum(np.maximum(action, self.action_low), self.action_high)  # NaN: kept

    def _finish(self, target: np.ndarray, flags: int) -> tuple[np.ndarray, int]:
        """Rate-limit toward ``target`` (within the bounds), remember it as the last action sent, count the flags."""
        action = self._rate_limit(target)
        if self.max_action_delta is not None and (np.abs(target - self.last_action) > self.max_action_delta).any():
            flags |= RATE_LIMITED
        self.last_action = action
        self._count(flags)
        return action.copy(), flags

    def record_overrun(self) -> int:
        """The last tick's compute exceeded the watchdog: it counts as a fault. Returns the flags to add to it."""
        flags = WATCHDOG
        if not self.estopped:
            if not self._last_tick_faulty:  # the tick becomes faulty: it continues the run of faults before it
                self.consecutive_faults = self._faults_before
                self._note_fault(True)
            if self.estop_after and self.consecutive_faults >= self.estop_after:
                self.estopped = True
                flags |= ESTOP_TRIPPED
        self._count(flags, tick=False)
        return flags

    def estop(self) -> None:
        """Latch the e-stop: the safe action from the next tick on, until ``reset()``."""
        self.estopped = True

    def reset(self) -> None:
        """Release the e-stop and forget past faults (counters are kept)."""
        self.estopped, self.consecutive_faults, self._last_tick_faulty, self._faults_before = False, 0, False, 0
        self._reset_policy()

    def _check_obs(self, obs, obs_time, now: float) -> tuple[np.ndarray | None, int]:
        """The float32 observation [D] for the policy, or None with the flag of the first check that failed."""
        if obs is None:
            return None, (NO_OBS if self._seen_obs else WAITING)
        self._seen_obs = True
        try:
            measured = float(obs_time)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float range
            measured = math.nan
        age = float(now) - measured
        if not (math.isfinite(measured) and -self.future_tolerance <= age <= self.stale_timeout):
            return None, STALE  # too old, from the future, or no valid timestamp (NaN, inf)
        try:
            array = np.asarray(obs, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            return None, WRONG_SIZE
        if array.size != self.obs_dim or array.ndim > 2:
            return None, WRONG_SIZE
        with np.errstate(over="ignore", invalid="ignore"):
            obs32 = array.reshape(self.obs_dim).astype(np.float32)  # values beyond float32 become inf
        if not np.isfinite(obs32).all():
            return None, NON_FINITE_OBS
        outside = (self.obs_low is not None and (obs32 < self.obs_low).any()) or (
            self.obs_high is not None and (obs32 > self.obs_high).any()
        )
        if not outside:
            return obs32, 0
        if not self.clip_obs:
            return None, OBS_BOUNDS
        low = -np.inf if self.obs_low is None else self.obs_low
        high = np.inf if self.obs_high is None else self.obs_high
        return np.clip(obs32, low, high).astype(np.float32), OBS_BOUNDS

    def _policy_action(self, obs32: np.ndarray, flags: int) -> tuple[np.ndarray | None, int]:
        try:
            action = np.asarray(self.policy(obs32), dtype=np.float64).reshape(-1)  # [A]
        except Exception:  # a failing model must not stop the loop: the safe action goes out instead
            return None, flags | BAD_ACTION
        if action.shape != (self.action_dim,) or not np.isfinite(action).all():
            return None, flags | BAD_ACTION
        clamped = np.minimum(np.maximum(action, self.action_low), self.action_high)  # np.clip costs 3x more here
        if (clamped != action).any():
            flags |= CLAMPED
        return clamped, flags

    def _rate_limit(self, target: np.ndarray) -> np.ndarray:
        return limit_rate(target, self.last_action, self.max_action_delta, self.action_low, self.action_high)

    def _note_fault(self, faulty: bool) -> None:
        self._last_tick_faulty, self._faults_before = faulty, self.consecutive_faults
        self.consecutive_faults = self.consecutive_faults + 1 if faulty else 0
        if faulty:
            self._reset_policy()

    def _reset_policy(self) -> None:
        reset = getattr(self.policy, "reset", None)
        if callable(reset):
            reset()

    def _count(self, flags: int, tick: bool = True) -> None:
        self.counters["ticks"] += int(tick)
        for bit, name in FLAG_NAMES.items():
            if flags & bit:
                self.counters[name] += 1
