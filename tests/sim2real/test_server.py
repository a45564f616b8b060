"""The sim-robot server end to end: a UdpRobot client driving ``robopt sim-robot`` over localhost (Pendulum-v1),
with loss, latency, malformed actions, the command timeout and bad command-line input."""

from __future__ import annotations

import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest
from runtime_fakes import serving, wait_until

from robopt.sim2real.network import UdpRobot
from robopt.sim2real.protocol import KIND_ACTION, KIND_OBS, encode

OBS_DIM, ACTION_DIM = 3, 1


# --- end to end against the sim-robot server ---------------------------------------------------------------------


def damping_policy(obs: np.ndarray) -> np.ndarray:
    """A fixed policy for Pendulum-v1 (obs: cos, sin, angular velocity): torque against the velocity."""
    return np.clip([-0.5 * obs[2]], -2.0, 2.0)


def drive(robot: UdpRobot, seconds: float, until_episodes: int = 1) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(robot.episode_returns) < until_episodes:
        obs, _ = robot.read()
        if obs is not None:
            robot.send(damping_policy(obs))
        time.sleep(0.005)


def test_sim_robot_cli_end_to_end():
    command = [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", "Pendulum-v1"]
    command += ["--port", "0", "--period", "0.01", "--duration", "5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    try:
        ready = lines.get(timeout=10)
        port = int(re.search(r"udp 127\.0\.0\.1:(\d+)", ready).group(1))
        with UdpRobot("127.0.0.1", port, OBS_DIM, ACTION_DIM) as robot:
            drive(robot, 3.5)  # one 200-step episode at 0.01 s is 2 s
            client = robot.counters
            returns = robot.episode_returns
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=5) == 0
    finally:
        process.kill()
    output = "".join(lines.get() for _ in range(lines.qsize()))
    server_returns = [float(x) for x in re.findall(r"episode \d+: return (-?[\d.]+) \(200 steps\)", output)]
    assert len(returns) >= 1 and len(server_returns) >= 1, output
    # no loss: the client's sum of the per-step reward fields is the server's episode return (printed to 3 decimals)
    assert returns[0] == pytest.approx(server_returns[0], abs=1e-3)
    assert returns[0] < 0.0  # Pendulum rewards are <= 0
    assert client["received"] >= 200 and client.get("lost", 0) == 0 and client["sent"] >= 150
    summary = output.strip().splitlines()[-1]
    assert summary.startswith("sim-robot: episodes ") and "dropped: none" in summary, summary


def test_sim_robot_loss_latency_and_malformed_actions():
    from robopt.sim2real.server import SimRobotServer

    server = SimRobotServer("Pendulum-v1", period=0.01, latency_ms=25.0, loss=0.2, seed=1, log=lambda line: None)
    with serving(server) as (stop, thread, results):
        robot = UdpRobot("127.0.0.1", server.address[1], OBS_DIM, ACTION_DIM)
        try:
            started = time.monotonic()
            assert wait_until(lambda: robot.read()[0] is not None, 3.0)
            assert time.monotonic() - started >= 0.05  # hello in and reset obs out, 25 ms each way
            stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            good = encode(KIND_ACTION, 0, 0.0, np.array([0.1]))
            bad = [
                good[:-1] + bytes([good[-1] ^ 1]),  # checksum
                encode(KIND_ACTION, 0, 0.0, np.array([0.1, 0.2])),  # count
                encode(KIND_ACTION, 0, 0.0, np.array([np.nan]), allow_non_finite=True),  # non_finite
                encode(KIND_OBS, 0, 0.0, np.array([0.1])),  # kind
                b"",  # short
            ]
            for data in bad * 20:  # some are lost on the way (loss 0.2), the rest counted by reason
                stranger.sendto(data, server.address)
            stranger.close()
            drive(robot, 1.5, until_episodes=10)
            time.sleep(0.15)  # the client's last actions land while the server still runs
            stop.set()
            thread.join(timeout=5)
            time.sleep(0.1)  # and the server's last observations
            client = robot.counters
        finally:
            robot.close()
    c = Counter(results[0].counters)
    dropped_by_reason = sum(c[k] for k in ("checksum", "count", "non_finite", "kind", "short"))
    assert all(c[k] > 5 for k in ("checksum", "count", "non_finite", "kind", "short")), c
    # every datagram the client sent, and the 100 bad ones, were lost on the way or taken or counted by reason
    assert client["sent"] + client["hello"] + 100 == c["received"] + c["hello"] + c["lost_in"] + dropped_by_reason
    assert c["clipped"] == 0 and c.get("peer_changed", 0) == 0
    # the client sees the server's simulated losses as seq gaps; losses after the last packet it got go unseen
    # (those among the ~3 packets still delayed at the stop, and a run of P(k) = 0.2**k after them)
    assert c["lost_out"] - 6 <= client.get("lost", 0) <= c["lost_out"]
    assert 0.1 < c["lost_out"] / (c["sent"] + c["lost_out"]) < 0.3


def test_sim_robot_rests_after_its_command_timeout():
    from robopt.sim2real.server import ServeResult, SimRobotServer

    server = SimRobotServer("Pendulum-v1", period=0.01, command_timeout_ms=200, log=lambda line: None)
    try:
        assert "command timeout 0.2 s" in server.ready_line()
        result, peer = ServeResult(), ("127.0.0.1", 9)
        server.env.reset(seed=0)
        server._accept(encode(KIND_ACTION, 1, 0.0, np.array([1.5])), peer)
        server._step(0, result)
        assert server.action.tolist() == [1.5] and "command_timeout" not in server.counters
        server._last_command -= 0.1  # as if the command came 100 ms ago: still the last one
        server._step(1, result)
        assert server.action.tolist() == [1.5]
        server._last_command -= 0.15  # 250 ms: zero action from this step on, counted once
        server._step(2, result)
        server._step(3, result)
        assert server.action.tolist() == [0.0] and server.counters["command_timeout"] == 1
        server._accept(encode(KIND_ACTION, 2, 0.0, np.array([-1.0])), peer)  # a command again
        server._step(4, result)
        assert server.action.tolist() == [-1.0]
        assert "command timeouts 1," in ServeResult(counters=server.counters).summary()
    finally:
        server.close()
    default = SimRobotServer("Pendulum-v1", command_timeout_ms=None, log=lambda line: None)  # 10 periods of 0.05 s
    off = SimRobotServer("Pendulum-v1", command_timeout_ms=0, log=lambda line: None)
    try:
        assert default.command_timeout == pytest.approx(0.5) and "command timeout off" in off.ready_line()
    finally:
        default.close()
        off.close()


def test_sim_robot_applies_each_action_delay_ticks_steps_later():
    from robopt.sim2real.server import ServeResult, SimRobotServer

    server = SimRobotServer("Pendulum-v1", period=0.01, command_timeout_ms=0, delay_ticks=2, log=lambda line: None)
    applied, step = [], server.env.step
    server.env.step = lambda action: applied.append(float(action[0, 0])) or step(action)
    try:
        assert "actuator delay 2 steps" in server.ready_line()
        result, peer = ServeResult(), ("127.0.0.1", 9)
        server.env.reset(seed=0)
        for seq, torque in enumerate([1.5, -1.0, 0.5, 0.5]):
            server._accept(encode(KIND_ACTION, seq + 1, 0.0, np.array([torque])), peer)
            server._step(seq, result)
        assert applied == [0.0, 0.0, 1.5, -1.0]  # zeros until the first command has waited its two steps
    finally:
        server.close()
    with pytest.raises(ValueError, match="--delay-ticks must be an integer >= 0"):
        SimRobotServer("Pendulum-v1", delay_ticks=-1, log=lambda line: None)


@pytest.mark.parametrize(
    "args, message",
    [
        (["Pendulum-v1", "--port", "0", "--loss", "2"], "--loss must be a finite number >= 0.0 and < 0.999"),
        (["Pendulum-v1", "--port", "0", "--period", "0"], "--period must be a finite number > 0.0"),
        (["Pendulum-v1", "--port", "70000"], "port must be an integer in [0, 65535], got 70000"),
        (["Pendulum-v1", "--port", "0", "--peer", "nohost"], "--peer must be HOST:PORT"),
        (["Pendulum-v1", "--port", "0", "--episodes", "0"], "--episodes must be an integer >= 1"),
        (["NoSuchEnv-v0", "--port", "0"], "unknown Gymnasium env id 'NoSuchEnv-v0'"),
        (["Pendulum-v1", "--port", "0", "--command-timeout-ms", "-5"], "--command-timeout-ms must be a finite number"),
        (["Pendulum-v1", "--port", "0", "--delay-ticks", "-1"], "--delay-ticks must be an integer >= 0"),
        (["Pendulum-v1", "--ros2", "--delay-ticks", "1"], "--delay-ticks are UDP options"),
    ],
)
def test_sim_robot_bad_input_is_one_line_exit_2(args, message):
    import typer
    from typer.testing import CliRunner

    from robopt.sim2real.sim_robot_cli import _fail, register

    app = typer.Typer()
    app.callback()(lambda: None)
    register(app, _fail)
    result = CliRunner().invoke(app, ["sim-robot", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("robopt: error:")]
    assert len(lines) == 1 and message in lines[0], result.output
    assert "Traceback" not in result.output
