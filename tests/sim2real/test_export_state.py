"""A policy with memory (policy.recurrent) exported with its state and carried by the deploy runtime.

Nothing is trained: a GRU Gaussian policy with random weights on Pendulum-v1 (D = 3, A = 1, torque in [-2, 2],
episodes cut at 20 steps so that sequences cross resets) is saved as a run directory and exported.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from runtime_fakes import serving, untrained_run

from robopt.build import build_env
from robopt.config import ConfigError
from robopt.experiment import load_config
from robopt.policies.recurrent import PolicyActor
from robopt.sim2real.sidecar import DeployError

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).parents[2]
HIDDEN = 16


@pytest.fixture(scope="module")
def recurrent_run(tmp_path_factory):
    """(run dir, config, policy, export report) of an untrained GRU policy saved as a run and exported (200 steps)."""
    from robopt.sim2real.export import export_run

    config = load_config(
        ROOT / "configs" / "ppo_pendulum.yaml",
        [
            "env.num_envs=1",
            "policy.hidden=[16]",
            f"policy.recurrent={{type: gru, hidden: {HIDDEN}}}",
            "env.kwargs={max_episode_steps: 20}",
        ],
    )
    run_dir = tmp_path_factory.mktemp("run")
    policy = untrained_run(config, run_dir, "memory")  # a memory that matters: the action depends on the past
    return run_dir, config, policy, export_run(run_dir)


def test_export_carries_the_state_and_checks_a_200_step_sequence(recurrent_run):
    _, _, _, report = recurrent_run
    sidecar = report.sidecar
    assert (sidecar.state_dim, sidecar.format_version, sidecar.action_chunk) == (HIDDEN, 3, 1)
    assert report.parity_observations == 200 and set(report.formats) == {"onnx", "pt2"}
    assert max(report.max_difference.values()) <= 1e-5
    with np.load(report.out_dir / "parity.npz") as parity:
        starts, state = parity["episode_start"], parity["state"]
    assert starts.shape == (200,) and np.flatnonzero(starts).tolist() == list(range(0, 200, 20))  # 20-step episodes
    assert (state[starts] == 0).all() and (np.abs(state[~starts]).sum(-1) > 0).all()


def test_exported_files_step_like_torch(recurrent_run, tmp_path):
    """ONNX Runtime, torch.export's pt2 and (an export from before pt2) TorchScript stepped 200 times with their own
    state equal the torch policy within 1e-5."""
    import warnings

    from robopt.sim2real.export import load_torch_export, model_call
    from robopt.sim2real.export_state import STATE_INPUT, step_sequence

    _, _, policy, report = recurrent_run
    with np.load(report.out_dir / "parity.npz") as parity:
        obs, starts, expected, states = parity["obs"], parity["episode_start"], parity["action"], parity["state"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation: the file an export before pt2 wrote
        traced = torch.jit.trace(policy.export_module().eval(), (torch.zeros(4, 3), torch.zeros(4, HIDDEN)))
    traced.save(str(tmp_path / "policy.pt"))
    for fmt, path in (
        ("onnx", report.out_dir / "policy.onnx"),
        ("pt2", report.out_dir / "policy.pt2"),
        ("torchscript", tmp_path / "policy.pt"),
    ):
        actions, _ = step_sequence(model_call(fmt, path, ("obs", STATE_INPUT)), obs, starts, HIDDEN)
        assert np.abs(actions - expected).max() <= 1e-5, fmt
    _, loaded = load_torch_export(report.out_dir)  # policy.pt2: (obs, state) -> (action, next_state)
    state = torch.from_numpy(states[:7])
    with torch.no_grad():
        action, next_state = loaded(torch.from_numpy(obs[:7]), state)
        reference_action, reference_state = policy.export_module()(torch.from_numpy(obs[:7]), state)
    torch.testing.assert_close(action, reference_action, rtol=0, atol=1e-5)  # batch 7: the batch axis is dynamic
    torch.testing.assert_close(next_state, reference_state, rtol=0, atol=1e-5)


def test_runtime_on_a_sim_robot_matches_the_torch_policy_with_its_state(recurrent_run):
    from robopt.sim2real.model import RecurrentPolicy, load_export
    from robopt.sim2real.runtime import ControlLoop
    from robopt.sim2real.simrobot import SimRobot

    run_dir, config, policy, report = recurrent_run
    sidecar, model = load_export(report.out_dir)
    robot = SimRobot(str(run_dir), sidecar.control_period, seed=5, realtime=False)
    loop = ControlLoop(model, robot, sidecar, clock=robot.clock, realtime=False)
    assert isinstance(loop.safety.policy, RecurrentPolicy) and not loop.safety.policy.state.any()  # zero at start
    loop.run(ticks=50)
    sent = loop.log.records()["action"].reshape(50, 1)
    assert robot.episodes_started == 2 and loop.all_counters()["safe_action"] == 0
    loop.close()
    env = build_env(replace(config, device="cpu"), num_envs=1)
    actor, obs = PolicyActor(policy, 1), env.reset(seed=5)
    try:
        for tick in range(50):
            with torch.no_grad():
                expected = actor.act(obs, deterministic=True)[0].clamp(-2.0, 2.0)
            assert np.abs(sent[tick] - expected[0].numpy()).max() <= 1e-5, tick  # the state was reset at 20 and 40
            obs, _, terminated, truncated, _ = env.step(torch.as_tensor(sent[tick : tick + 1], dtype=torch.float32))
            actor.episode_ended(terminated | truncated)
    finally:
        env.close()


def test_runtime_over_udp_zeroes_the_state_at_each_episode_the_robot_flags(recurrent_run):
    """A sim robot served over UDP (robopt sim-robot, in a thread) flags each episode's end in its OBS packet; the
    runtime zeroes the memory once per flagged episode (20-step episodes at 100 Hz: about 5 a second)."""
    from robopt.sim2real.deploy_config import DeployConfig
    from robopt.sim2real.model import load_export
    from robopt.sim2real.network import UdpRobot
    from robopt.sim2real.runtime import ControlLoop
    from robopt.sim2real.server import SimRobotServer

    run_dir, _, _, report = recurrent_run
    sidecar, model = load_export(report.out_dir)
    server = SimRobotServer(str(run_dir), period=0.01, seed=3, log=lambda line: None)
    with serving(server) as (_, _, results):
        robot = UdpRobot("127.0.0.1", server.address[1], sidecar.robot_obs_dim, sidecar.action_dim)
        loop = ControlLoop(model, robot, sidecar, DeployConfig(period=0.01, estop_after=0))  # closes the robot
        try:
            loop.run(duration=1.5)
            resets, flagged = loop.counters["episode_resets"], robot.episodes_started
        finally:
            loop.close()
    ended = len(results[0].episode_returns)
    assert resets == flagged >= 3 and flagged <= ended, (resets, flagged, ended)  # the robot ended and reported


def test_state_is_zeroed_after_a_fault_and_an_estop_and_never_carried(recurrent_run):
    from robopt.sim2real.model import RecurrentPolicy, load_export
    from robopt.sim2real.safety import NO_OBS, SafetyLayer

    _, _, _, report = recurrent_run
    sidecar, model = load_export(report.out_dir)
    memory = RecurrentPolicy(model)
    layer = SafetyLayer(memory, 3, np.array([-2.0]), np.array([2.0]), stale_timeout=1.0)
    obs = np.array([1.0, 0.0, 0.5])
    first, _ = layer.tick(obs, 0.0, 0.0)
    second, _ = layer.tick(obs, 0.0, 0.0)
    assert memory.state.any() and not np.allclose(first, second)  # the same obs, another state: another action
    _, flags = layer.tick(None, float("nan"), 0.0)  # the link lost: a fault resets the memory
    assert flags & NO_OBS and not memory.state.any()
    again, _ = layer.tick(obs, 0.0, 0.0)
    np.testing.assert_array_equal(again, first)  # as from the start: nothing carried across the fault
    layer.tick(obs, 0.0, 0.0)
    layer.estop()
    layer.reset()  # releasing the e-stop starts the policy afresh
    assert not memory.state.any()


def test_bad_inputs_are_one_line(recurrent_run, tmp_path):
    from robopt.commands.collect import collect
    from robopt.sim2real.model import OnnxPolicy
    from robopt.sim2real.sidecar import read_sidecar

    run_dir, _, _, report = recurrent_run
    sidecar = read_sidecar(report.out_dir)
    checks = [
        (DeployError, "policy with memory is version 3", lambda: replace(sidecar, format_version=2)),
        (DeployError, "state_dim must be an integer >= 0", lambda: replace(sidecar, state_dim=-1)),
        # a runtime told the model is memoryless finds the state input in the graph
        (DeployError, "carries a state the sidecar does not declare", lambda: OnnxPolicy(
            report.out_dir / "policy.onnx", replace(sidecar, state_dim=0, format_version=2))),
        (ConfigError, "robopt collect records memoryless policies", lambda: collect(
            "pendulum/recurrent", 1, run_dir=run_dir, root=tmp_path, progress=False)),
    ]  # fmt: skip
    for error_type, message, call in checks:
        with pytest.raises(error_type, match=message) as error:
            call()
        assert "\n" not in str(error.value)
