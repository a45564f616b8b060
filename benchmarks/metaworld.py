"""Meta-World, measured on its own tasks and experts: the scripted expert, behaviour cloning of each policy kind on a
few of the expert's demonstrations, and DPPO (from the diffusion clone) and FPO (from the flow clone) fine-tuning
on the task's sparse success reward.

For each task and seed:

1. ``robopt collect --expert metaworld:<task>``: ``--demos`` episodes of the task's own scripted policy (Meta-World's
   ``metaworld.policies``), a Minari dataset in a temporary root;
2. the expert's success over ``--episodes`` fresh episodes;
3. ``robopt pretrain`` of configs/bc_{gaussian,flow,diffusion}_metaworld.yaml on those demonstrations;
4. ``robopt train`` of configs/dppo_metaworld.yaml (from the diffusion clone) and configs/fpo_metaworld.yaml (from
   the flow clone) for ``--steps`` env steps;

every policy evaluated with its deterministic action over ``--episodes`` episodes (one per env row, evaluation seeds
10000 + seed...), success with a 95 % Wilson interval. A row per task, method and seed, then a row per task and
method over the seeds (the interval over all their episodes). Runs go one at a time; each uses both cores (the
Meta-World workers and torch). Needs the Meta-World venv (``make metaworld``).

    python benchmarks/metaworld.py --tasks drawer-open hammer push --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from finetune_common import CONFIGS, quiet_train  # noqa: E402

from robopt.commands.collect import collect  # noqa: E402
from robopt.envs.metaworld_env import TASKS  # noqa: E402
from robopt.evaluation import ScriptedPolicy, evaluate_policy, evaluate_run  # noqa: E402

DEFAULT_TASKS = ("drawer-open", "hammer", "sweep-into", "push", "pick-place", "stick-push")
KINDS = ("gaussian", "flow", "diffusion")
FINETUNE = {"dppo": "diffusion", "fpo": "flow"}  # fine-tuning algorithm -> the clone it starts from


def wilson(successes: int, episodes: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a success rate (Wilson 1927): no zero-width interval at 0 or 1."""
    if episodes == 0:
        return float("nan"), float("nan")
    rate = successes / episodes
    centre = (rate + z * z / (2 * episodes)) / (1 + z * z / episodes)
    half = z * math.sqrt(rate * (1 - rate) / episodes + z * z / (4 * episodes**2)) / (1 + z * z / episodes)
    return max(0.0, centre - half), min(1.0, centre + half)


def expert_success(task: str, episodes: int, seed: int) -> float:
    from robopt.envs import make_env

    env = make_env(f"metaworld/{task}", episodes)
    try:
        expert = ScriptedPolicy(lambda obs: env.expert_action(), env)  # the workers hold each row's observation
        return evaluate_policy(expert, env, episodes, 10_000 + seed).success_rate
    finally:
        env.close()


def env_steps(run_dir: Path) -> int:
    """The env steps a run took (its progress.csv's last row): whole iterations, so at least ``total_steps``."""
    with open(run_dir / "progress.csv") as file:
        return int(list(csv.DictReader(file))[-1]["env_steps"])


def row(task: str, method: str, seed: str, rate: float, episodes: int, steps: int | str, seconds: float) -> str:
    low, high = wilson(round(rate * episodes), episodes)
    group = TASKS[task]
    return (
        f"{task:<16} {group:<9} {method:<16} {seed:>4} {rate:>7.2f}  [{low:.2f}, {high:.2f}] {episodes:>5} "
        f"{steps!s:>9} {seconds:>8.0f}"
    )


# Meta-World's own env in its venv, one process: random actions, resets at its time limit (the peer's steps/s)
PEER_LOOP = """
import sys, time, warnings
import numpy as np, gymnasium as gym, metaworld
warnings.filterwarnings("ignore")
env = gym.make("Meta-World/MT1", env_name=sys.argv[1], seed=0)
env.reset(seed=0)
actions = np.random.default_rng(0).uniform(-1, 1, size=(int(sys.argv[2]), 4)).astype(np.float32)
start = time.perf_counter()
for action in actions:
    _, _, terminated, truncated, _ = env.step(action)
    if terminated or truncated:
        env.reset()
print(len(actions) / (time.perf_counter() - start))
"""


def throughput(task: str, rows: int, steps: int) -> None:
    """Env steps/s of robopt's rows (1 and 2 workers, random actions) and of Meta-World's own env in one process."""
    import subprocess

    import torch

    from robopt.envs import make_env
    from robopt.envs.metaworld_env import metaworld_python

    peer = subprocess.run([metaworld_python(), "-c", PEER_LOOP, task, str(steps)], capture_output=True, text=True)
    peer_rate = float(peer.stdout.strip().splitlines()[-1])
    print(f"throughput {task}: Meta-World's own env, one process: {peer_rate:.0f} env steps/s")
    generator = torch.Generator().manual_seed(0)
    for workers in (1, 2):
        env = make_env(f"metaworld/{task}", rows, workers=workers)
        try:
            env.reset(seed=0)
            start = time.perf_counter()
            for _ in range(max(1, steps // rows)):
                env.step(torch.rand(rows, 4, generator=generator) * 2 - 1)
            rate = max(1, steps // rows) * rows / (time.perf_counter() - start)
        finally:
            env.close()
        print(f"throughput {task}: robopt, {rows} rows in {workers} worker(s): {rate:.0f} env steps/s "
              f"({rate / peer_rate:.2f}x)")  # fmt: skip


def run_task(task: str, seed: int, args, root: Path, runs: Path) -> list[tuple]:
    """(method, rate, episodes, env steps, seconds) of each method on one task and seed; rows printed as they come."""
    results = []

    def report(method: str, rate: float, steps, seconds: float, episodes: int = args.episodes) -> None:
        results.append((method, rate, episodes, steps, seconds))
        print(row(task, method, str(seed), rate, episodes, steps, seconds), flush=True)

    start = time.perf_counter()
    demos = collect(f"mw/{task}-s{seed}", args.demos, expert=f"metaworld:{task}", root=root, seed=seed, progress=False)
    report(f"demos ({args.demos})", demos.success_rate, demos.transitions, time.perf_counter() - start, args.demos)
    start = time.perf_counter()
    report("expert", expert_success(task, args.episodes, seed), "-", time.perf_counter() - start)
    common = [f"env.id=metaworld/{task}", f"seed={seed}", f"log.run_root={runs}", "log.eval_episodes=0"]
    clones = {}
    for kind in args.kinds:
        overrides = [*common, f"algo.dataset=mw/{task}-s{seed}-v0", *args.bc_overrides]
        clones[kind], seconds = quiet_train(CONFIGS / f"bc_{kind}_metaworld.yaml", overrides)
        report(f"bc {kind}", evaluate_run(clones[kind], args.episodes, 10_000 + seed).success_rate, "-", seconds)
    for algorithm in args.finetune:
        kind = FINETUNE[algorithm]
        if kind not in clones:
            continue
        overrides = [*common, f"init_from={clones[kind]}", f"total_steps={args.steps}", "log.eval_every=0"]
        overrides += args.ft_overrides
        run_dir, seconds = quiet_train(CONFIGS / f"{algorithm}_metaworld.yaml", overrides)
        rate = evaluate_run(run_dir, args.episodes, 10_000 + seed).success_rate
        report(f"{algorithm} from bc", rate, env_steps(run_dir), seconds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="Meta-World tasks (without -v3)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--demos", type=int, default=10, help="expert episodes each clone learns from")
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes per policy and seed")
    parser.add_argument("--steps", type=int, default=300_000, help="fine-tuning env steps")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--finetune", nargs="*", default=list(FINETUNE), choices=list(FINETUNE))
    parser.add_argument("--throughput-steps", type=int, default=4000, help="env steps of the throughput check")
    parser.add_argument("--ft-overrides", nargs="*", default=[], help="config overrides of the fine-tuning runs")
    parser.add_argument("--throughput", action=argparse.BooleanOptionalAction, default=True, help="the speed check")
    parser.add_argument("--smoke", action="store_true", help="smallest arguments: a test that the script runs")
    args = parser.parse_args()
    args.bc_overrides = []
    if args.smoke:
        args.tasks, args.seeds, args.demos, args.episodes, args.steps = ["reach"], [0], 2, 4, 160
        args.throughput_steps = 64
        args.bc_overrides = ["algo.epochs=2", "env.num_envs=4"]
        args.ft_overrides = ["env.num_envs=4", "rollout.num_steps=10", "critic_warmup=0", "algo.minibatch_size=20"]
    tasks = [task if task.endswith("-v3") else f"{task}-v3" for task in args.tasks]
    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        parser.error(f"unknown Meta-World task(s) {', '.join(unknown)}; the 50: {', '.join(sorted(TASKS))}")
    print(f"Meta-World: {len(tasks)} task(s), seeds {args.seeds}, {args.demos} demonstrations, {args.steps} "
          f"fine-tuning steps, {args.episodes} evaluation episodes; {os.cpu_count()} CPU cores")  # fmt: skip
    if args.throughput:
        throughput(tasks[0], 16, args.throughput_steps)
    header = f"{'task':<16} {'group':<9} {'method':<16} {'seed':>4} {'success':>7}  {'95% interval':<12} "
    print(header + f"{'episodes':>5} {'env steps':>9} {'wall s':>8}", flush=True)
    summary: dict[tuple[str, str], list[tuple]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        root, runs = Path(scratch) / "datasets", Path(scratch) / "runs"
        os.environ["MINARI_DATASETS_PATH"] = str(root)  # where robopt pretrain reads algo.dataset
        for task in tasks:
            for seed in args.seeds:
                for method, *figures in run_task(task, seed, args, root, runs):
                    summary.setdefault((task, method), []).append(figures)
    print("\nover the seeds (interval over all their episodes):")
    for (task, method), figures in summary.items():
        episodes = sum(f[1] for f in figures)
        rate = sum(f[0] * f[1] for f in figures) / episodes
        steps = figures[0][2]
        print(row(task, method, "all", rate, episodes, steps, sum(f[3] for f in figures) / len(figures)))


if __name__ == "__main__":
    main()
