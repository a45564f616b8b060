"""Data-parallel training (issue 23): the collective's reductions, PPO's gradient average, runs on 2 gloo ranks.

Ranks are real processes (``torch.multiprocessing`` spawn, or ``robopt train --nproc 2``) on the gloo backend.
Every reduction is compared with the same statistic computed in one process over the concatenated rows; the
sums run in another order, so floats are compared with a tolerance (1e-6 on O(1) numbers, DESIGN.md section 8).
A 2-rank run replayed with the same seed repeats the same kernels on the same shapes and is compared exactly.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from robopt.algorithms.offpolicy_updates import optimizer_step
from robopt.algorithms.ppo import PPO, PPOConfig
from robopt.algorithms.trpo import TRPO, TRPOConfig
from robopt.buffers.rollout import RolloutBatch
from robopt.build import build_loop
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
from robopt.config import ConfigError, build_dataclass, config_to_dict
from robopt.core.normalization import RewardScaler, RunningNormalizer
from robopt.distributed.collective import Collective, TorchCollective, rank_config
from robopt.experiment import ExperimentConfig
from robopt.policies import GaussianPolicy, ValueCritic
from robopt.policies.critics import QCritic
from tests.algorithms.test_ppo_update import A, D, small_batch

ROOT = Path(__file__).parents[2]
WEIGHT_ATOL = 1e-6  # the gradient average is exact; only the order of float32 sums differs

pytestmark = pytest.mark.xdist_group("data_parallel")  # two ranks each: one such test at a time on 2 cores


def _spawn(worker, tmp_path: Path, *args) -> None:
    """``worker(rank, tmp_path, *args)`` on 2 gloo ranks (spawned processes sharing a file store)."""
    torch.multiprocessing.start_processes(worker, (tmp_path, *args), nprocs=2, start_method="spawn")


def _join(rank: int, tmp_path: Path) -> TorchCollective:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=rank, world_size=2)
    return TorchCollective(torch.device("cpu"))


def _ppo_worker(rank: int, tmp_path: Path) -> None:
    collective = _join(rank, tmp_path)
    torch.manual_seed(0)
    policy = GaussianPolicy(D, A, -torch.ones(A), torch.ones(A), hidden=(16, 16))
    critic = ValueCritic(D, hidden=(16, 16))
    batch = small_batch(policy, 64)
    half = batch.index(torch.arange(32 * rank, 32 * (rank + 1)))  # this rank's share of the minibatch
    ppo = PPO(PPOConfig(epochs=3, minibatch_size=32), policy, critic)  # one minibatch per epoch: no shuffle effect
    ppo.use_collective(collective)
    metrics = ppo.update(half, 0.0)
    torch.save({"flat": ppo.updater.flat.detach().clone(), "kl": metrics["batch_approx_kl"]}, tmp_path / f"{rank}.pt")
    collective.close(synchronize=True)  # a rank leaving first can tear gloo down under the other (SIGABRT)


def test_one_update_on_two_ranks_equals_one_process_on_the_whole_minibatch(tmp_path):
    _spawn(_ppo_worker, tmp_path)
    torch.manual_seed(0)
    policy = GaussianPolicy(D, A, -torch.ones(A), torch.ones(A), hidden=(16, 16))
    critic = ValueCritic(D, hidden=(16, 16))
    batch = small_batch(policy, 64)
    ppo = PPO(PPOConfig(epochs=3, minibatch_size=64), policy, critic)
    start = ppo.updater.flat.detach().clone()
    metrics = ppo.update(batch, 0.0)
    ranks = [torch.load(tmp_path / f"{rank}.pt") for rank in (0, 1)]
    assert torch.equal(ranks[0]["flat"], ranks[1]["flat"])  # every rank applied the same averaged step
    assert (ppo.updater.flat - start).abs().max() > 1e-4  # the update moved the weights: the check has teeth
    torch.testing.assert_close(ranks[0]["flat"], ppo.updater.flat.detach(), rtol=0.0, atol=WEIGHT_ATOL)
    # the KL that adaptive controls read: the mean of the two halves' means is the whole batch's mean
    torch.testing.assert_close(ranks[0]["kl"], metrics["batch_approx_kl"], rtol=1e-5, atol=1e-7)


def _trpo(critic_minibatch_size: int) -> tuple[TRPO, RolloutBatch]:
    torch.manual_seed(0)
    policy = GaussianPolicy(D, A, -torch.ones(A), torch.ones(A), hidden=(16, 16))
    critic = ValueCritic(D, hidden=(16, 16))
    config = TRPOConfig(critic_epochs=2, critic_minibatch_size=critic_minibatch_size, fisher_subsample=1)
    return TRPO(config, policy, critic), small_batch(policy, 64)


def _trpo_worker(rank: int, tmp_path: Path) -> None:
    collective = _join(rank, tmp_path)
    trpo, batch = _trpo(32)
    trpo.use_collective(collective)
    metrics = trpo.update(batch.index(torch.arange(32 * rank, 32 * (rank + 1))), 0.0)
    torch.save(
        {"policy": trpo.policy.state_dict(), "critic": trpo.critic.state_dict(), "kl": metrics["kl"]},
        tmp_path / f"{rank}.pt",
    )
    collective.close(synchronize=True)


def test_a_trpo_step_on_two_ranks_equals_one_process_on_the_whole_batch(tmp_path):
    # gradient, conjugate-gradient Fisher products and the line search's loss and KL are all the ranks' means
    _spawn(_trpo_worker, tmp_path)
    trpo, batch = _trpo(64)
    before = {key: value.clone() for key, value in trpo.policy.state_dict().items()}
    metrics = trpo.update(batch, 0.0)
    assert metrics["rejected"] == 0.0 and metrics["kl"] > 1e-4  # a step was taken
    assert max((trpo.policy.state_dict()[key] - value).abs().max() for key, value in before.items()) > 1e-3
    for rank in (0, 1):
        got = torch.load(tmp_path / f"{rank}.pt")
        for module in ("policy", "critic"):
            expected = getattr(trpo, module).state_dict()
            for key, value in got[module].items():
                torch.testing.assert_close(value, expected[key], rtol=0.0, atol=WEIGHT_ATOL, msg=f"{module}.{key}")
        torch.testing.assert_close(got["kl"], metrics["kl"], rtol=1e-5, atol=1e-8)


def _critic_step(rows: slice, collective) -> torch.Tensor:
    """One Adam step of a small Q critic on a fixed regression target over ``rows`` of a fixed batch of 64."""
    torch.manual_seed(0)
    critic = QCritic(D, A, (16, 16), "relu", 2, False)
    generator = torch.Generator().manual_seed(3)
    obs, action = torch.randn(64, D, generator=generator), torch.rand(64, A, generator=generator)
    target = torch.randn(64, generator=generator)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3)
    for _ in range(3):
        loss = (critic(obs[rows], action[rows]) - target[rows]).square().mean()
        optimizer_step(optimizer, loss, collective)
    return torch.cat([p.detach().reshape(-1) for p in critic.parameters()])


def _off_policy_worker(rank: int, tmp_path: Path) -> None:
    collective = _join(rank, tmp_path)
    torch.save(_critic_step(slice(32 * rank, 32 * (rank + 1)), collective), tmp_path / f"{rank}.pt")
    collective.close(synchronize=True)


def test_an_off_policy_optimizer_step_on_two_ranks_equals_one_process_on_the_whole_batch(tmp_path):
    # SAC's and TD3's critic, actor and temperature steps all go through optimizer_step
    _spawn(_off_policy_worker, tmp_path)
    whole = _critic_step(slice(0, 64), None)
    for rank in (0, 1):
        torch.testing.assert_close(torch.load(tmp_path / f"{rank}.pt"), whole, rtol=0.0, atol=WEIGHT_ATOL)


def _statistics_worker(rank: int, tmp_path: Path) -> None:
    collective = _join(rank, tmp_path)
    generator = torch.Generator().manual_seed(7)
    rows = 3.0 + 2.0 * torch.randn(2, 50, 4, generator=generator)  # rank r owns rows[r]
    reward = torch.randn(16, 8, generator=generator)  # [T, N]: rank r owns envs 4r..4r+3
    done = torch.rand(16, 8, generator=generator) < 0.1
    normalizer = RunningNormalizer(4)
    normalizer.update(torch.ones(3, 4))  # some prior statistics, the same on both ranks
    normalizer.merge(*collective.moments(rows[rank]))
    mean, std = collective.mean_std(rows[rank][:, 0])
    scaler = RewardScaler(4, gamma=0.99)
    envs = slice(4 * rank, 4 * rank + 4)
    scaled = torch.cat([scaler(reward[:8, envs], done[:8, envs], collective),
                        scaler(reward[8:, envs], done[8:, envs], collective)])  # fmt: skip
    torch.save(
        {
            "mean": normalizer.mean,
            "var": normalizer.var,
            "count": normalizer.count,
            "adv": (mean, std),
            "scaled": scaled,
        },
        tmp_path / f"{rank}.pt",
    )
    collective.close(synchronize=True)


def test_normalizer_advantage_and_reward_statistics_are_those_of_every_rank(tmp_path):
    _spawn(_statistics_worker, tmp_path)
    generator = torch.Generator().manual_seed(7)
    rows = 3.0 + 2.0 * torch.randn(2, 50, 4, generator=generator)
    reward = torch.randn(16, 8, generator=generator)
    done = torch.rand(16, 8, generator=generator) < 0.1
    normalizer = RunningNormalizer(4)
    normalizer.update(torch.ones(3, 4))
    normalizer.update(rows.reshape(100, 4))
    scaler = RewardScaler(8, gamma=0.99)
    scaled = torch.cat([scaler(reward[:8], done[:8]), scaler(reward[8:], done[8:])])
    for rank in (0, 1):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert float(got["count"]) == 103.0
        torch.testing.assert_close(got["mean"], normalizer.mean, rtol=1e-12, atol=1e-12)  # float64 moments
        torch.testing.assert_close(got["var"], normalizer.var, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got["adv"][0], rows[:, :, 0].mean(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got["adv"][1], rows[:, :, 0].std(), rtol=1e-6, atol=1e-6)
        envs = slice(4 * rank, 4 * rank + 4)  # each rank's rewards scaled by the std of all 8 envs' returns
        torch.testing.assert_close(got["scaled"], scaled[:, envs], rtol=1e-6, atol=1e-6)


class _Ranks(Collective):
    """A collective that claims ``world_size`` ranks (what the checks before any collective see)."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size


def _config(tmp_path: Path, **overrides) -> ExperimentConfig:
    data = {
        "name": "dp", "seed": 1, "total_steps": 4 * 16 * 4,
        "env": {"id": "mujoco/HalfCheetah", "backend": "mujoco", "num_envs": 4},
        "policy": {"hidden": [16]}, "critic": {"hidden": [16]},
        "rollout": {"num_steps": 16, "normalize_reward": True},
        "algo": {"name": "ppo", "epochs": 2, "minibatch_size": 32, "lr_schedule": "constant"},
        "log": {"run_root": str(tmp_path / "runs"), "checkpoint_every": 1, "progress": False, "eval_episodes": 0},
    }  # fmt: skip
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_dataclass(ExperimentConfig, data)


@pytest.mark.parametrize(
    ("overrides", "world", "message"),
    [
        ({"env": {"num_envs": 6}}, 4, "env.num_envs=6 does not divide over 4 ranks"),
        ({"algo": {"minibatch_size": 30}}, 4, "algo.minibatch_size=30 does not divide over 4 ranks"),
    ],
)
def test_a_world_size_that_does_not_divide_is_refused(tmp_path, overrides, world, message):
    with pytest.raises(ConfigError, match=message):
        rank_config(_config(tmp_path, **overrides), _Ranks(world))


@pytest.mark.parametrize(
    ("algo", "message"),
    [
        ({"name": "bc"}, "supports the on-policy and off-policy algorithms; algo.name=bc runs as pretrain"),
        ({"name": "sac", "compile": True, "loop": {"batch_size": 32}}, "algo.compile=true runs in one process"),
        ({"name": "sac", "loop": {"batch_size": 31}}, "algo.loop.batch_size=31 does not divide over 2 ranks"),
        ({"name": "ppo", "minibatch_advantage_norm": True}, "minibatch_advantage_norm=true normalizes each rank"),
        ({"name": "ppo", "compile": True}, "algo.compile=true runs in one process"),
    ],
)
def test_what_several_ranks_do_not_support_is_refused_before_any_collective(tmp_path, algo, message):
    config = _config(tmp_path)
    data = {**config_to_dict(config), "algo": algo}
    if algo["name"] == "sac":  # a squashed Gaussian
        data["policy"] = {**data["policy"], "squash": True}
    config = build_dataclass(ExperimentConfig, data)
    with pytest.raises(ConfigError, match=message):
        build_loop(config, initialize=True, collective=_Ranks(2))


def _robopt(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "robopt", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


SMALL = ["configs/ppo_halfcheetah_fast.yaml", "env.num_envs=4", "rollout.num_steps=16", "algo.minibatch_size=32",
         "algo.epochs=2", "policy.hidden=[16]", "critic.hidden=[16]", "log.eval_episodes=0", "log.checkpoint_every=1",
         "--no-progress"]  # fmt: skip


def _run_dir(root: Path) -> Path:
    (run_dir,) = root.glob("ppo_halfcheetah_fast/*")
    return run_dir


def test_two_rank_run_stopped_and_resumed_equals_an_uninterrupted_run(tmp_path):
    runs = {}
    # the resumed run equal to the first proves both: two launches of one seed repeat exactly, and a resume
    # restores every rank's part
    for name, steps in (("first", 256), ("resumed", 128)):
        result = _robopt("train", *SMALL, f"log.run_root={tmp_path / name}", f"total_steps={steps}", "--nproc", "2")
        assert result.returncode == 0, result.stderr
        assert "x 2 on each of 2 ranks" in result.stdout and result.stdout.count("run directory:") == 1
        runs[name] = _run_dir(tmp_path / name)
    refused = _robopt("train", "--resume", str(runs["resumed"]), "total_steps=256", "--no-progress")
    assert refused.returncode == 2 and "it was trained on 2 rank(s), this launch has 1" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    resumed = _robopt("train", "--resume", str(runs["resumed"]), "total_steps=256", "--no-progress", "--nproc", "2")
    assert resumed.returncode == 0, resumed.stderr
    states = {name: load_checkpoint(run_dir / LAST_CHECKPOINT) for name, run_dir in runs.items()}
    assert states["first"]["world_size"] == 2 and len(states["first"]["ranks"]) == 2
    assert states["first"]["loop"]["env_steps"] == 256  # 4 iterations of 16 steps x 2 envs x 2 ranks
    assert not torch.equal(states["first"]["ranks"][0]["obs"], states["first"]["ranks"][1]["obs"])  # own envs
    for name in ("resumed",):
        for key, value in states["first"]["loop"]["policy"].items():
            assert torch.equal(value, states[name]["loop"]["policy"][key]), (name, key)
        for rank in (0, 1):
            assert torch.equal(states["first"]["ranks"][rank]["obs"], states[name]["ranks"][rank]["obs"]), name


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_rendezvous_that_never_completes_or_a_port_in_use_is_one_line(tmp_path):
    common = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "ROBOPT_DIST_TIMEOUT_S": "3", "LOCAL_RANK": "0"}
    start = time.perf_counter()
    alone = _robopt(
        "train",
        *SMALL,
        f"log.run_root={tmp_path}",
        env={**common, "RANK": "1", "MASTER_PORT": str(_free_port())},
        timeout=60,
    )
    assert time.perf_counter() - start < 45
    assert alone.returncode == 2, alone.stderr
    assert "rank 1 of 2: could not join the process group at 127.0.0.1:" in alone.stderr
    assert len(alone.stderr.strip().splitlines()) == 1
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = _robopt(
            "train",
            *SMALL,
            f"log.run_root={tmp_path}",
            env={**common, "RANK": "0", "MASTER_PORT": str(port)},
            timeout=60,
        )
    assert busy.returncode == 2 and f"could not join the process group at 127.0.0.1:{port}" in busy.stderr
    assert len(busy.stderr.strip().splitlines()) == 1


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the rank processes in /proc")
def test_a_rank_that_dies_stops_the_run_and_says_which_with_the_checkpoint_intact(tmp_path):
    command = [sys.executable, "-m", "robopt", "train", *SMALL, f"log.run_root={tmp_path}", "total_steps=100000000",
               "--nproc", "2"]  # fmt: skip
    launcher = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and not list(tmp_path.glob(f"*/*/{LAST_CHECKPOINT}")):
            time.sleep(0.2)
        ranks = [pid for pid in _children(launcher.pid) if "robopt" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert len(ranks) == 2, ranks
        os.kill(max(ranks), signal.SIGKILL)  # the rank started second
        _, stderr = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode != 0
    assert "of 2 stopped (signal 9); the other ranks were stopped; the last checkpoint is kept" in stderr
    assert "Traceback" not in stderr.split("robopt: error:")[-1]
    checkpoint = load_checkpoint(_run_dir(tmp_path) / LAST_CHECKPOINT)
    assert checkpoint["world_size"] == 2 and checkpoint["loop"]["iteration"] >= 1


def test_ctrl_c_checkpoints_every_rank_and_says_how_to_resume(tmp_path):
    command = [sys.executable, "-m", "robopt", "train", *SMALL, f"log.run_root={tmp_path}", "total_steps=100000000",
               "log.checkpoint_every=100000", "--nproc", "2"]  # fmt: skip
    launcher = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and not list(tmp_path.glob("*/*/progress.csv")):
            time.sleep(0.2)
        launcher.send_signal(signal.SIGINT)  # the launcher passes it to the ranks (each in its own session)
        stdout, stderr = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode == 130, stderr
    assert "resume with: robopt train --resume" in stdout and stdout.rstrip().endswith("--nproc 2")
    assert "Traceback" not in stderr
    checkpoint = load_checkpoint(_run_dir(tmp_path) / LAST_CHECKPOINT)
    assert checkpoint["world_size"] == 2 and checkpoint["loop"]["iteration"] >= 1


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--nproc", "0"], {}, "--nproc=0: the number of processes must be >= 1"),
        (["--nproc", "2"], {"WORLD_SIZE": "2"}, "--nproc inside a torchrun launch"),
        ([], {"WORLD_SIZE": "2", "ROBOPT_DIST_TIMEOUT_S": "soon"}, "ROBOPT_DIST_TIMEOUT_S='soon': expected a number"),
    ],
)
def test_bad_launch_options_are_one_line(args, env, message):
    result = _robopt("train", *SMALL, *args, env=env, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


SAC_SMALL = ["configs/sac_pendulum.yaml", "env.num_envs=2", "policy.hidden=[16]", "algo.critic_hidden=[16]",
             "algo.loop.batch_size=32", "algo.loop.learning_starts=200", "algo.loop.iteration_steps=200",
             "log.eval_episodes=0", "log.checkpoint_every=1", "--no-progress", "--nproc", "2"]  # fmt: skip


def test_two_rank_sac_resumes_like_an_uninterrupted_run(tmp_path):
    # each rank's replay, envs and sampling stream travel in the checkpoint; the updates average every gradient
    for name, steps in (("straight", 600), ("stopped", 400)):
        result = _robopt("train", *SAC_SMALL, f"log.run_root={tmp_path / name}", f"total_steps={steps}")
        assert result.returncode == 0, result.stderr
    (stopped,) = (tmp_path / "stopped").glob("sac_pendulum/*")
    resumed = _robopt("train", "--resume", str(stopped), "total_steps=600", "--no-progress", "--nproc", "2")
    assert resumed.returncode == 0, resumed.stderr
    (straight,) = (tmp_path / "straight").glob("sac_pendulum/*")
    a, b = (load_checkpoint(run / LAST_CHECKPOINT) for run in (straight, stopped))
    assert a["world_size"] == 2 and a["loop"]["env_steps"] == 600 and a["ranks"][1]["replay"] is not None
    for key, value in a["loop"]["policy"].items():
        assert torch.equal(value, b["loop"]["policy"][key]), key
    assert not torch.equal(a["ranks"][0]["obs"], a["ranks"][1]["obs"])
