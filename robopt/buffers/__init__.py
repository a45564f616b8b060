"""Rollout storage (on-policy); replay buffers come later."""

from robopt.buffers.rollout import RolloutBatch, RolloutStorage

__all__ = ["RolloutBatch", "RolloutStorage"]
