"""progress.csv keeps every metric: a metric that first appears mid-run widens the file (old rows padded)."""

from __future__ import annotations

import csv

from robopt.logging import RunLogger


def test_a_metric_first_seen_later_widens_the_csv(tmp_path):
    logger = RunLogger(tmp_path, tensorboard=False)
    logger.log(100, {"value_loss": 1.5, "critic_warmup": 1.0})  # a critic warm-up iteration
    logger.log(200, {"value_loss": 0.5, "approx_kl": 0.01, "clip_fraction": 0.1})  # then the algorithm's update
    logger.close()
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert [row["env_steps"] for row in rows] == ["100", "200"]
    assert rows[0]["approx_kl"] == "" and rows[0]["critic_warmup"] == "1.0"
    assert rows[1]["approx_kl"] == "0.01" and rows[1]["clip_fraction"] == "0.1" and rows[1]["critic_warmup"] == ""
    assert not list(tmp_path.glob(".progress.csv.tmp"))
    # a resumed run truncates with the widened header and keeps appending
    logger = RunLogger(tmp_path, tensorboard=False, resume_at_step=100)
    logger.log(200, {"value_loss": 0.4, "approx_kl": 0.02, "clip_fraction": 0.2})
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert [row["env_steps"] for row in rows] == ["100", "200"] and rows[1]["approx_kl"] == "0.02"
