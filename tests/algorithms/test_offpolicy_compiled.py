"""The compiled SAC and TD3 updates (``algo.compile``) against the eager ones: same batch, same RNG state, same
numbers to float rounding; the eager path when torch cannot compile, said once.

Tolerances: metrics within 1e-6 (the losses are of order 1-10). Weights within 1e-6 after one update, except where
the eager gradient is below 1e-6: Adam's first step moves a weight by lr g / (|g| + eps), whose slope
lr eps / (|g| + eps)^2 reaches lr / (4 eps) = 7,500 at |g| ~ eps = 1e-8, so a gradient that cancels to ~1e-8 over
the batch turns float32 rounding of its terms (~1e-10) into ~1e-6 (seen 1.2e-6 on one weight of 5,000). Those
weights, and every weight after 10 updates, within 1e-5 (seen 1.2e-6: the difference does not grow).
"""

from __future__ import annotations

import io

import pytest
import torch

import robopt.algorithms.offpolicy_compiled as offpolicy_compiled
from robopt.build import build_loop
from robopt.config import build_dataclass
from robopt.experiment import ExperimentConfig

SLOW = pytest.mark.slow  # the update compiles (15-30 s on 2 cores; inductor caches it on disk within a run)
B = 64


def small_loop(algo: str, compile_update: bool, normalize_obs: bool = False):
    policy = {"name": "gaussian", "squash": True, "hidden": [32, 32], "activation": "relu",
              "normalize_obs": normalize_obs, "state_dependent_std": algo == "sac"}  # fmt: skip
    data = {"seed": 3, "env": {"id": "Pendulum-v1", "num_envs": 1}, "policy": policy,
            "algo": {"name": algo, "critic_hidden": [32, 32], "compile": compile_update,
                     "loop": {"learning_starts": 0, "batch_size": B, "buffer_size": B}}}  # fmt: skip
    return build_loop(build_dataclass(ExperimentConfig, data))


def fixed_batch(obs_dim: int, action_dim: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    return {
        "obs": torch.randn(B, obs_dim, generator=generator),
        "action": torch.rand(B, action_dim, generator=generator) * 4 - 2,
        "reward": torch.randn(B, generator=generator),
        "next_obs": torch.randn(B, obs_dim, generator=generator),
        "terminated": torch.arange(B) % 4 == 0,
        "truncated": torch.zeros(B, dtype=torch.bool),
        "discount": torch.full((B,), 0.99),
        "weights": torch.rand(B, generator=generator) + 0.5,  # prioritized replay's importance weights
    }


def trained_tensors(loop) -> dict[str, torch.Tensor]:
    algorithm = loop.algorithm
    tensors = {f"policy.{k}": v for k, v in loop.policy.state_dict().items()}
    tensors |= {f"critic.{k}": v for k, v in algorithm.critic.state_dict().items()}
    tensors |= {f"target_critic.{k}": v for k, v in algorithm.target_critic.state_dict().items()}
    if hasattr(algorithm, "target_policy"):
        tensors |= {f"target_policy.{k}": v for k, v in algorithm.target_policy.state_dict().items()}
    if hasattr(algorithm, "log_alpha"):
        tensors["log_alpha"] = algorithm.log_alpha.detach()
    return tensors


def gradients(loop) -> dict[str, torch.Tensor]:
    """The last eager update's gradients (the optimizers keep them until the next zero_grad)."""
    algorithm = loop.algorithm
    grads = {f"policy.{n}": p.grad for n, p in loop.policy.named_parameters() if p.grad is not None}
    grads |= {f"critic.{n}": p.grad for n, p in algorithm.critic.named_parameters() if p.grad is not None}
    return grads


def largest(values: torch.Tensor) -> float:
    return float(values.max()) if values.numel() else 0.0


@SLOW
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_compiled_update_matches_the_eager_update(algo):
    """SAC with the observation normalizer, its statistics changing between updates (read by the graph, not
    compiled in as constants); TD3 without."""
    normalize = algo == "sac"
    eager, compiled = small_loop(algo, False, normalize), small_loop(algo, True, normalize)
    try:
        assert compiled.algorithm.compiled is not None and compiled.algorithm.compiled.active
        batch = fixed_batch(eager.env.obs_dim, eager.env.action_dim)
        generator = torch.Generator().manual_seed(5)
        for update in range(10):
            if normalize:
                observed = torch.randn(16, eager.env.obs_dim, generator=generator) * 3 + update
                eager.policy.normalizer.update(observed)
                compiled.policy.normalizer.update(observed)
            torch.manual_seed(100 + update)
            ours = eager.algorithm.update(batch, progress=0.0)
            torch.manual_seed(100 + update)
            theirs = compiled.algorithm.update(batch, progress=0.0)
            assert compiled.algorithm.compiled.active, compiled.algorithm.compiled.failed
            assert ours.keys() == theirs.keys(), (update, sorted(ours), sorted(theirs))
            for key, value in ours.items():
                torch.testing.assert_close(theirs[key], value, rtol=0, atol=1e-6, msg=f"update {update}: {key}")
            a, b = trained_tensors(eager), trained_tensors(compiled)
            if update == 0:
                grads = gradients(eager)
                for name, value in a.items():
                    tiny = grads[name].abs() < 1e-6 if name in grads else torch.zeros_like(value, dtype=torch.bool)
                    error = (b[name] - value).abs()
                    assert largest(error[~tiny]) <= 1e-6 and largest(error) <= 1e-5, f"{name}: {largest(error)}"
            for name, value in a.items():
                torch.testing.assert_close(b[name], value, rtol=0, atol=1e-5, msg=f"update {update}: {name}")
        if algo == "td3":
            assert eager.algorithm.updates == compiled.algorithm.updates == 10
        initial = trained_tensors(small_loop(algo, False, normalize))
        moved = max(float((initial[name] - value).abs().max()) for name, value in trained_tensors(eager).items())
        assert moved > 1e-3, "ten updates must move the weights well beyond the tolerance"
    finally:
        eager.env.close()
        compiled.env.close()


@SLOW
def test_compiled_update_survives_a_checkpoint_round_trip():
    """After load_state_dict (new optimizer state tensors) the compiled update steps the loaded state."""
    first, second = small_loop("sac", True), small_loop("sac", True)
    try:
        batch = fixed_batch(first.env.obs_dim, first.env.action_dim)
        for update in range(3):
            torch.manual_seed(update)
            first.algorithm.update(batch, progress=0.0)
        saved = io.BytesIO()  # through bytes, as a checkpoint: an in-memory state dict would share its tensors
        torch.save({"policy": first.policy.state_dict(), "algorithm": first.algorithm.state_dict()}, saved)
        saved.seek(0)
        state = torch.load(saved)
        second.policy.load_state_dict(state["policy"])
        second.algorithm.load_state_dict(state["algorithm"])
        for update in range(3, 5):
            for loop in (first, second):
                torch.manual_seed(update)
                loop.algorithm.update(batch, progress=0.0)
        a, b = trained_tensors(first), trained_tensors(second)
        for name, value in a.items():
            torch.testing.assert_close(b[name], value, rtol=0, atol=0, msg=name)
        step = second.algorithm.critic_optimizer.state_dict()["state"][0]["step"]
        assert float(step) == 5.0
    finally:
        first.env.close()
        second.env.close()


def test_compile_unavailable_runs_eager_and_says_so_once(monkeypatch, capsys):
    monkeypatch.setattr(offpolicy_compiled, "compile_unavailable_reason", lambda device: "no compiler here")
    loop = small_loop("td3", True)
    try:
        batch = fixed_batch(loop.env.obs_dim, loop.env.action_dim)
        for _ in range(3):
            metrics = loop.algorithm.update(batch, progress=0.0)
        assert "critic_loss" in metrics and loop.algorithm.updates == 3
    finally:
        loop.env.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if "algo.compile" in line]
    assert lines == ["algo.compile=true: no compiler here; the eager TD3 update runs instead"]


def test_a_failing_compile_falls_back_to_eager_once(capsys):
    loop = small_loop("sac", True)
    compiled = loop.algorithm.compiled

    def broken(*args):
        raise RuntimeError("inductor exploded\nsecond line")

    compiled._compiled = broken
    try:
        batch = fixed_batch(loop.env.obs_dim, loop.env.action_dim)
        for _ in range(3):
            metrics = loop.algorithm.update(batch, progress=0.0)
        assert "alpha_loss" in metrics and not compiled.active
    finally:
        loop.env.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if "algo.compile" in line]
    assert lines == [
        "algo.compile=true: torch.compile could not build the SAC update (RuntimeError: inductor exploded); "
        "the eager SAC update runs instead"
    ]
