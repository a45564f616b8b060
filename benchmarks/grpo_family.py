"""Held-out addition accuracy: SFT warm start, then GRPO, Dr. GRPO, DAPO, GSPO and TRPO with the same budget.

    .venv/bin/python benchmarks/grpo_family.py --seeds 0 1 2
    .venv/bin/python benchmarks/grpo_family.py --seeds 0 --budget 1024 --sft-examples 500 --sft-epochs 2
    .venv/bin/python benchmarks/grpo_family.py --smoke    # CI: 64 examples, 1 epoch, one 128-completion iteration

Per seed: ``--sft-examples`` generated solutions of 2-digit addition (``robopt/Text``'s scripted solver, wrong at
``--error-rate``) are written as a Minari dataset and cloned by ``configs/sft_addition.yaml`` (a tiny byte-level
GPT-2 built in code); then each of ``configs/{grpo,drgrpo,dapo,gspo,trpo}_addition.yaml`` trains from that warm
start (``init_from``) for ``--budget`` completions. Every run is scored on ``--episodes`` held-out prompts (greedy
completions, exact match): mean +- sample std over seeds. Runs go one at a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import mean_std, quiet_train  # noqa: E402
from smoke import parse_smoke_args  # noqa: E402

from robopt.data.dataset_writer import write_dataset  # noqa: E402
from robopt.data.recording import record_episodes  # noqa: E402
from robopt.envs import make_env  # noqa: E402
from robopt.evaluation import evaluate_run  # noqa: E402
from robopt.llm.env import text_expert  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
METHODS = ("grpo", "drgrpo", "dapo", "gspo", "trpo")


def sft_dataset(root: Path, examples: int, error_rate: float, seed: int) -> str:
    """Generated solutions as ``text/addition-v0`` under ``root`` (the env options of the configs)."""
    env = make_env("robopt/Text", 64, task="addition", digits=2, group_size=8, seed=seed)
    episodes = record_episodes(env, text_expert(env, seed, error_rate), examples, seed=seed, progress=False)
    write_dataset(
        "text/addition-v0",
        episodes,
        "robopt/Text",
        env.obs_dim,
        env.action_dim,
        env.action_low,
        env.action_high,
        root=root,
    )
    return "text/addition-v0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--budget", type=int, default=16384, help="completions per RL run")
    parser.add_argument("--episodes", type=int, default=400, help="held-out prompts per evaluation")
    parser.add_argument("--sft-examples", type=int, default=4000)
    parser.add_argument("--sft-epochs", type=int, default=20)
    parser.add_argument("--error-rate", type=float, default=0.2, help="share of wrong generated solutions")
    parser.add_argument("--out", type=Path, default=None)
    smoke = {"seeds": [0], "budget": 128, "episodes": 16, "sft_examples": 64, "sft_epochs": 1}
    args = parse_smoke_args(parser, smoke=smoke)
    print(
        f"grpo_family {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"{' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    records = []
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        for seed in args.seeds:
            data = root / f"data{seed}"
            dataset = sft_dataset(data, args.sft_examples, args.error_rate, seed)
            common = [f"log.run_root={root}/runs", "log.progress=false", "log.eval_episodes=0", f"seed={seed}"]
            sft_dir, seconds = quiet_train(
                CONFIGS / "sft_addition.yaml",
                [
                    *common,
                    f"algo.dataset={dataset}",
                    f"algo.dataset_root={data}",
                    f"algo.epochs={args.sft_epochs}",
                ],
            )
            record = {"seed": seed, "sft": evaluate_run(sft_dir, args.episodes).success_rate, "seconds": {}}
            record["seconds"]["sft"] = seconds
            print(f"  seed {seed} sft     : held-out accuracy {record['sft']:.3f} ({seconds:.0f} s)", flush=True)
            for method in args.methods:
                start = time.perf_counter()
                run_dir, _ = quiet_train(
                    CONFIGS / f"{method}_addition.yaml", [*common, f"total_steps={args.budget}", f"init_from={sft_dir}"]
                )
                record[method] = evaluate_run(run_dir, args.episodes).success_rate
                record["seconds"][method] = time.perf_counter() - start
                print(
                    f"  seed {seed} {method:8}: held-out accuracy {record[method]:.3f} "
                    f"({record['seconds'][method]:.0f} s)",
                    flush=True,
                )
            records.append(record)
    print(f"\n{'method':8} {'held-out accuracy':>20} {'wall s':>16}")
    for method in ("sft", *args.methods):
        accuracy = mean_std([record[method] for record in records])
        seconds = mean_std([record["seconds"][method] for record in records])
        print(f"{method:8} {accuracy:>20} {seconds:>16}")
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
