"""``--smoke``: the smallest run of a benchmark, which CI runs for every script (tests/benchmarks/test_smoke.py).

A script declares its smallest arguments with ``parse_smoke_args(parser, smoke={dest: value, ...})``. With ``--smoke``
those become the defaults (an argument given on the command line still wins), so the run goes through the
script's whole path, robopt and the peer, and prints its table in seconds. Its figures mean nothing: the budgets
are far too small to measure or learn. Without ``--smoke`` nothing changes.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path


def parse_smoke_args(
    parser: argparse.ArgumentParser, smoke: dict[str, object], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """``parser``'s arguments with a ``--smoke`` flag that makes ``smoke`` the defaults; ``args.smoke`` says which."""
    shown = " ".join(f"{dest}={value}" for dest, value in smoke.items()).replace("%", "%%")  # argparse formats help
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI's smallest run of the whole path, in seconds; its figures mean nothing (defaults: {shown})",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**smoke)
        args = parser.parse_args(argv)
    return args


def tiny_run(config: str | Path, root: Path, overrides: Sequence[str]) -> Path:
    """A ``--smoke`` stand-in for a trained run: ``config`` with ``overrides`` (small networks, a few steps) trained
    quietly under ``root``; its run directory. No figure of it means anything."""
    import contextlib
    import io

    from robopt.experiment import load_config
    from robopt.runner import train

    quiet = [*overrides, f"log.run_root={root}", "log.progress=false", "log.eval_episodes=0"]
    with contextlib.redirect_stdout(io.StringIO()):
        return train(load_config(config, quiet), progress=False).run_dir
