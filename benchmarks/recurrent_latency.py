"""Batch-1 ONNX Runtime latency of a policy with memory against the memoryless policy of the same head, one run.

Both are random policies of --obs-dim -> --action-dim (Hopper sizes, 11 -> 3) with --hidden MLP widths; the recurrent
one has a --cell torso of --state-hidden in front (``policy.recurrent``). Each is exported as ``robopt export`` does
(``robopt.sim2real.export.export_onnx``, with inputs obs and state for the one with state) and run as the deploy
runtime runs it: ``OnnxPolicy`` in a 1-thread sequential ONNX Runtime session, the recurrent one inside
``RecurrentPolicy`` (a float32 [D] observation in, the action out, the state [1, M] carried between calls). The rows
take turns in rounds (``flow_latency.time_runners``) so load from other processes hits both alike. Printed: median
and 99th percentile microseconds per call, and their ratio.

    .venv/bin/python benchmarks/recurrent_latency.py --state-hidden 128 --repeats 20000
    .venv/bin/python benchmarks/recurrent_latency.py --smoke    # CI: 10 calls each after 1 warm-up
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from flow_latency import time_runners  # benchmarks/ is the script's directory, so its sibling imports
from smoke import parse_smoke_args

from robopt.policies.cells import RecurrentConfig
from robopt.policies.gaussian import GaussianPolicyConfig
from robopt.policies.recurrent import RecurrentGaussianPolicy
from robopt.sim2real.export import export_onnx
from robopt.sim2real.export_state import STATE_INPUT, STATE_OUTPUT
from robopt.sim2real.model import OnnxPolicy, RecurrentPolicy
from robopt.sim2real.sidecar import Sidecar


def sidecar(obs_dim: int, action_dim: int, state_dim: int) -> Sidecar:
    return Sidecar(
        policy_kind="gaussian",
        env_id="bench",
        obs_dim=obs_dim,
        action_dim=action_dim,
        action_low=[-1.0] * action_dim,
        action_high=[1.0] * action_dim,
        control_period=0.01,
        files={"onnx": "policy.onnx"},
        state_dim=state_dim,
        format_version=3 if state_dim else 2,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--obs-dim", type=int, default=11)
    parser.add_argument("--action-dim", type=int, default=3)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--state-hidden", type=int, default=128)
    parser.add_argument("--cell", choices=["gru", "lstm"], default="gru")
    parser.add_argument("--repeats", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=500)
    args = parse_smoke_args(parser, smoke={"repeats": 10, "warmup": 1})
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = replace(
        GaussianPolicyConfig(hidden=tuple(args.hidden), activation="relu"),
        recurrent=RecurrentConfig(type=args.cell, hidden=args.state_hidden),
    )
    low, high = -torch.ones(args.action_dim), torch.ones(args.action_dim)
    recurrent = RecurrentGaussianPolicy(args.obs_dim, args.action_dim, low, high, config)
    memoryless = replace(config, recurrent=RecurrentConfig())
    from robopt.policies import build_gaussian_policy

    class Dims:  # what build_gaussian_policy reads of an env
        obs_dim, action_dim, action_low, action_high = args.obs_dim, args.action_dim, low, high

    mlp = build_gaussian_policy(memoryless, Dims)
    example = torch.randn(4, args.obs_dim)
    with tempfile.TemporaryDirectory() as tmp:
        stateful_module, plain_module = recurrent.export_module().eval(), mlp.export_module().eval()
        state_dim = stateful_module.state_dim
        names = ("obs", STATE_INPUT), ("action", STATE_OUTPUT)
        export_onnx(stateful_module, (example, torch.zeros(4, state_dim)), Path(tmp) / "gru.onnx", *names)
        export_onnx(plain_module, example, Path(tmp) / "mlp.onnx")
        with_state = RecurrentPolicy(
            OnnxPolicy(Path(tmp) / "gru.onnx", sidecar(args.obs_dim, args.action_dim, state_dim))
        )
        plain = OnnxPolicy(Path(tmp) / "mlp.onnx", sidecar(args.obs_dim, args.action_dim, 0))
        obs = np.random.default_rng(0).normal(size=args.obs_dim).astype(np.float32)
        samples = time_runners(
            {"mlp": lambda: plain(obs), args.cell: lambda: with_state(obs)}, args.repeats, args.warmup
        )
    print(
        f"obs {args.obs_dim} -> action {args.action_dim}, MLP {args.hidden}, {args.cell} hidden {args.state_hidden} "
        f"(state {state_dim}); ONNX Runtime, 1 thread, batch 1, {args.repeats} calls each"
    )
    medians = {}
    for name, times in samples.items():
        medians[name] = float(np.median(times))
        print(f"{name:>5s}: median {medians[name]:7.1f} us, p99 {np.percentile(times, 99):7.1f} us")
    print(f"{args.cell} / mlp median: {medians[args.cell] / medians['mlp']:.2f}")


if __name__ == "__main__":
    main()
