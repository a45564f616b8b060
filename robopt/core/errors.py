"""Errors with one-line messages meant for users (the CLI prints them without a traceback)."""

from __future__ import annotations


class NonFiniteError(RuntimeError):
    """NaN or Inf reached observations, rewards or a loss; the message names the source (and the iteration)."""
