"""Builders for the SAC and TD3 update-parity tests against Stable-Baselines3 (test_sac_sb3_parity.py,
test_td3_sb3_parity.py): same weights, batch and noise, same numbers.

SB3's networks are copied into robopt's: the actor's hidden layers onto ``mean_net``; SAC's ``mu`` and ``log_std``
heads stacked row-wise into robopt's last layer of 2A outputs [mean | log_std] (``state_dependent_std``); TD3's
``mu`` (ending in tanh) onto the mean net of robopt's squashed policy; ``qf0``/``qf1`` onto ``critic.nets[0/1]``
and the target networks likewise. One fixed batch goes into both replay buffers (SB3's ``ReplayBuffer.add``
with ``TimeLimit.truncated`` infos, robopt's ``ReplayBuffer.extend``) and each library reads it back through
its own buffer: terminated rows stop the bootstrap, truncated rows bootstrap on both sides.

Noise: SAC's reparameterization noise is served from a fixed list on both sides; SB3 draws it through
``torch.distributions.normal._standard_normal`` (current obs first, then next obs), robopt through
``torch.randn_like`` (next obs first, then current obs). TD3's smoothing noise comes from the global torch RNG
on both sides (SB3's ``Tensor.normal_(0, 0.2)``, robopt's ``torch.randn * 0.2``), seeded alike.

Action scaling: HalfCheetah-v5's action bounds are [-1, 1], so SB3's scaled actions (what its buffer stores and
its critics read) and robopt's env-unit actions are the same numbers, and robopt's squash Jacobian term
log((high - low) / 2) is 0. With other bounds the two would not compare directly: robopt's critics read env-unit
actions and its log pi includes that Jacobian term, SB3's critics and log pi work on the [-1, 1] scaled action.

One measured difference: SB3's squash correction is log(1 - tanh(u)^2 + 1e-6), robopt's the exact
2 (log 2 - u - softplus(-2u)); the epsilon moves SB3's log pi by sum_A log(1 + 1e-6 / (1 - tanh(u)^2)), ~1e-4 at
these weights. The tests set SB3's epsilon to 0 where they compare log-probs and losses tightly, and check the
epsilon's shift and its (small) effect on an update separately.

SAC's update order differs (SB3: temperature, critic, actor, targets; robopt: critic, actor, temperature,
targets) but not its arithmetic: both use alpha = exp(log_alpha) from before its step everywhere and one
reparameterized sample of the not-yet-updated actor for both the actor and the temperature loss. So two updates
agree weight for weight. Adam's steps are invariant to a loss's scale, so the losses themselves (SB3's logged
``train/*`` values) are compared too: that is what pins SAC's 0.5 and TD3's 1.0 on the summed critic MSEs.

Shapes: B batch, D = 17 obs dim, A = 6 action dim, C = 2 critics.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")

import torch.distributions.normal as torch_normal  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402

from robopt.build import build_loop  # noqa: E402
from robopt.config import build_dataclass  # noqa: E402
from robopt.experiment import ExperimentConfig

ENV_ID = "HalfCheetah-v5"  # action bounds [-1, 1]: SB3's scaled actions are the env's
SEED, BATCH, HIDDEN = 5, 64, [32, 32]
# Tolerances are a few times the float32 rounding seen; a convention error (a missing alpha, 1.0 instead of 0.5
# on the critic MSE, the post-step alpha, a min over critics in TD3's actor loss) moves these by 1e-3 to 1.
LOSS_ATOL = 3e-5  # targets and losses of order 1-10; seen 9e-6 (SB3's float32 1 - tanh(u)^2 cancels at |u| ~ 3)
WEIGHT_ATOL = 1e-6  # weights after updates (Adam lr 3e-4 or 1e-3 per step); seen 2e-7 (SAC), 1.5e-8 (TD3)
EPSILON_LOSS_ATOL = 1e-4  # logged SAC losses with SB3's epsilon 1e-6 kept; seen 3e-5
EPSILON_WEIGHT_ATOL = 1e-5  # weights after two SAC updates with SB3's epsilon kept; seen 1.7e-6


# --------------------------------------------------------------------------------------------- builders


def robopt_loop(algo: str, compile_update: bool = False):
    """robopt's SAC or TD3 loop with SB3's defaults at a small size (relu 32x32, default init, no obs norm); with
    ``compile_update`` its update is the compiled one (``algo.compile``)."""
    policy = {"name": "gaussian", "squash": True, "hidden": HIDDEN, "activation": "relu", "normalize_obs": False,
              "orthogonal_init": False, "state_dependent_std": algo == "sac", "log_std_init": 0.0}  # fmt: skip
    loop = {"learning_starts": 0, "batch_size": BATCH, "buffer_size": BATCH}
    data = {"seed": SEED, "env": {"id": ENV_ID, "num_envs": 1}, "policy": policy,
            "algo": {"name": algo, "critic_hidden": HIDDEN, "critic_activation": "relu", "loop": loop,
                     "compile": compile_update}}  # fmt: skip
    return build_loop(build_dataclass(ExperimentConfig, data))


def sb3_model(cls, **kwargs):
    """SB3's SAC or TD3 with its defaults but net_arch [32, 32]; its logger keeps train()'s losses."""
    model = cls(
        "MlpPolicy",
        ENV_ID,
        policy_kwargs={"net_arch": HIDDEN},
        buffer_size=BATCH,
        learning_starts=0,
        batch_size=BATCH,
        seed=SEED,
        device="cpu",
        **kwargs,
    )
    # train() records into logger.name_to_value; folder None and no outputs: nothing is written (SB3's configure()
    # would make an SB3-<date> directory in the system temp dir)
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def fixed_batch(obs_dim: int, action_dim: int) -> dict[str, torch.Tensor]:
    """B float32 transitions; rows 0 mod 4 terminated (16), rows 1 mod 8 truncated (8)."""
    generator = torch.Generator().manual_seed(SEED)
    rows = torch.arange(BATCH)
    return {
        "obs": torch.randn(BATCH, obs_dim, generator=generator),
        "action": torch.rand(BATCH, action_dim, generator=generator) * 1.98 - 0.99,
        "reward": torch.randn(BATCH, generator=generator),
        "next_obs": torch.randn(BATCH, obs_dim, generator=generator),
        "terminated": rows % 4 == 0,
        "truncated": rows % 8 == 1,
    }


def fill_sb3(model, batch: dict[str, torch.Tensor], monkeypatch) -> None:
    """The batch into SB3's replay buffer (done = terminated or truncated), sampled back whole and in order."""
    buffer = model.replay_buffer
    for i in range(BATCH):
        row = {name: value[i : i + 1].numpy() for name, value in batch.items()}
        truncated = bool(row["truncated"][0])
        done = np.array([bool(row["terminated"][0]) or truncated])
        buffer.add(
            row["obs"], row["next_obs"], row["action"], row["reward"], done, [{"TimeLimit.truncated": truncated}]
        )
    assert buffer.full
    monkeypatch.setattr(buffer, "sample", lambda batch_size, env=None: buffer._get_samples(np.arange(batch_size)))


def fill_robopt(replay, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch into robopt's replay buffer, gathered back whole and in order."""
    fields = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
    for i in range(BATCH):
        replay.extend(*(batch[name][i : i + 1] for name in fields))
    return replay.gather(torch.arange(BATCH))


def linear_pairs(name: str, sb3_layers, robopt_layers) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, SB3 tensor, robopt tensor) for the weight and bias of matching nn.Linear layers."""
    sb3_layers = [layer for layer in sb3_layers if isinstance(layer, torch.nn.Linear)]
    pairs = []
    for i, (source, target) in enumerate(zip(sb3_layers, robopt_layers, strict=True)):
        pairs += [(f"{name} {i} weight", source.weight, target.weight), (f"{name} {i} bias", source.bias, target.bias)]
    return pairs


def critic_pairs(name: str, sb3_critic, critic) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    pairs = []
    for c, q_net in enumerate(sb3_critic.q_networks):
        pairs += linear_pairs(f"{name} {c}", q_net, critic.nets[c].layers)
    return pairs


def sac_pairs(model, loop) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Every SAC parameter; SB3's mu and log_std heads are the row blocks [:A] and [A:] of robopt's last layer."""
    actor, algorithm, action_dim = model.actor, loop.algorithm, loop.policy.action_dim
    layers = loop.policy.mean_net.layers
    pairs = linear_pairs("actor", actor.latent_pi, layers[: len(HIDDEN)])
    last = layers[len(HIDDEN)]
    for j, head in enumerate((actor.mu, actor.log_std)):
        rows = slice(j * action_dim, (j + 1) * action_dim)  # views: they follow Adam's in-place steps
        pairs += [
            (f"actor head {j} weight", head.weight, last.weight[rows]),
            (f"actor head {j} bias", head.bias, last.bias[rows]),
        ]
    pairs += critic_pairs("critic", model.critic, algorithm.critic)
    pairs += critic_pairs("target critic", model.critic_target, algorithm.target_critic)
    return pairs + [("log_alpha", model.log_ent_coef.reshape(()), algorithm.log_alpha)]


def td3_pairs(model, loop) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    algorithm = loop.algorithm
    pairs = linear_pairs("actor", model.actor.mu, loop.policy.mean_net.layers)
    pairs += linear_pairs("target actor", model.actor_target.mu, algorithm.target_policy.mean_net.layers)
    pairs += critic_pairs("critic", model.critic, algorithm.critic)
    return pairs + critic_pairs("target critic", model.critic_target, algorithm.target_critic)


@torch.no_grad()
def copy_weights(pairs) -> None:
    for _, source, target in pairs:
        target.copy_(source.reshape(target.shape))


def differences(pairs) -> dict[str, float]:
    """Max |SB3 - robopt| per tensor."""
    return {
        name: float((source.detach().reshape(target.shape) - target.detach()).abs().max())
        for name, source, target in pairs
    }


def assert_same_weights(pairs, atol: float, context: str) -> None:
    diff = differences(pairs)
    worst = max(diff, key=diff.get)
    assert diff[worst] < atol, f"{context}: {worst} differs from SB3's by {diff[worst]:.2e}: {diff}"


def snapshot(pairs) -> dict[str, torch.Tensor]:
    return {name: source.detach().clone() for name, source, _ in pairs}


def moved(pairs, before: dict[str, torch.Tensor]) -> dict[str, float]:
    """Max |change| per SB3 tensor since ``before``."""
    return {name: float((source.detach() - before[name]).abs().max()) for name, source, _ in pairs}


def standard_normals(count: int, action_dim: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return [torch.randn(BATCH, action_dim, generator=generator) for _ in range(count)]


def fixed_noise(monkeypatch, sb3_eps: list[torch.Tensor], robopt_eps: list[torch.Tensor]) -> tuple[list, list]:
    """Serve the given standard normals, in order, to SB3's ``Normal.rsample`` and robopt's ``randn_like``.

    Returns the two queues: both must be empty after the calls (each side drew exactly what it was given).
    """
    sb3_queue, robopt_queue = list(sb3_eps), list(robopt_eps)

    def sb3_standard_normal(shape, dtype, device):
        eps = sb3_queue.pop(0)
        assert tuple(eps.shape) == tuple(shape)
        return eps.to(dtype)

    def robopt_randn_like(tensor, *args, **kwargs):
        eps = robopt_queue.pop(0)
        assert eps.shape == tensor.shape
        return eps.to(tensor.dtype)

    monkeypatch.setattr(torch_normal, "_standard_normal", sb3_standard_normal)
    monkeypatch.setattr(torch, "randn_like", robopt_randn_like)
    return sb3_queue, robopt_queue


def assert_close(name: str, ours: torch.Tensor, theirs: torch.Tensor, atol: float = LOSS_ATOL) -> None:
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=atol, msg=lambda m: f"{name}: {m}")
