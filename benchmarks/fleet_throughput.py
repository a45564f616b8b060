"""Experience-hub throughput: robots' episodes into the hub, and the hub's cost per transition against a local replay.

Shapes: W workers (robots), L rows of one episode, M recorded transitions, B batch, D obs dim, A action dim.

    .venv/bin/python benchmarks/fleet_throughput.py --workers 1 2 4 --seconds 20 --episodes 200 --repeats 5
    .venv/bin/python benchmarks/fleet_throughput.py --workers 1 2 --seconds 2 --episodes 10 --repeats 2 --samples 10
    .venv/bin/python benchmarks/fleet_throughput.py --smoke    # CI: 1 worker for 1 s, 4 episodes, 1 repeat

Everything uses ``configs/fleet_sac_reach.yaml`` (mujoco/GripperReach, 50-step episodes; ``--set KEY=VALUE``
changes it) on one local Ray that this script starts (``robopt.fleet.ray_runtime.start``, ``--num-cpus``) and
shuts down; the driver runs torch with ``--threads`` threads, like the fleet learner.

(a) Hub intake, no learner: for each W in --workers, W ``RobotWorker`` actors (``robot_actor``, ``--cpus-per-robot``
    each, robot r with its fixed dynamics and seed) make one warm-up call each (random actions, ``--collect-steps``
    env steps; not timed), then for --seconds every worker always has one such call in flight (``ray.wait``); the
    driver ``ray.get``s each finished call and ``hub.push``es its episodes into a fresh ``ExperienceHub``
    (``hub_from_schedule``: the config's buffer size and HER). trans/s = transitions accepted / wall time of the
    window (calls still in flight at its end are not counted); push % and get % = the driver's time inside
    ``hub.push`` and ``ray.get`` over that wall time.
(b) Write and sample cost, one process, no Ray in the timing: --episodes episodes (M transitions) recorded once from
    one worker (random actions) are written into a fresh buffer of capacity max(M, B) per repeat, in turn
    (i) ``hub.push`` per episode (validation, tagging, one ``extend_steps`` per episode), (ii) ``ReplayBuffer.extend``
    of ``build_replay`` one env step at a time, every tensor [1, ...] (the single-process off-policy loop with N = 1;
    the row views are made before the clock starts), (iii) ``ReplayBuffer.extend_steps`` per episode ([L, 1, ...]).
    Then --samples draws of ``hub.sample(B)`` and of ``replay.sample(B)`` from the filled hub and the buffer of (ii)
    (same data, both with the config's HER transform; one untimed draw first). Figures: median over --repeats
    (min .. max in brackets) of microseconds per transition written and per batch drawn.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "fleet_sac_reach.yaml"
FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


def start_workers(config, count: int, cpus: float) -> list:
    """``count`` robot actors of ``config`` (robot r: its fixed dynamics and seed), ready to collect."""
    from robopt.fleet.config import robot_env_kwargs, robot_seed
    from robopt.fleet.worker import robot_actor, wait_ready

    actor = robot_actor(cpus, 0)
    workers = [actor.remote(config, r, robot_env_kwargs(config, r), robot_seed(config.seed, r)) for r in range(count)]
    wait_ready(workers)
    return workers


def stop_workers(workers: list) -> None:
    import ray

    for worker in workers:
        ray.kill(worker, no_restart=True)


def hub_for(config, probe, robots: int, capacity: int):
    """A fresh hub of the config's schedule (HER, batch size) with ``capacity`` slots."""
    from robopt.fleet.hub import hub_from_schedule

    schedule = dataclasses.replace(config.algo.loop, buffer_size=capacity)
    return hub_from_schedule(schedule, config.algo.gamma, probe, robots)


def intake(args, config, probe, count: int) -> dict:
    """(a): W workers keep one call each in flight for ``args.seconds``; the driver pushes every episode."""
    import ray

    workers = start_workers(config, count, args.cpus_per_robot)
    try:
        ray.get([worker.collect.remote(args.collect_steps, None, 0, True) for worker in workers])  # warm-up
        hub = hub_for(config, probe, count, config.algo.loop.buffer_size)
        pushed = episodes = calls = 0
        push_s = get_s = 0.0
        inflight = {worker.collect.remote(args.collect_steps, None, 0, True): worker for worker in workers}
        begin = time.perf_counter()
        end = begin + args.seconds
        while (now := time.perf_counter()) < end:
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=end - now)
            for ref in ready:
                worker = inflight.pop(ref)
                start = time.perf_counter()
                batch = ray.get(ref)
                got = time.perf_counter()
                pushed += sum(hub.push(experience) for experience in batch)
                push_s, get_s = push_s + time.perf_counter() - got, get_s + got - start
                episodes, calls = episodes + len(batch), calls + 1
                inflight[worker.collect.remote(args.collect_steps, None, 0, True)] = worker
        wall = time.perf_counter() - begin
    finally:
        stop_workers(workers)
    return {
        "workers": count,
        "calls": calls,
        "episodes": episodes,
        "transitions": pushed,
        "wall": wall,
        "rate": pushed / wall,
        "push": push_s / wall,
        "get": get_s / wall,
        "rejected": hub.counters["rejected_batches"],
    }


def record(args, config) -> list[dict]:
    """``args.episodes`` whole episodes of random actions from one worker (robot 0)."""
    import ray

    (worker,) = start_workers(config, 1, args.cpus_per_robot)
    try:
        episodes: list[dict] = []
        while len(episodes) < args.episodes:
            episodes += ray.get(worker.collect.remote(max(args.collect_steps, 1000), None, 0, True))
    finally:
        stop_workers([worker])
    return episodes[: args.episodes]


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def costs(args, config, probe, episodes: list[dict]) -> dict[str, list[float]]:
    """(b): microseconds per transition written (three ways) and per batch drawn (two), one list per repeat."""
    from robopt.algorithms.offpolicy import build_replay

    total, B = sum(e["obs"].shape[0] for e in episodes), args.batch_size
    schedule = dataclasses.replace(config.algo.loop, buffer_size=max(total, B))
    steps = [tuple(e[name][t : t + 1] for name in FIELDS) for e in episodes for t in range(e["obs"].shape[0])]
    bulk = [tuple(e[name].unsqueeze(1) for name in FIELDS) for e in episodes]  # [L, 1, ...] each
    out: dict[str, list[float]] = {key: [] for key in ("push", "extend", "extend_steps", "hub_sample", "sample")}
    generator = torch.Generator().manual_seed(0)
    for _ in range(args.repeats):
        hub = hub_for(config, probe, 1, max(total, B))
        replay, bulk_replay = (build_replay(schedule, config.algo.gamma, probe) for _ in range(2))

        def push(hub=hub) -> None:
            for experience in episodes:
                hub.push(experience)

        def extend(replay=replay) -> None:
            for row in steps:
                replay.extend(*row)

        def extend_steps(replay=bulk_replay) -> None:
            for rows in bulk:
                replay.extend_steps(*rows)

        for key, function in (("push", push), ("extend", extend), ("extend_steps", extend_steps)):
            out[key].append(timed(function) / total * 1e6)
        assert hub.size == replay.size == bulk_replay.size == total, "a buffer did not take every transition"
        for key, draw in (("hub_sample", hub.sample), ("sample", replay.sample)):
            draw(B, generator)  # untimed: first-call work

            def sample(draw=draw) -> None:
                for _ in range(args.samples):
                    draw(B, generator)

            out[key].append(timed(sample) / args.samples * 1e6)
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):>9.2f} [{min(values):.2f} .. {max(values):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="robot actors in (a)")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed window of (a) per worker count")
    parser.add_argument("--collect-steps", type=int, default=200, help="env steps per collect call")
    parser.add_argument("--cpus-per-robot", type=float, default=0.25, help="CPUs Ray reserves per robot actor")
    parser.add_argument("--num-cpus", type=int, default=0, help="CPUs of the local Ray (0: all of this machine's)")
    parser.add_argument("--episodes", type=int, default=200, help="recorded episodes written in (b)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of (b); medians reported")
    parser.add_argument("--samples", type=int, default=200, help="timed sample calls per repeat in (b)")
    parser.add_argument("--batch-size", type=int, default=256, help="B of the sample calls")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the driver")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more config overrides")
    smoke = {
        "workers": [1],
        "seconds": 1.0,
        "collect_steps": 50,
        "episodes": 4,
        "repeats": 1,
        "samples": 2,
        "batch_size": 32,
        "set": ["algo.loop.batch_size=32"],
    }
    args = parse_smoke_args(parser, smoke=smoke)
    if (
        min(*args.workers, args.collect_steps, args.episodes, args.repeats, args.samples, args.batch_size, args.threads)
        < 1
        or args.seconds <= 0
        or args.cpus_per_robot <= 0
    ):
        parser.error("counts must be >= 1, --seconds and --cpus-per-robot > 0")
    import ray

    from robopt.build import build_env
    from robopt.config import ConfigError
    from robopt.experiment import load_config
    from robopt.fleet import ray_runtime
    from robopt.fleet.config import FleetConfig, robot_env_kwargs

    torch.set_num_threads(args.threads)
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    print(
        f"fleet_throughput {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"ray {ray.__version__} | python {sys.version.split()[0]} | CPUs {os.cpu_count()} ({usable} usable) | "
        f"torch threads {torch.get_num_threads()} | {' '.join(sys.argv[1:]) or '(defaults)'}"
    )
    started, probe = False, None
    try:
        config = load_config(CONFIG, args.set)
        probe = build_env(config, num_envs=1, **robot_env_kwargs(config, 0))
        started = ray_runtime.start(FleetConfig(num_cpus=args.num_cpus), max(args.workers) * args.cpus_per_robot)
        print(
            f"\n(a) hub intake: {config.env.id}, random actions, {args.collect_steps} env steps per call, one call "
            f"in flight per worker, {args.seconds:g} s after a warm-up call each, {args.cpus_per_robot:g} CPU "
            f"per worker, local Ray with {ray.cluster_resources().get('CPU', 0):g} CPUs"
        )
        header = (
            f"{'workers':>7} {'calls':>6} {'episodes':>8} {'transitions':>11} {'wall s':>7} {'trans/s':>9} "
            f"{'per worker':>10} {'push %':>7} {'get %':>6} {'rejected':>8}"
        )
        print(header + "\n" + "-" * len(header), flush=True)
        for count in args.workers:
            r = intake(args, config, probe, count)
            print(
                f"{r['workers']:>7} {r['calls']:>6} {r['episodes']:>8} {r['transitions']:>11} {r['wall']:>7.2f} "
                f"{r['rate']:>9.1f} {r['rate'] / count:>10.1f} {100 * r['push']:>7.2f} {100 * r['get']:>6.2f} "
                f"{r['rejected']:>8}",
                flush=True,
            )
        episodes = record(args, config)
        result = costs(args, config, probe, episodes)
    except (ConfigError, ValueError) as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    finally:
        if probe is not None:
            probe.close()
        ray_runtime.shutdown(started)
    total = sum(e["obs"].shape[0] for e in episodes)
    loop = config.algo.loop
    print(
        f"\n(b) write and sample cost: {len(episodes)} recorded episodes, {total} transitions, capacity "
        f"{max(total, args.batch_size)}; transforms: her_strategy={loop.her_strategy} her_k={loop.her_k} "
        f"n_step={loop.n_step}; median [min .. max] over {args.repeats} repeats"
    )
    print(f"{'write':<52} {'us/transition':>13}")
    print(f"{'(i)   hub.push, whole episodes (checked, tagged)':<52} {spread(result['push'])}")
    print(f"{'(ii)  ReplayBuffer.extend, one step [1, ...] per call':<52} {spread(result['extend'])}")
    print(f"{'(iii) ReplayBuffer.extend_steps, one episode per call':<52} {spread(result['extend_steps'])}")
    print(f"{'sample(' + str(args.batch_size) + '), ' + str(args.samples) + ' calls per repeat':<52} {'us/batch':>13}")
    print(f"{'hub.sample':<52} {spread(result['hub_sample'])}")
    print(f"{'replay.sample (build_replay, uniform sampler)':<52} {spread(result['sample'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
