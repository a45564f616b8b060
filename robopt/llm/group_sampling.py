"""The on-policy loop's variants for language tasks: group-relative advantages (GRPO, RLOO, Dr. GRPO), DAPO's dynamic
sampling with refill, and the task counters (exact-match accuracy, verifier failures).

Shapes: T steps, N envs (rows), G = ``group_size`` rows per prompt, B = T x N. The generic loop
(``robopt.algorithms.onpolicy.OnPolicyLoop``) calls its hooks at fixed points: ``begin_iteration()``, ``observe(info)``
after every env step, ``advantages(loop, critic_input)`` in place of GAE (None: GAE), ``complete(loop, batch,
returns, lengths)`` once the rollout's batch is made, ``metrics()`` when the iteration's row is logged, and
``check_data_parallel()`` when the run has several ranks. ``GroupConfig`` is the ``group`` config section;
``hooks_for(group, env)`` picks the hooks it asks for (``robopt.llm.variant`` hands them to a language run).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from robopt.buffers.rollout import RolloutBatch
from robopt.core.advantages import equal_reward_groups, group_advantage
from robopt.options import ConfigError, option

__all__ = ["GroupConfig", "GroupSampling", "TaskCounters", "hooks_for"]


@dataclass(frozen=True)
class GroupConfig:
    """The ``group`` section: group-relative advantages over rows that share a prompt, in place of GAE."""

    enabled: bool = option(
        False,
        "group-relative advantages (GRPO; no critic needed): each reward against the mean of its group of "
        "env.kwargs.group_size consecutive rows that share a prompt; false: GAE",
    )
    normalize_std: bool = option(True, "divide by the group's std (GRPO); false: Dr. GRPO")
    leave_one_out: bool = option(False, "baseline each row with the mean of the others in its group (RLOO)")
    dynamic_sampling: bool = option(False, "drop groups whose rewards are all equal from the update (DAPO's filter)")
    refill_rounds: int = option(
        0,
        "dynamic_sampling: extra rollouts at most per iteration that refill the batch with groups whose rewards "
        "differ, up to the batch size (DAPO's max_num_gen_batches - 1); 0: no refill, the batch shrinks",
    )

    def __post_init__(self) -> None:
        if self.refill_rounds < 0:
            raise ValueError(f"refill_rounds must be >= 0, got {self.refill_rounds}")
        if self.refill_rounds > 0 and not self.dynamic_sampling:
            raise ValueError("refill_rounds refills what dynamic sampling drops: set group.dynamic_sampling=true")
        if not self.enabled and (self.leave_one_out or self.dynamic_sampling or not self.normalize_std):
            raise ValueError(
                "normalize_std, leave_one_out and dynamic_sampling are options of group.enabled=true; with "
                "GAE they would be ignored"
            )


RENAMED = {"group_std": "normalize_std", "leave_one_out": "leave_one_out", "dynamic_sampling": "dynamic_sampling",
           "refill_rounds": "refill_rounds"}  # fmt: skip


def migrate_group(data: dict) -> dict:
    """A run config saved before the group options left ``rollout``: ``rollout.advantage: group|gae`` becomes
    ``group.enabled``, ``rollout.group_std`` ``group.normalize_std``, and the others keep their names in ``group``."""
    rollout = data.get("rollout")
    if not isinstance(rollout, dict) or not ({"advantage", *RENAMED} & set(rollout)):
        return data
    rollout, group = dict(rollout), dict(data.get("group") or {})
    if "advantage" in rollout:
        group["enabled"] = rollout.pop("advantage") == "group"
    for old, new in RENAMED.items():
        if old in rollout:
            group[new] = rollout.pop(old)
    return {**data, "rollout": rollout, "group": group}


def hooks_for(group: GroupConfig, env) -> TaskCounters:
    """The loop's hooks of a language run on ``env``: group sampling when ``group.enabled``, else the task counters."""
    return GroupSampling(group, env) if group.enabled else TaskCounters()


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

    def check_data_parallel(self) -> None:
        """The counters are each rank's own: nothing to refuse."""

    def metrics(self) -> dict[str, float]:
        values = {}
        if self.accuracy:
            values["accuracy"] = float(torch.stack(self.accuracy).mean())
        if self.failures:
            values["verifier_failures"] = float(torch.stack(self.failures).sum())
        return values


class GroupSampling(TaskCounters):
    """Group-relative advantages over rows sharing a prompt, with DAPO's dynamic sampling and refill."""

    def __init__(self, config: GroupConfig, env) -> None:
        super().__init__()
        if not hasattr(env, "group_size"):
            raise ConfigError(
                f"group.enabled=true needs an env whose rows come in groups sharing a prompt (robopt/Text), "
                f"not {env.env_id}; set group.enabled=false (GAE)"
            )
        if config.leave_one_out and env.group_size < 2:
            raise ConfigError(f"group.leave_one_out needs env.kwargs.group_size >= 2, got {env.group_size}")
        self.config, self.group = config, env.group_size
        self.dropped_fraction, self.dropped_rows, self.generated_rows, self.refill_count = 0.0, 0, 0, 0

    def begin_iteration(self) -> None:
        super().begin_iteration()
        self.dropped_rows, self.generated_rows, self.refill_count = 0, 0, 0

    def check_data_parallel(self) -> None:
        if self.config.dynamic_sampling:
            raise ConfigError(
                "group.dynamic_sampling changes each rank's batch size, which data-parallel minibatches cannot "
                "follow; set group.dynamic_sampling=false or run in one process"
            )

    def advantages(self, loop, critic_input: torch.Tensor) -> RolloutBatch:
        """Group-relative advantages (GRPO; RLOO with ``leave_one_out``) over rows sharing a prompt.

        Rows of each step come in consecutive groups of the env's ``group_size``; the return target is the reward
        (single-step episodes). With ``dynamic_sampling`` the rows of groups whose rewards are all equal (zero
        advantage, no signal) leave the batch (DAPO's filter; ``complete`` refills it); the share dropped is
        logged. ``rollout.normalize_advantage`` then normalizes the kept rows over the batch (after refilling).
        """
        storage, config, group = loop.storage, self.config, self.group
        self.generated_rows += storage.num_steps * loop.env.num_envs
        reward = storage.reward.reshape(-1)  # [T * N], time-major: each step's N rows in groups of G
        advantage = group_advantage(reward, group, config.normalize_std, config.leave_one_out)
        batch = storage.flatten(advantage.reshape(storage.reward.shape), storage.reward, critic_input)
        if config.dynamic_sampling:
            keep = ~equal_reward_groups(reward, group).repeat_interleave(group)  # [T * N]
            self.dropped_rows += int((~keep).sum())
            batch = batch.index(keep.nonzero()[:, 0])
        return batch

    def complete(self, loop, batch: RolloutBatch, returns: list, lengths: list) -> RolloutBatch:
        """Refill (``refill_rounds`` > 0), then normalize the kept rows' advantages over the batch (with the loop's
        ``rollout.normalize_advantage``)."""
        if self.config.refill_rounds > 0:
            batch = self._refill(loop, batch, returns, lengths)
        self.dropped_fraction = self.dropped_rows / self.generated_rows
        if loop.rollout.normalize_advantage and len(batch) > 1:
            batch = dataclasses.replace(batch, advantage=loop.normalize_advantage(batch.advantage))
        return batch

    def _refill(self, loop, batch: RolloutBatch, returns: list, lengths: list) -> RolloutBatch:
        """DAPO's refill: new rollouts (``group.refill_rounds`` at most) until the groups with signal fill the
        batch of T x N rows, which is then cut to T x N (whole groups: both are multiples of the group size).

        Every extra rollout counts in ``env_steps``; its episode statistics and accuracy join the iteration's.
        """
        target, kept, rounds = loop.storage.num_steps * loop.env.num_envs, [batch], 0
        while sum(len(b) for b in kept) < target and rounds < self.config.refill_rounds:
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
        if self.config.dynamic_sampling:
            values["dropped_fraction"] = self.dropped_fraction
        if self.config.refill_rounds > 0:
            values["refill_rounds"] = float(self.refill_count)
        return values | super().metrics()
