"""``robopt sim-robot``: serve a simulated robot over UDP (``server.py``) or as ROS 2 topics over DDS or Zenoh
(``topic_server.py``). ``register(app, fail)`` adds the command; ``python -m robopt.sim2real.sim_robot_cli sim-robot
...`` runs it on its own (tests and benchmarks start the simulated robot in another process so).
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from robopt.sim2real.server import serve
from robopt.sim2real.serving import ServeResult, serve_and_close


def register(app: typer.Typer, fail: Callable[..., None]) -> None:
    @app.command("sim-robot")
    def sim_robot(
        env_id: str = typer.Argument(..., help="robopt env id to simulate, e.g. Pendulum-v1"),
        port: int | None = typer.Option(None, "--port", help="UDP port to listen on (0: any free port, printed)"),
        host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
        period: float | None = typer.Option(None, "--period", help="seconds per step (default: the env's dt)"),
        latency_ms: float = typer.Option(0.0, "--latency-ms", help="added one-way delay of every message"),
        loss: float = typer.Option(0.0, "--loss", help="probability each message is lost, either direction"),
        seed: int = typer.Option(0, "--seed", help="env reset seed and message-loss seed"),
        duration: float | None = typer.Option(None, "--duration", help="stop after this many seconds"),
        episodes: int | None = typer.Option(None, "--episodes", help="stop after this many episodes"),
        peer: str | None = typer.Option(None, "--peer", help="UDP: HOST:PORT to send OBS to from the start"),
        command_timeout_ms: float | None = typer.Option(
            None,
            "--command-timeout-ms",
            help="zero action after this long with no command (default 10 periods; 0: off)",
        ),
        delay_ticks: int = typer.Option(0, "--delay-ticks", help="UDP: apply each action this many steps later"),
        ros2: bool = typer.Option(False, "--ros2", help="serve ROS 2 topics over DDS instead of UDP"),
        zenoh: bool = typer.Option(False, "--zenoh", help="serve ROS 2 topics over Zenoh instead of UDP"),
        domain_id: int = typer.Option(0, "--domain-id", help="--ros2: the DDS domain (0..232)"),
        interface: str | None = typer.Option(None, "--interface", help="--ros2: network interface (unicast, e.g. lo)"),
        dds_peer: list[str] | None = typer.Option(None, "--dds-peer", help="--ros2: address to reach (unicast)"),
        connect: list[str] | None = typer.Option(None, "--connect", help="--zenoh: endpoint, e.g. tcp/127.0.0.1:7447"),
        listen: list[str] | None = typer.Option(None, "--listen", help="--zenoh: endpoint to listen on"),
        multicast: bool = typer.Option(
            True,
            "--multicast/--no-multicast",
            help="--zenoh: find and be found by other Zenoh peers through multicast scouting (off: only --connect and "
            "--listen endpoints; two robots on one machine then never see each other's topics)",
        ),
        command_topic: str | None = typer.Option(
            None,
            "--command-topic",
            help="--ros2/--zenoh: command topic (default: /joint_group_position_controller/commands for a robot from "
            "its description, as configs/deploy/*_ros2.yaml send; /robopt/command otherwise, the default deploy map's)",
        ),
        cmd_vel: str | None = typer.Option(
            None,
            "--cmd-vel",
            help="--ros2/--zenoh, a robot from its description: score this Twist topic's velocity "
            "command against the body's velocity (printed at the end)",
        ),
    ) -> None:
        """Serve a simulated robot: over UDP (OBS out, ACTION in), or as ROS 2 topics (--ros2, --zenoh)."""
        from robopt.options import ConfigError

        try:
            if ros2 and zenoh:
                raise ValueError("give --ros2 or --zenoh, not both")
            if ros2 or zenoh:
                if port is not None or peer is not None or delay_ticks:
                    raise ValueError("--port, --peer and --delay-ticks are UDP options; --ros2/--zenoh serve topics")
                serve_topics(
                    env_id,
                    "ros2" if ros2 else "zenoh",
                    domain_id=domain_id,
                    interface=interface,
                    peers=dds_peer or None,
                    zenoh_options={"connect": connect or [], "listen": listen or [], "multicast": multicast},
                    command_topic=command_topic,
                    period=period,
                    latency_ms=latency_ms,
                    loss=loss,
                    seed=seed,
                    duration=duration,
                    episodes=episodes,
                    command_timeout_ms=command_timeout_ms,
                    log=typer.echo,
                    cmd_vel_topic=cmd_vel,
                )
                return
            if cmd_vel is not None:
                raise ValueError("--cmd-vel is a topic: serve with --ros2 or --zenoh")
            if port is None:
                raise ValueError("missing --port PORT (UDP), or --ros2 / --zenoh to serve topics")
            serve(
                env_id,
                port,
                host,
                period,
                latency_ms,
                loss,
                seed,
                duration,
                episodes,
                peer,
                log=typer.echo,
                command_timeout_ms=command_timeout_ms,
                delay_ticks=delay_ticks,
            )
        except (ValueError, ConfigError) as error:  # DeployError is a ValueError
            fail(str(error).splitlines()[0] if str(error) else type(error).__name__)


def serve_topics(env_id: str, transport: str, duration=None, episodes=None, stop=None, **options) -> ServeResult:
    """Build a ``TopicSimRobotServer`` (``robopt.sim2real.topic_server``), serve, close; prints the summary."""
    from robopt.sim2real.topic_server import TopicSimRobotServer

    return serve_and_close(TopicSimRobotServer(env_id, transport, **options), duration, episodes, stop)


def _group() -> None:
    """Sim-to-real hardware-in-the-loop server."""


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"robopt: error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    """``python -m robopt.sim2real.sim_robot_cli sim-robot ...``: the same as ``robopt sim-robot ...``."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.callback()(_group)
    register(app, _fail)
    app()


if __name__ == "__main__":
    main()
