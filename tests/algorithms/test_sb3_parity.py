"""Learning parity of robopt's PPO with Stable-Baselines3's (issue 14): the same inputs give the same numbers.

Two oracles, each isolating one half of an iteration:

1. Update: SB3 collects a rollout with its initial weights; the same weights go into robopt's policy and
   critic, the same rollout (obs, actions, old log-probs, values, advantages, returns) into a robopt
   ``RolloutBatch``, and both take their minibatches in SB3's order. After one update (epochs x minibatches
   of clipped surrogate + value loss, grad-norm clip, Adam with eps 1e-5) every weight must agree.
2. Collection: with SB3's weights in robopt and SB3's sampled actions replayed, robopt's own loop
   (``OnPolicyLoop.collect`` then ``advantages``) must reproduce SB3's RolloutBuffer: observations,
   log-probs, values, GAE advantages and returns, across time-limit truncations (SB3 bootstraps them with
   V(terminal_observation)), terminations (Hopper) and several envs.

Everything robopt-side is built from a config (the one ``benchmarks/ppo_vs_sb3.py`` uses to match SB3's
defaults) plus ``ROBOPT_VARIANTS`` overrides, so a faster path (a fused or compiled PPO step) is tested by
adding one ``pytest.param`` there, and another simulator by adding a row to ``COLLECT_CASES``. Both libraries
compute in float32 with the same operations up to order; the tolerances are a few times the rounding seen
and far below what a real difference does: Adam eps 1e-8 instead of SB3's 1e-5 moves the weights by 5e-3,
robopt's own minibatch order instead of SB3's by 4e-3, a truncation treated as a termination moves an
advantage by 1.2.

Shapes: T steps per env, N envs, B = T * N, D obs dim, A action dim. SB3 stores [T, N, ...]; robopt flattens
time-major (row t * N + n), SB3's minibatch indices are env-major (row n * T + t).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO as SB3PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402

from robopt.buffers.rollout import RolloutBatch  # noqa: E402
from robopt.build import build_loop  # noqa: E402
from robopt.config import apply_overrides, build_dataclass  # noqa: E402
from robopt.core.compiled import compile_unavailable_reason  # noqa: E402
from robopt.experiment import ExperimentConfig

SEED = 3
UPDATE_ATOL = 1e-6  # weights after one update (24 Adam steps); seen: 3e-8
COLLECT_RTOL = COLLECT_ATOL = 1e-5  # rollout quantities; seen: 1e-6 (obs), 6e-6 on advantages of size ~20
SB3_FIELDS = ("observations", "actions", "rewards", "log_probs", "values", "advantages", "returns")

# Overrides (``a.b=value``) applied on top of the SB3-matching config; a fast path adds its own entry here.
COMPILE_SKIP = compile_unavailable_reason("cpu")
ROBOPT_VARIANTS = [
    pytest.param((), id="reference"),
    pytest.param(
        ("algo.compile=true",), id="compiled",
        marks=pytest.mark.skipif(COMPILE_SKIP is not None, reason=f"torch.compile unavailable: {COMPILE_SKIP}"),
    ),  # the minibatch step as one torch.compile graph (robopt.core.compiled)
]  # fmt: skip


# --------------------------------------------------------------------------------------------- builders


def robopt_config(env_id: str, num_envs: int, num_steps: int, epochs: int, overrides=(), **env) -> ExperimentConfig:
    """The SB3-default-matching robopt config of ``benchmarks/ppo_vs_sb3.py`` at a small size.

    value_coef 1.0: robopt's value loss is 0.5 * MSE, SB3's term is vf_coef 0.5 * MSE. Advantages are not
    normalized over the batch (SB3 normalizes per minibatch in ``train``, never in the buffer).
    """
    data = {
        "seed": SEED,
        "env": {"id": env_id, "num_envs": num_envs, "backend": env.get("backend", "auto"),
                "kwargs": env.get("kwargs", {})},
        "policy": {"hidden": [64, 64], "activation": "tanh", "normalize_obs": False, "log_std_init": 0.0},
        "critic": {"hidden": [64, 64], "activation": "tanh"},
        "rollout": {"num_steps": num_steps, "gamma": 0.99, "gae_lambda": 0.95, "normalize_reward": False,
                    "normalize_advantage": False},
        "algo": {"name": "ppo", "learning_rate": 3e-4, "lr_schedule": "constant", "epochs": epochs,
                 "minibatch_size": 64, "ratio": {"name": "clip", "clip_low": 0.2}, "value_coef": 1.0,
                 "max_grad_norm": 0.5, "minibatch_advantage_norm": True},
    }  # fmt: skip
    return build_dataclass(ExperimentConfig, apply_overrides(data, list(overrides)))


def sb3_ppo(env_fn, num_envs: int, num_steps: int, epochs: int, env_kwargs: dict | None = None) -> SB3PPO:
    """SB3's PPO with its defaults (MlpPolicy 64x64 tanh, orthogonal init, Adam eps 1e-5) at a small size."""
    vec_env = make_vec_env(env_fn, n_envs=num_envs, seed=SEED, env_kwargs=env_kwargs)
    return SB3PPO("MlpPolicy", vec_env, n_steps=num_steps, batch_size=64, n_epochs=epochs, seed=SEED, device="cpu")


def layer_pairs(sb3_policy, policy, critic) -> list[tuple[str, torch.nn.Linear, torch.nn.Linear]]:
    """(name, SB3 layer, robopt layer): SB3's mlp_extractor nets + heads onto robopt's mean_net / critic MLP."""
    extractor = sb3_policy.mlp_extractor
    actor = [extractor.policy_net[0], extractor.policy_net[2], sb3_policy.action_net]
    value = [extractor.value_net[0], extractor.value_net[2], sb3_policy.value_net]
    pairs = [(f"policy layer {i}", a, b) for i, (a, b) in enumerate(zip(actor, policy.mean_net.layers))]
    return pairs + [(f"critic layer {i}", a, b) for i, (a, b) in enumerate(zip(value, critic.net.layers))]


@torch.no_grad()
def copy_sb3_weights(sb3_policy, policy, critic) -> None:
    """SB3's weights into robopt's modules, in place (the updater's flat buffer holds views of them)."""
    pairs = layer_pairs(sb3_policy, policy, critic)
    assert len(pairs) == 6, "robopt's MLPs must have the 64x64 layout of SB3's MlpPolicy"
    for _, source, target in pairs:
        target.weight.copy_(source.weight)
        target.bias.copy_(source.bias)
    policy.log_std.copy_(sb3_policy.log_std)


@torch.no_grad()
def weight_differences(sb3_policy, policy, critic) -> dict[str, float]:
    """Max |SB3 - robopt| per parameter tensor."""
    differences = {"log_std": float((sb3_policy.log_std - policy.log_std).abs().max())}
    for name, source, target in layer_pairs(sb3_policy, policy, critic):
        differences[f"{name} weight"] = float((source.weight - target.weight).abs().max())
        differences[f"{name} bias"] = float((source.bias - target.bias).abs().max())
    return differences


class RolloutRecorder(BaseCallback):
    """Copies SB3's RolloutBuffer ([T, N, ...], before ``train`` flattens it), then seeds numpy for ``train``."""

    def __init__(self, permutation_seed: int | None = None) -> None:
        super().__init__()
        self.permutation_seed, self.rollout = permutation_seed, None

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        self.rollout = {name: torch.as_tensor(np.array(getattr(buffer, name))) for name in SB3_FIELDS}
        if self.permutation_seed is not None:  # RolloutBuffer.get draws np.random.permutation once per epoch
            np.random.seed(self.permutation_seed)


def sb3_rollout_and_update(model: SB3PPO, permutation_seed: int | None = None) -> dict[str, torch.Tensor]:
    """One SB3 iteration (collect + train); returns the rollout as collected, each field [T, N, ...]."""
    recorder = RolloutRecorder(permutation_seed)
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default logger makes a dir in the system temp
    model.learn(total_timesteps=model.n_steps * model.n_envs, callback=recorder)
    assert recorder.rollout is not None and model.num_timesteps == model.n_steps * model.n_envs
    return recorder.rollout


def sb3_permutations(seed: int, num_steps: int, num_envs: int, epochs: int) -> list[torch.Tensor]:
    """SB3's per-epoch minibatch orders, as indices into robopt's time-major batch."""
    rng = np.random.RandomState(seed)  # np.random.seed(seed) uses this same legacy generator
    orders = []
    for _ in range(epochs):
        env_major = torch.as_tensor(rng.permutation(num_steps * num_envs))  # SB3 row n * T + t
        orders.append((env_major % num_steps) * num_envs + env_major // num_steps)  # robopt row t * N + n
    return orders


def batch_from_sb3(rollout: dict[str, torch.Tensor], policy) -> RolloutBatch:
    """A time-major robopt batch holding SB3's rollout; mean/log_std are the (identical) acting distribution."""
    steps, num_envs = rollout["values"].shape
    size = steps * num_envs
    obs = rollout["observations"].reshape(size, -1).float()  # [B, D]; SB3 keeps the env's float64, casts in train
    with torch.no_grad():
        mean, log_std = policy.distribution_params(obs)
    info = {"log_prob": rollout["log_probs"].reshape(size), "mean": mean, "log_std": log_std.clone()}
    no_end = torch.zeros(size, dtype=torch.bool)
    return RolloutBatch(
        obs=obs,
        action=rollout["actions"].reshape(size, -1),
        policy_info=info,
        value=rollout["values"].reshape(size),
        advantage=rollout["advantages"].reshape(size),
        return_target=rollout["returns"].reshape(size),
        terminated=no_end,
        truncated=no_end,
        num_envs=num_envs,
    )


class ReplayPolicy:
    """robopt's Gaussian policy acting with given actions: the log-prob is robopt's own, for that action."""

    def __init__(self, policy, actions: torch.Tensor) -> None:
        self.policy, self.actions, self.step = policy, actions, 0  # actions [T, N, A]
        self.normalizer = policy.normalizer

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        action = self.actions[self.step].clone()  # [N, A]
        self.step += 1
        mean, log_std = self.policy.distribution_params(obs)
        log_prob = self.policy.log_prob(obs, action, {})
        return action, {"log_prob": log_prob, "mean": mean, "log_std": log_std.clone()}


class NativeResets(gym.Wrapper):
    """A Gymnasium env started from the states a 1-env native robopt env draws: SB3's twin of ``mujoco/<Task>``.

    The native env draws reset states from its own torch generator (``task.reset_state``), reseeded by
    ``reset(seed)``; with one env it draws one row per episode, in order, so replaying the same draws here
    puts both simulators in the same state at every episode start.
    """

    def __init__(self, env: gym.Env, task) -> None:
        super().__init__(env)
        self.task, self.generator = task, torch.Generator()

    def reset(self, *, seed=None, options=None):
        _, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self.generator.manual_seed(seed)
        qpos, qvel = self.task.reset_state(1, self.generator)  # [1, Q], [1, V] float64
        self.env.unwrapped.set_state(qpos[0].numpy(), qvel[0].numpy())
        return self.env.unwrapped._get_obs(), info


# ------------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("overrides", ROBOPT_VARIANTS)
def test_one_ppo_update_matches_sb3(overrides, monkeypatch):
    steps, num_envs, epochs = 256, 2, 3  # B = 512: 3 epochs x 8 minibatches of 64 = 24 Adam steps
    model = sb3_ppo("HalfCheetah-v5", num_envs, steps, epochs)
    loop = build_loop(robopt_config("HalfCheetah-v5", num_envs, steps, epochs, overrides))
    copy_sb3_weights(model.policy, loop.policy, loop.critic)
    initial = {name: p.detach().clone() for name, p in model.policy.named_parameters()}  # the copied weights
    rollout = sb3_rollout_and_update(model, permutation_seed=SEED)  # SB3's weights are now updated
    moved = max(float((p.detach() - initial[name]).abs().max()) for name, p in model.policy.named_parameters())
    assert moved > 1e-3, f"SB3's update barely moved the weights ({moved:.1e}): the comparison would prove nothing"

    orders = iter(sb3_permutations(SEED, steps, num_envs, epochs))
    randperm = torch.randperm

    def sb3_order(size: int, *args, **kwargs) -> torch.Tensor:
        if size != steps * num_envs:  # not a minibatch order (torch.compile's pattern matcher draws while compiling);
            return randperm(size, *args, **kwargs)  # a wrong-sized robopt draw fails the count check below
        order = next(orders, None)
        assert order is not None, "robopt drew more minibatch orders than SB3's epochs"
        return order

    batch = batch_from_sb3(rollout, loop.policy)
    monkeypatch.setattr(torch, "randperm", sb3_order)
    metrics = loop.algorithm.update(batch, progress=0.0)
    monkeypatch.undo()
    assert next(orders, None) is None, "robopt drew fewer minibatch orders than SB3's epochs"
    assert float(metrics["epochs_run"]) == epochs
    differences = weight_differences(model.policy, loop.policy, loop.critic)
    worst = max(differences, key=differences.get)
    assert differences[worst] < UPDATE_ATOL, f"{worst} differs from SB3's by {differences[worst]:.2e}: {differences}"


COLLECT_CASES = [
    # env id, backend, N, T, env kwargs, at least (truncated, terminated) rows in the rollout. Under SB3's initial
    # policy Hopper falls within about 10-25 steps, so a 15-step limit mixes truncations and terminations.
    pytest.param("HalfCheetah-v5", "gymnasium", 1, 256, {"max_episode_steps": 100}, (2, 0), id="cheetah-truncated"),
    pytest.param("Hopper-v5", "gymnasium", 1, 256, {}, (0, 3), id="hopper-terminated"),
    pytest.param("HalfCheetah-v5", "gymnasium", 4, 64, {"max_episode_steps": 40}, (4, 0), id="cheetah-4-envs"),
    pytest.param("Hopper-v5", "gymnasium", 4, 64, {"max_episode_steps": 15}, (4, 4), id="hopper-4-envs"),
    pytest.param("mujoco/HalfCheetah", "mujoco", 1, 256, {"max_episode_steps": 100}, (2, 0), id="native-cheetah"),
]


@pytest.mark.parametrize("overrides", ROBOPT_VARIANTS)
@pytest.mark.parametrize(("env_id", "backend", "num_envs", "steps", "env_kwargs", "min_ends"), COLLECT_CASES)
def test_collection_and_advantages_match_sb3(env_id, backend, num_envs, steps, env_kwargs, min_ends, overrides):
    config = robopt_config(env_id, num_envs, steps, 1, overrides, backend=backend, kwargs=env_kwargs)
    loop = build_loop(config)
    if backend == "gymnasium":
        model = sb3_ppo(env_id, num_envs, steps, 1, env_kwargs)
    else:
        assert num_envs == 1, "the native twin replays reset draws in order, which holds for one env"
        task = loop.env.task
        model = sb3_ppo(lambda: NativeResets(gym.make(task.gymnasium_id, **env_kwargs), task), num_envs, steps, 1)
    copy_sb3_weights(model.policy, loop.policy, loop.critic)
    sb3 = sb3_rollout_and_update(model)  # [T, N, ...] each

    loop.policy = ReplayPolicy(loop.policy, sb3["actions"])
    loop.collect()
    batch = loop.advantages()
    storage = loop.storage
    truncated, terminated = storage.truncated, storage.terminated  # [T, N]
    assert int(truncated.sum()) >= min_ends[0] and int(terminated.sum()) >= min_ends[1], (
        f"{env_id}: the rollout has {int(truncated.sum())} truncated and {int(terminated.sum())} terminated rows, "
        f"the case needs at least {min_ends}"
    )
    shape = (steps, num_envs)
    robopt = {
        "observations": storage.obs,
        "actions": storage.action,
        # SB3 adds gamma * V(terminal_observation) to truncated rows' rewards; compare the raw ones elsewhere.
        "rewards": torch.where(truncated, sb3["rewards"], storage.reward),
        "log_probs": storage.policy_info["log_prob"],
        "values": storage.value,
        "advantages": batch.advantage.reshape(shape),
        "returns": batch.return_target.reshape(shape),
    }
    for name in SB3_FIELDS:
        np.testing.assert_allclose(
            robopt[name].numpy(),
            sb3[name].reshape(robopt[name].shape).numpy(),
            rtol=COLLECT_RTOL,
            atol=COLLECT_ATOL,
            err_msg=f"{env_id} ({backend}, N={num_envs}): {name} differ from SB3's",
        )


def test_sb3_runs_write_nothing_in_the_system_temp_dir(monkeypatch):
    # SB3's default logger (and its configure(None, ...)) makes an SB3-<date> directory in the system temp dir at
    # every learn() without a custom logger; the parity builders give SB3 a logger with no folder and no outputs.
    from sb3_offpolicy_parity import sb3_model
    from stable_baselines3 import SAC as SB3SAC

    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    temp = Path(tempfile.gettempdir())
    before = set(temp.glob("SB3-*"))
    sb3_rollout_and_update(sb3_ppo("Pendulum-v1", num_envs=1, num_steps=64, epochs=1))
    sb3_model(SB3SAC).learn(total_timesteps=2)
    assert set(temp.glob("SB3-*")) - before == set()
