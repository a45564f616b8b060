"""The measurement side of a robot computer's link, in training (``task.link``): late and lost measurements.

Shapes: N envs, M rows being reset, D observation width, L = latency high + 1 (the frame history).

A deployed policy reads its observation from messages (``robopt.sim2real``: a ROS 2 map, a UDP robot): each
measured term arrives on a topic (its declaration's ``Deploy.topic``: ``joint_states``, ``imu``, ``odom``), some
time after it was measured, and now and then a message is lost; the runtime then reads the last one it has again
(docs/deploy.md, "A legged policy on a tick without a fresh measurement"). The terms the runtime holds itself
(``last_action``) and the command input are never late. Training under the same conditions makes a late or lost
message something the policy has seen (issue 55's gait that survives the link). Per control step, in this order:

    latency   each row reads its measured terms ``d`` control ticks late, ``d ~ U{latency}`` drawn per episode
              (from the env's generator, at reset; nothing is drawn when low = high); a row younger than ``d``
              ticks reads its first observation
    loss      each topic of each row is lost with probability ``drop`` (from the task's step generator): its
              terms keep the values that row read last (noise included, as a repeated message carries it)

The actuation side (the command reaching the servos late) is ``randomization.action_delay``; sensor noise is each
observation term's ``noise``. With ``latency: [0, 0]`` and ``drop: 0`` (the default) nothing is drawn and the
observation is the task's frame as before. The frame history, the rows' latencies and the last observation read
are the task's state (an exact resume).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from robopt.options import ConfigError, between, option

MAX_LATENCY = 10  # control ticks: a robot computer's link is a few ticks late, not a second
LOSS = between(0.0, 1.0, "a probability in [0, 1)", high_open=True)


@dataclass(frozen=True)
class LinkConfig:
    latency: tuple[int, ...] = option(
        (0, 0),
        f"[low, high] control ticks a measured term (one with a deploy topic) is read late, drawn per episode "
        f"(0 <= low <= high <= {MAX_LATENCY})",
    )
    drop: float = option(
        0.0, "the probability per control step that a topic's message is lost (its terms repeat)", check=LOSS
    )

    def __post_init__(self) -> None:
        value = self.latency
        ok = len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if not ok or not 0 <= value[0] <= value[1] <= MAX_LATENCY:
            raise ConfigError(
                f"task.link.latency: expected [low, high] integers with 0 <= low <= high <= {MAX_LATENCY} "
                f"(control ticks), got {list(value)!r}"
            )

    @property
    def active(self) -> bool:
        return self.latency[1] > 0 or self.drop > 0


def topic_columns(terms: Sequence, widths: Sequence[int]) -> dict[str, list[int]]:
    """The observation's columns by the topic their term is measured on (its ``Deploy.topic``); terms without one
    (the runtime's own values, the command, an undeclared hook) are in none."""
    topics: dict[str, list[int]] = {}
    start = 0
    for term, width in zip(terms, widths, strict=True):
        deploy = term.info.deploy
        if deploy is not None and deploy.topic:
            topics.setdefault(deploy.topic, []).extend(range(start, start + width))
        start += width
    return topics


class Link:
    """Late and lost measurements over the observation frames of N rows (the module doc)."""

    def __init__(self, config: LinkConfig, topics: dict[str, list[int]], first: torch.Tensor) -> None:
        n, width = first.shape
        if not topics:
            raise ConfigError(
                "task.link: no observation term is measured on a topic (a term whose declaration has a deploy topic: "
                "joint_pos, joint_vel, base_ang_vel, projected_gravity, base_lin_vel...): nothing can be late or lost"
            )
        self.config, self.num_envs = config, n
        device = first.device
        self.num_topics = len(topics)
        # [D] each column's topic index; the columns of no topic point at an extra, never-lost one (index T)
        self.topic = torch.full((width,), self.num_topics, dtype=torch.long, device=device)
        for index, cols in enumerate(topics.values()):
            self.topic[cols] = index
        self.measured = self.topic < self.num_topics  # [D]
        self.history = first[:, None].repeat(1, config.latency[1] + 1, 1)  # [N, L, D] fresh frames, a ring
        self.pointer = 0  # the slot the next fresh frame goes to
        self.latency = torch.zeros(n, dtype=torch.long, device=device)  # [N] ticks
        self.read = first.clone()  # [N, D] what each row read last
        self.rows = torch.arange(n, device=device)

    def step(self, fresh: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The observation [N, D] read this step, from this step's frame [N, D]."""
        length = self.history.shape[1]
        self.history[:, self.pointer] = fresh
        late = self.history[self.rows, (self.pointer - self.latency) % length]  # [N, D]
        self.pointer = (self.pointer + 1) % length
        out = torch.where(self.measured, late, fresh)
        if self.config.drop > 0:
            draw = torch.rand(self.num_envs, self.num_topics, generator=generator, device=fresh.device)
            lost = torch.cat([draw < self.config.drop, self.measured.new_zeros(self.num_envs, 1)], dim=1)  # [N, T + 1]
            out = torch.where(lost[:, self.topic], self.read, out)  # a lost topic's columns repeat the last reading
        self.read = out
        return out.clone()

    def reset(self, rows: torch.Tensor, first: torch.Tensor, generator: torch.Generator) -> None:
        """Rows [M] start an episode whose first observation is ``first`` [M, D]; their latencies are drawn from
        ``generator`` (the env's, on the CPU)."""
        low, high = self.config.latency
        if low < high:
            self.latency[rows] = torch.randint(low, high + 1, (rows.numel(),), generator=generator).to(rows.device)
        else:  # a fixed latency draws nothing
            self.latency[rows] = low
        self.history[rows] = first[:, None]
        self.read[rows] = first

    def state_dict(self) -> dict:
        return {
            "history": self.history.cpu().clone(),
            "pointer": self.pointer,
            "latency": self.latency.cpu().clone(),
            "read": self.read.cpu().clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        if tuple(state["history"].shape) != tuple(self.history.shape):
            raise ValueError(
                f"this checkpoint's task.link history has shape {list(state['history'].shape)}, not "
                f"{list(self.history.shape)}: resume it with the same task.link and observations"
            )
        self.history.copy_(state["history"])
        self.pointer = int(state["pointer"])
        self.latency.copy_(state["latency"])
        self.read.copy_(state["read"])
