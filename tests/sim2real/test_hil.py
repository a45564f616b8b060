"""Hardware in the loop: ``robopt sim-robot`` in another process, the deploy runtime driving it over UDP."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from robopt.sim2real.deploy import deploy
from robopt.sim2real.model import load_export

PERIOD = 0.01  # 100 Hz on both sides: a 200-step Pendulum episode takes 2 s


def start_sim_robot(*options: str) -> tuple[subprocess.Popen, int]:
    command = [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", "Pendulum-v1", "--port", "0",
               "--period", str(PERIOD), "--seed", "0", *options]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in server.stdout:
        match = re.search(r"on udp [\d.]+:(\d+)", line)
        if match:
            return server, int(match.group(1))
    server.kill()
    raise AssertionError(f"sim-robot did not start: {server.stdout.read()}")


@pytest.mark.slow  # end to end in other processes: make test, not test-fast
@pytest.mark.parametrize(("options", "tolerance"), [((), 0.02), (("--latency-ms", "10", "--loss", "0.01"), 0.1)])
# measured: -1602.8, -1862.5 over UDP against -1603.1, -1862.5 in process; -1602.3, -1867.0 with 10 ms and 1 % loss
def test_policy_over_udp_returns_what_it_returns_in_process(export_dir, tmp_path, pendulum_returns, options, tolerance):
    sidecar, policy = load_export(export_dir)
    reference = pendulum_returns(policy, 2)  # the same two episodes in one process, no runtime in between
    server, port = start_sim_robot("--episodes", "2", *options)
    try:
        config = tmp_path / "deploy.yaml"
        config.write_text(f"period: {PERIOD}\nestop_after: 0\n")
        summary = deploy(export_dir, f"udp://127.0.0.1:{port}", duration=5.5, config_path=config, echo=lambda _: None)
        output, _ = server.communicate(timeout=10)
    finally:
        server.kill()
    returns = [float(value) for value in re.findall(r"episode \d+: return (-?[\d.]+)", output)]
    assert len(returns) == 2, output
    for deployed, expected in zip(returns, reference):
        # the two processes tick out of phase: an action may reach the robot one 10 ms step late
        assert abs(deployed - expected) <= tolerance * abs(expected), (returns, reference)
    assert summary["ticks"] > 400 and summary["counters"].get("nonfinite_action", 0) == 0
