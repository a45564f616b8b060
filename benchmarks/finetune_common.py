"""Shared steps of the fine-tuning benchmarks: behaviour cloning, then RL fine-tuning from it, per policy kind.

``finetune_hopper.py`` and ``finetune_multimodal.py`` run, for each seed and each of

- ``gaussian``: BC of a Gaussian policy, fine-tuned by PPO;
- ``flow``: BC of a flow policy, fine-tuned by FPO;
- ``diffusion``: BC of a diffusion policy, fine-tuned by DPPO;

one BC run on the same dataset and one fine-tuning run (``init_from`` the BC run) with the same env-step budget,
and evaluate both on fresh episodes (one per env row), deterministic and stochastic. Runs go one at a time.
"""

from __future__ import annotations

import contextlib
import io
import math
import statistics
import time
from pathlib import Path

import torch

from robopt.experiment import load_config
from robopt.runner import train

MODES = ("deterministic", "stochastic")
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@torch.no_grad()
def run_episodes(policy, env, seed: int, deterministic: bool) -> tuple[list[float], list[int]]:
    """One episode per env row: returns [N] and the goal reached at the end per row (-1 if none or no goals)."""
    obs = env.reset(seed=seed)
    torch.manual_seed(seed)  # the stochastic policy's draws
    returns = torch.full((env.num_envs,), float("nan"))
    reached = torch.full((env.num_envs,), -1, dtype=torch.int64)
    finished = torch.zeros(env.num_envs, dtype=torch.bool)
    while not bool(finished.all()):
        action, _ = policy.act(obs, deterministic=deterministic)
        action = torch.maximum(torch.minimum(action, env.action_high), env.action_low)
        obs, _, terminated, truncated, info = env.step(action)
        first = (terminated | truncated).cpu() & ~finished
        returns[first] = info["episode_return"].cpu().float()[first]
        if "reached_goal" in info:
            reached[first] = info["reached_goal"].cpu()[first]
        finished |= first
    return returns.tolist(), reached.tolist()


def evaluate(run_dir: Path, episodes: int, seed: int, figures, config=None) -> dict:
    """{mode: figures(returns, reached, env)} of the run's last checkpoint, for both modes; the policy is built from
    ``config`` if given (the run's config with an evaluation-time knob changed, such as ``policy.guidance_scale``)."""
    from robopt.build import build_env
    from robopt.evaluation import load_policy

    config, policy = load_policy(run_dir, config)
    env = build_env(config, num_envs=episodes)
    try:
        return {mode: figures(*run_episodes(policy, env, seed, mode == "deterministic"), env) for mode in MODES}
    finally:
        env.close()


def return_figures(returns: list[float], reached: list[int], env) -> dict:
    return {"return": statistics.mean(returns), "return_std": statistics.pstdev(returns)}


def quiet_train(
    config_path: Path, overrides: list[str], resume_dir: Path | None = None, stop_at_iteration: int | None = None
) -> tuple[Path, float]:
    """Train a config quietly (or continue ``resume_dir``, up to ``stop_at_iteration``): (run dir, wall seconds)."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        config = load_config(str(config_path), overrides)
        result = train(config, resume_dir=resume_dir, progress=False, stop_at_iteration=stop_at_iteration)
    return result.run_dir, time.perf_counter() - start


def iteration_steps(config_path: Path, overrides: list[str]) -> int:
    """Env steps of one iteration of the config: on-policy, rollout steps x envs x action-chunk horizon;
    off-policy, ``algo.loop.iteration_steps`` rounded up to whole phases of train_freq x envs x horizon."""
    config = load_config(str(config_path), overrides)
    horizon = max(1, getattr(config.policy, "horizon", 1) or 1)
    loop = getattr(config.algo, "loop", None)
    if loop is None:
        return config.rollout.num_steps * config.env.num_envs * horizon
    phase = loop.train_freq * config.env.num_envs * horizon
    return math.ceil(loop.iteration_steps / phase) * phase


def run_kind(
    kind: str,
    configs: tuple[Path, Path],
    seed: int,
    common: list[str],
    bc_extra: list[str],
    ft_extra: list[str],
    budget: int,
    episodes: int,
    figures,
    at: list[int] = (),
) -> dict:
    """BC then fine-tuning for one policy kind and seed: figures of both, and their wall seconds.

    ``at``: env-step counts (below ``budget``) at which the fine-tuning run also stops, is evaluated and continues
    (``record["stages"]``); a stage ends at the first iteration boundary at or past its count."""
    bc_config, ft_config = configs
    eval_seed = 10_000 + seed
    bc_dir, bc_seconds = quiet_train(bc_config, [*common, *bc_extra, f"seed={seed}"])
    bc = evaluate(bc_dir, episodes, eval_seed, figures)
    ft_overrides = [*common, *ft_extra, f"seed={seed}", f"total_steps={budget}", f"init_from={bc_dir}"]
    per_iteration = iteration_steps(ft_config, ft_overrides)
    stages, ft_dir, ft_seconds = {}, None, 0.0
    for steps in sorted(s for s in at if s < budget):
        ft_dir, seconds = quiet_train(ft_config, ft_overrides, ft_dir, math.ceil(steps / per_iteration))
        stages[str(steps)] = {"env_steps": math.ceil(steps / per_iteration) * per_iteration, "seconds": seconds,
                              **evaluate(ft_dir, episodes, eval_seed, figures)}  # fmt: skip
        ft_seconds += seconds
    ft_dir, seconds = quiet_train(ft_config, ft_overrides, ft_dir)
    ft_seconds += seconds
    ft = evaluate(ft_dir, episodes, eval_seed, figures)
    return {
        "kind": kind,
        "seed": seed,
        "bc": bc,
        "ft": ft,
        "stages": stages,
        "bc_seconds": bc_seconds,
        "ft_seconds": ft_seconds,
    }


def mean_std(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} +- {std:.2f}"


def print_table(records: list[dict], keys: list[str]) -> None:
    """One row per (kind, stage, mode): mean +- sample std over seeds of each figure in ``keys``."""
    kinds = list(dict.fromkeys(record["kind"] for record in records))
    header = f"{'policy':10} {'stage':5} {'mode':13} " + " ".join(f"{key:>20}" for key in keys)
    print("\n" + header)
    for kind in kinds:
        rows = [record for record in records if record["kind"] == kind]
        for stage in ("bc", "ft"):
            for mode in MODES:
                cells = [mean_std([float(row[stage][mode][key]) for row in rows]) for key in keys]
                print(f"{kind:10} {stage:5} {mode:13} " + " ".join(f"{cell:>20}" for cell in cells))
        seconds = mean_std([row["ft_seconds"] for row in rows])
        print(f"{kind:10} fine-tuning wall seconds {seconds} | BC {mean_std([row['bc_seconds'] for row in rows])}")


def smoke_hopper_dataset(root: Path) -> Path:
    """``--smoke``'s stand-in for the medium Hopper dataset: two episodes of a 512-step PPO run as
    ``hopper/medium-v0`` under ``root/datasets`` (returned), as ``robopt collect`` records one."""
    from robopt.commands.collect import collect

    overrides = [f"log.run_root={root}/runs", "log.progress=false", "log.eval_episodes=0", "total_steps=512"]
    source, _ = quiet_train(CONFIGS / "ppo_hopper_native.yaml", overrides)
    collect("hopper/medium", 2, run_dir=source, root=root / "datasets", force=True, progress=False)
    return root / "datasets"
