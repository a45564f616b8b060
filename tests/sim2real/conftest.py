"""Shared sim-to-real fixtures: a tiny exported Pendulum policy and its plain closed-loop returns."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from runtime_fakes import pendulum_sidecar

from robopt.sim2real.sidecar import file_sha256, write_sidecar


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    """A tiny Gaussian policy for Pendulum-v1 (D=3, A=1) exported to ONNX with policy.json and parity.npz."""
    from robopt.policies.gaussian import GaussianPolicy

    torch.manual_seed(0)
    policy = GaussianPolicy(3, 1, torch.tensor([-2.0]), torch.tensor([2.0]), hidden=(16,), normalize_obs=False)
    with torch.no_grad():
        for parameter in policy.mean_net.parameters():
            parameter.normal_(0.0, 0.7)  # an untrained but far from zero policy: it swings the pendulum
    module = policy.export_module().eval()
    directory = tmp_path_factory.mktemp("export")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (torch.zeros(2, 3),),
            str(directory / "policy.onnx"),
            dynamo=False,
            input_names=["obs"],
            output_names=["action"],
            dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}},
        )
    obs = torch.randn(32, 3) * 2
    with torch.no_grad():
        np.savez(directory / "parity.npz", obs=obs.numpy(), action=module(obs).numpy())
    hashes = {name: file_sha256(directory / name) for name in ("policy.onnx", "parity.npz")}
    sidecar = pendulum_sidecar(files_sha256=hashes)
    write_sidecar(directory, sidecar)
    return directory


def pendulum_reference_returns(policy, episodes: int) -> list[float]:
    """Returns of the plain closed loop obs -> ONNX action -> Gymnasium step (seed 0), no runtime in between."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    returns, total = [], 0.0
    while len(returns) < episodes:
        obs, reward, terminated, truncated, _ = env.step(policy(obs.astype(np.float32)))
        total += reward
        if terminated or truncated:
            returns.append(total)
            obs, total = env.reset()[0], 0.0
    return returns


@pytest.fixture
def pendulum_returns():
    """``pendulum_reference_returns`` as a fixture (test modules do not import each other)."""
    return pendulum_reference_returns
