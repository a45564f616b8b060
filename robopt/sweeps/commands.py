"""The ``robopt sweep``, ``tune`` and ``report`` commands (registered on the ``robopt`` app by ``robopt.cli``).

Bad input exits with code 2 and one line; Ctrl-C with 130 and the command that resumes.
"""

from __future__ import annotations

from pathlib import Path

import typer

from robopt.cli_support import fail as _fail
from robopt.options import ConfigError


def _validate_points(config: Path, overrides: list[str], points: list[dict]) -> None:
    """Every grid point must make a valid config: one line naming the point otherwise, before any trial starts."""
    from robopt.experiment import load_config
    from robopt.sweeps.spec import point_label, point_overrides

    for point in points:
        if "peer" in point:  # a peer library's run: the config (task, steps) alone must hold
            point = {}
        try:
            load_config(config, [*overrides, *point_overrides(point)])
        except ConfigError as error:
            raise ConfigError(f"grid point {point_label(point)}: {error}") from None


def _stopped(command: str, target) -> None:
    """Ctrl-C during ``robopt sweep`` or ``tune``: what was kept and how to go on (exit 130)."""
    if target is None:
        _fail(f"{command} stopped before its sweep directory was made; nothing was run", 130)
    _fail(f"{command} stopped; finished trials are kept; resume with: robopt {command} --resume {target.path}", 130)


def sweep(
    config: Path | None = typer.Argument(None, help="YAML experiment file, e.g. configs/ppo_halfcheetah_fast.yaml"),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides for every trial"),
    seeds: str = typer.Option("0-4", "--seeds", help="seeds of every config: 0-4, or 0,2,5"),
    grid: list[str] | None = typer.Option(None, "--grid", help="an axis key=v1,v2 (repeat for a product)"),
    point: list[str] | None = typer.Option(
        None, "--point", help="one config: 'key=v key2=v2', or default (repeat; beside the grid's points)"
    ),
    peer: list[str] | None = typer.Option(
        None, "--peer", help="also run a peer library on the config's task and steps: sb3-ppo or sb3-sac (repeat)"
    ),
    cpus_per_trial: int = typer.Option(1, "--cpus-per-trial", help="CPUs (and torch threads) per trial"),
    address: str = typer.Option("", "--address", help="Ray cluster ('auto', host:port); default: Ray in-process"),
    root: Path = typer.Option(Path("sweeps"), "--root", help="sweep directories go under ROOT/<config name>/"),
    resume: Path | None = typer.Option(None, "--resume", help="continue this sweep directory"),
) -> None:
    """Every config x seed as an ordinary run (a Ray task each), under one sweep directory."""
    from robopt.sweeps.peers import PEERS
    from robopt.sweeps.spec import parse_grid, parse_point, parse_seeds, point_label
    from robopt.sweeps.sweep import Sweep, run_sweep

    target = None
    try:
        if resume is not None:
            if config is not None or grid or point:
                _fail("--resume continues a sweep as it was started: give no CONFIG, --grid or --point with it")
            target = Sweep(resume)
        else:
            if config is None:
                _fail("missing CONFIG (a YAML file in configs/) or --resume SWEEP_DIR")
            if not config.is_file():
                _fail(f"config file {str(config)!r} not found (configs live in configs/*.yaml)")
            points = [*(parse_grid(grid) if grid else []), *(parse_point(text) for text in point or [])]
            if len({point_label(entry) for entry in points}) < len(points):
                _fail("a config is given twice (--grid and --point make distinct configs)")
            points, seed_list = points or [{}], parse_seeds(seeds)
            for name in peer or []:
                if name not in PEERS:
                    _fail(f"--peer {name!r}: allowed: {', '.join(PEERS)}")
                points.append({"peer": name})
            _validate_points(config, [*(overrides or [])], points)
            target = Sweep.create(root, config, [*(overrides or [])], points, seed_list, cpus_per_trial)
        typer.echo(f"sweep directory: {target.path} ({len(target.points)} configs x {len(target.seeds)} seeds)")
        run_sweep(target, address, echo=typer.echo)
    except ConfigError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        _stopped("sweep", target)
    typer.echo(f"done; robopt report {target.path}")


def tune(
    config: Path | None = typer.Argument(None, help="YAML experiment file to tune"),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides for every trial"),
    space: Path | None = typer.Option(None, "--space", help="YAML: key: {log_uniform|uniform|int|categorical: ...}"),
    trials: int | None = typer.Option(None, "--trials", help="Optuna trials to complete, pruned ones count (20)"),
    seeds_per_trial: int = typer.Option(3, "--seeds-per-trial", help="seeds 0..S-1 run for every trial"),
    metric: str = typer.Option(
        "final", "--metric", help="objective: final (deterministic eval), auc, or time_to:X (needs log.eval_every)"
    ),
    cpus_per_trial: int = typer.Option(1, "--cpus-per-trial", help="CPUs (and torch threads) per run"),
    address: str = typer.Option("", "--address", help="Ray cluster ('auto', host:port); default: Ray in-process"),
    root: Path = typer.Option(Path("sweeps"), "--root", help="the study's sweep directory goes under ROOT/"),
    resume: Path | None = typer.Option(None, "--resume", help="continue this tuning sweep directory"),
) -> None:
    """Optuna (TPE, median pruning) over a space of config keys; every trial is a few seeds of ordinary runs."""
    from robopt.sweeps.spec import load_space
    from robopt.sweeps.sweep import Sweep
    from robopt.sweeps.tune import check_metric, check_metric_config, check_space, run_tune

    target = None
    try:
        if resume is not None and trials is None:
            trials = int(Sweep(resume).spec.get("trials", 20))
        trials = 20 if trials is None else trials
        if trials < 1 or seeds_per_trial < 1:
            _fail(f"--trials and --seeds-per-trial must be >= 1, got {trials} and {seeds_per_trial}")
        check_metric(metric)
        if resume is not None:
            if config is not None or space is not None:
                _fail("--resume continues a tuning run as it was started: give no CONFIG or --space with it")
            target = Sweep(resume)
            if target.spec.get("kind") != "tune":
                _fail(f"{str(resume)!r} is a sweep, not a tuning run: resume it with robopt sweep --resume")
            metric = target.spec["metric"]
            dimensions = load_space(target.path / "space.yaml")
        else:
            if config is None or space is None:
                _fail("missing CONFIG and --space SPACE.yaml (or --resume SWEEP_DIR)")
            if not config.is_file():
                _fail(f"config file {str(config)!r} not found (configs live in configs/*.yaml)")
            dimensions = load_space(space)
            check_space(config, [*(overrides or [])], dimensions)
            check_metric_config(metric, config, [*(overrides or [])])
            target = Sweep.create(
                root,
                config,
                [*(overrides or [])],
                [],
                list(range(seeds_per_trial)),
                cpus_per_trial,
                kind="tune",
                extra={"metric": metric, "trials": trials},
            )
            (target.path / "space.yaml").write_text(space.read_text())
        typer.echo(f"tuning in {target.path}: {trials} trials x {len(target.seeds)} seeds, objective {metric}")
        run_tune(target, dimensions, trials, metric, address, echo=typer.echo)
    except ConfigError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        _stopped("tune", target)
    typer.echo(f"done; robopt report {target.path}")


def report(
    sweep_dir: Path = typer.Argument(..., help="a sweep directory (robopt sweep or tune)"),
    time_to: float | None = typer.Option(
        None, "--time-to", help="also training seconds to this deterministic return (runs with log.eval_every)"
    ),
) -> None:
    """Per config over seeds: mean, median, IQM with its 95% bootstrap interval, probability of improvement."""
    from robopt.sweeps.report import report as sweep_report

    try:
        typer.echo(sweep_report(sweep_dir, time_to=time_to))
    except ConfigError as error:
        _fail(str(error))
