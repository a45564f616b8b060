"""``robopt evaluate-transfer``: returns over a grid of dynamics from a run and from its ONNX export.

One tiny PPO run on the native mujoco/Hopper (100-step time limit, a policy whose untrained actions are far from
zero) exported once (ONNX only) for the whole module; a second tiny run on mujoco/InvertedPendulum for the motor
gain check. Each takes about a second to train; the export a few seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from robopt.build import build_env
from robopt.cli import app
from robopt.config import ConfigError
from robopt.evaluation import evaluate_policy, load_policy
from robopt.experiment import load_config
from robopt.runner import train
from robopt.sim2real.evaluate import evaluate_transfer
from robopt.sim2real.export import export_run
from robopt.sim2real.transfer_grid import TransferResult, parse_grid_axis

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).parents[2]
TINY = ["total_steps=32", "env.num_envs=2", "rollout.num_steps=16", "algo.minibatch_size=16", "algo.epochs=1",
        "log.eval_episodes=0", "log.progress=false", "policy.hidden=[16,16]", "critic.hidden=[16]",
        "env.backend=mujoco", "policy.orthogonal_init=false"]  # fmt: skip
GRID = {"body_mass": [0.5, 1.0, 2.0], "geom_friction": [0.5, 1.0]}


def _train(root: Path, env_id: str, *extra: str) -> Path:
    config = load_config(
        ROOT / "configs" / "ppo_pendulum.yaml", [*TINY, f"env.id={env_id}", f"log.run_root={root}", *extra]
    )
    return train(config, progress=False).run_dir


@pytest.fixture(scope="module")
def hopper(tmp_path_factory) -> tuple[Path, Path]:
    """(run directory, export directory) of a tiny mujoco/Hopper policy."""
    run_dir = _train(tmp_path_factory.mktemp("runs"), "mujoco/Hopper", "env.kwargs={max_episode_steps: 100}")
    return run_dir, export_run(run_dir, formats=("onnx",)).out_dir


def test_load_policy_runs_torch_on_the_threads_training_used(hopper):
    """With torch's default on CPU, an evaluation beside another process spins against it; load_policy sets the run's
    count (1 on CPU unless torch_threads says otherwise), as build_loop does for training."""
    from dataclasses import replace

    run_dir, _ = hopper
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        config, _ = load_policy(run_dir)
        assert config.torch_threads == 0 and torch.get_num_threads() == 1
        load_policy(run_dir, replace(config, torch_threads=2))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def _reference(run_dir: Path, episodes: int, seed: int, policy=None) -> list[float]:
    """``robopt eval``'s returns: the run's own env (num_envs = episodes), its policy (or ``policy``)."""
    config, loaded = load_policy(run_dir)
    env = build_env(config, num_envs=episodes)
    try:
        return evaluate_policy(policy or loaded, env, episodes, seed).returns
    finally:
        env.close()


def test_parse_grid_axis():
    # linspace(0.5, 1.5, 5): step (1.5 - 0.5) / 4 = 0.25
    assert parse_grid_axis("body_mass=0.5:1.5:5") == ("body_mass", [0.5, 0.75, 1.0, 1.25, 1.5])
    assert parse_grid_axis("dof_damping=2:2:1") == ("dof_damping", [2.0])


def test_nominal_cell_is_robopt_eval_and_mass_changes_returns(hopper, tmp_path):
    run_dir, _ = hopper
    result = evaluate_transfer(run_dir, GRID, episodes=4, seed=3, out=tmp_path)
    reference = _reference(run_dir, 4, 3)
    assert result.returns.shape == (3, 2, 4) and result.source_kind == "run" and result.env_id == "mujoco/Hopper"
    np.testing.assert_allclose(result.returns[1, 1], reference, atol=1e-4)  # body_mass 1, geom_friction 1
    np.testing.assert_allclose(result.nominal_returns, reference, atol=1e-4)
    mean = result.mean
    assert abs(mean[0, 1] - mean[1, 1]) > 0.3 and abs(mean[2, 1] - mean[1, 1]) > 0.3, mean  # mass matters
    assert len({round(float(m), 3) for m in mean.ravel()}) >= 4, mean  # cells differ, not one repeated value
    # a grid without the nominal cell still reports it, from the same reset seed
    off = evaluate_transfer(run_dir, {"body_mass": [2.0]}, episodes=4, seed=3, out=tmp_path / "off")
    np.testing.assert_allclose(off.nominal_returns, reference, atol=1e-4)
    np.testing.assert_allclose(off.returns[0], result.returns[2, 1], atol=1e-9)  # same cell, same numbers


def test_parse_disturbance_axes():
    assert parse_grid_axis("action_delay=0:2:3") == ("action_delay", [0.0, 1.0, 2.0])
    assert parse_grid_axis("push_force=0:200:3") == ("push_force", [0.0, 100.0, 200.0])


def test_delay_and_push_cells(hopper, tmp_path):
    # The zero cells of the disturbance axes are the nominal env itself. A delay cell is the policy on the native
    # env with that fixed action_delay (the delay draw at reset makes its start states other draws than the
    # nominal cell's, the same for every policy); a 300 N push cell moves the returns.
    from robopt.envs import make_env

    run_dir, _ = hopper
    result = evaluate_transfer(run_dir, {"action_delay": [0.0, 2.0], "push_force": [0.0, 300.0]}, 4, 3, tmp_path)
    reference = _reference(run_dir, 4, 3)
    assert result.returns.shape == (2, 2, 4) and result.axes == ("action_delay", "push_force")
    np.testing.assert_allclose(result.returns[0, 0], reference, atol=1e-4)
    np.testing.assert_allclose(result.nominal_returns, reference, atol=1e-4)
    _, policy = load_policy(run_dir)
    delayed = make_env(
        "mujoco/Hopper", 4, backend="mujoco", max_episode_steps=100, randomization={"action_delay": [2, 2]}
    )
    try:
        np.testing.assert_allclose(result.returns[1, 0], evaluate_policy(policy, delayed, 4, 3).returns, atol=1e-4)
    finally:
        delayed.close()
    assert np.abs(result.returns[1, 0] - result.returns[0, 0]).max() > 0.1  # the delay matters
    assert np.abs(result.returns[0, 1] - result.returns[0, 0]).max() > 0.1  # 300 N pushes change the episodes
    assert (tmp_path / "transfer.png").stat().st_size > 0


def test_repeated_factors_keep_every_cell_in_product_order(hopper, tmp_path):
    run_dir, _ = hopper
    grid = {"body_mass": [1.0, 2.0, 1.0], "geom_friction": [0.5, 0.5]}  # factors repeated on both axes
    result = evaluate_transfer(run_dir, grid, episodes=2, seed=3, out=tmp_path)  # crashed in reshape before
    assert result.returns.shape == (3, 2, 2)
    np.testing.assert_array_equal(result.returns[0], result.returns[2])  # body_mass 1 twice: the same numbers
    np.testing.assert_array_equal(result.returns[:, 0], result.returns[:, 1])  # geom_friction 0.5 twice
    assert np.abs(result.returns[1] - result.returns[0]).max() > 0.1  # body_mass 2 is its own cell
    with pytest.raises(ConfigError, match="LOW == HIGH gives one value"):
        parse_grid_axis("body_mass=1:1:3")


def test_motor_gain_is_scaled_action(tmp_path):
    """actuator_gain 0.5 on InvertedPendulum (force = gear * gain * ctrl, reward 1 per step, no control cost)
    gives exactly the returns of the nominal model driven by half the (bounds-clamped) action."""
    run_dir = _train(tmp_path, "mujoco/InvertedPendulum")
    _, policy = load_policy(run_dir)
    low, high = policy.action_low, policy.action_high

    class Half:
        def act(self, obs, deterministic=True):
            action, info = policy.act(obs, deterministic=True)
            return 0.5 * torch.maximum(torch.minimum(action, high), low), info

    result = evaluate_transfer(run_dir, {"actuator_gain": [0.5, 1.0]}, episodes=3, seed=1, out=tmp_path / "t")
    np.testing.assert_allclose(result.returns[0], _reference(run_dir, 3, 1, Half()), atol=1e-6)
    np.testing.assert_allclose(result.returns[1], _reference(run_dir, 3, 1), atol=1e-6)
    assert not np.array_equal(result.returns[0], result.returns[1]), result.returns  # the gain matters here


def test_run_and_export_give_the_same_table(hopper, tmp_path):
    run_dir, export_dir = hopper
    from_run = evaluate_transfer(run_dir, GRID, episodes=3, seed=0, out=tmp_path / "run")
    from_export = evaluate_transfer(export_dir, GRID, episodes=3, seed=0, out=tmp_path / "export")
    assert from_export.source_kind == "export" and from_export.env_id == "mujoco/Hopper"
    np.testing.assert_allclose(from_export.returns, from_run.returns, atol=1e-4)
    np.testing.assert_allclose(from_export.nominal_returns, from_run.nominal_returns, atol=1e-4)


def test_a_recurrent_export_carries_its_state_through_the_grid(tmp_path):
    """A GRU policy's export (obs and state in, action and next state out) gives the run's table: the ONNX model's
    state is carried row by row and zeroed where an episode starts, as the torch policy's is."""
    run_dir = _train(
        tmp_path / "runs",
        "mujoco/Hopper",
        "env.kwargs={max_episode_steps: 60}",
        "policy.recurrent={type: gru, hidden: 16, sequence_length: 8}",
    )
    export_dir = export_run(run_dir, formats=("onnx",)).out_dir
    grid = {"body_mass": [0.5, 1.0]}
    from_run = evaluate_transfer(run_dir, grid, episodes=3, seed=0, out=tmp_path / "run")
    from_export = evaluate_transfer(export_dir, grid, episodes=3, seed=0, out=tmp_path / "export")
    np.testing.assert_allclose(from_export.returns, from_run.returns, atol=1e-4)
    np.testing.assert_allclose(from_export.nominal_returns, from_run.nominal_returns, atol=1e-4)


def test_gymnasium_id_maps_to_native_twin_without_randomization(hopper, tmp_path):
    """An export whose sidecar names Hopper-v5 and a body-mass randomization runs on mujoco/Hopper, fixed dynamics."""
    _, export_dir = hopper
    twin = tmp_path / "twin"
    twin.mkdir()
    for path in export_dir.iterdir():
        (twin / path.name).write_bytes(path.read_bytes())
    sidecar = json.loads((twin / "policy.json").read_text())
    sidecar["env_id"] = "Hopper-v5"
    sidecar["config"]["env"]["kwargs"]["randomization"] = {"body_mass": [0.5, 2.0], "obs_noise": 0.1}
    (twin / "policy.json").write_text(json.dumps(sidecar))
    grid = {"body_mass": [0.8, 1.0]}
    result = evaluate_transfer(twin, grid, episodes=2, seed=5, out=None)
    plain = evaluate_transfer(export_dir, grid, episodes=2, seed=5, out=tmp_path / "plain")
    assert result.env_id == "mujoco/Hopper" and (twin / "transfer" / "transfer.json").is_file()
    np.testing.assert_array_equal(result.returns, plain.returns)


def test_json_round_trip_and_plots(hopper, tmp_path):
    run_dir, _ = hopper
    for grid, name in ((GRID, "two"), ({"dof_damping": [0.5, 1.0, 4.0]}, "one")):
        result = evaluate_transfer(run_dir, grid, episodes=2, seed=0, out=tmp_path / name)
        loaded = TransferResult.load(tmp_path / name / "transfer.json")
        for field in ("axes", "values", "nominal_returns", "source", "source_kind", "env_id", "episodes", "seed"):
            assert getattr(loaded, field) == getattr(result, field), field
        np.testing.assert_array_equal(loaded.returns, result.returns)
        data = json.loads((tmp_path / name / "transfer.json").read_text())
        np.testing.assert_allclose(data["mean"], result.returns.mean(-1))
        assert data["nominal"]["mean"] == pytest.approx(np.mean(result.nominal_returns))
        assert [axis["name"] for axis in data["axes"]] == list(grid)
        assert (tmp_path / name / "transfer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError, match="not a robopt-transfer result"):
        TransferResult.from_dict({"format": "other"})


def test_cli_prints_the_table(hopper, tmp_path):
    _, export_dir = hopper
    out = tmp_path / "cli"
    args = [str(export_dir), "--grid", "body_mass=0.5:1.5:3", "--grid", "geom_friction=1:2:2", "--episodes", "2"]
    result = CliRunner().invoke(app, ["evaluate-transfer", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "transfer.json").read_text())
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["body_mass", "\\", "geom_friction", "1", "2"]
    for row, values in zip(lines[2:5], [0.5, 1.0, 1.5]):
        index = data["axes"][0]["values"].index(values)
        cells = [f"{m:.2f} +- {s:.2f}" for m, s in zip(data["mean"][index], data["std"][index])]
        assert row.split() == [f"{values:g}", *" ".join(cells).split()]
    assert data["episodes"] == 2 and np.asarray(data["returns"]).shape == (3, 2, 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grid", "body_mass"], "need NAME=LOW:HIGH:COUNT"),
        (["--grid", "body_mass=0.5:x:3"], "LOW and HIGH must be numbers and COUNT an integer"),
        (["--grid", "body_mass=0.5:1.5:0"], "COUNT must be at least 1"),
        (["--grid", "body_mass=0:1.5:3"], "need 0 < LOW <= HIGH"),
        (["--grid", "body_mass=2:1:3"], "need 0 < LOW <= HIGH"),
        (["--grid", "body_mass=1:1:3"], "LOW == HIGH gives one value; use COUNT 1 or LOW < HIGH"),
        (["--grid", "gravity=0.5:1:2"], "allowed: body_mass, geom_friction, dof_damping, actuator_gain, action_delay"),
        (["--grid", "action_delay=0:1:3"], "need whole control ticks 0..1000"),
        (["--grid", "action_delay=-1:1:3"], "need 0 <= LOW <= HIGH"),
        (["--grid", "push_force=-5:10:3"], "need 0 <= LOW <= HIGH"),
        (["--grid", "body_mass=1:1:1", "--grid", "dof_damping=1:1:1", "--grid", "actuator_gain=1:1:1"], "one or two"),
        (["--grid", "body_mass=1:1:1", "--grid", "body_mass=1:2:2"], "given twice"),
        (["--grid", "body_mass=1:1:1", "--episodes", "0"], "--episodes must be at least 1"),
        ([], "give one or two --grid"),
    ],
)
def test_cli_bad_grid_is_one_line(hopper, args, message):
    _, export_dir = hopper
    result = CliRunner().invoke(app, ["evaluate-transfer", str(export_dir), *args])
    assert result.exit_code == 2, (args, result.output)
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.output


def test_cli_bad_source_is_one_line(export_dir, tmp_path):
    """A directory that is neither a run nor an export; an export for Pendulum-v1 (no native twin)."""
    cases = [(tmp_path, "neither a run directory (config.yaml) nor an export directory (policy.json)"),
             (export_dir, "'Pendulum-v1' has none")]  # fmt: skip
    for source, message in cases:
        result = CliRunner().invoke(app, ["evaluate-transfer", str(source), "--grid", "body_mass=1:1:1"])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.output


def test_cli_import_stays_light():
    code = "import sys, robopt.sim2real.evaluate; assert 'torch' not in sys.modules and 'mujoco' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
