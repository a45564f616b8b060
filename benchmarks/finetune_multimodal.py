"""Multimodal point mass: BC from a multimodal expert, then RL fine-tuning, for Gaussian, flow and diffusion.

    .venv/bin/python benchmarks/finetune_multimodal.py --seeds 0 1 2 3 4 --budget 100000
    .venv/bin/python benchmarks/finetune_multimodal.py --seeds 0 --budget 4096 --episodes 20 --bc-epochs 2
    .venv/bin/python benchmarks/finetune_multimodal.py --smoke    # CI: every kind, 1 epoch of BC, 64 steps of RL

The scripted expert of ``robopt/MultiGoal`` heads for a goal drawn uniformly per episode (all K modes); it is
recorded once (``--dataset-episodes``), then per seed and kind (``finetune_common``) cloned with
``configs/bc_multimodal.yaml`` (``policy.name`` set per kind) and fine-tuned with ``configs/ppo_multimodal.yaml``,
``configs/fpo_multimodal.yaml`` and ``configs/dppo_multimodal.yaml`` (``init_from`` the BC run, ``--budget`` env
steps); ``--kinds ogpo`` fine-tunes the diffusion clone with ``configs/ogpo_multimodal.yaml``, ``--kinds fql qgf
expo`` the flow clone with ``configs/{fql,qgf,expo}_multimodal.yaml`` (off-policy, the run's own replay).
Figures per evaluation, as ``benchmarks/multimodal.py`` defines them: return, success, goals reached by at
least 2% of the episodes (``modes``), and the reached-goal entropy over log K; mean +- sample std over seeds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import print_table, run_kind  # noqa: E402
from multimodal import goal_figures  # noqa: E402
from smoke import parse_smoke_args  # noqa: E402

from robopt.commands.collect import collect  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FINETUNE = {"gaussian": "ppo_multimodal.yaml", "flow": "fpo_multimodal.yaml", "diffusion": "dppo_multimodal.yaml",
            "ogpo": "ogpo_multimodal.yaml", "fql": "fql_multimodal.yaml", "qgf": "qgf_multimodal.yaml",
            "expo": "expo_multimodal.yaml"}  # fmt: skip
# the kind's BC policy when it is not the kind's name (OGPO: DPPO's diffusion start; FQL, QGF, EXPO: FPO's flow)
POLICY = {"ogpo": "diffusion", "fql": "flow", "qgf": "flow", "expo": "flow"}
ON_POLICY_SMOKE = ["env.num_envs=8", "rollout.num_steps=8"]  # --smoke: one 64-step iteration per fine-tuning run
OFF_POLICY_SMOKE = ["algo.loop.iteration_steps=128", "algo.loop.batch_size=64"]


def figures(returns: list[float], reached: list[int], env) -> dict:
    return goal_figures(returns, reached, env.num_goals)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--kinds", nargs="+", default=list(FINETUNE), choices=list(FINETUNE))
    parser.add_argument("--budget", type=int, default=100_000, help="fine-tuning env steps per run")
    parser.add_argument("--episodes", type=int, default=200, help="evaluation episodes per mode")
    parser.add_argument("--dataset-episodes", type=int, default=2000)
    parser.add_argument("--bc-epochs", type=int, default=0, help="override algo.epochs of BC (0: keep)")
    parser.add_argument("--out", type=Path, default=None, help="write the records as JSON")
    smoke = {"seeds": [0], "budget": 64, "episodes": 4, "dataset_episodes": 20, "bc_epochs": 1}
    args = parse_smoke_args(parser, smoke=smoke)
    print(
        f"finetune_multimodal {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__}"
        f" | {' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    records = []
    with tempfile.TemporaryDirectory() as root:
        data = collect("multigoal/expert", args.dataset_episodes, expert="robopt/MultiGoal", root=root, progress=False)
        print(data.summary(), flush=True)
        common = [f"log.run_root={root}/runs", "log.progress=false", "log.eval_episodes=0"]
        bc_extra = [f"algo.dataset_root={root}"] + ([f"algo.epochs={args.bc_epochs}"] if args.bc_epochs else [])
        for seed in args.seeds:
            for kind in args.kinds:
                configs = (CONFIGS / "bc_multimodal.yaml", CONFIGS / FINETUNE[kind])
                bc_policy = f"policy.name={POLICY.get(kind, kind)}"
                tiny = ON_POLICY_SMOKE if kind in ("gaussian", "flow", "diffusion") else OFF_POLICY_SMOKE
                ft_extra = tiny if args.smoke else []
                record = run_kind(
                    kind, configs, seed, common, [*bc_extra, bc_policy], ft_extra, args.budget, args.episodes, figures
                )
                records.append(record)
                print(
                    f"  seed {seed} {kind:9}: "
                    + " | ".join(
                        f"{stage} {mode[:3]} return {record[stage][mode]['return']:6.2f} success "
                        f"{record[stage][mode]['success']:.2f} modes {record[stage][mode]['modes']}"
                        for stage in ("bc", "ft")
                        for mode in ("deterministic", "stochastic")
                    ),
                    flush=True,
                )
    print_table(records, ["return", "success", "modes", "entropy"])
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
