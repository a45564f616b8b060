"""Batch-1 CPU latency of the exported flow and diffusion policies per step count, beside the Gaussian policy.

For each --steps value the flow policy's ``export_module()`` (x_0 = 0, unrolled integrator, normalizer and
clipping folded in), and for each --ddim-steps value the diffusion policy's (x_K = 0, unrolled deterministic DDIM
over --denoising-steps training steps, normalizer and clipping folded in), is timed one observation [1, D] at a
time through three runtimes:
    eager       : the module under ``torch.inference_mode()``
    torchscript : ``torch.jit.trace`` then ``torch.jit.freeze`` (and ``optimize_for_inference`` with --optimize)
    onnxruntime : ``torch.onnx.export(..., dynamo=True)`` with a dynamic batch axis, one ``InferenceSession``
                  with intra_op_num_threads = --threads
and the Gaussian policy's export (one MLP pass) is the reference row. After --warmup calls per runner,
--repeats calls are timed one by one; the runners take turns in 10 rounds so load from other processes on a
shared machine hits every row alike. Printed per row: median and p90 microseconds per call, the median as a
multiple of the Gaussian's on the same runtime, and the largest |action - eager action| on random inputs.
--policies picks the generative kinds timed (default all; the Gaussian row is always there): ``fql`` is the
one-step policy of flow Q-learning (one network of the flow's widths), ``qgf`` the Q-guided flow per --steps
value (each step also differentiates two critics of --hidden widths, folded into the graph), ``expo`` EXPO's
acting rule (8 base samples integrated with --steps, their edits, the argmax of two critics over 16 candidates).

Random policies of --obs-dim, --action-dim and --hidden widths by default (HalfCheetah sizes): the flow's
velocity MLP, the diffusion policy's noise-predictor MLP (action chunk H = 1) and the Gaussian's mean MLP all
have the --hidden widths; the header states them with parameter counts. --run-dir times a trained run's policy
instead (``robopt.evaluation.load_policy``; the other kinds stay random, of the same sizes).

    .venv/bin/python benchmarks/flow_latency.py --steps 1 5 10 --ddim-steps 5 10 --repeats 5000 --threads 1
    .venv/bin/python benchmarks/flow_latency.py --policies diffusion --ddim-steps 5 10 --denoising-steps 20
    .venv/bin/python benchmarks/flow_latency.py --obs-dim 17 --action-dim 6 --hidden 64 64 --integrator heun
    .venv/bin/python benchmarks/flow_latency.py --run-dir runs/fpo_pendulum/<timestamp> --steps 1 5 10
    .venv/bin/python benchmarks/flow_latency.py --smoke    # CI: every kind at 1 step, eager and TorchScript
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.policies import DiffusionPolicy, FlowPolicy, GaussianPolicy
from robopt.policies.diffusion import DiffusionPolicyConfig
from robopt.policies.flow import INTEGRATORS, FlowPolicyConfig
from robopt.sim2real.export import export_onnx, quiet  # the exporters, silenced

ROUNDS = 10
KINDS = ("flow", "diffusion", "fql", "qgf", "expo")
RUNTIMES = ("eager", "torchscript", "onnxruntime")


def with_steps(policy: FlowPolicy, steps: int, integrator: str | None) -> FlowPolicy:
    """A copy of ``policy`` (weights and normalizer) that integrates with ``steps`` (and ``integrator``) steps."""
    return variant(policy, steps=steps, integrator=integrator or policy.config.integrator)


def variant(policy: FlowPolicy, **changes) -> FlowPolicy:
    """A copy of ``policy`` with config ``changes`` (its weights; new parts, a one-step net or critics, random)."""
    config = dataclasses.replace(policy.config, **changes)
    copy = FlowPolicy(policy.obs_dim, policy.action_dim, policy.action_low, policy.action_high, config)
    copy.load_state_dict(policy.state_dict())
    return copy.eval()


def with_ddim_steps(policy: DiffusionPolicy, steps: int) -> DiffusionPolicy:
    """A copy of ``policy`` (weights, normalizer, frozen base) whose deterministic path runs ``steps`` DDIM steps."""
    config = dataclasses.replace(policy.config, ddim_steps=steps)
    copy = DiffusionPolicy(policy.obs_dim, policy.action_dim, policy.action_low, policy.action_high, config)
    ddim = {name: table for name, table in copy.state_dict().items() if name.startswith("ddim_")}  # [steps] tables
    copy.load_state_dict({**policy.state_dict(), **ddim})
    return copy.eval()


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def policies(args) -> tuple[FlowPolicy, DiffusionPolicy, GaussianPolicy, str]:
    """The flow, diffusion and Gaussian policies to time, and a line saying where they come from."""
    obs_dim, action_dim, hidden = args.obs_dim, args.action_dim, tuple(args.hidden)
    loaded, source = None, f"random policies: obs {obs_dim}, action {action_dim}, hidden {list(hidden)}"
    if args.run_dir is not None:
        from robopt.evaluation import load_policy

        config, loaded = load_policy(args.run_dir)
        torch.set_num_threads(args.threads)  # load_policy set the run's own count
        obs_dim, action_dim, hidden = loaded.obs_dim, loaded.action_dim, tuple(config.policy.hidden)
        source = f"{type(loaded).__name__} from {args.run_dir} (obs {obs_dim}, action {action_dim}); the other random"
    low, high = -torch.ones(action_dim), torch.ones(action_dim)
    if isinstance(loaded, FlowPolicy):
        flow = loaded
    else:
        flow = FlowPolicy(obs_dim, action_dim, low, high, FlowPolicyConfig(hidden=hidden, output_scale=1.0))
    if isinstance(loaded, DiffusionPolicy):
        diffusion = loaded
    else:
        config = DiffusionPolicyConfig(hidden=hidden, denoising_steps=args.denoising_steps, output_scale=1.0)
        diffusion = DiffusionPolicy(obs_dim, action_dim, low, high, config)
    gaussian = loaded if isinstance(loaded, GaussianPolicy) else GaussianPolicy(obs_dim, action_dim, low, high, hidden)
    for policy in (flow, diffusion, gaussian):
        if policy is not loaded:  # random statistics, so the normalizer is not an identity
            policy.normalizer.update(torch.randn(1000, obs_dim) * 2 + 0.5)
    return flow, diffusion, gaussian.eval(), source


def sizes(flow: FlowPolicy, diffusion: DiffusionPolicy, gaussian: GaussianPolicy, kinds: list[str]) -> str:
    """The networks' sizes for the header: hidden widths, embedding width E, K and parameter counts."""

    def network(module: torch.nn.Module) -> str:
        widths = [layer.out_features for layer in module.modules() if isinstance(layer, torch.nn.Linear)][:-1]
        return f"MLP {widths}" if widths else type(module).__name__

    parts = []
    if "flow" in kinds:
        velocity, e = flow.velocity, flow.config.time_embedding
        parts.append(f"flow velocity {network(velocity)}, E {e} ({parameters(velocity)} params)")
    if "diffusion" in kinds:
        denoiser, c = diffusion.denoiser, diffusion.config
        parts.append(
            f"diffusion noise {network(denoiser.net)}, E {c.time_embedding}, K {c.denoising_steps}, "
            f"H {c.horizon} ({parameters(denoiser)} params)"
        )
    parts.append(f"gaussian mean {network(gaussian.mean_net)} ({parameters(gaussian.mean_net)} params)")
    return "; ".join(parts)


Runner = tuple[Callable[[], object], Callable[[torch.Tensor], torch.Tensor]]  # (timed call on obs, any obs)


def eager_runner(module: torch.nn.Module, obs: torch.Tensor) -> Runner:
    def call(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return module(x)

    return (lambda: call(obs)), call


def torchscript_runner(module: torch.nn.Module, obs: torch.Tensor, optimize: bool) -> Runner:
    with quiet():
        scripted = torch.jit.freeze(torch.jit.trace(module, obs).eval())
        if optimize:
            scripted = torch.jit.optimize_for_inference(scripted)

    def call(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return scripted(x)

    return (lambda: call(obs)), call


def onnx_runner(module: torch.nn.Module, obs: torch.Tensor, path: Path, threads: int) -> Runner:
    import onnxruntime

    export_onnx(module, obs.expand(4, -1).contiguous(), path)  # batch 4, dynamic batch axis; run at batch 1
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {"obs": obs.numpy()}

    def call(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run(None, {"obs": x.numpy()})[0])

    return (lambda: session.run(None, feed)[0]), call


def max_difference(
    call: Callable[[torch.Tensor], torch.Tensor], module: torch.nn.Module, inputs: torch.Tensor
) -> float:
    """Largest |call(row) - module(row)| over the rows of ``inputs`` [R, D], one row at a time (batch 1)."""
    with torch.inference_mode():
        return max(float((call(row[None]) - module(row[None])).abs().max()) for row in inputs)


def time_runners(runners: dict[str, Callable[[], object]], repeats: int, warmup: int) -> dict[str, np.ndarray]:
    """Microseconds per call [repeats] for each runner; the runners take turns in ``ROUNDS`` rounds."""
    for run in runners.values():
        for _ in range(warmup):
            run()
    samples = {name: [] for name in runners}
    per_round = max(1, repeats // ROUNDS)
    for _ in range(ROUNDS):
        for name, run in runners.items():
            times = samples[name]
            for _ in range(per_round):
                start = time.perf_counter_ns()
                run()
                times.append(time.perf_counter_ns() - start)
    return {name: np.asarray(times, dtype=np.float64) / 1e3 for name, times in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", choices=KINDS, default=list(KINDS), help="kinds timed (+ gaussian)")
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 5, 10], help="flow: integration steps to time")
    parser.add_argument("--integrator", choices=INTEGRATORS, default=None, help="default: the policy's (euler)")
    parser.add_argument("--ddim-steps", type=int, nargs="+", default=[5, 10], help="diffusion: DDIM steps to time")
    parser.add_argument("--denoising-steps", type=int, default=20, help="diffusion: K, DDPM training steps (random)")
    parser.add_argument("--obs-dim", type=int, default=17)
    parser.add_argument("--action-dim", type=int, default=6)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--repeats", type=int, default=5000, help="timed calls per runner")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls per runner first")
    parser.add_argument("--threads", type=int, default=1, help="torch and ONNX Runtime intra-op threads")
    parser.add_argument("--optimize", action="store_true", help="torch.jit.optimize_for_inference after freeze")
    parser.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=list(RUNTIMES), help="eager always runs")
    parser.add_argument("--run-dir", type=Path, default=None, help="time this run's policy instead of a random one")
    smoke = {"steps": [1], "ddim_steps": [1], "repeats": 10, "warmup": 1, "runtimes": ["eager", "torchscript"]}
    args = parse_smoke_args(parser, smoke=smoke)
    if min(args.steps + args.ddim_steps) < 1 or args.repeats < 1 or args.threads < 1:
        parser.error("--steps, --ddim-steps, --repeats and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    has_onnx = all(importlib.util.find_spec(name) for name in ("onnx", "onnxscript", "onnxruntime"))
    try:  # a bad size or step count (ddim steps > K), or an unusable --run-dir: one line, no traceback
        flow, diffusion, gaussian, source = policies(args)
        rows = []
        if "flow" in args.policies:
            rows += [(f"flow {n}", with_steps(flow, n, args.integrator).export_module().eval()) for n in args.steps]
        if "diffusion" in args.policies:
            rows += [(f"diffusion {n}", with_ddim_steps(diffusion, n).export_module()) for n in args.ddim_steps]
        if "fql" in args.policies:  # FQL's one-step policy: one network call of the flow's widths
            rows.append(("fql 1-step", variant(flow, one_step=True).export_module().eval()))
        if "qgf" in args.policies:  # Q-guided flow: each step also back-propagates through 2 critics of --hidden
            guided = variant(flow, guidance_scale=0.05, guidance_hidden=tuple(args.hidden))
            rows += [(f"qgf {n}", with_steps(guided, n, args.integrator).export_module().eval()) for n in args.steps]
        if "expo" in args.policies:  # EXPO: 8 base samples of the flow, their edits, 16 candidates through 2 critics
            edited = variant(flow, edit_bound=0.2, expo_samples=8, guidance_hidden=tuple(args.hidden))
            rows += [(f"expo {n}", with_steps(edited, n, args.integrator).export_module().eval()) for n in args.steps]
    except ValueError as error:
        parser.error(str(error))
    rows.append(("gaussian", gaussian.export_module().eval()))
    obs = torch.randn(1, flow.obs_dim)
    inputs = torch.randn(16, flow.obs_dim) * 2  # parity of each runtime with eager, one row at a time
    runners, differences = {}, {}
    with tempfile.TemporaryDirectory() as directory:
        for label, module in rows:
            kinds = {"eager": eager_runner(module, obs)}
            if "torchscript" in args.runtimes:
                kinds["torchscript"] = torchscript_runner(module, obs, args.optimize)
            if has_onnx and "onnxruntime" in args.runtimes:
                path = Path(directory) / f"{label.replace(' ', '_')}.onnx"
                kinds["onnxruntime"] = onnx_runner(module, obs, path, args.threads)
            for kind, (run, call) in kinds.items():
                runners[(label, kind)] = run
                differences[(label, kind)] = max_difference(call, module, inputs)
        timings = time_runners(runners, args.repeats, args.warmup)

    integrator = f"integrator {args.integrator or flow.config.integrator}; " if "flow" in args.policies else ""
    print(
        f"{source}; {integrator}threads {args.threads}; {args.repeats} calls per row after "
        f"{args.warmup} warm-up; torch {torch.__version__}"
    )
    print(f"networks: {sizes(flow, diffusion, gaussian, args.policies)}")
    if not has_onnx and "onnxruntime" in args.runtimes:
        print("onnxruntime rows skipped: pip install 'robopt[export]'")
    header = f"{'policy':<12} {'runtime':<12} {'median us':>10} {'p90 us':>10} {'x gaussian':>11} {'max |diff|':>11}"
    print(header)
    print("-" * len(header))
    for (label, kind), micros in timings.items():
        median = float(np.median(micros))
        reference = float(np.median(timings[("gaussian", kind)]))
        print(
            f"{label:<12} {kind:<12} {median:>10.1f} {float(np.percentile(micros, 90)):>10.1f} "
            f"{median / reference:>11.2f} {differences[(label, kind)]:>11.1e}"
        )


if __name__ == "__main__":
    main()
