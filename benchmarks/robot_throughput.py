"""Env steps per second of the quadruped task (configs/ppo_quadruped_velocity.yaml) against raw MuJoCo on the same
model in the same run, and where an env step's time goes.

    python benchmarks/robot_throughput.py [--envs 64 256 1024] [--threads 1 2] [--steps 200]
    python benchmarks/robot_throughput.py --backend mujoco_warp --device cuda --envs 4096 [--graph]
    python benchmarks/robot_throughput.py --ppo 10 --envs 1024 --threads 2   # + PPO end to end, 10 iterations
    python benchmarks/robot_throughput.py --smoke    # CI: 4 envs, 1 thread, 5 steps

On ``mujoco_warp`` (a GPU) it prints the env's steps per second alone (physics and terms on the device; the raw
MuJoCo C comparison is a CPU figure), synchronizing the device at both ends of the clock.

Raw MuJoCo: ``mujoco.rollout`` (C threads, no Python per env) stepping the same compiled model (floor, actuators
and sensors included) N rows x 4 physics steps per control step, from the standing pose with the actuators holding
it: the physical limit. The env: ``NativeVecEnv.step`` with a policy's actions (zeros plus N(0, 0.3) noise: the
robot walks about, contacts change, some rows fall and reset). The split times each part of the env's step with a
wall clock around it: the backend's physics step (C with its per-row Python glue), the task's terms (context, reward
terms, observation frame), the rest (resets, randomization, bookkeeping). Run it alone: two cores, one benchmark.

``--ppo K``: also PPO end to end on the same config (its rollout, epochs and minibatches; ``env.num_threads`` the
row's threads, ``torch_threads`` as the config says or ``--torch-threads``): K iterations after one warm-up
iteration, env steps per second of wall clock and over raw physics, and the iteration's split into collection
(policy inference, env steps, storage), advantages and the update. Then the update's arithmetic (every linear layer
of actor and critic, forward and backward, every sample of every epoch), the rate it ran at, the rate of the same
layers' matrix products alone (forward, a minibatch's rows) on the same threads, and the ceiling that leaves for PPO
over raw physics: collection as fast as raw physics and the update at those products' rate.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import mujoco
import numpy as np
import torch
import yaml
from mujoco import rollout
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.envs import make_env

CONFIG = "configs/ppo_quadruped_velocity.yaml"


def sections() -> tuple[dict, dict]:
    data = yaml.safe_load(open(CONFIG))
    return data["robot"], data["task"]


def raw_rate(env, num_envs: int, threads: int, steps: int) -> float:
    """Control steps per second of mujoco.rollout on the env's model, holding the default pose."""
    model = env.physics.mj_model
    decimation = env.task.frame_skip
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    data = mujoco.MjData(model)
    data.qpos[:] = env.task.robot.init_qpos.numpy()
    mujoco.mj_forward(model, data)
    state = np.zeros(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state, spec)
    initial = np.tile(state, (num_envs, 1))
    control = np.zeros((num_envs, steps * decimation, model.nu))
    datas = [mujoco.MjData(model) for _ in range(threads)]
    with rollout.Rollout(nthread=threads) as runner:
        runner.rollout([model] * num_envs, datas, initial, control[:, :decimation])  # warm up the pool
        start = time.perf_counter()
        runner.rollout([model] * num_envs, datas, initial, control)
        elapsed = time.perf_counter() - start
    return num_envs * steps / elapsed


def warp_rate(num_envs: int, steps: int, device: str, graph: bool) -> float:
    """Env steps per second of the quadruped task on MuJoCo Warp (random actions, as ``env_rate``)."""
    robot, task = sections()
    env = make_env("robot", num_envs, backend="mujoco_warp", device=device, robot=robot, task=task, seed=0, graph=graph)
    generator = torch.Generator(device=device).manual_seed(0)
    env.reset(seed=0)

    def step():
        env.step(0.3 * torch.randn(num_envs, env.action_dim, generator=generator, device=device))

    for _ in range(20):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    elapsed = time.perf_counter() - start
    env.close()
    return num_envs * steps / elapsed


def synchronize(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed_steps(env, steps: int) -> tuple[float, dict[str, float]]:
    """Env steps per second over ``steps`` steps of a policy's actions (zeros plus N(0, 0.3) noise) after 20 warm-up
    steps, and the seconds spent in the physics (``physics``) and the task's terms (``terms``) and in all
    (``elapsed``); shared with benchmarks/terrain_cost.py."""
    totals: dict[str, float] = defaultdict(float)

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            totals[name] += time.perf_counter() - start
            return out

        return wrapper

    env.physics.step = timed("physics", env.physics.step)
    for hook in ("update_context", "reward", "advance", "reset_context"):
        setattr(env.task, hook, timed("terms", getattr(env.task, hook)))
    generator = torch.Generator().manual_seed(0)
    env.reset(seed=0)
    for _ in range(20):
        env.step(0.3 * torch.randn(env.num_envs, env.action_dim, generator=generator))
    totals.clear()
    start = time.perf_counter()
    for _ in range(steps):
        env.step(0.3 * torch.randn(env.num_envs, env.action_dim, generator=generator))
    elapsed = time.perf_counter() - start
    return env.num_envs * steps / elapsed, {"physics": totals["physics"], "terms": totals["terms"], "elapsed": elapsed}


def env_rate(num_envs: int, threads: int, steps: int) -> tuple[float, dict[str, float]]:
    """Env steps per second and the seconds spent in each part over the timed steps."""
    robot, task = sections()
    env = make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=threads)
    rate, split = timed_steps(env, steps)
    raw = raw_rate(env, num_envs, threads, steps)
    env.close()
    split["rest"] = split["elapsed"] - split["physics"] - split["terms"]
    return rate, {**split, "raw": raw}


def ppo_rate(num_envs: int, threads: int, iterations: int, torch_threads: int, update_threads: int) -> dict:
    """PPO on CONFIG at ``num_envs`` rows: env steps/s over ``iterations`` timed iterations (after one warm-up) and
    the mean seconds per iteration of collection, advantages and the update."""
    import tempfile

    from robopt.build import build_loop
    from robopt.config import build_dataclass, config_to_dict
    from robopt.experiment import ExperimentConfig, load_config

    data = config_to_dict(load_config(CONFIG))
    data["env"]["num_envs"] = num_envs
    data["env"]["kwargs"] = {**data["env"].get("kwargs", {}), "num_threads": threads}
    data["log"]["run_root"] = tempfile.mkdtemp()
    if torch_threads:
        data["torch_threads"] = torch_threads
    data["update_threads"] = update_threads
    loop = build_loop(build_dataclass(ExperimentConfig, data))
    totals: dict[str, float] = defaultdict(float)
    for owner, name, key in ((loop, "collect", "collect"), (loop, "advantages", "advantages"),
                             (loop.algorithm, "update", "update")):  # fmt: skip
        fn = getattr(owner, name)

        def timed(*args, _fn=fn, _key=key, **kwargs):
            start = time.perf_counter()
            out = _fn(*args, **kwargs)
            totals[_key] += time.perf_counter() - start
            return out

        setattr(owner, name, timed)
    loop.iteration(0.0)  # warm-up: first-touch allocations, thread pools
    totals.clear()
    start = time.perf_counter()
    for _ in range(iterations):
        loop.iteration(0.0)
    elapsed = time.perf_counter() - start
    loop.env.close()
    used = torch.get_num_threads()
    flops = update_flops(loop, data["algo"]["epochs"])
    peak = matmul_rate(loop, update_threads or used, data["algo"]["minibatch_size"])
    torch.set_num_threads(1)  # the env-only measurements that follow run with one, as main set it
    per = {key: value / iterations for key, value in totals.items()}
    return {"rate": loop.steps_per_iteration * iterations / elapsed, "iteration": elapsed / iterations, **per,
            "torch_threads": used, "update_threads": update_threads or "as collection", "update_flops": flops,
            "matmul_rate": peak, "steps": loop.steps_per_iteration}  # fmt: skip


def update_layers(loop) -> list[tuple[int, int, bool]]:
    """(in, out, first) of every linear layer of the actor and the critic (``first``: it reads the observation)."""
    out = []
    for net in (loop.policy, loop.critic):
        layers = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
        out += [(layer.in_features, layer.out_features, index == 0) for index, layer in enumerate(layers)]
    return out


def update_flops(loop, epochs: int) -> float:
    """The update's arithmetic per iteration, about: every linear layer of the actor and the critic, forward (2 in
    out a sample) and backward (the weights' gradient, 2 in out, and the inputs', 2 in out, except for a layer that
    reads the observation), over every sample of every epoch."""
    per_sample = sum((4 if first else 6) * fan_in * fan_out for fan_in, fan_out, first in update_layers(loop))
    return float(per_sample * loop.steps_per_iteration * epochs)


def matmul_rate(loop, threads: int, rows: int) -> float:
    """FLOP/s of the update's own layer products, forward, at their shapes ([rows, in] x [in, out] float32, rows the
    minibatch) on ``threads`` torch threads: what its arithmetic could run at, as a yardstick."""
    torch.set_num_threads(threads)
    pairs = [(torch.randn(rows, fan_in), torch.randn(fan_in, fan_out)) for fan_in, fan_out, _ in update_layers(loop)]
    for a, b in pairs * 5:
        a @ b
    start, count = time.perf_counter(), 50
    for _ in range(count):
        for a, b in pairs:
            a @ b
    flops = sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in pairs)
    return flops * count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--backend", default="mujoco", choices=("mujoco", "mujoco_warp"))
    parser.add_argument("--device", default="cpu", help="mujoco_warp: cuda, or cpu (warp's CPU device, slow)")
    parser.add_argument("--graph", action="store_true", help="mujoco_warp: replay each step from a CUDA graph")
    parser.add_argument("--ppo", type=int, default=0, help="also PPO end to end: this many timed iterations")
    parser.add_argument("--torch-threads", type=int, default=0, help="--ppo: torch threads (0: the config's)")
    parser.add_argument("--update-threads", type=int, default=0, help="--ppo: torch threads of the update only")
    args = parse_smoke_args(parser, smoke={"envs": [4], "threads": [1], "steps": 5, "ppo": 1})
    if args.backend == "mujoco_warp":
        for num_envs in args.envs:
            rate = warp_rate(num_envs, args.steps, args.device, args.graph)
            print(
                f"quadruped task on mujoco_warp ({args.device}{', graph' if args.graph else ''}), {num_envs} envs: "
                f"{rate:.0f} env steps/s",
                flush=True,
            )
        return
    torch.set_num_threads(1)
    print("envs threads | env steps/s | raw mujoco.rollout steps/s | env/raw | physics% terms% rest% of the env step")
    for threads in args.threads:
        for num_envs in args.envs:
            rate, split = env_rate(num_envs, threads, args.steps)
            shares = " ".join(f"{100 * split[key] / split['elapsed']:.0f}%" for key in ("physics", "terms", "rest"))
            print(
                f"{num_envs:5d} {threads:2d} | {rate:9.0f} | {split['raw']:9.0f} | {rate / split['raw']:.2f} | "
                f"{shares}",
                flush=True,
            )
            if args.ppo:
                ppo = ppo_rate(num_envs, threads, args.ppo, args.torch_threads, args.update_threads)
                print(
                    f"      PPO end to end ({ppo['torch_threads']} torch threads, update {ppo['update_threads']}): "
                    f"{ppo['rate']:.0f} env steps/s, {ppo['rate'] / split['raw']:.2f} of raw | per iteration "
                    f"{ppo['iteration']:.2f} s: collect {ppo['collect']:.2f} s, advantages {ppo['advantages']:.2f} s, "
                    f"update {ppo['update']:.2f} s",
                    flush=True,
                )
                # the ceiling: collection at raw physics' speed and the update at the matrix product's rate
                physics_s = ppo["steps"] / split["raw"]
                update_s = ppo["update_flops"] / ppo["matmul_rate"]
                print(
                    f"      update arithmetic {ppo['update_flops'] / 1e9:.1f} GFLOP an iteration: "
                    f"{ppo['update_flops'] / ppo['update'] / 1e9:.0f} GFLOP/s in the update, against "
                    f"{ppo['matmul_rate'] / 1e9:.0f} GFLOP/s for its layers' products alone (forward, minibatch "
                    f"rows) | ceiling (raw physics, then the update at that rate): "
                    f"{physics_s / (physics_s + update_s):.2f} of raw",
                    flush=True,
                )


if __name__ == "__main__":
    main()
