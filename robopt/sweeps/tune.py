"""``robopt tune``: Optuna picks the points of a sweep (TPE sampler, median pruner), one point at a time.

Each Optuna trial is a point of the sweep run on ``--seeds-per-trial`` seeds at once (Ray tasks); its objective is
the mean over those seeds of ``final`` (the deterministic evaluation at the end of each run), ``auc`` (the mean
training return over the run) or ``time_to:X`` (minus the training seconds until a deterministic evaluation
during training, ``log.eval_every``, first reached X; a run that never did scores minus twice its training time).
While the runs train, the mean of their latest training returns at the step all have reached (``time_to:X``: minus
their mean ``seconds_so_far``) is reported to the pruner every poll; a pruned point's runs are stopped and
recorded ``pruned``. The study is a SQLite file in the sweep directory (``study.db``): ``--resume SWEEP_DIR``
continues it, never redoing a finished or pruned trial; a trial the killed driver left running is marked failed
and its point asked again first (its runs continue from their checkpoints).
"""

from __future__ import annotations

import math

import numpy as np
import yaml

from robopt.options import ConfigError
from robopt.sweeps.report import area_under_curve, read_curve, read_time_to
from robopt.sweeps.spec import Dimension
from robopt.sweeps.sweep import Sweep, Trial, TrialRunner, describe

METRICS = ("final", "auc", "time_to:X")


def check_metric(metric: str) -> None:
    """One line unless ``metric`` is ``final``, ``auc`` or ``time_to:<number>``."""
    if metric in ("final", "auc"):
        return
    kind, _, target = metric.partition(":")
    try:
        if kind == "time_to" and math.isfinite(float(target)):
            return
    except ValueError:
        pass
    raise ConfigError(f"--metric {metric!r}: allowed: final, auc, time_to:X (X a return, e.g. time_to:3000)")


def check_metric_config(metric: str, config_path, overrides: list[str]) -> None:
    """``time_to:X`` reads the evaluations during training: the config must make them (``log.eval_every > 0``)."""
    from robopt.experiment import load_config

    if metric.startswith("time_to:") and load_config(config_path, overrides).log.eval_every <= 0:
        raise ConfigError(
            f"--metric {metric} reads deterministic evaluations during training: set log.eval_every=N (env steps) "
            "in the config or as an override"
        )


POLL_S = 2.0  # seconds between looks at the running seeds (and between chances to see a Ctrl-C)


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("robopt tune needs Optuna: pip install 'robopt[sweep]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def check_space(config_path, overrides: list[str], dimensions: list[Dimension]) -> None:
    """Every key of the space must be a config key that accepts its bounds (or each choice): one line otherwise."""
    from robopt.experiment import load_config

    for dimension in dimensions:
        values = dimension.choices if dimension.kind == "categorical" else (dimension.low, dimension.high)
        for value in values:
            if dimension.kind in ("int", "int_log"):
                value = int(value)
            try:
                load_config(config_path, [*overrides, f"{dimension.key}={yaml.safe_dump(value).strip()}"])
            except ConfigError as error:
                raise ConfigError(f"--space: {dimension.key}={value}: {error}") from None


def _point(params: dict) -> dict[str, str]:
    """Optuna's params as override texts (YAML flow style: lists and strings survive the round trip)."""
    return {
        key: yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")
        for key, value in params.items()
    }


def _intermediate(sweep: Sweep, trials: list[Trial], metric: str = "final") -> tuple[int, float] | None:
    """(step, mean over seeds of the training return at the last step every seed has logged); for ``time_to:X``
    the mean of minus ``seconds_so_far`` at that step instead, so the pruner judges the objective itself."""
    curves = []
    for trial in trials:
        run_dir = sweep.run_dir(trial)
        if run_dir is None:
            return None
        steps, returns = read_curve(run_dir)
        if steps.size == 0:
            return None
        curves.append((steps, returns))
    step = min(steps[-1] for steps, _ in curves)
    if metric.startswith("time_to:"):
        target = float(metric.partition(":")[2])
        return int(step), -float(np.mean([seconds_so_far(sweep.run_dir(trial), target, step) for trial in trials]))
    return int(step), float(np.mean([np.interp(step, steps, returns) for steps, returns in curves]))


def seconds_so_far(run_dir, target: float, step: float) -> float:
    """Training seconds to the first evaluation >= ``target`` logged by ``step`` env steps, else the seconds trained
    by then: a lower bound on the run's time to the target, known while it trains."""
    seconds, trained = read_time_to(run_dir, target, until_step=step)
    if math.isfinite(seconds):
        return seconds
    return trained if math.isfinite(trained) else 0.0


def config_params(sweep: Sweep, dimensions: list[Dimension]) -> dict | None:
    """The tuning run's config's own value of every key of the space; None when one lies outside it."""
    from robopt.config import config_to_dict
    from robopt.experiment import load_config

    values = config_to_dict(load_config(sweep.spec["config"], sweep.spec["overrides"]))
    params = {}
    for dimension in dimensions:
        node = values
        for part in dimension.key.split("."):
            node = node[part]
        if isinstance(node, list):
            node = tuple(node)
        if not dimension.contains(node):
            return None
        params[dimension.key] = list(node) if isinstance(node, tuple) else node
    return params


def objective_value(sweep: Sweep, trial: Trial, status: dict, metric: str) -> float:
    if metric == "final":
        return float(status.get("eval_return", float("nan")))
    run_dir = sweep.run_dir(trial)
    if metric.startswith("time_to:"):
        return time_to_objective(run_dir, float(metric.partition(":")[2])) if run_dir is not None else float("nan")
    return area_under_curve(*read_curve(run_dir)) if run_dir is not None else float("nan")


def run_tune(
    sweep: Sweep, dimensions: list[Dimension], total_trials: int, metric: str, address: str = "", echo=print
) -> None:
    """Run Optuna trials until ``total_trials`` are complete or pruned (module doc)."""
    optuna = _optuna()
    storage = f"sqlite:///{sweep.path / 'study.db'}"
    study = optuna.create_study(
        study_name="robopt",
        storage=storage,
        direction="maximize",
        load_if_exists=True,
        sampler=optuna.samplers.TPESampler(seed=0),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3),
    )
    states = optuna.trial.TrialState
    if not study.get_trials(deepcopy=False):  # a new study measures the config as written first, when it can
        own = config_params(sweep, dimensions)
        if own is not None:
            study.enqueue_trial(own)
            echo(f"optuna trial 0 is the config as written: {own}")
    for stale in study.get_trials(deepcopy=False, states=(states.RUNNING,)):  # left by a killed driver
        study.tell(stale.number, state=states.FAIL)
        study.enqueue_trial(stale.params)
    runner = TrialRunner(sweep, int(sweep.spec["cpus_per_trial"]), address)
    try:
        while True:
            ended = study.get_trials(deepcopy=False, states=(states.COMPLETE, states.PRUNED))
            if len(ended) >= total_trials:
                break
            _one_trial(study, sweep, runner, dimensions, metric, echo)
    except KeyboardInterrupt:
        runner.cancel()
        raise
    finally:
        runner.close()
    best = study.best_trial if any(t.state == states.COMPLETE for t in study.get_trials(deepcopy=False)) else None
    if best is not None:
        echo(f"best: trial {best.number} {metric} {best.value:.1f} with {best.params}")


def _one_trial(study, sweep: Sweep, runner: TrialRunner, dimensions, metric: str, echo) -> None:
    optuna = _optuna()
    states = optuna.trial.TrialState
    trial = study.ask()
    params = {dimension.key: dimension.suggest(trial) for dimension in dimensions}
    point = _point(params)
    index = next((i for i, p in enumerate(sweep.points) if p == point), None)
    if index is None:
        index = sweep.add_point(point)
    trial.set_user_attr("point", index)
    seeds = [Trial(index, seed) for seed in sweep.seeds]
    statuses = {seed.id: sweep.status(seed) for seed in seeds}
    for seed in seeds:
        if statuses[seed.id] is None:
            runner.submit(seed)
    reported, pruned = -1, False
    while runner.running:
        for seed, status in runner.wait(timeout=POLL_S):
            statuses[seed.id] = status
            echo(describe(seed, status, sweep))
        progress = _intermediate(sweep, seeds, metric)
        if progress is not None and progress[0] > reported and runner.running:
            reported = progress[0]
            trial.report(progress[1], reported)
            if trial.should_prune():
                pruned = True
                running = [seed for seed in seeds if statuses[seed.id] is None]
                runner.cancel(running)
                for seed in running:
                    why = f"pruned by the median rule at {reported} env steps ({metric})"
                    statuses[seed.id] = runner.record(seed, -1, why, 0.0, status="pruned")
    outcomes = [statuses[seed.id]["status"] for seed in seeds]
    if pruned or "pruned" in outcomes:
        study.tell(trial, state=states.PRUNED)
        echo(f"optuna trial {trial.number} pruned: {params}")
        return
    if "failed" in outcomes:
        study.tell(trial, state=states.FAIL)
        echo(f"optuna trial {trial.number} failed: {params}")
        return
    values = [objective_value(sweep, seed, statuses[seed.id], metric) for seed in seeds]
    value = float(np.mean(values))
    if not math.isfinite(value):
        study.tell(trial, state=states.FAIL)
        echo(f"optuna trial {trial.number} failed: no {metric} value ({params})")
        return
    study.tell(trial, value)
    echo(f"optuna trial {trial.number} {metric} {value:.1f} over {len(values)} seeds: {params}")


def time_to_objective(run_dir, target: float) -> float:
    """-(training seconds at the first ``eval_return >= target``) from ``progress.csv``; -(2 x the run's training
    seconds) when no evaluation reached it; NaN when the run logged no evaluation at all."""
    seconds, trained = read_time_to(run_dir, target)
    return -seconds if math.isfinite(seconds) else (-2.0 * trained if math.isinf(seconds) else float("nan"))
