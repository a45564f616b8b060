"""What a VecEnv wrapper shares: the inner env's size, device and id, and the attributes it passes through.

``WrappedEnv`` is the one base of the wrappers in ``robopt.envs`` (action chunks, observation selection, history
windows); each subclass defines ``reset`` and ``step`` and says which inner attributes it passes through.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

import torch


class WrappedEnv(ABC):
    """A VecEnv around ``self.inner``: ``num_envs``, ``device`` and ``env_id`` are the inner env's."""

    inner: object

    def pass_through(self, names: Iterable[str]) -> None:
        """Copy the inner env's attributes ``names`` onto this wrapper: instance attributes only, absent when the inner
        env lacks them (so ``hasattr`` tells a wrapper that has them from one that does not)."""
        for name in names:
            if hasattr(self.inner, name):
                setattr(self, name, getattr(self.inner, name))

    @property
    def num_envs(self) -> int:
        return self.inner.num_envs

    @property
    def device(self) -> torch.device:
        return self.inner.device

    @property
    def env_id(self) -> str:
        return self.inner.env_id

    def close(self) -> None:
        """Close the inner env."""
        self.inner.close()

    @abstractmethod
    def reset(self, seed: int | None = None) -> torch.Tensor: ...

    @abstractmethod
    def step(self, action: torch.Tensor): ...
