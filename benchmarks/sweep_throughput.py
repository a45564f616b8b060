"""Sweep throughput: N trials through ``robopt sweep`` (Ray tasks of 1 CPU each) against the same N runs one after
another (``robopt train`` in a loop), wall clock of each, on this machine (issue 23).

Both run the same config and overrides with seeds 0..N-1 and one torch thread per run; the sweep's figure includes
starting Ray and every run's process start, as the loop's includes every process start. Run nothing else
meanwhile.

    .venv/bin/python benchmarks/sweep_throughput.py --trials 4 --config configs/ppo_pendulum.yaml total_steps=40000
    .venv/bin/python benchmarks/sweep_throughput.py --smoke    # CI: one trial of 128 steps each way
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--config", default="configs/ppo_pendulum.yaml")
    parser.add_argument("overrides", nargs="*", default=["total_steps=40000"])
    tiny = ["total_steps=128", "rollout.num_steps=32", "log.eval_episodes=1"]
    args = parse_smoke_args(parser, smoke={"trials": 1, "overrides": tiny})
    robopt = [sys.executable, "-m", "robopt"]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ROBOPT_RAY_TMPDIR": str(Path(tmp) / "ray"), "OMP_NUM_THREADS": "1"}
        start = time.perf_counter()
        for seed in range(args.trials):
            subprocess.run(
                [
                    *robopt,
                    "train",
                    args.config,
                    *args.overrides,
                    f"seed={seed}",
                    "torch_threads=1",
                    f"log.run_root={tmp}/serial",
                    "--no-progress",
                ],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
            )
        serial = time.perf_counter() - start
        print(f"one after another: {args.trials} runs in {serial:.1f} s", flush=True)
        start = time.perf_counter()
        subprocess.run(
            [
                *robopt,
                "sweep",
                args.config,
                *args.overrides,
                "--seeds",
                f"0-{args.trials - 1}",
                "--cpus-per-trial",
                "1",
                "--root",
                f"{tmp}/sweeps",
            ],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        swept = time.perf_counter() - start
        print(f"robopt sweep:      {args.trials} trials in {swept:.1f} s ({os.cpu_count()} CPUs, 1 per trial)")
        print(f"speed-up: {serial / swept:.2f}x")


if __name__ == "__main__":
    main()
