"""ROS 2 topics over Zenoh, in the key layout of zenoh-bridge-ros2dds: the ``zenoh://`` robot's transport.

Torch-free. ``zenoh://[ENDPOINT]``, e.g. ``zenoh://tcp/192.168.1.10:7447`` to a bridge or router (none: the
deploy config's ``robot.zenoh.connect``, else Zenoh's own peer discovery). A ROS 2 topic ``/joint_states`` is the
key ``joint_states`` (``robot.zenoh.namespace`` is put in front when the bridge runs with one), the payload the
message's CDR bytes (``robopt.sim2real.cdr``): what ``zenoh-bridge-ros2dds`` routes to and from a robot's DDS
network, and what an aarch64 robot computer (no Cyclone DDS wheel there) can speak natively.

Options (``robot.zenoh``): ``connect`` (endpoints), ``listen`` (endpoints), ``mode`` (peer or client),
``namespace``, ``multicast`` (scouting, default true). Received samples are queued by Zenoh's callback thread and
handed over at ``poll``; a command key that no subscriber matches after start-up is reported once.
"""

from __future__ import annotations

import collections
import json
import threading
import time

from robopt.options import ConfigError
from robopt.sim2real.transport import NO_SUBSCRIBER_NOTICE_S, Notices, publish_noting

QUEUE_LIMIT = 4096  # received samples kept between two polls (the oldest go first)
MODES = ("peer", "client")


def import_zenoh():
    try:
        import zenoh
    except ImportError:
        raise ConfigError("zenoh:// robots need Zenoh, which is not installed: pip install 'robopt[zenoh]'") from None
    return zenoh


def topic_key(topic: str, namespace: str = "") -> str:
    """``/joint_states`` -> ``joint_states`` (zenoh-bridge-ros2dds; with a namespace ``ns/joint_states``)."""
    key = topic.lstrip("/")
    return f"{namespace.strip('/')}/{key}" if namespace.strip("/") else key


def check_endpoint(endpoint, key: str) -> str:
    """A Zenoh endpoint whose port (``PROTOCOL/HOST:PORT``, e.g. ``tcp/127.0.0.1:7447``) is in 1..65535; ConfigError
    (one line) otherwise. Endpoints without a port (``unixsock-stream/PATH``, ``serial/...``) pass as written."""
    if not isinstance(endpoint, str) or not endpoint:
        raise ConfigError(f"{key}: expected an endpoint such as tcp/127.0.0.1:7447, got {endpoint!r}")
    protocol, slash, address = endpoint.partition("/")
    address = address.split("#", 1)[0].split("?", 1)[0]
    if not slash or not protocol or not address:
        raise ConfigError(f"{key}: {endpoint!r} is not PROTOCOL/ADDRESS, e.g. tcp/127.0.0.1:7447")
    if protocol in ("tcp", "udp", "tls", "quic", "ws"):
        host, colon, port = address.rpartition(":")
        if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(
                f"{key}: {endpoint!r} needs a port in 1..65535 ({protocol}/HOST:PORT, e.g. {protocol}/127.0.0.1:7447)"
            )
    return endpoint


def zenoh_config(options: dict, endpoint: str = ""):
    """A ``zenoh.Config`` from the ``robot.zenoh`` options (and a ``zenoh://ENDPOINT``); ConfigError when bad."""
    allowed = {"connect", "listen", "mode", "namespace", "multicast"}
    unknown = set(options) - allowed
    if unknown:
        raise ConfigError(f"robot.zenoh: unknown key {sorted(unknown)[0]!r}; allowed: {', '.join(sorted(allowed))}")
    connect = list(options.get("connect") or []) + ([endpoint] if endpoint else [])
    listen = list(options.get("listen") or [])
    for name, endpoints in (("connect", connect), ("listen", listen)):
        for item in endpoints:
            check_endpoint(item, f"robot.zenoh.{name}" if item is not endpoint else f"zenoh://{endpoint}")
    mode = options.get("mode", "peer")
    if mode not in MODES:
        raise ConfigError(f"robot.zenoh.mode: {mode!r} is not allowed; allowed: {', '.join(MODES)}")
    multicast = options.get("multicast", True)
    if not isinstance(multicast, bool):
        raise ConfigError(f"robot.zenoh.multicast: expected true or false, got {multicast!r}")
    zenoh = import_zenoh()
    config = zenoh.Config()
    try:
        config.insert_json5("mode", json.dumps(mode))
        if connect:
            config.insert_json5("connect/endpoints", json.dumps([str(e) for e in connect]))
        if listen:
            config.insert_json5("listen/endpoints", json.dumps([str(e) for e in listen]))
        config.insert_json5("scouting/multicast/enabled", json.dumps(multicast))
    except Exception as error:  # zenoh validates endpoints as they are inserted
        raise ConfigError(f"robot.zenoh: {str(error).splitlines()[0] if str(error) else error}") from None
    return config


class ZenohLink:
    """Zenoh subscribers for ``subscriptions`` and publishers for ``publications`` (ROS topic -> (type, Qos)).

    The types only document the payloads (Zenoh carries bytes); QoS is Zenoh's own (reliable links, no history).
    """

    def __init__(
        self, subscriptions: dict, publications: dict, options: dict | None = None, endpoint: str = ""
    ) -> None:
        zenoh = import_zenoh()
        options = dict(options or {})
        self.counters = {"no_subscriber": 0, "queue_overflow": 0}
        self.notices = Notices()
        self._lock = threading.Lock()
        self._queue: collections.deque = collections.deque()
        self._start = time.monotonic()
        namespace = str(options.get("namespace", ""))
        config = zenoh_config(options, endpoint)
        try:
            self.session = zenoh.open(config)
        except Exception as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ConfigError(f"zenoh: cannot open a session ({first})") from None
        self.subscribers = [
            self.session.declare_subscriber(topic_key(topic, namespace), self._receiver(topic))
            for topic in subscriptions
        ]
        self.publishers = {topic: self.session.declare_publisher(topic_key(topic, namespace)) for topic in publications}

    def _receiver(self, topic: str):
        def callback(sample) -> None:
            try:
                payload = sample.payload.to_bytes()
            except Exception:  # a payload Zenoh cannot hand over: nothing to decode
                return
            with self._lock:
                if len(self._queue) >= QUEUE_LIMIT:
                    self._queue.popleft()
                    self.counters["queue_overflow"] += 1
                self._queue.append((topic, payload, time.monotonic()))

        return callback

    def poll(self) -> list[tuple[str, bytes, float]]:
        with self._lock:
            arrived = list(self._queue)
            self._queue.clear()
        return arrived

    def matched(self, topic: str) -> bool:
        try:
            return bool(self.publishers[topic].matching_status.matching)
        except Exception:  # a Zenoh without matching status: assume someone listens
            return True

    def publish(self, topic: str, payload: bytes) -> bool:
        def send() -> None:
            self.publishers[topic].put(payload)

        return publish_noting(self, topic, lambda: self.matched(topic), send, NO_SUBSCRIBER_NOTICE_S)

    def take_notices(self) -> list[str]:
        return self.notices.take()

    def close(self) -> None:
        for entity in [*self.subscribers, *self.publishers.values()]:
            try:
                entity.undeclare()
            except Exception:
                pass
        self.subscribers, self.publishers = [], {}
        try:
            self.session.close()
        except Exception:
            pass
