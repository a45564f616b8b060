"""Offline data for the off-policy loop: a Minari dataset written into the replay before the first env step.

Shapes: M dataset transitions, N envs, T ring rows per env, L rows written, D obs dim, A action dim.

``algo.loop.dataset`` names the dataset (a Minari id under ``algo.loop.dataset_root``, or a directory). Its M
transitions are laid row by row across the replay's N env columns (transition i at row i // N, column i % N);
when N does not divide M, the last row is completed with the dataset's first transitions (fewer than N repeats,
said in the run's start line). Online transitions are appended after them in the same ring, so updates sample
offline and online data uniformly (as FQL and IQL fine-tune; a ring smaller than dataset + online steps
overwrites the oldest offline rows first). Only 1-step targets are defined on such a layout: n-step returns and
hindsight relabelling read an episode's later steps from its env column and are refused with a dataset.

The observation normalizer shared by actor and critics is fitted on the dataset's observations once and then
kept fixed (the loop does not feed it online observations), so a policy cloned on the same data sees the same
inputs while it is fine-tuned.
"""

from __future__ import annotations

import torch

from robopt.options import ConfigError


def load_offline_data(schedule, replay, env, env_id: str, policy) -> int:
    """Write ``schedule.dataset`` into ``replay`` and fit ``policy``'s normalizer on it; returns the rows repeated."""
    from robopt.data.demonstrations import check_compatible, load_demonstrations

    demos = load_demonstrations(schedule.dataset, root=schedule.dataset_root or None)
    check_compatible(demos, env_id or env.env_id, env.obs_dim, env.action_dim)
    storage = replay.storage
    size, num_envs = demos.num_transitions, storage.num_envs
    rows = -(-size // num_envs)
    if rows * num_envs > storage.capacity:
        raise ConfigError(
            f"algo.loop.dataset {schedule.dataset!r} holds {size} transitions, more than algo.loop.buffer_size "
            f"{schedule.buffer_size}; raise algo.loop.buffer_size to at least {rows * num_envs}"
        )
    if size < schedule.batch_size:
        raise ConfigError(
            f"algo.loop.dataset {schedule.dataset!r} holds {size} transitions, fewer than algo.loop.batch_size "
            f"{schedule.batch_size}; lower the batch size or record more episodes"
        )
    order = torch.arange(rows * num_envs) % size  # the last row wraps to the first transitions
    device = storage.device
    fields = (demos.obs, demos.action, demos.reward, demos.next_obs, demos.terminated, demos.truncated)
    laid = [field[order].reshape(rows, num_envs, *field.shape[1:]).to(device) for field in fields]
    for start in range(0, rows, storage.capacity_per_env):
        replay.extend_steps(*(field[start : start + storage.capacity_per_env] for field in laid))
    if policy.normalizer.enabled:
        policy.normalizer.update(demos.obs.to(device))
    return rows * num_envs - size
