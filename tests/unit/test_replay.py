"""Replay storage, buffer and sample-time transforms (n-step, hindsight) with hand-worked numbers.

Slot arithmetic used throughout: step t of env n lives in ring row t % T, flat slot (t % T) * N + n.
"""

from __future__ import annotations

import io

import pytest
import torch

from robopt.buffers import Hindsight, NStep, ReplayBuffer, ReplayStorage


class RecordingUniformSampler:
    """Minimal uniform sampler (the Sampler protocol) that also records what the buffer forwards to it."""

    def __init__(self) -> None:
        self.added: list[torch.Tensor] = []
        self.priorities: list[tuple[torch.Tensor, torch.Tensor]] = []

    def add(self, slots: torch.Tensor) -> None:
        self.added.append(slots)

    def sample(self, batch_size: int, size: int, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randint(0, size, (batch_size,), generator=generator), torch.ones(batch_size)

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        self.priorities.append((slots, priority))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _write(buffer_or_storage, obs, reward, next_obs, terminated=None, truncated=None, action_dim=1):
    """One step of N envs; obs / next_obs [N, D], reward [N]."""
    N = obs.shape[0]
    terminated = torch.zeros(N, dtype=torch.bool) if terminated is None else torch.tensor(terminated)
    truncated = torch.zeros(N, dtype=torch.bool) if truncated is None else torch.tensor(truncated)
    action = torch.zeros(N, action_dim)
    return buffer_or_storage.extend(obs, action, reward, next_obs, terminated, truncated)


def _column(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)[:, None]


# -- storage -------------------------------------------------------------------------------------------------------


def test_ring_wraps_keeping_newest_and_filled_slots_are_a_prefix():
    # T = 3, N = 2, obs = 10 t + n. After 2 steps rows 0, 1 are full: slots 0..3 hold steps 0, 0, 1, 1.
    storage = ReplayStorage(3, 2, obs_dim=1, action_dim=1)
    for t in range(2):
        slots = _write(storage, _column([10 * t, 10 * t + 1]), torch.zeros(2), _column([0, 0]))
        torch.testing.assert_close(slots, torch.tensor([2 * t, 2 * t + 1]))  # row t, envs 0 and 1
    assert storage.size == 4
    torch.testing.assert_close(storage.gather(torch.arange(4))["obs"][:, 0], torch.tensor([0.0, 1, 10, 11]))
    # 5 steps: step 3 -> row 0, step 4 -> row 1, step 2 stays in row 2; steps 0 and 1 are overwritten.
    for t in range(2, 5):
        _write(storage, _column([10 * t, 10 * t + 1]), torch.zeros(2), _column([0, 0]))
    assert storage.size == 6 == storage.capacity
    all_slots = torch.arange(6)
    torch.testing.assert_close(storage.gather(all_slots)["obs"][:, 0], torch.tensor([30.0, 31, 40, 41, 20, 21]))
    torch.testing.assert_close(storage.slot_step(all_slots), torch.tensor([3, 3, 4, 4, 2, 2]))
    assert storage.oldest_step == 2
    # nbytes: obs + next_obs + action 3 * 6 * 4 B, reward 6 * 4, terminated/truncated 2 * 6, five int64 tables.
    assert storage.nbytes == 3 * 24 + 24 + 12 + 3 * 6 * 8 + 2 * 2 * 8


def test_next_obs_at_truncation_is_the_final_obs_not_the_reset_obs():
    # One env; the episode is truncated at step 1 with final obs 7; the auto-reset obs 0 is the obs of step 2.
    buffer = ReplayBuffer(ReplayStorage(4, 1, 1, 1), RecordingUniformSampler(), gamma=0.9)
    _write(buffer, _column([5]), torch.tensor([1.0]), _column([6]))
    _write(buffer, _column([6]), torch.tensor([1.0]), _column([7]), truncated=[True])
    _write(buffer, _column([0]), torch.tensor([1.0]), _column([1]))
    batch = buffer.gather(torch.tensor([1, 2]))
    torch.testing.assert_close(batch["next_obs"][:, 0], torch.tensor([7.0, 1.0]))
    torch.testing.assert_close(batch["truncated"], torch.tensor([True, False]))
    torch.testing.assert_close(batch["terminated"], torch.tensor([False, False]))
    torch.testing.assert_close(batch["discount"], torch.tensor([0.9, 0.9]))
    torch.testing.assert_close(batch["weights"], torch.tensor([1.0, 1.0]))
    assert [s.tolist() for s in buffer.sampler.added] == [[0], [1], [2]]


def test_update_priority_forwards_absolute_td_error():
    buffer = ReplayBuffer(ReplayStorage(4, 1, 1, 1), RecordingUniformSampler())
    buffer.update_priority(torch.tensor([0, 1]), torch.tensor([-2.0, 3.0]))
    slots, priority = buffer.sampler.priorities[0]
    torch.testing.assert_close(priority, torch.tensor([2.0, 3.0]))


# -- n-step --------------------------------------------------------------------------------------------------------


def _nstep_buffer() -> ReplayBuffer:
    # N = 2, T = 8, 5 steps, rewards r_t = 2^t = [1, 2, 4, 8, 16] in both envs, next_obs = 100 + t.
    # env 0 is truncated at t = 1 (next_obs 101 is its final obs); env 1 terminates at t = 2.
    buffer = ReplayBuffer(ReplayStorage(8, 2, 1, 1), RecordingUniformSampler(), [NStep(3, 0.5)], gamma=0.5)
    for t in range(5):
        _write(
            buffer,
            _column([t, t]),
            torch.full((2,), 2.0**t),
            _column([100 + t, 100 + t]),
            terminated=[False, t == 2],
            truncated=[t == 1, False],
        )
    return buffer


def test_nstep_truncation_inside_window_bootstraps_with_gamma_k():
    # env 0, t = 0, n = 3: steps 0, 1 then truncation at 1 -> k = 2.
    # reward = 1 + 0.5 * 2 = 2; next_obs = final obs 101; discount = 0.5^2 = 0.25; not terminated (bootstrap).
    batch = _nstep_buffer().gather(torch.tensor([0 * 2 + 0]))
    torch.testing.assert_close(batch["reward"], torch.tensor([2.0]))
    torch.testing.assert_close(batch["next_obs"][:, 0], torch.tensor([101.0]))
    torch.testing.assert_close(batch["discount"], torch.tensor([0.25]))
    assert batch["truncated"].tolist() == [True] and batch["terminated"].tolist() == [False]


def test_nstep_termination_inside_window_stops_without_bootstrap():
    # env 1, t = 1: steps 1, 2, terminated at 2 -> k = 2: reward = 2 + 0.5 * 4 = 4, terminated, discount 0.25.
    # env 1, t = 0: steps 0, 1, 2 -> k = 3: reward = 1 + 0.5 * 2 + 0.25 * 4 = 3, terminated, discount 0.125.
    batch = _nstep_buffer().gather(torch.tensor([1 * 2 + 1, 0 * 2 + 1]))
    torch.testing.assert_close(batch["reward"], torch.tensor([4.0, 3.0]))
    torch.testing.assert_close(batch["discount"], torch.tensor([0.25, 0.125]))
    torch.testing.assert_close(batch["next_obs"][:, 0], torch.tensor([102.0, 102.0]))
    assert batch["terminated"].tolist() == [True, True]


def test_nstep_window_stops_at_the_newest_step():
    # Newest step is 4. env 0 from t = 2 (new episode after the truncation): steps 2, 3, 4 -> k = 3:
    #   4 + 0.5 * 8 + 0.25 * 16 = 12, discount 0.125, next_obs 104.
    # env 0 from t = 3: steps 3, 4 -> k = 2: 8 + 0.5 * 16 = 16, discount 0.25, next_obs 104.
    # env 1 from t = 4 (after its termination at 2): step 4 only -> 16, discount 0.5.
    batch = _nstep_buffer().gather(torch.tensor([2 * 2 + 0, 3 * 2 + 0, 4 * 2 + 1]))
    torch.testing.assert_close(batch["reward"], torch.tensor([12.0, 16.0, 16.0]))
    torch.testing.assert_close(batch["discount"], torch.tensor([0.125, 0.25, 0.5]))
    torch.testing.assert_close(batch["next_obs"][:, 0], torch.tensor([104.0, 104.0, 104.0]))
    assert batch["terminated"].tolist() == [False] * 3 and batch["truncated"].tolist() == [False] * 3


def test_nstep_window_crosses_the_ring_seam():
    # T = 4, N = 1, 6 steps, r_t = t, no episode end: step 3 in row 3, steps 4, 5 in rows 0, 1.
    # From t = 3 with n = 3, gamma = 0.5: 3 + 0.5 * 4 + 0.25 * 5 = 6.25, next_obs = 100 + 5, discount 0.125.
    buffer = ReplayBuffer(ReplayStorage(4, 1, 1, 1), RecordingUniformSampler(), [NStep(3, 0.5)])
    for t in range(6):
        _write(buffer, _column([t]), torch.tensor([float(t)]), _column([100 + t]))
    batch = buffer.gather(torch.tensor([3]))
    torch.testing.assert_close(batch["reward"], torch.tensor([6.25]))
    torch.testing.assert_close(batch["next_obs"][:, 0], torch.tensor([105.0]))
    torch.testing.assert_close(batch["discount"], torch.tensor([0.125]))


# -- hindsight -----------------------------------------------------------------------------------------------------


def _sparse_reward(achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
    """0 when the goal is reached, -1 otherwise: [B, G] -> [B]."""
    return -((achieved_goal - desired_goal).abs().sum(-1) > 0.5).float()


def _her_buffer(strategy: str, k: float = 4) -> ReplayBuffer:
    # obs = [achieved, desired]. next_obs achieved goal encodes its source: 1000 n + t; desired goal = -1, reward -7.
    # T = 8, N = 2, 12 steps, so steps 4..11 remain. env 0: episodes of 3 steps truncated at t = 2, 5, 8, 11.
    # env 1: episodes of 5 steps terminated at t = 4, 9; its episode from 10 is still open at the newest step 11.
    her = Hindsight(_sparse_reward, achieved_goal=slice(0, 1), desired_goal=slice(1, 2), strategy=strategy, k=k)
    buffer = ReplayBuffer(ReplayStorage(8, 2, 2, 1), RecordingUniformSampler(), [her])
    for t in range(12):
        obs = torch.tensor([[0.0, -1.0], [0.0, -1.0]])
        next_obs = torch.tensor([[float(t), -1.0], [1000.0 + t, -1.0]])
        terminated, truncated = [False, t % 5 == 4], [t % 3 == 2, False]
        _write(buffer, obs, torch.full((2,), -7.0), next_obs, terminated=terminated, truncated=truncated)
    return buffer


def _expected_bounds(env: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Episode steps still in the ring (oldest step 4), worked out from the episode layout above."""
    length = torch.where(env == 0, 3, 5)
    start = step // length * length
    return start.clamp(min=4), torch.minimum(start + length - 1, torch.tensor(11))


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_hindsight_goals_stay_inside_their_episode(strategy):
    buffer = _her_buffer(strategy)
    generator = torch.Generator().manual_seed(1)
    batch = buffer.gather(torch.arange(16).repeat(1250), generator=generator)  # every slot 1250 times
    env, step = buffer.storage.slot_env(batch["slots"]), buffer.storage.slot_step(batch["slots"])
    relabel = batch["obs"][:, 1] != -1
    goal = batch["obs"][relabel, 1].long()
    goal_env, goal_step = goal // 1000, goal % 1000
    env, step = env[relabel], step[relabel]
    first, last = _expected_bounds(env, step)
    assert torch.equal(goal_env, env)
    assert bool(((goal_step >= first) & (goal_step <= last)).all())
    if strategy == "future":
        assert bool((goal_step >= step).all())
        # every later step of the episode is reachable: env 0 t = 9 -> {9, 10, 11}; env 1 t = 10 -> {10, 11}
        assert set(goal_step[(env == 0) & (step == 9)].tolist()) == {9, 10, 11}
        assert set(goal_step[(env == 1) & (step == 10)].tolist()) == {10, 11}
    if strategy == "final":
        assert torch.equal(goal_step, last)
    if strategy == "episode":
        # env 1's first episode (steps 0..4) kept only step 4; env 0 t = 4 can use 4, 5 (step 3 overwritten)
        assert set(goal_step[(env == 1) & (step == 4)].tolist()) == {4}
        assert set(goal_step[(env == 0) & (step == 4)].tolist()) == {4, 5}
        assert set(goal_step[(env == 0) & (step == 11)].tolist()) == {9, 10, 11}
    torch.testing.assert_close(batch["next_obs"][relabel, 1], batch["obs"][relabel, 1])
    # k = 4: a fraction 4 / 5 = 0.8 is relabelled (binomial std over 20000 rows is 0.003)
    assert abs(relabel.float().mean().item() - 0.8) < 0.015


def test_hindsight_rewards_follow_compute_reward():
    # final strategy, hand-worked: env 0 t = 11 is its episode's last step, so its own goal: reward 0;
    # env 0 t = 9 gets goal 11 != achieved 9: reward -1; env 1 t = 10 gets goal 1011 != 1010: reward -1.
    buffer = _her_buffer("final", k=1e9)  # relabel fraction 1 - 1e-9: every row here
    slots = torch.tensor([(11 % 8) * 2 + 0, (9 % 8) * 2 + 0, (10 % 8) * 2 + 1])
    batch = buffer.gather(slots, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(batch["obs"][:, 1], torch.tensor([11.0, 11.0, 1011.0]))
    torch.testing.assert_close(batch["reward"], torch.tensor([0.0, -1.0, -1.0]))
    # random batch: relabelled rows carry compute_reward, the others keep the stored reward -7
    buffer_k4 = _her_buffer("future")
    batch = buffer_k4.gather(torch.arange(16).repeat(32), generator=torch.Generator().manual_seed(2))
    relabel = batch["obs"][:, 1] != -1
    expected = _sparse_reward(batch["next_obs"][:, 0:1], batch["next_obs"][:, 1:2])
    torch.testing.assert_close(batch["reward"][relabel], expected[relabel])
    assert bool((batch["reward"][~relabel] == -7).all()) and bool((expected[relabel] == 0).any())
    torch.testing.assert_close(batch["weights"], torch.ones(512))


def test_hindsight_composes_with_prioritized_sampler():
    samplers = pytest.importorskip("robopt.buffers.samplers")
    her = Hindsight(_sparse_reward, slice(0, 1), slice(1, 2), strategy="future")
    storage = ReplayStorage(4, 2, 2, 1)
    buffer = ReplayBuffer(storage, samplers.PrioritizedSampler(storage.capacity), [her])
    for t in range(6):
        _write(buffer, torch.tensor([[0.0, -1.0]] * 2), torch.zeros(2), torch.tensor([[t, -1.0], [t, -1.0]]))
    buffer.update_priority(torch.arange(8), torch.arange(8.0))
    batch = buffer.sample(8, generator=torch.Generator().manual_seed(0))
    slots, weights = buffer.sampler.sample(8, storage.size, torch.Generator().manual_seed(0))
    torch.testing.assert_close(batch["weights"], weights)  # HER leaves the IS weights alone
    goal_step = batch["obs"][:, 1]
    relabel = goal_step != -1
    assert bool((goal_step[relabel] >= storage.slot_step(batch["slots"])[relabel]).all())


# -- state and bad input -------------------------------------------------------------------------------------------


def test_state_dict_round_trip_gives_identical_samples():
    def make() -> ReplayBuffer:
        return ReplayBuffer(ReplayStorage(5, 2, 3, 2), RecordingUniformSampler(), [NStep(2, 0.9)], gamma=0.9)

    def step(buffer: ReplayBuffer, t: int) -> None:
        g = torch.Generator().manual_seed(t)
        obs, action, reward, next_obs = (torch.randn(2, *dims, generator=g) for dims in ((3,), (2,), (), (3,)))
        buffer.extend(obs, action, reward, next_obs, torch.tensor([t % 4 == 3, False]), torch.tensor([False, t == 5]))

    original = make()
    for t in range(7):
        step(original, t)
    saved = io.BytesIO()
    torch.save(original.state_dict(), saved)
    saved.seek(0)
    resumed = make()
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    for t in (7, 8, 9):  # the resumed run continues exactly, across the ring seam
        step(original, t)
        step(resumed, t)
        first = original.sample(8, generator=torch.Generator().manual_seed(t))
        second = resumed.sample(8, generator=torch.Generator().manual_seed(t))
        assert first.keys() == second.keys()
        for key in first:
            torch.testing.assert_close(first[key], second[key])


def _one_line_error(match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_bad_inputs_give_one_line_errors():
    storage = ReplayStorage(2, 2, 3, 1)
    _one_line_error(
        "capacity 4 .* smaller than batch_size 8", ReplayBuffer, storage, RecordingUniformSampler(), batch_size=8
    )
    buffer = ReplayBuffer(storage, RecordingUniformSampler())
    _one_line_error("holds 0 transitions, fewer than batch_size 1", buffer.sample, 1)
    _one_line_error(
        r"replay obs: expected shape \[2, 3\], got \[2, 4\]",
        buffer.extend,
        torch.zeros(2, 4),
        torch.zeros(2, 1),
        torch.zeros(2),
        torch.zeros(2, 3),
        torch.zeros(2, dtype=torch.bool),
        torch.zeros(2, dtype=torch.bool),
    )
    _one_line_error("capacity_per_env must be an integer >= 1", ReplayStorage, 0, 2, 3, 1)
    other = ReplayBuffer(ReplayStorage(4, 2, 3, 1), RecordingUniformSampler())
    message = _one_line_error(
        "capacity_per_env=2.*but this buffer has capacity_per_env=4", other.load_state_dict, buffer.state_dict()
    )
    assert "num_envs=2" in message
    _one_line_error("n-step n must be an integer >= 1", NStep, 0, 0.99)
    _one_line_error(
        "strategy 'later' is unknown; allowed: future, final, episode",
        Hindsight,
        _sparse_reward,
        slice(0, 1),
        slice(1, 2),
        strategy="later",
    )
    _one_line_error("k must be a finite number >= 0", Hindsight, _sparse_reward, slice(0, 1), slice(1, 2), k=-1)
    _one_line_error("differ in size", Hindsight, _sparse_reward, slice(0, 1), slice(1, 3))
    outside = Hindsight(_sparse_reward, slice(0, 2), slice(2, 4))
    _one_line_error(
        r"desired_goal slice\(2, 4, None\) lies outside obs_dim 3",
        ReplayBuffer,
        storage,
        RecordingUniformSampler(),
        [outside],
    )
    wrong = Hindsight(lambda achieved_goal, desired_goal: torch.zeros(len(achieved_goal), 1), slice(0, 1), slice(1, 2))
    her_buffer = ReplayBuffer(storage, RecordingUniformSampler(), [wrong])
    for _ in range(2):
        _write(her_buffer, torch.zeros(2, 3), torch.zeros(2), torch.zeros(2, 3))
    _one_line_error(r"compute_reward must return a tensor of shape \[4\] \(batch\), got \[4, 1\]", her_buffer.sample, 4)


def test_nstep_and_hindsight_cannot_be_combined():
    from robopt.buffers import Hindsight, NStep, ReplayBuffer, ReplayStorage, UniformSampler

    storage = ReplayStorage(8, 1, 4, 1)
    her = Hindsight(
        lambda achieved_goal, desired_goal: -(achieved_goal - desired_goal).abs().sum(-1), slice(0, 2), slice(2, 4)
    )
    with pytest.raises(ValueError, match="NStep and Hindsight cannot be combined"):
        ReplayBuffer(storage, UniformSampler(storage.capacity), (NStep(3, 0.9), her))
