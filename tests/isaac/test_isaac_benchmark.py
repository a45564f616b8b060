"""benchmarks/isaac_throughput.py --smoke end to end in the Isaac venv (``make test-isaac``): both figures and
their ratio at 8 envs. The main venv's tests/benchmarks/test_smoke.py runs it only as far as Isaac Lab's refusal.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("isaaclab")
pytest.importorskip("isaaclab_tasks")

ROOT = Path(__file__).parents[2]


def test_isaac_throughput_smoke():
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "isaac_throughput.py"), "--smoke"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^ +N +isaaclab +start s +native +isaac/native$", done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"^ +8 +[\d,]+ +[\d.]+ +[\d,]+ +[\d.]+$", done.stdout, re.MULTILINE), done.stdout
