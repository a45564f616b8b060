"""FERT: failure-guided retrieval of successful fleet experience for behaviour cloning.

Shapes: L episode length, D obs dim, A action dim, W window, C pool capacity (segments), Q queries (failed
episodes), k neighbours, M = Q * k supervising pairs.

When a robot's episode fails, the W observations before the failure retrieve the k most similar segments of
SUCCESSFUL experience from the whole fleet, and the actions of those segments supervise a behaviour-cloning
update (``fert_bc_loss``) of the policy. Decisions:

- Segment. The segment ending at step t of a successful episode is its window ``obs[t - W + 1 .. t]`` [W, D]
  and ``action[t]``, the action the robot took right after seeing the window's last observation.
- Supervising pair: the segment's LAST step, ``(obs[t], action[t])``. The query (``failure_windows``) is the W
  observations up to the failing robot's last decision, so the matched segment's last pair is "the action a
  successful robot took in a similar situation", the one to imitate instead of the action that failed. Earlier
  steps of the segment are not needed: at stride 1 every step of a successful episode ends a segment of its own.
- Padding. A window ending at t < W - 1 repeats the episode's first observation ``obs[0]`` in front, in the pool
  and in ``failure_windows`` alike: every step (early ones too) ends a segment, and a failed episode shorter than
  W matches the early segments of successful ones.
- Stride. Segments end at t = L - 1, L - 1 - stride, ... >= 0 (the last step, the one that succeeded, is always
  kept) and are written oldest first.
- Ring. ``capacity`` segments; the n-th segment ever written goes to slot ``n % capacity``, overwriting the
  oldest. ``query`` returns slots; the filled slots are always ``0 .. size - 1``.
- Normalization. A ``RunningNormalizer`` [D] merges every added episode's observations once (unpadded), also
  those of episodes whose segments have since left the ring. Windows are stored raw and normalized with the
  current statistics at query time (clipped to +-10 like the policy's normalizer); the supervising obs is
  returned raw (the policy normalizes with its own normalizer). ``normalize=False`` gives raw distances.
- Search. Exact Euclidean distance between normalized, flattened windows [W * D]: ``torch.cdist`` without the
  matrix-product shortcut (exact, so equal windows tie exactly) over ``chunk_size`` segments at a time, keeping
  the k best of each chunk; O(Q C W D): about 1 s for Q = 8, C = 1e5, W = 8, D = 17 on 2 shared CPU cores.
  Ties go to the NEWER segment (newer experience comes from a newer policy). A pool with fewer than k segments
  returns all of them ([Q, size]). There is no approximate (faiss) path: faiss is not a dependency and exact
  search is the only one.
"""

from __future__ import annotations

import math

import torch

from robopt.core.normalization import RunningNormalizer
from robopt.core.protocols import SupportsImitation, require
from robopt.core.shapes import check_shape


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"SuccessPool {name} must be an integer >= 1, got {value!r}")


def _padded(obs: torch.Tensor, window: int) -> torch.Tensor:
    """[L, D] -> [L + W - 1, D]: W - 1 copies of obs[0] in front."""
    check_shape("episode obs", obs, (None, None))
    if obs.shape[0] == 0:
        raise ValueError("episode obs: expected at least one row, got shape [0, *]")
    return torch.cat([obs[:1].expand(window - 1, -1), obs])


def episode_windows(obs: torch.Tensor, window: int) -> torch.Tensor:
    """obs [L, D] -> [L, W, D]: row t is obs[t - W + 1 .. t], front-padded by repeating obs[0]."""
    _positive("window", window)
    return _padded(obs, window).unfold(0, window, 1).transpose(1, 2)  # unfold: [L, D, W]


def failure_windows(obs: torch.Tensor, window: int) -> torch.Tensor:
    """obs [L, D] of a failed episode -> [1, W, D]: its last W observations (front-padded by obs[0] if L < W)."""
    _positive("window", window)
    return _padded(obs, window)[-window:].unsqueeze(0)


class SuccessPool:
    """A ring of ``capacity`` segments of successful episodes, searched by normalized window distance."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        window: int,
        capacity: int,
        device: torch.device | str = "cpu",
        stride: int = 1,
        normalize: bool = True,
    ) -> None:
        sizes = (obs_dim, action_dim, window, capacity, stride)
        for name, value in zip(("obs_dim", "action_dim", "window", "capacity", "stride"), sizes):
            _positive(name, value)
        self.obs_dim, self.action_dim, self.window, self.capacity, self.stride = sizes
        self.device = torch.device(device)
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize).to(self.device)
        self.windows = torch.zeros(capacity, window, obs_dim, device=self.device)  # [C, W, D] raw obs
        self.actions = torch.zeros(capacity, action_dim, device=self.device)  # [C, A] action at the last step
        self.written = 0  # segments ever written (slot of the n-th: n % C)
        self.episodes = 0  # successful episodes ever added

    @property
    def size(self) -> int:
        """Segments held (at most ``capacity``)."""
        return min(self.written, self.capacity)

    def __len__(self) -> int:
        return self.size

    def add_episode(self, obs: torch.Tensor, action: torch.Tensor) -> int:
        """Add a successful episode obs [L, D], action [L, A]; returns the number of segments written."""
        check_shape("SuccessPool.add_episode obs", obs, (None, self.obs_dim))
        check_shape("SuccessPool.add_episode action", action, (obs.shape[0], self.action_dim))
        if obs.shape[0] == 0:
            raise ValueError("SuccessPool.add_episode: the episode is empty (L = 0)")
        obs = obs.to(self.device, torch.float32)
        action = action.to(self.device, torch.float32)
        if not (torch.isfinite(obs).all() and torch.isfinite(action).all()):
            raise ValueError("SuccessPool.add_episode: obs or action holds a non-finite value")
        self.normalizer.update(obs)
        ends = torch.arange(obs.shape[0] - 1, -1, -self.stride, device=self.device).flip(0)  # [n] time order
        count = ends.shape[0]
        kept = ends[-self.capacity :]  # earlier ones would be overwritten within this very call
        first = self.written + count - kept.shape[0]
        slots = (first + torch.arange(kept.shape[0], device=self.device)) % self.capacity
        self.windows[slots] = episode_windows(obs, self.window)[kept]
        self.actions[slots] = action[kept]
        self.written += count
        self.episodes += 1
        return count

    def _normalized(self, windows: torch.Tensor) -> torch.Tensor:
        """[n, W, D] -> [n, W * D] normalized with the current statistics."""
        return self.normalizer(windows.reshape(-1, self.obs_dim)).reshape(windows.shape[0], -1)

    @torch.no_grad()
    def nearest(self, window_obs: torch.Tensor, k: int, chunk_size: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots [Q, k'] of the k' = min(k, size) nearest segments, nearest first, and their distances [Q, k']."""
        check_shape("SuccessPool.query window_obs", window_obs, (None, self.window, self.obs_dim))
        _positive("k", k)
        _positive("chunk_size", chunk_size)
        if self.size == 0:
            raise ValueError("SuccessPool is empty: no successful episode has been added yet")
        query = self._normalized(window_obs.to(self.device, torch.float32))  # [Q, W * D]
        # slots from the newest segment to the oldest: a stable sort then breaks ties towards the newer one
        order = (self.written - 1 - torch.arange(self.size, device=self.device)) % self.capacity
        best_distance, best_slot = [], []
        for slots in order.split(chunk_size):
            distance = torch.cdist(
                query, self._normalized(self.windows[slots]), compute_mode="donot_use_mm_for_euclid_dist"
            )  # [Q, c]
            distance, rank = torch.sort(distance, dim=1, stable=True)
            best_distance.append(distance[:, :k])
            best_slot.append(slots[rank[:, :k]])
        # chunks are in newest-first order, so a stable merge keeps the newer of tied segments first
        distance, rank = torch.sort(torch.cat(best_distance, 1), dim=1, stable=True)
        keep = min(k, self.size)
        return torch.cat(best_slot, 1).gather(1, rank[:, :keep]), distance[:, :keep]

    def query(self, window_obs: torch.Tensor, k: int, chunk_size: int = 4096) -> torch.Tensor:
        """window_obs [Q, W, D] -> slots [Q, min(k, size)] of the nearest successful segments, nearest first."""
        return self.nearest(window_obs, k, chunk_size)[0]

    def segment_ids(self, slots: torch.Tensor) -> torch.Tensor:
        """Slots -> the number of the segment each holds (the n-th ever written sits in slot n % capacity)."""
        slots = torch.as_tensor(slots, device=self.device).long()
        return self.written - 1 - (self.written - 1 - slots) % self.capacity

    def segments(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots (any shape, M in all) -> the supervising pairs (obs [M, D], action [M, A]): each last step."""
        indices = torch.as_tensor(indices, device=self.device).reshape(-1)
        if indices.is_floating_point() or indices.is_complex():
            raise ValueError(f"SuccessPool.segments: indices must be integers, got {indices.dtype}")
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self.size):
            raise ValueError(f"SuccessPool.segments: indices must be in [0, {self.size}), the filled slots")
        indices = indices.long()
        return self.windows[indices, -1].clone(), self.actions[indices].clone()

    def _config(self) -> dict:
        return {
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "window": self.window,
            "capacity": self.capacity,
            "stride": self.stride,
            "normalize": self.normalizer.enabled,
        }

    def state_dict(self) -> dict:
        size = self.size  # only the filled slots 0 .. size - 1
        return {
            **self._config(),
            "written": self.written,
            "episodes": self.episodes,
            "windows": self.windows[:size].clone(),
            "actions": self.actions[:size].clone(),
            "normalizer": self.normalizer.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        saved = {key: state.get(key) for key in self._config()}
        if saved != self._config():
            show = lambda c: ", ".join(f"{k}={v}" for k, v in c.items())  # noqa: E731
            raise ValueError(f"SuccessPool state has {show(saved)} but this pool has {show(self._config())}")
        size = min(int(state["written"]), self.capacity)
        self.windows.zero_()
        self.actions.zero_()
        self.windows[:size] = state["windows"].to(self.device)
        self.actions[:size] = state["actions"].to(self.device)
        self.normalizer.load_state_dict(state["normalizer"])
        self.written, self.episodes = int(state["written"]), int(state["episodes"])


def fert_batch(pool: SuccessPool, failed_episodes: list[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Failed episodes' obs (each [L_i, D]) -> supervising (obs [M, D], action [M, A]), M = Q * min(k, size).

    Rows are grouped by failed episode (in the given order), nearest neighbour first; a segment retrieved by two
    failures appears twice. Empty pool or no failed episode: ValueError (check ``len(pool)`` first).
    """
    if len(failed_episodes) == 0:
        raise ValueError("fert_batch: no failed episode given")
    windows = torch.cat([failure_windows(obs.to(pool.device), pool.window) for obs in failed_episodes])
    return pool.segments(pool.query(windows, k))


def fert_bc_loss(
    policy, obs: torch.Tensor, action: torch.Tensor, weights: torch.Tensor | None = None, normalized: bool = True
) -> torch.Tensor:
    """Scalar: the mean of ``policy.imitation_loss(obs [B, D], action [B, A])`` over B.

    With ``weights`` [B] (>= 0) it is the weighted mean sum(w l) / sum(w) (positive sum; equal weights give the
    plain mean), or with ``normalized=False`` mean(w l) (a zero sum gives 0: nothing to clone). Works with every
    policy kind that has ``imitation_loss`` (Gaussian, flow, diffusion).
    """
    require(policy, SupportsImitation, "FERT", "it clones the retrieved successful actions")
    check_shape("fert_bc_loss obs", obs, (None, None))
    check_shape("fert_bc_loss action", action, (obs.shape[0], None))
    if obs.shape[0] == 0:
        raise ValueError("fert_bc_loss: empty batch (B = 0)")
    loss = policy.imitation_loss(obs, action)  # [B]
    if weights is None:
        return loss.mean()
    check_shape("fert_bc_loss weights", weights, (obs.shape[0],))
    if bool((weights < 0).any()) or (normalized and not float(weights.sum()) > 0.0):
        raise ValueError("fert_bc_loss weights must be >= 0" + (" with a positive sum" if normalized else ""))
    weights = weights.to(loss)
    return (weights * loss).sum() / weights.sum() if normalized else (weights * loss).mean()


WEIGHTINGS = ("none", "binary", "exp")  # FertTargets' weighting of a retrieved pair by its advantage
EXP_WEIGHT_MAX = 20.0  # exp weighting: exp(A / temperature) clipped here (as advantage-weighted regression)


class FertTargets:
    """The learner's FERT state: the pool of successful segments and the supervising pairs failures retrieved.

    ``add(obs [L, D], action [L, A], success)``: a successful episode feeds the pool; a failed one retrieves the
    ``k`` nearest successful segments, whose pairs join the targets (the newest ``max_targets`` are kept).
    ``loss(policy, batch_size, generator, q)``: the cloning loss on ``batch_size`` targets drawn uniformly, or None
    while there are none. The variants (each off by default, today's FERT-lite then):

    - ``min_episodes``: failures retrieve nothing until the pool holds that many successful episodes;
    - ``max_distance``: only segments within that RMS distance per normalized window entry, ||q - x|| / sqrt(W D),
      are retrieved (0: any);
    - ``unique``: a segment is a target once (retrieved again, its pair moves to the newest end);
    - ``weighting``: each drawn pair's loss is weighted by the advantage the learner's critic ``q(obs, action) ->
      [B]`` gives its action over the policy's deterministic one, A = q(s, a) - q(s, pi(s)): ``binary`` 1[A > 0],
      ``exp`` min(exp(A / temperature), 20); the loss is then mean(w l), so pairs the critic thinks no better than
      the policy's own action are not cloned (``none``: the plain mean).
    """

    def __init__(
        self,
        pool: SuccessPool,
        k: int,
        max_targets: int = 4096,
        min_episodes: int = 1,
        max_distance: float = 0.0,
        unique: bool = False,
        weighting: str = "none",
        temperature: float = 1.0,
    ) -> None:
        for name, value in (("k", k), ("max_targets", max_targets), ("min_episodes", min_episodes)):
            _positive(name, value)
        if not 0.0 <= max_distance < float("inf"):
            raise ValueError(f"FERT max_distance must be a finite number >= 0 (0: any distance), got {max_distance}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"FERT weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
        if not 0.0 < temperature < float("inf"):
            raise ValueError(f"FERT temperature must be a finite number > 0, got {temperature}")
        self.pool, self.k, self.max_targets, self.min_episodes = pool, k, max_targets, min_episodes
        self.max_distance, self.unique, self.weighting, self.temperature = max_distance, unique, weighting, temperature
        self.obs: torch.Tensor | None = None  # [M, D]
        self.action: torch.Tensor | None = None  # [M, A]
        self.ids: torch.Tensor | None = None  # [M] the pool's segment number of each target
        self.last_weight = torch.tensor(float("nan"))  # mean weight of the last weighted loss (a tensor: no sync)

    def __len__(self) -> int:
        return 0 if self.obs is None else self.obs.shape[0]

    def add(self, obs: torch.Tensor, action: torch.Tensor, success: bool) -> None:
        pool = self.pool
        if success:
            pool.add_episode(obs, action)
            return
        if len(pool) == 0 or pool.episodes < self.min_episodes:
            return
        slots, distance = pool.nearest(failure_windows(obs.to(pool.device), pool.window), self.k)  # [1, k']
        slots, distance = slots[0], distance[0]
        if self.max_distance > 0.0:
            slots = slots[distance <= self.max_distance * math.sqrt(pool.window * pool.obs_dim)]
        if slots.numel() == 0:
            return
        ids = pool.segment_ids(slots)
        new_obs, new_action = pool.segments(slots)
        if self.obs is not None:
            keep = ~torch.isin(self.ids, ids) if self.unique else torch.ones_like(self.ids, dtype=torch.bool)
            new_obs, new_action = torch.cat([self.obs[keep], new_obs]), torch.cat([self.action[keep], new_action])
            ids = torch.cat([self.ids[keep], ids])
        self.obs, self.action, self.ids = (
            new_obs[-self.max_targets :],
            new_action[-self.max_targets :],
            ids[-self.max_targets :],
        )

    def loss(self, policy, batch_size: int, generator: torch.Generator | None = None, q=None) -> torch.Tensor | None:
        if self.obs is None:
            return None
        device = self.obs.device
        pick = torch.randint(self.obs.shape[0], (batch_size,), generator=generator, device=device)
        obs, action = self.obs[pick], self.action[pick]
        if self.weighting == "none":
            return fert_bc_loss(policy, obs, action)
        if q is None:
            raise ValueError(f"FERT weighting={self.weighting} needs the learner's critic (q)")
        with torch.no_grad():
            advantage = q(obs, action) - q(obs, policy.act(obs, deterministic=True)[0])  # [B]
            if self.weighting == "binary":
                weights = (advantage > 0).to(obs.dtype)
            else:
                weights = torch.exp(advantage / self.temperature).clamp(max=EXP_WEIGHT_MAX)
        self.last_weight = weights.mean()
        return fert_bc_loss(policy, obs, action, weights, normalized=False)

    def state_dict(self) -> dict:
        return {"pool": self.pool.state_dict(), "obs": self.obs, "action": self.action, "ids": self.ids}

    def load_state_dict(self, state: dict) -> None:
        self.pool.load_state_dict(state["pool"])
        self.obs, self.action = state["obs"], state["action"]
        ids = state.get("ids")  # checkpoints from before ``unique``: every target counts as its own segment
        if ids is None and self.obs is not None:
            ids = -1 - torch.arange(self.obs.shape[0], device=self.obs.device)
        self.ids = ids
