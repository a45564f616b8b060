"""Device-resident replay: a ring storage, a sampler that picks slots, and sample-time transforms.

Shapes: T capacity per env (ring rows), N envs, C = T * N flat slots, B batch, D obs dim, A action dim,
E extra-field dim. Row r of env n is the flat slot ``r * N + n`` (time-major, like the rollout storage).

Times are absolute step counts (0, 1, 2, ... one per ``extend``); step t lives in ring row ``t % T``. Every env
writes one row per ``extend``, so the last written step is the same for all envs: ``steps - 1``. The ring fills
rows 0, 1, ... in order and then wraps, so the filled slots are always exactly ``0 .. size - 1`` in flat order.

Episode bookkeeping, kept so that transforms (n-step, hindsight) can find the later steps of a slot's episode
still in the ring without any host sync:
    ``episode_id``    [T, N] int64: per-env episode counter of the slot's episode.
    ``episode_start`` [T, N] int64: absolute step at which the slot's episode began (it may have left the ring).
    ``episode_end``   [T, N] int64: absolute last step of closed episode e of env n, at row ``e % T``. At most T
                      closed episodes of an env have steps in the ring, so a ring of T entries never loses one
                      still needed. An episode still open (no terminated/truncated yet) ends at the newest step.
A batch's discount is the factor of the bootstrap: ``target = reward + discount * (1 - terminated) * Q(next_obs)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import torch

from robopt.core.shapes import check_shape

if TYPE_CHECKING:
    from robopt.buffers.samplers import Sampler

_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


class ReplayTransform(Protocol):
    """A sample-time transform: ``batch`` dict of [B, ...] tensors in, the changed batch out.

    A transform that computes rewards anew says how in a class attribute ``reward_rewrite`` (``NStep`` sums
    one-step rewards, ``Hindsight`` relabels them); two such transforms cannot be combined in one buffer.
    """

    def __call__(
        self, batch: dict[str, torch.Tensor], storage: ReplayStorage, generator: torch.Generator | None
    ) -> dict[str, torch.Tensor]: ...


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"replay {name} must be an integer >= 1, got {value!r}")


class ReplayStorage:
    """A [T, N] ring of transitions on ``device``; ``next_obs`` holds the true final obs where a row ended."""

    def __init__(
        self,
        capacity_per_env: int,
        num_envs: int,
        obs_dim: int,
        action_dim: int,
        device: torch.device | str = "cpu",
        extra_fields: dict[str, int] | None = None,
    ) -> None:
        for name, value in (
            ("capacity_per_env", capacity_per_env),
            ("num_envs", num_envs),
            ("obs_dim", obs_dim),
            ("action_dim", action_dim),
            *(extra_fields or {}).items(),
        ):
            _positive(name, value)
        clash = set(extra_fields or {}) & {*_FIELDS, "discount", "weights", "slots"}
        if clash:
            raise ValueError(f"replay extra field names {sorted(clash)} clash with the batch keys")
        self.capacity_per_env, self.num_envs, self.obs_dim, self.action_dim = (
            capacity_per_env, num_envs, obs_dim, action_dim)  # fmt: skip
        self.device = torch.device(device)
        self.extra_fields = dict(extra_fields or {})
        self.steps = 0  # extend calls so far; step self.steps - 1 is the newest (host int: no sync)
        shape, long = (capacity_per_env, num_envs), torch.int64
        self.tensors: dict[str, torch.Tensor] = {
            "obs": torch.zeros(*shape, obs_dim, device=self.device),  # [T, N, D]
            "action": torch.zeros(*shape, action_dim, device=self.device),  # [T, N, A]
            "reward": torch.zeros(shape, device=self.device),  # [T, N]
            "next_obs": torch.zeros(*shape, obs_dim, device=self.device),  # [T, N, D]
            "terminated": torch.zeros(shape, dtype=torch.bool, device=self.device),  # [T, N]
            "truncated": torch.zeros(shape, dtype=torch.bool, device=self.device),  # [T, N]
            **{name: torch.zeros(*shape, dim, device=self.device) for name, dim in self.extra_fields.items()},
            "episode_id": torch.zeros(shape, dtype=long, device=self.device),  # [T, N]
            "episode_start": torch.zeros(shape, dtype=long, device=self.device),  # [T, N]
            "episode_end": torch.zeros(shape, dtype=long, device=self.device),  # [T, N] indexed by episode % T
            "current_episode": torch.zeros(num_envs, dtype=long, device=self.device),  # [N] open episode id
            "current_start": torch.zeros(num_envs, dtype=long, device=self.device),  # [N] its first step
        }
        self._env_index = torch.arange(num_envs, device=self.device)  # [N]

    # -- sizes -----------------------------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """C = T * N flat slots."""
        return self.capacity_per_env * self.num_envs

    @property
    def size(self) -> int:
        """Filled flat slots: the valid slots are 0 .. size - 1."""
        return min(self.steps, self.capacity_per_env) * self.num_envs

    @property
    def oldest_step(self) -> int:
        """Absolute step of the oldest row still in the ring."""
        return max(self.steps - self.capacity_per_env, 0)

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage tensors."""
        return sum(tensor.nbytes for tensor in self.tensors.values())

    # -- writing ---------------------------------------------------------------------------------------------------

    def _check_fields(self, method: str, values: dict, lead: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        """The shape each field must have (``lead`` + its own dims); ValueError on a missing field or shape."""
        D, A = self.obs_dim, self.action_dim
        dims = {"obs": (*lead, D), "action": (*lead, A), "reward": lead, "next_obs": (*lead, D), "terminated": lead,
                "truncated": lead, **{k: (*lead, d) for k, d in self.extra_fields.items()}}  # fmt: skip
        if set(values) != set(dims):
            raise ValueError(f"replay {method} got fields {sorted(values)}, expected {sorted(dims)}")
        for name, shape in dims.items():
            check_shape(f"replay {name}", values[name], shape)
        return dims

    def extend(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        **extra: torch.Tensor,
    ) -> torch.Tensor:
        """Write one env step (every tensor [N, ...]; next_obs = info['final_obs']); returns its flat slots [N]."""
        N = self.num_envs
        values = dict(zip(_FIELDS, (obs, action, reward, next_obs, terminated, truncated)), **extra)
        dims = self._check_fields("extend", values, (N,))
        step, row = self.steps, self.steps % self.capacity_per_env
        for name in dims:
            self.tensors[name][row] = values[name]
        t = self.tensors
        episode = t["current_episode"]  # [N]
        done = t["terminated"][row] | t["truncated"][row]  # [N] the episode ends at this step
        t["episode_id"][row] = episode
        t["episode_start"][row] = t["current_start"]
        end_row = episode % self.capacity_per_env  # [N]
        t["episode_end"][end_row, self._env_index] = torch.where(done, step, t["episode_end"][end_row, self._env_index])
        t["current_episode"] += done.long()
        t["current_start"].copy_(torch.where(done, step + 1, t["current_start"]))
        self.steps += 1
        return row * N + self._env_index

    def extend_steps(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        **extra: torch.Tensor,
    ) -> torch.Tensor:
        """Write L consecutive env steps at once (every tensor [L, N, ...], L <= T); returns their slots [L, N].

        The same rows and episode bookkeeping as L calls of ``extend`` (tested), in a few tensor operations: the
        bulk path of a fleet hub that commits whole episodes.
        """
        L, N, T = obs.shape[0] if obs.dim() else 0, self.num_envs, self.capacity_per_env
        if not 1 <= L <= T:
            raise ValueError(f"replay extend_steps writes 1 to {T} steps (the ring's rows) at once, got {L}")
        values = dict(zip(_FIELDS, (obs, action, reward, next_obs, terminated, truncated)), **extra)
        dims = self._check_fields("extend_steps", values, (L, N))
        t, long = self.tensors, torch.int64
        step = self.steps + torch.arange(L, device=self.device)  # [L] absolute steps
        rows = torch.remainder(step, T)
        for name in dims:
            t[name][rows] = values[name].to(t[name].dtype)
        done = (t["terminated"][rows] | t["truncated"][rows]).long()  # [L, N]
        episode = t["current_episode"] + done.cumsum(0) - done  # [L, N] each row's episode id
        # first step of each row's episode: one after the latest earlier end in this write, else the open start
        after_end = torch.where(done.bool(), step[:, None] + 1, -1)  # [L, N]
        earlier = torch.cat((torch.full((1, N), -1, dtype=long, device=self.device), after_end[:-1]))
        earlier = torch.cummax(earlier, dim=0).values
        t["episode_id"][rows] = episode
        t["episode_start"][rows] = torch.where(earlier >= 0, earlier, t["current_start"])
        ended_step, ended_env = done.bool().nonzero(as_tuple=True)  # at most L <= T ends per env: distinct rows
        t["episode_end"][torch.remainder(episode[ended_step, ended_env], T), ended_env] = step[ended_step]
        t["current_start"].copy_(torch.maximum(t["current_start"], after_end.max(0).values))
        t["current_episode"] += done.sum(0)
        self.steps += L
        return rows[:, None] * N + self._env_index

    # -- reading ---------------------------------------------------------------------------------------------------

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """The transitions at flat ``slots`` [B]: obs, action, reward, next_obs, terminated, truncated, extras."""
        names = (*_FIELDS, *self.extra_fields)
        C = self.capacity
        return {name: self.tensors[name].reshape(C, *self.tensors[name].shape[2:])[slots] for name in names}

    def field_at(self, name: str, slots: torch.Tensor) -> torch.Tensor:
        """One stored field at flat ``slots`` [B] -> [B, ...]."""
        tensor = self.tensors[name]
        return tensor.reshape(self.capacity, *tensor.shape[2:])[slots]

    def slot_env(self, slots: torch.Tensor) -> torch.Tensor:
        """Env index n [B] of each flat slot."""
        return torch.remainder(slots, self.num_envs)

    def slot_step(self, slots: torch.Tensor) -> torch.Tensor:
        """Absolute step [B] stored at each filled flat slot."""
        newest = self.steps - 1
        row = torch.div(slots, self.num_envs, rounding_mode="floor")
        return newest - torch.remainder(newest % self.capacity_per_env - row, self.capacity_per_env)

    def step_slot(self, step: torch.Tensor, env: torch.Tensor) -> torch.Tensor:
        """Flat slot [B] of absolute ``step`` [B] of ``env`` [B] (the step must still be in the ring)."""
        return torch.remainder(step, self.capacity_per_env) * self.num_envs + env

    def episode_bounds(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(first, last) absolute steps [B] of each slot's episode that are still in the ring.

        ``first`` is the episode start, or the oldest row if the ring overwrote it; ``last`` is the step that
        terminated or truncated the episode, or the newest step if the episode is still open.
        """
        env, t = self.slot_env(slots), self.tensors
        episode = self.field_at("episode_id", slots)  # [B]
        first = self.field_at("episode_start", slots).clamp(min=self.oldest_step)
        closed_end = t["episode_end"][torch.remainder(episode, self.capacity_per_env), env]
        last = torch.where(episode == t["current_episode"][env], self.steps - 1, closed_end)
        return first, last

    # -- state -----------------------------------------------------------------------------------------------------

    def _config(self) -> dict:
        return {
            "capacity_per_env": self.capacity_per_env,
            "num_envs": self.num_envs,
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "extra_fields": dict(self.extra_fields),
        }

    def state_dict(self) -> dict:
        return {**self._config(), "steps": self.steps, "tensors": {k: v.clone() for k, v in self.tensors.items()}}

    def load_state_dict(self, state: dict) -> None:
        saved = {key: state.get(key) for key in self._config()}
        if saved != self._config():
            show = lambda c: ", ".join(f"{k}={v}" for k, v in c.items())  # noqa: E731
            raise ValueError(f"replay state has {show(saved)} but this buffer has {show(self._config())}")
        for name, tensor in self.tensors.items():
            tensor.copy_(state["tensors"][name])
        self.steps = int(state["steps"])


class ReplayBuffer:
    """``ReplayBuffer(storage, sampler, transforms)``: write steps, draw slots, gather, transform (DESIGN.md 3)."""

    def __init__(
        self,
        storage: ReplayStorage,
        sampler: Sampler,
        transforms: Sequence[ReplayTransform] = (),
        gamma: float = 0.99,
        batch_size: int | None = None,
    ) -> None:
        if not (isinstance(gamma, (int, float)) and 0.0 <= gamma <= 1.0):
            raise ValueError(f"replay gamma must be in [0, 1], got {gamma!r}")
        if batch_size is not None and batch_size > storage.capacity:
            raise ValueError(
                f"replay capacity {storage.capacity} (capacity_per_env {storage.capacity_per_env} x num_envs "
                f"{storage.num_envs}) is smaller than batch_size {batch_size}"
            )
        rewriters = [t for t in transforms if getattr(t, "reward_rewrite", None)]
        if len(rewriters) > 1:  # relabelling recomputes a one-step reward over the n-step sum
            names = " and ".join(type(t).__name__ for t in rewriters)
            how = "; ".join(f"{type(t).__name__} {t.reward_rewrite}" for t in rewriters)
            raise ValueError(f"replay transforms {names} cannot be combined (each computes the reward anew: {how})")
        self.storage, self.sampler, self.transforms, self.gamma = storage, sampler, tuple(transforms), float(gamma)
        for transform in self.transforms:
            check = getattr(transform, "check", None)
            if check is not None:
                check(storage)

    @property
    def size(self) -> int:
        return self.storage.size

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage (and the sampler, if it reports ``nbytes``)."""
        return self.storage.nbytes + int(getattr(self.sampler, "nbytes", 0))

    def extend(self, obs, action, reward, next_obs, terminated, truncated, **extra) -> torch.Tensor:
        """Write one env step ([N, ...] each; next_obs = info['final_obs']) and register its slots [N]."""
        slots = self.storage.extend(obs, action, reward, next_obs, terminated, truncated, **extra)
        self.sampler.add(slots)
        return slots

    def extend_steps(self, obs, action, reward, next_obs, terminated, truncated, **extra) -> torch.Tensor:
        """Write L consecutive steps ([L, N, ...] each, L <= T) and register their slots [L, N]."""
        slots = self.storage.extend_steps(obs, action, reward, next_obs, terminated, truncated, **extra)
        self.sampler.add(slots.reshape(-1))
        return slots

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """A transformed batch of ``batch_size`` rows drawn by the sampler."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"replay batch_size must be an integer >= 1, got {batch_size!r}")
        if batch_size > self.storage.size:
            raise ValueError(f"replay holds {self.storage.size} transitions, fewer than batch_size {batch_size}")
        slots, weights = self.sampler.sample(batch_size, self.storage.size, generator)
        return self.gather(slots, weights, generator)

    def gather(
        self, slots: torch.Tensor, weights: torch.Tensor | None = None, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """The batch at given ``slots`` [B] (weights default to 1), with discount = gamma and the transforms run.

        Keys: obs, action, reward, next_obs, terminated, truncated, discount, weights, slots (and extra fields).
        """
        batch = self.storage.gather(slots)
        batch["discount"] = torch.full_like(batch["reward"], self.gamma)  # [B] 1-step bootstrap factor
        batch["weights"] = torch.ones_like(batch["reward"]) if weights is None else weights
        batch["slots"] = slots
        for transform in self.transforms:
            batch = transform(batch, self.storage, generator)
        return batch

    def update_priority(self, slots: torch.Tensor, td_error: torch.Tensor) -> None:
        """Forward |td_error| [B] as the new priority of ``slots`` [B] (the sampler adds eps and alpha)."""
        self.sampler.update_priority(slots, td_error.detach().abs())

    def state_dict(self) -> dict:
        return {"storage": self.storage.state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.storage.load_state_dict(state["storage"])
        self.sampler.load_state_dict(state["sampler"])
