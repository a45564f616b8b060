"""The simulated robot (actuator delay, sensor latency, noise, drops, episodes, its thread), ``--robot`` specs and
``robopt deploy`` on the command line."""

from __future__ import annotations

import importlib.util
import math
import time

import numpy as np
import pytest
from runtime_fakes import pendulum_sidecar

from robopt.sim2real.robots import RobotInterface, parse_robot
from robopt.sim2real.sidecar import DeployError
from robopt.sim2real.simrobot import SimRobot

PERIOD = 0.05


def pendulum(**kwargs) -> SimRobot:
    return SimRobot("Pendulum-v1", PERIOD, realtime=False, **kwargs)


def recorded_actions(robot: SimRobot) -> list:
    """Wrap the env's step so the actions it really applies are recorded."""
    applied, step = [], robot.env.step

    def recording_step(action):
        applied.append(float(action[0, 0]))
        return step(action)

    robot.env.step = recording_step
    return applied


@pytest.mark.parametrize("delay", [0, 2])
def test_actuator_delay_applies_the_action_sent_at_tick_t_at_tick_t_plus_delay(delay):
    robot = pendulum(delay_ticks=delay)
    applied = recorded_actions(robot)
    for t in range(6):
        robot.send(np.array([0.25 * (t + 1)]))
        robot.step_sync()
    robot.close()
    sent = [0.25 * (t + 1) for t in range(6)]
    assert applied == [0.0] * delay + sent[: 6 - delay]  # zero until the first action arrives


def test_sensor_latency_delays_readings_but_reports_the_measurement_time():
    robot = pendulum(latency_ms=100)
    assert robot.read() == (None, robot.read()[1]) and math.isnan(robot.read()[1])  # nothing readable at t = 0
    plain = pendulum()
    first, _ = plain.read()
    robot.step_sync()
    assert robot.read()[0] is None  # t = 0.05 < 0.1
    robot.step_sync()
    obs, measured = robot.read()  # t = 0.1: the reading measured at t = 0
    np.testing.assert_array_equal(obs, first)
    assert measured == 0.0 and robot.clock() == pytest.approx(0.1)
    robot.close(), plain.close()


def test_noise_and_drops_follow_their_settings():
    noisy, plain = pendulum(obs_noise=0.1, seed=1), pendulum(seed=1)
    differences = []
    for _ in range(300):
        noisy.step_sync(), plain.step_sync()
        differences.append(noisy.read()[0] - plain.read()[0])
    assert np.std(differences) == pytest.approx(0.1, rel=0.1)  # 900 draws: the std is within 5 % at 2 sigma
    dropping = pendulum(drop=0.5, seed=2)
    for _ in range(2000):
        dropping.step_sync()
    assert 900 < dropping.counters["dropped"] < 1100  # 1000 +- 3 sigma (sigma = 22)
    for robot in (noisy, plain, dropping):
        robot.close()


def test_bad_actions_are_counted_not_raised_and_episodes_recorded():
    robot = pendulum()
    assert isinstance(robot, RobotInterface)
    applied = recorded_actions(robot)
    robot.send(np.array([np.nan])), robot.send(np.zeros(3)), robot.send("left")
    robot.send(np.array([9.0]))  # clipped into the bounds like a real actuator
    for _ in range(401):
        robot.step_sync()
    assert robot.counters["bad_action"] == 3 and applied[0] == 2.0
    assert len(robot.episode_returns) == 2  # Pendulum episodes are 200 steps
    robot.close()
    robot.send(np.zeros(1))
    assert robot.counters["send_failed"] == 1


def test_realtime_robot_steps_in_its_own_thread():
    robot = SimRobot("Pendulum-v1", 0.01, latency_ms=5)
    time.sleep(0.3)
    obs, measured = robot.read()
    assert obs.shape == (3,) and 0.005 <= time.monotonic() - measured < 0.25
    robot.close()
    steps = robot.counters["steps"]
    assert 15 <= steps <= 32 and not robot._thread.is_alive()  # about 30 at 100 Hz
    with pytest.raises(RuntimeError, match="realtime=False"):
        robot.step_sync()


SIDECAR = pendulum_sidecar(PERIOD)


def test_parse_robot_sim_spec():
    robot = parse_robot(
        "sim:Pendulum-v1?noise=0.01&latency_ms=10&delay_ticks=1&drop=0.01&seed=4", SIDECAR, realtime=False
    )
    assert (robot.obs_noise, robot.latency, robot.delay_ticks, robot.drop, robot.period) == (
        0.01,
        0.01,
        1,
        0.01,
        PERIOD,
    )
    robot.close()


def test_a_deploy_period_sets_the_simulated_robots_tick():
    # a simulator slower than real time (Isaac Lab on CPU) runs in slow motion: one env step per deploy period
    robot = parse_robot("sim:Pendulum-v1", SIDECAR, realtime=False, period=4 * PERIOD)
    assert robot.period == 4 * PERIOD
    robot.close()


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("robot", "expected sim:ENV_ID"),
        ("sim:", "missing env id"),
        ("sim:Pendulum-v1?noise=-1", ">= 0"),
        ("sim:Pendulum-v1?bogus=1", "unknown option 'bogus'"),
        ("sim:Pendulum-v1?noise=abc", "is not float"),
        ("sim:Pendulum-v1?drop=1", r"\[0, 1\)"),
        ("sim:Pendulum-v1?seed", "options must read"),
        ("sim:NoSuchEnv-v0", "unknown Gymnasium env id"),
        ("sim:MountainCarContinuous-v0", "obs_dim 2, action_dim 1"),
        ("udp://robot", "udp://HOST:PORT"),
        ("udp://:80", "udp://HOST:PORT"),
        ("udp://h:99999", "udp://HOST:PORT"),
        ("udp://127.0.0.1:0", "port in 1..65535"),  # port 0 was accepted: actions to nowhere
    ],
)
def test_parse_robot_refuses_bad_specs_in_one_line(spec, match):
    with pytest.raises(DeployError, match=match) as error:
        parse_robot(spec, SIDECAR, realtime=False)
    assert "\n" not in str(error.value)


def test_parse_robot_udp_spec():
    if importlib.util.find_spec("robopt.sim2real.network") is None:
        pytest.skip("robopt.sim2real.network is not there yet")
    robot = parse_robot("udp://127.0.0.1:45999", SIDECAR)
    try:
        assert (robot.obs_dim, robot.action_dim) == (3, 1) and robot.read()[0] is None
    finally:
        robot.close()
