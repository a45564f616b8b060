"""CDR (XCDR1, "plain CDR") encoding of the shipped ROS 2 messages, shared by the ros2:// and zenoh:// robots.

Torch-free (numpy, stdlib). A payload is the 4-byte encapsulation header (``00 01 00 00``: CDR, little-endian;
``00 00 00 00`` big-endian is read too) and the message: primitives aligned to their size (at most 8) counted from
the end of the header, strings as a uint32 length including the terminating NUL then the bytes and the NUL,
sequences as a uint32 count then the items, fixed arrays as their items only, nested messages inline (OMG
DDS-XTypes 1.3, section 7.4.1, as ROS 2's rmw serializers write it).

A decoded message is a dict: numbers as Python ints and floats, strings as str, float64 (and other numeric)
sequences and arrays as numpy arrays, sequences of strings or messages as lists. ``decode`` raises ``CdrError``
(a ValueError with one line) on anything malformed: a short buffer, a length past the end, a string without its
NUL or not UTF-8, an unknown header; it never reads past the buffer and never allocates more than the buffer
could hold. ``encode`` takes the same dicts (missing fields are zero or empty).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import numpy as np

from robopt.sim2real.ros_messages import MESSAGES, PRIMITIVES, parse_field_type

HEADER_LE = b"\x00\x01\x00\x00"
HEADER_BE = b"\x00\x00\x00\x00"


class CdrError(ValueError):
    """A payload that is not a well-formed CDR message of the expected type."""


class _Reader:
    __slots__ = ("buffer", "offset", "order")

    def __init__(self, buffer: bytes, order: str) -> None:
        self.buffer, self.offset, self.order = buffer, 0, order

    def align(self, size: int) -> None:
        self.offset += -self.offset % size

    def take(self, size: int) -> int:
        start = self.offset
        if start + size > len(self.buffer):
            raise CdrError(f"payload ends at byte {len(self.buffer) + 4}, {size} more bytes needed at {start + 4}")
        self.offset = start + size
        return start

    def primitive(self, name: str):
        fmt, size = PRIMITIVES[name]
        self.align(size)
        return struct.unpack_from(self.order + fmt, self.buffer, self.take(size))[0]

    def count(self, item_size: int) -> int:
        count = self.primitive("uint32")
        if count * max(item_size, 1) > len(self.buffer) - self.offset:
            raise CdrError(f"a sequence of {count} items does not fit in the {len(self.buffer) + 4}-byte payload")
        return count

    def string(self) -> str:
        length = self.count(1)
        if length == 0:
            raise CdrError("a string without its terminating NUL (length 0)")
        raw = self.buffer[self.take(length) : self.offset]
        if raw[-1] != 0:
            raise CdrError("a string without its terminating NUL")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise CdrError("a string that is not UTF-8") from None

    def numbers(self, name: str, count: int) -> np.ndarray:
        fmt, size = PRIMITIVES[name]
        if count:
            self.align(size)
        start = self.take(count * size)
        dtype = np.dtype(self.order + fmt) if fmt != "?" else np.dtype(bool)
        return np.frombuffer(self.buffer, dtype=dtype, count=count, offset=start).astype(dtype.newbyteorder("="))


def _decode_value(reader: _Reader, spec: str):
    item, size = parse_field_type(spec)
    if size is None:
        if item == "string":
            return reader.string()
        if item in MESSAGES:
            return _decode_message(reader, item)
        return reader.primitive(item)
    if size == 0:  # an unbounded sequence: its count first
        item_size = PRIMITIVES[item][1] if item in PRIMITIVES else (5 if item == "string" else 1)
        size = reader.count(item_size)
    if item in PRIMITIVES:
        return reader.numbers(item, size)
    return [_decode_value(reader, item) for _ in range(size)]


def _decode_message(reader: _Reader, full: str) -> dict:
    return {name: _decode_value(reader, spec) for name, spec in MESSAGES[full]}


def decode(full: str, payload: bytes | bytearray | memoryview) -> dict:
    """A shipped message (``sensor_msgs/msg/JointState``) from its CDR payload; CdrError when malformed."""
    payload = bytes(payload)
    if len(payload) < 4:
        raise CdrError(f"a CDR payload is at least 4 bytes (its header), got {len(payload)}")
    header = payload[:4]
    if header[:2] == HEADER_LE[:2]:
        order = "<"
    elif header[:2] == HEADER_BE[:2]:
        order = ">"
    else:
        raise CdrError(f"unknown CDR encapsulation {header[:2].hex()} (expected 0001, plain CDR little-endian)")
    try:
        return _decode_message(_Reader(payload[4:], order), full)
    except (struct.error, ValueError, OverflowError) as error:
        if isinstance(error, CdrError):
            raise
        raise CdrError(f"malformed {full} payload: {error}") from None


class _Writer:
    __slots__ = ("parts", "offset")

    def __init__(self) -> None:
        self.parts: list[bytes] = [HEADER_LE]
        self.offset = 0

    def write(self, data: bytes, align: int = 1) -> None:
        pad = -self.offset % align
        if pad:
            self.parts.append(b"\x00" * pad)
        self.parts.append(data)
        self.offset += pad + len(data)


def _encode_value(writer: _Writer, spec: str, value) -> None:
    item, size = parse_field_type(spec)
    if size is None:
        if item == "string":
            raw = ("" if value is None else str(value)).encode("utf-8") + b"\x00"
            writer.write(struct.pack("<I", len(raw)), 4)
            writer.write(raw)
        elif item in MESSAGES:
            _encode_message(writer, item, value or {})
        else:
            fmt, width = PRIMITIVES[item]
            writer.write(struct.pack("<" + fmt, 0 if value is None else value), width)
        return
    if value is None:  # a missing field: empty, or a fixed array of zeros
        items = [] if size == 0 else ([None] * size if item not in PRIMITIVES else np.zeros(size))
    else:
        items = value
    if size == 0:
        writer.write(struct.pack("<I", len(items)), 4)
    elif len(items) != size:
        raise ValueError(f"a {spec} field needs {size} items, got {len(items)}")
    if item in PRIMITIVES:
        fmt, width = PRIMITIVES[item]
        if len(items):
            dtype = np.dtype("<" + fmt) if fmt != "?" else np.dtype(bool)
            writer.write(np.ascontiguousarray(items, dtype=dtype).tobytes(), width)
        return
    for entry in items:
        _encode_value(writer, item, entry)


def _encode_message(writer: _Writer, full: str, message: Mapping) -> None:
    unknown = set(message) - {name for name, _ in MESSAGES[full]}
    if unknown:
        raise ValueError(f"{full} has no field {sorted(unknown)[0]!r}")
    for name, spec in MESSAGES[full]:
        _encode_value(writer, spec, message.get(name))


def encode(full: str, message: Mapping) -> bytes:
    """The CDR payload (little-endian, with its header) of a shipped message given as a (nested) dict."""
    writer = _Writer()
    _encode_message(writer, full, message)
    return b"".join(writer.parts)
