"""The robot link the deploy runtime talks to, and ``--robot`` specs that build one.

Torch-free (numpy, stdlib). Shapes: D obs dim, A action dim. A robot hands out its latest observation [D] with the
time it was measured (``time.monotonic()`` seconds of this process) and takes actions [A]; it never raises on bad
data, it drops and counts it. Specs:
    ``sim:ENV_ID[?noise=0.01&latency_ms=10&delay_ticks=1&drop=0.01&seed=0]``  a simulated robot (SimRobot, torch);
        ENV_ID may be a config file or a run directory (a robot from its description: ``sim:configs/<robot>.yaml``)
    ``udp://HOST:PORT``                                                        a robot behind the UDP protocol
    ``ros2://[DOMAIN_ID]``                                                     ROS 2 topics over DDS (Cyclone DDS)
    ``zenoh://[ENDPOINT]``                                                     ROS 2 topics over Zenoh
The ROS 2 and Zenoh robots read the deploy config's ``robot`` section (``robopt.sim2real.ros_map``).
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from robopt.sim2real.sidecar import DeployError, Sidecar

SIM_OPTIONS = {"noise": float, "latency_ms": float, "delay_ticks": int, "drop": float, "seed": int}


@runtime_checkable
class RobotInterface(Protocol):
    """What the control loop needs from a robot (real, simulated or behind a network link)."""

    obs_dim: int
    action_dim: int
    counters: dict[str, int]  # events this robot link dropped or saw, e.g. {"bad_checksum": 3, "dropped": 10}
    episode_returns: list[float]  # returns of episodes the robot finished (simulated robots; [] for real ones)

    def read(self) -> tuple[np.ndarray | None, float]:
        """Latest observation ([D] float64 copy) and when it was measured (``time.monotonic()``); (None, nan) before
        anything arrived. Never raises on bad data: drops it and counts it."""
        ...

    def send(self, action: np.ndarray) -> None:
        """Send action [A]; never raises: a closed or failing link counts ``send_failed``."""
        ...

    def close(self) -> None: ...


def _parse_sim_options(spec: str, query: str) -> dict[str, float | int]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise DeployError(f"--robot {spec!r}: options must read key=value&key=value") from None
    options: dict[str, float | int] = {}
    for key, raw in pairs:
        if key not in SIM_OPTIONS:
            raise DeployError(f"--robot {spec!r}: unknown option {key!r}; allowed: {', '.join(SIM_OPTIONS)}")
        try:
            value = SIM_OPTIONS[key](raw)
        except ValueError:
            raise DeployError(f"--robot {spec!r}: {key}={raw!r} is not {SIM_OPTIONS[key].__name__}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise DeployError(f"--robot {spec!r}: {key} must be finite, got {raw!r}")
        options[key] = value
    if options.get("noise", 0.0) < 0 or options.get("latency_ms", 0.0) < 0 or options.get("delay_ticks", 0) < 0:
        raise DeployError(f"--robot {spec!r}: noise, latency_ms and delay_ticks must be >= 0")
    if not 0.0 <= options.get("drop", 0.0) < 1.0:
        raise DeployError(f"--robot {spec!r}: drop is a probability in [0, 1), got {options['drop']}")
    return options


def _sim_robot(spec: str, sidecar: Sidecar, realtime: bool, period: float | None = None) -> RobotInterface:
    env_id, _, query = spec[len("sim:") :].partition("?")
    if not env_id:
        raise DeployError(f"--robot {spec!r}: missing env id, e.g. sim:{sidecar.env_id}")
    options = _parse_sim_options(spec, query)
    try:
        from robopt.sim2real.simrobot import SimRobot  # torch and the simulators: only for simulated robots
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith(("robopt", "torch", "mujoco", "gymnasium")):
            raise
        raise DeployError(
            f"--robot {spec!r}: this deploy-only package drives udp://, ros2:// and zenoh:// robots; the simulated "
            "robot lives in the full robopt (torch and the simulators): run `robopt sim-robot ENV --port PORT` "
            "there and deploy here with --robot udp://HOST:PORT"
        ) from None

    try:
        robot = SimRobot(
            env_id,
            period or sidecar.control_period,
            obs_noise=options.get("noise", 0.0),
            latency_ms=options.get("latency_ms", 0.0),
            delay_ticks=options.get("delay_ticks", 0),
            drop=options.get("drop", 0.0),
            seed=options.get("seed", 0),
            realtime=realtime,
        )
    except Exception as error:  # an unknown id, a missing simulator dependency...: the spec cannot be served
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DeployError(f"--robot {spec!r}: cannot build the simulated robot: {message}") from None
    if (robot.obs_dim, robot.action_dim) != (sidecar.robot_obs_dim, sidecar.action_dim):
        robot.close()
        raise DeployError(
            f"--robot {spec!r}: the env has obs_dim {robot.obs_dim}, action_dim {robot.action_dim} but the policy "
            f"expects {sidecar.robot_obs_dim}, {sidecar.action_dim} (trained on {sidecar.env_id})"
        )
    return robot


def _udp_robot(spec: str, sidecar: Sidecar) -> RobotInterface:
    try:
        parts = urlsplit(spec)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None or not 1 <= port <= 65535 or parts.path not in ("", "/") or parts.query:
        raise DeployError(f"--robot {spec!r}: expected udp://HOST:PORT with a port in 1..65535")
    from robopt.sim2real.network import UdpRobot

    try:
        return UdpRobot(host, port, sidecar.robot_obs_dim, sidecar.action_dim)
    except (OSError, ValueError) as error:
        raise DeployError(f"--robot {spec!r}: cannot open the UDP link ({error})") from None


def _topic_robot(spec: str, sidecar: Sidecar, section: dict | None) -> RobotInterface:
    """A ``ros2://`` or ``zenoh://`` robot: the map of the deploy config's ``robot`` section over its transport."""
    from robopt.sim2real.ros_map import parse_robot_map
    from robopt.sim2real.topic_robot import TopicRobot

    scheme, _, rest = spec.partition("://")
    mapping = parse_robot_map(section, scheme, sidecar.robot_obs_dim, sidecar.action_dim, sidecar.robot)
    options = dict(mapping.transport)
    publications = {mapping.command.topic: (mapping.command.type, mapping.command.qos)}
    try:
        if scheme == "ros2":
            from robopt.sim2real.ros2 import DdsLink, check_domain_id

            allowed = {"domain_id", "interface", "peers"}
            if set(options) - allowed:
                raise DeployError(
                    f"robot.ros2: unknown key {sorted(set(options) - allowed)[0]!r}; allowed: "
                    f"{', '.join(sorted(allowed))}"
                )
            if rest:
                if not rest.isdigit():
                    raise DeployError(f"--robot {spec!r}: expected ros2://DOMAIN_ID with a domain id in 0..232")
                options["domain_id"] = int(rest)
            domain_id = check_domain_id(options.get("domain_id", 0))
            peers = options.get("peers")
            if peers is not None and (not isinstance(peers, list) or not all(isinstance(p, str) for p in peers)):
                raise DeployError(f"robot.ros2.peers: expected a list of addresses, got {peers!r}")
            interface = options.get("interface")
            link = DdsLink(mapping.subscriptions, publications, domain_id, interface=interface, peers=peers)
        else:
            from robopt.sim2real.zenoh_link import ZenohLink

            link = ZenohLink(mapping.subscriptions, publications, options, endpoint=rest)
    except (OSError, RuntimeError) as error:  # the DDS or Zenoh library could not start its endpoints
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DeployError(f"--robot {spec!r}: cannot open the link ({message})") from None
    return TopicRobot(link, mapping, sidecar.robot_obs_dim, sidecar.action_dim)


def parse_robot(
    spec: str,
    sidecar: Sidecar,
    *,
    realtime: bool = True,
    robot_section: dict | None = None,
    period: float | None = None,
) -> RobotInterface:
    """The robot a ``--robot`` spec names; DeployError or ConfigError (one line) for a bad spec.

    ``realtime=False`` builds a simulated robot stepped by ``step_sync()`` (tests); network robots ignore it.
    ``robot_section`` is the deploy config's ``robot`` section (the ROS 2 and Zenoh robots' topic map).
    ``period`` (the deploy config's, when set) is a simulated robot's tick instead of the policy's control period:
    one env step per tick whatever the env's own dt, so a simulator slower than real time runs in slow motion.
    """
    if not isinstance(spec, str):
        raise DeployError(f"--robot must be a string, got {spec!r}")
    if spec.startswith("sim:"):
        return _sim_robot(spec, sidecar, realtime, period)
    if spec.startswith("udp://"):
        return _udp_robot(spec, sidecar)
    if spec.startswith(("ros2://", "zenoh://")):
        return _topic_robot(spec, sidecar, robot_section)
    raise DeployError(
        f"--robot {spec!r}: expected sim:ENV_ID[?noise=..&latency_ms=..], udp://HOST:PORT, ros2://[DOMAIN_ID] or "
        "zenoh://[ENDPOINT]"
    )
