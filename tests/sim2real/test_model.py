"""The robot-side start-up checks of an export: policy.json field types, parity.npz, the ONNX graph's dims."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from runtime_fakes import sidecar_for

from robopt.sim2real.model import OnnxPolicy, load_export
from robopt.sim2real.sidecar import DeployError, Sidecar, write_sidecar


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
    from robopt.sim2real.model import verify_parity

    _, policy = load_export(export_dir)
    np.save(tmp_path / "array.npy", np.zeros((4, 3)))
    (tmp_path / "text.npz").write_text("not an archive")
    np.savez(tmp_path / "strings.npz", obs=np.array([["a", "b", "c"]]), action=np.array([["x"]]))
    for name, match in [("array.npy", "not an npz archive"), ("text.npz", "npz"), ("strings.npz", "not numbers")]:
        with pytest.raises(DeployError, match=match) as error:
            verify_parity(policy, tmp_path / name)
        assert "\n" not in str(error.value)


def test_model_helpers_live_in_model_and_the_runtime_uses_them():
    from robopt.sim2real import model, runtime

    for name in ("OnnxPolicy", "ChunkedPolicy", "median_call_seconds"):  # what the control loop runs
        assert getattr(runtime, name) is getattr(model, name)
    for name in ("verify_parity", "load_export"):  # imported from where they are defined (no re-export shim)
        assert getattr(model, name).__module__ == "robopt.sim2real.model" and not hasattr(runtime, name)
    code = "import sys, robopt.sim2real.model; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
