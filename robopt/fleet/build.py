"""Builds a fleet run (the loop kind ``fleet``): checks, probe env, learner, hub, robots on Ray.

A run is of kind ``fleet`` when ``fleet.num_robots > 0`` (``robopt.fleet.config.fleet_kind``); the composition root
``robopt.experiment`` gives the ``fleet`` section that claim and this builder.
"""

from __future__ import annotations

from robopt.config import ConfigError, config_to_dict
from robopt.fleet import ray_runtime
from robopt.fleet.config import robot_env_kwargs, robot_seed
from robopt.fleet.loop import FleetLoop


def _learner_class(algo_name: str):
    from robopt.algorithms.sac import SAC
    from robopt.algorithms.td3 import TD3

    return {"sac": SAC, "td3": TD3, "ddpg": TD3}.get(algo_name)


def build_fleet_loop(config, initialize: bool = False, worker_options: dict[int, dict] | None = None) -> FleetLoop:
    """The fleet run of ``config`` (``fleet.num_robots > 0``): every config problem is a one-line ConfigError
    raised before any robot starts (algorithm, randomization, env id, CPUs, Ray address).

    ``worker_options``: extra ``RobotWorker`` arguments per robot id (tests: ``{1: {"corrupt_after": 2}}``).
    """
    from robopt.build import build_env, build_policy
    from robopt.fleet.config import check_fleet_config, hub_fingerprint
    from robopt.fleet.hub import hub_from_schedule
    from robopt.fleet.worker import robot_actor, wait_ready
    from robopt.policies.gaussian import GaussianPolicy
    from robopt.warm_start import initialize_policy

    fleet, algo_name = config.fleet, config_to_dict(config)["algo"]["name"]
    steps_per_robot = check_fleet_config(config)
    probe = build_env(config, num_envs=1, **robot_env_kwargs(config, 0))
    started, workers = False, []
    try:
        policy = build_policy(config, probe)
        if not isinstance(policy, GaussianPolicy) or not policy.squash:
            raise ConfigError(f"a fleet of {algo_name} needs policy.name=gaussian with policy.squash=true")
        if initialize and config.init_from:
            initialize_policy(policy, config)
        algorithm = _learner_class(algo_name)(config.algo, policy, probe)
        hub = hub_from_schedule(
            config.algo.loop,
            config.algo.gamma,
            probe,
            fleet.num_robots,
            policy=policy,
            own_robots=fleet.own_robots,
            own_fraction=fleet.own_fraction,
            max_lag=fleet.max_lag,
            stale_mode=fleet.stale_mode,
            stale_decay=fleet.stale_decay,
            fingerprint=hub_fingerprint(config),
        )
        fert = None
        if fleet.fert:
            if not hasattr(probe, "compute_reward"):
                raise ConfigError(
                    f"fleet.fert=true needs a goal task with success flags (mujoco/GripperReach, "
                    f"mujoco/GripperPush); {config.env.id} has none"
                )
            from robopt.fleet.retrieval import FertTargets, SuccessPool

            pool = SuccessPool(probe.obs_dim, probe.action_dim, fleet.fert_window, fleet.fert_capacity, probe.device)
            fert = FertTargets(
                pool,
                fleet.fert_k,
                min_episodes=fleet.fert_min_episodes,
                max_distance=fleet.fert_max_distance,
                unique=fleet.fert_unique,
                weighting=fleet.fert_weighting,
                temperature=fleet.fert_temperature,
            )
        started = ray_runtime.start(fleet, needed_cpus=fleet.num_robots * fleet.cpus_per_robot)
        actor, options = robot_actor(fleet.cpus_per_robot, fleet.max_restarts), worker_options or {}
        for robot in range(fleet.num_robots):
            seed = robot_seed(config.seed, robot)
            workers.append(actor.remote(config, robot, robot_env_kwargs(config, robot), seed, **options.get(robot, {})))
        wait_ready(workers)
        return FleetLoop(config, probe, policy, algorithm, hub, workers, started, steps_per_robot, fert)
    except BaseException:
        if workers or started:
            import ray

            for worker in workers:
                try:
                    ray.kill(worker, no_restart=True)
                except Exception:  # noqa: BLE001 (an actor already gone: the first error is the one to report)
                    pass
            ray_runtime.shutdown(started)
        probe.close()
        raise
