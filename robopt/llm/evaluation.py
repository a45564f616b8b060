"""pass@k of a language run on held-out prompts: k sampled completions per prompt, scored by exact match.

Shapes: M prompts, k samples per prompt, N = M x k env rows (consecutive groups of k share a prompt), P prompt width,
T completion length.

pass@k is the probability that at least one of k completions is correct. With n >= k samples of which c are
correct, the unbiased estimator of Chen et al. 2021 (Codex, eq. 1) is ``1 - C(n - c, k) / C(n, k)``, averaged over
prompts. ``robopt eval --pass-k K`` draws n = k samples per prompt, where the estimator is 1 when any of the k is
correct and 0 otherwise: pass@k is the fraction of prompts with at least one exact-match completion. The command
that loads a run and scores it is ``robopt.commands.pass_at_k``.

The prompts are the greedy evaluation's: ``robopt/Text`` draws M held-out prompts from the evaluation seed whatever
the group size, so pass@k and the greedy accuracy of ``robopt eval`` score the same M prompts.
"""

from __future__ import annotations

import math

import torch

from robopt.options import ConfigError

TEXT_ENV = "robopt/Text"
MAX_PASS_K = 64
CHUNK_ROWS = 1024  # rows per policy.act call: generation memory stays bounded for M x k up to 400 x 64


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, eq. 1).

    Computed as 1 - prod_{i = n - c + 1}^{n} (1 - k / i), the paper's numerically stable form; 1 when n - c < k
    (every draw of k samples holds a correct one). With n = k it is 1 if c > 0 else 0.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@torch.no_grad()
def correct_counts(policy, env, seed: int, chunk_rows: int = CHUNK_ROWS) -> torch.Tensor:
    """Exact-match completions per prompt, ``[M]`` int64 on the CPU, from one sampled completion per env row.

    ``env`` is a ``robopt/Text`` env (``num_envs`` N = M x ``group_size``) reset to ``seed``; ``policy.act(obs,
    deterministic=False)`` samples each row's completion (``chunk_rows`` rows per call, in row order), and one env
    step scores all N rows. Sampling draws from torch's global generator seeded with ``seed`` inside a fork, so the
    caller's random state is left as it was.
    """
    group = env.group_size
    obs = env.reset(seed=seed)  # [N, P]
    devices = [obs.device] if obs.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        actions = [policy.act(rows, deterministic=False)[0] for rows in obs.split(chunk_rows)]  # [<= chunk, T] each
    action = torch.cat(actions).to(env.device)  # [N, T]
    _, _, _, _, info = env.step(action)
    correct = info["accuracy"].reshape(env.num_envs // group, group) > 0.5  # [M, k]: rows i*k .. i*k + k - 1
    return correct.sum(1).cpu()


def check_pass_k(env_id: str, k: int) -> None:
    """A one-line ConfigError unless ``k`` is in 1..MAX_PASS_K and the run is a language run (``robopt/Text``)."""
    if not 1 <= k <= MAX_PASS_K:
        raise ConfigError(f"--pass-k must be in 1..{MAX_PASS_K} (0: off), got {k}")
    if env_id != TEXT_ENV:
        raise ConfigError(f"--pass-k needs a language run (env.id={TEXT_ENV}); this run's env.id is {env_id}")
