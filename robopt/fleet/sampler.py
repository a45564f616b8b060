"""The fleet's replay sampler: uniform draws over tagged slots, an own/shared mix and policy-lag control.

Shapes: C capacity (slots 0..C-1), S slots filled so far (the valid slots are exactly 0..S-1), K slots tagged in
one call, B batch size, R robots.

Every slot carries the robot that collected it and the policy version that acted (``tag``). With the learner's
newest published version v, a slot's lag is ``v - slot version`` (>= 0: the hub refuses versions newer than v).
    eligible   filled and tagged, and in ``stale_mode="drop"`` with ``max_lag`` set also ``lag <= max_lag``
               (``max_lag`` filters in drop mode only; weight mode keeps every slot and down-weights old ones).
    own mix    ``own_fraction > 0``: the first ``round(own_fraction * B)`` rows of a batch (Python's round) are drawn
               uniformly from the eligible slots of ``own_robots``, the rest uniformly from all eligible slots (own
               ones included); if no own slot is eligible, the whole batch comes from all eligible slots.
    weights    ``stale_mode="weight"``: ``stale_decay ** lag`` normalized to mean 1 over the batch, else ones.
The draws list the eligible slots with ``nonzero`` (a host sync; a second one with ``own_fraction`` > 0).
"""

from __future__ import annotations

import numbers

import torch

from robopt.fleet.config import STALE_MODES


class NoEligibleSlots(ValueError):
    """Every filled slot is untagged or older than ``max_lag``: the learner waits for fresh experience."""


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def staleness_weights(lag: torch.Tensor, stale_decay: float) -> torch.Tensor:
    """``stale_decay ** lag`` [B] normalized to mean 1 (float32); computed relative to the smallest lag in float64,
    which the normalization cancels, so a batch of very old slots does not underflow to 0 / 0."""
    weight = torch.pow(float(stale_decay), (lag - lag.min()).double())  # [B] in (0, 1]
    return (weight / weight.mean()).float()


class FleetSampler:
    """Uniform sampling over slots tagged with (robot, version); implements the replay ``Sampler`` protocol."""

    def __init__(
        self,
        capacity: int,
        num_robots: int,
        own_robots=(),
        own_fraction: float = 0.0,
        max_lag: int | None = None,
        stale_mode: str = "drop",
        stale_decay: float = 0.5,
        device: torch.device | str = "cpu",
    ) -> None:
        for name, value in (("capacity", capacity), ("num_robots", num_robots)):
            if not _is_int(value) or value < 1:
                raise ValueError(f"fleet replay {name} must be an integer >= 1, got {value!r}")
        own_robots = tuple(own_robots)
        bad = [robot for robot in own_robots if not _is_int(robot) or not 0 <= robot < num_robots]
        if bad:
            raise ValueError(f"fleet own_robots {bad} are not robot ids; allowed: integers 0 .. {num_robots - 1}")
        if not (isinstance(own_fraction, (int, float)) and 0.0 <= own_fraction <= 1.0):
            raise ValueError(f"fleet own_fraction must be in [0, 1], got {own_fraction!r}")
        if own_fraction > 0 and not own_robots:
            raise ValueError(f"fleet own_fraction {own_fraction} needs own_robots (the robots whose data it favours)")
        if max_lag is not None and (not _is_int(max_lag) or max_lag < 0):
            raise ValueError(f"fleet max_lag must be an integer >= 0 or None (no limit), got {max_lag!r}")
        if stale_mode not in STALE_MODES:
            raise ValueError(f"fleet stale_mode {stale_mode!r} is unknown; allowed: {', '.join(STALE_MODES)}")
        if not (isinstance(stale_decay, (int, float)) and 0.0 < stale_decay <= 1.0):
            raise ValueError(f"fleet stale_decay must be in (0, 1], got {stale_decay!r}")
        self.capacity, self.num_robots, self.device = int(capacity), int(num_robots), torch.device(device)
        self.own_robots, self.own_fraction = tuple(int(robot) for robot in own_robots), float(own_fraction)
        self.max_lag, self.stale_mode, self.stale_decay = max_lag, stale_mode, float(stale_decay)
        self.version = 0  # the learner's newest published policy version (host int)
        self.robot = torch.full((capacity,), -1, dtype=torch.int64, device=self.device)  # [C] -1: untagged
        self.slot_version = torch.zeros(capacity, dtype=torch.int64, device=self.device)  # [C]
        self.own_mask = torch.zeros(num_robots, dtype=torch.bool, device=self.device)  # [R]
        self.own_mask[list(self.own_robots)] = True

    @property
    def nbytes(self) -> int:
        return self.robot.nbytes + self.slot_version.nbytes

    # -- tags ------------------------------------------------------------------------------------------------------

    def set_version(self, version: int) -> None:
        """The learner's newest published version; it never goes back."""
        if not _is_int(version) or version < self.version:
            raise ValueError(f"fleet version must be an integer >= the current {self.version}, got {version!r}")
        self.version = int(version)

    def add(self, slots: torch.Tensor) -> None:
        """Slots [K] just overwritten: untagged (not eligible) until ``tag`` names their robot and version."""
        self.robot[slots.to(self.device)] = -1

    def tag(self, slots: torch.Tensor, robot: int, version: int) -> None:
        """Slots [K] hold transitions of ``robot`` collected by policy ``version`` (<= the published version)."""
        if not _is_int(robot) or not 0 <= robot < self.num_robots:
            raise ValueError(f"fleet robot id {robot!r} is unknown; allowed: integers 0 .. {self.num_robots - 1}")
        if not _is_int(version) or not 0 <= version <= self.version:
            raise ValueError(f"fleet version {version!r} must be an integer in [0, published {self.version}]")
        slots = slots.to(self.device).long()
        self.robot[slots] = int(robot)
        self.slot_version[slots] = int(version)

    def lag(self, size: int) -> torch.Tensor:
        """Lag [S] of the slots 0..size-1 behind the published version."""
        return self.version - self.slot_version[:size]

    def eligible(self, size: int) -> torch.Tensor:
        """Mask [S] of the slots 0..size-1 a batch may draw."""
        eligible = self.robot[:size] >= 0
        if self.stale_mode == "drop" and self.max_lag is not None:
            eligible &= self.lag(size) <= self.max_lag
        return eligible

    def lag_stats(self, size: int) -> dict[str, float]:
        """tagged, eligible and stale (tagged but dropped) slot counts, mean and max lag of tagged slots (one sync)."""
        if size < 1:
            return {"tagged": 0.0, "eligible": 0.0, "stale": 0.0, "mean_lag": 0.0, "max_lag": 0.0}
        tagged, eligible, lag = self.robot[:size] >= 0, self.eligible(size), self.lag(size).double()
        count = tagged.sum()
        mean_lag = torch.where(tagged, lag, 0.0).sum() / count.clamp(min=1)
        max_lag = torch.where(tagged, lag, 0.0).max()
        values = torch.stack([count.double(), eligible.sum().double(), mean_lag, max_lag]).tolist()
        return {
            "tagged": values[0],
            "eligible": values[1],
            "stale": values[0] - values[1],
            "mean_lag": values[2],
            "max_lag": values[3],
        }

    # -- sampler API -----------------------------------------------------------------------------------------------

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(slots [B], weights [B]): own rows first, then rows from all eligible slots (see the module docstring)."""
        if not _is_int(batch_size) or batch_size < 1:
            raise ValueError(f"fleet replay batch_size must be an integer >= 1, got {batch_size!r}")
        if not _is_int(size) or not 1 <= size <= self.capacity:
            raise ValueError(f"fleet replay size (slots filled) must be in [1, {self.capacity}], got {size!r}")
        eligible = self.eligible(size)  # [S]
        pool = torch.nonzero(eligible).squeeze(1)  # [S'] the one host sync
        if pool.numel() == 0:
            stats = self.lag_stats(size)
            limit = f"max_lag {self.max_lag}" if self.max_lag is not None else "no lag limit"
            raise NoEligibleSlots(
                f"fleet replay has no eligible transition to sample: {int(stats['tagged'])} tagged, "
                f"{int(stats['stale'])} older than {limit} behind version {self.version}"
            )
        own_pool = pool[self.own_mask[self.robot[pool]]] if self.own_fraction > 0 else pool[:0]  # [S'']
        num_own = round(self.own_fraction * batch_size) if own_pool.numel() > 0 else 0
        parts = []
        for group, count in ((own_pool, num_own), (pool, batch_size - num_own)):
            if count > 0:
                parts.append(group[torch.randint(0, group.numel(), (count,), generator=generator, device=self.device)])
        slots = torch.cat(parts)  # [B]
        if self.stale_mode == "weight":
            return slots, staleness_weights(self.version - self.slot_version[slots], self.stale_decay)
        return slots, torch.ones(batch_size, device=self.device)

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        pass

    def state_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "num_robots": self.num_robots,
            "version": self.version,
            "robot": self.robot.clone(),
            "slot_version": self.slot_version.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        saved = (state["capacity"], state["num_robots"])
        if saved != (self.capacity, self.num_robots):
            raise ValueError(
                f"fleet sampler state has capacity {saved[0]} and {saved[1]} robots, this one has capacity "
                f"{self.capacity} and {self.num_robots} robots"
            )
        self.robot.copy_(state["robot"])
        self.slot_version.copy_(state["slot_version"])
        self.version = int(state["version"])
