"""The deploy-only distribution: the robopt-deploy wheel installs into a fresh venv without torch and deploys an
exported policy to ``robopt sim-robot --ros2`` running in another process."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_deploy_only_wheel_runs_a_policy_without_torch(export_dir, tmp_path, pendulum_returns):
    pytest.importorskip("cyclonedds", reason="Cyclone DDS (the ros2 extra) serves the simulated robot")
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv (installed by make) builds the venv's packages from PyPI quickly")
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_deploy_wheel import build

    wheel = build(tmp_path / "dist")
    env_dir = tmp_path / "deploy-venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = [uv, "pip", "install", "--quiet", "--python", str(python), f"{wheel}[ros2]"]
    subprocess.run(install, check=True, timeout=600)
    torch_check = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True)
    assert torch_check.returncode != 0 and "No module named 'torch'" in torch_check.stderr
    listed = subprocess.run([uv, "pip", "list", "--python", str(python)], capture_output=True, text=True, check=True)
    names = {line.split()[0].lower() for line in listed.stdout.splitlines()[2:] if line.strip()}
    assert "robopt-deploy" in names and "onnxruntime" in names and "cyclonedds" in names and "torch" not in names
    # the simulated robot is not in this package: one line that says where it lives, no traceback
    command = [str(env_dir / "bin" / "robopt"), "deploy", str(export_dir), "--robot", "sim:Pendulum-v1"]
    simulated = subprocess.run(command, capture_output=True, text=True, timeout=120)
    lines = (simulated.stdout + simulated.stderr).strip().splitlines()
    assert simulated.returncode == 2 and len(lines) == 1 and "deploy-only package" in lines[0], lines
    assert "robopt sim-robot" in lines[0] and "Traceback" not in simulated.stderr

    domain = 1 + zlib.crc32(str(tmp_path).encode()) % 200
    server = subprocess.Popen(
        [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", "Pendulum-v1", "--ros2", "--domain-id",
         str(domain), "--interface", "lo", "--dds-peer", "127.0.0.1", "--period", "0.01", "--episodes", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert "waiting for the first command" in server.stdout.readline()
        config = tmp_path / "deploy.yaml"
        config.write_text(
            "period: 0.01\nestop_after: 0\nrobot:\n"
            f"  ros2: {{domain_id: {domain}, interface: lo, peers: [127.0.0.1]}}\n"
            "  command: {topic: /robopt/command, type: std_msgs/Float64MultiArray}\n"
            "  observation:\n"
            "    - {topic: /joint_states, type: sensor_msgs/JointState, field: position, joints: [hinge], "
            "transform: [cos, sin]}\n"
            "    - {topic: /joint_states, field: velocity, joints: [hinge]}\n"
        )
        deployed = subprocess.run(
            [str(env_dir / "bin" / "robopt"), "deploy", str(export_dir), "--robot", "ros2://", "--config", str(config),
             "--duration", "3"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        output, _ = server.communicate(timeout=15)
    finally:
        server.kill()
    assert deployed.returncode == 0, deployed.stderr[-2000:]
    assert re.search(r"ticks: \d+ in 3\.\d+ s", deployed.stdout), deployed.stdout
    returns = [float(v) for v in re.findall(r"episode \d+: return (-?[\d.]+)", output)]
    from robopt.sim2real.model import load_export

    expected = pendulum_returns(load_export(export_dir)[1], 1)
    assert len(returns) == 1 and abs(returns[0] - expected[0]) <= 0.02 * abs(expected[0]), (returns, expected)
