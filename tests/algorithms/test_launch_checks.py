"""``robopt train --nproc K`` checks the config before it starts any rank: a config error is one line, once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["configs/ppo_halfcheetah_fast.yaml", "algo.epochs=0"], "epochs and minibatch_size must be >= 1"),
        (["configs/ppo_halfcheetah_fast.yaml", "algo.clipp=0.1"], "unknown config key 'algo.clipp'"),
        (["configs/bc_gaussian_hopper.yaml"], "algo.name=bc runs as pretrain in one process"),
    ],
)
def test_a_config_error_with_nproc_is_one_line_before_any_rank(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "robopt", "train", *args, "--nproc", "2", "--no-progress"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "WORLD_SIZE": ""},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "rank" not in result.stderr and "checkpoint" not in result.stderr
