"""The on-policy loop's variants for language tasks: group-relative advantages (GRPO, RLOO, Dr. GRPO), DAPO's dynamic
sampling with refill, and the task counters (exact-match accuracy, verifier failures).

Shapes: T steps, N envs (rows), G = ``group_size`` rows per prompt, B = T x N. The generic loop
(``robopt.algorithms.onpolicy.OnPolicyLoop``) calls its hooks at fixed points: ``begin_iteration()``, ``observe(info)``
after every env step, ``advantages(loop, critic_input)`` in place of GAE (None: GAE), ``complete(loop, batch,
returns, lengths)`` once the rollout's batch is made, and ``metrics()`` when the iteration's row is logged.
``hooks_for(rollout, env)`` picks the variant a rollout config asks for.
"""

from __future__ import annotations

import dataclasses

import torch

from robopt.buffers.rollout import RolloutBatch
from robopt.core.advantages import equal_reward_groups, group_advantage
from robopt.options import ConfigError

__all__ = ["GroupSampling", "TaskCounters", "hooks_for"]


def hooks_for(rollout, env) -> TaskCounters:
    """The loop's hooks for ``rollout`` (a ``RolloutConfig``) on ``env``; group options on GAE are one-line errors."""
    if rollout.advantage == "group":
        return GroupSampling(rollout, env)
    if rollout.leave_one_out or rollout.dynamic_sampling or not rollout.group_std:
        raise ConfigError(
            "rollout.group_std, leave_one_out and dynamic_sampling are options of rollout.advantage=group; "
            "with gae they would be ignored"
        )
    return TaskCounters()


class TaskCounters:
    """A language task's per-step counters: exact-match accuracy (``info['accuracy']``) and rows whose reward
    functions failed (``info['verifier_failed']``, scored 0), reported once per iteration; nothing else."""

    def __init__(self) -> None:
        self.accuracy: list[torch.Tensor] = []
        self.failures: list[torch.Tensor] = []

    def begin_iteration(self) -> None:
        self.accuracy, self.failures = [], []

    def observe(self, env_info: dict) -> None:
        if "accuracy" in env_info:  # language tasks: exact-match accuracy of the completions
            self.accuracy.append(env_info["accuracy"].mean())
        if "verifier_failed" in env_info:  # language tasks: rows whose reward functions failed (scored 0)
            self.failures.append(env_info["verifier_failed"].sum())

    def advantages(self, loop, critic_input: torch.Tensor) -> RolloutBatch | None:
        return None

    def complete(self, loop, batch: RolloutBatch, returns: list, lengths: list) -> RolloutBatch:
        return batch

    def metrics(self) -> dict[str, float]:
        values = {}
        if self.accuracy:
            values["accuracy"] = float(torch.stack(self.accuracy).mean())
        if self.failures:
            values["verifier_failures"] = float(torch.stack(self.failures).sum())
        return values


class GroupSampling(TaskCounters):
    """Group-relative advantages over rows sharing a prompt, with DAPO's dynamic sampling and refill."""

    def __init__(self, rollout, env) -> None:
        super().__init__()
        if not hasattr(env, "group_size"):
            raise ConfigError(
                f"rollout.advantage=group needs an env whose rows come in groups sharing a prompt (robopt/Text), "
                f"not {env.env_id}; use rollout.advantage=gae"
            )
        if rollout.leave_one_out and env.group_size < 2:
            raise ConfigError(f"rollout.leave_one_out needs env.kwargs.group_size >= 2, got {env.group_size}")
        self.rollout, self.group = rollout, env.group_size
        self.dropped_fraction, self.dropped_rows, self.generated_rows, self.refill_count = 0.0, 0, 0, 0

    def begin_iteration(self) -> None:
        super().begin_iteration()
        self.dropped_rows, self.generated_rows, self.refill_count = 0, 0, 0

    def advantages(self, loop, critic_input: torch.Tensor) -> RolloutBatch:
        """Group-relative advantages (GRPO; RLOO with ``leave_one_out``) over rows sharing a prompt.

        Rows of each step come in consecutive groups of the env's ``group_size``; the return target is the reward
        (single-step episodes). With ``dynamic_sampling`` the rows of groups whose rewards are all equal (zero
        advantage, no signal) leave the batch (DAPO's filter; ``complete`` refills it); the share dropped is
        logged. ``normalize_advantage`` then normalizes the kept rows over the batch (after refilling).
        """
        storage, rollout, group = loop.storage, self.rollout, self.group
        self.generated_rows += storage.num_steps * loop.env.num_envs
        reward = storage.reward.reshape(-1)  # [T * N], time-major: each step's N rows in groups of G
        advantage = group_advantage(reward, group, rollout.group_std, rollout.leave_one_out)
        batch = storage.flatten(advantage.reshape(storage.reward.shape), storage.reward, critic_input)
        if rollout.dynamic_sampling:
            keep = ~equal_reward_groups(reward, group).repeat_interleave(group)  # [T * N]
            self.dropped_rows += int((~keep).sum())
            batch = batch.index(keep.nonzero()[:, 0])
        return batch

    def complete(self, loop, batch: RolloutBatch, returns: list, lengths: list) -> RolloutBatch:
        """Refill (``refill_rounds`` > 0), then normalize the kept rows' advantages over the batch."""
        if self.rollout.refill_rounds > 0:
            batch = self._refill(loop, batch, returns, lengths)
        self.dropped_fraction = self.dropped_rows / self.generated_rows
        if self.rollout.normalize_advantage and len(batch) > 1:
            batch = dataclasses.replace(batch, advantage=loop.normalize_advantage(batch.advantage))
        return batch

    def _refill(self, loop, batch: RolloutBatch, returns: list, lengths: list) -> RolloutBatch:
        """DAPO's refill: new rollouts (``rollout.refill_rounds`` at most) until the groups with signal fill the
        batch of T x N rows, which is then cut to T x N (whole groups: both are multiples of the group size).

        Every extra rollout counts in ``env_steps``; its episode statistics and accuracy join the iteration's.
        """
        target, kept, rounds = loop.storage.num_steps * loop.env.num_envs, [batch], 0
        while sum(len(b) for b in kept) < target and rounds < self.rollout.refill_rounds:
            episode_return, episode_length = loop.collect()
            returns.append(episode_return)
            lengths.append(episode_length)
            rounds += 1
            loop.env_steps += loop.steps_per_iteration
            loop.check_rollout_finite()
            kept.append(loop.advantages())
        self.refill_count = rounds
        batch = kept[0] if len(kept) == 1 else RolloutBatch.cat(kept)
        if len(batch) <= target:
            return batch
        return batch.index(torch.arange(target, device=batch.obs.device))

    def metrics(self) -> dict[str, float]:
        values = {}
        if self.rollout.dynamic_sampling:
            values["dropped_fraction"] = self.dropped_fraction
        if self.rollout.refill_rounds > 0:
            values["refill_rounds"] = float(self.refill_count)
        return values | super().metrics()
