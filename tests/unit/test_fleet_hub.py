"""The fleet's experience hub and sampler with hand-worked numbers: contiguous episodes, quarantine, own/shared mix,
policy-lag control, HER and n-step on hub samples, checkpoints.

Slot arithmetic: the hub has one column, so absolute step t lives in slot t % capacity.
"""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
import torch

from robopt.algorithms.offpolicy import OffPolicySchedule
from robopt.buffers import NStep
from robopt.config import ConfigError
from robopt.fleet.hub import ExperienceHub, FleetSampler, check_experience, hub_from_schedule, staleness_weights


def _experience(lengths, robot=0, version=0, start=0.0, obs_dim=2, truncate=False) -> dict:
    """Whole episodes of the given lengths; obs[:, 0] = start, start + 1, ...; next_obs = obs + 0.5; reward = obs."""
    L = sum(lengths)
    value = start + torch.arange(L, dtype=torch.float32)  # [L]
    obs = value[:, None].repeat(1, obs_dim)  # [L, D]
    ends = torch.zeros(L, dtype=torch.bool)
    ends[torch.tensor(lengths).cumsum(0) - 1] = True
    return {
        "robot": robot,
        "version": version,
        "obs": obs,
        "action": -value[:, None],
        "reward": value.clone(),
        "next_obs": obs + 0.5,
        "terminated": ends & (not truncate),
        "truncated": ends & truncate,
    }


def _hub(capacity=8, num_robots=3, obs_dim=2, **options) -> ExperienceHub:
    return ExperienceHub(obs_dim, 1, num_robots, capacity, gamma=0.5, batch_size=4, **options)


def _one_line_error(match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


# -- push ----------------------------------------------------------------------------------------------------------


def test_push_writes_whole_episodes_contiguously_tagged_with_robot_and_version():
    hub = _hub()
    hub.publish(2)
    # robot 1, version 1: episodes of 3 and 2 rows (values 0..4) -> steps 0..4 in slots 0..4
    assert hub.push(_experience([3, 2], robot=1, version=1)) == 5
    storage, sampler = hub.storage, hub.sampler
    torch.testing.assert_close(storage.tensors["obs"][:5, 0, 0], torch.tensor([0.0, 1, 2, 3, 4]))
    torch.testing.assert_close(storage.tensors["next_obs"][:5, 0, 0], torch.tensor([0.5, 1.5, 2.5, 3.5, 4.5]))
    assert storage.tensors["terminated"][:5, 0].tolist() == [False, False, True, False, True]
    first, last = storage.episode_bounds(torch.tensor([0, 1, 2, 3, 4]))
    assert first.tolist() == [0, 0, 0, 3, 3] and last.tolist() == [2, 2, 2, 4, 4]
    assert sampler.robot[:5].tolist() == [1] * 5 and sampler.slot_version[:5].tolist() == [1] * 5
    # robot 0, version 2: one truncated episode of 4 rows (values 10..13) -> steps 5, 6, 7, 8 = slots 5, 6, 7, 0
    assert hub.push(_experience([4], robot=0, version=2, start=10.0, truncate=True)) == 4
    torch.testing.assert_close(storage.tensors["obs"][:, 0, 0], torch.tensor([13.0, 1, 2, 3, 4, 10, 11, 12]))
    assert storage.tensors["truncated"][:, 0].tolist() == [True, False, False, False, False, False, False, False]
    assert sampler.robot.tolist() == [0, 1, 1, 1, 1, 0, 0, 0]
    assert sampler.slot_version.tolist() == [2, 1, 1, 1, 1, 2, 2, 2]
    # 9 steps, oldest step 1: slot 0 = step 8 of the episode 5..8; slot 1 = step 1 of the episode 0..2 (step 0 gone)
    first, last = storage.episode_bounds(torch.tensor([0, 1, 5]))
    assert first.tolist() == [5, 1, 5] and last.tolist() == [8, 2, 8]
    assert hub.size == 8 and hub.counters["transitions"] == [4, 5, 0] and hub.counters["episodes"] == [1, 2, 0]


def _bad(**changes):
    def make() -> dict:
        exp = _experience([2, 3], robot=1, version=4, obs_dim=3)
        exp.update({key: value(exp) if callable(value) else value for key, value in changes.items()})
        return {key: value for key, value in exp.items() if value is not None}

    return make


def _with(name, index, value):
    def change(exp):
        tensor = exp[name].clone()
        tensor[index] = value
        return tensor

    return change


BAD_BATCHES = {
    "open last episode": (_bad(terminated=_with("terminated", -1, False)), "robot 1: the last row does not end an"),
    "obs dim": (_bad(obs=torch.zeros(5, 2)), r"robot 1: obs has shape \[5, 2\], expected \[5, 3\]"),
    "action rows": (_bad(action=torch.zeros(4, 1)), r"robot 1: action has shape \[4, 1\], expected \[5, 1\]"),
    "reward 2-D": (_bad(reward=torch.zeros(5, 1)), r"robot 1: reward has shape \[5, 1\], expected \[5\]"),
    "nan reward": (_bad(reward=_with("reward", 2, float("nan"))), "robot 1: non-finite reward"),
    "inf next_obs": (_bad(next_obs=_with("next_obs", (4, 1), float("inf"))), "robot 1: non-finite next_obs"),
    "nan obs": (_bad(obs=_with("obs", (0, 0), float("nan"))), "robot 1: non-finite obs"),
    "nan action": (_bad(action=_with("action", (3, 0), -float("inf"))), "robot 1: non-finite action"),
    "newer version": (_bad(version=12), "robot 1: version 12 is newer than the published 10"),
    "missing key": (_bad(truncated=None), "robot 1: experience is missing truncated"),
    "extra key": (_bad(info=torch.zeros(5)), "robot 1: experience has unknown keys info"),
    "float flags": (_bad(terminated=lambda exp: exp["terminated"].float()), "terminated must be a bool tensor"),
    "int obs": (_bad(obs=lambda exp: exp["obs"].long()), "obs must be a floating-point tensor"),
    "success count": (_bad(success=torch.ones(3, dtype=torch.bool)), r"success has shape \[3\], expected \[2\]"),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_invalid_batch_is_rejected_with_its_reason_and_quarantines_the_robot(case):
    make, reason = BAD_BATCHES[case]
    hub = _hub(num_robots=3, obs_dim=3)
    hub.publish(10)
    assert hub.push(_experience([2], robot=0, version=9, obs_dim=3)) == 2
    before = {name: tensor.clone() for name, tensor in hub.storage.tensors.items()}
    assert check_experience(_experience([2, 3], robot=1, version=4, obs_dim=3), 3, 1, 3, 10) is None
    message = check_experience(make(), 3, 1, 3, 10)
    assert message is not None and "\n" not in message
    assert hub.push(make()) == 0
    assert hub.quarantine_reasons[1] == message and re.search(reason, message)
    assert hub.storage.steps == 2 and all(torch.equal(before[name], t) for name, t in hub.storage.tensors.items())
    assert hub.sampler.robot.tolist() == [0, 0, -1, -1, -1, -1, -1, -1]
    assert hub.quarantined == {1}
    assert (hub.counters["rejected_batches"], hub.counters["quarantined_robots"], hub.counters["refused_pushes"]) == (
        1,
        1,
        0,
    )
    # the quarantined robot's valid batch is refused and counted; other robots still push
    assert hub.push(_experience([2, 3], robot=1, version=4, obs_dim=3)) == 0
    assert hub.counters["refused_pushes"] == 1 and hub.storage.steps == 2 and hub.counters["transitions"][1] == 0
    assert hub.push(_experience([1], robot=2, version=10, obs_dim=3)) == 1
    hub.release(1)
    assert hub.push(_experience([2, 3], robot=1, version=4, obs_dim=3)) == 5


def test_unknown_robot_is_rejected_without_quarantine():
    hub = _hub(num_robots=3)
    for robot, shown in ((9, "unknown robot id 9"), (-1, "unknown robot id -1"), (True, "unknown robot id True")):
        exp = _experience([2], robot=robot)
        assert check_experience(exp, 2, 1, 3, 0).startswith(shown)
        assert hub.push(exp) == 0
    assert hub.push([1, 2]) == 0 and check_experience([1, 2], 2, 1, 3, 0) == "an experience must be a dict, got list"
    assert hub.counters["rejected_batches"] == 4 and hub.quarantined == set() and hub.storage.steps == 0


# -- sampling: own/shared mix and policy lag ---------------------------------------------------------------------------


def _tagged_sampler(robots, versions, **options) -> FleetSampler:
    sampler = FleetSampler(len(robots), 3, **options)
    sampler.set_version(max(versions))
    for slot, (robot, version) in enumerate(zip(robots, versions)):
        sampler.tag(torch.tensor([slot]), robot, version)
    return sampler


def test_own_fraction_draws_round_fraction_of_the_batch_from_own_robots():
    # slots 0, 1: own robot 0; slots 2..4 robot 1; 5..7 robot 2. own_fraction 0.25, B = 8: round(2.0) = 2 own rows
    # first, then 6 rows uniform over all 8 eligible slots (own share there 2 / 8 = 0.25, robot 1 and 2: 3 / 8 each)
    sampler = _tagged_sampler([0, 0, 1, 1, 1, 2, 2, 2], [0] * 8, own_robots=(0,), own_fraction=0.25)
    generator = torch.Generator().manual_seed(0)
    slots = torch.stack([sampler.sample(8, 8, generator)[0] for _ in range(2000)])  # [2000, 8]
    robot = sampler.robot[slots]
    assert bool((robot[:, :2] == 0).all())
    rest = robot[:, 2:].flatten()  # 12000 draws: binomial std of a share about 0.004
    for r, share in ((0, 0.25), (1, 0.375), (2, 0.375)):
        assert abs((rest == r).float().mean().item() - share) < 0.02
    # B = 5: round(1.25) = 1 own row
    assert bool((sampler.robot[torch.stack([sampler.sample(5, 8, generator)[0] for _ in range(200)])[:, 0]] == 0).all())
    # own robot 0 stale (lag 3 > max_lag 1): its group is empty, so the whole batch comes from the rest
    stale = _tagged_sampler([0, 0, 1, 2], [0, 0, 3, 3], own_robots=(0,), own_fraction=0.5, max_lag=1)
    slots = torch.stack([stale.sample(8, 4, generator)[0] for _ in range(200)])
    assert set(slots.flatten().tolist()) == {2, 3}


def test_drop_mode_never_returns_a_slot_older_than_max_lag():
    # version 3; slot versions [0, 1, 2, 3, 3, 2] -> lags [3, 2, 1, 0, 0, 1]
    versions = [0, 1, 2, 3, 3, 2]
    generator = torch.Generator().manual_seed(0)
    for max_lag, allowed in ((1, {2, 3, 4, 5}), (0, {3, 4}), (2, {1, 2, 3, 4, 5}), (None, {0, 1, 2, 3, 4, 5})):
        sampler = _tagged_sampler([0, 1, 2, 0, 1, 2], versions, max_lag=max_lag)
        draws = [sampler.sample(8, 6, generator) for _ in range(300)]
        assert set(torch.cat([slots for slots, _ in draws]).tolist()) == allowed
        assert all(torch.equal(weights, torch.ones(8)) for _, weights in draws)
    stats = _tagged_sampler([0, 1, 2, 0, 1, 2], versions, max_lag=1).lag_stats(6)
    assert stats == {"tagged": 6.0, "eligible": 4.0, "stale": 2.0, "mean_lag": 7 / 6, "max_lag": 3.0}


def test_weight_mode_gives_decay_power_lag_normalized_to_mean_one():
    # lags [0, 1, 2, 1], decay 0.5: [1, 0.5, 0.25, 0.5], mean 0.5625 -> [16/9, 8/9, 4/9, 8/9]
    torch.testing.assert_close(
        staleness_weights(torch.tensor([0, 1, 2, 1]), 0.5), torch.tensor([16 / 9, 8 / 9, 4 / 9, 8 / 9])
    )
    # lags 200, 201 (0.5 ** 200 underflows float32): relative [1, 0.5], mean 0.75 -> [4/3, 2/3]
    torch.testing.assert_close(staleness_weights(torch.tensor([200, 201]), 0.5), torch.tensor([4 / 3, 2 / 3]))
    # slot 0 lag 0, slot 1 lag 2 (version 3, slot versions 3, 1); weight mode keeps both despite max_lag 0.
    # A batch with n0 rows of slot 0 and n1 of slot 1: raw 1 and 0.25, mean m = (n0 + 0.25 n1) / 4
    sampler = _tagged_sampler([0, 1], [3, 1], stale_mode="weight", stale_decay=0.5, max_lag=0)
    generator, seen = torch.Generator().manual_seed(0), set()
    for _ in range(50):
        slots, weights = sampler.sample(4, 2, generator)
        n1 = int(slots.sum())
        m = ((4 - n1) * 1.0 + n1 * 0.25) / 4
        torch.testing.assert_close(weights, torch.where(slots == 1, 0.25 / m, 1.0 / m))
        seen.add(n1)
    assert {1, 2, 3} <= seen  # e.g. n1 = 2: m = 0.625, weights 1.6 and 0.4


def test_sample_with_nothing_eligible_raises_one_line():
    hub = _hub(max_lag=0)
    _one_line_error("replay holds 0 transitions, fewer than batch_size 1", hub.sample, 1)
    hub.push(_experience([4], robot=2))
    assert hub.sample(4, torch.Generator().manual_seed(0))["obs"].shape == (4, 2)
    hub.publish(1)  # every slot now lags 1 > max_lag 0
    message = _one_line_error("no eligible transition", hub.sample, 4)
    assert "4 tagged, 4 older than max_lag 0 behind version 1" in message


def test_sampler_and_hub_options_refuse_bad_values_in_one_line():
    _one_line_error("stale_mode 'old' is unknown; allowed: drop, weight", FleetSampler, 4, 2, stale_mode="old")
    _one_line_error("own_fraction 0.5 needs own_robots", FleetSampler, 4, 2, own_fraction=0.5)
    _one_line_error(r"own_robots \[2\] are not robot ids; allowed: integers 0 .. 1", FleetSampler, 4, 2, (2,), 0.5)
    _one_line_error("max_lag must be an integer >= 0", FleetSampler, 4, 2, max_lag=-1)
    _one_line_error(r"stale_decay must be in \(0, 1\]", FleetSampler, 4, 2, stale_decay=0.0)
    _one_line_error("num_robots must be an integer >= 1", FleetSampler, 4, 0)
    sampler = FleetSampler(4, 2)
    sampler.set_version(2)
    _one_line_error("version must be an integer >= the current 2, got 1", sampler.set_version, 1)
    _one_line_error(r"version 3 must be an integer in \[0, published 2\]", sampler.tag, torch.tensor([0]), 0, 3)


# -- transforms on hub samples -------------------------------------------------------------------------------------


def test_nstep_windows_stop_at_each_robots_episode_end():
    # n = 2, gamma = 0.5. Robot 0's episode rewards [1, 2, 3] (terminated), then robot 1's [10, 20]:
    # slot 0: 1 + 0.5 * 2 = 2, discount 0.25; slot 1: 2 + 0.5 * 3 = 3.5; slot 2 ends robot 0's episode: 3, discount
    # 0.5 (never 3 + 0.5 * 10 from robot 1); slot 3: 10 + 0.5 * 20 = 20; slot 4: 20.
    env = SimpleNamespace(obs_dim=2, action_dim=1, device=torch.device("cpu"))
    schedule = OffPolicySchedule(n_step=2, buffer_size=16, batch_size=4)
    hub = hub_from_schedule(schedule, 0.5, env, num_robots=2)
    assert [type(t) for t in hub.replay.transforms] == [NStep] and hub.replay.transforms[0].n == 2
    assert hub.storage.capacity == 16 and hub.batch_size == 4
    hub.push(_experience([3], robot=0, start=1.0))
    hub.push(_experience([2], robot=1, start=10.0) | {"reward": torch.tensor([10.0, 20.0])})
    batch = hub.replay.gather(torch.arange(5))
    torch.testing.assert_close(batch["reward"], torch.tensor([2.0, 3.5, 3.0, 20.0, 20.0]))
    torch.testing.assert_close(batch["discount"], torch.tensor([0.25, 0.25, 0.5, 0.25, 0.5]))
    with pytest.raises(ConfigError, match="algo.loop.sampler=prioritized is not supported with a fleet"):
        hub_from_schedule(OffPolicySchedule(sampler="prioritized", buffer_size=16, batch_size=4), 0.5, env, 2)


def _record_episode(env, seed: int, robot: int) -> dict:
    """One episode of uniform random actions of a num_envs=1 env, as a worker would send it."""
    generator = torch.Generator().manual_seed(seed)
    obs, rows = env.reset(seed=seed), []
    low, high = env.action_low, env.action_high
    for _ in range(200):
        action = low + torch.rand(1, env.action_dim, generator=generator) * (high - low)
        next_obs, reward, terminated, truncated, info = env.step(action)
        rows.append((obs[0], action[0], reward[0], info["final_obs"][0], terminated[0], truncated[0]))
        obs = next_obs
        if bool(terminated[0] | truncated[0]):
            break
    names = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
    return {"robot": robot, "version": 0, **{name: torch.stack(column) for name, column in zip(names, zip(*rows))}}


def test_hindsight_relabels_hub_samples_with_goals_of_the_same_episode():
    from robopt.envs import make_env

    env = make_env("mujoco/GripperReach", num_envs=1)
    schedule = OffPolicySchedule(her_strategy="future", buffer_size=256, batch_size=32, learning_starts=0)
    hub = hub_from_schedule(schedule, 0.98, env, num_robots=2)
    episodes = [_record_episode(env, seed=1, robot=0), _record_episode(env, seed=2, robot=1)]
    for exp in episodes:
        assert hub.push(exp) == exp["obs"].shape[0]
    lengths = [exp["obs"].shape[0] for exp in episodes]
    achieved = torch.cat([exp["next_obs"][:, env.achieved_goal] for exp in episodes])  # [S, 3] by absolute step
    stored_goal = torch.cat([exp["obs"][:, env.desired_goal] for exp in episodes])  # [S, 3]
    assert not torch.equal(stored_goal[0], stored_goal[-1])  # the two episodes chase different goals
    generator = torch.Generator().manual_seed(0)
    draws = [hub.sample(64, generator) for _ in range(8)]  # 512 rows (a sample holds at most size = 100 rows)
    batch = {key: torch.cat([draw[key] for draw in draws]) for key in draws[0]}
    step = hub.storage.slot_step(batch["slots"])  # [B]
    goal = batch["obs"][:, env.desired_goal]  # [B, 3]
    relabel = (goal != stored_goal[step]).any(-1)
    assert abs(relabel.float().mean().item() - 0.8) < 0.06  # k = 4: 80 % relabelled (std 0.018)
    last = torch.where(step < lengths[0], lengths[0] - 1, lengths[0] + lengths[1] - 1)  # episode end of each row
    matches = (goal[:, None, :] == achieved[None, :, :]).all(-1)  # [B, S] steps whose achieved goal it is
    steps = torch.arange(achieved.shape[0])
    in_future = matches & (steps[None] >= step[:, None]) & (steps[None] <= last[:, None])
    assert bool(in_future[relabel].any(-1).all())  # a future achieved goal of the row's own episode
    torch.testing.assert_close(batch["next_obs"][relabel][:, env.desired_goal], goal[relabel])
    expected = env.compute_reward(achieved_goal=batch["next_obs"][:, env.achieved_goal], desired_goal=goal)
    torch.testing.assert_close(batch["reward"][relabel], expected[relabel])
    env.close()


# -- state ---------------------------------------------------------------------------------------------------------


def test_state_dict_round_trip_restores_storage_tags_counters_and_quarantine():
    def make(fingerprint="cfg-a") -> ExperienceHub:
        return _hub(capacity=6, own_robots=(1,), own_fraction=0.5, fingerprint=fingerprint)

    original = make()
    original.publish(3)
    original.push(_experience([2, 2], robot=0, version=1))
    original.push(_experience([3], robot=1, version=3, start=5.0) | {"success": torch.tensor([True])})
    original.push(_experience([2], robot=2, version=3) | {"reward": torch.tensor([0.0, float("nan")])})
    original.push(_experience([1], robot=2, version=3))  # refused: robot 2 is quarantined
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    restored = make()
    restored.load_state_dict(torch.load(buffer, weights_only=False))
    for name, tensor in original.storage.tensors.items():
        assert torch.equal(restored.storage.tensors[name], tensor), name
    assert restored.storage.steps == 7 and restored.version == 3
    assert restored.sampler.robot.tolist() == [1, 0, 0, 0, 1, 1] and restored.sampler.slot_version.tolist() == [
        3,
        1,
        1,
        1,
        3,
        3,
    ]
    assert (
        restored.counters
        == original.counters
        == {
            "transitions": [4, 3, 0],
            "episodes": [2, 1, 0],
            "successes": [0, 1, 0],
            "rejected_batches": 1,
            "quarantined_robots": 1,
            "refused_pushes": 1,
        }
    )
    assert restored.quarantined == {2} and restored.quarantine_reasons == {2: "robot 2: non-finite reward (NaN or inf)"}
    a = original.sample(6, torch.Generator().manual_seed(5))
    b = restored.sample(6, torch.Generator().manual_seed(5))
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert restored.push(_experience([1], robot=2, version=3)) == 0 and restored.counters["refused_pushes"] == 2
    assert restored.metrics()["hub_quarantined"] == 1.0 and restored.metrics()["hub_size"] == 6.0
    message = _one_line_error(
        "hub checkpoint is from another config", make("cfg-b").load_state_dict, original.state_dict()
    )
    assert "fingerprint 'cfg-a', this run 'cfg-b'" in message


def test_metrics_are_flat_numbers():
    hub = _hub(max_lag=1)
    hub.push(_experience([2, 1], robot=0))
    hub.publish(2)
    hub.push(_experience([2], robot=1, version=2))
    # slots 0..2 lag 2 (stale under max_lag 1), slots 3, 4 lag 0: mean lag 6 / 5
    assert hub.metrics() == {
        "hub_size": 5.0,
        "hub_version": 2.0,
        "hub_transitions": 5.0,
        "hub_episodes": 3.0,
        "hub_robot_transitions_min": 0.0,
        "hub_robot_transitions_max": 3.0,
        "hub_rejected_batches": 0.0,
        "hub_quarantined": 0.0,
        "hub_refused_pushes": 0.0,
        "hub_eligible": 2.0,
        "hub_stale": 3.0,
        "hub_mean_lag": 1.2,
        "hub_max_lag": 2.0,
    }
