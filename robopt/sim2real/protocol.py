"""The UDP packet of the hardware-in-the-loop link: one datagram = one packet. Torch-free (stdlib + numpy).

Byte layout (little-endian, no padding; ``C`` = count, total length 26 + 4*C bytes):

    offset      size  type        field
    0           4     bytes       magic b"RBPT"
    4           1     u8          version (1)
    5           1     u8          kind: 1 = OBS (robot -> runtime), 2 = ACTION (runtime -> robot)
    6           2     u16         reserved (0)
    8           4     u32         seq: the sender's packet counter, +1 per packet, wraps at 2**32
    12          8     f64         timestamp: the sender's clock in seconds (informational; clocks differ)
    20          2     u16         count C: number of float32 values in the payload
    22          4*C   f32[C]      payload
    22 + 4*C    4     u32         crc32 (zlib.crc32) of bytes [0, 22 + 4*C)

Payloads: OBS = obs values, then the reward of the step that produced them, then an episode-ended flag
(1.0 when that step ended the episode; the obs is then already the first one of the next episode), so
C = obs_dim + 2. ACTION = action values, C = action_dim. An ACTION with C = 0 is a *hello*: it commands
nothing and tells the robot where to send its OBS packets (see ``network.py`` for the handshake).

``decode`` checks, in this order, and raises ``PacketError(reason)`` with the first that fails:
    "short"       fewer than 26 bytes (no room for a header and a crc)
    "checksum"    the last 4 bytes are not the crc32 of everything before them (any bit flip, truncation
                  or extension lands here: the crc is checked before any field is trusted)
    "magic", "version", "reserved"   header fields of an intact packet that is not ours / not this version
    "kind"        a kind other than 1 or 2, or not the kind the caller expects
    "length"      an intact packet whose byte length is not 26 + 4*count (a sender bug)
    "count"       a count the caller does not expect
    "non_finite"  a NaN or infinite timestamp or payload value (rejected here, so nothing downstream ever
                  sees one; pass ``allow_non_finite=True`` to keep them)
It raises nothing else for any bytes-like input.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

MAGIC, VERSION = b"RBPT", 1
KIND_OBS, KIND_ACTION = 1, 2
KINDS = (KIND_OBS, KIND_ACTION)
OBS_EXTRA = 2  # reward and episode-ended flag after the obs values
HEADER = struct.Struct("<4sBBHIdH")  # magic, version, kind, reserved, seq, timestamp, count
CRC = struct.Struct("<I")
OVERHEAD = HEADER.size + CRC.size  # 26 bytes
MAX_COUNT = (65507 - OVERHEAD) // 4  # the largest payload one IPv4 UDP datagram carries
REASONS = ("short", "checksum", "magic", "version", "reserved", "kind", "length", "count", "non_finite")


class PacketError(ValueError):
    """A datagram that is not a valid packet; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Packet:
    kind: int
    seq: int
    timestamp: float
    values: np.ndarray  # [count] float32


def encode(kind: int, seq: int, timestamp: float, values: np.ndarray, allow_non_finite: bool = False) -> bytes:
    """The datagram for one packet; ValueError for arguments no valid packet can hold."""
    payload = np.ascontiguousarray(np.asarray(values, dtype="<f4").reshape(-1))
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not 0 <= seq < 2**32:
        raise ValueError(f"seq must be in [0, 2**32), got {seq!r}")
    if payload.size > MAX_COUNT:
        raise ValueError(f"at most {MAX_COUNT} values fit in one datagram, got {payload.size}")
    if not allow_non_finite and not (math.isfinite(timestamp) and np.isfinite(payload).all()):
        raise ValueError("timestamp and values must be finite")
    body = HEADER.pack(MAGIC, VERSION, kind, 0, seq, float(timestamp), payload.size) + payload.tobytes()
    return body + CRC.pack(zlib.crc32(body))


def decode(
    data: bytes, expected_kind: int, expected_count: int | Collection[int] | None, allow_non_finite: bool = False
) -> Packet:
    """The packet in ``data``; PacketError (see the module docstring for the reasons and their order) otherwise.

    ``expected_count``: the one count accepted, a collection of accepted counts, or None for any.
    """
    data = bytes(data)
    if len(data) < OVERHEAD:
        raise PacketError("short", f"{len(data)} bytes")
    body = data[: -CRC.size]
    if zlib.crc32(body) != CRC.unpack_from(data, len(body))[0]:
        raise PacketError("checksum")
    magic, version, kind, reserved, seq, timestamp, count = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise PacketError("magic", repr(magic))
    if version != VERSION:
        raise PacketError("version", str(version))
    if reserved != 0:
        raise PacketError("reserved", str(reserved))
    if kind != expected_kind:
        raise PacketError("kind", f"{kind}, expected {expected_kind}")
    if len(data) != OVERHEAD + 4 * count:
        raise PacketError("length", f"{len(data)} bytes for count {count}")
    allowed = (expected_count,) if isinstance(expected_count, int) else expected_count
    if allowed is not None and count not in allowed:
        raise PacketError("count", f"{count}, expected {expected_count}")
    values = np.frombuffer(data, dtype="<f4", count=count, offset=HEADER.size).astype(np.float32)
    if not allow_non_finite and not (math.isfinite(timestamp) and np.isfinite(values).all()):
        raise PacketError("non_finite")
    return Packet(kind=kind, seq=seq, timestamp=timestamp, values=values)


def obs_values(obs: np.ndarray, reward: float, episode_ended: bool) -> np.ndarray:
    """OBS payload [obs_dim + 2]: obs, reward, 1.0/0.0."""
    return np.concatenate([np.asarray(obs, dtype=np.float32).reshape(-1), [reward, 1.0 if episode_ended else 0.0]])


def split_obs(values: np.ndarray) -> tuple[np.ndarray, float, bool]:
    """Inverse of ``obs_values``: obs [obs_dim] float64, reward, episode_ended."""
    return values[:-OBS_EXTRA].astype(np.float64), float(values[-2]), bool(values[-1] >= 0.5)
