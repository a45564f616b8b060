"""The ``robopt`` command: train, pretrain, eval, plot, collect, list (and the sim-to-real commands).

Bad input exits with code 2 and one line, no traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from robopt.cli_support import fail as _fail
from robopt.commands.train import (
    RANK_LOST_EXIT,
    check_before_launch,
    check_ranks,
    launch_ranks,
    launched_rank,
    load_experiment,
)
from robopt.options import ConfigError
from robopt.sweeps import commands as sweep_commands

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help="Policy optimization for robots."
)


@app.command()
def train(
    config: Path | None = typer.Argument(None, help="YAML experiment file, e.g. configs/ppo_halfcheetah.yaml"),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides, e.g. algo.clip_low=0.1"),
    resume: Path | None = typer.Option(None, "--resume", help="continue this run directory from its last checkpoint"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no live progress bar"),
    nproc: int = typer.Option(
        1, "--nproc", help="data-parallel: K processes on this machine, as torchrun --nproc_per_node K (on-policy)"
    ),
) -> None:
    """Train from a config file (or resume a run)."""
    if nproc != 1:
        check_ranks(nproc)
        check_before_launch(config, overrides, resume)  # a config error is one line, before any rank starts
        args = ["train", *([str(config)] if config is not None else []), *(overrides or [])]
        args += ["--resume", str(resume)] if resume is not None else []
        args += ["--no-progress"] if no_progress else []
        launch_ranks(nproc, args)
        return
    if launched_rank():
        _run_rank(config, overrides, resume, no_progress)
    _run(config, overrides, resume, no_progress)


def _run_rank(config, overrides, resume, no_progress) -> None:
    """``_run`` on a data-parallel rank, then ``os._exit`` with its status, skipping interpreter finalization.

    Even after a barrier and ``destroy_process_group``, gloo's worker threads now and then abort the finalizing
    interpreter ("terminate called without an active exception", signal 6: about 1 run in 50 here), and the launcher
    then reports the rank as failed although its run had ended. Everything a run writes is closed by then; stdio
    and logging are flushed here.
    """
    import logging

    code = 1
    try:
        _run(config, overrides, resume, no_progress)
        code = 0
    except typer.Exit as stop:
        code = stop.exit_code
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


@app.command()
def pretrain(
    config: Path | None = typer.Argument(None, help="YAML pretraining file, e.g. configs/bc_flow_hopper.yaml"),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides, e.g. algo.epochs=50"),
    resume: Path | None = typer.Option(None, "--resume", help="continue this run directory from its last checkpoint"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no live progress bar"),
) -> None:
    """Pretrain a policy from demonstrations (behaviour cloning); writes an ordinary run directory."""
    _run(config, overrides, resume, no_progress, kind="pretrain")


def _run(config, overrides, resume, no_progress, kind: str | None = None) -> None:
    """``train`` and ``pretrain``: load the config (or the run to resume), check its kind, run it."""
    from robopt.algorithms.onpolicy import NonFiniteError
    from robopt.config import config_to_dict
    from robopt.distributed import RankLost
    from robopt.experiment import FEATURES
    from robopt.runner import train as run_training

    try:
        experiment = load_experiment(config, overrides, resume)
        if kind is not None:
            algo_name = config_to_dict(experiment)["algo"]["name"]
            if FEATURES.algorithms[algo_name].kind != kind:
                allowed = ", ".join(sorted(name for name, spec in FEATURES.algorithms.items() if spec.kind == kind))
                _fail(f"robopt {kind} runs {allowed}; algo.name={algo_name} is trained with `robopt train`")
        result = run_training(experiment, resume_dir=resume, progress=False if no_progress else None)
    except ConfigError as error:
        _fail(str(error))
    except NonFiniteError as error:
        _fail(f"training stopped: {error}; the last good checkpoint is kept", code=3)
    except RankLost as error:
        _fail(f"training stopped: {error}; the last checkpoint is kept", code=RANK_LOST_EXIT)
    except KeyboardInterrupt:
        _fail("stopped by user; the last checkpoint on disk is kept", code=130)
    _report(result)


def _report(result) -> None:
    """What ``train`` prints after a run: its directory, steps, return, evaluation, how to resume."""
    if result.run_dir is None:  # a data-parallel rank other than 0: rank 0 reports
        return
    typer.echo(f"run directory: {result.run_dir}")
    typer.echo(f"env steps: {result.env_steps}  iterations: {result.iterations}  last return: {result.last_return}")
    if (result.run_dir / "eval.json").is_file():
        import json

        summary = json.loads((result.run_dir / "eval.json").read_text())
        success = f"  success rate: {summary['success_rate']:.2f}" if "success_rate" in summary else ""
        success += f"  final score: {summary['mean_score']:.3f}" if "mean_score" in summary else ""
        typer.echo(f"deterministic evaluation: {summary['mean_return']:.1f} +- {summary['std_return']:.1f}{success}")
    if result.stopped_by_user:
        ranks = f" --nproc {result.world_size}" if result.world_size > 1 else ""
        typer.echo(f"stopped by user; checkpoint saved; resume with: robopt train --resume {result.run_dir}{ranks}")
        raise typer.Exit(130)


@app.command("eval")
def evaluate(
    run_dir: Path | None = typer.Argument(None, help="run directory (runs/<experiment>/<timestamp>), or --expert"),
    episodes: int = typer.Option(10, "--episodes", help="episodes with the deterministic policy"),
    expert: Path | None = typer.Option(None, "--expert", help="a robot task's config: its scripted expert acts"),
    video: Path | None = typer.Option(None, "--video", help="also record one episode to this MP4 file"),
    seed: int = typer.Option(10_000, "--seed", help="evaluation seed"),
    video_steps: int = typer.Option(1000, "--video-steps", help="at most this many env steps in the video"),
    video_fps: float = typer.Option(
        30.0, "--video-fps", help="frames drawn per second of the episode (every k-th control step; real time)"
    ),
    pass_k: int = typer.Option(0, "--pass-k", help="language runs: also pass@K over the held-out prompts (1..64)"),
) -> None:
    """Mean and std of the deterministic policy's return over N episodes (language runs: held-out accuracy)."""
    if (run_dir is None) == (expert is None):
        _fail("give either RUN_DIR (a trained run) or --expert CONFIG (a robot task with task.expert), not both")
    if expert is not None and pass_k:
        _fail("--pass-k scores a language run; a scripted expert has none")
    if video is not None and sys.platform.startswith("linux"):  # headless OpenGL; read when mujoco is first imported
        os.environ.setdefault("MUJOCO_GL", "egl")
    from robopt.evaluation import evaluate_expert, evaluate_run, record_expert_video, record_video

    try:
        if pass_k:  # checked before the greedy pass: a bad --pass-k costs nothing
            from robopt.commands.pass_at_k import check_pass_k
            from robopt.experiment import load_run_config

            check_pass_k(load_run_config(run_dir).env.id, pass_k)
        result = evaluate_run(run_dir, episodes, seed) if expert is None else evaluate_expert(expert, episodes, seed)
    except ConfigError as error:
        _fail(str(error))
    typer.echo(
        f"return {result.mean_return:.1f} +- {result.std_return:.1f} over {episodes} episodes "
        f"(mean length {result.mean_length:.0f})"
        + ("" if result.success_rate is None else f", success rate {result.success_rate:.2f}")
        + ("" if result.mean_score is None else f", final score {result.mean_score:.3f}")
    )
    if pass_k:
        from robopt.commands.pass_at_k import pass_at_k

        try:
            value = pass_at_k(run_dir, episodes, pass_k, seed)
        except ConfigError as error:
            _fail(str(error))
        typer.echo(f"pass@{pass_k} {value:.3f} over {episodes} held-out prompts ({pass_k} samples each)")
    if video is not None:
        try:
            if expert is None:
                frames = record_video(run_dir, video, seed=seed, max_steps=video_steps, fps=video_fps)
            else:
                frames = record_expert_video(expert, video, seed=seed, max_steps=video_steps, fps=video_fps)
        except ConfigError as error:
            _fail(str(error))
        except Exception as error:  # rendering needs an OpenGL backend (MUJOCO_GL=egl or osmesa) and the env's renderer
            _fail(
                f"could not record video: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}", 1
            )
        typer.echo(f"video: {video} ({frames} frames)")


@app.command()
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="run directories; runs sharing a config name are grouped"),
    out: Path = typer.Option(Path("curves.png"), "--out", help="output image"),
    metric: str = typer.Option("episode_return", "--metric", help="progress.csv column, e.g. success_rate"),
    x: str = typer.Option("env_steps", "--x", help="the x axis: env_steps or wall_time"),
    label: list[str] = typer.Option([], "--label", help="a label per run (in order), instead of the config's name"),
) -> None:
    """Learning curves: return (or --metric) vs environment steps (or wall time), mean and spread over seeds."""
    from robopt.plotting import plot_runs

    try:
        groups = plot_runs(run_dirs, out, metric=metric, labels=label or None, x=x)
    except ConfigError as error:
        _fail(str(error))
    typer.echo(f"wrote {out} ({', '.join(f'{name}: {n} run(s)' for name, n in groups.items())})")


@app.command()
def collect(
    run_dir: Path | None = typer.Argument(None, help="run directory whose deterministic policy acts (or --expert)"),
    episodes: int | None = typer.Option(None, "--episodes", help="number of whole episodes to record"),
    out: str | None = typer.Option(None, "--out", help="dataset name, e.g. pendulum/ppo (-v0 is added if no -vN)"),
    expert: str | None = typer.Option(
        None, "--expert", help="record a scripted expert instead: an env id, metaworld:<task>, or a robot task's config"
    ),
    action_noise: float = typer.Option(0.0, "--action-noise", help="Gaussian noise std, fraction of half the range"),
    force: bool = typer.Option(False, "--force", help="replace an existing dataset of that name"),
    root: Path | None = typer.Option(None, "--root", help="datasets root (default $MINARI_DATASETS_PATH or ~/.minari)"),
    seed: int = typer.Option(0, "--seed", help="env reset and action noise seed"),
    envs: int | None = typer.Option(None, "--envs", help="parallel envs (default min(episodes, 16))"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no live progress bar"),
    fmt: str = typer.Option("minari", "--format", help="minari (an id under --root) or lerobot (--out is a folder)"),
    fps: float | None = typer.Option(None, "--fps", help="a LeRobot dataset's frame rate (default: the env's)"),
) -> None:
    """Record demonstrations of a trained run (or a scripted expert) as a Minari or LeRobot dataset."""
    from robopt.commands.collect import collect as collect_demonstrations

    if episodes is None:
        _fail("missing --episodes N (the number of episodes to record)")
    if out is None:
        _fail("missing --out NAME (the dataset name, e.g. pendulum/expert)")
    try:
        result = collect_demonstrations(
            out,
            episodes,
            run_dir=run_dir,
            expert=expert,
            action_noise=action_noise,
            root=root,
            force=force,
            seed=seed,
            num_envs=envs,
            progress=not no_progress,
            fmt=fmt,
            fps=fps,
        )
    except ConfigError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        _fail("stopped by user; no dataset was written", code=130)
    typer.echo(result.summary())


@app.command("list")
def list_registered() -> None:
    """Registered envs, backends, policies and algorithms."""
    from robopt.envs import list_env_ids
    from robopt.experiment import FEATURES

    typer.echo("config sections: env, log (core); " + ", ".join(section.name for section in FEATURES.sections))
    typer.echo("run kinds:  " + ", ".join(FEATURES.loop_kinds))
    typer.echo("algorithms: " + ", ".join(f"{k} ({v.summary})" for k, v in sorted(FEATURES.algorithms.items())))
    typer.echo("policies:   " + ", ".join(f"{k} ({v.summary})" for k, v in sorted(FEATURES.policies.items())))
    typer.echo("backends:   " + ", ".join(FEATURES.env_backends))
    typer.echo("native envs: " + (", ".join(list_env_ids()) or "(none)"))
    typer.echo("gymnasium:  any registered Gymnasium id with Box spaces, e.g. HalfCheetah-v5, Hopper-v5, Pendulum-v1")
    from robopt.envs.robot.library import describe
    from robopt.envs.robot.mjcf import shipped_robots

    typer.echo(
        "robots:     env.id robot with robot.mjcf: your MJCF, menagerie:<dir>/<file>, or shipped: "
        + ", ".join(f"robopt:{name}" for name in shipped_robots())
    )
    kinds = (
        ("observation", "observations"),
        ("reward", "rewards"),
        ("termination", "terminations"),
        ("success", "success"),
    )
    for kind, heading in kinds:
        typer.echo(f"task.{heading}: " + ", ".join(name for name, _ in describe(kind)))


# Sim-to-real commands live with their package; each module's ``register(app, fail)`` adds its commands (export,
# deploy, sim-robot, evaluate-transfer) and imports nothing heavy until a command runs.
SIM2REAL_COMMAND_MODULES = (
    "robopt.sim2real.export",
    "robopt.sim2real.deploy",
    "robopt.sim2real.sim_robot_cli",
    "robopt.sim2real.evaluate",
)


def _register_sim2real() -> None:
    import importlib
    import importlib.util

    for name in SIM2REAL_COMMAND_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(app, _fail)


_register_sim2real()


# robopt sweep, tune and report live with the sweeps (robopt/sweeps/commands.py)
app.command()(sweep_commands.sweep)
app.command()(sweep_commands.tune)
app.command()(sweep_commands.report)


def main() -> None:
    if launched_rank():  # a data-parallel rank: read when torch loads, so set first
        # c10d logs a failed rendezvous or a lost peer as a C++ stack trace; the rank prints it as one line instead
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    try:
        app()
    except ConfigError as error:  # errors raised while parsing outside a command
        typer.echo(f"robopt: error: {error}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
