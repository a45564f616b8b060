"""Replay samplers: which stored slots a batch reads, and with what importance weight.

Shapes: C capacity (slots 0..C-1), S slots filled so far (the valid slots are exactly 0..S-1), K slots written
or updated in one call, B batch size, P = the smallest power of two >= C (sum-tree leaves).

A sampler sees only flat slot indices: the storage decides where data lives, the sampler decides what is read.
Every tensor stays on the sampler's device; the only host syncs are the one-line input checks of ``add`` and
``update_priority`` (one small ``tolist`` each), so a NaN TD error is refused before it can reach the tree.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch


class Sampler(Protocol):
    """What ``ReplayBuffer`` needs from a sampler."""

    def add(self, slots: torch.Tensor) -> None:
        """Register the slots [K] int64 just written with new data."""

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(slots [B] int64, importance weights [B] float32) drawn from the slots 0..size-1."""

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        """New priorities [K] (e.g. |TD error|) for the slots [K]."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def _check_capacity(capacity: int) -> None:
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
        raise ValueError(f"replay capacity must be an integer >= 1, got {capacity!r}")


def _check_sample_args(batch_size: int, size: int, capacity: int) -> None:
    if batch_size < 1:
        raise ValueError(f"replay batch_size must be >= 1, got {batch_size}")
    if not 1 <= size <= capacity:
        raise ValueError(f"replay size (slots filled) must be in [1, {capacity}], got {size}")


def _check_unit(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
        raise ValueError(f"prioritized replay {name} must be in [0, 1], got {value!r}")


def _check_slot_shape(slots: torch.Tensor) -> torch.Tensor:
    if slots.dim() != 1 or slots.dtype.is_floating_point or slots.dtype == torch.bool:
        raise ValueError(
            f"replay slots must be a 1-D integer tensor, got dtype {slots.dtype}, shape {tuple(slots.shape)}"
        )
    return slots.long()


class UniformSampler:
    """Every filled slot equally likely, all weights 1; ``add`` and ``update_priority`` do nothing."""

    def __init__(self, capacity: int, device: torch.device | str = "cpu") -> None:
        _check_capacity(capacity)
        self.capacity, self.device = capacity, torch.device(device)

    def add(self, slots: torch.Tensor) -> None:
        pass

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_sample_args(batch_size, size, self.capacity)
        slots = torch.randint(0, size, (batch_size,), generator=generator, device=self.device)  # [B]
        return slots, torch.ones(batch_size, device=self.device)

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        pass

    def state_dict(self) -> dict:
        return {"capacity": self.capacity}

    def load_state_dict(self, state: dict) -> None:
        if state["capacity"] != self.capacity:
            raise ValueError(f"uniform sampler state has capacity {state['capacity']}, this one has {self.capacity}")


class PrioritizedSampler:
    """Proportional prioritized replay (Schaul et al. 2016, "Prioritized Experience Replay", Alg. 1).

    A slot's stored priority is ``p ** alpha`` with ``p = priority + eps``; P(i) = p_i^alpha / sum_k p_k^alpha.
    New slots enter at the largest stored priority ever set (1.0 before any update). Importance weights are
    ``w_i = (S * P(i)) ** -beta`` divided by the largest weight in the same batch, so every weight is <= 1 and
    the batch's least likely slot gets exactly 1 (the batch max, as in Alg. 1 line 10; not the buffer-wide
    minimum priority, which would need a min tree). ``anneal(progress)`` moves beta linearly to ``beta_final``.

    The priorities live in a float64 sum tree, one flat tensor [2P] on ``device``: node 1 is the root, node n has
    children 2n and 2n + 1, the leaves are nodes P..2P-1 (slot i is node P + i; leaves >= C stay 0). Updates and
    samples are batched: O(log P) tensor ops per call, whatever K or B.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        eps: float = 1e-6,
        device: torch.device | str = "cpu",
    ) -> None:
        _check_capacity(capacity)
        _check_unit("alpha", alpha)
        _check_unit("beta", beta)
        _check_unit("beta_final", beta_final)
        if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
            raise ValueError(f"prioritized replay eps must be a finite number > 0, got {eps!r}")
        self.capacity, self.device = capacity, torch.device(device)
        self.alpha, self.beta_initial, self.beta_final, self.eps = float(alpha), float(beta), float(beta_final), eps
        self.beta = float(beta)
        self.depth = max(capacity - 1, 0).bit_length()  # levels below the root
        self.num_leaves = 1 << self.depth  # P
        self.tree = torch.zeros(2 * self.num_leaves, dtype=torch.float64, device=self.device)  # [2P]
        self.max_priority = torch.ones((), dtype=torch.float64, device=self.device)  # largest p^alpha ever set

    # -- beta ------------------------------------------------------------------------------------------------------

    def set_beta(self, beta: float) -> None:
        _check_unit("beta", beta)
        self.beta = float(beta)

    def anneal(self, progress: float) -> float:
        """beta = beta_initial + clamp(progress, 0, 1) * (beta_final - beta_initial); returns the new beta."""
        fraction = min(max(float(progress), 0.0), 1.0)
        self.beta = self.beta_initial + fraction * (self.beta_final - self.beta_initial)
        return self.beta

    # -- tree ------------------------------------------------------------------------------------------------------

    @property
    def total(self) -> torch.Tensor:
        """Sum of the stored priorities p^alpha (0-dim float64)."""
        return self.tree[1]

    def priority(self, slots: torch.Tensor) -> torch.Tensor:
        """Stored priorities p^alpha [K] float64 of the slots [K]."""
        return self.tree[self.num_leaves + slots.long()]

    def _check_slots(self, slots: torch.Tensor, extra: torch.Tensor | None = None) -> list[int]:
        """One host sync: slot range (and the bad-priority counts in ``extra``, if given)."""
        stats = torch.stack([slots.min(), slots.max()])
        values = torch.cat([stats, extra]).tolist() if extra is not None else stats.tolist()
        if values[0] < 0 or values[1] >= self.capacity:
            raise ValueError(f"replay slots must be in [0, {self.capacity}), got values in [{values[0]}, {values[1]}]")
        return values

    def _write(self, slots: torch.Tensor, value: torch.Tensor) -> None:
        """Set leaves ``slots`` [K] to ``value`` [K] (last occurrence wins), then recompute their ancestors.

        Duplicate slots are dropped before the leaf write (a stable sort keeps the last one of each run), so the
        result does not depend on scatter order. Parents are recomputed as left + right child, level by level;
        siblings updated together write the same sum into their parent, so duplicates there are harmless.
        """
        sorted_slots, order = torch.sort(slots, stable=True)  # [K]
        last = torch.ones_like(sorted_slots, dtype=torch.bool)
        last[:-1] = sorted_slots[1:] != sorted_slots[:-1]
        node = self.num_leaves + sorted_slots[last]  # [K'] unique leaves
        self.tree[node] = value[order[last]]
        for _ in range(self.depth):
            node = node // 2
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    # -- sampler API -----------------------------------------------------------------------------------------------

    def add(self, slots: torch.Tensor) -> None:
        """New data in ``slots`` [K]: each gets the largest priority ever set, so it is likely seen soon."""
        slots = _check_slot_shape(slots).to(self.device)
        if slots.numel() == 0:
            return
        self._check_slots(slots)
        self._write(slots, self.max_priority.expand(slots.shape[0]))

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        """Set slot priorities to ``(priority + eps) ** alpha``; ``priority`` [K] is e.g. |TD error|, >= 0, finite.

        If any entry is bad nothing is written (the tree and the max priority are untouched).
        """
        slots = _check_slot_shape(slots).to(self.device)
        priority = priority.detach().to(self.device, torch.float64)
        if priority.shape != slots.shape:
            raise ValueError(f"priority shape {tuple(priority.shape)} does not match slots shape {tuple(slots.shape)}")
        if slots.numel() == 0:
            return
        finite = torch.isfinite(priority)
        bad = torch.stack([(~finite).sum(), (finite & (priority < 0)).sum()])
        _, _, nonfinite, negative = self._check_slots(slots, bad)
        if nonfinite:
            raise ValueError(
                f"{nonfinite} of {slots.numel()} replay priorities are not finite (NaN or inf); none were written"
            )
        if negative:
            raise ValueError(f"{negative} of {slots.numel()} replay priorities are negative (pass |TD error|)")
        value = (priority + self.eps) ** self.alpha  # [K] p^alpha
        self.max_priority = torch.maximum(self.max_priority, value.max())
        self._write(slots, value)

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified proportional draw: B equal segments of the total mass, one uniform prefix sum in each.

        Each prefix sum descends from the root: go right (subtracting the left mass) when it is >= the left
        child's mass and the right child holds mass (the second test keeps rounding off empty leaves). Slots come
        out in increasing order. Only slots 0..size-1 may hold mass, which ``add`` guarantees when the storage
        fills slots in order.
        """
        _check_sample_args(batch_size, size, self.capacity)
        total = self.tree[1]
        draw = torch.rand(batch_size, dtype=torch.float64, device=self.device, generator=generator)  # [B]
        prefix = (torch.arange(batch_size, dtype=torch.float64, device=self.device) + draw) * (total / batch_size)
        node = torch.ones(batch_size, dtype=torch.long, device=self.device)  # [B] root
        for _ in range(self.depth):
            left = 2 * node
            left_mass = self.tree[left]
            go_right = (prefix >= left_mass) & (self.tree[left + 1] > 0)
            prefix = torch.where(go_right, prefix - left_mass, prefix)
            node = left + go_right.long()
        probability = self.tree[node] / total  # [B] P(i)
        weight = (size * probability) ** -self.beta  # [B] (S P(i))^-beta
        return node - self.num_leaves, (weight / weight.max()).float()

    def state_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "tree": self.tree.clone(),
            "max_priority": self.max_priority.clone(),
            "alpha": self.alpha,
            "eps": self.eps,
            "beta": self.beta,
            "beta_initial": self.beta_initial,
            "beta_final": self.beta_final,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"prioritized sampler state has capacity {state['capacity']}, this one has {self.capacity}"
            )
        self.tree.copy_(state["tree"])
        self.max_priority = state["max_priority"].to(self.device, torch.float64).clone()
        self.alpha, self.eps = float(state["alpha"]), float(state["eps"])
        self.beta, self.beta_initial, self.beta_final = (
            float(state["beta"]),
            float(state["beta_initial"]),
            float(state["beta_final"]),
        )
