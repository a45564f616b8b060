"""Behaviour cloning of a multimodal expert: flow vs Gaussian policy on ``robopt/MultiGoal``, over seeds.

    .venv/bin/python benchmarks/multimodal_bc.py                      # 5 seeds, 2000 expert episodes
    .venv/bin/python benchmarks/multimodal_bc.py --seeds 0 1 --episodes 500
    .venv/bin/python benchmarks/multimodal_bc.py --smoke    # CI: 20 expert episodes, 1 epoch, 4 evaluation episodes

The scripted expert heads for a goal drawn uniformly per episode, so its actions at the start form K modes
with walls between them. The script records the expert once (``robopt collect`` semantics, seed 0), clones it
with ``configs/bc_multimodal.yaml`` as a flow and as a Gaussian policy for each seed, and evaluates both the
deterministic and the stochastic policy with ``benchmarks/multimodal.py``'s figures (return, success, modes
covered, goal-histogram entropy).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from multimodal import MODES, evaluate, mean_std  # noqa: E402
from smoke import parse_smoke_args  # noqa: E402

from robopt.commands.collect import collect  # noqa: E402
from robopt.config import ConfigError  # noqa: E402
from robopt.experiment import load_config  # noqa: E402
from robopt.runner import train  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--episodes", type=int, default=2000, help="expert episodes recorded")
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--override", nargs="*", default=[], help="key=value for both BC runs")
    smoke = {"seeds": [0], "episodes": 20, "eval_episodes": 4, "override": ["algo.epochs=1"]}
    args = parse_smoke_args(parser, smoke=smoke)
    print(
        f"multimodal_bc {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"{' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    records: dict[str, list[dict]] = {"flow": [], "gaussian": []}
    with tempfile.TemporaryDirectory() as root:
        data = collect("multigoal/expert", args.episodes, expert="robopt/MultiGoal", root=root, progress=False)
        print(data.summary(), flush=True)
        for seed in args.seeds:
            for kind in records:
                overrides = [*args.override, f"policy.name={kind}", f"seed={seed}", f"algo.dataset_root={root}",
                             f"log.run_root={root}/runs", "log.progress=false", "log.eval_episodes=0"]  # fmt: skip
                try:
                    result = train(load_config("configs/bc_multimodal.yaml", overrides))
                except ConfigError as error:
                    print(f"multimodal_bc: error: {error}", file=sys.stderr)
                    return 2
                figures = evaluate(result.run_dir, args.eval_episodes, 10_000 + seed)
                records[kind].append(figures)
                print(
                    f"  seed {seed} {kind:8}: "
                    + " | ".join(
                        f"{mode[:5]} return {figures[mode]['return']:6.2f} success {figures[mode]['success']:.2f} "
                        f"modes {figures[mode]['modes']} goals {figures[mode]['histogram']}"
                        for mode in MODES
                    ),
                    flush=True,
                )
    print(f"\n{'policy':9} {'mode':6} {'return':>16} {'success':>14} {'modes of K':>14}")
    for kind, rows in records.items():
        for mode in MODES:
            ret = mean_std([r[mode]["return"] for r in rows])
            success = mean_std([r[mode]["success"] for r in rows])
            modes = mean_std([float(r[mode]["modes"]) for r in rows])
            print(
                f"{kind:9} {mode[:6]:6} {ret[0]:7.2f} +- {ret[1]:5.2f} {success[0]:5.2f} +- {success[1]:4.2f} "
                f"{modes[0]:5.1f} +- {modes[1]:3.1f} / {rows[0]['num_goals']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
