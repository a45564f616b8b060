"""Replay samplers: sampled frequencies, importance weights, sum-tree consistency, input checks, resume."""

from __future__ import annotations

import io

import pytest
import torch

from robopt.buffers.samplers import PrioritizedSampler, Sampler, UniformSampler

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# Chi-square critical values at p = 0.001 (upper tail), by degrees of freedom.
CHI2_CRITICAL = {3: 16.266, 7: 24.322, 9: 27.877}


def _counts(sampler: Sampler, size: int, draws: int, batch_size: int, seed: int, device: str = "cpu") -> torch.Tensor:
    generator = torch.Generator(device=device).manual_seed(seed)
    slots = torch.cat([sampler.sample(batch_size, size, generator)[0] for _ in range(draws // batch_size)])
    assert slots.min() >= 0 and slots.max() < size
    return torch.bincount(slots.cpu(), minlength=size).double()


def _chi_square(counts: torch.Tensor, probability: torch.Tensor) -> float:
    expected = counts.sum() * probability
    return float(((counts - expected) ** 2 / expected).sum())


def _check_tree(sampler: PrioritizedSampler) -> None:
    """Every internal node equals the sum of its two children (exactly: both sides are the same float64 add)."""
    tree, half = sampler.tree.cpu(), sampler.num_leaves
    level = tree[half:]
    while level.numel() > 1:
        level = level.reshape(-1, 2).sum(dim=1)
        half //= 2
        assert torch.equal(tree[half : 2 * half], level)


@pytest.mark.parametrize("device", DEVICES)
def test_prioritized_frequencies_match_priorities(device: str) -> None:
    # alpha = 0.5, |td| = k^2 - eps for k = 1..8: p = k^2, p^alpha = k, so P(slot k-1) = k / 36.
    sampler = PrioritizedSampler(8, alpha=0.5, eps=1e-6, device=device)
    slots = torch.arange(8, device=device)
    sampler.add(slots)
    k = torch.arange(1, 9, dtype=torch.float64)
    sampler.update_priority(slots, (k**2 - 1e-6).to(device))
    torch.testing.assert_close(sampler.priority(slots).cpu(), k, rtol=1e-12, atol=0)
    counts = _counts(sampler, 8, 200_000, 2000, seed=1, device=device)
    assert _chi_square(counts, k / 36) < CHI2_CRITICAL[7]
    assert _chi_square(counts, torch.full((8,), 1 / 8, dtype=torch.float64)) > 1000  # the test can tell


def test_importance_weights_hand_worked() -> None:
    # alpha = 1, beta = 0.5, p = [1, 2, 3, 4]: P = [.1, .2, .3, .4], N = 4, N P = [.4, .8, 1.2, 1.6].
    # w = (N P)^-0.5, divided by the batch max (slot 0's 0.4^-0.5): w / max = sqrt(0.4 / (N P)) = [1, sqrt(1/2),
    # sqrt(1/3), 1/2]. With B = 10 the stratified segments are [j, j+1) of mass: cumulative masses [1, 3, 6, 10]
    # put segment 0 on slot 0, 1-2 on slot 1, 3-5 on slot 2, 6-9 on slot 3, whatever the uniform draws are.
    sampler = PrioritizedSampler(4, alpha=1.0, beta=0.5, eps=1e-6)
    slots = torch.arange(4)
    sampler.add(slots)
    sampler.update_priority(slots, torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64) - 1e-6)
    drawn, weight = sampler.sample(10, 4, torch.Generator().manual_seed(0))
    assert drawn.tolist() == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    expected = torch.tensor([1.0, 0.5**0.5, (1 / 3) ** 0.5, 0.5])[drawn]
    assert weight.dtype == torch.float32 and drawn.dtype == torch.int64
    torch.testing.assert_close(weight, expected, rtol=1e-6, atol=0)
    # Any batch: w = (N P)^-beta divided by the max over that batch, with P = stored priority / 10.
    drawn, weight = sampler.sample(3, 4, torch.Generator().manual_seed(1))
    raw = (4 * sampler.priority(drawn) / 10) ** -0.5
    torch.testing.assert_close(weight, (raw / raw.max()).float())


def test_beta_schedule() -> None:
    sampler = PrioritizedSampler(4, beta=0.4, beta_final=1.0)
    assert sampler.anneal(0.5) == pytest.approx(0.7)  # 0.4 + 0.5 * (1.0 - 0.4)
    assert sampler.anneal(2.0) == pytest.approx(1.0)  # clamped
    sampler.set_beta(0.0)  # beta = 0: no correction, all weights 1
    sampler.add(torch.arange(4))
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 5.0, 2.0, 9.0]))
    assert torch.equal(sampler.sample(16, 4)[1], torch.ones(16))


def test_update_priority_changes_distribution() -> None:
    # alpha = 1: four slots at p = 1 are uniform; raising slot 2 to p = 5 makes P = [1, 1, 5, 1] / 8.
    sampler = PrioritizedSampler(4, alpha=1.0, eps=1e-6)
    sampler.add(torch.arange(4))
    before = _counts(sampler, 4, 40_000, 1000, seed=2)
    assert _chi_square(before, torch.full((4,), 0.25, dtype=torch.float64)) < CHI2_CRITICAL[3]
    sampler.update_priority(torch.tensor([2]), torch.tensor([5.0 - 1e-6], dtype=torch.float64))
    after = _counts(sampler, 4, 40_000, 1000, seed=3)
    probability = torch.tensor([1.0, 1.0, 5.0, 1.0], dtype=torch.float64) / 8
    assert _chi_square(after, probability) < CHI2_CRITICAL[3]
    assert abs(after[2].item() / 40_000 - 0.625) < 0.01


def test_new_slots_enter_at_max_priority_and_duplicates_stay_consistent() -> None:
    # alpha = 0.5, eps = 1e-6: stored priority = (|td| + 1e-6)^0.5.
    sampler = PrioritizedSampler(10, alpha=0.5, eps=1e-6)
    sampler.add(torch.arange(4))
    assert sampler.priority(torch.arange(4)).tolist() == [1.0] * 4  # 1.0 before any update
    sampler.update_priority(torch.tensor([1, 3]), torch.tensor([9.0, 0.25], dtype=torch.float64) - 1e-6)  # -> 3, .5
    sampler.add(torch.tensor([4, 5]))
    torch.testing.assert_close(sampler.priority(torch.arange(6)), torch.tensor([1, 3, 1, 0.5, 3, 3.0]).double())
    sampler.update_priority(torch.tensor([1]), torch.tensor([0.0]))  # lowering slot 1 keeps the max ever set
    sampler.add(torch.tensor([6]))
    torch.testing.assert_close(sampler.priority(torch.tensor([6])), torch.tensor([3.0]).double())
    # Same slot three times in one batch: the last occurrence wins (|td| = 16 -> 4), the tree stays a sum tree.
    td = torch.tensor([100.0, 1.0, 4.0, 16.0], dtype=torch.float64) - 1e-6
    sampler.update_priority(torch.tensor([2, 7, 2, 2]), td)
    torch.testing.assert_close(sampler.priority(torch.tensor([2, 7])), torch.tensor([4.0, 1.0]).double())
    torch.testing.assert_close(sampler.max_priority, torch.tensor(10.0).double())  # 100^0.5 was set, then replaced
    _check_tree(sampler)
    torch.testing.assert_close(sampler.total, sampler.priority(torch.arange(10)).sum())
    sampler.add(torch.tensor([8, 8, 9]))  # duplicates in add too
    torch.testing.assert_close(sampler.priority(torch.tensor([8, 9])), torch.tensor([10.0, 10.0]).double())
    _check_tree(sampler)


def test_tree_sums_match_naive_after_many_random_updates() -> None:
    generator = torch.Generator().manual_seed(4)
    capacity = 1000  # 1024 leaves, 24 padding leaves stay 0
    sampler = PrioritizedSampler(capacity, alpha=0.7)
    naive = torch.zeros(capacity, dtype=torch.float64)
    sampler.add(torch.arange(capacity))
    naive[:] = 1.0
    for _ in range(200):
        slots = torch.randint(0, capacity, (64,), generator=generator)  # duplicates are likely
        td = torch.rand(64, generator=generator, dtype=torch.float64) * 10
        sampler.update_priority(slots, td)
        for slot, value in zip(slots.tolist(), td.tolist()):  # sequential, last write wins
            naive[slot] = (value + 1e-6) ** 0.7
    torch.testing.assert_close(sampler.priority(torch.arange(capacity)), naive, rtol=1e-15, atol=0)
    assert sampler.tree[sampler.num_leaves + capacity :].abs().sum() == 0
    _check_tree(sampler)
    torch.testing.assert_close(sampler.total, naive.sum(), rtol=1e-12, atol=0)


def test_bad_priorities_are_refused_and_leave_the_tree_unchanged() -> None:
    sampler = PrioritizedSampler(8)
    sampler.add(torch.arange(8))
    sampler.update_priority(torch.arange(8), torch.rand(8))
    tree, max_priority = sampler.tree.clone(), sampler.max_priority.clone()
    with pytest.raises(ValueError, match=r"^2 of 3 replay priorities are not finite"):
        sampler.update_priority(torch.tensor([0, 1, 2]), torch.tensor([float("nan"), 1e6, float("inf")]))
    with pytest.raises(ValueError, match=r"^1 of 2 replay priorities are negative"):
        sampler.update_priority(torch.tensor([0, 1]), torch.tensor([-1.0, 2.0]))
    with pytest.raises(ValueError, match=r"slots must be in \[0, 8\), got values in \[0, 8\]"):
        sampler.update_priority(torch.tensor([0, 8]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="does not match"):
        sampler.update_priority(torch.tensor([0, 1]), torch.tensor([1.0]))
    assert torch.equal(sampler.tree, tree) and torch.equal(sampler.max_priority, max_priority)
    assert torch.isfinite(sampler.tree).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"capacity": 0}, "capacity must be an integer >= 1"),
        ({"capacity": 4, "alpha": 1.5}, "alpha must be in"),
        ({"capacity": 4, "beta": -0.1}, "beta must be in"),
        ({"capacity": 4, "beta_final": 2.0}, "beta_final must be in"),
        ({"capacity": 4, "eps": 0.0}, "eps must be a finite number > 0"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrioritizedSampler(**kwargs)


@pytest.mark.parametrize("sampler_class", [UniformSampler, PrioritizedSampler])
def test_bad_sample_and_slot_arguments(sampler_class: type) -> None:
    sampler = sampler_class(8)
    sampler.add(torch.arange(4))
    for batch_size, size, message in [(0, 4, "batch_size must be >= 1"), (4, 0, "size"), (4, 9, r"\[1, 8\]")]:
        with pytest.raises(ValueError, match=message):
            sampler.sample(batch_size, size)
    with pytest.raises(ValueError):
        UniformSampler(0)
    if sampler_class is PrioritizedSampler:
        with pytest.raises(ValueError, match=r"slots must be in \[0, 8\), got values in \[-1, 2\]"):
            sampler.add(torch.tensor([-1, 2]))
        with pytest.raises(ValueError, match="1-D integer tensor"):
            sampler.add(torch.tensor([1.0]))
        with pytest.raises(ValueError, match="beta must be in"):
            sampler.set_beta(1.5)


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_round_trip_gives_identical_samples(device: str) -> None:
    generator = torch.Generator().manual_seed(5)
    sampler = PrioritizedSampler(50, alpha=0.6, beta=0.4, device=device)
    sampler.add(torch.arange(30, device=device))
    sampler.update_priority(torch.randint(0, 30, (20,), generator=generator), torch.rand(20, generator=generator))
    sampler.anneal(0.3)
    buffer = io.BytesIO()
    torch.save(sampler.state_dict(), buffer)
    buffer.seek(0)
    resumed = PrioritizedSampler(50, device=device)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed.beta == pytest.approx(0.58) and resumed.beta_final == 1.0  # 0.4 + 0.3 * 0.6
    for run in (sampler, resumed):
        run.add(torch.arange(30, 35, device=device))  # continues at the same max priority
    a = sampler.sample(64, 35, torch.Generator(device=device).manual_seed(6))
    b = resumed.sample(64, 35, torch.Generator(device=device).manual_seed(6))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.equal(sampler.tree, resumed.tree)
    with pytest.raises(ValueError, match="capacity 50, this one has 40"):
        PrioritizedSampler(40).load_state_dict(sampler.state_dict())


def test_uniform_sampler_covers_filled_slots_evenly() -> None:
    sampler = UniformSampler(100)
    sampler.add(torch.arange(10))
    sampler.update_priority(torch.arange(10), torch.rand(10))  # no effect
    counts = _counts(sampler, 10, 100_000, 1000, seed=7)  # asserts every slot < size
    assert _chi_square(counts, torch.full((10,), 0.1, dtype=torch.float64)) < CHI2_CRITICAL[9]
    slots, weight = sampler.sample(32, 10)
    assert slots.dtype == torch.int64 and torch.equal(weight, torch.ones(32))
    restored = UniformSampler(100)
    restored.load_state_dict(sampler.state_dict())
    a = sampler.sample(16, 10, torch.Generator().manual_seed(8))[0]
    assert torch.equal(a, restored.sample(16, 10, torch.Generator().manual_seed(8))[0])
