"""The runtime's side of the UDP robot link (``UdpRobot``) and the pieces a robot-side server shares with it.

Torch-free (stdlib + numpy). Shapes: D obs dim, A action dim. Packets are those of ``protocol.py``.

Handshake (either side may start first): ``UdpRobot`` sends a *hello* (an ACTION packet with count 0: it
commands nothing) when it starts and again every ``hello_interval`` seconds until the first valid OBS
packet arrives. A robot sends its OBS packets to the source address of the latest valid ACTION packet
(hello or action) it received, or to a fixed peer it was told. The runtime's ``(host, port)`` is where its
ACTION packets go; once the first valid OBS arrives, the robot's address is that packet's source and OBS
packets from any other address are dropped (counted "foreign").

Ordering: every packet carries its sender's ``seq``. ``SequenceFilter`` keeps the newest by seq (serial
number arithmetic, so the u32 wrap-around is harmless): a seq already seen is a "duplicate", an older one
"reordered"; a gap counts the packets in it as "lost". ``resync_after`` older packets in a row (duplicates of
older ones included) mean the sender restarted its counter: the filter starts over from that packet ("resync").
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import Counter, deque

import numpy as np

from robopt.sim2real.protocol import KIND_ACTION, KIND_OBS, OBS_EXTRA, PacketError, decode, encode, split_obs
from robopt.sim2real.sidecar import DeployError

SEQ_MODULUS = 2**32
MAX_DATAGRAM = 65535


class SequenceFilter:
    """Newest-wins classification of incoming sequence numbers (RFC 1982 serial arithmetic on u32)."""

    def __init__(self, window: int = 128, resync_after: int = 16, max_gap: int = 2**16) -> None:
        self.window, self.resync_after, self.max_gap = window, resync_after, max_gap
        self.reset()

    def reset(self) -> None:
        self.newest: int | None = None
        self._seen: deque[int] = deque(maxlen=self.window)
        self._older_run = 0

    def classify(self, seq: int) -> tuple[str, int]:
        """(verdict, lost): verdict "new" or "resync" (accept it), "duplicate" or "reordered" (drop it)."""
        if self.newest is None:
            return self._accept(seq, "new"), 0
        delta = (seq - self.newest) % SEQ_MODULUS
        if delta == 0:
            return "duplicate", 0
        if delta < SEQ_MODULUS // 2:
            if delta > self.max_gap:  # a jump no real loss explains: the sender restarted
                return self._restart(seq), 0
            return self._accept(seq, "new"), delta - 1
        self._older_run += 1  # older than the newest, seen before or not: a restarted sender repeats old numbers
        if self._older_run >= self.resync_after:
            return self._restart(seq), 0
        if seq in self._seen:
            return "duplicate", 0
        self._seen.append(seq)
        return "reordered", 0

    def _accept(self, seq: int, verdict: str) -> str:
        self.newest, self._older_run = seq, 0
        self._seen.append(seq)
        return verdict

    def _restart(self, seq: int) -> str:
        self.reset()
        return self._accept(seq, "resync")


def resolve_address(host: str, port: int) -> tuple:
    """The socket address of ``host:port`` for UDP (IPv4 preferred); DeployError naming it when unresolvable."""
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise DeployError(f"port must be an integer in [0, 65535], got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as error:
        raise DeployError(f"cannot resolve host {host!r}: {error}") from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return infos[0][4]


def open_socket(host: str, port: int, family: int | None = None, timeout: float = 0.05) -> socket.socket:
    """A UDP socket bound to ``host:port`` (port 0: any free port) with a receive timeout; DeployError if not."""
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise DeployError(f"port must be an integer in [0, 65535], got {port!r}")
    if family is None:
        family = socket.AF_INET6 if len(resolve_address(host or "0.0.0.0", port)) == 4 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise DeployError(f"cannot bind UDP {host or '*'}:{port}: {error.strerror or error}") from None
    sock.settimeout(timeout)
    return sock


def same_address(a: tuple, b: tuple) -> bool:
    return a[:2] == b[:2]


class UdpRobot:
    """RobotInterface over UDP: OBS packets in (a background thread), ACTION packets out.

    ``counters`` (a snapshot) holds each ``PacketError`` reason, "duplicate", "reordered", "foreign", "lost",
    "resync", "received" (OBS accepted), "sent" (ACTIONs sent), "hello", "send_invalid" (an action of the
    wrong shape or not finite: not sent), "send_failed", "recv_error". ``episode_returns`` sums the reward
    field of the accepted OBS packets per episode: exact without loss, short of the lost packets otherwise.
    ``read`` stamps an observation with its receive time (the link's latency is unknown here).
    ``episodes_started`` counts the episode-ended flags of the accepted OBS packets as of the observation ``read``
    last returned (that packet's obs is already the next episode's first), so a control loop resets a policy's
    state exactly there; a boundary whose packet was lost is missed (the next packet carries no flag).
    """

    def __init__(
        self,
        host: str,
        port: int,
        obs_dim: int,
        action_dim: int,
        local_port: int = 0,
        local_host: str = "",
        hello_interval: float = 0.2,
    ) -> None:
        for name, value in (("obs_dim", obs_dim), ("action_dim", action_dim)):
            if not isinstance(value, int) or value < 1:
                raise DeployError(f"{name} must be an integer >= 1, got {value!r}")
        self.obs_dim, self.action_dim, self.hello_interval = obs_dim, action_dim, hello_interval
        self._robot_address = resolve_address(host, port)
        family = socket.AF_INET6 if len(self._robot_address) == 4 else socket.AF_INET
        self._socket = open_socket(local_host, local_port, family=family)
        self.local_address = self._socket.getsockname()
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._returns: list[float] = []
        self._episode_return = 0.0
        self._obs: np.ndarray | None = None  # [D] float64
        self._obs_time = math.nan
        self._episodes, self.episodes_started = 0, 0  # flags received; as of the latest read
        self._connected = False  # a valid OBS arrived: the robot address is fixed
        self._seq = 0
        self._last_hello = -math.inf
        self._filter = SequenceFilter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive_loop, name="robopt-udp-robot", daemon=True)
        self._thread.start()

    @property
    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)

    @property
    def episode_returns(self) -> list[float]:
        with self._lock:
            return list(self._returns)

    @property
    def robot_address(self) -> tuple:
        return self._robot_address

    def read(self) -> tuple[np.ndarray | None, float]:
        with self._lock:
            if self._obs is None:
                return None, math.nan
            self.episodes_started = self._episodes  # the same packet as the obs returned: no race with the thread
            return self._obs.copy(), self._obs_time

    def send(self, action: np.ndarray) -> None:
        try:
            values = np.asarray(action, dtype=np.float64).reshape(-1)  # [A]
            ok = values.shape == (self.action_dim,) and bool(np.isfinite(values).all())
            ok = ok and bool(np.all(np.abs(values) <= np.finfo(np.float32).max))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            self._count("send_invalid")
            return
        self._send(values, "sent")

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._socket.close()

    def __enter__(self) -> UdpRobot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def _send(self, values: np.ndarray, counter: str) -> None:
        with self._lock:
            seq, self._seq = self._seq, (self._seq + 1) % SEQ_MODULUS
            address = self._robot_address
        try:
            self._socket.sendto(encode(KIND_ACTION, seq, time.monotonic(), values), address)
        except (OSError, ValueError):
            self._count("send_failed")
            return
        self._count(counter)

    def _receive_loop(self) -> None:
        while not self._stop.is_set():
            if not self._connected and time.monotonic() - self._last_hello >= self.hello_interval:
                self._last_hello = time.monotonic()
                self._send(np.zeros(0), "hello")
            try:
                data, address = self._socket.recvfrom(MAX_DATAGRAM)
            except TimeoutError:
                continue
            except OSError:
                if not self._stop.is_set():
                    self._count("recv_error")
                    time.sleep(0.01)
                continue
            try:
                self._handle(data, address, time.monotonic())
            except Exception:  # noqa: BLE001 - the receive thread must outlive anything a datagram does
                self._count("internal_error")

    def _handle(self, data: bytes, address: tuple, received_at: float) -> None:
        try:
            packet = decode(data, KIND_OBS, self.obs_dim + OBS_EXTRA)
        except PacketError as error:
            self._count(error.reason)
            return
        with self._lock:
            if self._connected and not same_address(address, self._robot_address):
                self._counters["foreign"] += 1
                return
            verdict, lost = self._filter.classify(packet.seq)
            if verdict in ("duplicate", "reordered"):
                self._counters[verdict] += 1
                return
            if verdict == "resync":
                self._counters["resync"] += 1
            if not self._connected:
                self._robot_address, self._connected = address, True
            if lost:
                self._counters["lost"] += lost
            self._counters["received"] += 1
            obs, reward, episode_ended = split_obs(packet.values)
            self._obs, self._obs_time = obs, received_at
            self._episode_return += reward
            if episode_ended:
                self._episodes += 1
                self._returns.append(self._episode_return)
                self._episode_return = 0.0
