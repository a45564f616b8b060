"""What the topic transports share, below them and their users: the ``Transport`` protocol, QoS, one-line notices.

Torch-free (stdlib only). ``robopt.sim2real.ros2`` (DDS) and ``robopt.sim2real.zenoh_link`` implement
``Transport``; ``robopt.sim2real.topic_robot`` drives one; ``robopt.sim2real.ros_map`` parses the QoS of the deploy
map's topics into ``Qos``; the sim robot's topic server uses it too.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

__all__ = ["NO_SUBSCRIBER_NOTICE_S", "QOS_PROFILES", "RELIABILITY", "Notices", "Qos", "Transport", "note_no_subscriber"]
__all__ += ["publish_noting"]

QOS_PROFILES = {"sensor_data": ("best_effort", 5), "reliable": ("reliable", 10), "default": ("reliable", 10)}
RELIABILITY = ("reliable", "best_effort")
NO_SUBSCRIBER_NOTICE_S = 2.0  # a command topic without a subscriber this long after start gets a notice


@dataclass(frozen=True)
class Qos:
    reliability: str = "best_effort"
    depth: int = 5


class Transport(Protocol):
    """What TopicRobot needs from a transport (DDS, Zenoh). Never raises after it was built."""

    counters: dict[str, int]

    def poll(self) -> list[tuple[str, bytes, float]]:
        """Payloads received since the last poll: (topic, CDR payload, receive time on time.monotonic())."""
        ...

    def publish(self, topic: str, payload: bytes) -> bool:
        """Send a payload on one of the link's publications; False when it could not be sent."""
        ...

    def take_notices(self) -> list[str]: ...

    def close(self) -> None: ...


class Notices:
    """One-line notices, each key said once; thread-safe (transport callbacks add, the control loop takes)."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def once(self, key: str, line: str) -> None:
        with self._lock:
            if key not in self._said:
                self._said.add(key)
                self._lines.append(line)

    def take(self) -> list[str]:
        with self._lock:
            lines, self._lines = self._lines, []
        return lines


def publish_noting(link, topic: str, matched, write, grace: float = NO_SUBSCRIBER_NOTICE_S) -> bool:
    """``write()`` a command payload, after ``note_no_subscriber``; False (never an exception) when it failed."""
    note_no_subscriber(link, topic, matched, grace)
    try:
        write()
    except Exception:  # noqa: BLE001  (a transport never raises after it was built)
        return False
    return True


def note_no_subscriber(link, topic: str, matched, grace: float = NO_SUBSCRIBER_NOTICE_S) -> None:
    """Count and say once that ``topic`` has no subscriber, ``grace`` seconds after ``link`` started.

    ``link`` has ``_start`` (its time.monotonic() start), ``_lock``, ``counters`` and ``notices``; ``matched()``
    says whether someone subscribes (asked only after the grace period)."""
    if time.monotonic() - link._start <= grace or matched():
        return
    with link._lock:
        link.counters["no_subscriber"] += 1
    link.notices.once(f"subscriber:{topic}", f"{topic} has no subscriber: messages are sent but nobody receives them")
