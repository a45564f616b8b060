"""Shared test setup: deterministic, single-threaded torch so tests are quick and stable on 2 cores."""

from __future__ import annotations

import os

# before anything imports mujoco (robopt.experiment does): MuJoCo picks its OpenGL backend on its first import
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("WARP_CACHE_PATH", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "warp"))

import pytest  # noqa: E402
import torch  # noqa: E402

import robopt.experiment  # noqa: E402, F401  (registers every feature's config section and loop kind)


def pytest_collection_modifyitems(config, items):
    """The ``slow`` learning tests first (a stable sort: the rest keep their order).

    Under pytest-xdist (``make test``: ``--dist loadgroup``) the workers then start on the longest tests and end
    on short ones, so neither waits at the end for the other's last minute-long test. The ``xdist_group`` units
    (the Ray and warp tests) are scheduled before single tests by xdist itself.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# Torch intra-op threads per test: 1 (quick and stable on 2 cores); `make test-portability` also runs 2, because
# a thread count is one of the things that may change a float result's last bits (DESIGN.md section 8).
TEST_THREADS = int(os.environ.get("ROBOPT_TEST_THREADS", "1"))


def pytest_sessionstart(session):
    """torch.compile's caches under pytest's temporary directory, not /tmp/torchinductor_<user>.

    Set before collection: a test module may probe torch.compile at import, and inductor keeps the first
    cache directory it computes.
    """
    cache = session.config._tmp_path_factory.mktemp("torch-compile-cache")
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        os.environ.setdefault(name, str(cache))


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(TEST_THREADS)
    yield
