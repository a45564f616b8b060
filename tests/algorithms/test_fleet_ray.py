"""Fleet on a local Ray (2 CPUs, one session for the module): robots, faults, quarantine, resume, CLI end to end.

The task is mujoco/InvertedPendulum capped at 20 steps (random actions end episodes in a few steps), 2 robots with
their own fixed body-mass scale, SAC with 16-wide networks.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from fleet_configs import make_config  # noqa: E402

from robopt.checkpoint import load_checkpoint  # noqa: E402
from robopt.config import ConfigError, build_dataclass, config_to_dict  # noqa: E402
from robopt.experiment import ExperimentConfig  # noqa: E402
from robopt.fleet import ray_runtime  # noqa: E402
from robopt.fleet.build import build_fleet_loop  # noqa: E402
from robopt.fleet.config import (  # noqa: E402
    FleetConfig,
    hub_fingerprint,
    robot_env_kwargs,
    robot_randomization,
    robot_seed,
)
from robopt.fleet.worker import robot_actor  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONNECT_SCRIPT = """
import json, time
from robopt.config import ConfigError
from robopt.fleet.ray_runtime import connect
out = []
for address in ["ray://127.0.0.1:PORT", "127.0.0.1:PORT"]:
    start = time.monotonic()
    try:
        connect(address, 2.0)
        out.append("connected")
    except ConfigError as error:
        out.append([str(error), time.monotonic() - start])
print(json.dumps(out))
"""
KEYS = {"robot", "version", "obs", "action", "reward", "next_obs", "terminated", "truncated"}


def episodes_of(done: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end] row ranges of the episodes in a stream of done flags that ends with one."""
    ends = done.nonzero()[:, 0].tolist()
    return list(zip([0] + [end + 1 for end in ends[:-1]], ends))


def check_whole_episode(exp: dict) -> None:
    done = exp["terminated"] | exp["truncated"]
    assert bool(done[-1]) and int(done.sum()) == 1  # one whole episode per dict
    assert torch.equal(exp["obs"][1:], exp["next_obs"][:-1])  # consecutive rows of one episode


# One worker runs this module under pytest-xdist: one Ray at a time, and the module's Ray is shared by its tests.
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module", autouse=True)
def private_ray_temp_dir():
    """Ray's session files (this process's Ray and the CLI test's) in a directory of this module's, removed after.

    Made with mkdtemp in the system temp dir rather than under pytest's basetemp: Ray's socket paths must stay
    under 108 bytes, and a basetemp under xdist is already about 40.
    """
    directory = tempfile.mkdtemp(prefix="robopt-ray-test-")
    previous = os.environ.get(ray_runtime.TEMP_DIR_VARIABLE)
    os.environ[ray_runtime.TEMP_DIR_VARIABLE] = directory
    yield directory
    if previous is None:
        os.environ.pop(ray_runtime.TEMP_DIR_VARIABLE, None)
    else:
        os.environ[ray_runtime.TEMP_DIR_VARIABLE] = previous
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def local_ray(private_ray_temp_dir):
    started = ray_runtime.start(FleetConfig(num_cpus=2))
    yield
    ray_runtime.shutdown(started)


def test_refusals_before_any_robot_starts(local_ray):
    config = build_dataclass(ExperimentConfig, {**config_to_dict(make_config()), "env": {"id": "mujoco/NoSuchTask"}})
    with pytest.raises(ConfigError, match="unknown native task 'mujoco/NoSuchTask'"):
        build_fleet_loop(config)
    with pytest.raises(ConfigError) as error:
        build_fleet_loop(make_config(num_robots=3))  # 3 x 1 CPU on a 2-CPU Ray
    assert "needs 3 CPUs but this process's Ray has 2" in str(error.value) and "\n" not in str(error.value)
    assert ray.available_resources().get("CPU") == 2.0  # no actor holds a CPU
    with pytest.raises(ConfigError, match="needs 4 CPUs but the local Ray"):  # embedded Ray: checked before ray.init
        ray_runtime.check_cpus(4.0, 2.0, "the local Ray (fleet.num_cpus)")


def test_unreachable_address_fails_fast_with_one_line():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ConfigError, match=f"fleet.address='ray://127.0.0.1:{closed_port}' is unreachable"):
        ray_runtime.connect(f"ray://127.0.0.1:{closed_port}", 10.0)
    assert time.monotonic() - start < 5
    # A port that accepts connections but never answers as Ray: the thread timeout. In a subprocess, so that the
    # connect thread left behind cannot touch this module's Ray session. ("auto" is not tested: Ray finds any
    # cluster running on this machine by its processes, this module's own too.)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        script = CONNECT_SCRIPT.replace("PORT", str(port))
        env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
        start = time.monotonic()
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
        elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-2000:]
    (client, gcs) = json.loads(result.stdout.strip().splitlines()[-1])
    # 2 s asked; Ray's own timeouts are 30 s and more. Under 10 s proves the 2 s bound holds; the margin is for a
    # loaded machine (3.08 s seen with the suite on both cores)
    assert "no Ray cluster answered within 2 s" in client[0] and client[1] < 10
    assert "no Ray cluster answered within 2 s" in gcs[0] and gcs[1] < 10
    assert elapsed < 30


def test_worker_loads_the_first_weights_and_seeds_its_own_noise(local_ray):
    """Version 0 weights are loaded (a worker starts at version 0 but holds none); robots draw different noise."""
    from robopt.build import build_env, build_policy

    config = make_config()
    probe = build_env(config, num_envs=1)
    weights = build_policy(config, probe).state_dict()
    probe.close()
    actor = robot_actor(0.5, 0)
    workers = [actor.remote(config, r, robot_env_kwargs(config, r), robot_seed(config.seed, r)) for r in (0, 1)]
    try:
        ray.get([worker.collect.remote(1, weights, 0, False) for worker in workers])
        held = ray.get(workers[0].__ray_call__.remote(lambda self: self.policy.state_dict()))
        draws = ray.get([worker.__ray_call__.remote(lambda self: torch.randn(4)) for worker in workers])
    finally:
        for worker in workers:
            ray.kill(worker)
    assert all(torch.equal(held[name], value) for name, value in weights.items())
    assert not torch.equal(draws[0], draws[1])  # the generator SAC's act samples from differs between robots


def test_worker_sends_whole_tagged_episodes_and_keeps_the_unfinished_one(local_ray):
    from robopt.build import build_env, build_policy

    config = make_config()
    worker = robot_actor(1.0, 0).remote(config, 1, robot_env_kwargs(config, 1), robot_seed(config.seed, 1))
    try:
        first = ray.get(worker.collect.remote(29, None, 0, True))
        pending = ray.get(worker.pending.remote())
        probe = build_env(config, num_envs=1)
        weights = build_policy(config, probe).state_dict()
        probe.close()
        second = ray.get(worker.collect.remote(30, weights, 3, False))
        stats, dynamics = ray.get([worker.stats.remote(), worker.randomization.remote()])
    finally:
        ray.kill(worker)
    assert first and second and len(pending) > 0
    for exp in first + second:
        assert set(exp) == KEYS and exp["robot"] == 1
        check_whole_episode(exp)
        assert bool((exp["action"].abs() <= 3.0).all())  # InvertedPendulum's bounds
    assert [exp["version"] for exp in first] == [0] * len(first)
    # the episode left open by the first call continues in the second; it began under version 0, the rest under 3
    assert torch.equal(second[0]["obs"][: len(pending)], pending)
    assert [exp["version"] for exp in second] == [0] + [3] * (len(second) - 1)
    assert sum(exp["obs"].shape[0] for exp in first + second) <= 59
    assert stats == {"robot": 1, "steps": 59, "episodes": len(first) + len(second), "calls": 2}
    mass = robot_randomization(config.fleet.randomization, config.seed, 1)["body_mass"][0]
    assert dynamics.body_mass == (mass, mass)


@pytest.fixture(scope="module")
def fleet_run(local_ray):
    """A 2-robot SAC run in which robot 1's process is killed after two iterations."""
    config = make_config(max_restarts=2)
    loop = build_fleet_loop(config)
    try:
        for _ in range(2):
            loop.iteration(0.0)
        mid_state = copy.deepcopy(loop.state_dict())
        pending = torch.zeros(0, 4)
        while len(pending) == 0 and not loop.finished:  # kill while robot 1 holds part of an episode
            pending = ray.get(loop.workers[1].pending.remote())
            if len(pending) == 0:
                loop.iteration(0.0)
        os.kill(ray.get(loop.workers[1].pid.remote()), signal.SIGKILL)
        history = []
        while not loop.finished:
            history.append(loop.iteration(0.5))
        hub = loop.hub
        size = hub.size
        result = {
            "config": config, "mid_state": mid_state, "pending": pending, "history": history, "size": size,
            "obs": hub.storage.tensors["obs"][:size, 0].clone(), "next_obs": hub.storage.tensors["next_obs"][:size, 0],
            "done": (hub.storage.tensors["terminated"] | hub.storage.tensors["truncated"])[:size, 0].clone(),
            "robot": hub.sampler.robot[:size].clone(), "counters": copy.deepcopy(hub.counters),
            "restarts": loop.restarts, "env_steps": loop.env_steps, "collected": list(loop.collected),
            "updates": loop.updates, "version": loop.version, "pushed": loop.pushed,
        }  # fmt: skip
    finally:
        loop.close()
    return result


def test_fleet_experience_arrives_tagged_and_whole(fleet_run):
    run = fleet_run
    assert run["env_steps"] == 360 and run["collected"] == [180, 180]
    assert bool(run["done"][-1])
    for start, end in episodes_of(run["done"]):
        robots = run["robot"][start : end + 1]
        assert bool((robots == robots[0]).all())  # one robot per episode, rows contiguous
        assert torch.equal(run["obs"][start + 1 : end + 1], run["next_obs"][start:end])
    per_robot = [int((run["robot"] == robot).sum()) for robot in (0, 1)]
    assert per_robot == run["counters"]["transitions"] and sum(per_robot) == run["size"] == run["pushed"]
    assert 180 - 19 <= per_robot[0] <= 180  # only the unfinished last episode (< 20 rows) stays out
    assert run["version"] == run["updates"] // 4 and run["updates"] > 0
    # update budget: gradient_steps (2) per train_freq x R (2) transitions past learning_starts, all done at the end
    assert run["updates"] == run["pushed"] - 40 + 2
    metrics = run["history"][-1]
    assert metrics["hub_size"] == run["size"] and metrics["policy_version"] == run["version"]
    lags = [row for row in run["history"] if "policy_lag_max" in row]
    assert lags and all(row["policy_lag_max"] >= row["policy_lag_mean"] >= 0 for row in lags)
    assert {"robot0_steps_per_second", "robot1_steps_per_second", "versions_in_flight", "learner_stall_seconds"} <= set(
        metrics
    )


def test_killed_robot_restarts_and_its_unfinished_episode_never_reaches_the_hub(fleet_run):
    run = fleet_run
    assert run["restarts"] == 1 and run["history"][-1]["worker_restarts"] == 1.0
    pending = run["pending"]
    assert len(pending) > 0
    matches = (run["obs"][:, None, :] == pending[None, :, :]).all(-1)  # [rows, k]
    assert not bool(matches.any())
    lost = len(pending)
    assert 180 - lost - 19 <= run["counters"]["transitions"][1] <= 180 - lost


def test_resume_restores_learner_and_hub_and_finishes_the_run(fleet_run):
    run, config = fleet_run, fleet_run["config"]
    mid = run["mid_state"]
    other = make_config(randomization={"body_mass": [0.8, 1.2]})
    assert hub_fingerprint(other) != hub_fingerprint(config)
    loop = build_fleet_loop(config)
    try:
        with pytest.raises(ValueError, match="hub checkpoint is from another config"):
            loop.load_state_dict({**mid, "hub": {**mid["hub"], "fingerprint": hub_fingerprint(other)}})
        loop.load_state_dict(mid)
        size = loop.hub.size
        assert size == sum(mid["hub"]["counters"]["transitions"]) > 0
        for name, value in mid["policy"].items():
            assert torch.equal(loop.policy.state_dict()[name], value)
        assert (loop.version, loop.updates, loop.collected, loop.life) == (
            mid["version"],
            mid["updates"],
            mid["collected"],
            1,
        )
        kept = loop.hub.storage.tensors["obs"][:size, 0].clone()
        while not loop.finished:
            loop.iteration(0.5)
        assert loop.env_steps == 360 and loop.collected == [180, 180] and loop.restarts == 0
        assert torch.equal(loop.hub.storage.tensors["obs"][:size, 0], kept)  # the restored rows stay in place
        assert torch.equal(kept, run["obs"][:size])  # and are the original run's first rows
        assert loop.updates > mid["updates"] and loop.version >= mid["version"]
    finally:
        loop.close()


def test_robot_sending_nan_is_quarantined_and_the_run_finishes(local_ray):
    loop = build_fleet_loop(make_config(steps_per_robot=90), worker_options={1: {"corrupt_after": 1}})
    try:
        while not loop.finished:
            metrics = loop.iteration(0.0)
        hub = loop.hub
        assert hub.quarantined == {1} and "robot 1: non-finite reward" in hub.quarantine_reasons[1]
        assert loop.collected == [90, 60]  # robot 1 got no call after its poisoned second one
        assert hub.counters["rejected_batches"] == 1 and 0 < hub.counters["transitions"][1] <= 30
        assert bool(torch.isfinite(hub.storage.tensors["reward"][: hub.size]).all())
        assert metrics["hub_quarantined"] == 1.0
    finally:
        loop.close()


def goal_episode(robot: int, obs: torch.Tensor, action: torch.Tensor, success: bool) -> dict:
    rows = obs.shape[0]
    truncated = torch.zeros(rows, dtype=torch.bool)
    truncated[-1] = True
    return {
        "robot": robot,
        "version": 0,
        "obs": obs,
        "action": action,
        "reward": -torch.ones(rows),
        "next_obs": torch.cat([obs[1:], obs[-1:]]),
        "terminated": torch.zeros(rows, dtype=torch.bool),
        "truncated": truncated,
        "success": torch.tensor([success]),
    }


@pytest.mark.parametrize("variant", ["plain", "exp_weighted_linear"])
def test_fert_clones_the_successful_action_nearest_to_a_failure(local_ray, variant):
    """The learner side alone (no robot actor): a successful and a failed episode go in, a FERT update comes out.

    ``exp_weighted_linear``: the advantage-weighted loss (exp weights, always > 0) and a weight decaying to 0 at the
    end of the run, where the cloning step must leave the actor as it is."""
    from robopt.algorithms.sac import SAC
    from robopt.build import build_env, build_policy
    from robopt.fleet.hub import hub_from_schedule
    from robopt.fleet.loop import FleetLoop
    from robopt.fleet.retrieval import FertTargets, SuccessPool

    options = {"fert_weighting": "exp", "fert_schedule": "linear"} if variant != "plain" else {}
    data = config_to_dict(make_config(fert=True, fert_window=3, fert_k=1, randomization={}, **options))
    data["env"] = {"id": "mujoco/GripperReach"}
    data["algo"]["loop"].update(learning_starts=0, batch_size=8)
    config = build_dataclass(ExperimentConfig, data)
    probe = build_env(config, num_envs=1)
    policy = build_policy(config, probe)
    hub = hub_from_schedule(config.algo.loop, config.algo.gamma, probe, 2, policy=policy)
    pool = SuccessPool(probe.obs_dim, probe.action_dim, 3, 100)
    fert = FertTargets(pool, k=1, weighting=config.fleet.fert_weighting)
    loop = FleetLoop(config, probe, policy, SAC(config.algo, policy, probe), hub, [], False, 100, fert)
    try:
        generator = torch.Generator().manual_seed(0)
        good_obs, good_action = torch.randn(10, 9, generator=generator), torch.rand(10, 3, generator=generator) - 0.5
        # the failure's last 3 observations lie next to the successful window obs[4:7], which ends at step 6
        bad_obs = torch.cat([torch.randn(2, 9, generator=generator), good_obs[4:7] + 0.01])
        stats = loop.new_stats()
        for robot, experience in (
            (0, goal_episode(0, good_obs, good_action, True)),
            (1, goal_episode(1, bad_obs, torch.zeros(5, 3), False)),
        ):
            ref = ray.put([experience])
            loop.inflight[ref] = (robot, experience["obs"].shape[0], 0)
            loop._ingest(ref, stats)
        assert len(pool) == 10 and stats["successes"] == [1.0, 0.0]
        assert torch.equal(loop.fert.obs, good_obs[6:7]) and torch.equal(loop.fert.action, good_action[6:7])
        loop._learn(0.0, stats)
        assert stats["updates"] == 2 and "fert_loss" in stats["sums"] and torch.isfinite(stats["sums"]["fert_loss"])
        assert torch.equal(loop.state_dict()["fert"]["obs"], good_obs[6:7])
        assert ("fert_weight" in stats["sums"]) == (variant != "plain")
        before = [parameter.detach().clone() for parameter in policy.parameters()]
        metrics = {}
        loop._clone_retrieved(1.0, metrics)  # end of the run: linear weight 0, constant weight fert_coef
        moved = any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
        assert "fert_loss" in metrics and moved == (variant == "plain")
        if variant != "plain":
            assert 0.0 < metrics["fert_weight"] <= 20.0
            loop._clone_retrieved(0.5, metrics)  # half way: half the weight, a step
            assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    finally:
        loop.close()


@pytest.mark.slow  # end to end in other processes: make test, not test-fast
def test_cli_trains_a_fleet_end_to_end_without_writing_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    overrides = [
        "total_steps=200", "fleet.num_robots=2", "fleet.num_cpus=2", "algo.loop.learning_starts=100",
        "algo.loop.batch_size=32", "policy.hidden=[32,32]", "algo.critic_hidden=[32,32]", "log.eval_episodes=2",
        "log.checkpoint_every=1", f"log.run_root={tmp_path / 'runs'}",
    ]  # fmt: skip
    command = [sys.executable, "-m", "robopt.cli", "train", "configs/fleet_sac_reach.yaml", "--no-progress", *overrides]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "env steps: 200" in result.stdout and "(FleetEnv)" in result.stdout
    (run_dir,) = (tmp_path / "runs" / "fleet_sac_reach").iterdir()
    assert list(run_dir.glob("events.out.tfevents*")) and (run_dir / "eval.json").is_file()
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")["loop"]
    assert state["env_steps"] == 200 and state["collected"] == [100, 100] and state["hub"]["fingerprint"]
    assert list(home.iterdir()) == []  # nothing in $HOME (Ray's auth token stays in the environment)
