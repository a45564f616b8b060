"""``ReplayStorage.extend_steps``: L steps at once give exactly the rows and episode bookkeeping of L ``extend``s."""

from __future__ import annotations

import pytest
import torch

from robopt.buffers.replay import ReplayBuffer, ReplayStorage
from robopt.buffers.samplers import UniformSampler

T, N, D, A = 7, 3, 2, 1


def random_steps(generator: torch.Generator, L: int, done_rate: float) -> dict[str, torch.Tensor]:
    ended = torch.rand(L, N, generator=generator) < done_rate
    terminated = ended & (torch.rand(L, N, generator=generator) < 0.5)
    return {
        "obs": torch.randn(L, N, D, generator=generator),
        "action": torch.randn(L, N, A, generator=generator),
        "reward": torch.randn(L, N, generator=generator),
        "next_obs": torch.randn(L, N, D, generator=generator),
        "terminated": terminated,
        "truncated": ended & ~terminated,
        "tag": torch.randn(L, N, 1, generator=generator),
    }


@pytest.mark.parametrize("done_rate", [0.0, 0.3, 0.9])
def test_bulk_writes_equal_step_by_step_writes_through_wraps(done_rate):
    generator = torch.Generator().manual_seed(3)
    bulk, single = (ReplayStorage(T, N, D, A, extra_fields={"tag": 1}) for _ in range(2))
    for L in (3, 7, 1, 5, 6, 2, 7, 4):  # 35 steps: the ring of 7 wraps five times, some writes straddle the wrap
        steps = random_steps(generator, L, done_rate)
        slots = bulk.extend_steps(**steps)
        expected = torch.stack([single.extend(**{k: v[i] for k, v in steps.items()}) for i in range(L)])
        torch.testing.assert_close(slots, expected)
        assert bulk.steps == single.steps
        for name, tensor in single.tensors.items():
            torch.testing.assert_close(bulk.tensors[name], tensor, msg=f"{name} after a write of {L}")
        everything = torch.arange(bulk.size)
        for got, want in zip(bulk.episode_bounds(everything), single.episode_bounds(everything)):
            torch.testing.assert_close(got, want)


def test_episode_bookkeeping_by_hand():
    storage = ReplayStorage(8, 1, 1, 1)
    done = torch.tensor([[0], [1], [0], [0], [1], [0]], dtype=torch.bool)  # episodes: steps 0-1, 2-4, 5- (open)
    zeros = torch.zeros(6, 1)
    storage.extend_steps(zeros[..., None], zeros[..., None], zeros, zeros[..., None], done, torch.zeros_like(done))
    t = storage.tensors
    assert t["episode_id"][:6, 0].tolist() == [0, 0, 1, 1, 1, 2]
    assert t["episode_start"][:6, 0].tolist() == [0, 0, 2, 2, 2, 5]
    assert t["episode_end"][:2, 0].tolist() == [1, 4]
    assert t["current_episode"].tolist() == [2] and t["current_start"].tolist() == [5]
    first, last = storage.episode_bounds(torch.arange(6))
    assert first.tolist() == [0, 0, 2, 2, 2, 5] and last.tolist() == [1, 1, 4, 4, 4, 5]


def test_buffer_registers_bulk_slots_and_bad_writes_are_one_line_errors():
    storage = ReplayStorage(T, N, D, A)
    replay = ReplayBuffer(storage, UniformSampler(storage.capacity))
    steps = random_steps(torch.Generator().manual_seed(0), 4, 0.3)
    del steps["tag"]
    assert replay.extend_steps(**steps).shape == (4, N) and replay.size == 4 * N
    too_long = random_steps(torch.Generator().manual_seed(0), T + 1, 0.3)
    del too_long["tag"]
    with pytest.raises(ValueError, match="writes 1 to 7 steps"):
        storage.extend_steps(**too_long)
    with pytest.raises(ValueError, match="replay reward"):
        storage.extend_steps(**{**steps, "reward": torch.zeros(4, N + 1)})
    assert storage.steps == 4  # nothing written by the refused calls
