"""The ``fleet`` config section and each robot's fixed dynamics.

``FleetConfig`` is the ``fleet`` section of an experiment config (listed by the composition root
``robopt.experiment``); ``num_robots > 0`` makes a SAC/TD3/DDPG run a run of kind ``fleet`` (``fleet_kind``, the
section's ``runs_as``), whose loop ``robopt.fleet.build`` builds.

Robot dynamics: robot r draws FIXED values from ``fleet.randomization`` with ``numpy.random.SeedSequence([seed,
r])``, one per knob in sorted key order: a scale range (body_mass, geom_friction, dof_damping, actuator_gain /
motor_strength) gives one U(low, high) scale v and the robot's env gets ``[v, v]`` (every element of that
parameter scaled by v, for the robot's whole life); ``action_delay`` gives one integer d ~ U{low..high}, ``[d, d]``.
The per-step knobs (action_noise, obs_noise, push_*) are passed through unchanged: they are noise by nature.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from robopt.config import ConfigError, config_to_dict
from robopt.options import option

STALE_MODES = ("drop", "weight")  # what FleetSampler does with experience older than fleet.max_lag
SCALE_KNOBS = ("body_mass", "geom_friction", "dof_damping", "actuator_gain", "motor_strength")
LEARNERS = ("ddpg", "sac", "td3")  # the off-policy algorithms a fleet trains


@dataclass(frozen=True)
class FleetConfig:
    num_robots: int = option(0, "robots (Ray actors, one env each) feeding one off-policy learner; 0: no fleet")
    address: str = option("", "Ray cluster: '' starts a local Ray in this process; 'auto' or 'ray://host:port'")
    connect_timeout_s: float = option(30.0, "seconds to wait for an existing Ray cluster before giving up")
    num_cpus: int = option(0, "CPUs of the local Ray started with address '' (0: all of this machine's)")
    cpus_per_robot: float = option(1.0, "CPUs Ray reserves for each robot actor (fractions share a core)")
    steps_per_robot: int = option(0, "env steps each robot collects in the run (0: total_steps / num_robots)")
    collect_steps: int = option(50, "env steps per collect call of a robot (the granularity of its pushes)")
    publish_interval: int = option(10, "gradient updates between published policy versions")
    randomization: dict = option(
        {}, "ranges as env.kwargs.randomization takes them; each robot draws FIXED values from them (its seed)"
    )
    heldout_robots: tuple[int, ...] = option((), "robots whose experience is only evaluated, never learned from")
    own_robots: tuple[int, ...] = option((), "robots whose experience gets own_fraction of every batch")
    own_fraction: float = option(0.0, "share of every batch drawn from own_robots' experience, in [0, 1]")
    max_lag: int | None = option(None, "drop experience more than this many policy versions old (null: keep)")
    stale_mode: str = option(
        "drop", "old experience: drop it (max_lag) or weight it by stale_decay ** lag", STALE_MODES
    )
    stale_decay: float = option(0.5, "stale_mode=weight: weight factor per version of lag, in (0, 1]")
    max_restarts: int = option(3, "times Ray restarts a robot whose process died (-1: always)")
    fert: bool = option(False, "failure-guided retrieval: failed episodes clone nearby successful actions")
    fert_window: int = option(8, "fert: observations before a failure that retrieve successful segments")
    fert_k: int = option(4, "fert: successful segments retrieved per failed episode")
    fert_coef: float = option(0.1, "fert: weight of the behaviour-cloning loss on the actor")
    fert_capacity: int = option(50_000, "fert: successful segments kept (ring)")
    fert_min_episodes: int = option(1, "fert: successful episodes in the pool before failures retrieve")
    fert_max_distance: float = option(
        0.0, "fert: retrieve only segments within this RMS distance per normalized window entry (0: any)"
    )
    fert_unique: bool = option(False, "fert: a retrieved segment is a cloning target once, not once per retrieval")
    fert_weighting: str = option(
        "none",
        "fert: weight each cloned pair by the critic's advantage of its action over the policy's "
        "(binary: 1[A > 0]; exp: min(exp(A / fert_temperature), 20))",
        ("none", "binary", "exp"),
    )
    fert_temperature: float = option(1.0, "fert: temperature of fert_weighting=exp, > 0")
    fert_schedule: str = option(
        "constant", "fert: fert_coef constant, or decaying linearly to 0 over the run", ("constant", "linear")
    )

    def __post_init__(self) -> None:
        n = self.num_robots
        if n < 0:
            raise ValueError(f"num_robots must be >= 0 (0: no fleet), got {n}")
        for name in (
            "collect_steps",
            "publish_interval",
            "fert_window",
            "fert_k",
            "fert_capacity",
            "fert_min_episodes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps_per_robot < 0 or self.num_cpus < 0:
            raise ValueError(f"steps_per_robot and num_cpus must be >= 0, got {self.steps_per_robot}, {self.num_cpus}")
        if not self.connect_timeout_s > 0 or not self.cpus_per_robot > 0:
            raise ValueError(
                f"connect_timeout_s and cpus_per_robot must be > 0, got {self.connect_timeout_s}, {self.cpus_per_robot}"
            )
        if not 0.0 <= self.own_fraction <= 1.0:
            raise ValueError(f"own_fraction must be in [0, 1], got {self.own_fraction}")
        if not 0.0 < self.stale_decay <= 1.0:
            raise ValueError(f"stale_decay must be in (0, 1], got {self.stale_decay}")
        if self.max_lag is not None and self.max_lag < 0:
            raise ValueError(f"max_lag must be >= 0 or null, got {self.max_lag}")
        if self.max_restarts < -1 or self.fert_coef < 0:
            raise ValueError(
                f"max_restarts must be >= -1 and fert_coef >= 0, got {self.max_restarts}, {self.fert_coef}"
            )
        if not 0.0 <= self.fert_max_distance < math.inf or not 0.0 < self.fert_temperature < math.inf:
            raise ValueError(
                f"fert_max_distance must be finite and >= 0 (0: any) and fert_temperature finite and > 0, "
                f"got {self.fert_max_distance}, {self.fert_temperature}"
            )
        if self.address and not (self.address == "auto" or ":" in self.address):
            raise ValueError(f"address={self.address!r}: use '', 'auto', 'ray://host:port' or 'host:port'")
        if self.max_lag is not None and self.stale_mode == "weight":
            raise ValueError(
                "max_lag drops old experience (stale_mode=drop); stale_mode=weight keeps it all and "
                "weights it by stale_decay ** lag: set one or the other"
            )
        if self.own_robots and self.own_fraction == 0:
            raise ValueError(f"own_robots {list(self.own_robots)} needs own_fraction > 0 (their share of a batch)")
        if self.own_fraction > 0 and not self.own_robots:
            raise ValueError(f"own_fraction={self.own_fraction} needs own_robots (robot ids)")
        if n > 0:
            self._check_robot_ids()

    def _check_robot_ids(self) -> None:
        n = self.num_robots
        for name in ("heldout_robots", "own_robots"):
            ids = getattr(self, name)
            bad = [robot for robot in ids if not 0 <= robot < n]
            if bad:
                raise ValueError(f"{name}: robot ids {bad} are outside 0 .. {n - 1} (num_robots={n})")
            if len(set(ids)) != len(ids):
                raise ValueError(f"{name}: robot ids repeat ({list(ids)})")
        both = sorted(set(self.heldout_robots) & set(self.own_robots))
        if both:
            raise ValueError(f"robots {both} are both held out and own robots (held-out data is never learned)")
        if len(self.heldout_robots) >= n:
            raise ValueError(f"heldout_robots holds every robot ({n}); at least one must feed the learner")

    @property
    def training_robots(self) -> tuple[int, ...]:
        """Robots whose experience goes into the hub."""
        return tuple(robot for robot in range(self.num_robots) if robot not in self.heldout_robots)


def _seed_words(seed: int, *words: int) -> list[int]:
    return [seed % 2**63, *words]


def robot_randomization(ranges: dict, seed: int, robot: int) -> dict:
    """Robot ``robot``'s fixed randomization: degenerate ranges [v, v] drawn from ``ranges`` (module doc).

    ``ranges`` must already be valid (``Randomization.from_config``); the result is a valid config as well.
    """
    rng = np.random.default_rng(np.random.SeedSequence(_seed_words(seed, robot)))
    fixed = {}
    for key in sorted(ranges):
        value = ranges[key]
        if key in SCALE_KNOBS:
            scale = float(rng.uniform(float(value[0]), float(value[1])))
            fixed[key] = [scale, scale]
        elif key == "action_delay":
            delay = int(rng.integers(int(value[0]), int(value[1]) + 1))
            fixed[key] = [delay, delay]
        else:
            fixed[key] = value
    return fixed


def robot_seed(seed: int, robot: int, life: int = 0) -> int:
    """The env and action seed of ``robot`` in its ``life``-th start (0: the run's start; resumes count up)."""
    return int(np.random.SeedSequence(_seed_words(seed, robot, 1, life)).generate_state(1)[0])


def hub_fingerprint(config) -> str:
    """What a saved hub must match to be loaded: task, env options, robots and their dynamics, replay layout."""
    data = config_to_dict(config)
    loop = {key: data["algo"]["loop"][key] for key in ("buffer_size", "n_step", "her_strategy", "her_k")}
    fleet = {key: data["fleet"][key] for key in ("num_robots", "randomization", "heldout_robots")}
    key = {"env": data["env"], "seed": data["seed"], "fleet": fleet, "loop": loop, "gamma": data["algo"]["gamma"]}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def robot_env_kwargs(config, robot: int) -> dict:
    """env.kwargs for ``robot``: the config's, with the robot's fixed randomization (module doc)."""
    kwargs = dict(config.env.kwargs)
    if config.fleet.randomization:
        kwargs["randomization"] = robot_randomization(config.fleet.randomization, config.seed, robot)
    return kwargs


def check_fleet_config(config) -> int:
    """A fleet run's checks that need no env and no Ray (one-line ConfigErrors); returns steps per robot."""
    from robopt.envs.randomization import Randomization

    fleet, algo_name = config.fleet, config_to_dict(config)["algo"]["name"]
    if algo_name not in LEARNERS:
        raise ConfigError(
            f"fleet.num_robots={fleet.num_robots} needs an off-policy learner (algo.name: ddpg, sac, "
            f"td3), not algo.name={algo_name}"
        )
    if config.critic.privileged:
        raise ConfigError(f"critic.privileged=true is for the on-policy value critic, not a fleet of {algo_name}")
    if fleet.randomization and "randomization" in config.env.kwargs:
        raise ConfigError(
            "give robot dynamics in fleet.randomization (each robot draws fixed values), not also in "
            "env.kwargs.randomization"
        )
    try:
        Randomization.from_config(fleet.randomization)
        for robot in range(fleet.num_robots):
            Randomization.from_config(robot_env_kwargs(config, robot).get("randomization"))
    except ValueError as error:
        raise ConfigError(f"fleet.randomization: {error}") from None
    return fleet.steps_per_robot or math.ceil(config.total_steps / fleet.num_robots)


def fleet_kind(config) -> str | None:
    """The run kind the ``fleet`` section claims: ``fleet`` when robots are configured."""
    return "fleet" if config.fleet.num_robots > 0 else None
