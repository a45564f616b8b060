"""Data-parallel training on torch.distributed: one small collective object handed to the loops.

A run started under ``torchrun`` (or ``robopt train --nproc K``) is K processes; each owns its own batch of
``env.num_envs / K`` envs (seeded by rank) and collects its own rollout, and the update averages gradients at every
minibatch step so that every rank keeps the same weights. What must be global is made global at fixed points by
``Collective``: the gradient (one ``all_reduce`` of the updater's flat buffer), normalizer moments, advantage
statistics, the approximate KL that adaptive controls and early stopping read, episode statistics and step
counts. ``LOCAL`` is the same object for one process, where every call is the identity. Rank 0 alone writes the
run directory. The loops call the collective; they know nothing else about ranks (DESIGN.md section 8).
"""

from robopt.distributed.collective import (
    LOCAL,
    Collective,
    RankLost,
    TorchCollective,
    join_from_environment,
    rank_config,
)

__all__ = ["LOCAL", "Collective", "RankLost", "TorchCollective", "join_from_environment", "rank_config"]
