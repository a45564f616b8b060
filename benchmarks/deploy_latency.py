"""Batch-1 CPU latency of an exported Gaussian policy through the runtimes a robot computer would use.

The policy is exported the way ``robopt export`` does it (``robopt.sim2real.export``: ``export_module()`` with
normalizer and action bounds folded in, ONNX with a dynamic batch axis, a ``torch.export`` ExportedProgram), then
each file is loaded back and timed one observation [1, D] at a time:
    eager        : ``export_module()`` under ``torch.inference_mode()`` (a torch tensor in and out)
    pt2          : ``torch.export.load("policy.pt2").module()`` under ``torch.inference_mode()``
    onnxruntime  : an ``InferenceSession`` on policy.onnx, CPU provider, 1 intra-op thread, sequential execution,
                   all graph optimizations (a float32 [1, D] array in and out)
and, per runtime, the whole path a robot loop runs (``numpy`` rows): a float64 [D] sensor array -> float32
[1, D] model input -> output -> float64 [A] action array. After --warmup untimed calls per row, --repeats calls
are timed one by one, the rows taking turns in rounds (``flow_latency.time_runners``) so load from other
processes hits every row alike. Printed per row: median and 99th percentile microseconds per call, and the
largest |action - eager action| on random inputs.

A random GaussianPolicy of --obs-dim -> --action-dim (HalfCheetah sizes, 17 -> 6) with --hidden widths, or a
trained run's policy with --run-dir (exported into a temporary directory; nothing is written to the run).

    .venv/bin/python benchmarks/deploy_latency.py --hidden 64 64
    .venv/bin/python benchmarks/deploy_latency.py --hidden 256 256 --repeats 50000
    .venv/bin/python benchmarks/deploy_latency.py --run-dir runs/ppo_halfcheetah/<timestamp>
    .venv/bin/python benchmarks/deploy_latency.py --smoke    # CI: 10 calls per row after 1 warm-up
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from flow_latency import time_runners  # benchmarks/ is the script's directory, so its sibling imports
from smoke import parse_smoke_args

from robopt.policies import GaussianPolicy
from robopt.sim2real.export import FILE_NAMES, export_onnx, export_pt2, export_run, load_torch_file, onnx_session
from robopt.sim2real.sidecar import read_sidecar


def exported_files(args, directory: Path) -> tuple[torch.nn.Module, Path, int, str]:
    """The eager export module, the directory holding policy.onnx and policy.pt2, the obs dim, and a source line."""
    if args.run_dir is not None:
        from robopt.evaluation import load_policy

        _, policy = load_policy(args.run_dir)
        report = export_run(args.run_dir, directory / "export", parity_steps=16)
        source = f"{type(policy).__name__} from {args.run_dir}"
        return policy.export_module().eval(), report.out_dir, read_sidecar(report.out_dir).obs_dim, source
    low, high = -torch.ones(args.action_dim), torch.ones(args.action_dim)
    policy = GaussianPolicy(args.obs_dim, args.action_dim, low, high, tuple(args.hidden))
    policy.normalizer.update(torch.randn(1000, args.obs_dim) * 2 + 0.5)  # random statistics: not an identity
    module = policy.export_module().eval()
    example = torch.randn(4, args.obs_dim)
    export_onnx(module, example, directory / FILE_NAMES["onnx"])
    export_pt2(module, example, directory / FILE_NAMES["pt2"])
    source = f"random GaussianPolicy {args.obs_dim} -> {args.action_dim}, hidden {list(args.hidden)}"
    return module, directory, args.obs_dim, source


def tensor_calls(module, program, session) -> dict[str, object]:
    """Each runtime as ``float32 [B, D] array -> float32 [B, A] array`` plus its own-typed call for timing."""

    def torch_call(model):
        def call(x: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return model(x)

        return call

    return {
        "eager": torch_call(module),
        "pt2": torch_call(program),
        "onnxruntime": lambda x: session.run(None, {"obs": x})[0],
    }


def robot_path(kind: str, call):
    """float64 [D] sensor reading -> float64 [A] action, through runtime ``kind``."""
    if kind == "onnxruntime":
        return lambda obs: call(obs.astype(np.float32)[None])[0].astype(np.float64)
    return lambda obs: call(torch.from_numpy(obs.astype(np.float32)[None]))[0].numpy().astype(np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--obs-dim", type=int, default=17)
    parser.add_argument("--action-dim", type=int, default=6)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64], help="e.g. 64 64 or 256 256")
    parser.add_argument("--run-dir", type=Path, default=None, help="export and time this run's policy instead")
    parser.add_argument("--repeats", type=int, default=20000, help="timed calls per row")
    parser.add_argument("--warmup", type=int, default=500, help="untimed calls per row first")
    args = parse_smoke_args(parser, smoke={"repeats": 10, "warmup": 1})
    if args.repeats < 1 or args.warmup < 0 or min(args.obs_dim, args.action_dim, *args.hidden) < 1:
        parser.error("--repeats, --obs-dim, --action-dim and --hidden must be >= 1, --warmup >= 0")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as directory:
        module, files, obs_dim, source = exported_files(args, Path(directory))
        program = load_torch_file("pt2", files / FILE_NAMES["pt2"])
        session = onnx_session(files / FILE_NAMES["onnx"], threads=1)
    calls = tensor_calls(module, program, session)
    sensor = np.random.default_rng(0).normal(size=obs_dim) * 2  # float64, as a robot's driver delivers it
    model_input = {"eager": torch.from_numpy(sensor.astype(np.float32)[None])}
    model_input["pt2"], model_input["onnxruntime"] = model_input["eager"], sensor.astype(np.float32)[None]
    runners, differences = {}, {}
    inputs = np.random.default_rng(1).normal(size=(64, obs_dim)) * 2
    reference = np.stack([robot_path("eager", calls["eager"])(row) for row in inputs])
    for kind, call in calls.items():
        runners[(kind, "model")] = lambda call=call, x=model_input[kind]: call(x)
        runners[(kind, "numpy")] = lambda path=robot_path(kind, call): path(sensor)
        actions = np.stack([robot_path(kind, call)(row) for row in inputs])
        differences[kind] = float(np.abs(actions - reference).max())
    timings = time_runners(runners, args.repeats, args.warmup)

    print(
        f"{source}; batch 1; 1 thread; {args.repeats} calls per row after {args.warmup} warm-up; "
        f"torch {torch.__version__}"
    )
    header = f"{'runtime':<12} {'path':<6} {'median us':>10} {'p99 us':>10} {'max |diff|':>11}"
    print(header)
    print("-" * len(header))
    for (kind, path), micros in timings.items():
        print(
            f"{kind:<12} {path:<6} {float(np.median(micros)):>10.1f} {float(np.percentile(micros, 99)):>10.1f} "
            f"{differences[kind]:>11.1e}"
        )
    print("model: tensor or float32 array already prepared; numpy: float64 [D] sensor array -> float64 [A] action")


if __name__ == "__main__":
    main()
