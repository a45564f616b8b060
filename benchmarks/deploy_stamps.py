"""What a robot's misbehaving stamps do to the deploy loop's rate: before and after the fault, per ``tick_on`` mode.

    python benchmarks/deploy_stamps.py [--export EXPORT_DIR] [--seconds 10] [--fault-at 3]
    python benchmarks/deploy_stamps.py --smoke    # CI: every cell for 0.8 s, the fault at 0.2 s

A simulated Pendulum-v1 robot (``SimRobot``, real time, its own thread, 20 Hz, 10 ms latency) whose stamps are
bent at ``--fault-at`` seconds, driven by the deploy runtime (``ControlLoop``, ``configs/deploy/pendulum.yaml``
with ``estop_after: 0`` so the loop runs on through the faults). Faults: ``future_once`` (one measurement stamped
1e8 s ahead: a header from a robot whose clock jumped), ``jump`` (the robot's clock 5 s ahead for 0.5 s, then
back), ``restart`` (the robot's clock restarts from 0 and stays on that time base), ``bursts`` (from the fault on,
every second measurement is held back and delivered with the next). Printed per cell: the tick rate before the
fault and from 0.5 s after it to the end, the stamp-fault, stale and late-tick counters. Run it alone.
To measure the loop before a change, put that version first on the path: ``PYTHONPATH=/tmp/old python ...``.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ("none", "future_once", "jump", "restart", "bursts")


class BentStamps:
    """A robot whose measurements' stamps (or delivery) change from ``fault_at`` seconds (its clock) on."""

    def __init__(self, robot, fault: str, fault_at: float) -> None:
        self.robot, self.fault, self.fault_at = robot, fault, fault_at
        self.obs_dim, self.action_dim = robot.obs_dim, robot.action_dim
        self.counters = robot.counters
        self._held = None  # bursts: (obs, stamp) delivered instead of the newest while a newer one is held back
        self._seen = 0

    @property
    def episode_returns(self):
        return self.robot.episode_returns

    def read(self):
        obs, stamp = self.robot.read()
        if obs is None or not stamp >= self.fault_at or self.fault == "none":
            return obs, stamp
        since = stamp - self.fault_at
        if self.fault == "future_once":
            return obs, stamp + 1e8 if since < self.robot.period else stamp
        if self.fault == "jump":
            return obs, stamp + 5.0 if since < 0.5 else stamp
        if self.fault == "restart":
            return obs, since
        # bursts: an odd-numbered measurement is not delivered until the next one arrives
        index = round(since / self.robot.period)
        if index % 2 == 1:
            return self._held if self._held is not None else (obs, stamp)
        self._held = (obs, stamp)
        return obs, stamp

    def send(self, action) -> None:
        self.robot.send(action)

    def close(self) -> None:
        self.robot.close()


def run_cell(export_dir: Path, fault: str, tick_on: str, seconds: float, fault_at: float) -> dict:
    from dataclasses import replace

    from robopt.sim2real.deploy_config import load_deploy_config
    from robopt.sim2real.model import load_export
    from robopt.sim2real.runtime import ControlLoop
    from robopt.sim2real.simrobot import SimRobot

    sidecar, policy = load_export(export_dir)
    config = load_deploy_config(ROOT / "configs" / "deploy" / "pendulum.yaml")
    config = replace(config, tick_on=tick_on, estop_after=0)
    sim = SimRobot("Pendulum-v1", sidecar.control_period, latency_ms=10.0, seed=0, realtime=True)
    robot = BentStamps(sim, fault, time.monotonic() + fault_at)
    loop = ControlLoop(policy, robot, sidecar, config, clock=time.monotonic)
    start = time.monotonic()
    loop.run(duration=seconds)
    loop.stop()
    summary = loop.summary()
    counters = summary["counters"]
    loop.close()
    times = loop.log.records()["time"] + (loop._start - start)
    before = times[times < fault_at]
    after = times[times >= fault_at + 0.5]
    rate = lambda t: (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 else math.nan  # noqa: E731
    result = {
        "rate_before": rate(before),
        "rate_after": rate(after),
        "stamp_faults": counters.get("stamp_faults", "-"),
        "stale": counters.get("stale", 0),
        "late": counters.get("late_ticks", "-"),
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--export",
        type=Path,
        default=None,
        help="an exported Pendulum-v1 policy (default: a tiny untrained one, rates only)",
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fault-at", type=float, default=3.0)
    parser.add_argument("--faults", nargs="+", default=list(FAULTS), choices=FAULTS)
    parser.add_argument("--modes", nargs="+", default=["clock", "measurement"], choices=["clock", "measurement"])
    args = parse_smoke_args(parser, smoke={"seconds": 0.8, "fault_at": 0.2})
    with tempfile.TemporaryDirectory() as tmp:
        export_dir = args.export
        if export_dir is None:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from deploy_rates import make_export

            export_dir = make_export(Path(tmp))
        print("fault        tick_on      rate before  rate after  stamp_faults  stale  late")
        for fault in args.faults:
            for mode in args.modes:
                r = run_cell(export_dir, fault, mode, args.seconds, args.fault_at)
                print(
                    f"{fault:12s} {mode:12s} {r['rate_before']:8.1f} Hz {r['rate_after']:8.1f} Hz  "
                    f"{r['stamp_faults']!s:>12s} {r['stale']:6d} {r['late']!s:>5s}",
                    flush=True,
                )
                time.sleep(0.2)


if __name__ == "__main__":
    main()
