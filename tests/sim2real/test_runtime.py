"""Deploy runtime: the safety layer on hand-made sequences, the tick log, the deploy config, the ONNX start-up checks
and the control loop end to end on a simulated robot."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

from robopt.config import ConfigError
from robopt.sim2real import safety as S
from robopt.sim2real.runtime import (
    ChunkedPolicy,
    ControlLoop,
    DeployConfig,
    OnnxPolicy,
    SafetyLayer,
    TickLog,
    build_safety,
    check_log_path,
    load_deploy_config,
    load_export,
    load_log,
)
from robopt.sim2real.sidecar import DeployError, Sidecar, write_sidecar

LOW, HIGH = np.array([-1.0, -2.0]), np.array([1.0, 2.0])


def constant(value):
    """A fake policy: the same action whatever the observation; it records what it was given."""

    def policy(obs):
        policy.seen.append(np.array(obs))
        return np.array(value, dtype=np.float64)

    policy.seen = []
    return policy


def layer(policy=None, **kwargs) -> SafetyLayer:
    kwargs.setdefault("stale_timeout", 0.25)
    return SafetyLayer(policy or constant([0.5, -0.5]), 3, LOW, HIGH, **kwargs)


GOOD = np.array([0.1, 0.2, 0.3])


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


# ---------------------------------------------------------------- DeployConfig


def sidecar_for(obs_dim=3, action_dim=2, period=0.01, **kwargs) -> Sidecar:
    return Sidecar(
        policy_kind="gaussian",
        env_id="fake",
        obs_dim=obs_dim,
        action_dim=action_dim,
        action_low=[-1.0] * action_dim,
        action_high=[1.0] * action_dim,
        control_period=period,
        files={"onnx": "policy.onnx"},
        **kwargs,
    )


def test_deploy_config_from_yaml_and_bad_values(tmp_path):
    path = tmp_path / "deploy.yaml"
    path.write_text("period: 0.02\nmax_action_delta: [0.1, 0.2]\nsafe_action: zero\nestop_after: 5\n")
    config = load_deploy_config(path)
    assert config.period == 0.02 and config.max_action_delta == [0.1, 0.2] and config.estop_after == 5
    for data, match in [
        ({"perod": 1}, "unknown config key 'perod'"),
        ({"period": -1}, "period"),
        ({"safe_action": "freeze"}, "allowed: hold, zero, posture"),
        ({"estop_after": 1.5}, "integer"),
    ]:
        with pytest.raises(ConfigError, match=match):
            load_deploy_config(data)
    with pytest.raises(ConfigError, match="not found"):
        load_deploy_config(tmp_path / "missing.yaml")
    sidecar = sidecar_for()
    for data, match in [
        ({"max_action_delta": 0}, "max_action_delta"),
        ({"max_action_delta": [0.1]}, "2 numbers"),
        ({"safe_action": "posture"}, "posture"),
        ({"obs_low": [0, 0]}, "obs_low"),
    ]:
        with pytest.raises(DeployError, match=match):
            build_safety(constant([0, 0]), sidecar, load_deploy_config(data), 0.1)


# ---------------------------------------------------------------- ControlLoop with fake robots


class ScriptedRobot:
    """A fake robot: ``read`` replays a script of (obs, time) (or raises what the script holds)."""

    def __init__(self, script, obs_dim=3, action_dim=2):
        self.obs_dim, self.action_dim, self.script = obs_dim, action_dim, list(script)
        self.counters, self.episode_returns, self.sent, self.closed = {"dropped": 0}, [], [], False

    def read(self):
        item = self.script.pop(0) if self.script else (GOOD, 0.0)
        if isinstance(item, BaseException):
            raise item
        return item

    def send(self, action):
        self.sent.append(np.array(action))

    def close(self):
        self.closed = True


def test_loop_survives_a_misbehaving_robot_and_ctrl_c_sends_the_safe_action(tmp_path):
    script = [
        (GOOD, 0.0),
        OSError("link down"),
        "not a tuple",
        (np.full(3, np.nan), 0.0),
        (GOOD, 0.0),
        None,
        KeyboardInterrupt(),
    ]
    robot = ScriptedRobot(script)
    config = DeployConfig(max_action_delta=0.25, safe_action="zero", log_path=str(tmp_path / "log.npy"))
    loop = ControlLoop(constant([1.0, -1.0]), robot, sidecar_for(), config, clock=lambda: 0.0, realtime=False)
    summary = loop.run(ticks=100)
    assert summary["interrupted"] and summary["ticks"] == 7 and summary["counters"]["robot_error"] == 3
    assert summary["counters"]["stop_ticks"] == 1  # already at the safe target (zero): one stop tick
    sent = np.array(robot.sent)  # 6 ticks + the stop tick after Ctrl-C
    np.testing.assert_allclose(sent[:, 0], [0.25, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0])
    assert loop.close() == tmp_path / "log.npy" and robot.closed
    assert load_log(tmp_path / "log.npy")["tick"].tolist() == list(range(7))


def test_loop_refuses_a_period_the_machine_cannot_hold():
    import time

    def slow(obs):
        time.sleep(0.003)
        return np.zeros(2)

    with pytest.raises(DeployError, match="cannot hold"):
        ControlLoop(slow, ScriptedRobot([]), sidecar_for(period=0.001), DeployConfig())
    with pytest.raises(DeployError, match="obs_dim 4"):
        ControlLoop(constant([0, 0]), ScriptedRobot([], obs_dim=4), sidecar_for(), DeployConfig())


def test_loop_runs_action_chunks_tick_by_tick():
    calls = []

    def chunk(obs):  # [H=4, A=2]
        calls.append(1)
        return np.tile(np.linspace(-0.75, 0.0, 4)[:, None], (1, 2))

    loop = ControlLoop(
        chunk,
        ScriptedRobot([]),
        sidecar_for(action_chunk=4),
        DeployConfig(chunk_replan_every=2),
        clock=lambda: 0.0,
        realtime=False,
    )
    calls.clear()  # the start-up timing calls
    loop.run(ticks=6)
    assert len(calls) == 3
    assert [a[0] for a in loop.robot.sent] == [-0.75, -0.5, -0.75, -0.5, -0.75, -0.5]


# ---------------------------------------------------------------- ONNX export, start-up checks, end to end


def test_load_export_checks_parity_and_dims(export_dir, tmp_path):
    import shutil

    sidecar, policy = load_export(export_dir)
    assert policy(np.zeros(3, np.float32)).shape == (1,)
    bad = tmp_path / "bad"
    shutil.copytree(export_dir, bad)
    with np.load(bad / "parity.npz") as data:
        np.savez(bad / "parity.npz", obs=data["obs"], action=data["action"] + 1e-3)
    write_sidecar(bad, Sidecar(**{**sidecar.__dict__, "files_sha256": {}}))
    with pytest.raises(DeployError, match="does not reproduce parity.npz: max .diff. 0.001"):
        load_export(bad)
    write_sidecar(bad, Sidecar(**{**sidecar.__dict__, "obs_dim": 4, "obs_low": None, "files_sha256": {}}))
    with pytest.raises(DeployError, match="obs_dim 4"):
        load_export(bad)
    with pytest.raises(DeployError, match="action_dim 2"):
        OnnxPolicy(
            export_dir / "policy.onnx",
            Sidecar(**{**sidecar.__dict__, "action_dim": 2, "action_low": [-1, -1], "action_high": [1, 1]}),
        )
    (bad / "policy.onnx").write_bytes(b"not a model")
    with pytest.raises(DeployError, match="not a loadable ONNX model"):
        load_export(bad)
    with pytest.raises(DeployError, match="does not exist"):
        load_export(tmp_path / "nowhere")


def test_control_loop_on_a_simulated_robot_matches_the_plain_closed_loop(export_dir, tmp_path, pendulum_returns):
    from robopt.sim2real.robots import parse_robot

    sidecar, policy = load_export(export_dir)
    robot = parse_robot("sim:Pendulum-v1?seed=0", sidecar, realtime=False)
    config = DeployConfig(log_path=str(tmp_path / "ticks.npy"), log_capacity=100)
    loop = ControlLoop(policy, robot, sidecar, config, clock=robot.clock, realtime=False)
    summary = loop.run(ticks=400)
    loop.close()
    reference = pendulum_returns(policy, 2)  # 200 steps per Pendulum episode
    np.testing.assert_allclose(summary["episode_returns"], reference, rtol=1e-5)
    assert max(reference) - min(reference) > 1.0 and summary["counters"]["safe_action"] == 0
    records = load_log(tmp_path / "ticks.npy")
    assert records["tick"].tolist() == list(range(300, 400)) and (records["obs_age"] == 0).all()


def test_control_loop_under_link_faults_keeps_every_limit(export_dir):
    from robopt.sim2real.robots import parse_robot

    sidecar, policy = load_export(export_dir)
    robot = parse_robot(
        "sim:Pendulum-v1?noise=0.01&latency_ms=100&delay_ticks=1&drop=0.3&seed=3", sidecar, realtime=False
    )
    config = DeployConfig(max_action_delta=0.1, estop_after=0, stale_timeout_ms=160)
    loop = ControlLoop(policy, robot, sidecar, config, clock=robot.clock, realtime=False)
    summary = loop.run(duration=15.0)  # 300 ticks of 50 ms virtual time
    loop.close()
    records, counters = loop.log.records(), summary["counters"]
    assert summary["ticks"] == 300 and 50 < counters["robot.dropped"] < 130  # 0.3 * 300 = 90
    actions = records["action"][:, 0].astype(np.float64)
    assert (np.abs(actions) <= 2.0).all() and (np.abs(np.diff(actions)) <= 0.1 + 1e-6).all()
    assert counters["rate_limited"] > 0 and counters["waiting"] == 2  # the first reading arrives after 100 ms
    seen = records[2:]
    assert (seen["obs_age"] >= 0.1 - 1e-9).all()  # the sensor latency shows in every observation's age
    stale = (seen["flags"] & S.STALE) != 0
    assert stale.any() and (stale == (seen["obs_age"] > 0.16)).all()


def test_deploy_command_on_a_simulated_robot(export_dir, tmp_path):
    from typer.testing import CliRunner

    from robopt.cli import app

    directory = export_dir
    runner = CliRunner()
    result = runner.invoke(app, ["deploy", str(tmp_path / "missing"), "--robot", "sim:Pendulum-v1"])
    assert result.exit_code == 2 and "does not exist" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["deploy", str(tmp_path), "--robot", "sim:Pendulum-v1"])
    assert result.exit_code == 2 and "no policy.json" in result.output and len(result.output.splitlines()) == 1
    result = runner.invoke(app, ["deploy", str(directory), "--robot", "sim:Pendulum"])
    assert result.exit_code == 2 and "--robot 'sim:Pendulum'" in result.output
    (tmp_path / "deploy.yaml").write_text("max_action_delta: -1\n")
    result = runner.invoke(
        app, ["deploy", str(directory), "--robot", "sim:Pendulum-v1", "--config", str(tmp_path / "deploy.yaml")]
    )
    assert result.exit_code == 2 and "max_action_delta must be > 0" in result.output
    log = tmp_path / "ticks.npy"
    result = runner.invoke(
        app, ["deploy", str(directory), "--robot", "sim:Pendulum-v1?seed=1", "--duration", "1.2", "--log", str(log)]
    )
    assert result.exit_code == 0, result.output
    ticks = int(re.search(r"ticks: (\d+) in", result.output).group(1))
    assert 20 <= ticks <= 25 and "Hz" in result.output and "robot.steps=" in result.output  # 1.2 s at 50 ms: 24
    assert "stop_ticks=1" in result.output and len(load_log(log)) == ticks  # + 1 stop tick (hold: at its target)


def test_runtime_modules_import_without_torch():
    code = (
        "import sys, robopt.sim2real.runtime, robopt.sim2real.robots, robopt.sim2real.deploy, "
        "robopt.sim2real.safety; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------- review fixes: timestamps, internal errors, stop


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


class ExplodingTime:
    """A timestamp whose conversion raises something no check expects."""

    def __float__(self):
        raise RuntimeError("clock driver bug")


class ResetRaises:
    """A policy that works but whose ``reset`` (called by the safety layer after every fault) raises."""

    def __call__(self, obs):
        return np.array([1.0, -2.0])

    def reset(self):
        raise RuntimeError("reset failed")


def test_a_tick_never_raises_and_its_fallback_keeps_bounds_and_rate_limit():
    nan = np.full(3, np.nan)
    script = [(GOOD, 0.0)] * 3 + [(nan, 0.0), (GOOD, ExplodingTime()), (GOOD, 10**400), (nan, 0.0)] * 3
    robot = ScriptedRobot(script)
    config = DeployConfig(max_action_delta=0.25, estop_after=0, safe_action="zero")
    loop = ControlLoop(ResetRaises(), robot, sidecar_for(), config, clock=lambda: 0.0, realtime=False)
    summary = loop.run(ticks=len(script))  # raised RuntimeError out of the tick before the fix
    assert summary["ticks"] == 15 and summary["counters"]["internal_error"] == 12  # every fault calls reset
    sent = np.array(robot.sent)
    # 3 good ticks ramp to [0.75, -0.75]; then the safe action (zero) ramps back, 0.25 per tick, never a jump
    ramp = [[0.25, -0.25], [0.5, -0.5], [0.75, -0.75], [0.5, -0.5], [0.25, -0.25], [0, 0]]
    np.testing.assert_allclose(sent[:6], ramp)
    assert (np.abs(sent) <= 1.0).all() and (np.abs(np.diff(sent, axis=0)) <= 0.25 + 1e-12).all()
    flags = loop.log.records()["flags"]
    assert (flags[3] & S.INTERNAL_ERROR) and (flags[3] & S.SAFE_ACTION) and not flags[2] & S.INTERNAL_ERROR
    # with a policy that has no reset: only the exploding timestamp is an internal error; 10**400 is stale
    robot = ScriptedRobot([(GOOD, 0.0), (GOOD, ExplodingTime()), (GOOD, 10**400), (GOOD, 0.0)])
    loop = ControlLoop(constant([1.0, -1.0]), robot, sidecar_for(), config, clock=lambda: 0.0, realtime=False)
    counters = loop.run(ticks=4)["counters"]
    assert counters["internal_error"] == 1 and counters["stale"] == 1
    np.testing.assert_allclose(robot.sent, [[0.25, -0.25], [0.0, 0.0], [0.0, 0.0], [0.25, -0.25]])


def test_stop_ramps_the_safe_action_to_its_target_and_run_alone_never_stops():
    robot = ScriptedRobot([])
    config = DeployConfig(max_action_delta=0.25, safe_action="zero")
    loop = ControlLoop(constant([1.0, -1.0]), robot, sidecar_for(), config, clock=lambda: 0.0, realtime=False)
    for _ in range(3):
        loop.run(ticks=2)  # repeated runs, as tests and the fuzz test make: no stop in between
    assert not loop.safety.estopped and len(robot.sent) == 6
    np.testing.assert_array_equal(robot.sent[-1], [1.0, -1.0])
    assert loop.stop() == 4  # ceil(1.0 / 0.25) ticks to zero
    np.testing.assert_allclose(robot.sent[6:], [[0.75, -0.75], [0.5, -0.5], [0.25, -0.25], [0.0, 0.0]])
    assert loop.stop() == 0 and len(robot.sent) == 10  # only the first call does anything
    summary = loop.summary()
    assert summary["stopped"] and not summary["estopped"] and summary["counters"]["stop_ticks"] == 4
    records = loop.log.records()
    assert records["tick"].tolist() == list(range(10))
    assert (records["flags"][6:] & (S.ESTOP | S.SAFE_ACTION) == S.ESTOP | S.SAFE_ACTION).all()
    # a far target is ramped for at most 2 s worth of ticks; without a rate limit one tick reaches it
    far = DeployConfig(max_action_delta=0.001, safe_action="zero")
    loop = ControlLoop(constant([1.0, 1.0]), ScriptedRobot([]), sidecar_for(), far, clock=lambda: 0.0, realtime=False)
    loop.run(ticks=1000)
    assert loop.stop() == 200  # needs 1000 ticks; 2 s at 10 ms is 200
    loop = ControlLoop(constant([1.0, 1.0]), ScriptedRobot([]), sidecar_for(), DeployConfig(safe_action="zero"))
    loop.run(ticks=1)
    assert loop.stop() == 1 and loop.robot.sent[-1].tolist() == [0.0, 0.0]


def test_stop_ticks_at_the_control_period_in_real_time():
    import time

    class TimedRobot(ScriptedRobot):
        def send(self, action):
            super().send(action)
            self.times = [*getattr(self, "times", []), time.perf_counter()]

    robot = TimedRobot([])
    config = DeployConfig(max_action_delta=0.5, safe_action="zero")
    loop = ControlLoop(constant([1.0, -1.0]), robot, sidecar_for(period=0.02), config, clock=lambda: 0.0)
    loop.run(ticks=2)
    assert loop.stop() == 2
    np.testing.assert_allclose(robot.sent, [[0.5, -0.5], [1.0, -1.0], [0.5, -0.5], [0.0, 0.0]])
    # the ramp keeps the period, no burst: sleeps never end early, so the two stop ticks take at least one period
    # more than the first tick's own compute (a lower bound only: a loaded machine makes it longer, never shorter)
    assert robot.times[-1] - robot.times[1] >= 0.02


def test_ctrl_c_stops_with_the_ramp():
    robot = ScriptedRobot([(GOOD, 0.0)] * 4 + [KeyboardInterrupt()])
    config = DeployConfig(max_action_delta=0.25, safe_action="zero")
    loop = ControlLoop(constant([1.0, 1.0]), robot, sidecar_for(), config, clock=lambda: 0.0, realtime=False)
    summary = loop.run()
    assert summary["interrupted"] and summary["stopped"] and summary["counters"]["stop_ticks"] == 4
    np.testing.assert_allclose(np.array(robot.sent)[:, 0], [0.25, 0.5, 0.75, 1.0, 0.75, 0.5, 0.25, 0.0])


def test_deploy_ends_with_the_safe_action_ramped_to_zero(export_dir, tmp_path):
    from robopt.sim2real.deploy import deploy

    config = tmp_path / "deploy.yaml"
    config.write_text("max_action_delta: 0.5\nsafe_action: zero\n")
    log = tmp_path / "ticks.npy"
    summary = deploy(export_dir, "sim:Pendulum-v1?seed=0", 0.5, config, log, echo=lambda _: None)
    records = load_log(log)
    stop = summary["counters"]["stop_ticks"]
    assert summary["stopped"] and not summary["estopped"] and len(records) == summary["ticks"]
    before = abs(float(records["action"][-stop - 1][0]))
    assert stop == max(1, math.ceil(before / 0.5 - 1e-9)) and records["action"][-1].tolist() == [0.0]
    assert (records["flags"][-stop:] & S.ESTOP).all() and not (records["flags"][:-stop] & S.ESTOP).any()


def test_log_path_is_checked_before_the_run_and_a_failed_save_is_one_line(export_dir, tmp_path):
    from robopt.sim2real.deploy import deploy

    for path, match in [(tmp_path, "is a directory"), (tmp_path / "missing" / "t.npy", "does not exist")]:
        with pytest.raises(DeployError, match=match):  # refused at once, before any robot is built
            deploy(export_dir, "sim:NoSuchEnv-v0", 1.0, None, path, echo=lambda _: None)
    assert check_log_path(tmp_path / "ok.npy") == tmp_path / "ok.npy" and not (tmp_path / "ok.npy").exists()
    robot = ScriptedRobot([])
    config = DeployConfig(log_path=str(tmp_path / "late.npy"))
    loop = ControlLoop(constant([0, 0]), robot, sidecar_for(), config, clock=lambda: 0.0, realtime=False)
    loop.run(ticks=3)
    (tmp_path / "late.npy").mkdir()  # the path became unwritable during the run
    with pytest.raises(DeployError, match="cannot save the tick log") as error:
        loop.close()
    assert robot.closed and "\n" not in str(error.value)


def test_log_capacity_has_an_upper_bound():
    assert load_deploy_config({"log_capacity": 10_000_000}).log_capacity == 10_000_000
    with pytest.raises(ConfigError, match="log_capacity must be between 1 and 10_000_000"):
        load_deploy_config({"log_capacity": 10_000_001})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("files", {"onnx": "../policy.onnx"}, "plain file names"),
        ("files", {"onnx": "/etc/passwd"}, "plain file names"),
        ("files", {"onnx": ".."}, "plain file names"),
        ("files", {"onnx": 3}, "plain file names"),
        ("files_sha256", ["abc"], "files_sha256"),
        ("files_sha256", {"policy.onnx": 5}, "files_sha256"),
        ("onnx_input", 5, "onnx_input must be a string"),
        ("onnx_output", None, "onnx_output must be a string"),
        ("policy_kind", ["gaussian"], "policy_kind must be a string"),
        ("env_id", {}, "env_id must be a string"),
        ("config", [], "config must be an object"),
        ("obs_names", [1, 2, 3], "obs_names must be null or a list of strings"),
        ("action_names", [None], "action_names must be null or a list of strings"),
        ("action_low", [10**400], "action_low must hold numbers"),
    ],
)
def test_sidecar_field_types_are_checked(tmp_path, field, value, match):
    import json

    from robopt.sim2real.sidecar import read_sidecar

    write_sidecar(tmp_path, sidecar_for(action_dim=1))
    data = json.loads((tmp_path / "policy.json").read_text())
    data[field] = value
    (tmp_path / "policy.json").write_text(json.dumps(data))
    with pytest.raises(DeployError, match=match):
        read_sidecar(tmp_path)


def test_parity_file_that_is_not_an_npz_archive_is_one_line(export_dir, tmp_path):
    from robopt.sim2real.runtime import verify_parity

    _, policy = load_export(export_dir)
    np.save(tmp_path / "array.npy", np.zeros((4, 3)))
    (tmp_path / "text.npz").write_text("not an archive")
    np.savez(tmp_path / "strings.npz", obs=np.array([["a", "b", "c"]]), action=np.array([["x"]]))
    for name, match in [("array.npy", "not an npz archive"), ("text.npz", "npz"), ("strings.npz", "not numbers")]:
        with pytest.raises(DeployError, match=match) as error:
            verify_parity(policy, tmp_path / name)
        assert "\n" not in str(error.value)


def test_model_helpers_live_in_model_and_are_re_exported():
    from robopt.sim2real import model, runtime

    for name in ("OnnxPolicy", "verify_parity", "load_export", "ChunkedPolicy", "median_call_seconds"):
        assert getattr(runtime, name) is getattr(model, name)
    code = "import sys, robopt.sim2real.model; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
