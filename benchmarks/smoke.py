"""``--smoke``: the smallest run of a benchmark, which CI runs for every script (tests/benchmarks/test_smoke.py).

A script declares its smallest arguments with ``parse_smoke_args(parser, smoke={dest: value, ...})``. With ``--smoke``
those become the defaults (an argument given on the command line still wins), so the run goes through the
script's whole path, robopt and the peer, and prints its table in seconds. Its figures mean nothing: the budgets
are far too small to measure or learn. Without ``--smoke`` nothing changes.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


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
