"""``robopt eval --pass-k K``: pass@k of a language run's last checkpoint on held-out prompts.

The estimator and the sampling live with the language tasks (``robopt.llm.evaluation``); this command loads the run,
builds its held-out env and scores it.
"""

from __future__ import annotations

from pathlib import Path

from robopt.build import build_env, evaluation_env_options
from robopt.evaluation import load_policy
from robopt.experiment import load_run_config
from robopt.llm.evaluation import check_pass_k, correct_counts, pass_at_k_estimate
from robopt.options import ConfigError

__all__ = ["check_pass_k", "pass_at_k"]


def pass_at_k(run_dir: Path, prompts: int, k: int, seed: int) -> float:
    """pass@k of the run's last checkpoint over ``prompts`` held-out prompts, k samples each (n = k, see module).

    The env is the run's with ``split=heldout`` (``robopt.runner.evaluation_env_options``) and ``group_size=k``.
    """
    if prompts < 1:
        raise ConfigError(f"--episodes (held-out prompts) must be at least 1, got {prompts}")
    config = load_run_config(run_dir)
    check_pass_k(config.env.id, k)
    config, policy = load_policy(run_dir, config)
    env = build_env(config, num_envs=prompts * k, **{**evaluation_env_options(config), "group_size": k})
    try:
        counts = correct_counts(policy, env, seed)
    finally:
        env.close()
    return sum(pass_at_k_estimate(k, int(c), k) for c in counts) / prompts
