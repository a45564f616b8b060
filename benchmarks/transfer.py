"""Does randomization transfer? PPO on Hopper trained with and without domain randomization, same budget and seeds,
both evaluated on one grid of perturbed dynamics with ``robopt evaluate-transfer``.

    .venv/bin/python benchmarks/transfer.py --steps 300000 --seeds 0 1 2
    .venv/bin/python benchmarks/transfer.py --grid body_mass=0.5:1.5:5 --grid geom_friction=0.4:1.6:5 --out transfer

Trains configs/ppo_hopper_native.yaml (no randomization) and configs/ppo_hopper_randomized.yaml (mass, friction,
motor strength, action and observation noise, a privileged critic) with ``total_steps`` and ``seed`` overridden,
then grids each policy (deterministic, ``--episodes`` per cell, the same reset seed in every cell). Printed: each
config's mean return per cell averaged over seeds, its nominal return, and the share of cells where it keeps at
least ``--keep`` of its own nominal return and of the best nominal return of the two. Heatmaps of each run land in
``--out/<config>_seed<k>/transfer.png``. A learning result, not a timing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from robopt.experiment import load_config
from robopt.runner import train
from robopt.sim2real.evaluate import evaluate_transfer, parse_grid

CONFIGS = {"native": "configs/ppo_hopper_native.yaml", "randomized": "configs/ppo_hopper_randomized.yaml"}


def table(name: str, mean: np.ndarray, axes, values) -> str:
    lines = [f"{name}: mean return per cell ({axes[0]} rows" + (f", {axes[1]} columns)" if len(axes) > 1 else ")")]
    columns = values[1] if len(axes) > 1 else ("",)
    lines.append(f"{'':>8s}" + "".join(f"{c:>9g}" if c != "" else "" for c in columns))
    for i, row_value in enumerate(values[0]):
        cells = mean[i] if len(axes) > 1 else [mean[i]]
        lines.append(f"{row_value:>8g}" + "".join(f"{c:9.0f}" for c in cells))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--grid", action="append", default=None, help="NAME=LOW:HIGH:COUNT (repeat for 2 axes)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--keep", type=float, default=0.8, help="fraction of the nominal return a cell must keep")
    parser.add_argument("--out", type=Path, default=Path("transfer"))
    args = parser.parse_args()
    grid = parse_grid(args.grid or ["body_mass=0.5:1.5:5", "geom_friction=0.4:1.6:5"])
    means, nominals = {}, {}
    with tempfile.TemporaryDirectory() as root:
        for name, path in CONFIGS.items():
            results = []
            for seed in args.seeds:
                config = load_config(path, [f"seed={seed}", f"total_steps={args.steps}", f"log.run_root={root}",
                                            "log.progress=false", "log.eval_episodes=0"])  # fmt: skip
                run = train(config)
                out = args.out / f"{name}_seed{seed}"
                results.append(evaluate_transfer(run.run_dir, grid, args.episodes, seed, out))
                print(f"{name} seed {seed}: nominal {results[-1].nominal_return:.0f}", flush=True)
            means[name] = np.mean([r.mean for r in results], axis=0)
            nominals[name] = float(np.mean([r.nominal_return for r in results]))
            axes, values = results[0].axes, results[0].values
    best = max(nominals.values())
    summary = {}
    for name, mean in means.items():
        print("\n" + table(name, mean, axes, values))
        own = float((mean >= args.keep * nominals[name]).mean())
        common = float((mean >= args.keep * best).mean())
        summary[name] = {"nominal": nominals[name], "keeps_own": own, "keeps_best": common, "mean": mean.tolist()}
        print(f"nominal {nominals[name]:.0f}; cells keeping {args.keep:.0%} of its own nominal: {own:.0%}, "
              f"of the best nominal ({best:.0f}): {common:.0%}; grid mean {float(mean.mean()):.0f}")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps({"steps": args.steps, "seeds": args.seeds, **summary}, indent=2))


if __name__ == "__main__":
    main()
