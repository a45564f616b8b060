"""``robopt export``: model files, sidecar, parity observations, runtime agreement with torch, CLI errors.

Two tiny runs (a few seconds of training on 2 cores): PPO with a Gaussian policy on Pendulum-v1 and FPO with a
flow policy on robopt/MultiGoal, each exported once in both formats (ONNX, torch.export's pt2) for the whole module.
An export from before pt2 (a TorchScript policy.pt, written here with torch.jit.trace) must still load.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.cli import app
from robopt.config import ConfigError
from robopt.experiment import load_config
from robopt.runner import train
from robopt.sim2real import export
from robopt.sim2real.sidecar import DeployError, Sidecar, check_files, file_sha256, read_sidecar, write_sidecar

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).parents[2]
TINY = ["total_steps=32", "env.num_envs=2", "rollout.num_steps=16", "algo.minibatch_size=16", "algo.epochs=1",
        "log.eval_episodes=0", "log.progress=false", "policy.hidden=[16,16]", "critic.hidden=[16]"]  # fmt: skip
CONFIGS = {"gaussian": "ppo_pendulum.yaml", "flow": "fpo_multimodal.yaml"}


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, tuple[Path, export.ExportReport]]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for kind, name in CONFIGS.items():
        run_dir = train(load_config(ROOT / "configs" / name, [*TINY, f"log.run_root={root}"]), progress=False).run_dir
        out[kind] = run_dir, export.export_run(run_dir)
    return out


def _cli(*args: str):
    return CliRunner().invoke(app, ["export", *args])


def _weights_sha256(run_dir: Path) -> str:
    """Independent of export.weights_sha256: float32 parameters from the checkpoint file, keys sorted."""
    digest = hashlib.sha256()
    for _, tensor in sorted(load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["policy"].items()):
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_files_and_sidecar_round_trip(exports, kind):
    run_dir, report = exports[kind]
    out = run_dir / "export"
    assert report.out_dir == out and report.formats == ("onnx", "pt2") and report.parity_observations == 200
    assert sorted(p.name for p in out.iterdir()) == ["parity.npz", "policy.json", "policy.onnx", "policy.pt2"]
    sidecar = read_sidecar(out)
    assert sidecar == report.sidecar
    assert sidecar.files == {"onnx": "policy.onnx", "pt2": "policy.pt2"} and sidecar.action_chunk == 1
    names = ("policy.onnx", "policy.pt2", "parity.npz")
    assert sidecar.files_sha256 == {name: file_sha256(out / name) for name in names}
    assert check_files(out, sidecar, "onnx") == out / "policy.onnx"
    assert check_files(out, sidecar, "pt2") == out / "policy.pt2"
    assert sidecar.weights_sha256 == _weights_sha256(run_dir) and sidecar.robopt_version == "0.1.0"
    assert sidecar.config == yaml.safe_load((run_dir / "config.yaml").read_text())  # the run's resolved config
    assert sidecar.policy_kind == kind
    if kind == "gaussian":  # Gymnasium Pendulum-v1: dt 0.05, torque in [-2, 2], obs (cos, sin, theta dot <= 8)
        assert (sidecar.env_id, sidecar.obs_dim, sidecar.action_dim) == ("Pendulum-v1", 3, 1)
        assert sidecar.control_period == 0.05
        assert (sidecar.action_low, sidecar.action_high) == ([-2.0], [2.0])
        assert (sidecar.obs_low, sidecar.obs_high) == ([-1.0, -1.0, -8.0], [1.0, 1.0, 8.0])
    else:  # robopt/MultiGoal: dt 0.1, velocity in [-1, 1]^2, obs (x, y, t / max_steps) without declared bounds
        assert (sidecar.env_id, sidecar.obs_dim, sidecar.action_dim) == ("robopt/MultiGoal", 3, 2)
        assert sidecar.control_period == pytest.approx(0.1) and sidecar.obs_low is None
        assert (sidecar.action_low, sidecar.action_high) == ([-1.0, -1.0], [1.0, 1.0])


def test_parity_observations_are_the_pendulum_trajectory_under_the_exported_actions(exports):
    run_dir, _ = exports["gaussian"]
    parity = np.load(run_dir / "export" / "parity.npz")
    obs, action = parity["obs"], parity["action"]
    assert obs.dtype == action.dtype == np.float32 and obs.shape == (200, 3) and action.shape == (200, 1)
    # One whole episode (Pendulum truncates at 200): theta_dot' = clip(theta_dot + (3 g / 2 l sin th + 3 u / m l^2)
    # dt, +-8), th' = th + theta_dot' dt with g = 10, m = l = 1, dt = 0.05 and u the exported action.
    theta, theta_dot = np.arctan2(obs[:-1, 1], obs[:-1, 0]), obs[:-1, 2]
    next_dot = np.clip(theta_dot + (15.0 * np.sin(theta) + 3.0 * action[:-1, 0]) * 0.05, -8.0, 8.0)
    next_theta = theta + next_dot * 0.05
    np.testing.assert_allclose(obs[1:, 2], next_dot, atol=1e-4)
    np.testing.assert_allclose(obs[1:, :2], np.stack([np.cos(next_theta), np.sin(next_theta)], 1), atol=1e-4)
    assert np.abs(action).max() <= 2.0 and np.ptp(obs[:, 2]) > 0.0


def test_parity_observations_follow_the_multigoal_steps(exports):
    run_dir, _ = exports["flow"]
    parity = np.load(run_dir / "export" / "parity.npz")
    obs, action = parity["obs"], parity["action"]
    assert obs.shape == (200, 3) and action.shape == (200, 2) and np.abs(action).max() <= 1.0
    # t / max_steps grows by 1/50 a step and drops to 0 at a reset; p' = clip(p + 0.1 a, +-1.5), or p if blocked.
    step = np.diff(obs[:, 2])
    fresh = obs[1:, 2] == 0.0
    np.testing.assert_allclose(step[~fresh], 0.02, atol=1e-6)
    moved = np.clip(obs[:-1, :2] + 0.1 * action[:-1], -1.5, 1.5)
    ok = np.isclose(obs[1:, :2], moved, atol=1e-5).all(1) | (obs[1:, :2] == obs[:-1, :2]).all(1)
    assert (ok | fresh).all() and np.isclose(obs[1:, :2], moved, atol=1e-5).all(1).sum() > 100


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_onnx_runtime_and_pt2_match_torch_on_fresh_observations(exports, kind):
    from robopt.evaluation import load_policy

    run_dir, report = exports[kind]
    assert set(report.max_difference) == {"onnx", "pt2"}
    assert all(0.0 <= value <= 1e-5 for value in report.max_difference.values())
    _, policy = load_policy(run_dir)
    module = policy.export_module().eval()
    parity = np.load(run_dir / "export" / "parity.npz")
    with torch.no_grad():
        np.testing.assert_allclose(module(torch.from_numpy(parity["obs"])).numpy(), parity["action"], atol=1e-6)
    session = export.onnx_session(run_dir / "export" / "policy.onnx")
    assert isinstance(torch.export.load(run_dir / "export" / "policy.pt2"), torch.export.ExportedProgram)
    sidecar, loaded = export.load_torch_export(run_dir / "export")  # policy.pt2, its sha256 checked
    assert sidecar.files["pt2"] == "policy.pt2"
    for batch in (1, 7, 64):  # the batch axis is dynamic: the program was exported at batch 4
        obs = torch.randn(batch, 3) * 3
        with torch.no_grad():
            expected = module(obs)
            torch.testing.assert_close(loaded(obs), expected, rtol=0, atol=1e-5)
        (action,) = session.run(None, {"obs": obs.numpy()})
        torch.testing.assert_close(torch.from_numpy(action), expected, rtol=0, atol=1e-5)


def test_cli_formats_refusal_and_force(exports, tmp_path):
    run_dir, _ = exports["gaussian"]
    out = tmp_path / "exported"
    first = _cli(str(run_dir), "--out", str(out), "--format", "onnx")
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith(f"onnx: {out / 'policy.onnx'} (max |onnx - torch| ")
    assert first.stdout.count("\n") == 1 and "on 200 observations)" in first.stdout
    assert sorted(p.name for p in out.iterdir()) == ["parity.npz", "policy.json", "policy.onnx"]
    refused = _cli(str(run_dir), "--out", str(out), "--format", "pt2")
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and "is not empty; pass --force" in refused.stderr
    (out / "notes.txt").write_text("mine")
    (out / "policy.pt").write_text("an earlier export's TorchScript file")
    forced = _cli(str(run_dir), "--out", str(out), "--format", "pt2", "--force")
    assert forced.exit_code == 0 and forced.stdout.startswith(f"pt2: {out / 'policy.pt2'} (max |pt2 - torch| ")
    # the previous export's files are replaced (no stale policy.onnx or policy.pt), other files are left alone
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "parity.npz", "policy.json", "policy.pt2"]
    assert read_sidecar(out).files == {"pt2": "policy.pt2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported"]  # no temporary directory left behind


def test_cli_bad_input_is_one_line(exports, tmp_path):
    run_dir, _ = exports["gaussian"]
    no_checkpoint = tmp_path / "fresh"
    no_checkpoint.mkdir()
    shutil.copy(run_dir / "config.yaml", no_checkpoint / "config.yaml")
    corrupt = tmp_path / "corrupt"
    shutil.copytree(run_dir, corrupt)
    (corrupt / LAST_CHECKPOINT).write_bytes(b"not a checkpoint")
    cases = [
        ([str(tmp_path / "missing")], "does not exist"),
        ([str(no_checkpoint)], "has no checkpoint yet"),
        ([str(corrupt), "--out", str(tmp_path / "x")], "is corrupt (not a readable torch file)"),
        ([str(run_dir)], "is not empty; pass --force"),
        ([str(run_dir), "--format", "pdf"], "--format must be onnx, pt2 or both, got 'pdf'"),
        (
            [str(run_dir), "--format", "torchscript"],
            "export format torchscript (policy.pt, torch.jit.trace) is no "
            "longer written: use pt2 (policy.pt2, a torch.export ExportedProgram)",
        ),
    ]
    for args, message in cases:
        result = _cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("robopt: error: ") and result.stderr.count("\n") == 1, result.stderr
        assert message in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


def test_failed_check_leaves_no_export(exports, tmp_path, monkeypatch):
    run_dir, _ = exports["flow"]
    monkeypatch.setattr(export, "TOLERANCE", -1.0)  # every difference (even 0) now fails the check
    with pytest.raises(ConfigError, match=r"^onnx export disagrees with torch: max \|difference\| .* > -1$"):
        export.export_run(run_dir, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_module_torch_export_cannot_capture_is_one_line_and_no_fallback(exports, tmp_path, monkeypatch, capsys):
    """A Python branch on a tensor's value: torch.export refuses the module (data-dependent control flow). The export
    stops with one line naming the format and the module, writes nothing, and no other exporter takes its place."""

    class Branchy(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :1] if obs.sum() > 0 else -obs[:, :1]

    run_dir, _ = exports["gaussian"]
    config, policy, _ = export.load_exportable(run_dir)
    monkeypatch.setattr(export, "load_exportable", lambda run_dir, guidance_scale: (config, policy, Branchy()))
    monkeypatch.setattr(torch.jit, "trace", None)  # a fallback to torch.jit.trace would fail with a TypeError
    with pytest.raises(ConfigError, match=r"^pt2 export of Branchy failed: \w+: .*data-dependent") as error:
        export.export_run(run_dir, tmp_path / "out", formats=("pt2",))
    assert "\n" not in str(error.value) and list(tmp_path.iterdir()) == []
    assert "def forward" not in capsys.readouterr().err  # torch.export's partial graph is not printed


def test_policy_without_export_module_is_refused(exports, monkeypatch):
    run_dir, _ = exports["flow"]
    config = load_config(ROOT / "configs" / CONFIGS["flow"])
    monkeypatch.setattr("robopt.evaluation.load_policy", lambda run_dir: (config, torch.nn.Linear(3, 2)))
    with pytest.raises(ConfigError, match="^policy kind 'flow' cannot be exported"):
        export.export_run(run_dir, run_dir / "other", formats=("onnx",))
    with pytest.raises(ConfigError, match="^export format must be one of onnx, pt2, got pdf$"):
        export.export_run(run_dir, formats=("pdf",))
    with pytest.raises(ConfigError, match=r"^export format torchscript .* no longer written: use pt2 \(policy\.pt2"):
        export.export_run(run_dir, run_dir / "other", formats=("onnx", "torchscript"))
    assert not (run_dir / "other").exists()


def _torchscript_export(run_dir: Path, directory: Path) -> Sidecar:
    """``directory`` as an export from before pt2 wrote it: the run's export with policy.pt (the export module
    traced by torch.jit.trace, its deprecation silenced) in place of policy.pt2, the sidecar naming "torchscript"."""
    import dataclasses
    import warnings

    from robopt.evaluation import load_policy

    directory.mkdir()
    for name in ("policy.onnx", "parity.npz"):
        shutil.copy(run_dir / "export" / name, directory / name)
    module = load_policy(run_dir)[1].export_module().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(module, torch.zeros(4, 3)).save(str(directory / "policy.pt"))
    files = {"onnx": "policy.onnx", "torchscript": "policy.pt"}
    hashes = {name: file_sha256(directory / name) for name in ("policy.onnx", "policy.pt", "parity.npz")}
    sidecar = dataclasses.replace(read_sidecar(run_dir / "export"), files=files, files_sha256=hashes)
    write_sidecar(directory, sidecar)
    return sidecar


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_an_export_from_before_pt2_still_loads_and_matches(exports, kind, tmp_path):
    import warnings

    from robopt.sim2real.model import load_export

    run_dir, _ = exports[kind]
    old = tmp_path / "old"
    written = _torchscript_export(run_dir, old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sidecar, loaded = export.load_torch_export(old)
    assert sidecar == written and isinstance(loaded, torch.jit.ScriptModule)
    assert not [w for w in caught if "torch.jit" in str(w.message)]  # torch.jit.load's deprecation is silenced
    with np.load(old / "parity.npz") as parity:
        obs, expected = parity["obs"], parity["action"]
    with torch.no_grad():  # the traced module on 200 rows at once against the recorded torch actions
        np.testing.assert_allclose(loaded(torch.from_numpy(obs)).numpy(), expected, rtol=0, atol=1e-5)
    call = export.model_call("torchscript", old / "policy.pt")  # the numpy path export's parity checks use
    assert export.max_difference(lambda x: call(x)[0], obs, expected) <= 1e-5
    assert load_export(old)[0] == written  # the deploy runtime reads the sidecar and runs its ONNX model
    (old / "policy.pt").write_bytes((old / "policy.pt").read_bytes()[:-1] + b"x")
    with pytest.raises(DeployError, match="does not match the sha256 recorded in policy.json"):
        export.load_torch_export(old)


def test_sidecar_model_formats(exports, tmp_path):
    import dataclasses

    _, report = exports["gaussian"]
    for files in ({"pt2": "policy.pt2"}, {"torchscript": "policy.pt"}, {"onnx": "a.onnx", "pt2": "b.pt2"}):
        assert dataclasses.replace(report.sidecar, files=files).files == files
    for files in ({}, {"tflite": "policy.tflite"}, {"onnx": "policy.onnx", "pt": "policy.pt"}):
        with pytest.raises(DeployError, match="^policy.json: files must map some of onnx, pt2, torchscript to file"):
            dataclasses.replace(report.sidecar, files=files)
    write_sidecar(tmp_path, dataclasses.replace(report.sidecar, files={"onnx": "policy.onnx"}))
    with pytest.raises(DeployError, match=r"has no torch model \(pt2, or torchscript before pt2\); formats: onnx$"):
        export.load_torch_export(tmp_path)


def test_installed_export_directory_has_the_umask_mode_not_mkdtemp_0700(tmp_path):
    import os
    import stat
    import tempfile

    old = os.umask(0o022)
    try:
        tmp = Path(tempfile.mkdtemp(dir=tmp_path))
        (tmp / "policy.json").write_text("{}")
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o700
        export._install(tmp, tmp_path / "out")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755  # 0o777 & ~0o022, as mkdir makes it
    assert (tmp_path / "out" / "policy.json").read_text() == "{}" and not tmp.exists()
