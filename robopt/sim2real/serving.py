"""Serving a simulated robot (``robopt sim-robot``, ``--robot sim:...``): the env behind it, and what the servers
share (UDP: ``server.py``; ROS 2 topics: ``topic_server.py``): the result, the env's control period, argument checks.

The env: a source that is a YAML config file or a run directory builds that config's env (a robot from its
description, ``env.id: robot``, needs its ``robot`` and ``task`` sections; any other config works the same);
anything else is an env id for ``make_env``. A config's env is the robot's side of it (``build_env(policy_side=
False)``: its ``env.observe`` selection, no observation history window, no action chunks: the robot sends raw
observations and takes one action per tick). One env row on the CPU (torch and the simulators are imported inside
``make_sim_env``, never when the torch-free runtime imports this module).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

COMMAND_TIMEOUT_PERIODS = 10  # default command timeout, in control periods


@dataclass
class ServeResult:
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_successes: list[bool] = field(default_factory=list)  # envs that report is_success (a task's success)
    steps: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        mean = float(np.mean(self.episode_returns)) if self.episode_returns else math.nan
        c = Counter(self.counters)
        seen = ("sent", "received", "hello", "clipped", "lost", "peer_changed", "resync", "overrun", "command_timeout")
        dropped = {k: v for k, v in sorted(c.items()) if k not in seen and v}
        dropped_text = ", ".join(f"{k}={v}" for k, v in dropped.items()) or "none"
        successes = self.episode_successes
        success = f", success {sum(successes)} of {len(successes)}" if successes else ""
        return (
            f"sim-robot: episodes {len(self.episode_returns)}, mean return {mean:.3f}{success}, steps {self.steps}, "
            f"packets sent {c['sent']}, received {c['received']} (hello {c['hello']}), seq gaps {c['lost']}, "
            f"command timeouts {c['command_timeout']}, dropped: {dropped_text}"
        )


def env_period(env) -> float:
    """The env's control period in seconds (``env.dt``, or the first Gymnasium env's ``unwrapped.dt``)."""
    dt = getattr(env, "dt", None)
    if dt is None and getattr(env, "envs", None):
        dt = getattr(env.envs[0].unwrapped, "dt", None)
    if dt is None:
        raise ValueError(f"{env.env_id} does not state its control period; give --period SECONDS")
    return float(dt)


def parse_peer(peer: str) -> tuple[str, int]:
    host, _, port = peer.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"--peer must be HOST:PORT with a port in [1, 65535], got {peer!r}")
    return host.strip("[]"), int(port)


def check_number(name: str, value, low: float, high: float = math.inf, low_open: bool = False) -> None:
    if value is None:
        return
    ok = isinstance(value, (int, float)) and math.isfinite(value) and value <= high
    ok = ok and (value > low if low_open else value >= low)
    if not ok:
        bound = f"> {low}" if low_open else f">= {low}"
        raise ValueError(f"{name} must be a finite number {bound}" + (f" and < {high}" if high < math.inf else ""))


def run_deadline(duration: float | None, episodes: int | None) -> float:
    """Check a server's ``--duration`` and ``--episodes``; the monotonic time to stop at (inf without a duration)."""
    check_number("--duration", duration, 0.0, low_open=True)
    if episodes is not None and (not isinstance(episodes, int) or episodes < 1):
        raise ValueError(f"--episodes must be an integer >= 1, got {episodes!r}")
    return math.inf if duration is None else time.monotonic() + duration


def serve_and_close(server, duration: float | None, episodes: int | None, stop) -> ServeResult:
    """Run a simulated-robot server until it ends, close it, print (its ``log``) the summary."""
    try:
        result = server.run(duration, episodes, stop)
    finally:
        server.close()
    server.log(result.summary())
    return result


def is_config_source(source: str) -> bool:
    """Whether ``source`` names a config file (.yaml, .yml) or a run directory (holding config.yaml)."""
    path = Path(source)
    return path.suffix in (".yaml", ".yml") or (path.is_dir() and (path / "config.yaml").is_file())


def make_sim_env(source: str):
    """A one-row env for a simulated robot from an env id, a config file or a run directory.

    The link a run trained under (``task.link``: late and lost measurements; ``randomization.action_delay``) is left
    out: a simulated robot's link is its own (its latency, loss and delay options), not a second one on top."""
    if not is_config_source(source):
        from robopt.envs import make_env

        return make_env(source, 1)
    from robopt.build import build_env
    from robopt.experiment import load_config, load_run_config

    path = Path(source)
    config = load_run_config(path) if path.is_dir() else load_config(path)
    return build_env(without_training_link(replace(config, device="cpu")), num_envs=1, policy_side=False)


def without_training_link(config):
    """``config`` without ``task.link`` and ``env.kwargs.randomization.action_delay`` (a robot task's training link)."""
    randomization = dict(config.env.kwargs.get("randomization") or {})
    if "action_delay" in randomization:
        randomization.pop("action_delay")
        config = replace(config, env=replace(config.env, kwargs={**config.env.kwargs, "randomization": randomization}))
    task = config.sections.get("task")
    link = getattr(task, "link", None)
    if link is not None and link.active:
        from robopt.envs.robot.link import LinkConfig

        config = replace(config, sections={**config.sections, "task": replace(task, link=LinkConfig())})
    return config
