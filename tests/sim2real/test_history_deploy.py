"""Observation history on the deploy side: the sidecar's ``history`` block, ``HistoryWindow``, and an exported
history policy driving a simulated Pendulum through ``ControlLoop`` exactly as the torch policy acts on the env's
windows (episode restarts included).

Nothing is trained: a Gaussian policy with random weights on Pendulum-v1 (D = 3, A = 1, torque in [-2, 2]) with
``policy.history=3`` is saved as a run directory and exported.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from runtime_fakes import pendulum_sidecar, untrained_run

from robopt.build import build_env
from robopt.envs.history import LAYOUT
from robopt.experiment import load_config
from robopt.sim2real.sidecar import HISTORY_LAYOUT, DeployError, read_sidecar, write_sidecar
from robopt.sim2real.window import HistoryWindow

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).parents[2]
K, D, A = 3, 3, 1
HISTORY = {"frames": K, "obs_dim": D, "action_dim": A, "layout": HISTORY_LAYOUT}


def test_history_window_holds_the_env_layout():
    seen = []
    window = HistoryWindow(lambda w: seen.append(w) or np.zeros(1), 2, 2, 1, [0.5], [2.0])  # K=2, D=2, A=1
    window(np.array([1.0, 2.0]))  # a fresh window: the obs twice, each with the zero action clipped to 0.5
    window.sent(np.array([1.5]))
    window(np.array([3.0, 4.0]))  # shifted in: [obs, the action sent before it]
    window.reset()
    window(np.array([5.0, 6.0]))  # after a reset: fresh again
    assert [w.tolist() for w in seen] == [[1, 2, 0.5, 1, 2, 0.5], [1, 2, 0.5, 3, 4, 1.5], [5, 6, 0.5, 5, 6, 0.5]]
    assert seen[2].dtype == np.float32 and LAYOUT == HISTORY_LAYOUT  # one layout for the env and the runtime


def test_sidecar_history_block_is_checked_and_optional_in_the_file(tmp_path):
    window = K * (D + A)  # 12
    sidecar = replace(
        pendulum_sidecar(), obs_dim=window, obs_low=[-1.0, -1, -8, -2] * K, obs_high=[1.0, 1, 8, 2] * K, history=HISTORY
    )
    assert sidecar.robot_obs_dim == D and sidecar.robot_obs_bounds == ([-1, -1, -8], [1, 1, 8])
    write_sidecar(tmp_path, sidecar)
    assert read_sidecar(tmp_path) == sidecar
    write_sidecar(tmp_path, pendulum_sidecar())
    assert "history" not in json.loads((tmp_path / "policy.json").read_text())  # older runtimes read it as before
    assert read_sidecar(tmp_path).history is None and read_sidecar(tmp_path).robot_obs_dim == 3
    bad = {
        "needs obs_dim 12": dict(obs_dim=11, history=HISTORY),
        "is not the one": dict(obs_dim=window, history={**HISTORY, "layout": "newest first"}),
        "history.frames must be": dict(obs_dim=window, history={**HISTORY, "frames": 0}),
        "with keys": dict(obs_dim=window, history={"frames": K}),
        "needs action_chunk 1": dict(obs_dim=window, history=HISTORY, action_chunk=2),
    }
    for message, fields in bad.items():
        with pytest.raises(DeployError, match=message) as error:
            replace(pendulum_sidecar(), **fields)
        assert "\n" not in str(error.value)


@pytest.fixture(scope="module")
def history_run(tmp_path_factory):
    """(config, policy, export report) of an untrained history-3 Gaussian policy saved as a run and exported."""
    from robopt.sim2real.export import export_run

    config = load_config(
        ROOT / "configs" / "ppo_pendulum.yaml",
        ["env.num_envs=1", f"policy.history={K}", "policy.hidden=[16]", "env.kwargs={max_episode_steps: 20}"],
    )
    run_dir = tmp_path_factory.mktemp("run")
    policy = untrained_run(config, run_dir, "mean_net")
    return run_dir, config, policy, export_run(run_dir, formats=("onnx",), parity_steps=8)


def test_export_writes_the_window_and_its_history_block(history_run):
    _, _, _, report = history_run
    sidecar = report.sidecar
    assert sidecar.history == HISTORY and (sidecar.obs_dim, sidecar.action_dim, sidecar.action_chunk) == (12, 1, 1)
    assert sidecar.obs_low == [-1, -1, -8, -2] * K and sidecar.obs_high == [1, 1, 8, 2] * K  # frames [obs, torque]
    assert sidecar.obs_names is None and sidecar.control_period == 0.05


def test_runtime_on_a_sim_robot_matches_the_torch_policy_on_the_env_windows(history_run):
    from robopt.sim2real.model import load_export
    from robopt.sim2real.runtime import ControlLoop
    from robopt.sim2real.simrobot import SimRobot

    run_dir, config, policy, report = history_run
    sidecar, model = load_export(report.out_dir)
    robot = SimRobot(str(run_dir), sidecar.control_period, seed=5, realtime=False)  # raw obs [3], 20-step episodes
    assert robot.obs_dim == D
    loop = ControlLoop(model, robot, sidecar, clock=robot.clock, realtime=False)
    loop.run(ticks=50)
    sent = loop.log.records()["action"].reshape(50, A)
    assert robot.episodes_started == 2 and loop.all_counters()["safe_action"] == 0
    loop.close()
    env = build_env(replace(config, device="cpu"), num_envs=1)  # the training env: HistoryEnv, 12-value windows
    window, ends = env.reset(seed=5), 0
    try:
        for tick in range(50):
            with torch.no_grad():
                expected = policy.act(window, deterministic=True)[0].clamp(-2.0, 2.0)
            # ONNX Runtime against torch on the same window: equal up to float rounding (export TOLERANCE 1e-5)
            assert np.abs(sent[tick] - expected[0].numpy()).max() <= 1e-5, tick
            window, _, terminated, truncated, _ = env.step(torch.as_tensor(sent[tick : tick + 1], dtype=torch.float32))
            ends += int(terminated[0] or truncated[0])
    finally:
        env.close()
    assert ends == 2  # ticks 20 and 40 started new episodes, where the runtime's window restarted too


def test_evaluate_transfer_refuses_a_window_or_a_selection_in_one_line():
    from robopt.config import ConfigError
    from robopt.sim2real.evaluate import _check_raw_observation

    _check_raw_observation({"policy": {"history": 1}, "env": {"observe": []}})  # the full observation: accepted
    for config, what in (({"policy": {"history": 2}}, "policy.history=2"), ({"env": {"observe": [0]}}, "observe")):
        with pytest.raises(ConfigError, match=what) as error:
            _check_raw_observation(config)
        assert "\n" not in str(error.value)
