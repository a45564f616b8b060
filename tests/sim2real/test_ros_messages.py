"""ROS 2 wire facts: the shipped message types' CDR bytes and RIHS01 hashes against rosbags, DDS names, and a
decoder that turns any malformed payload into one CdrError."""

from __future__ import annotations

import numpy as np
import pytest

from robopt.sim2real import cdr
from robopt.sim2real.ros_messages import (
    MESSAGES,
    TOPIC_TYPES,
    MessageTypeError,
    dds_topic_name,
    dds_type_name,
    full_type_name,
    parse_field_type,
    type_hash,
)

rosbags = pytest.importorskip("rosbags", reason="rosbags (the dev extra) is the reference for CDR bytes and hashes")
from rosbags.typesys import Stores, get_typestore  # noqa: E402

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)  # ROS 2 Jazzy's message definitions, shipped offline with rosbags


def random_message(full: str, rng: np.random.Generator) -> dict:
    """A message with every field set: random numbers and strings, sequences of 0-3 items."""
    message = {}
    for name, spec in MESSAGES[full]:
        item, size = parse_field_type(spec)

        def one(item: str):
            if item == "string":
                return "".join(rng.choice(list("abz_/é"), int(rng.integers(0, 7))))
            if item in MESSAGES:
                return random_message(item, rng)
            if item.startswith("float"):
                return float(rng.normal() * 10.0)
            return int(rng.integers(0, 1000)) if item.startswith("uint") else int(rng.integers(-1000, 1000))

        if size is None:
            message[name] = one(item)
        else:
            count = size or int(rng.integers(0, 4))
            message[name] = rng.normal(size=count) if item.startswith("float") else [one(item) for _ in range(count)]
    return message


def as_rosbags(full: str, message: dict):
    fields = {}
    for name, spec in MESSAGES[full]:
        item, size = parse_field_type(spec)
        value = message[name]
        if item in MESSAGES:
            fields[name] = as_rosbags(item, value) if size is None else [as_rosbags(item, v) for v in value]
        elif size is not None and item != "string":
            fields[name] = np.asarray(value, dtype=np.float64)
        else:
            fields[name] = value
    return TYPESTORE.types[full](**fields)


@pytest.mark.parametrize("full", sorted(MESSAGES))
def test_definitions_bytes_and_hashes_equal_rosbags(full):
    definition = [(name, _) for name, _ in TYPESTORE.fielddefs[full][1]]
    assert [name for name, _ in definition] == [name for name, _ in MESSAGES[full]]  # field order is the wire order
    assert type_hash(full) == TYPESTORE.hash_rihs01(full)
    rng = np.random.default_rng(sum(map(ord, full)))
    for _ in range(20):
        message = random_message(full, rng)
        payload = cdr.encode(full, message)
        assert payload == bytes(TYPESTORE.serialize_cdr(as_rosbags(full, message), full))  # byte for byte
        decoded = cdr.decode(full, payload)
        assert cdr.encode(full, decoded) == payload  # a decode-encode round trip is exact (copied numbers)


def test_a_joint_state_by_hand():
    # header stamp (1 s, 2 ns), frame "base", names ["a", "bc"], position [1, 2], no velocity or effort.
    payload = cdr.encode(
        "sensor_msgs/msg/JointState",
        {
            "header": {"stamp": {"sec": 1, "nanosec": 2}, "frame_id": "base"},
            "name": ["a", "bc"],
            "position": [1.0, 2.0],
        },
    )
    expected = bytes.fromhex(
        "00010000"  # encapsulation: plain CDR, little-endian
        "01000000"
        "02000000"  # stamp.sec, stamp.nanosec
        "05000000"
        "6261736500"
        "000000"  # frame_id: length 5 with the NUL, "base\0", 3 bytes to align 4
        "02000000"
        "02000000"
        "6100"
        "0000"
        "03000000"
        "626300"
        "00"  # names: count 2, "a\0" + pad, "bc\0" + pad
        "02000000"
        "00000000"
        "000000000000f03f"
        "0000000000000040"  # position: count 2, pad to 8, 1.0, 2.0
        "00000000"
        "00000000"  # velocity and effort: count 0 each
    )
    assert payload == expected
    decoded = cdr.decode("sensor_msgs/msg/JointState", payload)
    assert decoded["name"] == ["a", "bc"] and decoded["position"].tolist() == [1.0, 2.0]
    assert decoded["velocity"].size == 0 and decoded["header"]["frame_id"] == "base"


def test_big_endian_payloads_are_read():
    message = {"data": [1.5, -2.0], "layout": {"data_offset": 7}}
    little = cdr.decode("std_msgs/msg/Float64MultiArray", cdr.encode("std_msgs/msg/Float64MultiArray", message))
    # header, dim count 0, data_offset 7, data count 2, 4 bytes to align 8, 1.5, -2.0 (big-endian)
    big = bytes.fromhex("00000000000000000000000700000002000000003ff8000000000000c000000000000000")
    decoded = cdr.decode("std_msgs/msg/Float64MultiArray", big)
    assert decoded["layout"]["data_offset"] == little["layout"]["data_offset"] == 7
    assert decoded["data"].tolist() == little["data"].tolist() == [1.5, -2.0]


def test_dds_and_short_names():
    assert dds_topic_name("/joint_states") == "rt/joint_states"
    assert dds_topic_name("/robot1/cmd_vel") == "rt/robot1/cmd_vel"
    assert dds_type_name("sensor_msgs/msg/JointState") == "sensor_msgs::msg::dds_::JointState_"
    assert full_type_name("std_msgs/Float64MultiArray") == "std_msgs/msg/Float64MultiArray"
    assert set(TOPIC_TYPES) <= set(MESSAGES)
    with pytest.raises(MessageTypeError, match="unknown message type 'sensor_msgs/LaserScan'; robopt ships"):
        full_type_name("sensor_msgs/LaserScan")
    for bad in ("joint_states", "/1abc", "/a//b", "/a b", "", None):
        with pytest.raises(MessageTypeError, match="not a fully qualified ROS 2 topic name"):
            dds_topic_name(bad)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "at least 4 bytes"),
        (b"\x00\x09\x00\x00" + bytes(40), "unknown CDR encapsulation 0009"),
        (b"\x00\x01\x00\x00" + bytes(6), "more bytes needed"),  # cut inside the stamp
        (b"\x00\x01\x00\x00" + bytes(8) + b"\xff\xff\xff\x7f", "does not fit"),  # frame_id length 2^31 - 1
        (b"\x00\x01\x00\x00" + bytes(8) + b"\x03\x00\x00\x00abc", "terminating NUL"),
        (b"\x00\x01\x00\x00" + bytes(8) + b"\x03\x00\x00\x00\xff\xfe\x00", "not UTF-8"),
        (b"\x00\x01\x00\x00" + bytes(8) + b"\x00\x00\x00\x00", "terminating NUL"),
    ],
)
def test_malformed_payloads_are_one_cdr_error(payload, message):
    with pytest.raises(cdr.CdrError, match=message):
        cdr.decode("sensor_msgs/msg/JointState", payload)


def test_decoding_mutated_payloads_never_raises_anything_but_cdr_error():
    rng = np.random.default_rng(0)
    decoded = failed = 0
    for i in range(3000):
        full = TOPIC_TYPES[i % len(TOPIC_TYPES)]
        payload = bytearray(cdr.encode(full, random_message(full, rng)))
        for _ in range(int(rng.integers(1, 4))):  # flip bytes, cut the end, or append garbage
            choice = int(rng.integers(0, 3))
            if choice == 0 and len(payload) > 4:
                payload[int(rng.integers(4, len(payload)))] = int(rng.integers(0, 256))
            elif choice == 1:
                del payload[int(rng.integers(0, len(payload) + 1)) :]
            else:
                payload += rng.integers(0, 256, int(rng.integers(1, 16))).astype(np.uint8).tobytes()
        try:
            cdr.decode(full, bytes(payload))
            decoded += 1
        except cdr.CdrError:
            failed += 1
    assert decoded + failed == 3000 and decoded > 0 and failed > 0


def test_cyclone_dds_serializes_the_types_as_robopt_does():
    pytest.importorskip("cyclonedds", reason="Cyclone DDS (the ros2 extra) builds the DDS types")
    from cyclonedds.idl import IdlStruct

    from robopt.sim2real.ros2 import raw_type

    rng = np.random.default_rng(1)
    for full in TOPIC_TYPES:
        cls = raw_type(full)
        assert issubclass(cls, IdlStruct)
        message = random_message(full, rng)
        payload = cdr.encode(full, message)
        # Cyclone's own XCDR1 serializer, on a typed sample built from the decoded message, writes the same bytes
        typed = build_typed(full, cdr.decode(full, payload))
        assert type(typed).__idl__.serialize(typed, use_version_2=False) == payload


def build_typed(full: str, message: dict):
    from robopt.sim2real.ros2 import raw_type

    fields = {}
    for name, spec in MESSAGES[full]:
        item, size = parse_field_type(spec)
        value = message[name]
        if item in MESSAGES:
            fields[name] = build_typed(item, value) if size is None else [build_typed(item, v) for v in value]
        elif isinstance(value, np.ndarray):
            fields[name] = [float(v) for v in value]
        else:
            fields[name] = value
    return raw_type(full)(**fields)
