"""Deploy runtime: the deploy config, the ONNX start-up checks, the control loop with fake and simulated robots,
the stop ramp and the deploy command (the safety layer: test_safety.py; the export's start-up checks:
test_model.py)."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest
from runtime_fakes import GOOD, ScriptedRobot, constant, sidecar_for

from robopt.config import ConfigError
from robopt.sim2real import safety as S
from robopt.sim2real.deploy_config import DeployConfig, build_safety, check_log_path, load_deploy_config
from robopt.sim2real.model import load_export
from robopt.sim2real.runtime import ControlLoop
from robopt.sim2real.sidecar import DeployError
from robopt.sim2real.tick_log import load_log

# ---------------------------------------------------------------- DeployConfig


def test_deploy_config_from_yaml_and_bad_values(tmp_path):
    path = tmp_path / "deploy.yaml"
    path.write_text("period: 0.02\nmax_action_delta: [0.1, 0.2]\nsafe_action: zero\nestop_after: 5\n")
    config = load_deploy_config(path)
    assert config.period == 0.02 and config.max_action_delta == [0.1, 0.2] and config.estop_after == 5
    for data, match in [
        ({"perod": 1}, "unknown config key 'perod'"),
        ({"period": -1}, "period"),
        ({"safe_action": "freeze"}, "allowed: , hold, zero, posture, measured"),
        ({"estop_action": "limp"}, "allowed: , hold, zero, posture, measured"),
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
        ({"safe_action": "measured"}, "safe_action measured needs the measured joint positions, but policy.json has "),
        ({"estop_action": "measured"}, "estop_action measured .* is not a robot task"),
    ]:
        with pytest.raises(DeployError, match=match):
            build_safety(constant([0, 0]), sidecar, load_deploy_config(data), 0.1)


# ---------------------------------------------------------------- ControlLoop with fake robots


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


# ---------------------------------------------------------------- end to end on a simulated robot


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


# ---------------------------------------------------------------- internal errors, the stop ramp, the log


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
