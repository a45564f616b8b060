r"""Fault figures of a fleet run: robot processes SIGKILLed mid-collection; what it costs; the hub stays sound.

Shapes: R robots, K kills per run, S rows in the hub, D obs dim.

    .venv/bin/python benchmarks/fleet_faults.py --kills 0 1 3 --seeds 0 1 2
    .venv/bin/python benchmarks/fleet_faults.py --kills 0 3 --seeds 0 --steps-per-robot 200 \
        --set policy.hidden=[32,32] algo.critic_hidden=[32,32] algo.loop.learning_starts=100 algo.loop.batch_size=32
    .venv/bin/python benchmarks/fleet_faults.py --smoke    # CI: 2 robots, 1 kill, 150 steps each, 32-wide networks

Every run is ``configs/fleet_sac_reach.yaml`` (R = 4 robots, SAC + HER on mujoco/GripperReach) with ``seed``,
``fleet.steps_per_robot``, ``fleet.cpus_per_robot``, ``log.eval_episodes=0``, ``log.progress=false``, a temporary
``log.run_root`` and any ``--set KEY=VALUE``, built with ``robopt.build.build_loop`` on one local Ray started by
this script (``--num-cpus`` CPUs), and driven by ``loop.iteration`` until ``loop.finished``. A killer thread
draws K kill marks uniform in [0.1, 0.8] x (R x steps_per_robot) env steps (numpy seeded with (seed, K)); once
``loop.env_steps`` passes a mark it waits U(0, --jitter) s, picks (same generator) one robot among those not yet
killed that are still collecting (collected < steps_per_robot), and sends SIGKILL to its process (pid from
``worker.pid.remote()`` before the run): K distinct robots, each killed once, during its collection. Which robot
a mark hits depends on the timing, so runs are seeded but not bit-reproducible. Ray restarts a killed robot.

Per run:
    completed     the loop reached ``finished`` (else the exception's first line; --timeout counts as failure)
    killed        SIGKILLs sent (< K only if no robot was left collecting at a mark)
    restarts      the loop's ``worker_restarts`` (one per killed robot that got a call after its restart)
    dead          robots the loop gave up on (three failed calls in a row that were not Ray's "restarting")
    lost          env steps the robots took that never reached the hub, from two parts:
        held      exact: sum over robots of collected[r] - hub transitions[r] - pending_end[r], where collected is
                  the steps the loop credited (returned calls), hub transitions what the hub accepted and
                  pending_end the unfinished episode each live robot holds at the end (``worker.pending``; an end
                  of run, not a fault). What is left is the credited rows of episodes a killed process held.
                  With collect_steps = 50 = the task's episode length every call ends its episode, so it is 0.
        in-flight the steps a killed call had taken before the process died; the driver cannot read them, so:
                  est = collect_steps x clamp((kill time - submit time) / median returned-call time, 0, 1) per
                  call that failed and was sent before its robot's kill (``in-flight`` column; wrapped
                  ``loop._submit``/``loop._ingest`` time every call); calls sent to the dead or restarting actor
                  after the kill fail with 0 steps taken. lost est = held + in-flight est;
                  lost max = held + in-flight calls x collect_steps.
    corrupted     hub rows breaking the experience contract (must be 0): a non-finite obs/action/reward/next_obs;
                  rows after the last terminated|truncated (an open episode); an untagged row; and every row of an
                  episode whose rows disagree on robot, policy version or ``episode_id``, whose ``episode_id`` is
                  not the previous episode's + 1, whose ``episode_start`` is not its first step, whose
                  ``episode_end`` entry is not its last step, or whose obs[t+1] != next_obs[t] inside it.
                  ``counters`` checks the hub's per-robot transition and episode counters against the rows.
    stall s       sum over iterations of the loop's ``learner_stall_seconds``;  wall s: the iteration loop's time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "fleet_sac_reach.yaml"
COLUMNS = (("kills", 5), ("seed", 4), ("done", 4), ("killed", 6), ("restarts", 8), ("dead", 4), ("in-flight", 9),
           ("held", 5), ("lost est", 8), ("lost max", 8), ("pushed", 7), ("corrupted", 9), ("counters", 8),
           ("stall s", 8), ("wall s", 7))  # fmt: skip
HEADER = " ".join(f"{label:>{width}}" for label, width in COLUMNS)


class Killer(threading.Thread):
    """Once ``loop.env_steps`` passes each of ``marks`` and its delay ran out, SIGKILLs a robot still collecting."""

    def __init__(self, loop, marks: list[float], delays: list[float], rng: np.random.Generator, steps: int) -> None:
        super().__init__(name="fleet-killer", daemon=True)
        self.loop, self.marks, self.delays, self.rng, self.steps = loop, marks, delays, rng, steps
        self.pids: list[int] = []  # each robot's process id (set before start)
        self.stop = threading.Event()
        self.killed: dict[int, float] = {}  # robot -> perf_counter time of its SIGKILL

    def run(self) -> None:
        for mark, delay in zip(self.marks, self.delays):
            while self.loop.env_steps < mark:
                if self.stop.wait(0.005):
                    return
            if self.stop.wait(delay):
                return
            collected = list(self.loop.collected)
            alive = [r for r in range(len(self.pids)) if r not in self.killed and collected[r] < self.steps]
            if not alive:
                continue
            robot = alive[int(self.rng.integers(len(alive)))]
            try:
                os.kill(self.pids[robot], signal.SIGKILL)
                self.killed[robot] = time.perf_counter()
            except ProcessLookupError:
                pass


def instrument(loop) -> dict:
    """Wrap ``loop._submit``/``loop._ingest`` to time each call: returned durations, failed (robot, sent, steps)."""
    calls = {"sent": {}, "durations": [], "failed": []}
    submit, ingest = loop._submit, loop._ingest

    def timed_submit() -> None:
        before = set(loop.inflight)
        submit()
        now = time.perf_counter()
        calls["sent"].update({ref: now for ref in loop.inflight if ref not in before})

    def timed_ingest(ref, stats) -> None:
        robot, steps, _ = loop.inflight[ref]
        sent, credited, restarts = calls["sent"].pop(ref, None), loop.collected[robot], loop.restarts
        ingest(ref, stats)
        if loop.collected[robot] > credited:
            calls["durations"].append(time.perf_counter() - sent)
        elif loop.restarts == restarts:  # neither returned nor WorkerRestarted: the call died with its process
            calls["failed"].append((robot, sent, steps))

    loop._submit, loop._ingest = timed_submit, timed_ingest
    return calls


def scan_hub(hub) -> tuple[int, bool]:
    """(rows breaking the experience contract, per-robot counters match the rows) of ``hub`` (module doc)."""
    storage = hub.storage
    T, t = storage.capacity_per_env, storage.tensors
    steps = torch.arange(storage.oldest_step, storage.steps)  # [S] absolute steps, oldest first
    if steps.numel() == 0:
        return 0, True
    slots = torch.remainder(steps, T)
    row = {
        name: t[name][slots, 0]
        for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "episode_id", "episode_start")
    }
    robot, version = hub.sampler.robot[slots], hub.sampler.slot_version[slots]  # [S]
    bad = ~(
        torch.isfinite(row["obs"]).all(-1)
        & torch.isfinite(row["action"]).all(-1)
        & torch.isfinite(row["reward"])
        & torch.isfinite(row["next_obs"]).all(-1)
    )
    bad |= robot < 0
    done = row["terminated"] | row["truncated"]  # [S]
    ends = done.nonzero()[:, 0]
    bad[(int(ends[-1]) + 1 if ends.numel() else 0) :] = True  # an open episode at the end
    seg = torch.cumsum(done.long(), 0) - done.long()  # [S] episode ordinal of each row
    first = torch.ones_like(done)
    first[1:] = done[:-1]  # [S] the row starts an episode
    episode_bad = torch.zeros(int(seg[-1]) + 1, dtype=torch.bool)
    same = ~first[1:]  # row r+1 continues row r's episode
    broken = same & (
        (robot[1:] != robot[:-1])
        | (version[1:] != version[:-1])
        | (row["episode_id"][1:] != row["episode_id"][:-1])
        | (row["obs"][1:] != row["next_obs"][:-1]).any(-1)
    )
    broken |= first[1:] & (row["episode_id"][1:] != row["episode_id"][:-1] + 1)
    episode_bad[seg[1:][broken]] = True
    start = steps[first][seg]  # [S] first step of each row's episode
    wrapped = (seg == 0) & (storage.oldest_step > 0)  # the oldest episode may have begun before the ring's rows
    episode_bad[seg[~wrapped & (row["episode_start"] != start)]] = True
    end_steps = t["episode_end"][torch.remainder(row["episode_id"][ends], T), 0]
    episode_bad[seg[ends][end_steps != steps[ends]]] = True
    bad |= episode_bad[seg]
    transitions = [int((robot == r).sum()) for r in range(hub.num_robots)]
    episodes = [int((done & (robot == r)).sum()) for r in range(hub.num_robots)]
    match = transitions == hub.counters["transitions"] and episodes == hub.counters["episodes"]
    return int(bad.sum()), bool(storage.oldest_step > 0 or match)  # a wrapped ring has lost counted rows


def run_one(args, kills: int, seed: int, root: str) -> dict:
    """One fleet run with ``kills`` robots' processes killed; the module doc's figures."""
    import ray

    from robopt.build import build_loop
    from robopt.experiment import load_config

    overrides = [f"seed={seed}", f"fleet.steps_per_robot={args.steps_per_robot}",
                 f"fleet.cpus_per_robot={args.cpus_per_robot}", "log.eval_episodes=0", "log.progress=false",
                 f"log.run_root={root}", *args.set]  # fmt: skip
    config = load_config(CONFIG, overrides)
    R, row = config.fleet.num_robots, {"kills": kills, "seed": seed}
    if kills > R:
        return {**row, "error": f"--kills {kills} is more than the {R} robots"}
    rng = np.random.default_rng([seed, kills])
    marks = (np.sort(rng.uniform(0.1, 0.8, kills)) * R * args.steps_per_robot).tolist()
    delays = rng.uniform(0, args.jitter, kills).tolist()
    loop, error, stall = build_loop(config), "", 0.0
    calls, begin = instrument(loop), time.perf_counter()
    killer = Killer(loop, marks, delays, rng, args.steps_per_robot)
    try:
        killer.pids = ray.get([worker.pid.remote() for worker in loop.workers])
        begin = time.perf_counter()
        killer.start()
        while not loop.finished:
            if time.perf_counter() - begin > args.timeout:
                raise TimeoutError(f"not finished after --timeout {args.timeout:g} s")
            stall += loop.iteration(loop.env_steps / (R * args.steps_per_robot))["learner_stall_seconds"]
    except Exception as exception:  # noqa: BLE001 (reported in the row)
        error = (str(exception).strip().splitlines() or [""])[0] or type(exception).__name__
    wall = time.perf_counter() - begin
    try:
        killer.stop.set()
        if killer.is_alive():
            killer.join()
        hub, steps, pending = loop.hub, config.fleet.collect_steps, []
        for worker in loop.workers:
            try:
                pending.append(len(ray.get(worker.pending.remote(), timeout=30)))
            except Exception:  # noqa: BLE001 (a robot that is gone for good holds nothing)
                pending.append(0)
        held = sum(c - p - e for c, p, e in zip(loop.collected, hub.counters["transitions"], pending))
        median = statistics.median(calls["durations"]) if calls["durations"] else float("inf")
        inflight, inflight_calls = 0.0, 0
        for robot, sent, size in calls["failed"]:
            killed = killer.killed.get(robot, float("inf"))  # a failure not caused by a kill: bounded by its size
            if sent < killed:
                inflight_calls += 1
                inflight += size * min((killed - sent) / median, 1.0)
        corrupted, counters = scan_hub(hub)
        return {
            **row,
            "completed": not error,
            "error": error,
            "restarts": loop.restarts,
            "killed": len(killer.killed),
            "dead": len(loop.dead),
            "failed_calls": len(calls["failed"]),
            "inflight_calls": inflight_calls,
            "held": held,
            "lost_est": held + round(inflight),
            "lost_max": held + inflight_calls * steps,
            "pushed": sum(hub.counters["transitions"]),
            "env_steps": loop.env_steps,
            "pending_end": sum(pending),
            "rejected": hub.counters["rejected_batches"],
            "corrupted": corrupted,
            "counters": counters,
            "stall": stall,
            "wall": wall,
            "updates": loop.updates,
        }
    finally:
        loop.close()


def print_row(r: dict) -> None:
    if "restarts" not in r:
        print(f"{r['kills']:>5} {r['seed']:>4} error: {r['error']}", flush=True)
        return
    print(
        f"{r['kills']:>5} {r['seed']:>4} {'yes' if r['completed'] else 'no':>4} {r['killed']:>6} "
        f"{r['restarts']:>8} {r['dead']:>4} {r['inflight_calls']:>9} {r['held']:>5} {r['lost_est']:>8} "
        f"{r['lost_max']:>8} {r['pushed']:>7} {r['corrupted']:>9} {'ok' if r['counters'] else 'WRONG':>8} "
        f"{r['stall']:>8.2f} {r['wall']:>7.1f}" + ("" if r["completed"] else f"  ({r['error']})"),
        flush=True,
    )


def print_summary(results: list[dict]) -> None:
    print("\nsummary: mean over seeds (completed runs / runs; corrupted rows summed over runs)")
    header = (
        f"{'kills':>5} {'completed':>9} {'restarts':>8} {'lost est':>8} {'lost max':>8} {'corrupted':>9} "
        f"{'stall s':>8} {'wall s':>7}"
    )
    print(header + "\n" + "-" * len(header))
    for kills in dict.fromkeys(r["kills"] for r in results):
        rows = [r for r in results if r["kills"] == kills and "restarts" in r]
        if not rows:
            print(f"{kills:>5} {'0/' + str(sum(r['kills'] == kills for r in results)):>9}")
            continue

        def mean(key: str, rows: list[dict] = rows) -> float:
            return sum(r[key] for r in rows) / len(rows)

        completed = f"{sum(r['completed'] for r in rows)}/{sum(r['kills'] == kills for r in results)}"
        print(
            f"{kills:>5} {completed:>9} {mean('restarts'):>8.2f} "
            f"{mean('lost_est'):>8.1f} {mean('lost_max'):>8.1f} {sum(r['corrupted'] for r in rows):>9} "
            f"{mean('stall'):>8.2f} {mean('wall'):>7.1f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, nargs="+", default=[0, 1, 3], help="robots killed per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps-per-robot", type=int, default=1500, help="fleet.steps_per_robot")
    parser.add_argument("--cpus-per-robot", type=float, default=0.25, help="fleet.cpus_per_robot")
    parser.add_argument("--num-cpus", type=int, default=0, help="CPUs of the local Ray (0: all of this machine's)")
    parser.add_argument("--jitter", type=float, default=0.2, help="kill delay after its mark: U(0, jitter) s")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a run counts as failed")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more config overrides")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    tiny = [
        "fleet.num_robots=2",
        "policy.hidden=[32,32]",
        "algo.critic_hidden=[32,32]",
        "algo.loop.learning_starts=50",
        "algo.loop.batch_size=32",
    ]
    smoke = {"kills": [1], "steps_per_robot": 150, "jitter": 0.0, "timeout": 120.0, "set": tiny}
    args = parse_smoke_args(parser, smoke=smoke)
    if min(args.kills) < 0 or args.steps_per_robot < 1 or args.jitter < 0 or args.timeout <= 0:
        parser.error("--kills must be >= 0, --steps-per-robot >= 1, --jitter >= 0 and --timeout > 0")
    import ray

    from robopt.config import ConfigError
    from robopt.fleet import ray_runtime
    from robopt.fleet.config import FleetConfig

    print(
        f"fleet_faults {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"ray {ray.__version__} | python {sys.version.split()[0]} | CPUs {os.cpu_count()} | "
        f"{' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    print(f"config {CONFIG.name}; steps_per_robot {args.steps_per_robot}; lost = held + in-flight (module doc)")
    print(HEADER + "\n" + "-" * len(HEADER), flush=True)
    results, started = [], False
    try:
        started = ray_runtime.start(FleetConfig(num_cpus=args.num_cpus))
        with tempfile.TemporaryDirectory(prefix="fleet_faults_") as root:
            for kills in args.kills:
                for seed in args.seeds:
                    try:
                        result = run_one(args, kills, seed, root)
                    except (ConfigError, ValueError) as error:  # a bad --set or a robot that cannot start
                        result = {"kills": kills, "seed": seed, "error": str(error).splitlines()[0]}
                    results.append(result)
                    print_row(result)
    finally:
        ray_runtime.shutdown(started)
    print_summary(results)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))
    return 0 if all(r.get("completed") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
