"""The robot path from the command line: a config trains, exports with the robot's sidecar block, and deploys on
the simulated robot built from the same config; every bad input of the issue is one line with exit code 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from robopt.cli import app
from robopt.experiment import load_config
from robopt.runner import train

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "configs" / "ppo_quadruped_velocity.yaml"
TINY = ["total_steps=64", "env.num_envs=8", "rollout.num_steps=8", "algo.minibatch_size=32", "algo.epochs=1",
        "log.eval_episodes=0", "log.progress=false", "policy.hidden=[16]", "critic.hidden=[16]"]  # fmt: skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    pytest.importorskip("onnxruntime")
    from robopt.sim2real.export import export_run

    root = tmp_path_factory.mktemp("runs")
    run_dir = train(load_config(CONFIG, [*TINY, f"log.run_root={root}"]), progress=False).run_dir
    report = export_run(run_dir)
    assert max(report.max_difference.values()) <= 1e-5
    return run_dir, report.out_dir


def test_export_sidecar_describes_the_robot(exported) -> None:
    _, out_dir = exported
    sidecar = json.loads((out_dir / "policy.json").read_text())
    robot = sidecar["robot"]
    assert sidecar["format_version"] == 2 and sidecar["env_id"] == "robot"
    assert robot["joint_names"][:3] == ["FR_hip_joint", "FR_thigh_joint", "FR_calf_joint"] and len(robot["kp"]) == 12
    assert sidecar["action_names"] == robot["joint_names"]
    assert robot["action_offset"][:3] == pytest.approx([0.0, 0.9, -1.8]) and robot["action_scale"] == [0.25] * 12
    assert robot["control_period"] == pytest.approx(0.02) and robot["decimation"] == 4
    assert robot["command"]["ranges"]["lin_vel_y"] == [-0.5, 0.5]
    terms = robot["observation"]["terms"]
    assert [t["name"] for t in terms][:3] == ["base_lin_vel", "base_ang_vel", "projected_gravity"]
    assert sum(t["size"] for t in terms) == sidecar["obs_dim"] == len(sidecar["obs_names"]) == 48
    assert sidecar["obs_names"][9:12] == [
        "velocity_command/lin_vel_x",
        "velocity_command/lin_vel_y",
        "velocity_command/ang_vel_z",
    ]
    assert terms[3]["scale"] == [2.0, 2.0, 0.25]
    assert robot["joint_range"][2] == pytest.approx([-2.818, -0.888])


def test_deploy_on_the_simulated_robot_from_its_config(exported, tmp_path) -> None:
    from robopt.sim2real.model import load_export
    from robopt.sim2real.robots import parse_robot
    from robopt.sim2real.runtime import ControlLoop, DeployConfig

    _, out_dir = exported
    sidecar, policy = load_export(out_dir)
    robot = parse_robot(f"sim:{CONFIG}?seed=0", sidecar, realtime=False)
    assert robot.env.task.robot.joint_names == tuple(sidecar.robot["joint_names"])
    pairs, read, send = [], robot.read, robot.send  # (observation read, action sent) at every tick

    def recording_read():
        obs, stamp = read()
        pairs.append([None if obs is None else obs.copy(), None])
        return obs, stamp

    def recording_send(action):
        pairs[-1][1] = np.array(action, dtype=np.float64)
        send(action)

    robot.read, robot.send = recording_read, recording_send
    loop = ControlLoop(policy, robot, sidecar, DeployConfig(), clock=robot.clock, realtime=False)
    summary = loop.run(ticks=50)
    loop.close()
    assert summary["ticks"] == 50 and summary["counters"]["safe_action"] == 0
    sent = [(obs, action) for obs, action in pairs if action is not None]
    assert len(sent) == 50
    # every command the robot received is the exported policy's action on the observation it read (float32 ONNX)
    obs = np.stack([obs for obs, _ in sent]).reshape(50, -1).astype(np.float32)
    expected = np.clip(np.stack([policy(row) for row in obs]), sidecar.action_low, sidecar.action_high)
    np.testing.assert_allclose(np.stack([action for _, action in sent]), expected, atol=1e-5)


def _train_fails(*overrides: str) -> str:
    result = CliRunner().invoke(app, ["train", str(CONFIG), *TINY, *overrides])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    return result.output


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["robot.joints={knee: {kp: 1}}"],
            "'knee' matches no hinge or slide joint; hinge or slide joints: FR_hip_joint",
        ),
        (["robot.mjcf=no/such/robot.xml"], "robot.mjcf='no/such/robot.xml': file not found"),
        (["robot.default_pose={.*_calf_joint: 0.0}"], "FR_calf_joint=0.0 is outside its range [-2.818, -0.888]"),
        (["robot.sim.decimation=0"], "robot.sim.decimation: expected an integer >= 1, got 0"),
        (["robot.action_scale=nan"], "robot.action_scale: expected a number, got nan"),
        (["task.rewards.track_lin_vel_xy.std=0"], "rewards.track_lin_vel_xy.std: expected a finite number > 0, got 0"),
        (["task.terminations.fall.angle=-1"], "terminations.fall.angle: expected an angle in (0, pi] (rad), got -1"),
        (["robot.feet=[toe]"], "robot.feet: 'toe' matches no geom or body"),
        (["task.rewards.fly={weight: 1}"], "rewards.fly: unknown reward term 'fly'; allowed: action_rate"),
        (["task.rewards.alive={weight: lots}"], "rewards.alive.weight: expected a finite number, got 'lots'"),
        (["task.rewards.mine={hook: no_pkg.terms:f}"], "rewards.mine.hook='no_pkg.terms:f': cannot import"),
        (["env.id=HalfCheetah-v5"], "the robot and task sections build env.id: robot"),
        (["task.terrain.types={lava: 1.0}"], "task.terrain.types: 'lava' is not a terrain type; allowed: flat, rough"),
        (["task.observations.height_scan={points: [0, 11]}"], "height_scan.points: expected two integers >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_two(overrides, message) -> None:
    assert message in _train_fails(*overrides)


def test_a_mesh_that_is_missing_and_an_mjcf_that_does_not_compile(tmp_path) -> None:
    mesh = tmp_path / "meshy.xml"
    mesh.write_text(
        '<mujoco><asset><mesh name="m" file="leg.stl"/></asset><worldbody><body name="b">'
        '<freejoint/><geom type="mesh" mesh="m"/></body></worldbody></mujoco>'
    )
    assert "MuJoCo cannot compile it: Error opening file" in _train_fails(f"robot.mjcf={mesh}")
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body name='b'><geom type='sphere'/></body></worldbody>")
    assert "MuJoCo cannot read it" in _train_fails(f"robot.mjcf={broken}")


def test_transfer_grid_of_a_robot_policy(exported, tmp_path) -> None:
    from robopt.sim2real.evaluate import evaluate_transfer

    run_dir, out_dir = exported
    for source in (run_dir, out_dir):  # the torch policy of the run, and the exported ONNX policy
        result = evaluate_transfer(source, {"actuator_gain": [0.8, 1.2]}, episodes=2, out=tmp_path / source.name)
        assert result.returns.shape == (2, 2) and result.env_id == "robot"


@pytest.mark.slow  # two processes over DDS or Zenoh: make test, not test-fast
@pytest.mark.parametrize("kind", ["ros2", "zenoh"])
def test_the_quadruped_over_topics_from_its_sidecar(exported, tmp_path, request, kind) -> None:
    """sim-robot serves the run's robot (/joint_states by name, /imu, /odom, joint targets in); the deploy runtime
    builds its observation from the sidecar and a /cmd_vel that the robot also scores."""
    pytest.importorskip("cyclonedds" if kind == "ros2" else "zenoh", reason=f"the {kind} extra carries the topics")
    import socket
    import subprocess
    import sys
    import threading
    import zlib

    import yaml

    from robopt.sim2real import cdr
    from robopt.sim2real.deploy import deploy
    from robopt.sim2real.transport import Qos

    run_dir, out_dir = exported
    twist = {"/cmd_vel": ("geometry_msgs/msg/Twist", Qos("reliable", 10))}
    if kind == "ros2":
        from robopt.sim2real.ros2 import DdsLink

        domain = 1 + zlib.crc32(request.node.nodeid.encode()) % 200
        served = ["--ros2", "--domain-id", str(domain), "--interface", "lo", "--dds-peer", "127.0.0.1"]
        spec, transport = "ros2://", {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]}
        open_link = lambda: DdsLink({}, twist, domain, interface="lo", peers=["127.0.0.1"])  # noqa: E731
    else:
        from robopt.sim2real.zenoh_link import ZenohLink

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            endpoint = f"tcp/127.0.0.1:{probe.getsockname()[1]}"
        served, spec, transport = (
            ["--zenoh", "--listen", endpoint, "--no-multicast"],
            f"zenoh://{endpoint}",
            {"multicast": False},
        )
        open_link = lambda: ZenohLink({}, twist, {"connect": [endpoint], "multicast": False})  # noqa: E731
    server = subprocess.Popen(
        [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", str(run_dir), *served, "--cmd-vel",
         "/cmd_vel", "--duration", "30"],  # the robot's default command topic: the deploy config's (ros2_control's)
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    stop = threading.Event()

    def teleop() -> None:  # 2 m/s forward: beyond the trained 1 m/s, so the runtime clamps it
        link = open_link()
        payload = cdr.encode("geometry_msgs/msg/Twist", {"linear": {"x": 2.0}})
        while not stop.is_set():
            link.publish("/cmd_vel", payload)
            stop.wait(0.05)
        link.close()

    publisher = threading.Thread(target=teleop, daemon=True)
    try:
        ready = server.stdout.readline()
        published = "/joint_states, /imu, /odom, /robopt/observation, /robopt/episode out"
        assert published in ready, ready + server.stdout.read()
        assert "(joint position targets, rad) in, scoring /cmd_vel" in ready
        config = yaml.safe_load((ROOT / "configs" / "deploy" / "quadruped_ros2.yaml").read_text())
        config["robot"].pop("ros2")
        config["robot"][kind] = transport
        config["estop_after"] = 0
        path = tmp_path / "deploy.yaml"
        path.write_text(yaml.safe_dump(config))
        publisher.start()
        summary = deploy(out_dir, spec, duration=3.0, config_path=path, echo=lambda _: None)
        stop.set()
        server.send_signal(2)
        output, _ = server.communicate(timeout=30)
    finally:
        stop.set()
        server.kill()
    counters = summary["counters"]
    assert summary["ticks"] >= 60, summary  # 50 Hz for 3 s on an idle machine; a loaded one ticks late
    assert counters["robot.unknown_joint"] == 0 and counters["robot.malformed"] == 0, counters
    assert counters["robot.command_clamped"] >= 1, counters  # 2 m/s clamped into [-1, 1]
    # discovery at the start; ticks late on a loaded machine see measurements past the 100 ms stale timeout
    assert counters["stale"] <= summary["ticks"] // 4 and counters["robot.waiting"] <= 25, counters
    steps = re.search(r"steps (\d+)", output)
    assert steps and int(steps.group(1)) >= 100, output
    assert re.search(r"tracking /cmd_vel over \d+ steps: velocity error steady", output), output
