"""Hindsight replay on the goal tasks: success over env steps with and without HER (and with prioritized replay).

    .venv/bin/python benchmarks/her.py --task reach --seeds 0 1 2                 # HER vs no HER, 6k steps each
    .venv/bin/python benchmarks/her.py --task push --seeds 0 1 2 --steps 60000    # no HER, HER, HER + PER
    .venv/bin/python benchmarks/her.py --task push --variants her her_per --threshold 0.5
    .venv/bin/python benchmarks/her.py --task push_fast --seeds 0 1 2 3 4 --steps 100000 --threshold 0.5 0.9
    .venv/bin/python benchmarks/her.py --smoke    # CI: reach, 300 steps per variant, tiny networks, 2 episodes

Each run trains the task's config (configs/sac_her_reach.yaml, sac_her_push.yaml, sac_her_per_push.yaml;
``push_fast``: sac_her_push_fast.yaml, its PER variant by overrides) with ``seed`` and ``total_steps``
overridden; "no HER" is the HER config with ``algo.loop.her_strategy=none``. Printed
per variant, mean +- std over seeds: the success rate of the training episodes (stochastic policy) at quarters of
the budget, the final deterministic success rate (``log.eval_episodes`` fresh episodes), and the env steps at
which the training success rate first reaches each ``--threshold`` (the mean over two consecutive logged
iterations; runs that never reach it count as the budget and are marked), each with the 95% percentile-bootstrap
interval of the mean over seeds (``robopt.sweeps.report.interval``). Curves (mean and min-max over seeds) go to
``--out`` (with ``--smoke`` and no ``--out``: a temporary file). ``--set`` adds overrides to every run. The
figures are learning results, not timings: other processes may run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.experiment import load_config
from robopt.logging import read_progress
from robopt.plotting import plot_runs
from robopt.runner import train
from robopt.sweeps.report import interval

VARIANTS = {  # name -> (config, overrides)
    "reach": {"no_her": ("configs/sac_her_reach.yaml", ["algo.loop.her_strategy=none"]),
              "her": ("configs/sac_her_reach.yaml", [])},
    "push": {"no_her": ("configs/sac_her_push.yaml", ["algo.loop.her_strategy=none"]),
             "her": ("configs/sac_her_push.yaml", []),
             "her_per": ("configs/sac_her_per_push.yaml", [])},
    "push_fast": {"no_her": ("configs/sac_her_push_fast.yaml", ["algo.loop.her_strategy=none"]),
                  "her": ("configs/sac_her_push_fast.yaml", []),
                  "her_per": ("configs/sac_her_push_fast.yaml", ["algo.loop.sampler=prioritized",
                              "algo.loop.priority_alpha=0.6", "algo.loop.priority_beta=0.4"])},
}  # fmt: skip
DEFAULT_STEPS = {"reach": 6000, "push": 60000, "push_fast": 100000}


def steps_to_threshold(steps: list[float], success: list[float], threshold: float) -> float | None:
    """First env step whose success, averaged with the previous logged iteration's, reaches ``threshold``."""
    for i in range(1, len(success)):
        if (success[i] + success[i - 1]) / 2 >= threshold:
            return steps[i]
    return None


def run(config: str, overrides: list[str], seed: int, steps: int, root: str, name: str) -> dict:
    cfg = load_config(
        config,
        [
            *overrides,
            f"seed={seed}",
            f"total_steps={steps}",
            f"log.run_root={root}",
            "log.progress=false",
            f"name={name}",
        ],
    )
    return read_run(train(cfg).run_dir)


def read_run(run_dir: Path) -> dict:
    evaluation = json.loads((run_dir / "eval.json").read_text())
    curve = read_progress(run_dir, "success_rate")
    return {"run_dir": run_dir, "curve": curve, "eval_success": evaluation["success_rate"]}


def mean_std(values: list[float], digits: int = 2) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{digits}f} +- {std:.{digits}f}"


def mean_interval(values: list[float], digits: int = 2) -> str:
    """Mean over seeds with the 95% bootstrap interval of the mean."""
    low, high = interval(np.asarray(values, dtype=float), statistic=np.mean)
    return f"{statistics.fmean(values):.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def report(task: str, results: dict[str, list[dict]], steps: int, thresholds: list[float]) -> None:
    quarters = [steps * q // 4 for q in (1, 2, 3, 4)]
    print(f"\n{task}: {steps} env steps, seeds {len(next(iter(results.values())))}; mean [95% bootstrap interval]")
    head = "".join(f"{f'train @{q / 1000:g}k':>15s}" for q in quarters)
    tail = "".join(f"{f'steps to {threshold:g}':>32s}" for threshold in thresholds)
    print(f"{'variant':9s}{head}{'final eval':>22s}{tail}")
    for name, runs in results.items():
        cells = []
        for q in quarters:
            values = []
            for r in runs:
                at = [s for s, _ in zip(*r["curve"]) if s <= q]
                values.append(r["curve"][1][len(at) - 1] if at else 0.0)
            cells.append(f"{mean_std(values):>15s}")
        columns = []
        for threshold in thresholds:
            reached = [steps_to_threshold(*r["curve"], threshold) for r in runs]
            missed = sum(v is None for v in reached)
            to_threshold = mean_interval([v if v is not None else float(steps) for v in reached], digits=0)
            columns.append(f" {to_threshold + (f' ({missed} never)' if missed else ''):>31s}")
        evals = mean_interval([r["eval_success"] for r in runs])
        print(f"{name:9s}{''.join(cells)}{evals:>22s}{''.join(columns)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(VARIANTS), default="reach")
    parser.add_argument("--variants", nargs="+", default=None, help="subset of the task's variants")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--steps", type=int, default=None, help="env steps per run (default: reach 6k, push 60k, push_fast 100k)"
    )
    parser.add_argument("--threshold", type=float, nargs="+", default=[0.5], help="training success rates to time")
    parser.add_argument("--out", type=Path, default=None, help="curves PNG (default: her_<task>.png)")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="keep the runs in ROOT/<task>_<variant>/ (default: a temporary directory)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="train nothing: report the finished runs under --root"
    )
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more overrides of every run")
    tiny = [
        "algo.loop.learning_starts=200",
        "algo.loop.batch_size=32",
        "algo.loop.iteration_steps=100",
        "policy.hidden=[32,32]",
        "algo.critic_hidden=[32,32]",
        "log.eval_episodes=2",
    ]
    args = parse_smoke_args(parser, smoke={"task": "reach", "seeds": [0], "steps": 300, "set": tiny})
    if args.report_only and args.root is None:
        parser.error("--report-only reads the runs of --root: give --root")
    variants = args.variants or list(VARIANTS[args.task])
    unknown = sorted(set(variants) - set(VARIANTS[args.task]))
    if unknown:
        parser.error(f"unknown variants {unknown} for {args.task}; allowed: {', '.join(VARIANTS[args.task])}")
    steps = args.steps or DEFAULT_STEPS[args.task]
    results: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as temporary:
        root = args.root or Path(temporary)
        for name in variants if args.report_only else ():
            done = sorted(p.parent for p in (root / f"{args.task}_{name}").glob("*/eval.json"))
            results[name] = [read_run(run_dir) for run_dir in done]
        if args.report_only and not all(results.values()):
            parser.error(f"--report-only: no finished run under {root} for {[n for n in variants if not results[n]]}")
        for seed in () if args.report_only else args.seeds:  # seed-major: a partial run still compares the variants
            for name in variants:
                config, overrides = VARIANTS[args.task][name]
                record = run(config, [*overrides, *args.set], seed, steps, str(root), f"{args.task}_{name}")
                results[name].append(record)
                curve = results[name][-1]["curve"]
                print(
                    f"{args.task} {name} seed {seed}: final training success {curve[1][-1]:.2f}, "
                    f"eval {results[name][-1]['eval_success']:.2f}",
                    flush=True,
                )
        out = args.out or (Path(temporary) if args.smoke else Path()) / f"her_{args.task}.png"
        runs = [r["run_dir"] for name in variants for r in results[name]]
        labels = [name for name in variants for _ in results[name]]
        plot_runs(runs, out, metric="success_rate", labels=labels)
    report(args.task, results, steps, args.threshold)
    print(f"curves: {out}")


if __name__ == "__main__":
    main()
