"""``robopt export`` of a policy acting in chunks of H actions: [B, H, A] models, a per-step sidecar, chunk playback.

One tiny DPPO run (one iteration, diffusion policy with horizon H = 2) on Pendulum-v1 (A = 1), exported once in
both formats for the whole module; the deploy side (``robopt.sim2real.model``, ``ControlLoop`` on a simulated
Pendulum) must then play each chunk one action per control tick, in order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robopt.experiment import load_config
from robopt.runner import train
from robopt.sim2real import export
from robopt.sim2real.chunks import ChunkedExport, step_env
from robopt.sim2real.sidecar import read_sidecar

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).parents[2]
H = 2
TINY = ["total_steps=16", "env.num_envs=2", "rollout.num_steps=8", "algo.minibatch_size=16", "algo.epochs=1",
        "log.eval_episodes=0", "log.progress=false", "policy.hidden=[16,16]", "critic.hidden=[16]",
        f"policy.horizon={H}", "policy.denoising_steps=4", "policy.ft_steps=4", "policy.ddim_steps=2"]  # fmt: skip


def tiny_dppo_run(root: Path, *overrides: str) -> Path:
    """A one-iteration DPPO run of a horizon-2 diffusion policy (Pendulum-v1 unless overridden)."""
    config = load_config(ROOT / "configs" / "dppo_pendulum.yaml", [*TINY, f"log.run_root={root}", *overrides])
    return train(config, progress=False).run_dir


@pytest.fixture(scope="module")
def chunked(tmp_path_factory) -> tuple[Path, export.ExportReport]:
    run_dir = tiny_dppo_run(tmp_path_factory.mktemp("runs"))
    return run_dir, export.export_run(run_dir, parity_steps=50)


def _torch_policy(run_dir: Path):
    from robopt.evaluation import load_policy

    return load_policy(run_dir)[1]


def _torch_chunk(policy, obs: np.ndarray) -> np.ndarray:
    """The torch policy's deterministic chunks for obs [K, D], clipped to the bounds, as [K, H, A]."""
    with torch.no_grad():
        action = policy.act(torch.as_tensor(obs, dtype=torch.float32), deterministic=True)[0]
    action = torch.maximum(torch.minimum(action, policy.action_high), policy.action_low)
    return action.reshape(len(obs), H, -1).numpy()


def test_chunked_export_is_row_major():
    # flat chunk [B=2, H*A=6] = 0..5 and 6..11 -> [2, 3, 2]: step h of row b is values (6b + 2h, 6b + 2h + 1)
    module = ChunkedExport(torch.nn.Identity(), horizon=3, action_dim=2)
    out = module(torch.arange(12.0).reshape(2, 6))
    assert out.shape == (2, 3, 2)
    assert out[1, 2].tolist() == [10.0, 11.0] and out[0, 1].tolist() == [2.0, 3.0]


def test_step_env_unwraps_only_action_chunk_envs():
    from robopt.envs import make_env
    from robopt.envs.chunking import ActionChunkEnv

    env = make_env("Pendulum-v1", 1)
    try:
        assert step_env(env) == (env, 1)
        assert step_env(ActionChunkEnv(env, 3)) == (env, 3)
    finally:
        env.close()


def test_max_difference_refuses_a_flat_output_against_a_chunked_reference():
    obs = np.zeros((4, 3), dtype=np.float32)
    reference = np.zeros((4, 2, 1), dtype=np.float32)
    # [K, 2] against [K, 2, 1] would broadcast to [K, K, 2] (or [1, 2, 2] row by row) and compare zeros: refuse
    assert export.max_difference(lambda x: np.zeros((len(x), 2), np.float32), obs, reference) == float("inf")
    assert export.max_difference(lambda x: np.full((len(x), 2, 1), 0.5, np.float32), obs, reference) == 0.5


def test_sidecar_describes_one_control_tick(chunked):
    run_dir, report = chunked
    sidecar = read_sidecar(run_dir / "export")
    assert sidecar == report.sidecar and sidecar.policy_kind == "diffusion"
    # Pendulum-v1: D = 3, one torque in [-2, 2] per step of dt 0.05 s (not the chunk's 2 x 0.05 s)
    assert (sidecar.env_id, sidecar.obs_dim, sidecar.action_dim, sidecar.action_chunk) == ("Pendulum-v1", 3, 1, H)
    assert (sidecar.action_low, sidecar.action_high, sidecar.control_period) == ([-2.0], [2.0], 0.05)
    assert (sidecar.obs_low, sidecar.obs_high) == ([-1.0, -1.0, -8.0], [1.0, 1.0, 8.0])
    with np.load(run_dir / "export" / "parity.npz") as parity:
        obs, action = parity["obs"], parity["action"]
    assert obs.shape == (50, 3) and action.shape == (50, H, 1)
    np.testing.assert_allclose(action, _torch_chunk(_torch_policy(run_dir), obs), atol=1e-6)
    assert np.ptp(action[:, 0, 0]) > 1e-3 and np.abs(action[:, 0] - action[:, 1]).max() > 1e-4  # not constant


def test_both_formats_agree_with_the_torch_policy(chunked):
    from robopt.sim2real.export import onnx_session

    run_dir, _ = chunked
    policy = _torch_policy(run_dir)
    obs = (np.random.default_rng(0).normal(size=(16, 3)) * [1.0, 1.0, 4.0]).astype(np.float32)
    expected = _torch_chunk(policy, obs)  # [16, H, A]
    session = onnx_session(run_dir / "export" / "policy.onnx")
    np.testing.assert_allclose(session.run(None, {"obs": obs})[0], expected, atol=1e-5)
    np.testing.assert_allclose(session.run(None, {"obs": obs[3:4]})[0], expected[3:4], atol=1e-5)  # batch of one
    _, loaded = export.load_torch_export(run_dir / "export")  # policy.pt2: a torch.export ExportedProgram
    with torch.no_grad():
        np.testing.assert_allclose(loaded(torch.from_numpy(obs)).numpy(), expected, atol=1e-5)
        np.testing.assert_allclose(loaded(torch.from_numpy(obs[3:4])).numpy(), expected[3:4], atol=1e-5)


def test_deploy_runtime_plays_each_chunk_in_order(chunked):
    from robopt.envs import make_env
    from robopt.sim2real.model import load_export
    from robopt.sim2real.robots import parse_robot
    from robopt.sim2real.runtime import ControlLoop, DeployConfig

    run_dir, _ = chunked
    sidecar, model = load_export(run_dir / "export")
    assert model(np.zeros(3, np.float32)).shape == (H, 1)
    robot = parse_robot("sim:Pendulum-v1?seed=0", sidecar, realtime=False)
    loop = ControlLoop(model, robot, sidecar, DeployConfig(), clock=robot.clock, realtime=False)
    loop.run(ticks=6)
    loop.close()
    sent = loop.log.records()["action"][:, 0].astype(np.float64)  # [6]
    # Reference: the torch policy asked at ticks 0, 2, 4 on the Pendulum (seed 0) driven by the chunks' actions
    policy, env = _torch_policy(run_dir), make_env("Pendulum-v1", 1)
    obs, expected = env.reset(seed=0), []
    for tick in range(6):
        if tick % H == 0:
            chunk = _torch_chunk(policy, obs.numpy())[0]  # [H, A]
        expected.append(chunk[tick % H])
        obs = env.step(torch.as_tensor(chunk[tick % H], dtype=torch.float32)[None])[0]
    env.close()
    np.testing.assert_allclose(sent, np.concatenate(expected), atol=1e-5)
    assert np.abs(sent[0::2] - sent[1::2]).max() > 1e-4  # the two actions of a chunk differ: order matters


def test_native_hopper_export_has_per_step_bounds_and_row_major_chunks(tmp_path):
    from robopt.sim2real.export import onnx_session

    run_dir = tiny_dppo_run(tmp_path, "env.id=mujoco/Hopper", "env.backend=mujoco")
    report = export.export_run(run_dir, formats=("onnx",), parity_steps=10)
    sidecar = report.sidecar
    # mujoco/Hopper: 11 obs, 3 torques in [-1, 1], dt = 4 substeps x 0.002 s (the chunk would be 0.016 s, 6 values)
    assert (sidecar.obs_dim, sidecar.action_dim, sidecar.action_chunk, sidecar.control_period) == (11, 3, H, 0.008)
    assert (sidecar.action_low, sidecar.action_high) == ([-1.0] * 3, [1.0] * 3)
    with np.load(run_dir / "export" / "parity.npz") as parity:
        obs, action = parity["obs"], parity["action"]
    expected = _torch_chunk(_torch_policy(run_dir), obs)  # flat [K, 6] -> [K, 2, 3]: step h = flat[:, 3h:3h + 3]
    assert action.shape == (10, H, 3)
    np.testing.assert_allclose(action, expected, atol=1e-6)
    np.testing.assert_allclose(
        onnx_session(run_dir / "export" / "policy.onnx").run(None, {"obs": obs})[0], expected, atol=1e-5
    )
