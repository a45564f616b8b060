"""UdpRobot and the sim-robot server over localhost: fuzzing, ordering, and end-to-end runs against Pendulum-v1."""

from __future__ import annotations

import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter

import numpy as np
import pytest

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


def wait_until(condition, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.002)
    return condition()


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
        assert robot.read()[0] is None and np.isnan(robot.read()[1])
        hello, runtime_address = fake.recvfrom(2048)  # the handshake: a count-0 ACTION
        assert decode(hello, KIND_ACTION, 0).values.size == 0

        def obs(seq: int, reward: float = 0.0, ended: bool = False) -> bytes:
            return encode(KIND_OBS, seq, 0.0, obs_values(np.full(OBS_DIM, float(seq)), reward, ended))

        before = time.monotonic()
        # seq 1, 2, 2 (duplicate), 5 (3 and 4 lost), 3 (late), 4 (late), 5 (duplicate), 6 ends the episode
        for seq, reward, ended in [(1, 1.0, 0), (2, 2.0, 0), (2, 2.0, 0), (5, 5.0, 0), (3, 3.0, 0), (4, 4.0, 0)]:
            fake.sendto(obs(seq, reward, bool(ended)), runtime_address)
        fake.sendto(obs(5, 5.0), runtime_address)
        fake.sendto(obs(6, 0.5, True), runtime_address)
        assert wait_until(lambda: robot.counters.get("received", 0) == 4)
        time.sleep(0.05)
        value, stamp = robot.read()
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


# --- end to end against the sim-robot server ---------------------------------------------------------------------


def damping_policy(obs: np.ndarray) -> np.ndarray:
    """A fixed policy for Pendulum-v1 (obs: cos, sin, angular velocity): torque against the velocity."""
    return np.clip([-0.5 * obs[2]], -2.0, 2.0)


def drive(robot: UdpRobot, seconds: float, until_episodes: int = 1) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(robot.episode_returns) < until_episodes:
        obs, _ = robot.read()
        if obs is not None:
            robot.send(damping_policy(obs))
        time.sleep(0.005)


def test_sim_robot_cli_end_to_end():
    command = [sys.executable, "-m", "robopt.sim2real.server", "sim-robot", "Pendulum-v1"]
    command += ["--port", "0", "--period", "0.01", "--duration", "5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    try:
        ready = lines.get(timeout=10)
        port = int(re.search(r"udp 127\.0\.0\.1:(\d+)", ready).group(1))
        with UdpRobot("127.0.0.1", port, OBS_DIM, ACTION_DIM) as robot:
            drive(robot, 3.5)  # one 200-step episode at 0.01 s is 2 s
            client = robot.counters
            returns = robot.episode_returns
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=5) == 0
    finally:
        process.kill()
    output = "".join(lines.get() for _ in range(lines.qsize()))
    server_returns = [float(x) for x in re.findall(r"episode \d+: return (-?[\d.]+) \(200 steps\)", output)]
    assert len(returns) >= 1 and len(server_returns) >= 1, output
    # no loss: the client's sum of the per-step reward fields is the server's episode return (printed to 3 decimals)
    assert returns[0] == pytest.approx(server_returns[0], abs=1e-3)
    assert returns[0] < 0.0  # Pendulum rewards are <= 0
    assert client["received"] >= 200 and client.get("lost", 0) == 0 and client["sent"] >= 150
    summary = output.strip().splitlines()[-1]
    assert summary.startswith("sim-robot: episodes ") and "dropped: none" in summary, summary


def test_sim_robot_loss_latency_and_malformed_actions():
    from robopt.sim2real.server import SimRobotServer

    server = SimRobotServer("Pendulum-v1", period=0.01, latency_ms=25.0, loss=0.2, seed=1, log=lambda line: None)
    stop, results = threading.Event(), []
    thread = threading.Thread(target=lambda: results.append(server.run(duration=10.0, stop=stop)))
    thread.start()
    robot = UdpRobot("127.0.0.1", server.address[1], OBS_DIM, ACTION_DIM)
    try:
        started = time.monotonic()
        assert wait_until(lambda: robot.read()[0] is not None, 3.0)
        assert time.monotonic() - started >= 0.05  # hello in and reset obs out, 25 ms each way
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        good = encode(KIND_ACTION, 0, 0.0, np.array([0.1]))
        bad = [
            good[:-1] + bytes([good[-1] ^ 1]),  # checksum
            encode(KIND_ACTION, 0, 0.0, np.array([0.1, 0.2])),  # count
            encode(KIND_ACTION, 0, 0.0, np.array([np.nan]), allow_non_finite=True),  # non_finite
            encode(KIND_OBS, 0, 0.0, np.array([0.1])),  # kind
            b"",  # short
        ]
        for data in bad * 20:  # some are lost on the way (loss 0.2), the rest counted by reason
            stranger.sendto(data, server.address)
        stranger.close()
        drive(robot, 1.5, until_episodes=10)
        time.sleep(0.15)  # the client's last actions land while the server still runs
        stop.set()
        thread.join(timeout=5)
        time.sleep(0.1)  # and the server's last observations
        client = robot.counters
    finally:
        robot.close()
        stop.set()
        thread.join(timeout=5)
        server.close()
    c = Counter(results[0].counters)
    dropped_by_reason = sum(c[k] for k in ("checksum", "count", "non_finite", "kind", "short"))
    assert all(c[k] > 5 for k in ("checksum", "count", "non_finite", "kind", "short")), c
    # every datagram the client sent, and the 100 bad ones, were lost on the way or taken or counted by reason
    assert client["sent"] + client["hello"] + 100 == c["received"] + c["hello"] + c["lost_in"] + dropped_by_reason
    assert c["clipped"] == 0 and c.get("peer_changed", 0) == 0
    # the client sees the server's simulated losses as seq gaps; losses after the last packet it got go unseen
    # (those among the ~3 packets still delayed at the stop, and a run of P(k) = 0.2**k after them)
    assert c["lost_out"] - 6 <= client.get("lost", 0) <= c["lost_out"]
    assert 0.1 < c["lost_out"] / (c["sent"] + c["lost_out"]) < 0.3


def test_sim_robot_rests_after_its_command_timeout():
    from robopt.sim2real.server import ServeResult, SimRobotServer

    server = SimRobotServer("Pendulum-v1", period=0.01, command_timeout_ms=200, log=lambda line: None)
    try:
        assert "command timeout 0.2 s" in server.ready_line()
        result, peer = ServeResult(), ("127.0.0.1", 9)
        server.env.reset(seed=0)
        server._accept(encode(KIND_ACTION, 1, 0.0, np.array([1.5])), peer)
        server._step(0, result)
        assert server.action.tolist() == [1.5] and "command_timeout" not in server.counters
        server._last_command -= 0.1  # as if the command came 100 ms ago: still the last one
        server._step(1, result)
        assert server.action.tolist() == [1.5]
        server._last_command -= 0.15  # 250 ms: zero action from this step on, counted once
        server._step(2, result)
        server._step(3, result)
        assert server.action.tolist() == [0.0] and server.counters["command_timeout"] == 1
        server._accept(encode(KIND_ACTION, 2, 0.0, np.array([-1.0])), peer)  # a command again
        server._step(4, result)
        assert server.action.tolist() == [-1.0]
        assert "command timeouts 1," in ServeResult(counters=server.counters).summary()
    finally:
        server.close()
    default = SimRobotServer("Pendulum-v1", command_timeout_ms=None, log=lambda line: None)  # 10 periods of 0.05 s
    off = SimRobotServer("Pendulum-v1", command_timeout_ms=0, log=lambda line: None)
    try:
        assert default.command_timeout == pytest.approx(0.5) and "command timeout off" in off.ready_line()
    finally:
        default.close()
        off.close()


@pytest.mark.parametrize(
    "args, message",
    [
        (["Pendulum-v1", "--port", "0", "--loss", "2"], "--loss must be a finite number >= 0.0 and < 0.999"),
        (["Pendulum-v1", "--port", "0", "--period", "0"], "--period must be a finite number > 0.0"),
        (["Pendulum-v1", "--port", "70000"], "port must be an integer in [0, 65535], got 70000"),
        (["Pendulum-v1", "--port", "0", "--peer", "nohost"], "--peer must be HOST:PORT"),
        (["Pendulum-v1", "--port", "0", "--episodes", "0"], "--episodes must be an integer >= 1"),
        (["NoSuchEnv-v0", "--port", "0"], "unknown Gymnasium env id 'NoSuchEnv-v0'"),
        (["Pendulum-v1", "--port", "0", "--command-timeout-ms", "-5"], "--command-timeout-ms must be a finite number"),
    ],
)
def test_sim_robot_bad_input_is_one_line_exit_2(args, message):
    import typer
    from typer.testing import CliRunner

    from robopt.sim2real.server import _fail, register

    app = typer.Typer()
    app.callback()(lambda: None)
    register(app, _fail)
    result = CliRunner().invoke(app, ["sim-robot", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("robopt: error:")]
    assert len(lines) == 1 and message in lines[0], result.output
    assert "Traceback" not in result.output
