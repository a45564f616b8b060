"""benchmarks/gpu_check.sh parses, and its CPU path runs: tests/gpu, the skip line, the CPU twins' figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"


def test_gpu_check_parses():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path runs where there is no CUDA device")
def test_gpu_check_cpu_path_prints_one_line_per_figure(tmp_path):
    env = {**os.environ, "GPU_CHECK_QUICK": "1", "PYTHON": sys.executable, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=240, check=False)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(line.startswith("gpu_check: ") for line in lines), lines
    assert re.search(r"CUDA device: none", lines[0]), lines
    assert re.search(r"tests/gpu: .*skipped", lines[1]), lines
    assert "no CUDA device: skipped" in lines[2], lines
    figures = [line for line in lines if "env steps/s" in line]
    assert len(figures) == 2, lines
    assert figures[0].startswith("gpu_check: PPO mujoco (CPU threads)")
    assert figures[1].startswith("gpu_check: SAC mujoco (CPU threads)")
    assert all(float(re.search(r": ([\d,]+) env steps/s", line)[1].replace(",", "")) > 0 for line in figures)
    assert re.fullmatch(r"gpu_check: done in \d+ s", lines[-1]), lines
