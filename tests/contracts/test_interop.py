"""Views of robopt VecEnvs for other libraries: GymnasiumVectorView against Gymnasium's own SyncVectorEnv in
SAME_STEP autoreset mode, SB3VecEnvView against SB3's DummyVecEnv (make_vec_env) through PPO's rollout buffer."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.passive_env_checker import check_obs
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import RecordEpisodeStatistics
from gymnasium.wrappers.vector import RecordEpisodeStatistics as VectorRecordEpisodeStatistics

from robopt.envs import make_env
from robopt.envs.interop import GymnasiumVectorView

HOPPER_STEPS = 60  # with 4 rows, random actions and a 30-step limit: both terminations and truncations happen


def _random_actions(num_steps: int, num_envs: int, action_dim: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1.0, 1.0, (num_steps, num_envs, action_dim)).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------
# GymnasiumVectorView


def test_gymnasium_view_spaces_and_metadata() -> None:
    env = make_env("mujoco/HalfCheetah", 3, backend="mujoco", seed=0)
    view = GymnasiumVectorView(env)
    assert isinstance(view, VectorEnv) and view.num_envs == 3
    assert view.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert view.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)
    assert view.single_action_space == gym.spaces.Box(-1.0, 1.0, (6,), np.float32)  # HalfCheetah ctrlrange
    assert view.observation_space == batch_space(view.single_observation_space, 3)
    assert view.action_space == batch_space(view.single_action_space, 3)
    obs, infos = view.reset(seed=0)
    check_obs(obs, view.observation_space, "reset")  # Gymnasium's own passive checker (dtype, shape, bounds)
    assert infos == {}
    view.action_space.seed(0)
    obs, reward, terminated, truncated, infos = view.step(view.action_space.sample())
    check_obs(obs, view.observation_space, "step")
    assert reward.shape == terminated.shape == truncated.shape == (3,)
    assert reward.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
    assert set(infos) == {"unstable", "_unstable"} and infos["_unstable"].all()  # native extra, no row ended
    assert repr(view) == "GymnasiumVectorView(mujoco/HalfCheetah, num_envs=3)"
    view.close()
    assert view.closed


def _final_keys(infos: dict) -> dict:
    """The autoreset part of a SAME_STEP info dict (the peer also carries Hopper's own per-env keys)."""
    return {
        key: infos[key] for key in ("final_obs", "_final_obs", "_final_info", "episode", "_episode") if key in infos
    }


def test_gymnasium_view_matches_sync_vector_env_same_step() -> None:
    # robopt's gymnasium backend seeds row i with seed + i and resets inside step without a seed, exactly as
    # SyncVectorEnv(SAME_STEP) does, so the same actions give the same episodes: every number is compared.
    num_envs, limit = 4, 30
    view = VectorRecordEpisodeStatistics(
        GymnasiumVectorView(make_env("mujoco/Hopper", num_envs, backend="gymnasium", max_episode_steps=limit))
    )
    peer = VectorRecordEpisodeStatistics(
        SyncVectorEnv(
            [lambda: RecordEpisodeStatistics(gym.make("Hopper-v5", max_episode_steps=limit))] * num_envs,
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
    )
    obs, _ = view.reset(seed=0)
    peer_obs, _ = peer.reset(seed=0)
    np.testing.assert_allclose(obs, peer_obs, rtol=1e-6, atol=1e-7)
    seen_terminated = seen_truncated = 0
    for actions in _random_actions(HOPPER_STEPS, num_envs, 3):
        obs, reward, terminated, truncated, infos = view.step(actions)
        peer_obs, peer_reward, peer_terminated, peer_truncated, peer_infos = peer.step(actions)
        assert obs.dtype == np.float32 and peer_obs.dtype == np.float64  # robopt's dtype vs Hopper-v5's
        assert reward.dtype == peer_reward.dtype == np.float64
        np.testing.assert_allclose(obs, peer_obs, rtol=1e-5, atol=1e-6)  # ended rows: the next episode's first obs
        np.testing.assert_allclose(reward, peer_reward, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(terminated, peer_terminated)
        np.testing.assert_array_equal(truncated, peer_truncated)
        ours, theirs = _final_keys(infos), _final_keys(peer_infos)
        assert set(ours) == set(theirs)
        if "final_obs" in theirs:
            for row, peer_final in enumerate(theirs["final_obs"]):
                if peer_final is None:
                    assert ours["final_obs"][row] is None
                else:
                    np.testing.assert_allclose(ours["final_obs"][row], peer_final, rtol=1e-5, atol=1e-6)
            for key in ("_final_obs", "_final_info", "_episode"):
                np.testing.assert_array_equal(ours[key], theirs[key])
            _assert_episode_equal(infos["final_info"]["episode"], peer_infos["final_info"]["episode"])
            _assert_episode_equal(infos["episode"], peer_infos["episode"])  # the vector wrapper's, top level
        seen_terminated += int(terminated.sum())
        seen_truncated += int(truncated.sum())
    assert seen_terminated > 0 and seen_truncated > 0
    view.close()
    peer.close()


def _assert_episode_equal(ours: dict, theirs: dict) -> None:
    assert ours["r"].dtype == theirs["r"].dtype == np.float64
    np.testing.assert_allclose(ours["r"], theirs["r"], rtol=1e-5, atol=1e-5)  # robopt sums float32 rewards
    np.testing.assert_array_equal(ours["l"], theirs["l"])
    for mask in ("_r", "_l"):
        if mask in theirs:
            np.testing.assert_array_equal(ours[mask], theirs[mask])


def test_gymnasium_view_reports_native_steps() -> None:
    # The native Hopper through the view and stepped directly, same seed and actions: same numbers, SAME_STEP layout.
    num_envs = 4
    direct = make_env("mujoco/Hopper", num_envs, backend="mujoco", seed=0, max_episode_steps=30)
    view = GymnasiumVectorView(make_env("mujoco/Hopper", num_envs, backend="mujoco", seed=0, max_episode_steps=30))
    direct_obs = direct.reset(seed=0)
    obs, _ = view.reset(seed=0)
    np.testing.assert_array_equal(obs, direct_obs.numpy())
    ended_total = 0
    for actions in _random_actions(HOPPER_STEPS, num_envs, 3):
        direct_obs, direct_reward, direct_terminated, direct_truncated, info = direct.step(torch.from_numpy(actions))
        obs, reward, terminated, truncated, infos = view.step(actions)
        np.testing.assert_array_equal(obs, direct_obs.numpy())
        np.testing.assert_array_equal(reward, direct_reward.numpy().astype(np.float64))
        np.testing.assert_array_equal(terminated, direct_terminated.numpy())
        np.testing.assert_array_equal(truncated, direct_truncated.numpy())
        ended = terminated | truncated
        assert ("final_obs" in infos) == bool(ended.any())
        if ended.any():
            np.testing.assert_array_equal(infos["_final_obs"], ended)
            for row in range(num_envs):
                expected = info["final_obs"][row].numpy() if ended[row] else None
                np.testing.assert_array_equal(infos["final_obs"][row], expected)
            episode = infos["final_info"]["episode"]
            np.testing.assert_array_equal(episode["l"], info["episode_length"].numpy())
            np.testing.assert_allclose(episode["r"], info["episode_return"].numpy(), rtol=1e-6)
            np.testing.assert_array_equal(infos["final_info"]["_unstable"], ended)
            assert not np.array_equal(infos["final_obs"][ended.argmax()], obs[ended.argmax()])  # obs is the new one
        ended_total += int(ended.sum())
    assert ended_total > 0


def test_gymnasium_view_bad_input() -> None:
    env = make_env("mujoco/HalfCheetah", 2, backend="mujoco", seed=0)
    view = GymnasiumVectorView(env)
    with pytest.raises(TypeError, match="seed must be an int or None"):
        view.reset(seed=[0, 1])
    with pytest.raises(ValueError, match="take no reset options"):
        view.reset(options={"reset_mask": np.array([True, False])})
    view.reset(seed=0, options={})
    with pytest.raises(ValueError, match=r"actions must have shape \[2, 6\], got \[2, 5\]"):
        view.step(np.zeros((2, 5)))
    with pytest.raises(TypeError, match="actions must be a numeric array"):
        view.step("forward")
    with pytest.raises(TypeError, match="needs a robopt VecEnv"):
        GymnasiumVectorView(gym.make("Hopper-v5"))


# ----------------------------------------------------------------------------------------------------------
# SB3VecEnvView

requires_sb3 = pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="needs SB3")


def _sb3_view(env):
    from robopt.envs.interop import SB3VecEnvView

    return SB3VecEnvView(env)


@requires_sb3
def test_sb3_view_matches_robopt_step_and_sb3_conventions() -> None:
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import VecEnv as SB3VecEnv

    num_envs = 4
    direct = make_env("mujoco/Hopper", num_envs, backend="mujoco", seed=0, max_episode_steps=30)
    view = _sb3_view(make_env("mujoco/Hopper", num_envs, backend="mujoco", max_episode_steps=30))
    assert isinstance(view, SB3VecEnv) and view.num_envs == num_envs and view.render_mode is None
    assert view.observation_space == gym.spaces.Box(-np.inf, np.inf, (11,), np.float32)
    assert view.action_space == gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert view.seed(0) == [0, 1, 2, 3]
    obs = view.reset()
    assert obs.dtype == np.float32
    np.testing.assert_array_equal(obs, direct.reset(seed=0).numpy())
    seen = {"terminated": 0, "truncated": 0}
    for actions in _random_actions(HOPPER_STEPS, num_envs, 3):
        direct_obs, direct_reward, terminated, truncated, info = direct.step(torch.from_numpy(actions))
        obs, rewards, dones, infos = view.step(actions)
        assert rewards.dtype == np.float32 and dones.dtype == np.bool_ and len(infos) == num_envs
        np.testing.assert_array_equal(obs, direct_obs.numpy())
        np.testing.assert_array_equal(rewards, direct_reward.numpy())
        np.testing.assert_array_equal(dones, (terminated | truncated).numpy())
        for row, row_info in enumerate(infos):
            assert row_info["TimeLimit.truncated"] == bool(truncated[row] and not terminated[row])
            assert ("terminal_observation" in row_info) == ("episode" in row_info) == bool(dones[row])
            if dones[row]:
                np.testing.assert_array_equal(row_info["terminal_observation"], info["final_obs"][row].numpy())
                assert row_info["episode"]["l"] == int(info["episode_length"][row])
                assert row_info["episode"]["r"] == pytest.approx(float(info["episode_return"][row]), abs=1e-5)
        seen["terminated"] += int(terminated.sum())
        seen["truncated"] += int(truncated.sum())
    assert seen["terminated"] > 0 and seen["truncated"] > 0
    assert view.get_attr("obs_dim") == [11] * num_envs and view.get_attr("num_envs", indices=[1, 2]) == [4, 4]
    assert view.has_attr("action_low") and not view.has_attr("no_such_attribute")
    assert view.env_is_wrapped(Monitor) == [True] * num_envs and view.env_is_wrapped(gym.Wrapper, indices=0) == [False]
    assert len(view.env_method("model_params", indices=[0])) == 1
    view.set_attr("max_episode_steps", 25)
    assert view.env.max_episode_steps == 25
    view.close()


@requires_sb3
def test_sb3_view_bad_input() -> None:
    view = _sb3_view(make_env("mujoco/HalfCheetah", 2, backend="mujoco", seed=0))
    with pytest.raises(RuntimeError, match="step_wait called without step_async"):
        view.step_wait()
    with pytest.raises(ValueError, match=r"actions must have shape \[2, 6\], got \[6\]"):
        view.step(np.zeros(6))
    with pytest.raises(ValueError, match="pass indices=None"):
        view.set_attr("max_episode_steps", 10, indices=[0])
    with pytest.raises(AttributeError, match="no method 'no_such_method'"):
        view.env_method("no_such_method")
    view.set_options({"reset_noise_scale": 0.0})
    with pytest.raises(ValueError, match="take no reset options"):
        view.reset()
    with pytest.raises(TypeError, match="SB3VecEnvView needs a robopt VecEnv"):
        _sb3_view(gym.make("Hopper-v5"))


def test_interop_imports_without_sb3() -> None:
    code = (
        "import sys\n"
        "sys.modules['stable_baselines3'] = None  # as if not installed\n"
        "from robopt.envs import interop\n"
        "assert 'stable_baselines3' not in [name for name in sys.modules if sys.modules[name] is not None]\n"
        "try:\n"
        "    interop.SB3VecEnvView\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "SB3VecEnvView needs stable-baselines3: pip install stable-baselines3"


PPO_ENVS, PPO_STEPS, PPO_ITERATIONS, TIME_LIMIT = 16, 64, 2, 50  # truncations at env steps 50 and 100
BUFFER_FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "returns", "advantages")


def _ppo_rollouts(vec_env) -> tuple[list[dict[str, np.ndarray]], list[dict]]:
    """Train SB3 PPO for two iterations; per iteration the rollout buffer, the raw step data and the bootstrap
    SB3 should have added (gamma * V(terminal_observation) on TimeLimit.truncated rows, from the policy that
    collected the rollout). Also returns PPO's episode-info buffer."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger

    class RolloutRecorder(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.rollouts: list[dict[str, np.ndarray]] = []
            self.steps: list[dict] = []

        def _on_rollout_start(self) -> None:
            self.steps = []

        def _on_step(self) -> bool:
            infos = self.locals["infos"]
            self.steps.append(
                {
                    "raw_rewards": self.locals["rewards"].copy(),  # before SB3 adds the bootstrap in place
                    "dones": self.locals["dones"].copy(),
                    "time_limit": np.array([info["TimeLimit.truncated"] for info in infos]),
                    "terminal": {
                        row: info["terminal_observation"] for row, info in enumerate(infos) if "episode" in info
                    },
                }
            )
            return True

        def _on_rollout_end(self) -> None:
            buffer, policy = self.model.rollout_buffer, self.model.policy
            rollout = {name: getattr(buffer, name).copy() for name in BUFFER_FIELDS}
            for name in ("raw_rewards", "dones", "time_limit"):
                rollout[name] = np.stack([step[name] for step in self.steps])  # [T, N]
            rollout["expected_bootstrap"] = np.zeros_like(rollout["raw_rewards"])
            for time_index, step in enumerate(self.steps):
                for row, terminal_obs in step["terminal"].items():
                    if step["time_limit"][row]:
                        with torch.no_grad():
                            value = policy.predict_values(policy.obs_to_tensor(terminal_obs)[0])
                        rollout["expected_bootstrap"][time_index, row] = self.model.gamma * float(value)
            self.rollouts.append(rollout)

    model = PPO(
        "MlpPolicy",
        vec_env,
        n_steps=PPO_STEPS,
        batch_size=64,
        n_epochs=1,
        policy_kwargs={"net_arch": [8]},
        seed=0,
        device="cpu",
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default logger makes a dir in the system temp
    recorder = RolloutRecorder()
    model.learn(total_timesteps=PPO_ITERATIONS * PPO_STEPS * PPO_ENVS, callback=recorder)
    return recorder.rollouts, list(model.ep_info_buffer)


def _assert_same_bookkeeping(ours: list[dict], theirs: list[dict]) -> None:
    assert len(ours) == len(theirs) == PPO_ITERATIONS
    for rollout, peer in zip(ours, theirs):
        for name in BUFFER_FIELDS:
            assert rollout[name].shape == peer[name].shape
        for name in ("episode_starts", "dones", "time_limit"):
            np.testing.assert_array_equal(rollout[name], peer[name])
        for run in (rollout, peer):  # SB3 bootstrapped exactly the truncated rows, from V(terminal_observation)
            bootstrap = run["rewards"] - run["raw_rewards"]
            np.testing.assert_allclose(bootstrap, run["expected_bootstrap"], atol=1e-5)
            assert ((bootstrap != 0) == run["time_limit"]).all()
    # the time limit cut every env at env steps 50 and 100: index 49 of rollout 1, 100 - 64 - 1 = 35 of rollout 2
    assert ours[0]["time_limit"][49].all() and ours[1]["time_limit"][35].all()
    assert ours[0]["time_limit"].sum() + ours[1]["time_limit"].sum() == 2 * PPO_ENVS


@requires_sb3
def test_sb3_ppo_rollout_matches_make_vec_env() -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecCheckNan

    limit = {"max_episode_steps": TIME_LIMIT}
    peer, peer_episodes = _ppo_rollouts(make_vec_env("HalfCheetah-v5", n_envs=PPO_ENVS, seed=0, env_kwargs=limit))
    # robopt's gymnasium backend seeds row i with seed + i as make_vec_env does: the very same rollouts
    same, same_episodes = _ppo_rollouts(
        _sb3_view(make_env("mujoco/HalfCheetah", PPO_ENVS, backend="gymnasium", **limit))
    )
    _assert_same_bookkeeping(same, peer)
    for rollout, peer_rollout in zip(same, peer):
        assert rollout["observations"].dtype == np.float32 and peer_rollout["observations"].dtype == np.float64
        for name in BUFFER_FIELDS:
            np.testing.assert_allclose(rollout[name], peer_rollout[name], rtol=1e-5, atol=1e-5, err_msg=name)
    assert len(same_episodes) == len(peer_episodes) == 2 * PPO_ENVS  # ep_rew_mean in SB3's logger
    for episode, peer_episode in zip(same_episodes, peer_episodes):
        assert episode["l"] == peer_episode["l"] == TIME_LIMIT
        assert episode["r"] == pytest.approx(peer_episode["r"], abs=1e-3)
    # the native backend (other physics noise, so other numbers) keeps the same bookkeeping; SB3's NaN check wraps it
    native_view = VecCheckNan(_sb3_view(make_env("mujoco/HalfCheetah", PPO_ENVS, backend="mujoco", **limit)))
    native, native_episodes = _ppo_rollouts(native_view)
    _assert_same_bookkeeping(native, peer)
    assert [episode["l"] for episode in native_episodes] == [TIME_LIMIT] * (2 * PPO_ENVS)


@requires_sb3
def test_sb3_evaluate_policy_counts_view_episodes() -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    view = _sb3_view(make_env("mujoco/HalfCheetah", 4, backend="mujoco", seed=0, max_episode_steps=20))
    model = PPO("MlpPolicy", view, n_steps=8, batch_size=32, policy_kwargs={"net_arch": [8]}, seed=0, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not wrapped with a Monitor" warning: the view reports episodes
        returns, lengths = evaluate_policy(model, view, n_eval_episodes=8, return_episode_rewards=True)
    assert lengths == [20] * 8 and len(returns) == 8
