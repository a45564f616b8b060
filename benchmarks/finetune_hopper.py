"""Hopper: behaviour cloning on a medium-quality dataset, then RL fine-tuning, for Gaussian, flow and diffusion.

    .venv/bin/python benchmarks/finetune_hopper.py --seeds 0 1 2 --budget 200000
    .venv/bin/python benchmarks/finetune_hopper.py --source runs/ppo_hopper_native/<stamp> --kinds diffusion

The dataset comes from ``robopt collect``: a PPO source run (``configs/ppo_hopper_native.yaml`` trained for
``--source-steps`` unless ``--source`` names a run) recorded for ``--dataset-episodes`` episodes with Gaussian
action noise ``--action-noise`` (a medium-quality dataset). Then, per seed and kind (``finetune_common``):
BC with ``configs/bc_{gaussian,flow,diffusion}_hopper.yaml`` and fine-tuning with
``configs/{ppo,fpo,dppo}_finetune_hopper.yaml`` / ``configs/dppo_hopper.yaml`` for ``--budget`` env steps each
(the diffusion policy acts in chunks of 4: its budget counts env steps, not decisions). Returns are over
``--episodes`` fresh episodes per evaluation, deterministic and stochastic; mean +- sample std over seeds.
``--kinds ogpo`` fine-tunes the diffusion clone off-policy with ``configs/ogpo_hopper.yaml``; ``--kinds qgf expo``
fine-tune the flow clone off-policy (``configs/{qgf,expo}_hopper.yaml``, the dataset in their replay) from the
critics of offline IQL runs (``--init-critic-from``, one per seed); ``--at`` also
evaluates each fine-tuning run at those env-step counts, and ``--dataset-root`` reuses a recorded dataset:

    .venv/bin/python benchmarks/finetune_hopper.py --kinds gaussian flow diffusion ogpo --budget 100000 \
        --at 25000 50000 --bc-epochs 40 --dataset-root ~/.minari/datasets
    .venv/bin/python benchmarks/finetune_hopper.py --smoke    # CI: 2 episodes, 1 epoch, 32-wide nets, 1 iteration

The default kinds are gaussian, flow, diffusion and ogpo (qgf and expo need IQL runs). ``--smoke`` also makes every
fine-tuning run one small iteration (``SMOKE``).
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
from finetune_common import (  # noqa: E402
    MODES,
    evaluate,
    mean_std,
    print_table,
    quiet_train,
    return_figures,
    run_kind,
)
from smoke import parse_smoke_args  # noqa: E402

from robopt.commands.collect import collect  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
KINDS = {
    "gaussian": (CONFIGS / "bc_gaussian_hopper.yaml", CONFIGS / "ppo_finetune_hopper.yaml"),
    "flow": (CONFIGS / "bc_flow_hopper.yaml", CONFIGS / "fpo_finetune_hopper.yaml"),
    "diffusion": (CONFIGS / "bc_diffusion_hopper.yaml", CONFIGS / "dppo_hopper.yaml"),
    "ogpo": (CONFIGS / "bc_diffusion_hopper.yaml", CONFIGS / "ogpo_hopper.yaml"),  # the same BC start as DPPO's
    "qgf": (CONFIGS / "bc_flow_hopper.yaml", CONFIGS / "qgf_hopper.yaml"),  # the same BC start as FPO's
    "expo": (CONFIGS / "bc_flow_hopper.yaml", CONFIGS / "expo_hopper.yaml"),
}
WARM_CRITICS = {"qgf", "expo"}  # off-policy on the flow clone, critics from an offline IQL run, the dataset in replay
SMOKE = {  # --smoke: narrow networks (the clone's widths are the fine-tuning's), one small fine-tuning iteration
    "networks": ["policy.hidden=[32,32]"],
    "on_policy": ["env.num_envs=8", "rollout.num_steps=8", "critic.hidden=[32,32]"],
    "off_policy": ["algo.loop.iteration_steps=128", "algo.loop.batch_size=64"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--kinds", nargs="+", default=[k for k in KINDS if k not in WARM_CRITICS], choices=list(KINDS))
    parser.add_argument("--budget", type=int, default=200_000, help="fine-tuning env steps per run")
    parser.add_argument("--episodes", type=int, default=20, help="evaluation episodes per mode")
    parser.add_argument("--source", type=Path, default=None, help="a trained Hopper run to record the dataset from")
    parser.add_argument("--source-steps", type=int, default=250_000)
    parser.add_argument("--dataset-episodes", type=int, default=100)
    parser.add_argument("--action-noise", type=float, default=0.1)
    parser.add_argument("--bc-epochs", type=int, default=0, help="override algo.epochs of the BC configs (0: keep)")
    parser.add_argument("--root", type=Path, default=None, help="keep datasets and runs here (default: temporary)")
    parser.add_argument(
        "--dataset-root",
        type=Path,
        default=None,
        help="use hopper/medium-v0 already under this directory (no source run, no recording)",
    )
    parser.add_argument(
        "--at",
        type=int,
        nargs="*",
        default=[],
        help="also evaluate the fine-tuning run at these env-step counts (below --budget)",
    )
    parser.add_argument(
        "--init-critic-from",
        type=Path,
        nargs="*",
        default=[],
        help="qgf and expo: one offline IQL run per seed, in --seeds order, whose critics they start from "
        "(benchmarks/offline_hopper.py --algos iql --online)",
    )
    parser.add_argument(
        "--evaluate",
        type=Path,
        nargs="*",
        default=[],
        help="only evaluate these run directories as the table does (a run extended with `robopt train --resume RUN "
        "total_steps=N`), then exit",
    )
    parser.add_argument(
        "--eval-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="with --evaluate: config overrides for the evaluation only (e.g. policy.guidance_scale=1)",
    )
    parser.add_argument(
        "--eval-seed", type=int, default=10_000, help="with --evaluate: env seed base (plus the run's seed)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the records as JSON")
    smoke = {
        "seeds": [0],
        "budget": 128,
        "episodes": 1,
        "source_steps": 512,
        "dataset_episodes": 2,
        "bc_epochs": 1,
        "at": [64],
    }
    args = parse_smoke_args(parser, smoke=smoke)
    if args.evaluate:
        return evaluate_runs(args.evaluate, args.episodes, tuple(args.eval_set), args.eval_seed)
    if WARM_CRITICS & set(args.kinds) and (len(args.init_critic_from) != len(args.seeds) or args.dataset_root is None):
        parser.error("--kinds qgf/expo need --dataset-root and one --init-critic-from run per seed")
    print(
        f"finetune_hopper {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"{' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as temporary:
        root = args.root or Path(temporary)
        common = [f"log.run_root={root}/runs", "log.progress=false", "log.eval_episodes=0"]
        source = args.source
        if args.dataset_root is not None:
            common.append(f"algo.dataset_root={args.dataset_root}")
        elif source is None:
            source, seconds = quiet_train(
                CONFIGS / "ppo_hopper_native.yaml", [*common, f"total_steps={args.source_steps}"]
            )
            print(f"source: PPO {args.source_steps} steps in {seconds:.0f} s: {source}", flush=True)
        if args.dataset_root is None:
            data = collect(
                "hopper/medium",
                args.dataset_episodes,
                run_dir=source,
                action_noise=args.action_noise,
                root=root / "datasets",
                force=True,
                progress=False,
            )
            print(data.summary(), flush=True)
            common.append(f"algo.dataset_root={root / 'datasets'}")
        bc_extra = [f"algo.epochs={args.bc_epochs}"] if args.bc_epochs > 0 else []
        records = []
        for index, seed in enumerate(args.seeds):
            for kind in args.kinds:
                ft_extra = []
                if kind in WARM_CRITICS:
                    ft_extra = [f"init_critic_from={args.init_critic_from[index]}", "algo.loop.offline_updates=0",
                                f"algo.loop.dataset_root={args.dataset_root}"]  # fmt: skip
                if args.smoke:
                    ft_extra += SMOKE["on_policy" if kind in ("gaussian", "flow", "diffusion") else "off_policy"]
                shared = [*common[:3], *(SMOKE["networks"] if args.smoke else [])]
                record = run_kind(
                    kind,
                    KINDS[kind],
                    seed,
                    shared,
                    [*bc_extra, common[3]],
                    ft_extra,
                    args.budget,
                    args.episodes,
                    return_figures,
                    args.at,
                )
                records.append(record)
                print(
                    f"  seed {seed} {kind:9}: BC det {record['bc']['deterministic']['return']:8.1f} "
                    f"sto {record['bc']['stochastic']['return']:8.1f} ({record['bc_seconds']:.0f} s) | "
                    f"fine-tuned det {record['ft']['deterministic']['return']:8.1f} "
                    f"sto {record['ft']['stochastic']['return']:8.1f} ({record['ft_seconds']:.0f} s)",
                    flush=True,
                )
                for steps, stage in record["stages"].items():
                    print(
                        f"    at {steps} ({stage['env_steps']} steps): det {stage['deterministic']['return']:8.1f}"
                        f" sto {stage['stochastic']['return']:8.1f}",
                        flush=True,
                    )
                if args.out:
                    args.out.write_text(json.dumps(records, indent=1))
    print_table(records, ["return"])
    for kind in args.kinds:
        rows = [record for record in records if record["kind"] == kind]
        for steps in rows[0]["stages"] if rows else []:
            cells = [mean_std([row["stages"][steps][mode]["return"] for row in rows]) for mode in MODES]
            print(f"{kind:10} at {steps:>7} deterministic {cells[0]:>20} stochastic {cells[1]:>20}")
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    return 0


def evaluate_runs(run_dirs: list[Path], episodes: int, overrides: tuple[str, ...] = (), seed_base: int = 10_000) -> int:
    """The table's evaluation (``episodes`` fresh episodes per mode, env seed ``seed_base`` + the run's seed) of each
    run, its config changed by ``overrides`` first."""
    from robopt.checkpoint import LAST_CHECKPOINT
    from robopt.config import ConfigError
    from robopt.experiment import load_config

    for run_dir in run_dirs:
        if not (run_dir / LAST_CHECKPOINT).is_file() or not (run_dir / "progress.csv").is_file():
            print(f"--evaluate: {str(run_dir)!r} is not a run directory with a checkpoint and progress.csv")
            return 2
        try:
            config = load_config(str(run_dir / "config.yaml"), list(overrides))
            figures = evaluate(run_dir, episodes, seed_base + config.seed, return_figures, config)
        except (ConfigError, ValueError) as error:  # a bad --eval-set key or value
            print(f"--eval-set {' '.join(overrides)}: {error}")
            return 2
        rows = (run_dir / "progress.csv").read_text().split()  # the last logged row: env steps of the checkpoint
        knobs = f", {' '.join(overrides)}" if overrides else ""
        print(
            f"{run_dir} (seed {config.seed}, {rows[-1].split(',')[0]} env steps{knobs}): "
            + " ".join(f"{mode} {figures[mode]['return']:.1f}" for mode in MODES),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
