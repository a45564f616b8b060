"""Sweeps without Ray: seed, grid and space parsing, the report's statistics, a report over a made-up sweep."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from robopt.options import ConfigError
from robopt.sweeps.report import area_under_curve, iqm, probability_of_improvement, report
from robopt.sweeps.spec import Dimension, load_space, parse_grid, parse_point, parse_seeds
from robopt.sweeps.sweep import Sweep, Trial, status_of

ROOT = Path(__file__).parents[2]


def test_seeds_ranges_and_lists():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,2,5") == [0, 2, 5]
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert parse_seeds("3") == [3]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a-b", "expected seeds like 0-4"),
        ("4-1", "the range 4-1 is empty"),
        ("1,1", "a seed is listed twice"),
        ("", "expected seeds like 0-4"),
    ],
)
def test_bad_seeds_are_one_line(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_seeds(text)


def test_grid_is_the_product_of_its_axes_and_keeps_bracketed_values_whole():
    points = parse_grid(["algo.learning_rate=1e-4,3e-4", "policy.hidden=[64,64],[256,256]"])
    assert points == [
        {"algo.learning_rate": "1e-4", "policy.hidden": "[64,64]"},
        {"algo.learning_rate": "1e-4", "policy.hidden": "[256,256]"},
        {"algo.learning_rate": "3e-4", "policy.hidden": "[64,64]"},
        {"algo.learning_rate": "3e-4", "policy.hidden": "[256,256]"},
    ]
    assert parse_grid([]) == [{}]  # no axis: the config as written


def test_an_explicit_point_is_its_pairs_or_the_config_as_written():
    assert parse_point("algo.epochs=7 policy.hidden=[64,64]") == {"algo.epochs": "7", "policy.hidden": "[64,64]"}
    assert parse_point("default") == {}
    for bad, message in (
        ("", "expected space-separated"),
        ("epochs", "expected space-separated"),
        ("a=1 a=2", "a is given twice"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_point(bad)


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        (["algo.learning_rate"], "expected key=value1,value2"),
        (["a=1", "a=2"], "a is already an axis"),
        (["a=1,,2"], "an empty value"),
    ],
)
def test_bad_grid_axes_are_one_line(axes, message):
    with pytest.raises(ConfigError, match=message):
        parse_grid(axes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("algo.learning_rate: {loguniform: [1e-5, 1e-3]}", "unknown distribution 'loguniform'; allowed: log_uniform"),
        ("algo.learning_rate: {log_uniform: [0, 1e-3]}", "log_uniform needs low > 0"),
        ("algo.learning_rate: {uniform: [0.3, 0.1]}", "uniform needs low < high"),
        ("algo.epochs: {int: [1.5, 4]}", "int needs integer bounds"),
        ("algo.epochs: {categorical: [3]}", "categorical needs a list of at least 2 choices"),
        ("algo.epochs: 3", "expected one distribution"),
        ("- a", "expected a mapping of config keys"),
    ],
)
def test_bad_space_files_are_one_line(tmp_path, text, message):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_space(path)


def test_space_file_dimensions():
    path = Path(ROOT / "configs" / "spaces" / "ppo_halfcheetah_fast.yaml")
    dimensions = {d.key: d for d in load_space(path)}
    assert dimensions["algo.learning_rate"] == Dimension("algo.learning_rate", "log_uniform", 1e-4, 1e-3)
    assert dimensions["algo.epochs"].kind == "int"


def test_a_new_tuning_study_starts_from_the_config_as_written_when_the_space_holds_it():
    from robopt.sweeps.tune import config_params

    path = ROOT / "configs" / "spaces" / "ppo_halfcheetah_fast.yaml"
    config = str(ROOT / "configs" / "ppo_halfcheetah_fast.yaml")

    class Study:  # what config_params reads of a tuning sweep
        def __init__(self, overrides):
            self.spec = {"config": config, "overrides": overrides}

    own = config_params(Study([]), load_space(path))
    from robopt.experiment import load_config

    algo = load_config(config).algo
    assert (own["algo.learning_rate"], own["algo.epochs"], own["algo.ratio.clip_low"]) == (
        algo.learning_rate,
        algo.epochs,
        algo.ratio.clip_low,
    )
    assert config_params(Study(["algo.epochs=30"]), load_space(path)) is None  # outside [3, 10]: nothing enqueued
    assert Dimension("a", "int", 3, 10).contains(4) and not Dimension("a", "int", 3, 10).contains(4.5)
    assert not Dimension("a", "uniform", 0.1, 0.3).contains(True) and Dimension(
        "a", "categorical", choices=(1, 2)
    ).contains(2)


def test_statistics_hand_worked():
    # IQM of 8 values: the middle 4 (2, 3, 4, 5) -> 3.5, whatever the extremes
    assert iqm(np.array([-100.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 900.0])) == pytest.approx(3.5)
    # pairs of [1, 2] and [0, 3]: 1 > 0, 1 < 3, 2 > 0, 2 < 3 -> 0.5; ties count half: [1] vs [1] -> 0.5
    assert probability_of_improvement(np.array([1.0, 2.0]), np.array([0.0, 3.0]))[0] == 0.5
    assert probability_of_improvement(np.array([1.0]), np.array([1.0]))[0] == 0.5
    value, low, high = probability_of_improvement(np.arange(10.0) + 20, np.arange(10.0))
    assert value == 1.0 and low == high == 1.0  # every resample of a clean win is a win
    # a return of 0 until step 100, then 100 until 200 (linear in between): area 50 per step over [0, 200]
    assert area_under_curve(np.array([0.0, 100.0, 200.0]), np.array([0.0, 0.0, 100.0])) == pytest.approx(25.0)


def _fake_sweep(tmp_path: Path) -> Sweep:
    config = tmp_path / "tiny.yaml"
    config.write_text("name: tiny\n")
    sweep = Sweep.create(tmp_path / "sweeps", config, [], [{"algo.epochs": "5"}, {"algo.epochs": "10"}], [0, 1, 2], 1)
    rng = np.random.default_rng(0)
    for point, base in ((0, 1000.0), (1, 2000.0)):
        for seed in (0, 1, 2):
            trial = Trial(point, seed)
            run_dir = sweep.run_root(trial) / "tiny" / "stamp"
            run_dir.mkdir(parents=True)
            final = base + 10.0 * seed
            rows = ["env_steps,episode_return"] + [
                f"{step},{base * step / 1000 + rng.normal()}" for step in range(0, 1001, 100)
            ]
            (run_dir / "progress.csv").write_text("\n".join(rows) + "\n")
            (run_dir / "eval.json").write_text(json.dumps({"mean_return": final}))
            status = "failed" if (point, seed) == (1, 2) else "finished"
            sweep.write_status(
                trial,
                {
                    "status": status,
                    "point": point,
                    "seed": seed,
                    "run_dir": str(run_dir),
                    "eval_return": final,
                    "seconds": 1.0,
                    "error": "",
                },
            )
    return sweep


def test_report_over_a_sweep_tables_intervals_and_files(tmp_path):
    sweep = _fake_sweep(tmp_path)
    text = report(sweep.path)
    assert "algo.epochs=5" in text and "(1 failed)" in text  # the failed seed is counted, not averaged
    data = json.loads((sweep.path / "report.json").read_text())
    first, second = data["configs"]
    assert first["final"] == [1000.0, 1010.0, 1020.0] and second["final"] == [2000.0, 2010.0]
    assert first["final_stats"]["median"] == 1010.0
    assert first["final_stats"]["iqm_low"] <= first["final_stats"]["iqm"] <= first["final_stats"]["iqm_high"]
    assert first["auc_stats"]["mean"] == pytest.approx(500.0, abs=1.0)  # the mean of a 0 -> 1000 ramp
    (comparison,) = data["comparisons"]
    assert comparison["p"] == 0.0  # 5 epochs never beats 10 here
    assert (sweep.path / "report.png").stat().st_size > 1000


def test_report_time_to_a_return_counts_runs_that_never_reached_it_as_slower(tmp_path):
    sweep = _fake_sweep(tmp_path)
    # point 0: seeds reach 3000 after 6, 9 and never (12 s trained); point 1 (seed 2 failed): after 3 and 4 s
    for (point, seed), reached in {(0, 0): 6.0, (0, 1): 9.0, (0, 2): None, (1, 0): 3.0, (1, 1): 4.0}.items():
        run_dir = Path(sweep.status(Trial(point, seed))["run_dir"])
        rows = ["env_steps,episode_return,wall_time,eval_return"]
        rows += [f"{k * 100},0,{k},{3100 if reached is not None and k >= reached else 2000}" for k in range(1, 13)]
        (run_dir / "progress.csv").write_text("\n".join(rows) + "\n")
    text = report(sweep.path, plot=False, time_to=3000.0)
    assert "training seconds to a deterministic evaluation >= 3000" in text and "(1 never reached it)" in text
    data = json.loads((sweep.path / "report.json").read_text())
    first, second = data["configs"]
    assert first["time_to"]["seconds"] == [6.0, 9.0, None] and first["time_to"]["stats"]["n"] == 2
    assert second["time_to"]["stats"]["mean"] == 3.5
    (timed,) = [c for c in data["comparisons"] if c.get("measure") == "time_to:3000"]
    assert timed["p"] == 0.0  # every run of point 1 got there before every run of point 0
    with pytest.raises(ConfigError, match="expected a finite return"):
        report(sweep.path, plot=False, time_to=float("inf"))


def test_report_of_a_directory_that_is_not_a_sweep(tmp_path):
    with pytest.raises(ConfigError, match="is not a sweep directory"):
        report(tmp_path)


def test_trial_status_from_the_run_exit_code():
    # 3: robopt train stopped by a non-finite value (pruned); any other non-zero exit: failed
    assert (status_of(0), status_of(3), status_of(2), status_of(-9)) == ("finished", "pruned", "failed", "failed")


def test_time_to_objective_reads_the_evaluations_during_training(tmp_path):
    from robopt.sweeps.tune import check_metric, time_to_objective

    (tmp_path / "progress.csv").write_text(
        "env_steps,episode_return,wall_time,eval_return\n"
        "1000,10,1.5,\n2000,20,3.0,2500\n3000,30,4.5,\n4000,40,6.0,3100\n5000,50,7.5,2900\n"
    )
    assert time_to_objective(tmp_path, 3000.0) == -6.0  # the first evaluation at or above the target
    assert time_to_objective(tmp_path, 2500.0) == -3.0
    assert time_to_objective(tmp_path, 5000.0) == -15.0  # never reached: minus twice the training time
    (tmp_path / "progress.csv").write_text("env_steps,episode_return,wall_time\n1000,10,1.5\n")
    assert math.isnan(time_to_objective(tmp_path, 3000.0))  # no evaluations logged: no value
    check_metric("time_to:3000")
    for bad in ("time_to:", "time_to:fast", "speed", "time_to:inf"):
        with pytest.raises(ConfigError, match="allowed: final, auc, time_to:X"):
            check_metric(bad)


def test_the_pruner_of_a_time_objective_sees_seconds_so_far(tmp_path):
    from robopt.sweeps.tune import seconds_so_far

    (tmp_path / "progress.csv").write_text(
        "env_steps,episode_return,wall_time,eval_return\n"
        "1000,10,1.5,\n2000,20,3.0,2500\n3000,30,4.5,\n4000,40,6.0,3100\n"
    )
    assert seconds_so_far(tmp_path, 3000.0, 3000) == 4.5  # not reached by step 3000: seconds trained by then
    assert seconds_so_far(tmp_path, 3000.0, 4000) == 6.0  # reached at step 4000
    assert seconds_so_far(tmp_path, 2500.0, 4000) == 3.0
    assert seconds_so_far(tmp_path / "missing", 3000.0, 4000) == 0.0


def test_time_to_metric_needs_evaluations_during_training(tmp_path):
    from robopt.sweeps.tune import check_metric_config

    config = ROOT / "configs" / "ppo_pendulum.yaml"
    with pytest.raises(ConfigError, match="set log.eval_every=N"):
        check_metric_config("time_to:-200", config, [])
    check_metric_config("time_to:-200", config, ["log.eval_every=4096"])
    check_metric_config("final", config, [])
