"""Starting, joining and leaving Ray for a fleet run; every failure is a one-line ConfigError.

``fleet.address``:
    ``""``                 a local Ray started inside this process (``ray.init``) with ``fleet.num_cpus`` CPUs, no
                           dashboard, worker logs not forwarded, usage statistics off and its session files under
                           ``$ROBOPT_RAY_TMPDIR`` or else ``<system temp dir>/robopt-ray-<uid>``; shut down with the
                           run.
    ``"auto"``             the Ray cluster of this machine (``ray start``, or ``RAY_ADDRESS``).
    ``"ray://host:port"``  a Ray Client server; ``"host:port"`` a cluster's GCS address.
Joining waits at most ``fleet.connect_timeout_s``: ``host:port`` is first probed with a TCP connection (a closed
port fails at once), then ``ray.init`` runs in a daemon thread (Ray's own client timeout is 30 s and a GCS
address can hang for minutes); on timeout that thread is left behind, and the process should exit.

Nothing goes to $HOME: Ray >= 2.5x enables token authentication for a new local cluster and would save a
generated token to ``~/.ray/auth_token``; for the embedded cluster, unless the user set ``RAY_AUTH_MODE``,
``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``, this module enables token mode with a fresh random token held in
this process's environment only (inherited by Ray's processes), so nothing is written.
A process that already called ``ray.init`` keeps its Ray (tests, notebooks); it is not shut down with the run.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import tempfile
import threading
import time

from robopt.fleet.config import FleetConfig
from robopt.options import ConfigError

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # before ray is imported anywhere through this module


def import_ray(needed_by: str = "fleet.num_robots > 0"):
    """The ray module, or a one-line ConfigError naming what needs it and the extra to install."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{needed_by} needs Ray: pip install 'robopt[dist]'") from None
    return ray


TEMP_DIR_VARIABLE = "ROBOPT_RAY_TMPDIR"


def temp_dir() -> str:
    """Where the embedded Ray keeps its session files: ``$ROBOPT_RAY_TMPDIR`` (tests give each run its own), else
    ``<system temp dir>/robopt-ray-<uid>``. Keep it short: Ray's socket paths must stay under 108 bytes."""
    return os.environ.get(TEMP_DIR_VARIABLE) or os.path.join(tempfile.gettempdir(), f"robopt-ray-{os.getuid()}")


def start(fleet: FleetConfig, needed_cpus: float = 0.0) -> bool:
    """Ray for ``fleet`` (module doc), checked to have ``needed_cpus``; True when this call ran ``ray.init``.

    The CPU check of an embedded Ray happens before Ray starts. The caller ends what this call began with
    ``shutdown(True)``: the embedded Ray stops, a joined cluster is only left.
    """
    imported = sys.modules.get("ray")
    if imported is not None and imported.is_initialized():
        check_cpus(needed_cpus, float(imported.cluster_resources().get("CPU", 0.0)), "this process's Ray")
        return False
    if fleet.address:
        ray = import_ray()
        connect(fleet.address, fleet.connect_timeout_s)
        try:
            check_cpus(needed_cpus, float(ray.cluster_resources().get("CPU", 0.0)), f"the Ray at {fleet.address}")
        except ConfigError:
            ray.shutdown()
            raise
        return True
    num_cpus = fleet.num_cpus or os.cpu_count() or 1
    check_cpus(needed_cpus, float(num_cpus), "the local Ray (fleet.num_cpus)")
    private_token()
    init_embedded(num_cpus)
    return True


def init_embedded(num_cpus: float) -> None:
    """``ray.init`` of a local Ray inside this process (module doc), watched by a reaper (``start_reaper``)."""
    import_ray().init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        _temp_dir=temp_dir(),
    )
    start_reaper()


def private_token() -> None:
    """Token authentication with a random token in the environment, unless the user configured it (module doc)."""
    if any(name in os.environ for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return
    os.environ["RAY_AUTH_MODE"], os.environ["RAY_AUTH_TOKEN"] = "token", secrets.token_hex(32)
    if "ray" in sys.modules:  # Ray caches its config at import: let it read the new mode
        try:
            from ray._raylet import Config

            Config.initialize("")
        except (ImportError, AttributeError):
            pass


def check_cpus(needed: float, available: float, where: str) -> None:
    """One-line ConfigError when the robots need more CPUs than Ray has (they would wait forever)."""
    if needed > available:
        raise ConfigError(
            f"fleet.num_robots x fleet.cpus_per_robot needs {needed:g} CPUs but {where} has {available:g}; lower "
            "fleet.num_robots or fleet.cpus_per_robot (fractions share a core) or raise fleet.num_cpus"
        )


def _host_port(address: str, label: str = "fleet.address") -> tuple[str, int] | None:
    """(host, port) of 'ray://host:port' or 'host:port'; None for 'auto'. Bad ports: ConfigError."""
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{label}={address!r}: expected 'auto', 'ray://host:port' or 'host:port'")
    return host.strip("[]"), int(port)


def connect(address: str, timeout_s: float, label: str = "fleet.address") -> None:
    """Join an existing Ray cluster within ``timeout_s`` seconds, or raise a one-line ConfigError naming ``label``
    (the option that gave the address)."""
    ray = import_ray(label)
    deadline = time.monotonic() + timeout_s
    target = _host_port(address, label)
    if target is not None:
        try:
            socket.create_connection(target, timeout=timeout_s).close()
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise ConfigError(f"{label}={address!r} is unreachable ({reason}); is the Ray cluster up?") from None
    outcome: dict = {}

    def run() -> None:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            outcome["ok"] = True
        except BaseException as error:  # noqa: BLE001 (reported to the caller's thread)
            outcome["error"] = error

    thread = threading.Thread(target=run, name="robopt-ray-connect", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise ConfigError(f"{label}={address!r}: no Ray cluster answered within {timeout_s:g} s")
    if "error" in outcome:
        error = outcome["error"]
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(f"{label}={address!r}: cannot join the Ray cluster: {first}")


def shutdown(started: bool) -> None:
    """``ray.shutdown()`` when ``start`` returned True: stops the embedded Ray, or leaves a joined cluster (up)."""
    if started:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        stop_reaper()


_REAPER: list = []  # the reaper process of this process's embedded Ray (at most one)


def start_reaper() -> None:
    """Linux: a watcher (``robopt/fleet/reaper.py``) that ends this process's Ray processes and trials if this
    process dies without shutting Ray down (``kill -9``): Ray's dashboard and runtime-env agents outlive their
    driver otherwise. One per process; ``stop_reaper`` ends it after a normal shutdown."""
    if not sys.platform.startswith("linux") or _REAPER:
        return
    import subprocess
    from pathlib import Path

    script = str(Path(__file__).with_name("reaper.py"))
    _REAPER.append(
        subprocess.Popen(
            [sys.executable, script, str(os.getpid())],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    )


def stop_reaper() -> None:
    """End the reaper of ``start_reaper`` (Ray was shut down normally: nothing is left to end)."""
    while _REAPER:
        process = _REAPER.pop()
        process.kill()
        process.wait()
