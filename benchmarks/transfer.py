"""Does randomization transfer? PPO trained with and without domain randomization, same budget and seeds, every
policy evaluated on the same grids of perturbed dynamics with ``robopt evaluate-transfer``.

    .venv/bin/python benchmarks/transfer.py --task Hopper --seeds 0 1 2 --run-root runs/transfer
    .venv/bin/python benchmarks/transfer.py --task Walker2d --seeds 0 1 2 --run-root runs/transfer --episodes 10
    .venv/bin/python benchmarks/transfer.py --grids motor_x_delay --arm memoryless=configs/ppo_hopper_delay.yaml \
        --arm history=configs/ppo_hopper_delay_history.yaml --arm gru=configs/ppo_hopper_delay_gru.yaml
    .venv/bin/python benchmarks/transfer.py --smoke    # CI: one 64-step iteration per arm, 1 episode per cell

Arms: ``configs/ppo_<task>_fast.yaml`` (no randomization) and ``configs/ppo_<task>_fast_randomized.yaml`` (mass with
inertia, friction, motor strength, actuator delay 0-2 ticks, observation noise, random pushes; privileged critic).
A run ``<config>_s<seed>`` already finished under ``--run-root`` (its ``eval.json`` exists) is reused, otherwise
trained there for ``--steps``. Grids (deterministic episodes, the same reset seed for every policy):

    mass x friction     body_mass 0.5..1.5 x geom_friction 0.4..1.6 (5 x 5)
    motor x delay       actuator_gain 0.6..1.4 (5) x action_delay 0..3 ticks (4)
    push                push_force 0..400 N (5), 5 steps every 100 steps on the torso

Printed per grid and arm: the mean return per cell averaged over seeds, the nominal return, the grid mean, and the
share of cells keeping ``--keep`` of the arm's own nominal return, each as mean +- std over seeds. Heatmaps of each
run land in ``--out/<grid>/<run>/transfer.png``; everything in ``--out/summary.json``. A learning result, not a
timing. ``--set`` overrides every training run; ``--smoke`` keeps its runs and outputs in a temporary directory
unless ``--run-root`` or ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.experiment import load_config
from robopt.runner import train
from robopt.sim2real.evaluate import evaluate_transfer, parse_grid

GRIDS = {
    "mass_x_friction": ["body_mass=0.5:1.5:5", "geom_friction=0.4:1.6:5"],
    "motor_x_delay": ["actuator_gain=0.6:1.4:5", "action_delay=0:3:4"],
    "push": ["push_force=0:400:5"],
}


def run_dir_of(config: str, seed: int, steps: int, root: Path, extra: list[str] = ()) -> Path:
    """The finished run ``<name>_s<seed>`` under ``root``, trained first (with ``extra`` overrides) when there is
    none."""
    name = f"{Path(config).stem}_s{seed}"
    finished = sorted(d for d in (root / name).glob("*") if (d / "eval.json").exists())
    if finished:
        return finished[-1]
    overrides = [
        f"seed={seed}",
        f"total_steps={steps}",
        f"log.run_root={root}",
        f"name={name}",
        "log.progress=false",
        *extra,
    ]
    return train(load_config(config, overrides)).run_dir


def table(mean: np.ndarray, axes, values) -> str:
    lines = [f"mean return per cell ({axes[0]} rows" + (f", {axes[1]} columns)" if len(axes) > 1 else ")")]
    columns = values[1] if len(axes) > 1 else ("",)
    lines.append(f"{'':>8s}" + "".join(f"{c:>9g}" if c != "" else "" for c in columns))
    for i, row_value in enumerate(values[0]):
        cells = mean[i] if len(axes) > 1 else [mean[i]]
        lines.append(f"{row_value:>8g}" + "".join(f"{c:9.0f}" for c in cells))
    return "\n".join(lines)


def plot_summary(summary: dict, out: Path) -> list[Path]:
    """One figure per grid: each arm's mean return per cell over seeds, side by side; ``out/<grid>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for grid_name, arms in summary["grids"].items():
        figure, panels = plt.subplots(1, len(arms), figsize=(5.2 * len(arms), 4.2), squeeze=False)
        top = max(float(np.max(a["mean"])) for a in arms.values())
        for panel, (arm, data) in zip(panels[0], arms.items()):
            mean, axes = np.asarray(data["mean"]), data["axes"]
            title = f"{summary['task']} {arm}: nominal {np.mean(data['nominal']):.0f}, kept {np.mean(data['kept']):.0%}"
            if len(axes) == 1:
                panel.plot(axes[0]["values"], mean, marker="o")
                panel.set_xlabel(axes[0]["name"])
                panel.set_ylabel("return (mean over seeds)")
                panel.set_ylim(0, top * 1.05)
                panel.grid(alpha=0.3)
            else:
                image = panel.imshow(mean, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=top)
                for (i, j), value in np.ndenumerate(mean):
                    panel.text(
                        j,
                        i,
                        f"{value:.0f}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="black" if value > top / 2 else "white",
                    )
                panel.set_xticks(range(len(axes[1]["values"])), [f"{v:g}" for v in axes[1]["values"]])
                panel.set_yticks(range(len(axes[0]["values"])), [f"{v:g}" for v in axes[0]["values"]])
                panel.set_xlabel(axes[1]["name"])
                panel.set_ylabel(axes[0]["name"])
                figure.colorbar(image, ax=panel)
            panel.set_title(title, fontsize=9)
        figure.tight_layout()
        path = out / f"{summary['task'].lower()}_{grid_name}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Hopper", choices=["Hopper", "Walker2d"])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--run-root", type=Path, default=Path("runs/transfer"))
    parser.add_argument("--grids", nargs="+", default=list(GRIDS), choices=list(GRIDS))
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--keep", type=float, default=0.8, help="fraction of the nominal return a cell must keep")
    parser.add_argument("--out", type=Path, default=Path("transfer"))
    parser.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME=CONFIG",
        help="an arm and its config (repeat); default: the task's nominal and randomized configs",
    )
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more overrides of every run")
    tiny = [
        "env.num_envs=8",
        "rollout.num_steps=8",
        "algo.minibatch_size=64",
        "policy.hidden=[32,32]",
        "critic.hidden=[32,32]",
        "log.eval_episodes=1",
    ]
    smoke = {"seeds": [0], "steps": 64, "episodes": 1, "run_root": None, "out": None, "set": tiny}
    args = parse_smoke_args(parser, smoke=smoke)
    with tempfile.TemporaryDirectory() as temporary:  # --smoke's runs and outputs, unless given
        args.run_root = args.run_root or Path(temporary) / "runs"
        args.out = args.out or Path(temporary) / "transfer"
        run(args)


def run(args) -> None:
    """Train (or reuse) every arm's runs, evaluate them on each grid, print and write the summary."""
    arms = {
        arm: f"configs/ppo_{args.task.lower()}_fast{suffix}.yaml"
        for arm, suffix in (("nominal", ""), ("randomized", "_randomized"))
    }
    if args.arm:  # NAME=CONFIG arms in place of the two above (the memory study: docs/memory.md)
        arms = dict(arm.split("=", 1) for arm in args.arm)
    trained = {
        (arm, seed): run_dir_of(config, seed, args.steps, args.run_root, args.set)
        for seed in args.seeds
        for arm, config in arms.items()
    }  # seed by seed: whole seeds first
    runs = {arm: [trained[arm, seed] for seed in args.seeds] for arm in arms}
    summary: dict = {"task": args.task, "steps": args.steps, "seeds": args.seeds, "keep": args.keep, "grids": {}}
    for grid_name in args.grids:
        grid = parse_grid(GRIDS[grid_name])
        print(f"\n== {args.task}: {grid_name} ({', '.join(GRIDS[grid_name])}), {args.episodes} episodes per cell ==")
        summary["grids"][grid_name] = {}
        for arm, run_dirs in runs.items():
            results = [
                evaluate_transfer(run_dir, grid, args.episodes, 0, args.out / grid_name / run_dir.parent.name)
                for run_dir in run_dirs
            ]
            nominal = np.array([r.nominal_return for r in results])
            grid_mean = np.array([float(r.mean.mean()) for r in results])
            kept = np.array([float((r.mean >= args.keep * r.nominal_return).mean()) for r in results])
            mean = np.mean([r.mean for r in results], axis=0)
            print(f"\n{arm}: {table(mean, results[0].axes, results[0].values)}")
            print(
                f"{arm}: nominal {nominal.mean():.0f} +- {nominal.std():.0f}, grid mean {grid_mean.mean():.0f} +- "
                f"{grid_mean.std():.0f}, cells keeping {args.keep:.0%} of own nominal {kept.mean():.0%} +- "
                f"{kept.std():.0%} (per seed: {', '.join(f'{k:.0%}' for k in kept)})",
                flush=True,
            )
            summary["grids"][grid_name][arm] = {
                "runs": [str(d) for d in run_dirs], "nominal": nominal.tolist(), "grid_mean": grid_mean.tolist(),
                "kept": kept.tolist(), "mean": mean.tolist(),
                "axes": [{"name": n, "values": list(v)} for n, v in zip(results[0].axes, results[0].values)],
            }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    figures = plot_summary(summary, args.out)
    print(f"\nwrote {args.out / 'summary.json'} and {', '.join(str(f) for f in figures)}")


if __name__ == "__main__":
    main()
