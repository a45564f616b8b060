"""UdpRobot and the sim-robot server over localhost: fuzzing, ordering, and end-to-end runs against Pendulum-v1."""

from __future__ import annotations

import socket
import struct
import time
import zlib
from collections import Counter

import numpy as np
from runtime_fakes import wait_until

from robopt.sim2real.network import UdpRobot
from robopt.sim2real.protocol import (
    KIND_ACTION,
    KIND_OBS,
    REASONS,
    PacketError,
    decode,
    encode,
    obs_values,
)

OBS_DIM, ACTION_DIM = 3, 1


def reseal(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


# --- fuzzing ------------------------------------------------------------------------------------------------------

# Each mutation and the decode outcomes it may have ("ok" = accepted).
EXPECTED = {
    "valid": {"ok"},
    "huge_values": {"ok"},  # finite float32 extremes are the runtime's to clamp, not the codec's
    "random_bytes": {"short", "checksum"},
    "bit_flips": {"checksum"},
    "truncated": {"short", "checksum"},
    "extended": {"checksum"},
    "swapped_unsealed": {"checksum"},
    "swap_magic_payload": {"magic"},
    "swap_reserved_count": {"reserved"},
    "swap_version_kind": {"version"},
    "bad_magic": {"magic"},
    "bad_version": {"version"},
    "bad_kind": {"kind"},
    "bad_reserved": {"reserved"},
    "bad_count_field": {"length"},
    "wrong_count": {"count"},
    "action_packet": {"kind"},
    "non_finite": {"non_finite"},
}


class Fuzzer:
    """Random and mutated datagrams for an OBS receiver with obs_dim 3 (count 5)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.seq = 0

    def valid(self, kind: int = KIND_OBS, count: int = OBS_DIM + 2) -> bytes:
        r = self.rng.random()  # mostly increasing seqs, some repeated and some late, to exercise the filter
        self.seq += 1 if r < 0.8 else (0 if r < 0.9 else -3)
        values = self.rng.normal(size=count) * 10.0 ** self.rng.integers(-3, 4)
        return encode(kind, self.seq % 2**32, float(self.rng.random() * 1e4), values)

    def patched(self, offset: int, fmt: str, value) -> bytes:
        body = bytearray(self.valid()[:-4])
        struct.pack_into(fmt, body, offset, value)
        return reseal(bytes(body))

    def swapped(self, a: int, b: int, size: int, seal: bool, kind: int = KIND_OBS) -> bytes:
        body = bytearray(self.valid(kind)[:-4])
        body[a : a + size], body[b : b + size] = body[b : b + size], body[a : a + size]
        return reseal(bytes(body)) if seal else bytes(body) + bytes(4)  # a zero crc: wrong unless by chance

    def make(self, mutation: str) -> bytes:
        rng = self.rng
        if mutation == "valid":
            return self.valid()
        if mutation == "huge_values":
            body = bytearray(self.valid()[:-4])
            struct.pack_into("<f", body, 22 + 4 * int(rng.integers(5)), float(rng.choice([3.4e38, -3.4e38, 1e-45])))
            return reseal(bytes(body))
        if mutation == "random_bytes":
            return rng.bytes(int(rng.choice([rng.integers(0, 64), rng.integers(0, 2000)])))
        if mutation == "bit_flips":
            data = bytearray(self.valid())
            for bit in rng.choice(8 * len(data), size=int(rng.integers(1, 9)), replace=False):
                data[bit // 8] ^= 1 << (bit % 8)
            return bytes(data)
        if mutation == "truncated":
            data = self.valid()
            return data[: int(rng.integers(0, len(data)))]
        if mutation == "extended":
            return self.valid() + rng.bytes(int(rng.integers(1, 65)))
        if mutation == "swapped_unsealed":  # seq <-> low half of the timestamp, then the old crc
            body = bytearray(self.valid()[:-4])
            crc = zlib.crc32(body)
            body[8:12], body[12:16] = body[12:16], body[8:12]
            return bytes(body) + struct.pack("<I", crc) if body[8:12] != body[12:16] else rng.bytes(3)
        if mutation == "swap_magic_payload":
            return self.swapped(0, 22, 4, seal=True)
        if mutation == "swap_reserved_count":
            return self.swapped(6, 20, 2, seal=True)
        if mutation == "swap_version_kind":  # ACTION: version 1, kind 2 -> version 2
            return self.swapped(4, 5, 1, seal=True, kind=KIND_ACTION)
        if mutation == "bad_magic":
            return self.patched(0, "<4s", rng.bytes(3) + b"!")
        if mutation == "bad_version":
            return self.patched(4, "<B", int(rng.choice([0, 2, 255])))
        if mutation == "bad_kind":
            return self.patched(5, "<B", int(rng.choice([0, 3, 255])))
        if mutation == "bad_reserved":
            return self.patched(6, "<H", int(rng.integers(1, 2**16)))
        if mutation == "bad_count_field":
            return self.patched(20, "<H", int(rng.choice([0, 4, 6, 2**16 - 1])))
        if mutation == "wrong_count":
            return self.valid(count=int(rng.choice([0, 1, 4, 6, 100])))
        if mutation == "action_packet":
            return self.valid(kind=KIND_ACTION, count=OBS_DIM + 2)
        if mutation == "non_finite":
            if rng.random() < 0.2:
                return self.patched(12, "<d", float(rng.choice([np.nan, np.inf, -np.inf])))
            body = bytearray(self.valid()[:-4])
            struct.pack_into("<f", body, 22 + 4 * int(rng.integers(5)), float(rng.choice([np.nan, np.inf, -np.inf])))
            return reseal(bytes(body))
        raise AssertionError(mutation)


def outcome(data: bytes) -> str:
    try:
        decode(data, KIND_OBS, OBS_DIM + 2)
    except PacketError as error:
        return error.reason
    return "ok"


def fuzz_datagrams(n: int, seed: int = 0) -> list[tuple[str, bytes]]:
    fuzzer, names = Fuzzer(seed), sorted(EXPECTED)
    return [(name, fuzzer.make(name)) for name in fuzzer.rng.choice(names, size=n)]


def test_fuzz_decode_and_udp_robot():
    datagrams = fuzz_datagrams(12_000)
    table: dict[str, Counter] = {}
    for mutation, data in datagrams:  # decode raises nothing but PacketError
        table.setdefault(mutation, Counter())[outcome(data)] += 1
    totals = sum(table.values(), Counter())
    print("\nfuzz outcomes by mutation:")
    for mutation in sorted(table):
        print(f"  {mutation:22s} {dict(table[mutation])}")
    print(f"  {'total':22s} {dict(totals)}")
    for mutation, outcomes in table.items():
        assert set(outcomes) <= EXPECTED[mutation], (mutation, outcomes)
    assert set(totals) == set(REASONS) | {"ok"}  # every reason was produced at least once
    assert sum(totals.values()) == len(datagrams) == 12_000

    fake = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fake.bind(("127.0.0.1", 0))
    robot = UdpRobot("127.0.0.1", fake.getsockname()[1], OBS_DIM, ACTION_DIM)
    try:
        address = robot.local_address

        def handled() -> int:  # every datagram ends as exactly one of these
            c = robot.counters
            return sum(c.get(k, 0) for k in (*REASONS, "received", "duplicate", "reordered", "internal_error"))

        for start in range(0, len(datagrams), 50):  # small batches: never overflow the socket's receive buffer
            for _, data in datagrams[start : start + 50]:
                fake.sendto(data, address)
            assert wait_until(lambda s=start: handled() >= min(s + 50, len(datagrams))), robot.counters
        counters = robot.counters
        print(f"  UdpRobot counters      {counters}")
        for reason in REASONS:
            assert counters.get(reason, 0) == totals[reason], reason
        assert counters["received"] + counters.get("duplicate", 0) + counters.get("reordered", 0) == totals["ok"]
        assert counters.get("duplicate", 0) > 0 and counters.get("reordered", 0) > 0
        assert "internal_error" not in counters and "recv_error" not in counters and "foreign" not in counters
        assert robot.read()[0] is not None and np.isfinite(robot.read()[0]).all()
    finally:
        robot.close()
        fake.close()


# --- UdpRobot against a fake robot socket -------------------------------------------------------------------------


def test_udp_robot_keeps_the_newest_and_sends_valid_actions():
    fake = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fake.bind(("127.0.0.1", 0))
    fake.settimeout(2.0)
    robot = UdpRobot("127.0.0.1", fake.getsockname()[1], OBS_DIM, ACTION_DIM, hello_interval=0.05)
    try:
        assert robot.read()[0] is None and np.isnan(robot.read()[1]) and robot.episodes_started == 0
        hello, runtime_address = fake.recvfrom(2048)  # the handshake: a count-0 ACTION
        assert decode(hello, KIND_ACTION, 0).values.size == 0

        def obs(seq: int, reward: float = 0.0, ended: bool = False) -> bytes:
            return encode(KIND_OBS, seq, 0.0, obs_values(np.full(OBS_DIM, float(seq)), reward, ended))

        before = time.monotonic()
        # seq 1, 2, 2 (duplicate), 5 (3 and 4 lost), 3 (late), 4 (late), 5 (duplicate), 6 ends the episode
        for seq, reward, ended in [(1, 1.0, 0), (2, 2.0, 0), (2, 2.0, 0), (5, 5.0, 0), (3, 3.0, 0), (4, 4.0, 0)]:
            fake.sendto(obs(seq, reward, bool(ended)), runtime_address)
        fake.sendto(obs(5, 5.0), runtime_address)
        assert wait_until(lambda: robot.counters.get("received", 0) == 3)
        assert robot.read()[0][0] == 5.0 and robot.episodes_started == 0
        fake.sendto(obs(6, 0.5, True), runtime_address)
        assert wait_until(lambda: robot.counters.get("received", 0) == 4)
        time.sleep(0.05)
        assert robot.episodes_started == 0  # as of the observation last read: it changes with the read
        value, stamp = robot.read()
        assert robot.episodes_started == 1  # packet 6's obs is the next episode's first
        np.testing.assert_array_equal(value, [6.0, 6.0, 6.0])
        assert before <= stamp <= time.monotonic()
        c = robot.counters
        assert (c["received"], c["duplicate"], c["reordered"], c["lost"]) == (4, 2, 2, 2)
        assert robot.episode_returns == [1.0 + 2.0 + 5.0 + 0.5]  # accepted packets only: 8.5

        other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a stranger, once the robot is known
        other.sendto(obs(7), runtime_address)
        assert wait_until(lambda: robot.counters.get("foreign", 0) == 1)
        other.close()

        for data in _drain(fake):  # only hellos so far: no action was sent yet
            assert decode(data, KIND_ACTION, 0).values.size == 0
        robot.send(np.array([0.75]))
        robot.send(np.array([-0.25]))
        first, second = (decode(fake.recvfrom(2048)[0], KIND_ACTION, ACTION_DIM) for _ in range(2))
        assert first.values.tolist() == [0.75] and second.values.tolist() == [-0.25]
        assert second.seq == first.seq + 1
        robot.send(np.array([np.nan]))  # never raises, never sent
        robot.send(np.zeros(2))
        robot.send("nonsense")
        assert robot.counters["send_invalid"] == 3 and robot.counters["sent"] == 2
    finally:
        robot.close()
        fake.close()
    robot.send(np.array([0.0]))  # after close: counted, not raised
    assert robot.counters["send_failed"] == 1


def _drain(sock: socket.socket) -> list[bytes]:
    """Every datagram waiting on ``sock``, without blocking."""
    sock.setblocking(False)
    found = []
    try:
        while True:
            found.append(sock.recvfrom(2048)[0])
    except BlockingIOError:
        return found
    finally:
        sock.settimeout(2.0)
