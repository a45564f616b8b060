"""Build the deploy-only wheel ``robopt-deploy`` (no torch) from this repository.

    python scripts/build_deploy_wheel.py [--out dist]

Stages ``deploy/pyproject.toml`` and the torch-free modules below into a temporary directory and builds a wheel
there with pip. On the robot computer::

    pip install 'robopt_deploy-0.1.0-py3-none-any.whl[ros2]'   # or [zenoh] on aarch64 (no Cyclone DDS wheel)
    robopt deploy EXPORT_DIR --robot ros2:// --config deploy.yaml

The module list is what ``robopt deploy`` imports; ``tests/sim2real/test_deploy_wheel.py`` installs the wheel in a
fresh venv without torch and deploys an exported policy to ``robopt sim-robot --ros2`` with it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = [
    "robopt/__init__.py",
    "robopt/options.py",
    "robopt/config.py",
    "robopt/rates.py",
    "robopt/sim2real/__init__.py",
    "robopt/sim2real/cdr.py",
    "robopt/sim2real/deploy.py",
    "robopt/sim2real/deploy_cli.py",
    "robopt/sim2real/deploy_config.py",
    "robopt/sim2real/joint_measure.py",
    "robopt/sim2real/model.py",
    "robopt/sim2real/network.py",
    "robopt/sim2real/pacing.py",
    "robopt/sim2real/protocol.py",
    "robopt/sim2real/robots.py",
    "robopt/sim2real/ros_command.py",
    "robopt/sim2real/ros2.py",
    "robopt/sim2real/ros_fields.py",
    "robopt/sim2real/ros_map.py",
    "robopt/sim2real/ros_messages.py",
    "robopt/sim2real/runtime.py",
    "robopt/sim2real/safety.py",
    "robopt/sim2real/scheduling.py",
    "robopt/sim2real/sidecar.py",
    "robopt/sim2real/sidecar_map.py",
    "robopt/sim2real/stamps.py",
    "robopt/sim2real/tick_log.py",
    "robopt/sim2real/topic_robot.py",
    "robopt/sim2real/transport.py",
    "robopt/sim2real/window.py",
    "robopt/sim2real/zenoh_link.py",
]


def build(out: Path) -> Path:
    """The wheel's path in ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="robopt-deploy-") as stage:
        stage_dir = Path(stage)
        shutil.copy(ROOT / "deploy" / "pyproject.toml", stage_dir / "pyproject.toml")
        for module in MODULES:
            target = stage_dir / module
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / module, target)
        before = set(out.glob("robopt_deploy-*.whl"))
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out),
                   str(stage_dir)]  # fmt: skip
        subprocess.run(command, check=True)
    wheels = sorted(set(out.glob("robopt_deploy-*.whl")) - before) or sorted(out.glob("robopt_deploy-*.whl"))
    if not wheels:
        raise SystemExit(f"no robopt_deploy wheel appeared in {out}")
    return wheels[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="directory for the wheel (default: dist/)")
    args = parser.parse_args()
    print(build(args.out))


if __name__ == "__main__":
    main()
