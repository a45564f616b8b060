"""Data-parallel PPO on 2 gloo ranks against one process with the same total envs and minibatch (issue 23).

Both contestants train ``configs/ppo_halfcheetah_fast.yaml`` (native mujoco/HalfCheetah, 64 envs x 32 steps, 5 epochs
of 512-sample minibatches):
- ``1proc``: one process, its 64 envs stepped on 2 physics threads, 1 torch thread (what ``make train`` runs);
- ``2ranks``: two processes (``robopt.distributed``, gloo), each with 32 envs on 1 physics thread and 1 torch
  thread, minibatches of 256 per rank whose gradients are averaged (the same 512-sample update).

Every ``--eval-every`` env steps rank 0 evaluates the deterministic policy on Gymnasium's HalfCheetah-v5 (the other
rank waits in the next collective); evaluation time is excluded from the clock. Prints env steps per second of
training, the seconds and env steps to each return level (first crossing), and the ratio of the two. Run nothing
else meanwhile: two cores, and the 2-rank contestant uses both.

    .venv/bin/python benchmarks/data_parallel.py --seeds 0 1 2 --levels 3000 --budget-s 120
    .venv/bin/python benchmarks/data_parallel.py --smoke    # CI: one 64-step iteration per contestant, 1 episode
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ppo_halfcheetah_fast.yaml"


def _train(rank: int, store: str, world: int, seed: int, args, out: str) -> None:
    """One contestant's run on this rank: train in chunks, rank 0 evaluates between them and decides the stop."""
    from robopt.build import build_loop
    from robopt.distributed.collective import LOCAL, TorchCollective
    from robopt.envs import make_env
    from robopt.evaluation import evaluate_policy
    from robopt.experiment import load_config

    torch.set_num_threads(1)
    collective = LOCAL
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        collective = TorchCollective(torch.device("cpu"))
    threads = 2 if world == 1 else 1  # physics threads per process: the machine's 2 cores either way
    overrides = [f"seed={seed}", "torch_threads=1", f"env.kwargs={{num_threads: {threads}}}", *args.set]
    config = load_config(CONFIG, overrides)
    loop = build_loop(config, initialize=True, collective=collective)
    chunks_per_eval = max(1, round(args.eval_every / loop.steps_per_iteration))
    seconds, steps, best, reached = 0.0, 0, float("-inf"), {}
    while True:
        start = time.perf_counter()
        for _ in range(chunks_per_eval):
            loop.iteration(progress=min(1.0, loop.env_steps / config.total_steps))
        seconds += time.perf_counter() - start
        steps = loop.env_steps
        stop = False
        if rank == 0:
            env = make_env("HalfCheetah-v5", args.episodes)
            try:
                value = evaluate_policy(loop.policy, env, args.episodes, seed=seed + 10_000).mean_return
            finally:
                env.close()
            best = max(best, value)
            for level in args.levels:
                if value >= level and level not in reached:
                    reached[level] = (seconds, steps)
            stop = len(reached) == len(args.levels) or seconds >= args.budget_s or steps >= args.max_steps
        if collective.any(stop):
            break
    if rank == 0:
        torch.save({"seconds": seconds, "steps": steps, "best": best, "reached": reached}, out)
    loop.env.close()
    collective.close()


def _allreduce(rank: int, store: str, numel: int, repeats: int, out: str) -> None:
    """Seconds per all_reduce of ``numel`` float32 values between 2 gloo ranks (the gradient of one update step)."""
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    buffer = torch.randn(numel)
    for _ in range(10):
        torch.distributed.all_reduce(buffer)
    torch.distributed.barrier()
    start = time.perf_counter()
    for _ in range(repeats):
        torch.distributed.all_reduce(buffer)
    seconds = (time.perf_counter() - start) / repeats
    if rank == 0:
        torch.save(seconds, out)
    torch.distributed.destroy_process_group()


def allreduce_seconds(numel: int, repeats: int = 200) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "seconds.pt")
        torch.multiprocessing.start_processes(
            _allreduce, (str(Path(tmp) / "store"), numel, repeats, out), nprocs=2, start_method="spawn"
        )
        return torch.load(out)


def run(world: int, seed: int, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.pt")
        if world == 1:
            _train(0, "", 1, seed, args, out)
        else:
            store = str(Path(tmp) / "store")
            torch.multiprocessing.start_processes(
                _train, (store, world, seed, args, out), nprocs=world, start_method="spawn"
            )
        return torch.load(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--levels", type=float, nargs="+", default=[3000.0])
    parser.add_argument("--budget-s", type=float, default=120.0, help="training seconds per run at most")
    parser.add_argument("--max-steps", type=int, default=2_000_000)
    parser.add_argument("--eval-every", type=int, default=20480, help="env steps between evaluations")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--contestants", nargs="+", default=["1proc", "2ranks"], choices=["1proc", "2ranks"])
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides of both contestants")
    parser.add_argument("--repeats", type=int, default=200, help="timed all_reduce calls")
    tiny = [
        "env.num_envs=8",
        "rollout.num_steps=8",
        "algo.minibatch_size=32",
        "policy.hidden=[32,32]",
        "critic.hidden=[32,32]",
    ]
    smoke = {"budget_s": 0.0, "eval_every": 1, "episodes": 1, "set": tiny, "repeats": 2}
    args = parse_smoke_args(parser, smoke=smoke)
    numel = 142_605  # the fast config's actor + critic parameters: one gradient all_reduce per minibatch step
    seconds = allreduce_seconds(numel, args.repeats)
    print(
        f"gloo all_reduce of {numel} float32 ({4 * numel / 1e3:.0f} kB) between 2 ranks: {1e3 * seconds:.2f} ms "
        f"(x 20 minibatch steps per iteration: {20e3 * seconds:.1f} ms)",
        flush=True,
    )
    results: dict[str, list[dict]] = {name: [] for name in args.contestants}
    for seed in args.seeds:  # interleaved: one seed of each contestant after the other
        for name in args.contestants:
            result = run(1 if name == "1proc" else 2, seed, args)
            results[name].append(result)
            levels = "  ".join(
                f"{level:.0f}: {result['reached'][level][0]:.1f} s ({result['reached'][level][1]} steps)"
                if level in result["reached"]
                else f"{level:.0f}: not reached (best {result['best']:.0f})"
                for level in args.levels
            )
            rate = result["steps"] / result["seconds"]
            print(f"{name:7s} seed {seed}: {rate:8.0f} env steps/s over {result['steps']} steps | {levels}", flush=True)
    for name, rows in results.items():
        rate = statistics.mean(row["steps"] / row["seconds"] for row in rows)
        print(f"{name:7s} mean: {rate:.0f} env steps/s")
    if len(results) == 2:
        one, two = (statistics.mean(r["steps"] / r["seconds"] for r in results[n]) for n in ("1proc", "2ranks"))
        print(f"throughput 2ranks / 1proc: {two / one:.2f}x")
        for level in args.levels:
            if all(level in r["reached"] for rows in results.values() for r in rows):
                a, b = (statistics.mean(r["reached"][level][0] for r in results[n]) for n in ("1proc", "2ranks"))
                print(f"time to {level:.0f}: 1proc {a:.1f} s, 2ranks {b:.1f} s (1proc / 2ranks {a / b:.2f}x)")
            else:
                print(f"time to {level:.0f}: not reached by every run (see the rows above)")


if __name__ == "__main__":
    main()
