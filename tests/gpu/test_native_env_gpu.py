"""``mujoco_warp`` on a CUDA device: contract at large N and parity with the CPU backend at small N.

Marked ``gpu`` and skipped without CUDA. Not yet run on a GPU (no GPU was available while writing it).
No timing asserts: speed is reported by ``benchmarks/env_throughput.py --backend mujoco_warp --device cuda``.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
pytest.importorskip("mujoco_warp")

from robopt.envs import make_env  # noqa: E402


def test_large_batch_contract_on_cuda() -> None:
    env = make_env("mujoco/HalfCheetah", 4096, backend="auto", device="cuda", seed=0)  # auto -> mujoco_warp
    assert type(env.physics).__name__ == "WarpBackend"
    obs = env.reset(seed=0)
    assert obs.device.type == "cuda" and obs.shape == (4096, 17)
    for _ in range(20):
        action = torch.rand(4096, env.action_dim, device="cuda") * 2 - 1
        obs, reward, terminated, truncated, info = env.step(action)
    assert reward.device.type == terminated.device.type == info["final_obs"].device.type == "cuda"
    assert torch.isfinite(obs).all() and not info["unstable"].any()


def test_cuda_parity_with_cpu_backend_short_horizon() -> None:
    # Same tolerance argument as tests/contracts/test_native_env_warp.py (float32, contacts; 10 steps).
    gpu_env = make_env("mujoco/Hopper", 4, backend="mujoco_warp", device="cuda", seed=0)
    cpu_env = make_env("mujoco/Hopper", 4, backend="mujoco", seed=0)
    torch.testing.assert_close(gpu_env.reset(seed=1).cpu(), cpu_env.reset(seed=1), atol=2e-3, rtol=2e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        action = torch.rand(4, gpu_env.action_dim, generator=generator) * 2 - 1
        gpu_obs, gpu_reward, *_ = gpu_env.step(action.cuda())
        cpu_obs, cpu_reward, *_ = cpu_env.step(action)
        torch.testing.assert_close(gpu_obs.cpu(), cpu_obs, atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(gpu_reward.cpu(), cpu_reward, atol=2e-3, rtol=2e-3)


def test_cuda_graph_replay_matches_eager_stepping() -> None:
    # env.kwargs.graph on CUDA: captured on a side stream, replayed on torch's stream. The kernels are the same as
    # eager stepping's, but contact rows are ordered by atomic counters on a GPU, so two runs may differ in the last
    # bits: the parity tolerance of the test above, over 10 steps with a reset at step 6 and randomized masses.
    options = dict(max_episode_steps=6, randomization={"body_mass": [0.7, 1.3]})
    eager = make_env("mujoco/HalfCheetah", 256, backend="mujoco_warp", device="cuda", seed=0, **options)
    replayed = make_env("mujoco/HalfCheetah", 256, backend="mujoco_warp", device="cuda", seed=0, graph=True, **options)
    torch.testing.assert_close(eager.reset(seed=5), replayed.reset(seed=5), atol=2e-3, rtol=2e-3)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for t in range(10):
        action = torch.rand(256, eager.action_dim, generator=generator, device="cuda") * 2 - 1
        eager_out, replayed_out = eager.step(action), replayed.step(action)
        torch.testing.assert_close(eager_out[0], replayed_out[0], atol=2e-3, rtol=2e-3, msg=f"step {t}")
        torch.testing.assert_close(eager_out[1], replayed_out[1], atol=2e-3, rtol=2e-3, msg=f"step {t}")
        assert torch.equal(eager_out[3], replayed_out[3]), f"step {t}"
