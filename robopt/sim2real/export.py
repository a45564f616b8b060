"""``robopt export``: a run's deterministic policy as ONNX and ``torch.export`` files, checked against torch.

Shapes: K parity observations, B batch, D obs dim, A action dim, H action chunk. The export directory (see
``sidecar``) holds
    policy.onnx   input "obs" [B, D] float32 -> output "action" [B, A] float32 ([B, H, A] when H > 1), B dynamic
    policy.pt2    the same module as a ``torch.export`` ExportedProgram (``torch.export.save``; B dynamic through
                  ``torch.export.Dim``): ``torch.export.load(path).module()`` runs it (format name "pt2")
    parity.npz    "obs" [K, D] float32: what the deterministic policy observed in the run's env at its decisions;
                  "action" [K, A] (or [K, H, A]) float32: the torch module's outputs on them (a deploy runtime
                  re-checks its model against them)
    policy.json   the sidecar: dims, action bounds, control period, sha256 of every file above, the run's config
The module is ``policy.export_module()`` (normalizer and action bounds folded in). A policy acting in chunks of
H > 1 actions (``policy.horizon``; its env is an ``ActionChunkEnv``) is exported through
``robopt.sim2real.chunks.ChunkedExport`` as [B, H, A] with ``action_chunk = H`` and the per-step ``action_dim`` A,
action bounds [A] and ``control_period`` of the inner env (one action per tick: the runtime plays the chunk).
A policy with an observation history (``policy.history`` K > 1; its env is a ``robopt.envs.history.HistoryEnv``)
takes the window [B, K * (D + A)]: obs_dim, obs_low/obs_high (each frame's obs and action bounds) and the parity
observations are windows, obs_names is null, and the sidecar's ``history`` block gives K, the raw D and A and
the layout, from which the runtime (``robopt.sim2real.window.HistoryWindow``) builds the window.
A policy with memory (``policy.recurrent``) is one step (obs, state) -> (action, next_state) with its state in and
out; ``robopt.sim2real.export_state`` steps it through its parity sequence.
Everything is written to a temporary directory, each model is reloaded from its file and compared with torch on
the K observations (batched and one row at a time, max |difference| <= ``TOLERANCE``) and only then moved into
the output directory.

Exports before pt2 wrote ``policy.pt`` (``torch.jit.trace``, format "torchscript"; torch.jit is deprecated): they
are no longer written, and ``load_torch_export`` still reads them.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robopt.options import ConfigError
from robopt.sim2real.sidecar import DeployError, Sidecar, check_files, file_sha256, read_sidecar, write_sidecar

FORMATS = ("onnx", "pt2")
FILE_NAMES = {"onnx": "policy.onnx", "pt2": "policy.pt2"}
LEGACY_FILE_NAMES = {"torchscript": "policy.pt"}  # written by exports before pt2 (torch.jit.trace): read, not written
PARITY_NAME = "parity.npz"
# what --force replaces in an output directory (an earlier export's policy.pt too)
EXPORT_NAMES = (*FILE_NAMES.values(), *LEGACY_FILE_NAMES.values(), PARITY_NAME, "policy.json")
TOLERANCE = 1e-5  # max |exported - torch| accepted, per action component


@dataclass(frozen=True)
class ExportReport:
    out_dir: Path
    formats: tuple[str, ...]
    max_difference: dict[str, float]  # format -> max |exported - torch| over the parity observations
    parity_observations: int
    sidecar: Sidecar  # what was written as policy.json

    def summary_lines(self) -> list[str]:
        return [
            f"{fmt}: {self.out_dir / FILE_NAMES[fmt]} (max |{fmt} - torch| {self.max_difference[fmt]:.1e} "
            f"on {self.parity_observations} observations)"
            for fmt in self.formats
        ]


@contextlib.contextmanager
def quiet():
    """Silence the exporters' progress lines, warnings and log messages, and the partial graph torch.export prints to
    stderr before raising (the caller reports the error in one line)."""
    level = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(level)


def onnx_session(path: Path, threads: int | None = None):
    """An ONNX Runtime CPU session; ``threads`` pins one intra-op pool size with sequential execution."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _inputs_and_batch_axes(example) -> tuple[tuple, tuple[dict, ...]]:
    """``example`` (a tensor or a tuple of tensors) as a tuple, and axis 0 of each as one dynamic batch size B."""
    import torch

    inputs = example if isinstance(example, tuple) else (example,)
    batch = torch.export.Dim("batch")
    return inputs, tuple({0: batch} for _ in inputs)


def export_onnx(module, example, path: Path, input_names=("obs",), output_names=("action",)) -> None:
    """``module`` as ONNX at ``path``: inputs ``input_names`` (default "obs" [B, D]) sharing one dynamic batch axis
    B, outputs ``output_names``.

    ``example`` (a tensor [B, D] or a tuple of inputs [B, ...]) needs B >= 2 (a batch of one would be baked into the
    graph as a constant).
    """
    import torch

    inputs, batch_axes = _inputs_and_batch_axes(example)
    with quiet():
        program = torch.onnx.export(
            module,
            inputs,
            dynamo=True,
            dynamic_shapes=batch_axes,
            input_names=list(input_names),
            output_names=list(output_names),
            verbose=False,
        )
        program.save(str(path))


def export_pt2(module, example, path: Path) -> None:
    """``module`` as a ``torch.export`` ExportedProgram at ``path`` (``torch.export.save``), axis 0 of every input
    one dynamic batch B (``torch.export.Dim``); ``example`` as in ``export_onnx`` (B >= 2)."""
    import torch

    inputs, batch_axes = _inputs_and_batch_axes(example)
    with quiet():
        program = torch.export.export(module, inputs, dynamic_shapes=batch_axes)
    torch.export.save(program, str(path))


def load_torch_file(fmt: str, path: Path):
    """The torch module in ``path``: a "pt2" ExportedProgram's module (``torch.export.load``), or the TorchScript
    module of a "torchscript" file written by an export before pt2 (``torch.jit.load``, its deprecation silenced)."""
    import torch

    if fmt == "pt2":
        return torch.export.load(str(path)).module()
    if fmt != "torchscript":
        raise ValueError(f"{fmt!r} is not a torch model format (pt2, torchscript)")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.load` is deprecated", DeprecationWarning)
        return torch.jit.load(str(path), map_location="cpu")


def load_torch_export(directory: Path):
    """(sidecar, torch module) of an export directory: its policy.pt2 or, from an export before pt2, its policy.pt
    (TorchScript), after checking the file's sha256 against the sidecar; DeployError (one line) when it has neither.
    The module maps obs [B, D] -> action (and a policy with memory (obs, state) -> (action, next_state))."""
    sidecar = read_sidecar(directory)
    fmt = next((fmt for fmt in ("pt2", *LEGACY_FILE_NAMES) if fmt in sidecar.files), None)
    if fmt is None:
        present = ", ".join(sidecar.files)
        raise DeployError(f"{str(directory)!r} has no torch model (pt2, or torchscript before pt2); formats: {present}")
    return sidecar, load_torch_file(fmt, check_files(directory, sidecar, fmt))


def model_call(fmt: str, path: Path, input_names: Sequence[str] = ("obs",)) -> Callable[..., tuple[np.ndarray, ...]]:
    """The model file's forward on numpy arrays, ``call(*inputs) -> outputs`` (a tuple), inputs in ``input_names``
    order: ONNX Runtime for "onnx", torch for "pt2" and "torchscript"."""
    if fmt == "onnx":
        session = onnx_session(path)
        return lambda *inputs: tuple(session.run(None, dict(zip(input_names, inputs))))
    import torch

    module = load_torch_file(fmt, path)

    def call(*inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        with torch.inference_mode():
            outputs = module(*(torch.from_numpy(x) for x in inputs))
        return tuple(output.numpy() for output in (outputs if isinstance(outputs, tuple) else (outputs,)))

    return call


def max_difference(call: Callable[[np.ndarray], np.ndarray], obs: np.ndarray, reference: np.ndarray) -> float:
    """Max |call(obs) - reference| over the whole batch [K, D] at once and over each row as a batch of one.

    An output whose shape is not the reference's ([K, A] or [K, H, A]) is infinitely far from it (no broadcasting).
    """

    def difference(x: np.ndarray, expected: np.ndarray) -> float:
        got = np.asarray(call(x))
        return float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")

    batched = difference(obs, reference)
    rows = max(difference(obs[i : i + 1], reference[i : i + 1]) for i in range(len(obs)))
    return max(batched, rows)


def weights_sha256(policy) -> str:
    """sha256 over the bytes of the policy's state_dict tensors, keys in sorted order."""
    import torch

    digest = hashlib.sha256()
    for _, tensor in sorted(policy.state_dict().items()):
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def control_period(env) -> float:
    """Seconds per env step: ``env.dt`` (native envs, torch tasks) or the first Gymnasium env's ``unwrapped.dt``."""
    period = getattr(env, "dt", None)
    if period is None and hasattr(env, "envs"):
        period = getattr(env.envs[0].unwrapped, "dt", None)
    if period is None and hasattr(env, "inner"):  # a wrapper (observation selection, history) of a Gymnasium env
        return control_period(env.inner)
    if period is None:
        raise ConfigError(f"{env.env_id}: cannot tell the control period (the env has no dt)")
    return float(period)


def _obs_bounds(env) -> tuple[list[float] | None, list[float] | None]:
    """Declared observation bounds (a Gymnasium env's, through any wrapper) when all are finite, else (None, None)."""
    from robopt.envs.observe import declared_obs_bounds

    low, high = declared_obs_bounds(env)
    if low is None or not (np.isfinite(low).all() and np.isfinite(high).all()):
        return None, None
    return [float(v) for v in low.reshape(-1)], [float(v) for v in high.reshape(-1)]


def _robot_block(env) -> tuple[dict | None, list[str] | None, list[str] | None]:
    """(robot block, obs names, action names) of a robot from its description; (None, None, None) otherwise."""
    task = getattr(env, "task", None)
    if not hasattr(task, "term_widths"):  # a TermTask (robopt.envs.robot.task)
        return None, None, None
    from robopt.envs.robot.describe import observation_names, robot_sidecar

    block = robot_sidecar(task)
    return block, observation_names(task), list(block["joint_names"])


def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    """``formats`` without repeats; ConfigError (one line) for an unknown one, none, or one no longer written."""
    if "torchscript" in formats:
        raise ConfigError(
            "export format torchscript (policy.pt, torch.jit.trace) is no longer written: use pt2 (policy.pt2, a "
            "torch.export ExportedProgram); policy.pt files of earlier exports still load"
        )
    unknown = [fmt for fmt in formats if fmt not in FORMATS]
    if unknown or not formats:
        raise ConfigError(f"export format must be one of {', '.join(FORMATS)}, got {', '.join(formats) or 'none'}")
    return tuple(dict.fromkeys(formats))


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"export output {str(out_dir)!r} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise ConfigError(f"export output {str(out_dir)!r} is not empty; pass --force to replace the export there")


def load_exportable(run_dir: Path, guidance_scale: float | None = None):
    """The run's config, policy and its CPU export module; ConfigError (one line) when that is impossible.

    ``guidance_scale`` re-sets a Q-guided flow policy's sampling scale (``algo.name=qgf`` runs; 0: the plain
    flow): a deploy-time knob, the weights are the run's."""
    from robopt.config import build_dataclass, config_to_dict
    from robopt.evaluation import load_policy
    from robopt.experiment import ExperimentConfig, load_run_config

    if not Path(run_dir).is_dir():
        raise ConfigError(f"run directory {str(run_dir)!r} does not exist (or is not a directory)")
    config = None
    if guidance_scale is not None:
        config = load_run_config(run_dir)
        if config.policy.name != "flow" or config.policy.guidance_scale <= 0.0:
            raise ConfigError(
                "--guidance-scale re-sets the scale of a Q-guided flow policy (a run of algo.name=qgf, whose critics "
                f"it samples along); {str(run_dir)!r} has none"
            )
        if not guidance_scale >= 0.0 or guidance_scale == float("inf"):
            raise ConfigError(f"--guidance-scale must be a finite number >= 0, got {guidance_scale}")
        data = config_to_dict(config)
        data["policy"]["guidance_scale"] = float(guidance_scale)
        config = build_dataclass(ExperimentConfig, data)
    # one-line ConfigError for a missing, corrupt or mismatched checkpoint
    config, policy = load_policy(run_dir) if config is None else load_policy(run_dir, config)
    if not callable(getattr(policy, "export_module", None)):
        raise ConfigError(f"policy kind {config.policy.name!r} cannot be exported (it has no export_module)")
    return config, policy, policy.export_module().cpu().eval()


def record_observations(policy, env, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """[steps, D] float32 observations of env row 0 while the deterministic policy acts (bounds-clamped; a policy with
    memory carries its state through ``PolicyActor``, reset where episodes end), and episode_start [steps] bool."""
    import torch

    from robopt.policies.recurrent import PolicyActor

    rows, starts, start = [], [], True
    actor = PolicyActor(policy, env.num_envs)
    with torch.inference_mode():
        obs = env.reset(seed=seed)
        for _ in range(steps):
            rows.append(obs[0].detach().cpu().numpy().astype(np.float32))
            starts.append(start)
            action, _ = actor.act(obs, deterministic=True)
            clamped = torch.maximum(torch.minimum(action, env.action_high), env.action_low)
            obs, _, terminated, truncated, _ = env.step(clamped)
            actor.episode_ended(terminated | truncated)
            start = bool(terminated[0] or truncated[0])
    return np.stack(rows), np.asarray(starts, dtype=bool)


def _install(tmp: Path, out_dir: Path) -> None:
    """Move the files of ``tmp`` into ``out_dir`` (replacing a previous export there), the sidecar last."""
    if not out_dir.exists() or not any(out_dir.iterdir()):
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # a directory made by mkdir, not mkdtemp's owner-only 0700
        os.replace(tmp, out_dir)
        return
    for name in EXPORT_NAMES:  # --force: drop the previous export's files; other files are left alone
        (out_dir / name).unlink(missing_ok=True)
    for path in sorted(tmp.iterdir(), key=lambda p: p.name == "policy.json"):
        os.replace(path, out_dir / path.name)
    tmp.rmdir()


def _fail(fmt: str, error: BaseException, module) -> None:
    """An exporter's exception on ``module`` as a one-line ConfigError naming the format and the module's class (no
    other exporter is tried in its place)."""
    if isinstance(error, ImportError):
        raise ConfigError(f"{fmt} export needs {error.name}: pip install 'robopt[export]'") from None
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    raise ConfigError(f"{fmt} export of {type(module).__name__} failed: {type(error).__name__}: {first}") from None


def _batch_parity(module, obs: np.ndarray) -> tuple[dict, tuple, Callable]:
    """A memoryless ``module``'s parity arrays (its actions [K, A] or [K, H, A] on obs [K, D]), example input, and
    ``difference(call)``: max |call - torch| batched and one row at a time."""
    import torch

    with torch.inference_mode():
        reference = module(torch.from_numpy(obs)).numpy().astype(np.float32)  # [K, A] or [K, H, A]
    example = torch.from_numpy(obs[:1]).expand(4, -1).contiguous()  # batch 4: the batch axis stays dynamic
    parity = {"obs": obs, "action": reference}
    return parity, (example,), lambda call: max_difference(lambda x: call(x)[0], obs, reference)


def _write_models(module, obs: np.ndarray, starts: np.ndarray, stateful: bool, formats, tmp: Path):
    """Write each format of ``module`` in ``tmp``, reload it and check it against torch: the parity arrays, per
    format the max |exported - torch|, and the state width M (0: memoryless). ConfigError (one line) on a failure."""
    from robopt.sim2real.export_state import STATE_INPUT, STATE_OUTPUT, sequence_parity

    if stateful:
        parity, example, difference = sequence_parity(module, obs, starts)
        names, what = (("obs", STATE_INPUT), ("action", STATE_OUTPUT)), f" over the {len(obs)}-step sequence"
    else:
        parity, example, difference = _batch_parity(module, obs)
        names, what = (("obs",), ("action",)), ""
    differences = {}
    for fmt in formats:
        path = tmp / FILE_NAMES[fmt]
        try:
            export_onnx(module, example, path, *names) if fmt == "onnx" else export_pt2(module, example, path)
        except Exception as error:  # an exporter failing on this module: one line, not its traceback
            _fail(fmt, error, module)
        differences[fmt] = difference(model_call(fmt, path, names[0]))
        if not differences[fmt] <= TOLERANCE:  # NaN fails too
            raise ConfigError(
                f"{fmt} export disagrees with torch{what}: max |difference| {differences[fmt]:.2e} > {TOLERANCE:g}"
            )
    return parity, differences, (parity["state"].shape[1] if stateful else 0)


def export_run(
    run_dir: Path,
    out_dir: Path | None = None,
    formats: Sequence[str] = FORMATS,
    parity_steps: int = 200,
    force: bool = False,
    guidance_scale: float | None = None,
) -> ExportReport:
    """Export the run's policy (default into RUN_DIR/export); ConfigError (one line) on any problem."""
    import importlib.metadata

    from robopt.build import build_env
    from robopt.config import config_to_dict
    from robopt.core.protocols import memory_width
    from robopt.envs.history import LAYOUT, history_frames
    from robopt.sim2real.chunks import ChunkedExport, step_env

    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "export"
    formats = check_formats(formats)
    if parity_steps < 1:
        raise ConfigError(f"parity_steps must be at least 1, got {parity_steps}")
    _check_out_dir(out_dir, force)
    config, policy, module = load_exportable(run_dir, guidance_scale)
    env = build_env(config, num_envs=1)
    inner, horizon = step_env(env)  # what one action steps: the sidecar describes one control tick
    raw, frames = history_frames(inner)  # what the robot observes: the runtime builds the window of K frames
    try:
        stateful = memory_width(policy) > 0  # a policy with memory: its state in and out
        obs, starts = record_observations(policy, env, parity_steps, seed=config.seed + 20_000)
        period, (obs_low, obs_high) = control_period(inner), _obs_bounds(inner)
        env_id, action_low, action_high = inner.env_id, inner.action_low.tolist(), inner.action_high.tolist()
        robot, obs_names, action_names = _robot_block(raw)
        history = (
            None
            if frames == 1
            else {"frames": frames, "obs_dim": raw.obs_dim, "action_dim": raw.action_dim, "layout": LAYOUT}
        )
        obs_names = obs_names if frames == 1 else None  # the names of the raw observation, not of the window
    finally:
        env.close()
    if horizon > 1:
        module = ChunkedExport(module, horizon, len(action_low)).eval()  # [B, H * A] -> [B, H, A]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        parity, differences, state_dim = _write_models(module, obs, starts, stateful, formats, tmp)
        reference = parity["action"]
        np.savez(tmp / PARITY_NAME, **parity)
        files = {fmt: FILE_NAMES[fmt] for fmt in formats}
        sidecar = Sidecar(
            policy_kind=config.policy.name,
            env_id=env_id,
            obs_dim=obs.shape[1],
            action_dim=reference.shape[-1],
            action_low=action_low,
            action_high=action_high,
            control_period=period,
            files=files,
            action_chunk=horizon,
            obs_low=obs_low,
            obs_high=obs_high,
            robot=robot,
            obs_names=obs_names,
            action_names=action_names,
            history=history,
            files_sha256={name: file_sha256(tmp / name) for name in [*files.values(), PARITY_NAME]},
            weights_sha256=weights_sha256(policy),
            robopt_version=importlib.metadata.version("robopt"),
            config=config_to_dict(config),
            state_dim=state_dim,
            format_version=3 if state_dim else 2,
        )
        write_sidecar(tmp, sidecar)
        _install(tmp, out_dir)
    except DeployError as error:
        raise ConfigError(str(error)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ExportReport(out_dir, formats, differences, len(obs), sidecar)


def register(app, fail) -> None:
    """Add ``robopt export RUN_DIR [--format onnx|pt2|both] [--out DIR] [--force]`` to ``app``."""
    import typer

    @app.command("export")
    def export_command(
        run_dir: Path = typer.Argument(..., help="run directory (runs/<experiment>/<timestamp>)"),
        fmt: str = typer.Option(
            "both", "--format", help="onnx, pt2 (a torch.export ExportedProgram, policy.pt2) or both"
        ),
        out: Path | None = typer.Option(None, "--out", help="output directory (default RUN_DIR/export)"),
        force: bool = typer.Option(False, "--force", help="replace an existing export in the output directory"),
        guidance_scale: float | None = typer.Option(
            None, "--guidance-scale", help="Q-guided flow runs (algo qgf): the sampling scale to export (0: plain flow)"
        ),
    ) -> None:
        """Export the run's deterministic policy (ONNX, torch.export) with policy.json, checked against torch."""
        if fmt not in (*FORMATS, *LEGACY_FILE_NAMES, "both"):  # torchscript: check_formats names its successor
            fail(f"--format must be onnx, pt2 or both, got {fmt!r}")
        try:
            report = export_run(
                run_dir, out, FORMATS if fmt == "both" else (fmt,), force=force, guidance_scale=guidance_scale
            )
        except ConfigError as error:
            fail(str(error))
        for line in report.summary_lines():
            typer.echo(line)
