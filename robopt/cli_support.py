"""What every ``robopt`` command shares: bad input is one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

import typer


def fail(message: str, code: int = 2) -> None:
    """Print ``robopt: error: <message>`` to stderr and exit with ``code`` (2: bad input)."""
    typer.echo(f"robopt: error: {message}", err=True)
    raise typer.Exit(code)
