"""Rollout storage (on-policy) and replay (off-policy): ReplayBuffer(storage, sampler, transforms)."""

from robopt.buffers.replay import ReplayBuffer, ReplayStorage, ReplayTransform
from robopt.buffers.rollout import RolloutBatch, RolloutStorage
from robopt.buffers.samplers import PrioritizedSampler, Sampler, UniformSampler
from robopt.buffers.transforms import Hindsight, NStep

__all__ = [
    "Hindsight",
    "NStep",
    "PrioritizedSampler",
    "ReplayBuffer",
    "ReplayStorage",
    "ReplayTransform",
    "RolloutBatch",
    "RolloutStorage",
    "Sampler",
    "UniformSampler",
]
