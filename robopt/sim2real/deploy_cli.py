"""The ``robopt`` command of the deploy-only distribution (``robopt-deploy``): ``robopt deploy`` without torch.

The full robopt package's ``robopt`` command (``robopt.cli``) has the same ``deploy``; this one has only what a
robot computer runs: numpy, onnxruntime, pyyaml, typer and the chosen transport (Cyclone DDS or Zenoh).
"""

from __future__ import annotations

import sys

import typer

from robopt.options import ConfigError
from robopt.sim2real import deploy

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="robopt-deploy: run an exported policy on a robot behind the safety layer (no torch needed).",
)


@app.callback()
def _root() -> None:
    """robopt-deploy: run an exported policy on a robot behind the safety layer (no torch needed)."""


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"robopt: error: {message}", err=True)
    raise typer.Exit(code)


deploy.register(app, _fail)


def main() -> None:
    try:
        app()
    except ConfigError as error:
        typer.echo(f"robopt: error: {error}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
