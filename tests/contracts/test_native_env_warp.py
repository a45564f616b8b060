"""``mujoco_warp`` backend on warp's CPU device, against the CPU ``mujoco`` backend (itself bit-exact with
Gymnasium v5, see test_native_env_parity.py), at small N over short horizons.

Tolerance: MuJoCo Warp computes in float32 (eps 1.2e-7) with its own solver kernels; one HalfCheetah step
agrees to ~1e-6 and contacts amplify the gap (measured max |obs diff| 5e-5 after 10 steps, 8e-4 after 20,
O(1) after 50). Episodes here are truncated every 10 steps, so the gap never grows past ~1e-4; the test
allows atol = rtol = 2e-3 on obs and reward.

Ant and Humanoid are only smoke-tested: MuJoCo Warp builds capsule-plane contact frames with other
tangent axes than MuJoCo C, and with a pyramidal friction cone that changes the friction force (Ant's
qvel differs by 0.02 on the first foot contact); Humanoid uses PGS, which MuJoCo Warp lacks (the backend
switches it to Newton).

The first run compiles warp kernels (~30-60 s per model, cached in WARP_CACHE_PATH, see conftest.py).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mujoco_warp")

from robopt.envs import make_env  # noqa: E402

# One xdist worker runs every warp test: warp compiles its kernels once into the cache and loads them after.
pytestmark = pytest.mark.xdist_group("warp")

TOL = {"atol": 2e-3, "rtol": 2e-3}


def _pair(name: str, num_envs: int = 2, **kwargs):
    """The same task on mujoco_warp (warp's CPU device) and on the CPU backend, same seed."""
    warp_env = make_env(f"mujoco/{name}", num_envs, backend="mujoco_warp", device="cpu", seed=0, **kwargs)
    cpu_env = make_env(f"mujoco/{name}", num_envs, backend="mujoco", seed=0, **kwargs)
    return warp_env, cpu_env


def _drive_and_compare(warp_env, cpu_env, steps: int, tol: dict) -> int:
    """Same random actions on both; compare every output. Returns how many episodes ended."""
    torch.testing.assert_close(warp_env.reset(seed=3), cpu_env.reset(seed=3), **tol)
    generator = torch.Generator().manual_seed(0)
    ended = 0
    for t in range(steps):
        low, high = cpu_env.action_low, cpu_env.action_high
        action = low + (high - low) * torch.rand(cpu_env.num_envs, cpu_env.action_dim, generator=generator)
        warp_out, cpu_out = warp_env.step(action), cpu_env.step(action)
        for index in (2, 3):  # terminated, truncated
            assert torch.equal(warp_out[index], cpu_out[index]), f"step {t}"
        torch.testing.assert_close(warp_out[4]["final_obs"], cpu_out[4]["final_obs"], **tol, msg=f"step {t}")
        torch.testing.assert_close(warp_out[1], cpu_out[1], **tol, msg=f"step {t}")
        torch.testing.assert_close(warp_out[0], cpu_out[0], **tol, msg=f"step {t}")
        ended += int((cpu_out[2] | cpu_out[3]).sum())
    return ended


@pytest.fixture(scope="module")
def cheetahs():
    """HalfCheetah (contacts, Euler) on both backends, 2 envs, episodes truncated after 10 steps."""
    return _pair("HalfCheetah", max_episode_steps=10)


def test_warp_parity_with_auto_reset(cheetahs) -> None:
    warp_env, cpu_env = cheetahs
    assert warp_env.obs_dim == cpu_env.obs_dim and warp_env.device == torch.device("cpu")
    assert _drive_and_compare(warp_env, cpu_env, steps=25, tol=TOL) == 4  # 2 rows x truncations at 10 and 20


def test_warp_per_env_params_match_cpu(cheetahs) -> None:
    # Row 1 10x heavier on both backends: the warp backend's batched model + set_const must agree with
    # the CPU backend's private MjModel + mj_setConst, and the heavier cheetah sinks faster.
    warp_env, cpu_env = cheetahs
    mass = cpu_env.model_params()["body_mass"]
    mass[1] *= 10.0
    for env in (warp_env, cpu_env):
        env.set_model_params({"body_mass": mass})
    try:
        _drive_and_compare(warp_env, cpu_env, steps=5, tol=TOL)
        torch.testing.assert_close(warp_env.physics.state()["body_mass"].double(), mass)
        physics = warp_env.physics  # both rows from the same noise-free initial state, zero action
        physics.set_state(torch.arange(2), warp_env.task.init_qpos.repeat(2, 1), torch.zeros(2, 9))
        z0 = physics.state()["qpos"][:, 1].clone()
        for _ in range(5):
            physics.step(torch.zeros(2, warp_env.action_dim), warp_env.task.frame_skip)
        drop = z0 - physics.state()["qpos"][:, 1]
        assert drop[1] > 2 * drop[0] > 0
    finally:
        nominal = cpu_env.physics.nominal_params()["body_mass"].expand(2, -1)
        for env in (warp_env, cpu_env):
            env.set_model_params({"body_mass": nominal})


def test_warp_unstable_row_is_reset(cheetahs) -> None:
    warp_env, _ = cheetahs
    warp_env.reset(seed=0)
    warp_env.physics.state()["qvel"][0] = float("nan")  # poison row 0 of the Warp data
    obs, reward, terminated, _, info = warp_env.step(torch.zeros(2, warp_env.action_dim))
    assert info["unstable"].tolist() == [True, False] and terminated[0] and reward[0] == 0
    assert torch.isfinite(obs).all() and torch.isfinite(info["final_obs"]).all()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "steps"),
    [("Hopper", 20), ("Walker2d", 20), ("InvertedPendulum", 20), ("InvertedDoublePendulum", 20)]
    + [("Reacher", 20), ("Pusher", 20), ("Ant", 2)],  # Ant: until the first foot contact (see module doc)
)
def test_warp_parity_other_tasks(name: str, steps: int) -> None:
    warp_env, cpu_env = _pair(name)
    _drive_and_compare(warp_env, cpu_env, steps=steps, tol=TOL)


@pytest.mark.slow
def test_warp_humanoid_runs() -> None:
    env = make_env("mujoco/Humanoid", 2, backend="mujoco_warp", device="cpu", seed=0)
    obs = env.reset(seed=0)
    assert obs.shape == (2, 348)
    for _ in range(3):
        obs, reward, *_ = env.step(torch.zeros(2, env.action_dim))
    assert torch.isfinite(obs).all() and torch.isfinite(reward).all()


def test_graph_replay_equals_eager_stepping() -> None:
    # env.kwargs.graph records one env step's kernel launches and replays them: the same kernels on the same
    # arrays, so equal bit for bit to eager stepping (same device, same shapes), through auto-resets and the
    # per-episode parameter changes of randomization (set_const between replays).
    options = dict(max_episode_steps=12, randomization={"body_mass": [0.7, 1.3], "geom_friction": [0.6, 1.4]})
    eager = make_env("mujoco/Hopper", 3, backend="mujoco_warp", device="cpu", seed=0, **options)
    replayed = make_env("mujoco/Hopper", 3, backend="mujoco_warp", device="cpu", seed=0, graph=True, **options)
    assert torch.equal(eager.reset(seed=5), replayed.reset(seed=5))
    generator = torch.Generator().manual_seed(0)
    ended = 0
    for t in range(30):
        action = torch.rand(3, eager.action_dim, generator=generator) * 2 - 1
        eager_out, replayed_out = eager.step(action), replayed.step(action)
        for index in range(4):
            assert torch.equal(eager_out[index], replayed_out[index]), f"step {t}, output {index}"
        assert torch.equal(eager_out[4]["final_obs"], replayed_out[4]["final_obs"]), f"step {t}"
        ended += int((eager_out[2] | eager_out[3]).sum())
    assert ended >= 3  # every env reset at least once mid-run
    assert len(replayed.physics._graphs) == 1  # recorded once, replayed 30 times


def test_graph_option_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="env.kwargs.graph must be true or false, got 'yes'"):
        make_env("mujoco/Hopper", 2, backend="mujoco_warp", device="cpu", seed=0, graph="yes")
    with pytest.raises(ValueError, match="env.kwargs graph: options of backend mujoco_warp, not of mujoco"):
        make_env("mujoco/Hopper", 2, backend="mujoco", seed=0, graph=True)
