"""Fleet config checks and each robot's fixed dynamics: no Ray needed."""

from __future__ import annotations

import numpy as np
import pytest
from fleet_configs import make_config

from robopt.config import ConfigError
from robopt.envs.randomization import Randomization
from robopt.fleet.config import check_fleet_config, robot_randomization, robot_seed


def test_robot_draws_fixed_dynamics_from_its_seed():
    ranges = {"body_mass": [0.5, 1.5], "action_delay": [0, 3], "obs_noise": 0.01}
    draws = [robot_randomization(ranges, seed=3, robot=robot) for robot in range(4)]
    rng = np.random.default_rng(np.random.SeedSequence([3, 2]))  # sorted keys: action_delay, body_mass, obs_noise
    delay, mass = int(rng.integers(0, 4)), float(rng.uniform(0.5, 1.5))
    assert draws[2] == {"action_delay": [delay, delay], "body_mass": [mass, mass], "obs_noise": 0.01}
    assert draws == [robot_randomization(ranges, seed=3, robot=robot) for robot in range(4)]  # reproducible
    masses = [draw["body_mass"][0] for draw in draws]
    assert len(set(masses)) == 4 and all(0.5 <= m <= 1.5 for m in masses)
    assert Randomization.from_config(draws[0]).body_mass == (masses[0], masses[0])
    assert robot_seed(3, 0) != robot_seed(3, 1) != robot_seed(3, 1, life=1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_robots": -1}, "num_robots must be >= 0"),
        ({"heldout_robots": [2]}, "heldout_robots: robot ids [2] are outside 0 .. 1"),
        ({"heldout_robots": [0, 1]}, "heldout_robots holds every robot"),
        ({"own_fraction": 1.5, "own_robots": [0]}, "own_fraction must be in [0, 1]"),
        ({"own_fraction": 0.5}, "needs own_robots"),
        ({"own_robots": [0]}, "needs own_fraction > 0"),
        ({"max_lag": 2, "stale_mode": "weight"}, "set one or the other"),
        ({"address": "nowhere"}, "address='nowhere'"),
        ({"randomization": {"body_mass": [1.5, 0.5]}}, "fleet.randomization: randomization body_mass"),
        ({"randomization": {"mass": [1, 2]}}, "fleet.randomization: unknown randomization keys ['mass']"),
        ({"fert_min_episodes": 0}, "fert_min_episodes must be >= 1, got 0"),
        ({"fert_max_distance": -1.0}, "fert_max_distance must be finite and >= 0"),
        ({"fert_temperature": 0.0}, "fert_temperature finite and > 0"),
        ({"fert_weighting": "advantage"}, "fert_weighting"),
        ({"fert_schedule": "cosine"}, "fert_schedule"),
    ],
)
def test_bad_fleet_config_is_one_line_error(overrides, message):
    with pytest.raises(ConfigError) as error:
        check_fleet_config(make_config(**overrides))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_fleet_needs_an_off_policy_learner_and_one_source_of_dynamics():
    with pytest.raises(ConfigError, match="needs an off-policy learner .* not algo.name=ppo"):
        check_fleet_config(make_config(algo="ppo"))
    with pytest.raises(ConfigError, match="not also in env.kwargs.randomization"):
        check_fleet_config(make_config(env_kwargs={"randomization": {"body_mass": [0.9, 1.1]}}))
    assert check_fleet_config(make_config(steps_per_robot=0)) == 500_000  # total_steps 1e6 over 2 robots
