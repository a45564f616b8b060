"""Builds an experiment from its config and runs it: run directory, checkpoints, progress, evaluation."""

from __future__ import annotations

import datetime
import json
import pickle
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from robopt.build import build_env, build_loop, evaluation_env_options, resolve_torch_threads
from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from robopt.config import ConfigError, config_to_dict
from robopt.distributed.collective import LOCAL, Collective, join_from_environment
from robopt.evaluation import PeriodicEvaluation, evaluate_policy
from robopt.experiment import ExperimentConfig
from robopt.logging import RunLogger


def new_run_dir(config: ExperimentConfig) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = Path(config.log.run_root) / config.name / stamp
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=False)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
    return run_dir


@dataclass
class TrainResult:
    run_dir: Path
    env_steps: int
    iterations: int
    last_return: float | None
    stopped_by_user: bool = False
    world_size: int = 1  # ranks of a data-parallel run


class _InterruptFlag:
    """First Ctrl-C: finish the iteration, checkpoint, stop. A second one stops at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def __enter__(self) -> _InterruptFlag:
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not in the main thread
            self._previous = None
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: finishing this iteration and saving a checkpoint (Ctrl-C again to stop now)", flush=True)

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


RANK_KEYS = ("obs", "env", "reward_scaler")
"""Entries of an on-policy loop's state that differ between the ranks of a data-parallel run (each rank's envs)."""


def _checkpoint_state(loop, config: ExperimentConfig, wall_time: float, collective: Collective = LOCAL) -> dict | None:
    """What ``--resume`` needs; ``wall_time`` is the run's training time so far, so a resumed run's clock continues.

    With several ranks every rank's RNG and env state is gathered to rank 0 (``ranks``, in rank order, with the
    ``world_size``); the shared parts (weights, optimizer, counters) are rank 0's. None on the other ranks.
    """
    state = loop.state_dict()
    if collective.world_size == 1:
        return {"loop": state, "rng": rng_state(), "config": config_to_dict(config), "wall_time": wall_time}
    own = {key: state.get(key) for key in getattr(loop, "RANK_KEYS", RANK_KEYS)} | {"rng": rng_state()}
    ranks = collective.gather_objects(own)
    if not collective.is_writer:
        return None
    return {
        "loop": state,
        "rng": rng_state(),
        "config": config_to_dict(config),
        "wall_time": wall_time,
        "world_size": collective.world_size,
        "ranks": ranks,
    }


def _load_checkpoint_state(loop, checkpoint: dict, collective: Collective, run_dir: Path) -> None:
    """Restore ``loop`` and the RNG streams from a checkpoint; with several ranks, this rank's own part."""
    world = int(checkpoint.get("world_size", 1))
    if world != collective.world_size:
        raise ConfigError(
            f"cannot resume {str(run_dir)!r}: it was trained on {world} rank(s), this launch has "
            f"{collective.world_size}; resume with --nproc {world}"
        )
    state = dict(checkpoint["loop"])
    rng = checkpoint["rng"]
    if world > 1:
        own = checkpoint["ranks"][collective.rank]
        state.update({key: own[key] for key in getattr(loop, "RANK_KEYS", RANK_KEYS) if own.get(key) is not None})
        rng = own["rng"]
    loop.load_state_dict(state)
    set_rng_state(rng)


def _describe_start(config: ExperimentConfig, loop, run_dir: Path, resumed: bool, collective: Collective) -> str:
    threads, why = resolve_torch_threads(config)
    env = loop.env
    backend = type(env).__name__ if not hasattr(env, "physics") else type(env.physics).__name__
    verb = "resuming" if resumed else "training"
    envs = f"{env.num_envs}"
    if collective.world_size > 1:
        envs += f" on each of {collective.world_size} ranks"
    offline = getattr(loop, "offline_summary", "")
    return (
        f"robopt: {verb} {config.name} in {run_dir} | {config.env.id} x {envs} ({backend}) | "
        f"torch threads: {threads} ({why}; override with torch_threads=N)" + (f" | {offline}" if offline else "")
    )


def train(
    config: ExperimentConfig,
    resume_dir: Path | None = None,
    progress: bool | None = None,
    stop_at_iteration: int | None = None,
) -> TrainResult:
    """Train ``config`` in a new run directory, or continue ``resume_dir`` from its last checkpoint.

    ``stop_at_iteration`` checkpoints and stops early (time-sliced jobs); ``--resume`` continues the run.
    """
    collective = join_from_environment(config.device)  # LOCAL unless launched by torchrun / --nproc
    try:
        result = _train(config, collective, resume_dir, progress, stop_at_iteration)
    except BaseException:
        collective.close()
        raise
    collective.close(synchronize=True)  # every rank done: none tears its connections down under another
    return result


def _train(config, collective: Collective, resume_dir, progress, stop_at_iteration) -> TrainResult:
    """``train`` on this rank; rank 0 alone writes the run directory, logs and checkpoints."""
    loop = build_loop(config, initialize=resume_dir is None, collective=collective)
    writer = collective.is_writer
    wall_time_before = 0.0  # training wall time of the run before this process (resumed runs)
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        try:
            checkpoint = load_checkpoint(run_dir / LAST_CHECKPOINT)
            _load_checkpoint_state(loop, checkpoint, collective, run_dir)
        except ConfigError:
            raise
        except (RuntimeError, KeyError, ValueError, EOFError, OSError, pickle.UnpicklingError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"cannot resume {str(run_dir)!r}: its checkpoint does not load ({first})") from None
        wall_time_before = float(checkpoint.get("wall_time", 0.0))
    else:
        run_dir = new_run_dir(config) if writer else None
    # A resumed run drops what was logged after its checkpoint, so its files read like one uninterrupted run.
    logger = RunLogger(run_dir, resume_at_step=loop.env_steps if resume_dir is not None else None) if writer else None
    show_progress = (config.log.progress if progress is None else progress) and writer
    if writer:
        print(_describe_start(config, loop, run_dir, resume_dir is not None, collective), flush=True)
    # A loop that knows its own length (behaviour cloning: epochs) says so; on-policy loops run total_steps.
    # Offline iterations (updates on a dataset before the first env step) come before total_steps' online ones.
    total_iterations = getattr(loop, "total_iterations", None) or max(
        1, getattr(loop, "offline_iterations", 0) + config.total_steps // loop.steps_per_iteration
    )
    last_return, stopped, env_open, evaluator = None, False, True, None
    from robopt.progress import TrainingProgress

    try:
        if writer and config.log.eval_every > 0:
            evaluator = PeriodicEvaluation(config, loop.env_steps)
        with (
            _InterruptFlag() as interrupt,
            TrainingProgress(total_iterations * loop.steps_per_iteration, show_progress) as bar,
        ):
            bar.advance_to(loop.env_steps)
            start = time.perf_counter()
            start_steps = loop.env_steps
            while loop.iteration_count < total_iterations and not getattr(loop, "finished", False):
                metrics = loop.iteration(progress=loop.iteration_count / total_iterations)
                elapsed = time.perf_counter() - start - (evaluator.seconds if evaluator is not None else 0.0)
                metrics["steps_per_second"] = (loop.env_steps - start_steps) / elapsed
                metrics["wall_time"] = wall_time_before + elapsed  # training time: evaluations excluded
                if evaluator is not None:
                    metrics |= evaluator(loop.policy, loop.env_steps)
                last_return = metrics.get("episode_return", last_return)
                if logger is not None:
                    logger.log(loop.env_steps, metrics)
                bar.update(loop.env_steps, metrics["steps_per_second"], last_return)
                requested = collective.any(interrupt.requested)  # a Ctrl-C seen by any rank stops them all here
                done = (
                    loop.iteration_count >= total_iterations
                    or loop.iteration_count == stop_at_iteration
                    or getattr(loop, "finished", False)
                )
                if done or requested or loop.iteration_count % config.log.checkpoint_every == 0:
                    state = _checkpoint_state(loop, config, metrics["wall_time"], collective)
                    if writer:
                        save_checkpoint(run_dir / LAST_CHECKPOINT, state)
                if requested:
                    stopped = True
                if done or requested:
                    break
        complete = loop.iteration_count >= total_iterations or getattr(loop, "finished", False)
        if writer and not stopped and complete and config.log.eval_episodes > 0:
            # the training envs close first: a simulator with one instance per process (Isaac Lab) needs that
            env_open = False
            loop.env.close()
            evaluation = final_evaluation(config, loop.policy, run_dir)
            scores = {"return": evaluation["mean_return"], "return_std": evaluation["std_return"]}
            for key in ("success_rate", "mean_score"):
                if key in evaluation:
                    scores[key] = evaluation[key]
            logger.log_summary(loop.env_steps, scores)
    finally:
        if evaluator is not None:
            evaluator.close()
        if logger is not None:
            logger.close()
        if env_open:
            loop.env.close()
    return TrainResult(run_dir, loop.env_steps, loop.iteration_count, last_return, stopped, collective.world_size)


def final_evaluation(config: ExperimentConfig, policy, run_dir: Path) -> dict:
    """Deterministic evaluation on fresh envs (seed + 10000); written to ``eval.json`` in the run directory."""
    env = build_env(config, num_envs=config.log.eval_episodes, **evaluation_env_options(config))
    try:
        result = evaluate_policy(policy, env, config.log.eval_episodes, seed=config.seed + 10_000)
    finally:
        env.close()
    summary = {"mean_return": result.mean_return, "std_return": result.std_return, "returns": result.returns,
               "mean_length": result.mean_length}  # fmt: skip
    if result.success_rate is not None:
        summary["success_rate"] = result.success_rate
    if result.mean_score is not None:
        summary["mean_score"] = result.mean_score
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    return summary
