from __future__ import annotations

import io
import math

import pytest
import torch

from robopt.fleet.retrieval import (
    WEIGHTINGS,
    FertTargets,
    SuccessPool,
    episode_windows,
    failure_windows,
    fert_batch,
    fert_bc_loss,
)
from robopt.policies.gaussian import GaussianPolicy


def column(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)[:, None]  # [L, 1]


def ranking_pool(**kwargs) -> SuccessPool:
    """D = 1, W = 2, one episode obs 0, 1, 3, 6 with actions 0.1, 0.2, 0.3, 0.4.

    Slots (window ending at t, front-padded by obs[0]): 0: [0, 0], 1: [0, 1], 2: [1, 3], 3: [3, 6].
    """
    pool = SuccessPool(obs_dim=1, action_dim=1, window=2, capacity=10, **kwargs)
    assert pool.add_episode(column(0, 1, 3, 6), column(0.1, 0.2, 0.3, 0.4)) == 4
    return pool


@pytest.mark.parametrize("chunk_size", [1, 3, 4096])
def test_query_returns_the_true_nearest_segments(chunk_size):
    pool = ranking_pool()
    assert pool.size == 4 and pool.episodes == 1
    torch.testing.assert_close(pool.windows[:4, :, 0], torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 3.0], [3.0, 6.0]]))
    # query [1, 2]: squared distances to slots 0..3 = 1+4, 1+1, 0+1, 4+16 = 5, 2, 1, 20 -> slots 2, 1, 0, 3
    # query [6, 6]: 36+36, 36+25, 25+9, 9+0 = 72, 61, 34, 9 -> slots 3, 2, 1, 0
    queries = torch.tensor([[1.0, 2.0], [6.0, 6.0]])[:, :, None]  # [Q=2, W=2, D=1]
    slots, distance = pool.nearest(queries, k=4, chunk_size=chunk_size)
    assert slots.tolist() == [[2, 1, 0, 3], [3, 2, 1, 0]]
    # D = 1: normalization divides every difference by std; obs 0, 1, 3, 6 have mean 2.5, var (6.25+2.25+0.25+12.25)/4
    std = math.sqrt(5.25)
    expected = torch.tensor([[1.0, 2.0, 5.0, 20.0], [9.0, 34.0, 61.0, 72.0]]).sqrt() / std
    torch.testing.assert_close(distance, expected, rtol=1e-5, atol=1e-6)
    assert pool.query(queries, k=2, chunk_size=chunk_size).tolist() == [[2, 1], [3, 2]]
    # supervising pairs: the last step of each segment, (obs[t], action[t])
    obs, action = pool.segments(pool.query(queries, k=2, chunk_size=chunk_size))
    torch.testing.assert_close(obs, column(3, 1, 6, 3))
    torch.testing.assert_close(action, column(0.3, 0.2, 0.4, 0.3))


def test_more_neighbours_than_segments_returns_all():
    assert ranking_pool().query(torch.zeros(1, 2, 1), k=9).tolist() == [[0, 1, 2, 3]]  # sq 0, 1, 10, 45


@pytest.mark.parametrize("chunk_size", [1, 2, 4096])
def test_ties_go_to_the_newer_segment(chunk_size):
    # W = 1, capacity 3, the episode obs 0, 5 added twice: segment n goes to slot n % 3
    #   n=0 -> slot 0 (obs 0), n=1 -> slot 1 (obs 5), n=2 -> slot 2 (obs 0), n=3 -> slot 0 (obs 5, overwrites n=0)
    pool = SuccessPool(obs_dim=1, action_dim=1, window=1, capacity=3)
    pool.add_episode(column(0, 5), column(1, 2))
    pool.add_episode(column(0, 5), column(1, 2))
    # query 4: slots 0 and 1 (obs 5) tie at raw distance 1, slot 2 (obs 0) is at 4; slot 0 holds the newer segment
    assert pool.query(column(4)[:, :, None], k=3, chunk_size=chunk_size).tolist() == [[0, 1, 2]]
    # without wrap-around: four copies in slots 0..3, the query 1 ties slots 0 and 2 (obs 0): newer (2) first
    pool = SuccessPool(obs_dim=1, action_dim=1, window=1, capacity=4)
    pool.add_episode(column(0, 5), column(1, 2))
    pool.add_episode(column(0, 5), column(1, 2))
    assert pool.query(column(1)[:, :, None], k=4, chunk_size=chunk_size).tolist() == [[2, 0, 3, 1]]


def test_normalization_changes_the_nearest_neighbour_when_one_dimension_is_scaled():
    # W = 1; pool a = (0, 0) (slot 0), b = (1, 1) (slot 1); query q = (1, 0.4)
    # raw: |q - a| = sqrt(1 + 0.16) = 1.077, |q - b| = 0.6 -> b
    # dimension 1 times 1000: a = (0, 0), b = (1, 1000), q = (1, 400): |q - a| = 400.001, |q - b| = 600 -> a
    # normalized (mean (0.5, 0.5 s), std (0.5, 0.5 s) for scale s): q = (1, -0.2), a = (-1, -1), b = (1, 1)
    #   |q - a| = sqrt(4 + 0.64) = 2.154, |q - b| = 1.2 -> b, whatever s is
    for scale, raw_nearest in ((1.0, 1), (1000.0, 0)):
        obs = torch.tensor([[0.0, 0.0], [1.0, scale]])
        query = torch.tensor([[[1.0, 0.4 * scale]]])
        raw = SuccessPool(obs_dim=2, action_dim=1, window=1, capacity=4, normalize=False)
        normalized = SuccessPool(obs_dim=2, action_dim=1, window=1, capacity=4)
        for pool in (raw, normalized):
            pool.add_episode(obs, column(-1, 1))
        assert raw.query(query, k=1).tolist() == [[raw_nearest]]
        slots, distance = normalized.nearest(query, k=2)
        assert slots.tolist() == [[1, 0]]
        torch.testing.assert_close(distance, torch.tensor([[1.2, math.sqrt(4.64)]]), rtol=1e-5, atol=1e-6)


def test_ring_evicts_the_oldest_segments():
    # capacity 3, W = 1: obs 0, 1 -> slots 0, 1; obs 2, 3 -> slots 2, 0 (obs 3 evicts obs 0, the oldest)
    pool = SuccessPool(obs_dim=1, action_dim=1, window=1, capacity=3)
    pool.add_episode(column(0, 1), column(10, 11))
    pool.add_episode(column(2, 3), column(12, 13))
    assert (pool.size, pool.written, len(pool)) == (3, 4, 3)
    assert pool.windows[:, 0, 0].tolist() == [3.0, 1.0, 2.0]
    slots = pool.query(column(0)[:, :, None], k=3)
    assert slots.tolist() == [[1, 2, 0]]  # obs 1, 2, 3: obs 0 is gone
    assert pool.segments(slots)[1][:, 0].tolist() == [11.0, 12.0, 13.0]
    # the statistics keep every observation ever added: mean of 0, 1, 2, 3
    assert float(pool.normalizer.count) == 4.0 and float(pool.normalizer.mean[0]) == 1.5
    # one episode longer than the ring: segments n = 0..4 of obs 0..4, slots n % 3 -> obs 3, 4, 2
    pool = SuccessPool(obs_dim=1, action_dim=1, window=1, capacity=3)
    assert pool.add_episode(column(0, 1, 2, 3, 4), column(0, 1, 2, 3, 4)) == 5
    assert pool.windows[:, 0, 0].tolist() == [3.0, 4.0, 2.0] and pool.actions[:, 0].tolist() == [3.0, 4.0, 2.0]


def test_stride_keeps_the_last_step():
    # W = 2, stride 2, L = 5: segments end at t = 4, 2, 0, written in time order
    pool = SuccessPool(obs_dim=1, action_dim=1, window=2, capacity=8, stride=2)
    assert pool.add_episode(column(0, 1, 2, 3, 4), column(10, 11, 12, 13, 14)) == 3
    assert pool.windows[:3, :, 0].tolist() == [[0.0, 0.0], [1.0, 2.0], [3.0, 4.0]]
    assert pool.actions[:3, 0].tolist() == [10.0, 12.0, 14.0]
    # L = 4: ends t = 3, 1 (the first step is skipped, the last never)
    assert pool.add_episode(column(0, 1, 2, 3), column(10, 11, 12, 13)) == 2
    assert pool.windows[3:5, :, 0].tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_failure_windows_pad_short_episodes_with_the_first_obs():
    short = torch.tensor([[1.0, 2.0], [3.0, 4.0]])  # L = 2 < W = 4
    assert failure_windows(short, 4).tolist() == [[[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [3.0, 4.0]]]
    long = torch.arange(10.0).reshape(5, 2)
    assert failure_windows(long, 2).tolist() == [[[6.0, 7.0], [8.0, 9.0]]]
    assert failure_windows(long, 5).tolist() == [long.tolist()]
    assert episode_windows(column(1, 2), 3)[:, :, 0].tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 2.0]]


def test_fert_batch_retrieves_the_successful_actions():
    pool = ranking_pool()
    # failed episode obs 1, 2 -> window [1, 2] -> slots 2, 1; obs 5, 6, 6 -> window [6, 6] -> slots 3, 2
    obs, action = fert_batch(pool, [column(1, 2), column(5, 6, 6)], k=2)
    torch.testing.assert_close(obs, column(3, 1, 6, 3))
    torch.testing.assert_close(action, column(0.3, 0.2, 0.4, 0.3))
    # a failure after one step, obs 2, pads to [2, 2]: squared distances 8, 5, 2, 17 -> slot 2 (obs 3, action 0.3)
    obs, action = fert_batch(pool, [column(2)], k=1)
    torch.testing.assert_close((obs, action), (column(3), column(0.3)))


def test_fert_targets_collect_retrievals_keep_the_newest_and_feed_the_loss():
    targets = FertTargets(ranking_pool(), k=2, max_targets=3)
    assert targets.loss(tiny_policy(), 4) is None  # nothing retrieved yet
    targets.add(column(1, 2), column(0, 0), success=False)  # slots 2, 1 (as above)
    targets.add(column(5, 6, 6), column(0, 0, 0), success=False)  # slots 3, 2: four pairs, the newest 3 kept
    torch.testing.assert_close((targets.obs, targets.action), (column(1, 6, 3), column(0.2, 0.4, 0.3)))
    targets.add(column(9, 9), column(0.5, 0.5), success=True)  # a success feeds the pool, retrieves nothing
    assert len(targets.pool) == 6 and targets.obs.shape[0] == 3
    # mu = 0, log_std = 0: every drawn target's loss is 0.5 a^2 + 0.5 log 2 pi
    loss = targets.loss(tiny_policy(), 64, torch.Generator().manual_seed(0))
    assert (
        0.5 * 0.2**2 + 0.5 * math.log(2 * math.pi) < float(loss.detach()) < 0.5 * 0.4**2 + 0.5 * math.log(2 * math.pi)
    )


def tiny_policy() -> GaussianPolicy:
    """mu(s) = w s + b with w = b = 0, log_std = 0, no obs normalization: loss = 0.5 (a - mu)^2 + 0.5 log 2 pi."""
    policy = GaussianPolicy(1, 1, torch.tensor([-1.0]), torch.tensor([1.0]), hidden=(), normalize_obs=False)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.zero_()
    return policy


def test_fert_bc_loss_is_the_mean_imitation_loss_and_a_step_moves_the_mean_action_toward_the_targets():
    obs, action = fert_batch(ranking_pool(), [column(1, 2), column(5, 6, 6)], k=2)  # s 3, 1, 6, 3; a .3 .2 .4 .3
    policy = tiny_policy()
    loss = fert_bc_loss(policy, obs, action)
    half_log_2pi = 0.5 * math.log(2.0 * math.pi)
    # mean of 0.5 a^2 = 0.5 (0.09 + 0.04 + 0.16 + 0.09) / 4 = 0.0475
    torch.testing.assert_close(loss, policy.imitation_loss(obs, action).mean())
    assert float(loss.detach()) == pytest.approx(0.0475 + half_log_2pi, abs=1e-6)
    # weights 1, 1, 0, 0: (0.5 * 0.09 + 0.5 * 0.04) / 2 = 0.0325
    weighted = fert_bc_loss(policy, obs, action, torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert float(weighted.detach()) == pytest.approx(0.0325 + half_log_2pi, abs=1e-6)
    # one SGD step, lr 0.05: dL/db = -mean(a) = -0.3, dL/dw = -mean(a s) = -(0.9 + 0.2 + 2.4 + 0.9) / 4 = -1.1
    #   -> b = 0.015, w = 0.055; mean actions at s = 3, 1, 6, 3: 0.18, 0.07, 0.345, 0.18 (targets .3 .2 .4 .3, from 0)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.05)
    loss.backward()
    optimizer.step()
    mean_action = policy.mean_action(obs).detach()
    torch.testing.assert_close(mean_action, column(0.18, 0.07, 0.345, 0.18), rtol=1e-5, atol=1e-6)
    assert bool(((action - mean_action).abs() < action.abs()).all())


def test_state_dict_round_trip():
    pool = SuccessPool(obs_dim=1, action_dim=1, window=2, capacity=3)
    pool.add_episode(column(0, 1), column(10, 11))
    pool.add_episode(column(2, 3), column(12, 13))  # wrapped: written 4
    buffer = io.BytesIO()
    torch.save(pool.state_dict(), buffer)
    buffer.seek(0)
    restored = SuccessPool(obs_dim=1, action_dim=1, window=2, capacity=3)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    for copy in (pool, restored):  # the next write lands on the same slot (written is restored)
        copy.add_episode(column(7), column(17))
    assert (restored.written, restored.episodes) == (5, 3)
    torch.testing.assert_close(restored.windows, pool.windows)
    torch.testing.assert_close(restored.actions, pool.actions)
    torch.testing.assert_close(restored.normalizer.mean, pool.normalizer.mean)
    queries = torch.tensor([[[0.0], [0.0]], [[6.0], [7.0]]])
    torch.testing.assert_close(restored.nearest(queries, k=3), pool.nearest(queries, k=3))
    with pytest.raises(ValueError, match="window=2, .* but this pool has .*window=3"):
        SuccessPool(obs_dim=1, action_dim=1, window=3, capacity=3).load_state_dict(pool.state_dict())


def one_line_error(call, match: str) -> None:
    with pytest.raises(ValueError, match=match) as error:
        call()
    assert "\n" not in str(error.value)


def test_bad_input_gives_one_line_value_errors():
    empty = SuccessPool(obs_dim=2, action_dim=1, window=3, capacity=5)
    one_line_error(lambda: empty.query(torch.zeros(1, 3, 2), k=1), "empty")
    one_line_error(lambda: fert_batch(empty, [torch.zeros(4, 2)], k=1), "empty")
    pool = ranking_pool()
    one_line_error(lambda: pool.query(torch.zeros(1, 3, 1), k=1), r"expected shape \[\*, 2, 1\], got \[1, 3, 1\]")
    one_line_error(lambda: pool.query(torch.zeros(1, 2, 1), k=0), "k must be")
    one_line_error(lambda: pool.add_episode(torch.zeros(3, 1), torch.zeros(2, 1)), r"action: expected shape \[3, 1\]")
    one_line_error(lambda: pool.add_episode(torch.zeros(3, 2), torch.zeros(3, 1)), r"obs: expected shape \[\*, 1\]")
    one_line_error(lambda: pool.add_episode(torch.zeros(0, 1), torch.zeros(0, 1)), "empty")
    one_line_error(lambda: pool.add_episode(column(0, math.nan), column(0, 0)), "non-finite")
    one_line_error(lambda: pool.segments(torch.tensor([4])), r"\[0, 4\)")
    one_line_error(lambda: fert_batch(pool, [], k=1), "no failed episode")
    one_line_error(lambda: failure_windows(torch.zeros(3), 2), "expected shape")
    one_line_error(lambda: SuccessPool(obs_dim=1, action_dim=1, window=0, capacity=3), "window must be")
    policy = tiny_policy()
    one_line_error(lambda: fert_bc_loss(policy, torch.zeros(3, 1), torch.zeros(2, 1)), "action: expected shape")
    one_line_error(lambda: fert_bc_loss(policy, torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2)), "positive sum")


def test_segment_ids_number_segments_through_the_ring():
    pool = SuccessPool(obs_dim=1, action_dim=1, window=2, capacity=3)
    pool.add_episode(column(0, 1), column(10, 11))
    pool.add_episode(column(2, 3), column(12, 13))  # segments 0-3; segment 3 overwrote slot 0
    torch.testing.assert_close(pool.segment_ids(torch.tensor([0, 1, 2])), torch.tensor([3, 1, 2]))


def test_min_episodes_holds_retrieval_until_the_pool_has_that_many_successes():
    targets = FertTargets(ranking_pool(), k=2, min_episodes=2)  # the pool holds one successful episode
    targets.add(column(1, 2), column(0, 0), success=False)
    assert len(targets) == 0 and targets.loss(tiny_policy(), 4) is None
    targets.add(column(9, 9), column(0.5, 0.5), success=True)
    targets.add(column(1, 2), column(0, 0), success=False)
    assert len(targets) == 2


def test_max_distance_keeps_only_close_segments():
    # raw distances from the window [1, 2]: slot 0 [0, 0] sqrt 5, slot 1 [0, 1] sqrt 2, slot 2 [1, 3] 1, slot 3
    # [3, 6] sqrt 20; per window entry (/ sqrt 2): 1.58, 1.0, 0.71, 3.16
    for max_distance, expected in ((0.8, column(3)), (1.1, column(3, 1)), (0.5, None)):
        targets = FertTargets(ranking_pool(normalize=False), k=2, max_distance=max_distance)
        targets.add(column(1, 2), column(0, 0), success=False)
        if expected is None:
            assert len(targets) == 0
        else:
            torch.testing.assert_close(targets.obs, expected)


def test_unique_targets_keep_one_copy_per_segment_the_newest_last():
    plain, unique = FertTargets(ranking_pool(), k=2), FertTargets(ranking_pool(), k=2, unique=True)
    for targets in (plain, unique):
        targets.add(column(1, 2), column(0, 0), success=False)  # slots 2, 1
        targets.add(column(1, 2), column(0, 0), success=False)  # the same two again
        targets.add(column(5, 6, 6), column(0, 0, 0), success=False)  # slots 3, 2
    assert len(plain) == 6
    torch.testing.assert_close((unique.obs, unique.action), (column(1, 6, 3), column(0.2, 0.4, 0.3)))
    torch.testing.assert_close(unique.ids, torch.tensor([1, 3, 2]))
    restored = FertTargets(ranking_pool(), k=2, unique=True)
    restored.load_state_dict(unique.state_dict())
    torch.testing.assert_close(restored.ids, unique.ids)
    old = unique.state_dict()
    del old["ids"]  # a checkpoint from before unique targets: each row its own (negative) id
    restored.load_state_dict(old)
    torch.testing.assert_close(restored.ids, torch.tensor([-1, -2, -3]))


def test_advantage_weighting_clones_only_what_the_critic_prefers_to_the_policy():
    policy = tiny_policy()  # deterministic action 0 everywhere; targets' actions 0.2, 0.3, 0.4 (all > 0)
    weighted = {name: FertTargets(ranking_pool(), k=2, weighting=name, temperature=0.2) for name in WEIGHTINGS}
    for targets in weighted.values():
        targets.add(column(1, 2), column(0, 0), success=False)
        targets.add(column(5, 6, 6), column(0, 0, 0), success=False)
    loss = lambda targets, q: targets.loss(policy, 64, torch.Generator().manual_seed(0), q=q)  # noqa: E731
    prefers_larger = lambda obs, action: action[:, 0]  # noqa: E731  A = a - 0 > 0
    prefers_smaller = lambda obs, action: -action[:, 0]  # noqa: E731  A < 0
    plain = loss(weighted["none"], None)
    torch.testing.assert_close(loss(weighted["binary"], prefers_larger), plain)  # every weight 1
    assert weighted["binary"].last_weight == 1.0
    assert float(loss(weighted["binary"], prefers_smaller).detach()) == 0.0 and weighted["binary"].last_weight == 0.0
    pick = torch.randint(4, (64,), generator=torch.Generator().manual_seed(0))
    obs, action = weighted["exp"].obs[pick], weighted["exp"].action[pick]
    expected = (torch.exp(action[:, 0] / 0.2) * policy.imitation_loss(obs, action)).mean()  # exp(1 .. 2): no clip
    torch.testing.assert_close(loss(weighted["exp"], prefers_larger), expected)
    clipped = loss(weighted["exp"], lambda obs, action: 100.0 * action[:, 0])  # exp(100 .. 200) -> 20
    torch.testing.assert_close(clipped, 20.0 * policy.imitation_loss(obs, action).mean())
    one_line_error(lambda: loss(weighted["exp"], None), "weighting=exp needs the learner's critic")


def test_bad_fert_variant_options_are_one_line_errors():
    pool = ranking_pool()
    one_line_error(lambda: FertTargets(pool, k=1, min_episodes=0), "min_episodes must be")
    one_line_error(lambda: FertTargets(pool, k=1, max_distance=-0.1), "max_distance must be a finite number >= 0")
    one_line_error(lambda: FertTargets(pool, k=1, weighting="advantage"), "weighting must be one of none, binary")
    one_line_error(lambda: FertTargets(pool, k=1, temperature=0.0), "temperature must be a finite number > 0")
    one_line_error(
        lambda: fert_bc_loss(tiny_policy(), torch.zeros(1, 1), torch.zeros(1, 1), -torch.ones(1), False),
        "weights must be >= 0$",
    )
