"""PPO and TRPO with a recurrent actor-critic (policy.recurrent): sequence batches, state bookkeeping, bad input."""

from __future__ import annotations

import pytest
import torch

from robopt.buffers.rollout import critic_value
from robopt.build import build_loop, build_policy
from robopt.config import build_dataclass, config_to_dict
from robopt.core.protocols import Policy, memory_width
from robopt.evaluation import evaluate_policy
from robopt.experiment import ExperimentConfig, load_config
from robopt.options import ConfigError
from robopt.policies.recurrent import PolicyActor


def _config(**changes) -> ExperimentConfig:
    """configs/ppo_pendulum.yaml with a GRU (hidden 16, sequences of 16), 2 envs x 256 steps, and ``changes``
    (section -> {field: value})."""
    data = config_to_dict(load_config("configs/ppo_pendulum.yaml"))
    data["env"]["num_envs"] = 2
    data["rollout"]["num_steps"] = 256  # Pendulum's episodes are 200 steps: each env starts one inside the rollout
    data["policy"]["recurrent"] = {"type": "gru", "hidden": 16, "sequence_length": 16}
    data["algo"]["minibatch_size"] = 128
    for section, fields in changes.items():  # a new algorithm replaces the section; other changes merge into it
        data[section] = fields if section == "algo" and "name" in fields else {**data[section], **fields}
    return build_dataclass(ExperimentConfig, data)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_sequence_batch_replays_what_the_policy_did(cell):
    """The batch is env-major sequences of L steps; replaying them from the stored state at each sequence's first row
    (reset at episode starts) gives the acting log-probabilities and the rollout's values back (within 1e-5)."""
    config = _config(policy={"recurrent": {"type": cell, "hidden": 16, "sequence_length": 16}})
    loop = build_loop(config, initialize=True)
    loop.collect()
    storage = loop.storage
    starts = storage.policy_info["episode_start"]  # [T, N]
    assert starts[0].all() and 0 < int(starts[1:].sum()) <= 4  # the first step, then the 200-step episode ends
    batch = loop.advantages()
    assert batch.sequence_length == 16 and len(batch) == 512
    # row s * 16 + l of env n's c-th sequence is storage step t = c * 16 + l of env n (8 sequences per env)
    n, c, l = 1, 3, 5
    torch.testing.assert_close(batch.obs[(n * 16 + c) * 16 + l], storage.obs[c * 16 + l, n], rtol=0, atol=0)
    with torch.no_grad():
        log_ratio = loop.policy.log_ratio(batch.obs, batch.action, batch.policy_info)
        kl = loop.policy.kl(batch.obs, batch.policy_info)
        value = critic_value(loop.critic, batch)
    assert log_ratio.shape == (512, 1)
    assert float(log_ratio.abs().max()) <= 1e-5  # 0 at the acting parameters, up to the other kernels' rounding
    assert float(kl.abs().max()) <= 1e-5
    torch.testing.assert_close(value, batch.value, rtol=0, atol=1e-5)
    # a sequence shuffle moves whole sequences: the rows of one sequence stay together and in order
    order = batch.permutation(torch.Generator().manual_seed(0)).reshape(-1, 16)
    assert (order[:, 1:] - order[:, :-1] == 1).all() and (order[:, 0] % 16 == 0).all()


def test_stored_state_is_zero_at_episode_starts_and_carried_otherwise():
    loop = build_loop(_config(), initialize=True)
    loop.collect()
    state, starts = loop.storage.policy_info["state"], loop.storage.policy_info["episode_start"]  # [T, N, M], [T, N]
    assert (state[starts] == 0).all()
    assert (state[1:][~starts[1:]].abs().sum(-1) > 0).all()  # a carried state is a GRU's output, never all zero


@pytest.mark.parametrize(
    "algo", [{"name": "ppo", "minibatch_size": 128}, {"name": "trpo", "critic_minibatch_size": 64}]
)  # noqa: E501
def test_ppo_and_trpo_update_on_sequences(algo):
    config = _config(algo=algo)
    loop = build_loop(config, initialize=True)
    before = [p.detach().clone() for p in loop.policy.memory.parameters()]
    metrics = loop.iteration(0.0)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert any(not torch.equal(b, p) for b, p in zip(before, loop.policy.memory.parameters()))  # the GRU learned
    state = loop.state_dict()
    assert set(state["memory"]) == {"actor", "critic"}
    # TRPO differentiates the actor's KL twice: its torso runs the written-out cells; every other torso is fused
    assert loop.policy.memory.fused == (algo["name"] != "trpo") and loop.critic.memory.fused


def test_resume_continues_the_memories():
    loop = build_loop(_config(), initialize=True)
    loop.iteration(0.0)
    saved = loop.state_dict()
    other = build_loop(_config(), initialize=True)
    other.load_state_dict(saved)
    torch.testing.assert_close(other.actor.state, loop.actor.state, rtol=0, atol=0)
    torch.testing.assert_close(other.critic_state, loop.critic_state, rtol=0, atol=0)


def test_evaluation_carries_and_resets_the_state():
    config = _config()
    env = __import__("robopt.build", fromlist=["build_env"]).build_env(config, num_envs=2)
    policy = build_policy(config, env)
    result = evaluate_policy(policy, env, episodes=2, seed=3)
    assert len(result.returns) == 2 and result.mean_length == 200
    actor = PolicyActor(policy, 2)
    obs = env.reset(seed=0)
    actor.act(obs)
    actor.episode_ended(torch.tensor([True, False]))
    _, info = actor.act(obs)
    assert (info["state"][0] == 0).all() and (info["state"][1] != 0).any()
    env.close()
    # memory is the Policy protocol's state: a recurrent policy acts only through step, with its state [N, M]
    assert isinstance(policy, Policy) and not hasattr(policy, "act")
    assert memory_width(policy) == policy.initial_state(3).shape[1] > 0


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"algo": {"name": "sac"}}, "with the policy.s state \\(ppo, trpo\\); algo.name=sac cannot"),
        ({"policy": {"recurrent": {"type": "gru", "sequence_length": 512}}},
         "sequence_length=512 must divide the rollout \\(rollout.num_steps=256\\) and is longer than it"),
        ({"algo": {"minibatch_size": 100}}, "minibatch_size=100 is not a whole number of sequences"),
        ({"algo": {"compile": True}}, "compile=true does not support a recurrent policy"),
        ({"algo": {"name": "trpo", "fisher_subsample": 2}}, "cuts a recurrent policy's sequences"),
    ],
)  # fmt: skip
def test_bad_recurrent_configs_are_one_line(changes, message):
    config = _config(**changes)
    with pytest.raises(ConfigError, match=message) as error:
        build_loop(config, initialize=True)
    assert "\n" not in str(error.value)


def test_state_dependent_std_refused():
    with pytest.raises((ConfigError, ValueError), match="state-independent log-std"):
        _config(policy={"recurrent": {"type": "gru"}, "state_dependent_std": True})


def test_a_stopped_and_resumed_recurrent_run_equals_an_uninterrupted_one(tmp_path):
    """Native Hopper (its simulator state resumes exactly), 2 envs x 32 steps, episodes cut at 20 steps: the actor's
    and the critic's memories are carried across the stop through the checkpoint, so every weight is bit-equal (the
    same kernels on the same shapes in one process)."""
    from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
    from robopt.runner import train

    config = _config(
        env={"id": "mujoco/Hopper", "backend": "mujoco", "num_envs": 2, "kwargs": {"max_episode_steps": 20}},
        rollout={"num_steps": 32},
        algo={"minibatch_size": 32, "epochs": 2},
        log={"run_root": str(tmp_path), "progress": False, "eval_episodes": 0, "checkpoint_every": 1},
    )
    config = build_dataclass(ExperimentConfig, {**config_to_dict(config), "total_steps": 256})
    full = train(config)
    stopped = train(config, stop_at_iteration=2)
    resumed = train(config, resume_dir=stopped.run_dir)
    assert resumed.iterations == full.iterations == 4
    expected, got = (load_checkpoint(r.run_dir / LAST_CHECKPOINT)["loop"] for r in (full, resumed))
    for part in ("policy", "critic"):
        for key, value in expected[part].items():
            assert torch.equal(value, got[part][key]), f"{part}.{key}"
    torch.testing.assert_close(got["memory"]["critic"], expected["memory"]["critic"], rtol=0, atol=0)


def test_a_fleet_with_a_recurrent_policy_is_refused_before_anything_starts():
    config = load_config(
        "configs/fleet_sac_reach.yaml", ["policy.recurrent={type: gru}", "policy.state_dependent_std=false"]
    )
    with pytest.raises(ConfigError, match="algo.name=sac cannot use it") as error:
        build_loop(config, initialize=True)
    assert "\n" not in str(error.value)


def test_update_threads_apply_to_the_update_only():
    """``update_threads``: torch's intra-op threads during the update, restored for the next collection; a negative
    count is one line."""
    from robopt.config import ConfigError

    data = config_to_dict(_config())
    data.update(update_threads=2, torch_threads=1)
    loop = build_loop(build_dataclass(ExperimentConfig, data), initialize=True)
    seen, update = [], loop.algorithm.update
    loop.algorithm.update = lambda *args: seen.append(torch.get_num_threads()) or update(*args)
    loop.iteration(0.0)
    assert seen == [2] and torch.get_num_threads() == 1
    data["update_threads"] = -1
    with pytest.raises(ConfigError, match="update_threads must be >= 0"):
        build_loop(build_dataclass(ExperimentConfig, data), initialize=True)
