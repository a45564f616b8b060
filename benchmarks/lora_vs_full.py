"""Memory and speed of GRPO with LoRA adapters vs full fine-tuning of the same language policy, on CPU.

Shapes: N completions per iteration (``env.num_envs``, prompts x group size), T generated tokens at most
(``policy.max_new_tokens``), P trainable parameters (the updater's flat buffer: policy and critic).

Every row is one configuration (hidden width, layers, full or LoRA rank r) measured in a fresh subprocess
(``--worker``), so one configuration's peak cannot hide another's. The worker builds the GRPO loop of
``configs/grpo_addition.yaml`` with ``robopt.build.build_loop`` and the overrides ``policy.hidden``,
``policy.layers``, ``policy.lora_rank`` (0: full), ``torch_threads`` and any ``--set KEY=VALUE``: a tiny GPT-2
built in code with random weights (no ``init_from``), the config's k3 reference KL kept on both sides so they do
the same work (full fine-tuning keeps a frozen copy of the model as the reference; LoRA disables its adapters
instead). LoRA adapts the config's ``lora_targets`` (GPT-2's default ``c_attn``; the worker checks that adapters
were added). The learning rate stays the config's: it does not change the cost.

After one warm-up iteration it runs --iterations calls of ``loop.iteration(progress)`` with ``loop.collect``,
``loop.advantages`` and ``loop.algorithm.update`` wrapped in timers (the iteration itself is robopt's), and reports
seconds per iteration split into collect (generation, with the reference log-probs) and update (PPO epochs and the
after-update drift pass; the remainder is advantages and bookkeeping), completions per second, ru_maxrss after
build_loop and after the iterations, and the Adam state (``FirstOrderUpdater.exp_avg`` + ``exp_avg_sq``, float32).

    .venv/bin/python benchmarks/lora_vs_full.py --hidden 64 256 --layers 2 4 --ranks 8 --iterations 5
    .venv/bin/python benchmarks/lora_vs_full.py --hidden 64 --layers 2 --ranks 4 --iterations 1  # one small row
    .venv/bin/python benchmarks/lora_vs_full.py --smoke    # CI: width 16, 1 layer, rank 2, 16 completions, 1 iteration
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "grpo_addition.yaml"
MIB = 2**20
COLUMNS = (("hidden", 6), ("layers", 6), ("method", 11), ("trainable", 10), ("model", 10), ("ref copy", 9),
           ("Adam MiB", 9), ("collect s", 9), ("update s", 9), ("s/iter", 7), ("compl/s", 8), ("build MiB", 9),
           ("peak MiB", 9))  # fmt: skip


def maxrss_mib() -> float:
    """Peak resident set size of this process so far, MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024


def timed(seconds: dict[str, float], name: str, function):
    """``function`` that adds its wall time to ``seconds[name]`` on every call."""

    def wrapper(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - begin

    return wrapper


def count(parameters, trainable: bool | None = None) -> int:
    return sum(p.numel() for p in parameters if trainable is None or p.requires_grad == trainable)


def measure(args, hidden: int, layers: int, rank: int) -> dict:
    """Build the loop, warm up, run the timed iterations (this process)."""
    import torch

    from robopt.build import build_loop
    from robopt.experiment import load_config

    row = {"hidden": hidden, "layers": layers, "rank": rank}
    overrides = [f"policy.hidden={hidden}", f"policy.layers={layers}", f"policy.lora_rank={rank}",
                 f"torch_threads={args.threads}", *args.set]  # fmt: skip
    try:
        config = load_config(CONFIG, overrides)
        loop = build_loop(config)
    except ValueError as error:  # ConfigError included: a bad override or size
        return {**row, "error": str(error).splitlines()[0]}
    built = maxrss_mib()
    policy, updater = loop.policy, loop.algorithm.updater
    adapted = sum(1 for m in policy.model.modules() if hasattr(m, "lora_A"))
    if rank > 0 and adapted == 0:
        return {**row, "error": f"no LoRA adapters were added (lora_targets {list(config.policy.lora_targets)})"}
    seconds = {"collect": 0.0, "advantages": 0.0, "update": 0.0, "iteration": 0.0}
    try:
        loop.iteration(progress=0.0)  # warm-up: first-call allocations and lazy initialisation
        loop.collect = timed(seconds, "collect", loop.collect)
        loop.advantages = timed(seconds, "advantages", loop.advantages)
        loop.algorithm.update = timed(seconds, "update", loop.algorithm.update)
        iteration = timed(seconds, "iteration", loop.iteration)
        for i in range(args.iterations):
            iteration(progress=(i + 1) / (args.iterations + 1))
    finally:
        loop.env.close()
    per_iteration = {key: value / args.iterations for key, value in seconds.items()}
    reference = count(policy.reference.parameters()) if policy.reference is not None else 0
    targets = sorted(policy.model.peft_config["default"].target_modules) if rank > 0 else []
    return {
        **row,
        "built": built,
        "peak": maxrss_mib(),
        "seconds": per_iteration,
        "adapted": adapted,
        "trainable": count(policy.parameters(), trainable=True),
        "model": count(policy.model.parameters()),
        "reference": reference,
        "critic": count(loop.critic.parameters()),
        "adam": updater.exp_avg.numel() + updater.exp_avg_sq.numel(),
        "adam_bytes": updater.exp_avg.nbytes + updater.exp_avg_sq.nbytes,
        "flat": updater.flat.numel(),
        "completions": loop.rollout.num_steps * loop.env.num_envs,
        "threads": torch.get_num_threads(),
        "targets": targets,
        "tokens": config.policy.max_new_tokens,
        "kl": f"{config.policy.kl_estimator} {config.policy.kl_coef}",
    }


def run_worker(args, hidden: int, layers: int, rank: int) -> dict:
    """``measure`` in a fresh interpreter; its last stdout line is the result as JSON."""
    command = [sys.executable, __file__, "--worker", "--hidden", str(hidden), "--layers", str(layers),
               "--ranks", str(rank), "--iterations", str(args.iterations), "--threads", str(args.threads)]  # fmt: skip
    command += ["--set", *args.set] if args.set else []
    done = subprocess.run(command, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return {"hidden": hidden, "layers": layers, "rank": rank, "error": f"worker failed: {tail[-1]}"}
    return json.loads(lines[-1])


def method(r: dict) -> str:
    return "full" if r["rank"] == 0 else f"LoRA r{r['rank']}"


def print_table(args, results: list[dict]) -> None:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    ok = [r for r in results if "error" not in r]
    threads = ok[0]["threads"] if ok else args.threads
    print(
        f"torch threads {threads}; CPUs {os.cpu_count()} ({usable} usable by this process); "
        f"{args.iterations} timed iteration(s) after 1 warm-up; config {CONFIG.name}"
    )
    if ok:
        first = ok[0]
        print(
            f"N {first['completions']} completions per iteration, T <= {first['tokens']} tokens each; "
            f"reference KL {first['kl']} on every row; critic {first['critic']} params (in the Adam state too)"
        )
        print(
            "trainable/model/ref copy: parameters (model: the policy's LM, base + adapters under LoRA; ref copy: "
            "the frozen reference of full fine-tuning); s per iteration; ru_maxrss of a fresh process per row"
        )
    header = " ".join(f"{label:>{width}}" for label, width in COLUMNS)
    print(header)
    print("-" * len(header))
    for r in results:
        if "error" in r:
            print(f"{r['hidden']:>6} {r['layers']:>6} {method(r):>11} error: {r['error']}")
            continue
        s = r["seconds"]
        print(
            f"{r['hidden']:>6} {r['layers']:>6} {method(r):>11} {r['trainable']:>10} {r['model']:>10} "
            f"{r['reference']:>9} {r['adam_bytes'] / MIB:>9.3f} {s['collect']:>9.3f} {s['update']:>9.3f} "
            f"{s['iteration']:>7.3f} {r['completions'] / s['iteration']:>8.1f} {r['built']:>9.1f} "
            f"{r['peak']:>9.1f}"
        )
    lora = [r for r in ok if r["rank"] > 0]
    if lora:
        print(
            "LoRA adapters: "
            + "; ".join(
                f"h{r['hidden']} l{r['layers']} r{r['rank']}: {r['adapted']} modules ({', '.join(r['targets'])})"
                for r in lora
            )
        )
    if ok:
        print(
            "Adam state numel (exp_avg + exp_avg_sq = 2 x flat P): "
            + "; ".join(f"h{r['hidden']} l{r['layers']} {method(r)}: {r['adam']}" for r in ok)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 256], help="model widths (policy.hidden)")
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 4], help="transformer blocks (policy.layers)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8], help="LoRA ranks (full fine-tuning always runs)")
    parser.add_argument("--iterations", type=int, default=5, help="timed loop.iteration calls per configuration")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (config torch_threads)")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more config overrides")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    smoke = {"hidden": [16], "layers": [1], "ranks": [2], "iterations": 1, "set": ["env.num_envs=16"]}
    args = parse_smoke_args(parser, smoke=smoke)
    if args.worker:  # one configuration; rank 0 is full fine-tuning
        print(json.dumps(measure(args, args.hidden[0], args.layers[0], args.ranks[0])))
        return
    if min(*args.hidden, *args.layers, *args.ranks, args.iterations, args.threads) < 1:
        parser.error("--hidden, --layers, --ranks, --iterations and --threads must be >= 1")
    ranks = [0, *dict.fromkeys(args.ranks)]
    print_table(args, [run_worker(args, h, n, r) for h in args.hidden for n in args.layers for r in ranks])


if __name__ == "__main__":
    main()
