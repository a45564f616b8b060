"""The reaper of an embedded Ray (robopt/fleet/reaper.py): what a driver killed with SIGKILL started dies with it.

Without Ray: a stand-in driver starts the reaper as ``ray_runtime.start_reaper`` does and a child that ignores
SIGTERM (as Ray's dashboard and runtime-env agents do), then is killed with SIGKILL; the child must be gone within
the reaper's poll, grace and kill time (1 + 2 s, allowed 15 s on a loaded machine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from robopt.fleet import reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper reads /proc (Linux)")

DRIVER = """
import subprocess, sys, time
from robopt.fleet import ray_runtime
ray_runtime.start_reaper()
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "print('up', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_driver_leaves_nothing_behind():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True)
    child = int(driver.stdout.readline())
    try:
        time.sleep(2.5)  # the reaper has noted the driver's descendants (once a second)
        assert child in reaper.descendants(driver.pid)
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 15
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(child), "the driver's child outlived it"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_descendants_follow_the_process_tree():
    own = reaper.descendants(os.getppid())
    assert os.getpid() in own and own[os.getpid()] == reaper._stat(os.getpid())[1]
