"""Deploy runtime: the safety layer on hand-made sequences, action chunks and the tick log."""

from __future__ import annotations

import math

import numpy as np
import pytest
from runtime_fakes import GOOD, HIGH, LOW, ScriptedRobot, constant, layer, sidecar_for

from robopt.sim2real import safety as S
from robopt.sim2real.runtime import ChunkedPolicy, ControlLoop
from robopt.sim2real.safety import SafetyLayer
from robopt.sim2real.tick_log import TickLog, load_log

# ---------------------------------------------------------------- SafetyLayer


def test_good_tick_passes_the_policy_action_and_obs_as_float32():
    policy = constant([0.5, -0.5])
    action, flags = layer(policy).tick(GOOD, 9.9, 10.0)
    np.testing.assert_array_equal(action, [0.5, -0.5])
    assert flags == 0
    assert policy.seen[0].dtype == np.float32 and policy.seen[0].shape == (3,)


@pytest.mark.parametrize(
    ("safe_action", "posture", "expected"),
    [("hold", None, [0.5, -0.5]), ("zero", None, [0, 0]), ("posture", [0.25, 1.5], [0.25, 1.5])],
)
def test_nan_tick_gives_the_safe_action(safe_action, posture, expected):
    safety = layer(safe_action=safe_action, posture=posture)
    safety.tick(GOOD, 10.0, 10.0)  # last sent action: [0.5, -0.5]
    action, flags = safety.tick(np.array([0.1, np.nan, 0.3]), 10.0, 10.0)
    np.testing.assert_array_equal(action, expected)
    assert flags == S.NON_FINITE_OBS | S.SAFE_ACTION
    assert safety.counters["non_finite_obs"] == 1 and safety.counters["safe_action"] == 1


def test_zero_safe_action_is_zero_clipped_into_the_bounds():
    safety = SafetyLayer(constant([1.0]), 1, [0.5], [2.0], safe_action="zero", stale_timeout=1.0)
    action, _ = safety.tick(None, math.nan, 0.0)  # nothing arrived yet
    np.testing.assert_array_equal(action, [0.5])


def test_rate_limit_stops_exactly_at_the_limit():
    # target [1, -2] from the initial action [0, 0] with max delta [0.25, 0.5]: 0.25 and 0.5 per tick
    safety = layer(constant([1.0, -2.0]), max_action_delta=[0.25, 0.5])
    actions, flags = zip(*(safety.tick(GOOD, 10.0, 10.0) for _ in range(5)))
    np.testing.assert_array_equal(np.array(actions), [[0.25, -0.5], [0.5, -1.0], [0.75, -1.5], [1.0, -2.0], [1, -2]])
    assert [bool(f & S.RATE_LIMITED) for f in flags] == [True, True, True, False, False]


def test_far_posture_is_approached_gradually():
    safety = layer(constant([1.0, 2.0]), max_action_delta=0.5, safe_action="posture", posture=[-1.0, -2.0])
    for _ in range(4):
        safety.tick(GOOD, 10.0, 10.0)
    np.testing.assert_array_equal(safety.last_action, [1.0, 2.0])
    actions = [safety.tick(None, math.nan, 10.0)[0] for _ in range(9)]  # no obs: safe action toward the posture
    np.testing.assert_array_equal(actions[0], [0.5, 1.5])
    np.testing.assert_array_equal(actions[3], [-1.0, 0.0])  # dim 0 arrived after 4 ticks, dim 1 needs 8
    np.testing.assert_array_equal(actions[8], [-1.0, -2.0])


def test_stale_sensor_trips_the_timeout():
    safety = layer()
    assert safety.tick(GOOD, 9.75, 10.0)[1] == 0  # age 0.25 = timeout: still fresh
    assert safety.tick(GOOD, 9.5, 10.0)[1] == S.STALE | S.SAFE_ACTION  # age 0.5 > 0.25
    assert safety.tick(GOOD, math.nan, 10.0)[1] == S.STALE | S.SAFE_ACTION  # no timestamp
    assert safety.tick(GOOD, "soon", 10.0)[1] == S.STALE | S.SAFE_ACTION
    assert safety.counters["stale"] == 3


def test_estop_trips_after_estop_after_faults_and_latches_until_reset():
    safety = layer(estop_after=3, safe_action="zero")
    bad = np.array([np.inf, 0.0, 0.0])
    safety.tick(bad, 10.0, 10.0), safety.tick(bad, 10.0, 10.0)
    assert safety.tick(GOOD, 10.0, 10.0)[1] == 0  # a good tick restarts the count
    assert not safety.estopped
    assert safety.tick(bad, 10.0, 10.0)[1] & S.ESTOP_TRIPPED == 0
    assert safety.tick(bad, 10.0, 10.0)[1] & S.ESTOP_TRIPPED == 0
    assert safety.tick(bad, 10.0, 10.0)[1] & S.ESTOP_TRIPPED  # third in a row
    for _ in range(3):  # latched: good observations change nothing
        action, flags = safety.tick(GOOD, 10.0, 10.0)
        assert flags == S.ESTOP | S.SAFE_ACTION
        np.testing.assert_array_equal(action, [0.0, 0.0])
    safety.reset()
    action, flags = safety.tick(GOOD, 10.0, 10.0)
    assert flags == 0 and not safety.estopped
    np.testing.assert_array_equal(action, [0.5, -0.5])
    assert safety.counters["estop_trips"] == 1 and safety.counters["estop"] == 3
    safety.estop()  # by hand
    assert safety.tick(GOOD, 10.0, 10.0)[1] & S.ESTOP


def test_watchdog_overruns_count_toward_the_estop_once_per_tick():
    safety = layer(estop_after=2)
    safety.tick(np.array([np.nan] * 3), 10.0, 10.0)  # a faulty tick that also overran: one fault, not two
    assert safety.record_overrun() == S.WATCHDOG and safety.consecutive_faults == 1
    safety.tick(GOOD, 10.0, 10.0)
    assert safety.record_overrun() == S.WATCHDOG | S.ESTOP_TRIPPED
    assert safety.estopped and safety.counters["watchdog"] == 2


def test_clamping_into_the_action_bounds():
    action, flags = layer(constant([5.0, -5.0])).tick(GOOD, 10.0, 10.0)
    np.testing.assert_array_equal(action, [1.0, -2.0])
    assert flags == S.CLAMPED


@pytest.mark.parametrize("obs", [np.zeros(2), np.zeros(4), np.zeros((2, 3)), "abc", [[1, 2], [3]], {"a": 1}])
def test_wrong_size_obs_gives_the_safe_action(obs):
    safety = layer()
    assert safety.tick(obs, 10.0, 10.0)[1] == S.WRONG_SIZE | S.SAFE_ACTION


def test_obs_bounds_safe_or_clip():
    high = np.array([1.0, 1.0, 1.0])
    assert (
        layer(obs_low=-high, obs_high=high).tick(np.array([0.0, 3.0, 0.0]), 10, 10)[1] == S.OBS_BOUNDS | S.SAFE_ACTION
    )
    policy = constant([0.5, -0.5])
    safety = layer(policy, obs_low=-high, obs_high=high, clip_obs=True, estop_after=1)
    action, flags = safety.tick(np.array([-5.0, 3.0, 0.5]), 10.0, 10.0)
    assert flags == S.OBS_BOUNDS and not safety.estopped  # clipping corrects, it is not a fault
    np.testing.assert_array_equal(policy.seen[0], [-1.0, 1.0, 0.5])
    assert layer().tick(np.array([1e39, 0, 0]), 10, 10)[1] == S.NON_FINITE_OBS | S.SAFE_ACTION  # beyond float32


def test_bad_policy_output_gives_the_safe_action():
    def raising(obs):
        raise RuntimeError("model failed")

    for policy in (constant([np.nan, 0.0]), constant([0.0, 0.0, 0.0]), raising):
        assert layer(policy).tick(GOOD, 10.0, 10.0)[1] == S.BAD_ACTION | S.SAFE_ACTION


def test_waiting_for_the_first_observation_is_not_a_fault():
    safety = layer(estop_after=2)
    for _ in range(5):
        assert safety.tick(None, math.nan, 10.0)[1] == S.WAITING | S.SAFE_ACTION
    assert not safety.estopped
    safety.tick(GOOD, 10.0, 10.0)
    safety.tick(None, math.nan, 10.0)  # the robot went silent after speaking: a fault
    assert safety.tick(None, math.nan, 10.0)[1] & S.ESTOP_TRIPPED


def test_constructor_refuses_unsafe_settings():
    with pytest.raises(ValueError, match="max_action_delta"):
        layer(max_action_delta=0.0)
    with pytest.raises(ValueError, match="posture"):
        layer(safe_action="posture", posture=[3.0, 0.0])
    with pytest.raises(ValueError, match="posture"):
        layer(safe_action="posture")


def test_fuzz_garbage_observations_never_escape_the_bounds():
    rng = np.random.default_rng(0)
    delta = np.array([0.3, 0.7])

    def policy(obs):  # garbage out as well, now and then
        pick = rng.integers(6)
        return [rng.normal(0, 5, 2), [np.nan, 1.0], [np.inf, -np.inf], [1e300, -1e300], [0.0], rng.normal(0, 1, 2)][
            pick
        ]

    safety = layer(
        policy,
        max_action_delta=delta,
        estop_after=0,
        obs_low=-10.0,
        obs_high=10.0,
        safe_action="posture",
        posture=[0.9, -1.9],  # far from the policy's actions: a jump to it would break the rate limit
    )
    garbage = [
        lambda: None,
        lambda: np.full(3, np.nan),
        lambda: np.array([np.inf, 0, 0]),
        lambda: rng.normal(0, 1e30, 3),
        lambda: rng.normal(0, 1, rng.integers(0, 6)),
        lambda: rng.normal(0, 3, 3),
        lambda: "garbage",
        lambda: [1, [2, 3]],
    ]
    previous = safety.last_action.copy()
    for _ in range(5000):
        obs = garbage[rng.integers(len(garbage))]()
        action, _ = safety.tick(obs, 10.0 - rng.choice([0.0, 0.1, 1.0, np.nan]), 10.0)
        assert np.isfinite(action).all() and (action >= LOW).all() and (action <= HIGH).all()
        assert (np.abs(action - previous) <= delta + 1e-12).all()
        previous = action
    assert safety.counters["ticks"] == 5000
    assert min(safety.counters[k] for k in ("stale", "wrong_size", "non_finite_obs", "obs_bounds", "bad_action")) > 50


def test_chunked_policy_replans_every_k_ticks_and_after_reset():
    calls = []

    def chunk(obs):  # [H=3, A=1]: the call number in the chunk's values
        calls.append(1)
        return np.array([[10.0 * len(calls)], [10.0 * len(calls) + 1], [10.0 * len(calls) + 2]])

    policy = ChunkedPolicy(chunk, horizon=3, replan_every=2)
    got = [float(policy(np.zeros(1))[0]) for _ in range(5)]
    assert got == [10.0, 11.0, 20.0, 21.0, 30.0]
    policy.reset()
    assert float(policy(np.zeros(1))[0]) == 40.0


# ---------------------------------------------------------------- TickLog


def test_tick_log_ring_wraps_and_round_trips(tmp_path):
    log = TickLog(4, action_dim=2)
    for tick in range(6):
        log.append(tick, 0.5 * tick, 0.01, 100.0 + tick, tick % 3, [tick, -tick])
    records = log.records()
    assert len(log) == 4 and records["tick"].tolist() == [2, 3, 4, 5]  # the oldest two were overwritten
    assert records["action"][-1].tolist() == [5.0, -5.0] and records["flags"].tolist() == [2, 0, 1, 2]
    path = log.save(tmp_path / "sub" / "ticks.npy")
    loaded = load_log(path)
    assert loaded.dtype == records.dtype and (loaded == records).all()
    np.save(tmp_path / "plain.npy", np.zeros(3))
    with pytest.raises(ValueError, match="not a tick log"):
        load_log(tmp_path / "plain.npy")


def test_future_infinite_and_overflowing_timestamps_are_stale():
    safety = layer()  # future_tolerance 0
    assert safety.tick(GOOD, 10.3, 10.0)[1] == S.STALE | S.SAFE_ACTION  # measured 0.3 s in the future
    assert safety.tick(GOOD, math.inf, 10.0)[1] == S.STALE | S.SAFE_ACTION  # age -inf
    assert safety.tick(GOOD, -math.inf, 10.0)[1] == S.STALE | S.SAFE_ACTION
    assert safety.tick(GOOD, 10**400, 10.0)[1] == S.STALE | S.SAFE_ACTION  # float() of it overflows
    assert safety.counters["stale"] == 4
    tolerant = layer(future_tolerance=0.5)
    assert tolerant.tick(GOOD, 10.5, 10.0)[1] == 0  # exactly the tolerance ahead: fine
    assert tolerant.tick(GOOD, 10.6, 10.0)[1] == S.STALE | S.SAFE_ACTION
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="future_tolerance"):
            layer(future_tolerance=bad)
    loop = ControlLoop(constant([0, 0]), ScriptedRobot([]), sidecar_for(period=0.02), clock=lambda: 0.0, realtime=False)
    assert loop.safety.future_tolerance == 0.02  # the loop allows one control period


# ---------------------------------------------------------------- measured pose and the damping stop


def doubled(obs):
    """A fake map to the action at the measured pose: twice the first two observation elements."""
    return 2.0 * np.asarray(obs, np.float64)[:2]


def test_measured_safe_action_goes_to_the_last_measured_pose():
    safety = layer(safe_action="measured", measure=doubled, max_action_delta=0.1)
    safety.tick(GOOD, 10.0, 10.0)  # sends the policy's [0.5, -0.5] ramped from zero: [0.1, -0.1]
    action, flags = safety.tick(GOOD, 0.0, 10.0)  # stale: toward measure(GOOD) = [0.2, 0.4]
    np.testing.assert_allclose(action, [0.2, 0.0], atol=1e-12)
    assert flags == S.STALE | S.SAFE_ACTION | S.RATE_LIMITED
    for _ in range(10):
        action, _ = safety.tick(None, 0.0, 10.0)
    np.testing.assert_allclose(action, [0.2, 0.4], atol=1e-12)  # the pose of the last valid observation


def test_damping_stop_follows_the_measured_pose_without_the_policy():
    policy = constant([0.5, -0.5])
    safety = layer(policy, safe_action="hold", estop_action="measured", measure=doubled, estop_after=2)
    safety.tick(GOOD, 10.0, 10.0)
    for _ in range(2):  # two faults latch the e-stop; hold meanwhile
        action, flags = safety.tick(GOOD, 0.0, 10.0)
    np.testing.assert_allclose(action, [0.2, 0.4], rtol=1e-6)  # latched on this tick: the last measured pose (float32)
    assert flags & S.ESTOP_TRIPPED and safety.estopped
    calls = len(policy.seen)
    action, flags = safety.tick(np.array([0.3, -0.1, 0.0]), 10.0, 10.0)  # a fresh measurement: the pose moved
    np.testing.assert_allclose(action, [0.6, -0.2], rtol=1e-6)
    assert flags == S.ESTOP | S.SAFE_ACTION and len(policy.seen) == calls
    action, _ = safety.tick(np.array([np.nan, 0.0, 0.0]), 10.0, 10.0)  # an invalid one does not move it
    np.testing.assert_allclose(action, [0.6, -0.2], rtol=1e-6)


def test_measured_keeps_nan_elements_and_survives_a_failing_map():
    def gripper_kept(obs):
        return np.array([np.nan, 4 * obs[1]])  # element 0 (a gripper) keeps the last action sent

    safety = layer(safe_action="measured", measure=gripper_kept)
    safety.tick(GOOD, 10.0, 10.0)  # sends [0.5, -0.5]; measured [nan, 0.8]
    action, _ = safety.tick(None, 10.0, 10.0)
    np.testing.assert_allclose(action, [0.5, 0.8], rtol=1e-6)

    def broken(obs):
        raise RuntimeError("bad map")

    safety = layer(safe_action="measured", measure=broken)
    safety.tick(GOOD, 10.0, 10.0)
    action, flags = safety.tick(None, 10.0, 10.0)  # no measured pose ever: hold
    np.testing.assert_array_equal(action, [0.5, -0.5])
    assert flags == S.NO_OBS | S.SAFE_ACTION


def test_measured_needs_a_map_and_estop_action_is_checked():
    with pytest.raises(ValueError, match="safe_action measured needs the measured joint positions"):
        layer(safe_action="measured")
    with pytest.raises(ValueError, match="estop_action 'limp' is not allowed; allowed: hold, zero, posture, measured"):
        layer(estop_action="limp")
    with pytest.raises(ValueError, match="posture"):
        layer(estop_action="posture")
