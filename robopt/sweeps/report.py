"""``robopt report SWEEP_DIR``: per config, the final evaluation and the area under the learning curve over seeds.

For each config (grid point or tuned point) over its finished seeds: mean, median, interquartile mean (IQM: the
mean of the middle 50%, ``scipy.stats.trim_mean(x, 0.25)``, Agarwal et al. 2021) and a 95% percentile-bootstrap
interval of the IQM (``scipy.stats.bootstrap``, 5000 resamples over seeds: one task, so the stratified bootstrap of
rliable is this plain bootstrap); the probability that config A beats config B, P(X_A > X_B) + P(X_A = X_B) / 2
over pairs of seeds, with its bootstrap interval. The final score is the run's deterministic evaluation
(``eval.json``); the curve is the training episode return in ``progress.csv`` and its area is its mean over env
steps (the trapezoid area divided by the steps covered). Writes ``report.json`` and ``report.png`` in the sweep.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from robopt.options import ConfigError
from robopt.sweeps.spec import point_label
from robopt.sweeps.sweep import Sweep, Trial

CONFIDENCE = 0.95
NAME_WIDTH = 40  # a config label longer than this is shown as p<point> with a legend
ALL_PAIRS = 4  # up to this many configs every pair is compared; beyond, each against the first
RESAMPLES = 5000
# scipy.stats.bootstrap: percentile intervals, seeded, vectorized statistics
BOOTSTRAP = {
    "confidence_level": CONFIDENCE,
    "n_resamples": RESAMPLES,
    "method": "percentile",
    "random_state": 0,
    "vectorized": True,
}


def _scipy_stats():
    try:
        from scipy import stats
    except ImportError:
        raise ConfigError("robopt report needs scipy: pip install 'robopt[sweep]'") from None
    return stats


def read_curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(env steps [K], training episode return [K]) of the rows of ``progress.csv`` that logged a return."""
    steps, returns = [], []
    try:
        with (run_dir / "progress.csv").open() as handle:
            for row in csv.DictReader(handle):
                value = row.get("episode_return", "")
                if value not in ("", None):
                    steps.append(float(row["env_steps"]))
                    returns.append(float(value))
    except OSError:
        pass
    return np.asarray(steps), np.asarray(returns)


def area_under_curve(steps: np.ndarray, returns: np.ndarray) -> float:
    """Mean return over the env steps the curve covers (trapezoid area / steps); NaN without two points."""
    if steps.size < 2 or steps[-1] <= steps[0]:
        return float(returns[0]) if returns.size == 1 else float("nan")
    return float(np.trapezoid(returns, steps) / (steps[-1] - steps[0]))


def read_time_to(run_dir: Path, target: float, until_step: float = math.inf) -> tuple[float, float]:
    """(training seconds at the first deterministic evaluation during training >= ``target``, the run's training
    seconds) from ``progress.csv``, over the rows up to ``until_step`` env steps: inf when no evaluation reached it,
    NaN when the run logged none (no ``log.eval_every``, or a peer's run)."""
    reached, last_wall, evaluated = None, 0.0, False
    try:
        with (run_dir / "progress.csv").open() as handle:
            for row in csv.DictReader(handle):
                if float(row.get("env_steps") or 0.0) > until_step:
                    break
                last_wall = float(row.get("wall_time") or last_wall)
                value = row.get("eval_return", "")
                if value not in ("", None):
                    evaluated = True
                    if reached is None and float(value) >= target:
                        reached = last_wall
    except (OSError, ValueError):
        return float("nan"), float("nan")
    if not evaluated:
        return float("nan"), last_wall
    return (reached if reached is not None else math.inf), last_wall


def iqm(values, axis=-1):
    return _scipy_stats().trim_mean(values, 0.25, axis=axis)


def interval(values: np.ndarray, statistic=iqm) -> tuple[float, float]:
    """95% percentile-bootstrap interval of ``statistic`` over ``values`` (NaN, NaN under 2 values)."""
    if values.size < 2 or np.all(values == values[0]):
        value = float(statistic(values)) if values.size else float("nan")
        return (value, value) if values.size >= 2 else (float("nan"), float("nan"))
    result = _scipy_stats().bootstrap((values,), statistic, **BOOTSTRAP)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def probability_of_improvement(first: np.ndarray, second: np.ndarray) -> tuple[float, float, float]:
    """P(X_first > X_second) + P(equal) / 2 over all pairs, with its 95% bootstrap interval (both samples resampled)."""

    def statistic(x, y, axis=-1):
        greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
        equal = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
        return greater + 0.5 * equal

    value = float(statistic(first, second))
    if first.size < 2 or second.size < 2:
        return value, float("nan"), float("nan")
    result = _scipy_stats().bootstrap((first, second), statistic, paired=False, **BOOTSTRAP)
    return value, float(result.confidence_interval.low), float(result.confidence_interval.high)


def collect(sweep: Sweep, time_to: float | None = None) -> list[dict]:
    """Per point: its label and its finished seeds' final score, curve area, curve (and seconds to ``time_to``)."""
    rows = []
    for index, point in enumerate(sweep.points):
        seeds, finals, areas, curves, seconds, other = [], [], [], [], [], {}
        for seed in sweep.seeds:
            status = sweep.status(Trial(index, seed))
            if status is None:
                other["not run"] = other.get("not run", 0) + 1
                continue
            if status["status"] != "finished" or not status.get("run_dir"):
                other[status["status"]] = other.get(status["status"], 0) + 1
                continue
            steps, returns = read_curve(Path(status["run_dir"]))
            seeds.append(seed)
            finals.append(status.get("eval_return", float("nan")))
            areas.append(area_under_curve(steps, returns))
            curves.append((steps, returns))
            if time_to is not None:
                seconds.append(read_time_to(Path(status["run_dir"]), time_to)[0])
        label = point_label(point)
        rows.append(
            {
                "point": index,
                "label": label,
                "name": label,
                "seeds": seeds,
                "final": np.asarray(finals, float),
                "auc": np.asarray(areas, float),
                "curves": curves,
                "seconds": np.asarray(seconds, float),
                "other": other,
            }
        )
    return rows


def summarize(values: np.ndarray) -> dict:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"n": 0}
    low, high = interval(values)
    return {
        "n": int(values.size),
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "iqm": float(iqm(values)),
        "iqm_low": low,
        "iqm_high": high,
    }


def report(sweep_dir: Path, plot: bool = True, time_to: float | None = None) -> str:
    """The report table as text; ``report.json`` (and ``report.png``) written in the sweep directory.

    ``time_to``: also the training seconds until a deterministic evaluation during training first reached that
    return (runs with ``log.eval_every``), summarized over the runs that reached it, and the probability that A
    gets there first, a run that never did counting as slower than any that did.
    """
    if time_to is not None and not math.isfinite(time_to):
        raise ConfigError(f"--time-to {time_to}: expected a finite return, e.g. --time-to 3000")
    sweep = Sweep(sweep_dir)
    rows = collect(sweep, time_to)
    if not any(row["seeds"] for row in rows):
        raise ConfigError(f"{str(sweep_dir)!r}: no finished trial to report yet (robopt sweep --resume runs the rest)")
    lines = [f"sweep {sweep.path} ({len(rows)} configs x {len(sweep.seeds)} seeds)", ""]
    if any(len(row["label"]) > NAME_WIDTH for row in rows):  # long labels: short names, spelled out once here
        for row in rows:
            row["name"] = f"p{row['point']:02d}"
            lines.append(f"  {row['name']}: {row['label']}")
        lines.append("")
    header = f"{'config':40s} {'n':>3s} {'mean':>9s} {'median':>9s} {'IQM':>9s} {'95% CI of IQM':>21s}"
    summary = []
    for measure, title in (("final", "final deterministic evaluation"), ("auc", "area under the training curve")):
        lines += [title, header]
        for row in rows:
            stats = summarize(row[measure])
            row[f"{measure}_stats"] = stats
            others = ", ".join(f"{count} {state}" for state, count in row["other"].items())
            note = f"  ({others})" if others else ""
            lines.append(_line(row["name"], stats, note))
        lines.append("")
    if time_to is not None:
        lines += _time_to_table(rows, time_to, header)
    comparisons = _compare(
        rows,
        lambda row: row["final"][np.isfinite(row["final"])],
        "final evaluation",
        "probability that A beats B (final evaluation)",
        ">",
        lines,
    )
    if time_to is not None:  # runs that never reached it: -inf, slower than any that did
        comparisons += _compare(
            rows,
            lambda row: -row["seconds"][~np.isnan(row["seconds"])],
            f"time_to:{time_to:g}",
            f"probability that A reaches {time_to:g} in less training time than B",
            "faster than",
            lines,
        )
    for row in rows:
        summary.append(
            {
                "config": row["label"],
                "point": row["point"],
                "seeds": row["seeds"],
                "final": row["final"].tolist(),
                "auc": row["auc"].tolist(),
                "other": row["other"],
                "final_stats": row["final_stats"],
                "auc_stats": row["auc_stats"],
            }
        )
        if time_to is not None:
            summary[-1]["time_to"] = {"target": time_to, "seconds": [None if math.isinf(x) else x
                                                                     for x in row["seconds"].tolist()],
                                      "stats": row["time_stats"]}  # fmt: skip
    (sweep.path / "report.json").write_text(json.dumps({"configs": summary, "comparisons": comparisons}, indent=2))
    if plot:
        _plot(rows, sweep.path / "report.png")
        lines.append(f"wrote {sweep.path / 'report.json'} and {sweep.path / 'report.png'}")
    return "\n".join(lines)


def _compare(rows: list[dict], values_of, measure: str, title: str, verb: str, lines: list[str]) -> list[dict]:
    """Probability of improvement with its interval: every pair of configs, or with more than ``ALL_PAIRS``
    configs (a tuning run) each one against the first (the config as written); appends to ``lines``."""
    rows = [row for row in rows if values_of(row).size > 0]
    if len(rows) < 2:
        return []
    pairs = (
        [(a, b) for i, a in enumerate(rows) for b in rows[i + 1 :]]
        if len(rows) <= ALL_PAIRS
        else [(b, rows[0]) for b in rows[1:]]
    )
    lines.append(
        f"{title}, with its 95% bootstrap interval"
        + ("" if len(rows) <= ALL_PAIRS else f"; each config against {rows[0]['name']}")
    )
    found = []
    for a, b in pairs:
        value, low, high = probability_of_improvement(values_of(a), values_of(b))
        found.append({"a": a["label"], "b": b["label"], "measure": measure, "p": value, "low": low, "high": high})
        ci = "n/a" if math.isnan(low) else f"[{low:.2f}, {high:.2f}]"
        lines.append(f"  P({a['name']} {verb} {b['name']}) = {value:.2f} {ci}")
    lines.append("")
    return found


def _time_to_table(rows: list[dict], target: float, header: str) -> list[str]:
    """Seconds to ``target`` per config, over the runs that reached it; the others are counted in the note."""
    lines = [f"training seconds to a deterministic evaluation >= {target:g} (runs that reached it; lower is better)",
             header]  # fmt: skip
    for row in rows:
        seconds = row["seconds"]
        reached = seconds[np.isfinite(seconds)]
        stats = row["time_stats"] = summarize(reached)
        counts = [f"{int(np.isinf(seconds).sum())} never reached it"] if np.isinf(seconds).any() else []
        counts += [f"{int(np.isnan(seconds).sum())} without evaluations"] if np.isnan(seconds).any() else []
        counts += [f"{count} {state}" for state, count in row["other"].items()]
        note = f"  ({', '.join(counts)})" if counts else ""
        lines.append(_line(row["name"], stats, note))
    return [*lines, ""]


def _line(label: str, stats: dict, note: str) -> str:
    """One config's row of a table: n, mean, median, IQM and its interval (a dash without values)."""
    if stats["n"] == 0:
        return f"{label[:NAME_WIDTH]:40s} {0:3d} {'-':>9s}{note}"
    ci = f"[{stats['iqm_low']:.1f}, {stats['iqm_high']:.1f}]"
    return (
        f"{label[:NAME_WIDTH]:40s} {stats['n']:3d} {stats['mean']:9.1f} {stats['median']:9.1f} "
        f"{stats['iqm']:9.1f} {ci:>21s}{note}"
    )


def _plot(rows: list[dict], path: Path) -> None:
    """Mean training curve per config over its seeds with the 95% bootstrap band of the mean, on common steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        curves = [(s, r) for s, r in row["curves"] if s.size >= 2]
        if not curves:
            continue
        end = min(s[-1] for s, _ in curves)
        grid = np.linspace(max(s[0] for s, _ in curves), end, 100)
        values = np.stack([np.interp(grid, s, r) for s, r in curves])  # [seeds, 100]
        mean = values.mean(0)
        (line,) = axis.plot(grid, mean, label=f"{row['label']} (n={len(curves)})")
        if len(curves) >= 2:
            band = _scipy_stats().bootstrap(
                (values,),
                np.mean,
                axis=0,
                confidence_level=CONFIDENCE,
                n_resamples=1000,
                method="percentile",
                random_state=0,
            )
            axis.fill_between(
                grid, band.confidence_interval.low, band.confidence_interval.high, color=line.get_color(), alpha=0.2
            )
    axis.set_xlabel("env steps")
    axis.set_ylabel("training episode return")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
