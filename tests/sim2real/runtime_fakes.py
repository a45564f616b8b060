"""Fakes shared by the sim-to-real tests: a constant policy, a scripted robot, sidecars, a safety layer, polling."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import numpy as np

from robopt.sim2real.safety import SafetyLayer
from robopt.sim2real.sidecar import Sidecar

LOW, HIGH = np.array([-1.0, -2.0]), np.array([1.0, 2.0])


def constant(value):
    """A fake policy: the same action whatever the observation; it records what it was given."""

    def policy(obs):
        policy.seen.append(np.array(obs))
        return np.array(value, dtype=np.float64)

    policy.seen = []
    return policy


def layer(policy=None, **kwargs) -> SafetyLayer:
    kwargs.setdefault("stale_timeout", 0.25)
    return SafetyLayer(policy or constant([0.5, -0.5]), 3, LOW, HIGH, **kwargs)


GOOD = np.array([0.1, 0.2, 0.3])


def sidecar_for(obs_dim=3, action_dim=2, period=0.01, **kwargs) -> Sidecar:
    return Sidecar(
        policy_kind="gaussian",
        env_id="fake",
        obs_dim=obs_dim,
        action_dim=action_dim,
        action_low=[-1.0] * action_dim,
        action_high=[1.0] * action_dim,
        control_period=period,
        files={"onnx": "policy.onnx"},
        **kwargs,
    )


class ScriptedRobot:
    """A fake robot: ``read`` replays a script of (obs, time) (or raises what the script holds)."""

    def __init__(self, script, obs_dim=3, action_dim=2):
        self.obs_dim, self.action_dim, self.script = obs_dim, action_dim, list(script)
        self.counters, self.episode_returns, self.sent, self.closed = {"dropped": 0}, [], [], False

    def read(self):
        item = self.script.pop(0) if self.script else (GOOD, 0.0)
        if isinstance(item, BaseException):
            raise item
        return item

    def send(self, action):
        self.sent.append(np.array(action))

    def close(self):
        self.closed = True


def pendulum_sidecar(period: float = 0.05, **kwargs) -> Sidecar:
    """The sidecar of a Pendulum-v1 policy (D = 3, A = 1, torque in [-2, 2]) with an ONNX model."""
    return Sidecar(
        policy_kind="gaussian",
        env_id="Pendulum-v1",
        obs_dim=3,
        action_dim=1,
        action_low=[-2.0],
        action_high=[2.0],
        control_period=period,
        files={"onnx": "policy.onnx"},
        **kwargs,
    )


def wait_until(condition, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.002)
    return condition()


def untrained_run(config, run_dir, module: str):
    """A run directory holding ``config`` and an untrained policy whose ``module`` parameters are redrawn from
    N(0, 0.5^2) (far from zero, so the action reads every input); returns the policy (eval mode)."""
    import torch
    import yaml

    from robopt.build import build_env, build_policy
    from robopt.checkpoint import LAST_CHECKPOINT, save_checkpoint
    from robopt.config import config_to_dict

    torch.manual_seed(0)
    env = build_env(config)
    policy = build_policy(config, env)
    env.close()
    with torch.no_grad():
        for parameter in getattr(policy, module).parameters():
            parameter.normal_(0.0, 0.5)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
    save_checkpoint(run_dir / LAST_CHECKPOINT, {"loop": {"policy": policy.state_dict()}})
    return policy.eval()


@contextmanager
def serving(server, duration: float = 10.0):
    """``server.run`` (a sim-robot server) in a thread for the block: yields (stop event, thread, results); after it,
    the server is stopped, joined and closed."""
    stop, results = threading.Event(), []
    thread = threading.Thread(target=lambda: results.append(server.run(duration=duration, stop=stop)))
    thread.start()
    try:
        yield stop, thread, results
    finally:
        stop.set()
        thread.join(timeout=5.0)
        server.close()
