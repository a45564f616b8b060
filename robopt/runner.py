"""Builds an experiment from its config and runs it: run directory, checkpoints, progress, evaluation."""

from __future__ import annotations

import datetime
import pickle
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from robopt.algorithms import ALGORITHMS
from robopt.algorithms.onpolicy import OnPolicyLoop
from robopt.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from robopt.config import ConfigError, ExperimentConfig, build_dataclass, config_to_dict
from robopt.envs import make_env
from robopt.logging import RunLogger
from robopt.policies import POLICIES, ValueCritic

LAST_CHECKPOINT = "checkpoints/last.pt"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def available_device(name: str) -> torch.device:
    """``name`` as a torch device, or the CPU when it names CUDA on a machine without a GPU (eval, video, collect)."""
    device = torch.device(name)
    return torch.device("cpu") if device.type == "cuda" and not torch.cuda.is_available() else device


def build_env(config: ExperimentConfig, num_envs: int | None = None, **extra):
    """The VecEnv of a config; env construction errors become one-line ConfigErrors.

    A policy acting in chunks of H > 1 actions (``policy.horizon``, diffusion) gets the env wrapped in
    ``robopt.envs.chunking.ActionChunkEnv``: one decision steps the env H times.
    """
    try:
        env = make_env(
            config.env.id, num_envs or config.env.num_envs, backend=config.env.backend, device=config.device,
            **{**config.env.kwargs, **extra},
        )  # fmt: skip
    except (ValueError, TypeError) as error:
        raise ConfigError(f"env.id={config.env.id!r}: {error}") from None
    horizon = getattr(config.policy, "horizon", 1)
    if horizon == 1:
        return env
    from robopt.envs.chunking import ActionChunkEnv

    if hasattr(env, "compute_reward"):
        env.close()
        raise ConfigError(
            f"policy.horizon={horizon}: action chunks are not supported on goal tasks ({config.env.id}: hindsight "
            "relabelling assumes one action per transition); use policy.horizon=1"
        )
    return ActionChunkEnv(env, horizon)


def evaluation_env_options(config: ExperimentConfig) -> dict:
    """Env options for evaluating a run: a language task's held-out prompts, one greedy completion each."""
    return {"split": "heldout", "group_size": 1} if config.env.id == "robopt/Text" else {}


def build_policy(config: ExperimentConfig, env) -> torch.nn.Module:
    """The config's policy for ``env``; a policy that cannot be built from it (sizes, a model directory, LoRA
    targets) is a one-line ConfigError naming the policy kind."""
    try:
        return POLICIES[config.policy.name].build(config.policy, env).to(config.device)
    except ValueError as error:
        raise ConfigError(f"policy.name={config.policy.name}: {error}") from None


def build_critic(config: ExperimentConfig, env) -> torch.nn.Module:
    """V(obs) [B], or V(cat(obs, privileged_obs)) with ``critic.privileged`` (input D + P, its own normalizer)."""
    c = config.critic
    input_dim = env.obs_dim + (privileged_dim(config, env) if c.privileged else 0)
    critic = ValueCritic(
        input_dim, c.hidden, c.activation, normalize_obs=getattr(config.policy, "normalize_obs", True),
        orthogonal_init=getattr(config.policy, "orthogonal_init", True),
    )  # fmt: skip
    return critic.to(config.device)


def privileged_dim(config: ExperimentConfig, env) -> int:
    """P of ``env.privileged_obs()`` for ``critic.privileged``; an env without any is a one-line ConfigError."""
    if not hasattr(env, "privileged_obs"):
        raise ConfigError(
            f"critic.privileged=true needs a native env with privileged observations (env.id=mujoco/<Task>); "
            f"{config.env.id} on {type(env).__name__} has none"
        )
    if env.privileged_dim < 1:
        raise ConfigError(
            f"critic.privileged=true needs env.kwargs.randomization with at least one of body_mass, geom_friction, "
            f"dof_damping, actuator_gain (motor_strength), action_delay, push_force on; {config.env.id} has none"
        )
    return env.privileged_dim


def resolve_torch_threads(config: ExperimentConfig) -> tuple[int, str]:
    """(intra-op threads, why): ``torch_threads`` when set; otherwise 1 on CPU, torch's default on a GPU.

    On CPU, robopt's networks are small (64-256 wide, minibatches of 64-4096): a second intra-op thread saves
    little and, when another process shares the cores, spins against it (TRPO on Pendulum measured 22 s alone
    and 5 min beside two single-threaded jobs with torch's default threads). The simulator has its own threads.
    """
    if config.torch_threads > 0:
        return config.torch_threads, "torch_threads"
    if torch.device(config.device).type == "cpu":
        return 1, "auto: small networks on CPU"
    return torch.get_num_threads(), "auto: torch default beside a GPU"


def build_loop(config: ExperimentConfig, initialize: bool = False):
    """Seeded env, policy, algorithm and the loop of the algorithm's kind (on-policy or pretrain).

    ``initialize`` loads ``config.init_from``'s policy before the algorithm is built (a new run, not a resume).
    """
    seed_everything(config.seed)
    torch.set_num_threads(resolve_torch_threads(config)[0])
    if config.fleet.num_robots > 0:  # robots on Ray feed one off-policy learner (robopt.fleet)
        from robopt.fleet.loop import build_fleet_loop

        return build_fleet_loop(config, initialize)
    env = build_env(config)
    try:
        policy = build_policy(config, env)
        if initialize and config.critic_warmup > 0 and not config.init_from:
            raise ConfigError(
                f"critic_warmup={config.critic_warmup} needs init_from=RUN_DIR (a pretrained policy to keep frozen)"
            )
        algo_name = config_to_dict(config)["algo"]["name"]
        spec = ALGORITHMS[algo_name]
        ft_steps, steps = getattr(config.policy, "ft_steps", 0), getattr(config.policy, "denoising_steps", 0)
        if initialize and not config.init_from and ft_steps < steps and spec.kind == "on_policy":
            raise ConfigError(
                f"policy.ft_steps={ft_steps} < policy.denoising_steps={steps}: RL trains only the last {ft_steps} "
                "denoising steps and freezes the others, so start from a pretrained policy (init_from=RUN_DIR) or "
                "set policy.ft_steps=policy.denoising_steps"
            )
        if initialize and config.init_from:
            initialize_policy(policy, config)
            if hasattr(policy, "reset_reference"):  # a language policy's KL reference is where RL starts
                policy.reset_reference()
        if spec.kind in ("pretrain", "off_policy"):
            if config.critic.privileged:
                on_policy = ", ".join(sorted(name for name, entry in ALGORITHMS.items() if entry.kind == "on_policy"))
                raise ConfigError(
                    f"critic.privileged=true is for the value critic of the on-policy algorithms ({on_policy}), "
                    f"not algo.name={algo_name}"
                )
            return spec.build(config.algo, env, policy, seed=config.seed, env_id=config.env.id)
        critic = build_critic(config, env)
        algorithm = spec.build(config.algo, policy, critic)
        frozen_statistics = bool(config.init_from) and config.init_normalizer == "frozen"
        return OnPolicyLoop(
            env, policy, critic, algorithm, config.rollout, seed=config.seed, critic_warmup=config.critic_warmup,
            privileged=config.critic.privileged, update_policy_normalizer=not frozen_statistics,
        )  # fmt: skip
    except BaseException:
        env.close()
        raise


def same_task(first: str, second: str) -> bool:
    """Whether two env ids name one task (a native ``mujoco/<Task>`` id and its Gymnasium twin do)."""
    from robopt.envs.registry import gymnasium_twin

    def canonical(env_id: str) -> str:
        return gymnasium_twin(env_id) if env_id.startswith("mujoco/") else env_id

    try:
        return canonical(first) == canonical(second)
    except ValueError:
        return first == second


def initialize_policy(policy: torch.nn.Module, config: ExperimentConfig) -> None:
    """Load ``config.init_from``'s policy (weights and normalizer) into ``policy``; mismatches are one-line errors."""
    run_dir = Path(config.init_from)
    source = load_run_config(run_dir) if (run_dir / "config.yaml").is_file() else None
    if source is None or not (run_dir / LAST_CHECKPOINT).is_file():
        raise ConfigError(f"init_from={str(run_dir)!r} is not a run directory with a checkpoint ({LAST_CHECKPOINT})")
    if not same_task(source.env.id, config.env.id):
        raise ConfigError(
            f"init_from={str(run_dir)!r} was trained on {source.env.id}, this config runs {config.env.id}"
        )
    if source.policy.name != config.policy.name:
        raise ConfigError(
            f"init_from={str(run_dir)!r} holds a {source.policy.name} policy, this config a {config.policy.name} policy"
        )
    try:
        state = load_checkpoint(run_dir / LAST_CHECKPOINT)["loop"]["policy"]
        policy.load_state_dict(state)
    except (RuntimeError, KeyError, EOFError, OSError, pickle.UnpicklingError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"init_from={str(run_dir)!r}: its policy does not fit this config's (policy sizes differ?): {first}"
        ) from None


def new_run_dir(config: ExperimentConfig) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = Path(config.log.run_root) / config.name / stamp
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=False)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
    return run_dir


def load_run_config(run_dir: Path) -> ExperimentConfig:
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    return build_dataclass(ExperimentConfig, yaml.safe_load(path.read_text()))


@dataclass
class TrainResult:
    run_dir: Path
    env_steps: int
    iterations: int
    last_return: float | None
    stopped_by_user: bool = False


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


def _checkpoint_state(loop, config: ExperimentConfig, wall_time: float) -> dict:
    """What ``--resume`` needs; ``wall_time`` is the run's training time so far, so a resumed run's clock continues."""
    return {"loop": loop.state_dict(), "rng": rng_state(), "config": config_to_dict(config), "wall_time": wall_time}


def _describe_start(config: ExperimentConfig, loop, run_dir: Path, resumed: bool) -> str:
    threads, why = resolve_torch_threads(config)
    env = loop.env
    backend = type(env).__name__ if not hasattr(env, "physics") else type(env.physics).__name__
    verb = "resuming" if resumed else "training"
    return (
        f"robopt: {verb} {config.name} in {run_dir} | {config.env.id} x {env.num_envs} ({backend}) | "
        f"torch threads: {threads} ({why}; override with torch_threads=N)"
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
    loop = build_loop(config, initialize=resume_dir is None)
    wall_time_before = 0.0  # training wall time of the run before this process (resumed runs)
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        try:
            checkpoint = load_checkpoint(run_dir / LAST_CHECKPOINT)
            loop.load_state_dict(checkpoint["loop"])
            set_rng_state(checkpoint["rng"])
        except (RuntimeError, KeyError, ValueError, EOFError, OSError, pickle.UnpicklingError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"cannot resume {str(run_dir)!r}: its checkpoint does not load ({first})") from None
        wall_time_before = float(checkpoint.get("wall_time", 0.0))
    else:
        run_dir = new_run_dir(config)
    # A resumed run drops what was logged after its checkpoint, so its files read like one uninterrupted run.
    logger = RunLogger(run_dir, resume_at_step=loop.env_steps if resume_dir is not None else None)
    show_progress = config.log.progress if progress is None else progress
    print(_describe_start(config, loop, run_dir, resume_dir is not None), flush=True)
    # A loop that knows its own length (behaviour cloning: epochs) says so; on-policy loops run total_steps.
    total_iterations = getattr(loop, "total_iterations", None) or max(1, config.total_steps // loop.steps_per_iteration)
    last_return, stopped = None, False
    from robopt.progress import TrainingProgress

    try:
        with (
            _InterruptFlag() as interrupt,
            TrainingProgress(total_iterations * loop.steps_per_iteration, show_progress) as bar,
        ):
            bar.advance_to(loop.env_steps)
            start = time.perf_counter()
            start_steps = loop.env_steps
            while loop.iteration_count < total_iterations and not getattr(loop, "finished", False):
                metrics = loop.iteration(progress=loop.iteration_count / total_iterations)
                elapsed = time.perf_counter() - start
                metrics["steps_per_second"] = (loop.env_steps - start_steps) / elapsed
                metrics["wall_time"] = wall_time_before + elapsed
                last_return = metrics.get("episode_return", last_return)
                logger.log(loop.env_steps, metrics)
                bar.update(loop.env_steps, metrics["steps_per_second"], last_return)
                done = (
                    loop.iteration_count >= total_iterations
                    or loop.iteration_count == stop_at_iteration
                    or getattr(loop, "finished", False)
                )
                if done or interrupt.requested or loop.iteration_count % config.log.checkpoint_every == 0:
                    save_checkpoint(run_dir / LAST_CHECKPOINT, _checkpoint_state(loop, config, metrics["wall_time"]))
                if interrupt.requested:
                    stopped = True
                if done or interrupt.requested:
                    break
        complete = loop.iteration_count >= total_iterations or getattr(loop, "finished", False)
        if not stopped and complete and config.log.eval_episodes > 0:
            evaluation = final_evaluation(config, loop.policy, run_dir)
            scores = {"return": evaluation["mean_return"], "return_std": evaluation["std_return"]}
            if "success_rate" in evaluation:
                scores["success_rate"] = evaluation["success_rate"]
            logger.log_summary(loop.env_steps, scores)
    finally:
        logger.close()
        loop.env.close()
    return TrainResult(run_dir, loop.env_steps, loop.iteration_count, last_return, stopped)


def final_evaluation(config: ExperimentConfig, policy, run_dir: Path) -> dict:
    """Deterministic evaluation on fresh envs (seed + 10000); written to ``eval.json`` in the run directory."""
    import json

    from robopt.evaluation import evaluate_policy

    env = build_env(config, num_envs=config.log.eval_episodes, **evaluation_env_options(config))
    try:
        result = evaluate_policy(policy, env, config.log.eval_episodes, seed=config.seed + 10_000)
    finally:
        env.close()
    summary = {"mean_return": result.mean_return, "std_return": result.std_return, "returns": result.returns,
               "mean_length": result.mean_length}  # fmt: skip
    if result.success_rate is not None:
        summary["success_rate"] = result.success_rate
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    return summary
