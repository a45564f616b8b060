"""Peak resident memory of DPPO iterations (collect + update) per number of fine-tuned denoising steps K', on CPU.

Shapes: T rollout steps per env (--steps), N envs (--envs), B = T * N env steps (decisions) per rollout, K DDPM
steps (--denoising-steps), K' fine-tuned steps (--ft-steps), H action chunk (--horizon), A the env's action dim,
X = H * A the policy's action.

Each K' in --ft-steps is measured in a fresh subprocess (``--worker``), so one configuration's peak cannot hide
another's. The worker builds the experiment from robopt's own pieces: the config below (``BASE``) with overrides
``env.num_envs``, ``rollout.num_steps``, ``policy.denoising_steps``, ``policy.ft_steps``, ``policy.horizon`` and
any ``--set KEY=VALUE``, validated by ``robopt.config`` as ``load_config`` does, then ``robopt.build.build_loop``
(native ``mujoco/Hopper``, diffusion policy, DPPO; ``build_env`` wraps the env in ``ActionChunkEnv`` when
H > 1). It reads ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after building the loop and again after
--iterations calls of ``loop.iteration(progress)``; the growth is what the iterations added to the peak. The
driver process imports neither torch nor robopt: on Linux a child's ru_maxrss starts from what it inherits at
fork/exec, and a small parent keeps that negligible.

Printed per K': B, the (env step, denoising step) pairs B * K' that DPPO's minibatches are drawn from, the bytes
of the chain tensors the storage keeps in ``policy_info`` (chain [T, N, K'+1, X], mean [T, N, K', X], log_prob
[T, N, K'] float32: 4 T N ((2 K' + 1) X + K') bytes, linear in K'; KiB), ru_maxrss after build and after the
iterations (MiB), their difference, and the mean wall seconds per iteration (the first includes warm-up).

    .venv/bin/python benchmarks/dppo_memory.py --ft-steps 1 5 10 20 --horizon 4 --envs 64 --steps 32 --iterations 2
    .venv/bin/python benchmarks/dppo_memory.py --ft-steps 2 --envs 4 --steps 4 --iterations 1  # one small row
    .venv/bin/python benchmarks/dppo_memory.py --smoke    # CI: that row with 32-wide networks
    .venv/bin/python benchmarks/dppo_memory.py --ft-steps 10 --set policy.hidden=[512,512,512]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

BASE = {  # DPPO on native Hopper; the rest is robopt's defaults (policy MLP [256, 256], DPPO's paper settings)
    "name": "dppo_memory",
    "seed": 0,
    "env": {"id": "mujoco/Hopper", "backend": "mujoco"},
    "policy": {"name": "diffusion"},
    "critic": {"hidden": [256, 256], "activation": "relu"},
    "algo": {"name": "dppo"},
    "log": {"progress": False, "eval_episodes": 0},
}
MIB = 2**20
COLUMNS = (("K'", 4), ("B", 7), ("pairs B*K'", 10), ("info KiB", 9), ("build MiB", 10), ("peak MiB", 9),
           ("growth MiB", 11), ("s/iter", 7))  # fmt: skip


def maxrss_mib() -> float:
    """Peak resident set size of this process so far, MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024


def overrides(args, ft_steps: int) -> list[str]:
    return [
        f"env.num_envs={args.envs}",
        f"rollout.num_steps={args.steps}",
        f"policy.ft_steps={ft_steps}",
        f"policy.denoising_steps={args.denoising_steps}",
        f"policy.horizon={args.horizon}",
        *args.set,
    ]


def measure(args, ft_steps: int, fresh: float) -> dict:
    """Build the loop, run the iterations; peaks, timings and the storage's policy_info sizes (this process).

    ``fresh``: ru_maxrss before anything was imported.
    """
    from robopt.build import build_loop
    from robopt.config import apply_overrides, build_dataclass
    from robopt.experiment import ExperimentConfig

    imported = maxrss_mib()
    try:
        config = build_dataclass(ExperimentConfig, apply_overrides(BASE, overrides(args, ft_steps)))
        loop = build_loop(config)
    except ValueError as error:  # ConfigError included: a bad override, or a horizon the env is not chunked for
        return {"ft_steps": ft_steps, "error": str(error).splitlines()[0]}
    built = maxrss_mib()
    seconds = []
    try:
        for i in range(args.iterations):
            begin = time.perf_counter()
            loop.iteration(progress=i / args.iterations)
            seconds.append(time.perf_counter() - begin)
        storage, p = loop.storage, config.policy
        network = f"MLP {list(p.hidden)}" if p.network == "mlp" else f"U-Net {list(p.unet_channels)}"
        return {
            "ft_steps": ft_steps,
            "fresh": fresh,
            "imported": imported,
            "built": built,
            "peak": maxrss_mib(),
            "seconds": sum(seconds) / len(seconds),
            "batch": storage.num_steps * storage.num_envs,
            "env_steps": loop.steps_per_iteration,
            "info": {key: [list(t.shape), t.numel() * t.element_size()] for key, t in storage.policy_info.items()},
            "env": f"{type(loop.env).__name__} {config.env.id} (action {loop.env.action_dim})",
            "policy": f"diffusion {network}, K {p.denoising_steps}, H {p.horizon}, X {loop.policy.action_dim}",
        }
    finally:
        loop.env.close()


def run_worker(args, ft_steps: int) -> dict:
    """``measure`` in a fresh interpreter; its last stdout line is the result as JSON."""
    command = [sys.executable, __file__, "--worker", "--ft-steps", str(ft_steps)]
    for flag in ("denoising_steps", "horizon", "envs", "steps", "iterations"):
        command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    command += ["--set", *args.set] if args.set else []
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return {"ft_steps": ft_steps, "error": f"worker failed: {lines[-1]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(args, results: list[dict]) -> None:
    ok = [r for r in results if "error" not in r]
    if ok:
        first = ok[0]
        print(
            f"{first['env']}; {first['policy']}; T {args.steps} x N {args.envs} = B decisions, "
            f"{first['env_steps']} env steps per iteration; {args.iterations} iteration(s)"
        )
        print(
            f"ru_maxrss of a fresh process per row, MiB (before imports {first['fresh']:.0f}, after importing torch "
            f"and robopt {first['imported']:.0f}); build: after build_loop; peak: after the iterations"
        )
    header = " ".join(f"{label:>{width}}" for label, width in COLUMNS)
    print(header)
    print("-" * len(header))
    for r in results:
        if "error" in r:
            print(f"{r['ft_steps']:>4} error: {r['error']}")
            continue
        k, b = r["ft_steps"], r["batch"]
        info = sum(size for _, size in r["info"].values()) / 1024
        print(
            f"{k:>4} {b:>7} {b * k:>10} {info:>9.1f} {r['built']:>10.1f} {r['peak']:>9.1f} "
            f"{r['peak'] - r['built']:>11.1f} {r['seconds']:>7.2f}"
        )
    if ok:
        print("policy_info in the storage (float32, [T, N, ...]; 4 T N ((2 K' + 1) X + K') bytes):")
    for r in ok:
        parts = ", ".join(f"{key} {shape} {size / 1024:.1f} KiB" for key, (shape, size) in r["info"].items())
        print(f"  K' {r['ft_steps']}: {parts}")


def main() -> None:
    fresh = maxrss_mib()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ft-steps", type=int, nargs="+", default=[1, 5, 10, 20], help="K' values to measure")
    parser.add_argument("--denoising-steps", type=int, default=20, help="K, DDPM steps")
    parser.add_argument("--horizon", type=int, default=4, help="H, action chunk length")
    parser.add_argument("--envs", type=int, default=64, help="N parallel envs")
    parser.add_argument("--steps", type=int, default=32, help="T rollout steps (decisions) per env per iteration")
    parser.add_argument("--iterations", type=int, default=2, help="loop.iteration calls per configuration")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more config overrides")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    smoke = {
        "ft_steps": [2],
        "envs": 4,
        "steps": 4,
        "iterations": 1,
        "set": ["policy.hidden=[32,32]", "critic.hidden=[32,32]"],
    }
    args = parse_smoke_args(parser, smoke=smoke)
    if min(args.envs, args.steps, args.iterations, args.horizon, args.denoising_steps) < 1:
        parser.error("--envs, --steps, --iterations, --horizon and --denoising-steps must be >= 1")
    if not all(1 <= k <= args.denoising_steps for k in args.ft_steps):
        parser.error(f"--ft-steps must be in [1, --denoising-steps={args.denoising_steps}], got {args.ft_steps}")
    if args.worker:
        print(json.dumps(measure(args, args.ft_steps[0], fresh)))
        return
    print_table(args, [run_worker(args, k) for k in args.ft_steps])


if __name__ == "__main__":
    main()
