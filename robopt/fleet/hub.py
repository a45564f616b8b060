"""The experience hub: robots' whole episodes in, checked, into one replay column; SAC/TD3 batches out.

Shapes: L transitions in one pushed batch, E episodes in it, D obs dim, A action dim, R robots, B batch.

An experience (what a worker sends; plain dict, torch tensors):
    robot int in [0, R), version int (the policy version that acted, <= the published one),
    obs [L, D] float, action [L, A] float, reward [L] float, next_obs [L, D] float (the true final obs where a
    row ended), terminated [L] bool, truncated [L] bool, optional success [E] bool (one flag per episode).
Its rows are whole episodes in time order: the last row ends an episode (terminated | truncated).

The storage is ``ReplayStorage(capacity, 1, D, A)``: ONE column. An accepted batch is written in time order with
``ReplayBuffer.extend_steps`` (N = 1; at most the ring's T rows per call), so each episode sits in contiguous
steps and the storage's episode bookkeeping (n-step windows, hindsight goals) never mixes robots;
``FleetSampler.tag`` then records robot and version per slot.
A batch that fails ``check_experience`` writes nothing and quarantines its robot; a quarantined robot's later
pushes are refused (and counted) until ``release``. The hub is plain Python and torch: it runs in the learner.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence

import torch

from robopt.buffers.replay import ReplayBuffer, ReplayStorage, ReplayTransform
from robopt.fleet.sampler import FleetSampler, _is_int, staleness_weights

logger = logging.getLogger(__name__)

__all__ = ["ExperienceHub", "FleetSampler", "check_experience", "hub_from_schedule", "staleness_weights"]

FLOAT_FIELDS = ("obs", "action", "reward", "next_obs")
BOOL_FIELDS = ("terminated", "truncated")
REQUIRED_KEYS = ("robot", "version", *FLOAT_FIELDS, *BOOL_FIELDS)
OPTIONAL_KEYS = ("success",)


def _shape(tensor: torch.Tensor) -> str:
    return str(list(tensor.shape))


def check_experience(exp, obs_dim: int, action_dim: int, num_robots: int, version: int) -> str | None:
    """None when ``exp`` is a valid experience (module docstring), else a one-line reason naming the robot."""
    if not isinstance(exp, Mapping):
        return f"an experience must be a dict, got {type(exp).__name__}"
    robot = exp.get("robot")
    if not _is_int(robot) or not 0 <= robot < num_robots:
        return f"unknown robot id {robot!r}; allowed: integers 0 .. {num_robots - 1}"
    who = f"robot {robot}"
    missing = [key for key in REQUIRED_KEYS if key not in exp]
    if missing:
        return f"{who}: experience is missing {', '.join(missing)}"
    extra = sorted(str(key) for key in exp if key not in REQUIRED_KEYS and key not in OPTIONAL_KEYS)
    if extra:
        return f"{who}: experience has unknown keys {', '.join(extra)}; allowed: {', '.join(REQUIRED_KEYS)}, success"
    acted = exp["version"]
    if not _is_int(acted) or acted < 0:
        return f"{who}: version must be an integer >= 0, got {acted!r}"
    if acted > version:
        return f"{who}: version {acted} is newer than the published {version}"
    present = [name for name in (*FLOAT_FIELDS, *BOOL_FIELDS, *OPTIONAL_KEYS) if name in exp]
    for name in present:
        tensor = exp[name]
        if not isinstance(tensor, torch.Tensor):
            return f"{who}: {name} must be a torch tensor, got {type(tensor).__name__}"
        if name in FLOAT_FIELDS and not tensor.is_floating_point():
            return f"{who}: {name} must be a floating-point tensor, got {tensor.dtype}"
        if name not in FLOAT_FIELDS and tensor.dtype != torch.bool:
            return f"{who}: {name} must be a bool tensor, got {tensor.dtype}"
    obs = exp["obs"]
    if obs.dim() != 2 or obs.shape[0] < 1:
        return f"{who}: obs has shape {_shape(obs)}, expected [L, {obs_dim}] with L >= 1 transitions"
    L = obs.shape[0]
    expected = {"obs": [L, obs_dim], "action": [L, action_dim], "reward": [L], "next_obs": [L, obs_dim],
                "terminated": [L], "truncated": [L]}  # fmt: skip
    for name, shape in expected.items():
        if list(exp[name].shape) != shape:
            return f"{who}: {name} has shape {_shape(exp[name])}, expected {shape}"
    for name in FLOAT_FIELDS:
        if not bool(torch.isfinite(exp[name].float()).all()):  # as float32, what the hub stores
            return f"{who}: non-finite {name} (NaN or inf)"
    done = exp["terminated"] | exp["truncated"]  # [L]
    if not bool(done[-1]):
        return f"{who}: the last row does not end an episode (a push holds whole episodes only)"
    if "success" in exp:
        episodes = int(done.sum())
        if list(exp["success"].shape) != [episodes]:
            return f"{who}: success has shape {_shape(exp['success'])}, expected [{episodes}] (one per episode)"
    return None


class ExperienceHub:
    """One-column replay fed by many robots: ``push`` whole episodes, ``publish`` versions, ``sample`` batches."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_robots: int,
        capacity: int,
        gamma: float,
        batch_size: int,
        transforms: Sequence[ReplayTransform] = (),
        own_robots=(),
        own_fraction: float = 0.0,
        max_lag: int | None = None,
        stale_mode: str = "drop",
        stale_decay: float = 0.5,
        device: torch.device | str = "cpu",
        fingerprint: str = "",
    ) -> None:
        self.obs_dim, self.action_dim, self.num_robots = obs_dim, action_dim, num_robots
        self.storage = ReplayStorage(capacity, 1, obs_dim, action_dim, device=device)
        self.sampler = FleetSampler(
            capacity, num_robots, own_robots, own_fraction, max_lag, stale_mode, stale_decay, device=device
        )
        self.replay = ReplayBuffer(self.storage, self.sampler, transforms, gamma=gamma, batch_size=batch_size)
        self.batch_size, self.fingerprint = batch_size, str(fingerprint)
        self.quarantined: set[int] = set()
        self.quarantine_reasons: dict[int, str] = {}  # robot -> the reason that quarantined it
        self.counters: dict = {
            "transitions": [0] * num_robots,  # accepted transitions per robot
            "episodes": [0] * num_robots,  # accepted episodes per robot
            "successes": [0] * num_robots,  # accepted episodes flagged successful per robot
            "rejected_batches": 0,  # batches that failed check_experience
            "quarantined_robots": 0,  # quarantine events
            "refused_pushes": 0,  # pushes of a robot already in quarantine
        }

    @property
    def size(self) -> int:
        return self.storage.size

    @property
    def version(self) -> int:
        return self.sampler.version

    # -- writing ---------------------------------------------------------------------------------------------------

    def push(self, exp) -> int:
        """Write a worker's batch of whole episodes; returns the transitions accepted (0 if rejected or refused)."""
        robot = exp.get("robot") if isinstance(exp, Mapping) else None
        if _is_int(robot) and int(robot) in self.quarantined:
            self.counters["refused_pushes"] += 1
            return 0
        reason = check_experience(exp, self.obs_dim, self.action_dim, self.num_robots, self.version)
        if reason is not None:
            self.counters["rejected_batches"] += 1
            if _is_int(robot) and 0 <= robot < self.num_robots:
                self.quarantined.add(int(robot))
                self.quarantine_reasons[int(robot)] = reason
                self.counters["quarantined_robots"] += 1
                logger.warning("fleet: robot %d quarantined: %s", robot, reason)
            else:
                logger.warning("fleet: batch rejected: %s", reason)
            return 0
        device = self.storage.device
        rows = {name: exp[name].to(device, torch.float32) for name in FLOAT_FIELDS}
        rows.update({name: exp[name].to(device) for name in BOOL_FIELDS})
        L, chunk = rows["obs"].shape[0], self.storage.capacity_per_env
        fields = (*FLOAT_FIELDS, *BOOL_FIELDS)
        slots = [  # [l, 1] each, in time order: the storage's episode bookkeeping sees whole episodes
            self.replay.extend_steps(*(rows[name][start : start + chunk].unsqueeze(1) for name in fields))
            for start in range(0, L, chunk)
        ]
        self.sampler.tag(torch.cat(slots).reshape(-1), int(robot), int(exp["version"]))
        robot = int(robot)
        self.counters["transitions"][robot] += L
        self.counters["episodes"][robot] += int((exp["terminated"] | exp["truncated"]).sum())
        if "success" in exp:
            self.counters["successes"][robot] += int(exp["success"].sum())
        return L

    def publish(self, version: int) -> None:
        """The learner's newest policy version (monotone); pushes may carry any version up to it."""
        self.sampler.set_version(version)

    def release(self, robot: int) -> None:
        """Lift ``robot``'s quarantine (e.g. after its worker was replaced); its later pushes are checked again."""
        self.quarantined.discard(int(robot))
        self.quarantine_reasons.pop(int(robot), None)

    # -- reading ---------------------------------------------------------------------------------------------------

    def sample(self, batch_size: int | None = None, generator: torch.Generator | None = None) -> dict:
        """A transformed batch (``ReplayBuffer.sample`` keys) of ``batch_size`` rows (default: the hub's)."""
        return self.replay.sample(self.batch_size if batch_size is None else batch_size, generator)

    def metrics(self) -> dict[str, float]:
        """Flat numbers for the run log (one host sync for the lag statistics)."""
        stats = self.sampler.lag_stats(self.size)
        transitions = self.counters["transitions"]
        return {
            "hub_size": float(self.size),
            "hub_version": float(self.version),
            "hub_transitions": float(sum(transitions)),
            "hub_episodes": float(sum(self.counters["episodes"])),
            "hub_robot_transitions_min": float(min(transitions)),
            "hub_robot_transitions_max": float(max(transitions)),
            "hub_rejected_batches": float(self.counters["rejected_batches"]),
            "hub_quarantined": float(len(self.quarantined)),
            "hub_refused_pushes": float(self.counters["refused_pushes"]),
            "hub_eligible": stats["eligible"],
            "hub_stale": stats["stale"],
            "hub_mean_lag": stats["mean_lag"],
            "hub_max_lag": stats["max_lag"],
        }

    # -- state -----------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "replay": self.replay.state_dict(),
            "counters": copy.deepcopy(self.counters),
            "quarantined": sorted(self.quarantined),
            "quarantine_reasons": dict(self.quarantine_reasons),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"hub checkpoint is from another config (fingerprint {state.get('fingerprint')!r}, "
                f"this run {self.fingerprint!r})"
            )
        self.replay.load_state_dict(state["replay"])
        self.counters = copy.deepcopy(state["counters"])
        self.quarantined = {int(robot) for robot in state["quarantined"]}
        self.quarantine_reasons = {int(robot): reason for robot, reason in state["quarantine_reasons"].items()}


def hub_from_schedule(
    schedule,
    gamma: float,
    env,
    num_robots: int,
    *,
    policy=None,
    own_robots=(),
    own_fraction: float = 0.0,
    max_lag: int | None = None,
    stale_mode: str = "drop",
    stale_decay: float = 0.5,
    device: torch.device | str | None = None,
    fingerprint: str = "",
) -> ExperienceHub:
    """The hub for an ``OffPolicySchedule`` (``algo.loop``): capacity ``buffer_size``, its ``batch_size`` and the
    transforms ``build_replay`` would use (n-step or hindsight over ``env``'s goals); ``env`` gives the dims and,
    for HER, ``compute_reward`` (a num_envs=1 env of the robots' task will do). ``device`` defaults to env's."""
    from robopt.algorithms.offpolicy import check_replay_policy, replay_transforms
    from robopt.options import ConfigError

    check_replay_policy(policy)
    if schedule.sampler != "uniform":
        raise ConfigError(
            f"algo.loop.sampler={schedule.sampler} is not supported with a fleet (its hub samples uniformly with "
            f"policy-lag control); set algo.loop.sampler=uniform"
        )
    return ExperienceHub(
        env.obs_dim,
        env.action_dim,
        num_robots,
        schedule.buffer_size,
        gamma,
        schedule.batch_size,
        replay_transforms(schedule, gamma, env),
        own_robots=own_robots,
        own_fraction=own_fraction,
        max_lag=max_lag,
        stale_mode=stale_mode,
        stale_decay=stale_decay,
        device=env.device if device is None else device,
        fingerprint=fingerprint,
    )
