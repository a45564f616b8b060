"""ROS 2 over DDS (Cyclone DDS's Python binding, no ROS installation): the ``ros2://`` robot's transport.

Torch-free. ``ros2://[DOMAIN_ID]`` (the deploy config's ``robot.ros2.domain_id`` otherwise, 0 by default). Topics
and types carry ROS 2's DDS names (``rt/joint_states``, ``sensor_msgs::msg::dds_::JointState_``), data representation
XCDR1 (plain CDR, what ROS 2's rmw layers write), so a ROS 2 node on the same domain talks to it as to another node.
The DDS types are built from ``robopt.sim2real.ros_messages`` for discovery and matching; the payloads themselves
are robopt's CDR codec (``robopt.sim2real.cdr``), the same bytes the Zenoh transport carries.

Options (``robot.ros2``): ``domain_id`` (0..232), ``interface`` (a network interface name or address, e.g. ``lo``)
and ``peers`` (addresses to contact directly, e.g. [127.0.0.1]): with either, Cyclone DDS is configured without
multicast, which is what works on a loopback-only machine or a network that drops multicast.

Reported, never raised: a reader whose QoS cannot match a writer's (``qos_mismatch``, with a notice naming the
topic and the policy), a command topic without a subscriber after start-up (``no_subscriber``, one notice).
"""

from __future__ import annotations

import threading
import time
from xml.sax.saxutils import escape

from robopt.options import ConfigError
from robopt.sim2real.ros_messages import MESSAGES, dds_topic_name, dds_type_name, parse_field_type
from robopt.sim2real.transport import NO_SUBSCRIBER_NOTICE_S, Notices, Qos, publish_noting

DOMAIN_IDS = range(0, 233)  # DDS domain ids that map to valid RTPS ports
TAKE_AT_MOST = 256  # samples taken from one reader per poll
QOS_POLICY_NAMES = {
    1: "user data",
    2: "durability",
    4: "deadline",
    5: "latency budget",
    6: "ownership",
    8: "liveliness",
    11: "reliability",
    12: "destination order",
    13: "history",
    23: "data representation",
}  # fmt: skip  (DDS QoS policy ids)


def import_cyclonedds():
    try:
        import cyclonedds.core  # noqa: F401
    except ImportError:
        raise ConfigError(
            "ros2:// robots need Cyclone DDS, which is not installed: pip install 'robopt[ros2]'"
        ) from None
    import cyclonedds

    return cyclonedds


def check_domain_id(value, key: str = "robot.ros2.domain_id") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in DOMAIN_IDS:
        raise ConfigError(f"{key}: {value!r} is not a DDS domain id; allowed: 0..232")
    return value


def cyclonedds_config(interface: str | None, peers: list[str] | None) -> str | None:
    """Cyclone DDS XML for a unicast-only setup on ``interface`` with ``peers`` (None: Cyclone's defaults)."""
    if not interface and not peers:
        return None
    general = "<AllowMulticast>false</AllowMulticast>"
    if interface:
        general += f'<Interfaces><NetworkInterface name="{escape(interface)}"/></Interfaces>'
    peer_xml = "".join(f'<Peer address="{escape(str(peer))}"/>' for peer in peers or ["127.0.0.1"])
    return (
        f'<CycloneDDS><Domain id="any"><General>{general}</General><Discovery><ParticipantIndex>auto'
        f"</ParticipantIndex><MaxAutoParticipantIndex>64</MaxAutoParticipantIndex><Peers>{peer_xml}</Peers>"
        "</Discovery></Domain></CycloneDDS>"
    )


class RawPayload(bytes):
    """A received CDR payload (bytes that Cyclone can attach its ``sample_info`` to)."""


_RAW_TYPES: dict[str, type] = {}
_DOMAINS: dict[int, list] = {}  # domain id -> [Domain, users]: one configured Domain per process and id
_DOMAINS_LOCK = threading.Lock()  # links opened from two threads (a teleop beside the deploy loop) share one Domain


def _acquire_domain(domain_id: int, config: str | None):
    from cyclonedds.domain import Domain

    if config is None:
        return None
    with _DOMAINS_LOCK:
        entry = _DOMAINS.get(domain_id)
        if entry is None:
            entry = _DOMAINS[domain_id] = [Domain(domain_id, config), 0]
        entry[1] += 1
    return domain_id


def _release_domain(domain_id: int | None) -> None:
    with _DOMAINS_LOCK:
        entry = _DOMAINS.get(domain_id) if domain_id is not None else None
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _DOMAINS[domain_id]


def raw_type(full: str):
    """The Cyclone DDS type of a shipped message with robopt's codec in place of Cyclone's own (de)serialization.

    Cyclone's Python binding calls ``sample.serialize()`` to write and ``data_type.deserialize(bytes)`` to read;
    here the first returns the payload ``raw_sample`` put in, the second the bytes unchanged (``RawPayload``).
    """
    if full in _RAW_TYPES:
        return _RAW_TYPES[full]
    from cyclonedds.idl import make_idl_struct
    from cyclonedds.idl import types as idl

    primitives = {"float64": idl.float64, "float32": idl.float32, "int8": idl.int8, "uint8": idl.uint8,
                  "int16": idl.int16, "uint16": idl.uint16, "int32": idl.int32, "uint32": idl.uint32,
                  "int64": idl.int64, "uint64": idl.uint64, "bool": bool, "byte": idl.byte, "char": idl.char,
                  "string": str}  # fmt: skip

    def build(name: str):
        if name in _RAW_TYPES:
            return _RAW_TYPES[name]
        fields = {}
        for field_name, spec in MESSAGES[name]:
            item, size = parse_field_type(spec)
            base = build(item) if item in MESSAGES else primitives[item]
            fields[field_name] = base if size is None else (idl.sequence[base] if size == 0 else idl.array[base, size])
        cls = make_idl_struct(name.rsplit("/", 1)[1] + "_", dds_type_name(name), fields)
        _RAW_TYPES[name] = cls
        return cls

    cls = build(full)
    if not getattr(cls, "_robopt_raw", False):
        cls.serialize = lambda self, *args, **kwargs: self._robopt_payload
        cls.deserialize = classmethod(lambda klass, data, *args, **kwargs: RawPayload(data))
        cls._robopt_raw = True
    return cls


def raw_sample(full: str, payload: bytes):
    """A sample of ``raw_type(full)`` whose serialization is ``payload`` (a CDR payload with its header)."""
    cls = raw_type(full)
    sample = cls.__new__(cls)
    object.__setattr__(sample, "_robopt_payload", payload)
    return sample


def dds_qos(qos: Qos):
    from cyclonedds.core import Policy
    from cyclonedds.qos import Qos as CQos
    from cyclonedds.util import duration

    reliability = (
        Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=1))
        if qos.reliability == "reliable"
        else Policy.Reliability.BestEffort
    )
    return CQos(
        reliability,
        Policy.History.KeepLast(qos.depth),
        Policy.Durability.Volatile,
        Policy.DataRepresentation(use_cdrv0_representation=True),
    )


class DdsLink:
    """DDS readers for ``subscriptions`` and writers for ``publications`` (ROS topic -> (type, Qos)) on one domain.

    ``publish(topic, payload)`` writes a CDR payload; ``poll()`` takes what arrived. A publication with no matched
    subscriber ``NO_SUBSCRIBER_NOTICE_S`` after start counts ``no_subscriber`` and queues one notice.
    """

    def __init__(
        self,
        subscriptions: dict[str, tuple[str, Qos]],
        publications: dict[str, tuple[str, Qos]],
        domain_id: int,
        interface: str | None = None,
        peers=None,
    ) -> None:
        import_cyclonedds()
        from cyclonedds.core import Listener
        from cyclonedds.domain import DomainParticipant
        from cyclonedds.pub import DataWriter
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        self.counters = {"qos_mismatch": 0, "no_subscriber": 0}
        self.notices = Notices()
        self._lock = threading.Lock()
        self._matched: dict[str, int] = {topic: 0 for topic in publications}
        self._start = time.monotonic()
        self._domain = _acquire_domain(domain_id, cyclonedds_config(interface, peers))
        self.participant = DomainParticipant(domain_id)
        self.readers, self.writers = {}, {}
        for topic, (full, qos) in subscriptions.items():
            dds_topic = Topic(self.participant, dds_topic_name(topic), raw_type(full), qos=dds_qos(qos))
            listener = Listener(on_requested_incompatible_qos=self._incompatible(topic))
            self.readers[topic] = DataReader(self.participant, dds_topic, qos=dds_qos(qos), listener=listener)
        for topic, (full, qos) in publications.items():
            dds_topic = Topic(self.participant, dds_topic_name(topic), raw_type(full), qos=dds_qos(qos))
            listener = Listener(
                on_publication_matched=self._on_matched(topic), on_offered_incompatible_qos=self._incompatible(topic)
            )
            self.writers[topic] = (DataWriter(self.participant, dds_topic, qos=dds_qos(qos), listener=listener), full)

    def _incompatible(self, topic: str):
        def callback(entity, status) -> None:
            with self._lock:
                self.counters["qos_mismatch"] += 1
            policy = QOS_POLICY_NAMES.get(status.last_policy_id, f"policy id {status.last_policy_id}")
            line = (
                f"QoS mismatch on {topic}: a peer's {policy} cannot match this endpoint's; set robot.qos or the "
                "topic's qos to what the robot uses"
            )
            self.notices.once(f"qos:{topic}", line)

        return callback

    def _on_matched(self, topic: str):
        def callback(writer, status) -> None:
            with self._lock:
                self._matched[topic] = status.current_count

        return callback

    def matched(self, topic: str) -> int:
        with self._lock:
            return self._matched.get(topic, 0)

    def poll(self) -> list[tuple[str, bytes, float]]:
        arrived = []
        for topic, reader in self.readers.items():
            samples = reader.take(N=TAKE_AT_MOST)
            now = time.monotonic()
            arrived.extend((topic, sample, now) for sample in samples if isinstance(sample, bytes))
        return arrived

    def publish(self, topic: str, payload: bytes) -> bool:
        writer, full = self.writers[topic]

        def send() -> None:
            writer.write(raw_sample(full, payload))

        return publish_noting(self, topic, lambda: self.matched(topic) > 0, send, NO_SUBSCRIBER_NOTICE_S)

    def take_notices(self) -> list[str]:
        return self.notices.take()

    def close(self) -> None:
        self.readers, self.writers = {}, {}
        self.participant = None
        _release_domain(self._domain)
        self._domain = None
