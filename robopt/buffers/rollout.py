"""Device-resident rollout storage for the on-policy loop.

Shapes: T steps per env, N envs, B = T * N flattened batch, D obs dim, A action dim.
Policy info (whatever ``policy.act`` returned) is stored key by key as [T, N, ...].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RolloutBatch:
    """A flattened rollout (or a minibatch of one): every tensor has leading dim B."""

    obs: torch.Tensor  # [B, D]
    action: torch.Tensor  # [B, A]
    policy_info: dict[str, torch.Tensor]  # each [B, ...]
    value: torch.Tensor  # [B] V(s) at collection time
    advantage: torch.Tensor  # [B]
    return_target: torch.Tensor  # [B]
    terminated: torch.Tensor  # [B] bool
    truncated: torch.Tensor  # [B] bool
    num_envs: int = 0  # N when rows are the time-major [T * N] rollout; 0 for shuffled minibatches

    def __len__(self) -> int:
        return self.obs.shape[0]

    def index(self, indices: torch.Tensor) -> RolloutBatch:
        """The rows ``indices`` [b] as a new batch."""
        return RolloutBatch(
            obs=self.obs[indices],
            action=self.action[indices],
            policy_info={k: v[indices] for k, v in self.policy_info.items()},
            value=self.value[indices],
            advantage=self.advantage[indices],
            return_target=self.return_target[indices],
            terminated=self.terminated[indices],
            truncated=self.truncated[indices],
        )

    def split(self, size: int) -> list[RolloutBatch]:
        """Consecutive blocks of ``size`` rows (the last one may be smaller) as views.

        One ``torch.split`` per field rather than one slice per field and block (about 4 of 16 us less per
        block on CPU, on the per-minibatch path).
        """
        names = ("obs", "action", "value", "advantage", "return_target", "terminated", "truncated")
        columns = [torch.split(getattr(self, name), size) for name in names]  # each: blocks of [b, ...]
        info_columns = {key: torch.split(tensor, size) for key, tensor in self.policy_info.items()}
        return [
            RolloutBatch(
                **{name: column[block] for name, column in zip(names, columns)},
                policy_info={key: column[block] for key, column in info_columns.items()},
            )
            for block in range(len(columns[0]))
        ]

    def minibatches(self, minibatch_size: int, generator: torch.Generator | None = None):
        """Yield shuffled minibatches covering the batch once (the last one may be smaller).

        The batch is permuted once (one gather per field), then cut into contiguous views.
        """
        shuffled = self.index(torch.randperm(len(self), device=self.obs.device, generator=generator))
        yield from shuffled.split(minibatch_size)


class RolloutStorage:
    """Preallocated [T, N, ...] tensors on the env device; filled step by step, then flattened."""

    def __init__(self, num_steps: int, num_envs: int, obs_dim: int, action_dim: int, device: torch.device) -> None:
        self.num_steps, self.num_envs, self.device = num_steps, num_envs, device
        shape = (num_steps, num_envs)
        self.obs = torch.zeros(*shape, obs_dim, device=device)  # [T, N, D]
        self.final_obs = torch.zeros(*shape, obs_dim, device=device)  # [T, N, D]
        self.action = torch.zeros(*shape, action_dim, device=device)  # [T, N, A]
        self.reward = torch.zeros(shape, device=device)  # [T, N]
        self.value = torch.zeros(shape, device=device)  # [T, N], filled after collection by one critic pass
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=device)  # [T, N]
        self.truncated = torch.zeros(shape, dtype=torch.bool, device=device)  # [T, N]
        self.policy_info: dict[str, torch.Tensor] = {}
        self._staged: dict[str, list[torch.Tensor]] = {}
        self._staged_info: dict[str, list[torch.Tensor]] = {}

    def insert(
        self,
        t: int,
        obs: torch.Tensor,
        action: torch.Tensor,
        policy_info: dict[str, torch.Tensor],
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_obs: torch.Tensor,
    ) -> None:
        """Stage step t (every tensor has leading dim N); ``commit`` writes the rollout into storage.

        Steps are kept by reference and stacked once per field at the end: one copy per field instead of one
        per step. The VecEnv contract guarantees a step's returned tensors are not modified by later steps.
        """
        if t == 0:
            self._staged = {name: [] for name in ("obs", "action", "reward", "terminated", "truncated", "final_obs")}
            self._staged_info = {key: [] for key in policy_info}
        for name, tensor in (("obs", obs), ("action", action), ("reward", reward), ("terminated", terminated),
                             ("truncated", truncated), ("final_obs", final_obs)):  # fmt: skip
            self._staged[name].append(tensor)
        for key, tensor in policy_info.items():
            self._staged_info[key].append(tensor)

    def commit(self) -> None:
        """Stack the staged steps into the [T, N, ...] tensors (V(s_t) is filled afterwards by the loop)."""
        if len(self._staged["obs"]) != self.num_steps:
            raise ValueError(f"rollout has {len(self._staged['obs'])} staged steps, expected {self.num_steps}")
        for name, tensors in self._staged.items():
            torch.stack(tensors, out=getattr(self, name))
        for key, tensors in self._staged_info.items():
            if key not in self.policy_info:
                self.policy_info[key] = torch.empty(
                    self.num_steps, *tensors[0].shape, dtype=tensors[0].dtype, device=self.device
                )
            torch.stack(tensors, out=self.policy_info[key])
        self._staged, self._staged_info = {}, {}

    def flatten(self, advantage: torch.Tensor, return_target: torch.Tensor) -> RolloutBatch:
        """[T, N, ...] -> [B, ...] batch with the advantages and return targets [T, N]."""
        batch_size = self.num_steps * self.num_envs
        return RolloutBatch(
            obs=self.obs.reshape(batch_size, -1),
            action=self.action.reshape(batch_size, -1),
            policy_info={k: v.reshape(batch_size, *v.shape[2:]) for k, v in self.policy_info.items()},
            value=self.value.reshape(batch_size),
            advantage=advantage.reshape(batch_size),
            return_target=return_target.reshape(batch_size),
            terminated=self.terminated.reshape(batch_size),
            truncated=self.truncated.reshape(batch_size),
            num_envs=self.num_envs,
        )
