"""``robopt deploy EXPORT_DIR --robot sim:ENV_ID|udp://HOST:PORT|ros2://[DOMAIN]|zenoh://[ENDPOINT]``: run an
exported policy on a robot.

Torch-free at import and for network robots (numpy, onnxruntime, pyyaml); a ``sim:`` robot imports torch and the
simulators when it is built. Prints a status line about once a second and a summary at the end (ticks, rate,
tick latency p50/p99, every counter, episode returns of simulated robots). Bad input: one line, exit 2. The run
ends (``--duration``, Ctrl-C) with ``ControlLoop.stop()``: the safe action until it reaches its target.
"""

from __future__ import annotations

import gc
import math
import sys
from pathlib import Path


def deploy(
    export_dir: Path,
    robot_spec: str,
    duration: float | None = None,
    config_path: Path | None = None,
    log_path: Path | None = None,
    echo=print,
) -> dict:
    """Load and check the export, build the robot, run the control loop; the summary dict. DeployError/ConfigError."""
    from robopt.sim2real.deploy_config import check_log_path, load_deploy_config
    from robopt.sim2real.model import load_export
    from robopt.sim2real.robots import parse_robot
    from robopt.sim2real.runtime import ControlLoop

    config = load_deploy_config(config_path)
    if log_path is not None:
        from dataclasses import replace

        config = replace(config, log_path=str(log_path))
    if duration is not None and not duration > 0:
        from robopt.sim2real.sidecar import DeployError

        raise DeployError(f"--duration must be > 0 seconds, got {duration}")
    if config.log_path:  # before anything starts: a log that cannot be written is found now, not after the run
        check_log_path(config.log_path)
    sidecar, policy = load_export(export_dir)
    # Objects that exist now (the runtime, onnxruntime, numpy; torch in a full install) leave the garbage
    # collector's generations: a collection during the loop then scans only what the loop allocates (a full
    # collection with torch loaded takes about 85 ms here, twenty 4 ms periods). Before the robot connects: a
    # robot that runs from the first packet would step that long without a command.
    gc.collect()
    gc.freeze()
    try:
        robot = parse_robot(robot_spec, sidecar, robot_section=config.robot, period=config.period or None)
    except BaseException:
        gc.unfreeze()
        raise
    live = sys.stdout.isatty()

    def show(status: dict) -> None:
        notices = [f"robot: {n}" for n in status.get("notices", ())]  # what the link reports once (a silent topic)
        notices += [f"loop: {n}" for n in status.get("loop_notices", ())]  # stamp faults, slow seconds, scheduling
        for notice in notices:
            if live:
                sys.stdout.write("\r\033[K")
            echo(notice)
        if live:  # rewrite one line in a terminal
            sys.stdout.write(f"\r{format_status(status)}\033[K")
            sys.stdout.flush()
        else:
            echo(format_status(status))

    try:
        loop = ControlLoop(policy, robot, sidecar, config, status=show)
    except BaseException:
        gc.unfreeze()
        robot.close()
        raise
    try:
        loop.run(duration=duration)
    finally:
        gc.unfreeze()
        try:
            loop.stop()  # the deployment ends: e-stop, the safe action until it reaches its target
            summary = loop.summary()
        finally:
            if live:
                sys.stdout.write("\n")
            saved = loop.close()  # closes the robot, then saves the log (DeployError when it cannot)
    summary["log_path"] = str(saved) if saved else None
    return summary


def format_status(status: dict) -> str:
    """One status line: time, ticks, rate, compute p50/p99, observation age and the checks that fired."""
    fired = " ".join(f"{k}={v}" for k, v in status["fired"].items()) or "no checks fired"
    age = status["obs_age_ms"]
    age = f"{age:.1f} ms" if math.isfinite(age) else "n/a (no sane stamp yet)"
    return (
        f"{status['time']:7.1f}s  {status['ticks']} ticks  {status['rate_hz']:.1f} Hz  compute p50 "
        f"{status['compute_p50_us']:.0f} us p99 {status['compute_p99_us']:.0f} us  obs age {age}  {fired}"
    )


def format_summary(summary: dict) -> str:
    """The final report, several lines."""
    counters, lowest = summary["counters"], summary["lowest_rate_hz"]
    timing = (
        f"timing: period {summary['period_hz']:.1f} Hz, lowest 1-s rate "
        + (f"{lowest:.1f} Hz" if math.isfinite(lowest) else "n/a (under a second)")
        + f", late ticks {counters['late_ticks']}, skipped {counters['skipped_ticks']}, missed deadlines "
        f"{counters['missed_deadline']}, stamp faults {counters['stamp_faults']} (future {counters['stamp_future']}, "
        f"backward {counters['stamp_backward']}, invalid {counters['stamp_invalid']})"
    )
    lines = [
        f"ticks: {summary['ticks']} in {summary['seconds']:.2f} s ({summary['rate_hz']:.1f} Hz)"
        + ("  (stopped by Ctrl-C)" if summary["interrupted"] else ""),
        timing,
        f"tick latency (read to send): p50 {summary['compute_p50_us']:.0f} us, p99 {summary['compute_p99_us']:.0f} us;"
        f" policy call (median at start) {summary['policy_median_us']:.0f} us",
        "counters: " + ", ".join(f"{k}={v}" for k, v in counters.items()),
    ]
    lines += [f"loop: {notice}" for notice in summary["notices"]]
    if summary["estopped"]:
        lines.append("e-stop: LATCHED")
    if summary["episode_returns"]:
        import numpy as np

        returns = np.asarray(summary["episode_returns"])
        lines.append(
            f"episodes: {returns.size}, return mean {returns.mean():.2f} (min {returns.min():.2f}, max "
            f"{returns.max():.2f})"
        )
    return "\n".join(lines)


def register(app, fail) -> None:
    """Add ``robopt deploy EXPORT_DIR --robot SPEC [--duration S] [--config deploy.yaml] [--log PATH]``."""
    import typer

    @app.command("deploy")
    def deploy_command(
        export_dir: Path = typer.Argument(..., help="export directory (policy.json, policy.onnx, parity.npz)"),
        robot: str = typer.Option(
            ...,
            "--robot",
            help="sim:ENV_ID[?noise=0.01&latency_ms=10&delay_ticks=1&drop=0.01&seed=0], udp://HOST:PORT, "
            "ros2://[DOMAIN_ID] or zenoh://[ENDPOINT] (topics from the deploy config's robot section)",
        ),
        duration: float | None = typer.Option(None, "--duration", help="seconds to run (default: until Ctrl-C)"),
        config: Path | None = typer.Option(None, "--config", help="deploy YAML (period, limits, safe action...)"),
        log: Path | None = typer.Option(None, "--log", help="save the tick log here (.npy)"),
    ) -> None:
        """Run an exported policy on a robot at its control rate behind the safety layer."""
        from robopt.options import ConfigError

        try:
            summary = deploy(export_dir, robot, duration, config, log, echo=typer.echo)
        except (ConfigError, ValueError) as error:  # DeployError is a ValueError
            fail(str(error))
        except KeyboardInterrupt:  # during start-up; the running loop handles its own Ctrl-C
            fail("stopped by user before the control loop started", code=130)
        typer.echo(format_summary(summary))
        if summary["log_path"]:
            typer.echo(f"tick log: {summary['log_path']}")
