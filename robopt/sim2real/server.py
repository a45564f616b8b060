"""A simulated robot behind the UDP link, for hardware-in-the-loop tests of a deploy runtime (``robopt sim-robot``;
the command and its ROS 2 / Zenoh variant are in ``sim_robot_cli.py``).

A robopt env (``make_env(env_id, 1)``; torch) is stepped every ``period`` seconds with the latest ACTION
received (zeros before any; actions are clipped into the env's bounds, counted "clipped"). After each step an
OBS packet (obs, reward, episode-ended flag; see ``protocol.py``) goes to the peer. Shapes: D obs dim, A action dim.

Handshake: with no ``peer`` the server waits, not stepping, until a valid ACTION packet arrives (a hello,
count 0, is enough; ``UdpRobot`` sends one at start and repeats it until OBS packets arrive), then sends the
reset observation (reward 0, not ended) and steps from there. OBS packets go to the source of the latest valid
ACTION packet, so a restarted runtime is picked up. With ``peer`` ("HOST:PORT") it sends there from the start.

Command timeout: after ``command_timeout`` seconds (``--command-timeout-ms``; default 10 periods, 0: off) without
a valid ACTION, the env steps with zero action until the next one arrives (counted "command_timeout", once per
timeout): a runtime that stops or dies leaves the robot at rest, not on its last command. A real robot needs the
same guard in its own firmware.

Actuator delay: with ``delay_ticks`` k (``--delay-ticks``) the action a step would apply is applied k steps later
(zeros until then), as ``SimRobot``'s ``delay_ticks`` and a policy's ``deploy_conditions`` in training.

Link faults: each datagram in either direction is lost with probability ``loss`` ("lost_in", "lost_out") and
delayed by ``latency_ms`` (one way). Malformed ACTION packets are dropped and counted by ``PacketError`` reason;
duplicate and reordered ones by "duplicate" and "reordered". Nothing a datagram holds stops the server.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

import numpy as np

from robopt.sim2real.network import MAX_DATAGRAM, SequenceFilter, open_socket, resolve_address, same_address
from robopt.sim2real.protocol import KIND_ACTION, KIND_OBS, PacketError, decode, encode, obs_values
from robopt.sim2real.serving import (
    COMMAND_TIMEOUT_PERIODS,
    ServeResult,
    check_number,
    env_period,
    parse_peer,
    run_deadline,
    serve_and_close,
)


class SimRobotServer:
    """Binds the socket and builds the env at construction (``address`` is then known); ``run`` serves."""

    def __init__(
        self,
        env_id: str,
        port: int = 0,
        host: str = "127.0.0.1",
        period: float | None = None,
        latency_ms: float = 0.0,
        loss: float = 0.0,
        seed: int = 0,
        peer: str | None = None,
        log: Callable[[str], None] | None = None,
        command_timeout_ms: float | None = None,
        delay_ticks: int = 0,
    ) -> None:
        check_number("--period", period, 0.0, low_open=True)
        if isinstance(delay_ticks, bool) or not isinstance(delay_ticks, int) or delay_ticks < 0:
            raise ValueError(f"--delay-ticks must be an integer >= 0 (whole steps), got {delay_ticks!r}")
        check_number("--command-timeout-ms", command_timeout_ms, 0.0)
        check_number("--latency-ms", latency_ms, 0.0)
        check_number("--loss", loss, 0.0, 0.999)
        self.peer = None if peer is None else resolve_address(*parse_peer(peer))
        self.fixed_peer = peer is not None
        self.latency, self.loss = latency_ms / 1000.0, loss
        self.log = log or (lambda line: print(line, flush=True))
        self.rng = np.random.default_rng(seed)
        from robopt.sim2real.serving import make_sim_env  # torch and the simulators: only when serving a sim

        self.env = make_sim_env(env_id)
        self.env_id, self.seed = env_id, seed
        self.period = env_period(self.env) if period is None else float(period)
        timeout = COMMAND_TIMEOUT_PERIODS * self.period if command_timeout_ms is None else command_timeout_ms / 1000.0
        self.command_timeout = timeout  # seconds; 0: off
        self.low = self.env.action_low.cpu().numpy().astype(np.float64)  # [A]
        self.high = self.env.action_high.cpu().numpy().astype(np.float64)  # [A]
        try:
            self.socket = open_socket(host, port)
        except Exception:
            self.env.close()
            raise
        self.address = self.socket.getsockname()
        self.counters: Counter[str] = Counter()
        self.action = np.zeros(self.env.action_dim)  # [A] the latest commanded action
        self.delayed = deque([np.zeros(self.env.action_dim)] * delay_ticks)  # [k] actions on their way to the motors
        self.delay_ticks = delay_ticks
        self._last_command = math.nan  # time.monotonic() of the latest valid ACTION; NaN: none since the timeout
        self.filter = SequenceFilter()
        self._outbox: list = []  # heap of (due, n, datagram, address)
        self._inbox: list = []  # heap of (due, n, datagram, address)
        self._n = 0

    def ready_line(self) -> str:
        waiting = f"sending to {self.peer[0]}:{self.peer[1]}" if self.fixed_peer else "waiting for a hello/ACTION"
        return (
            f"sim-robot: {self.env_id} on udp {self.address[0]}:{self.address[1]}, period {self.period:g} s, "
            f"obs_dim {self.env.obs_dim}, action_dim {self.env.action_dim}, command timeout "
            f"{f'{self.command_timeout:g} s' if self.command_timeout > 0 else 'off'}"
            f"{f', actuator delay {self.delay_ticks} steps' if self.delay_ticks else ''}; {waiting}"
        )

    def run(
        self, duration: float | None = None, episodes: int | None = None, stop: threading.Event | None = None
    ) -> ServeResult:
        """Serve until ``duration`` seconds pass, ``episodes`` episodes end, ``stop`` is set or Ctrl-C."""
        deadline = run_deadline(duration, episodes)
        result = ServeResult()
        self.log(self.ready_line())
        next_step, seq = None, 0
        try:
            while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
                if episodes is not None and len(result.episode_returns) >= episodes:
                    break
                now = time.monotonic()
                wake = min(
                    deadline, now + 0.05, next_step or math.inf, *(q[0][0] for q in (self._inbox, self._outbox) if q)
                )
                self._receive(max(wake - now, 0.0))
                now = time.monotonic()
                self._deliver(now)
                if next_step is None and self.peer is not None:  # start: send the reset observation
                    obs = self.env.reset(seed=self.seed)[0].numpy()
                    seq = self._emit(seq, obs_values(obs, 0.0, False))
                    next_step = now + self.period
                elif next_step is not None and now >= next_step:
                    seq = self._step(seq, result)
                    next_step += self.period
                    if next_step < now:  # fell more than a period behind: do not try to catch up
                        self.counters["overrun"] += 1
                        next_step = now + self.period
                self._flush(time.monotonic())
        except KeyboardInterrupt:
            self.log("sim-robot: interrupted")
        result.counters = dict(self.counters)
        return result

    def close(self) -> None:
        self.socket.close()
        self.env.close()

    def _step(self, seq: int, result: ServeResult) -> int:
        import torch

        if self.command_timeout > 0 and time.monotonic() - self._last_command > self.command_timeout:
            self.action = np.zeros(self.env.action_dim)  # no command for too long: rest, not the last command
            self._last_command = math.nan
            self.counters["command_timeout"] += 1

        applied = self.action
        if self.delay_ticks:
            self.delayed.append(self.action)
            applied = self.delayed.popleft()
        action = torch.as_tensor(applied[None], dtype=torch.float32)  # [1, A]
        obs, reward, terminated, truncated, info = self.env.step(action)
        ended = bool(terminated[0] or truncated[0])
        result.steps += 1
        if ended:
            result.episode_returns.append(float(info["episode_return"][0]))
            result.episode_lengths.append(int(info["episode_length"][0]))
            k = len(result.episode_returns)
            self.log(f"episode {k}: return {result.episode_returns[-1]:.3f} ({result.episode_lengths[-1]} steps)")
        return self._emit(seq, obs_values(obs[0].numpy(), float(reward[0]), ended))

    def _emit(self, seq: int, values: np.ndarray) -> int:
        """Queue one OBS packet (or lose it); returns the next seq."""
        if self.rng.random() < self.loss:
            self.counters["lost_out"] += 1
        else:
            self._n += 1
            datagram = encode(KIND_OBS, seq, time.monotonic(), values)
            heapq.heappush(self._outbox, (time.monotonic() + self.latency, self._n, datagram, self.peer))
        return (seq + 1) % 2**32

    def _flush(self, now: float) -> None:
        while self._outbox and self._outbox[0][0] <= now:
            _, _, datagram, address = heapq.heappop(self._outbox)
            try:
                self.socket.sendto(datagram, address)
                self.counters["sent"] += 1
            except OSError:
                self.counters["send_failed"] += 1

    def _receive(self, timeout: float) -> None:
        """Wait up to ``timeout`` for datagrams, then take every one waiting; each is lost or queued."""
        self.socket.settimeout(timeout)
        while True:
            try:
                datagram, address = self.socket.recvfrom(MAX_DATAGRAM)
            except (BlockingIOError, TimeoutError):
                return
            except OSError:
                self.counters["recv_error"] += 1
                return
            if self.rng.random() < self.loss:
                self.counters["lost_in"] += 1
            else:
                self._n += 1
                heapq.heappush(self._inbox, (time.monotonic() + self.latency, self._n, datagram, address))
            self.socket.settimeout(0.0)

    def _deliver(self, now: float) -> None:
        while self._inbox and self._inbox[0][0] <= now:
            _, _, datagram, address = heapq.heappop(self._inbox)
            self._accept(datagram, address)

    def _accept(self, datagram: bytes, address: tuple) -> None:
        try:
            packet = decode(datagram, KIND_ACTION, (0, self.env.action_dim))
        except PacketError as error:
            self.counters[error.reason] += 1
            return
        if not self.fixed_peer and (self.peer is None or not same_address(address, self.peer)):
            if self.peer is not None:
                self.counters["peer_changed"] += 1
            self.peer = address
            self.filter.reset()
        verdict, lost = self.filter.classify(packet.seq)
        if verdict in ("duplicate", "reordered"):
            self.counters[verdict] += 1
            return
        if verdict == "resync":
            self.counters["resync"] += 1
        if lost:
            self.counters["lost"] += lost
        if packet.values.size == 0:
            self.counters["hello"] += 1
            return
        self.counters["received"] += 1
        action = packet.values.astype(np.float64)
        clipped = np.clip(action, self.low, self.high)
        if not np.array_equal(clipped, action):
            self.counters["clipped"] += 1
        self.action, self._last_command = clipped, time.monotonic()


def serve(
    env_id: str,
    port: int = 0,
    host: str = "127.0.0.1",
    period: float | None = None,
    latency_ms: float = 0.0,
    loss: float = 0.0,
    seed: int = 0,
    duration: float | None = None,
    episodes: int | None = None,
    peer: str | None = None,
    stop: threading.Event | None = None,
    log: Callable[[str], None] | None = None,
    command_timeout_ms: float | None = None,
    delay_ticks: int = 0,
) -> ServeResult:
    """Build a ``SimRobotServer``, serve, close; prints (``log``) the ready line, each episode and the summary."""
    server = SimRobotServer(
        env_id, port, host, period, latency_ms, loss, seed, peer, log, command_timeout_ms, delay_ticks
    )
    return serve_and_close(server, duration, episodes, stop)
