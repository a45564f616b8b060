"""The fleet loop: R robots (Ray actors) collect, one SAC/TD3/DDPG learner updates from the experience hub.

Shapes: R robots, B batch, D obs dim, A action dim.

One tick: take the collect calls that finished (``ray.wait``; it blocks, at most 50 ms, only when the learner has
nothing to do: that time is the learner stall), push their episodes into the ``ExperienceHub`` (a held-out robot's
episodes are only scored), resubmit a call of ``fleet.collect_steps`` env steps to every free robot (with the
newest weights, an ObjectRef of ``ray.put`` that Ray resolves in the actor, if the robot lacks them), then up to
``algo.loop.gradient_steps`` updates on hub batches; every ``fleet.publish_interval`` updates publish a version.

Update budget: as the off-policy loop with the training robots as its envs, ``gradient_steps`` updates per
``train_freq`` x (R - held-out robots) transitions pushed past ``learning_starts`` (robots act uniformly at random
until the hub received ``learning_starts`` transitions). Robots get no new call while the learner owes more updates
than one round of calls (R x collect_steps transitions) brings, so the ratio holds however slow the learner is.
An iteration (a logged row, the unit of checkpoints) is ticks until R x collect_steps env steps were collected
(the last one goes on until the run is finished, so the learner's budget does not depend on the fleet's size);
the run is ``finished`` once every robot still able to collect has collected ``steps_per_robot`` and the learner
did the updates owed (env_steps counts every robot's steps, held-out ones too; an unfinished episode a robot
holds at the end is not pushed).

Faults: a robot whose process dies loses its in-flight call and its unfinished episode (never pushed); Ray
restarts it and its first call raises ``WorkerRestarted``, counted in ``worker_restarts``. A failed call is retried
after ``RETRY_S``; three in a row that are not Ray's "restarting" (``ActorUnavailableError``) mark the robot dead.
A robot whose batch fails the hub's check is quarantined by the hub and gets no further calls. With no training
robot left the run stops with ``FleetStopped``.
"""

from __future__ import annotations

import logging
import math
import time

import torch

from robopt.core.errors import NonFiniteError
from robopt.fleet import ray_runtime
from robopt.fleet.config import robot_seed
from robopt.fleet.sampler import NoEligibleSlots

logger = logging.getLogger(__name__)

WAIT_S = 0.05  # longest block on ray.wait when the learner has nothing to do
RETRY_S = 0.5  # a robot whose call failed gets its next call after this many seconds


class FleetStopped(NonFiniteError):
    """No training robot is left (all quarantined or dead); the CLI reports it like a non-finite stop."""


class FleetEnv:
    """``loop.env`` for the runner: the robots' task (a num_envs=1 probe env in the learner gives dims, bounds,
    HER's ``compute_reward``), ``num_envs`` = R; ``close()`` ends the fleet (actors, Ray, probe)."""

    def __init__(self, probe, num_robots: int, on_close) -> None:
        self.probe, self.num_envs, self._on_close = probe, num_robots, on_close
        self.env_id, self.obs_dim, self.action_dim = probe.env_id, probe.obs_dim, probe.action_dim
        self.device = probe.device

    def close(self) -> None:
        self._on_close()


class FleetLoop:
    """Runner loop interface: ``iteration``, ``iteration_count``, ``env_steps``, ``steps_per_iteration``,
    ``total_iterations``, ``finished``, ``policy``, ``env``, ``state_dict``/``load_state_dict``."""

    def __init__(
        self, config, probe, policy, algorithm, hub, workers, owns_ray: bool, steps_per_robot: int, fert=None
    ) -> None:
        import ray

        self.ray, self.config, self.fleet, self.schedule = ray, config, config.fleet, config.algo.loop
        self.policy, self.algorithm, self.hub, self.workers, self.owns_ray = policy, algorithm, hub, workers, owns_ray
        self.steps_per_robot, self.fert, self.num_robots = steps_per_robot, fert, config.fleet.num_robots
        self.env = FleetEnv(probe, self.num_robots, self.close)
        self.heldout = set(self.fleet.heldout_robots)
        self.ratio = self.schedule.gradient_steps / (self.schedule.train_freq * len(self.fleet.training_robots))
        self.generator = torch.Generator(device=probe.device).manual_seed(config.seed)
        self.iteration_count = self.env_steps = self.updates = self.pushed = self.version = self.life = 0
        self.collected, self.errors = [0] * self.num_robots, [0] * self.num_robots  # errors: failed calls in a row
        self.sent = [-1] * self.num_robots  # the version each robot was last sent (-1: send the weights again)
        self.retry_at = [0.0] * self.num_robots  # monotonic time before which a failed robot gets no call
        self.restarts, self.dead, self.starved, self._closed = 0, set(), False, False
        self.inflight: dict = {}  # ObjectRef -> (robot, steps, version)
        self._put_weights()

    # -- bookkeeping -----------------------------------------------------------------------------------------------

    @property
    def steps_per_iteration(self) -> int:
        return self.num_robots * self.fleet.collect_steps

    @property
    def total_iterations(self) -> int:
        return max(1, math.ceil(self.steps_per_robot / self.fleet.collect_steps))

    def _active(self, robot: int) -> bool:
        return robot not in self.dead and robot not in self.hub.quarantined

    @property
    def finished(self) -> bool:
        """Every robot able to collect has collected ``steps_per_robot`` and the learner did the updates owed."""
        done = all(self.collected[r] >= self.steps_per_robot for r in range(self.num_robots) if self._active(r))
        return done and (self.starved or self._owed() == 0)

    def _owed(self) -> int:
        """Updates the learner may still do now (0 before warm-up or while the hub cannot fill a batch)."""
        start = self.schedule.learning_starts
        if self.pushed < start or self.hub.size < self.schedule.batch_size:
            return 0
        return max(0, int((self.pushed - start) * self.ratio) + self.schedule.gradient_steps - self.updates)

    def _put_weights(self) -> None:
        state = {name: value.detach().to("cpu", copy=True) for name, value in self.policy.state_dict().items()}
        self.weights = self.ray.put(state)
        self.hub.publish(self.version)

    # -- one tick --------------------------------------------------------------------------------------------------

    def iteration(self, progress: float) -> dict[str, float]:
        start, target = time.perf_counter(), self.env_steps + self.steps_per_iteration
        last = self.iteration_count + 1 >= self.total_iterations  # runs on until the learner did the updates owed
        stats = self.new_stats()
        while (self.env_steps < target or last) and not self.finished:
            if not any(self._active(r) for r in self.fleet.training_robots):
                why = self.hub.quarantine_reasons or "restarts exhausted"
                raise FleetStopped(
                    f"no robot left feeding the learner (quarantined: {sorted(self.hub.quarantined)}, "
                    f"dead: {sorted(self.dead)}): {why}"
                )
            self._tick(progress, stats)
        self.iteration_count += 1
        return self._metrics(stats, time.perf_counter() - start)

    def new_stats(self) -> dict:
        """An iteration's running sums and lists (``_ingest``, ``_learn``), turned into metrics by ``_metrics``."""
        stats = {"sums": {}, "updates": 0, "stall": 0.0, "robot_steps": [0] * self.num_robots, "rejected": 0}
        return {
            **stats,
            **{key: [] for key in ("lags", "returns", "lengths", "successes", "heldout", "heldout_success")},
        }

    def _tick(self, progress: float, stats: dict) -> None:
        ray, refs, waited = self.ray, list(self.inflight), time.perf_counter()
        idle = self._owed() == 0 or self.starved
        ready = []
        if refs:
            ready, _ = ray.wait(refs, num_returns=1, timeout=WAIT_S if idle else 0.0)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.0)
        elif idle:  # nothing in flight (robots backing off after a failure): do not spin
            time.sleep(WAIT_S)
        if idle:
            stats["stall"] += time.perf_counter() - waited
        for ref in ready:
            self._ingest(ref, stats)
        self._submit()
        self._learn(progress, stats)

    def _ingest(self, ref, stats: dict) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        from robopt.fleet.worker import WorkerRestarted

        robot, steps, _ = self.inflight.pop(ref)
        try:
            episodes = self.ray.get(ref)
        except WorkerRestarted:  # the new incarnation's first call: counted once per restart, resubmitted
            self.restarts, self.errors[robot], self.sent[robot] = self.restarts + 1, 0, -1
            return
        except RayActorError as error:  # the process died with the call in flight (Ray restarts it) or for good
            self.sent[robot], self.retry_at[robot] = -1, time.monotonic() + RETRY_S
            if not isinstance(error, getattr(self.ray.exceptions, "ActorUnavailableError", ())):  # not restarting
                self._failed(robot)
            return
        except RayTaskError as error:  # the robot's own code raised (its env, its policy): it is not trusted now
            first = (str(error).strip().splitlines() or [type(error).__name__])[-1][:200]
            logger.warning("fleet: robot %d: collect raised: %s", robot, first)
            self.sent[robot], self.retry_at[robot] = -1, time.monotonic() + RETRY_S
            self._failed(robot)
            return
        self.errors[robot] = 0
        self.collected[robot] += steps
        self.env_steps += steps
        stats["robot_steps"][robot] += steps
        for experience in episodes:
            success = experience.get("success")
            if robot in self.heldout:  # scored, never learned from
                stats["heldout"].append(float(experience["reward"].sum()))
                if success is not None:
                    stats["heldout_success"].append(float(success[0]))
                continue
            accepted = self.hub.push(experience)
            if accepted == 0:
                stats["rejected"] += 1
                continue
            self.pushed += accepted
            stats["lags"].append(self.version - experience["version"])
            stats["returns"].append(float(experience["reward"].sum()))
            stats["lengths"].append(accepted)
            if success is not None:
                stats["successes"].append(float(success[0]))
                if self.fert is not None:  # FERT: successes feed the pool, failures retrieve targets
                    self.fert.add(experience["obs"], experience["action"], bool(success[0]))

    def _failed(self, robot: int) -> None:
        """One more failed call in a row for ``robot``; the third marks it dead (no further calls)."""
        self.errors[robot] += 1
        if self.errors[robot] >= 3:
            self.dead.add(robot)

    def _submit(self) -> None:
        round_updates = self.ratio * self.num_robots * self.fleet.collect_steps
        if not self.starved and self._owed() > round_updates:
            return  # the learner is more than a round behind: robots wait (module doc)
        busy = {robot for robot, _, _ in self.inflight.values()}
        warm_up = self.pushed < self.schedule.learning_starts
        for robot, worker in enumerate(self.workers):
            left = self.steps_per_robot - self.collected[robot]
            if robot in busy or left <= 0 or not self._active(robot) or time.monotonic() < self.retry_at[robot]:
                continue
            steps, fresh = min(self.fleet.collect_steps, left), self.sent[robot] != self.version
            ref = worker.collect.remote(
                steps, self.weights if fresh else None, self.version, warm_up and robot not in self.heldout
            )
            self.sent[robot] = self.version
            self.inflight[ref] = (robot, steps, self.version)

    def _learn(self, progress: float, stats: dict) -> None:
        for _ in range(min(self._owed(), self.schedule.gradient_steps)):
            try:
                batch = self.hub.sample(self.schedule.batch_size, self.generator)
            except NoEligibleSlots:  # every slot too old (fleet.max_lag): wait for fresh experience
                self.starved = True
                return
            self.starved = False
            metrics = self.algorithm.update(batch, progress)
            metrics.pop("td_error", None)
            if self.fert is not None:
                self._clone_retrieved(progress, metrics)
            for key, value in metrics.items():
                stats["sums"][key] = stats["sums"][key] + value if key in stats["sums"] else value
            self.updates += 1
            stats["updates"] += 1
            if self.updates % self.fleet.publish_interval == 0:
                self.version += 1
                self._put_weights()

    def _clone_retrieved(self, progress: float, metrics: dict) -> None:
        """FERT: one cloning step of the actor on retrieved successful pairs (none while nothing is retrieved)."""
        from robopt.algorithms.offpolicy_updates import optimizer_step

        loss = self.fert.loss(self.policy, self.schedule.batch_size, self.generator, q=self._q_min)
        if loss is None:
            return
        coef = self.fleet.fert_coef * (max(0.0, 1.0 - progress) if self.fleet.fert_schedule == "linear" else 1.0)
        if coef > 0.0:  # a zero weight clones nothing (an Adam step on a zero gradient would still move the actor)
            optimizer_step(self.algorithm.actor_optimizer, coef * loss)
        metrics["fert_loss"] = loss.detach()
        if self.fert.weighting != "none":
            metrics["fert_weight"] = self.fert.last_weight

    def _q_min(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.algorithm.critic(obs, action).min(0).values  # [C, B] -> [B]

    def _metrics(self, stats: dict, elapsed: float) -> dict[str, float]:
        values = {key: float(value) / stats["updates"] for key, value in stats["sums"].items()}
        for name, value in values.items():
            if not math.isfinite(value):
                raise NonFiniteError(f"iteration {self.iteration_count}: non-finite {name} ({value})")
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        if stats["returns"]:
            values["episode_return"], values["episode_length"] = mean(stats["returns"]), mean(stats["lengths"])
        if stats["successes"]:
            values["success_rate"] = mean(stats["successes"])
        if stats["heldout"]:
            values["heldout_episode_return"] = mean(stats["heldout"])
        if stats["heldout_success"]:
            values["heldout_success_rate"] = mean(stats["heldout_success"])
        if stats["lags"]:
            values["policy_lag_mean"], values["policy_lag_max"] = mean(stats["lags"]), float(max(stats["lags"]))
        for robot, steps in enumerate(stats["robot_steps"]):
            values[f"robot{robot}_steps_per_second"] = steps / max(elapsed, 1e-9)
        values.update(
            {
                "episodes": float(len(stats["returns"])),
                "rejected_episodes": float(stats["rejected"]),
                "updates": float(stats["updates"]),
                "learner_updates": float(self.updates),
                "policy_version": float(self.version),
                "versions_in_flight": float(len({version for _, _, version in self.inflight.values()})),
                "learner_stall_seconds": stats["stall"],
                "worker_restarts": float(self.restarts),
                "dead_robots": float(len(self.dead)),
            }
        )
        if self.fert is not None:
            values["fert_pool_segments"] = float(len(self.fert.pool))
            values["fert_targets"] = float(len(self.fert))
        values.update(self.hub.metrics())
        return values

    # -- state -----------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(), "algorithm": self.algorithm.state_dict(), "version": self.version,
            "updates": self.updates, "pushed": self.pushed, "collected": list(self.collected),
            "iteration": self.iteration_count, "env_steps": self.env_steps, "restarts": self.restarts,
            "dead": sorted(self.dead), "life": self.life, "generator": self.generator.get_state(),
        }  # fmt: skip
        if self.schedule.save_buffer and self.hub.replay.nbytes <= self.schedule.save_buffer_limit_mb * 2**20:
            state["hub"] = self.hub.state_dict()
        if self.fert is not None:
            state["fert"] = self.fert.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Learner, hub and counters; the robots restart fresh (their unfinished episodes are gone) with new seeds."""
        if "hub" in state:  # first: a hub from another config is refused before anything changed
            self.hub.load_state_dict(state["hub"])
        self.policy.load_state_dict(state["policy"])
        self.algorithm.load_state_dict(state["algorithm"])
        if "fert" in state and self.fert is not None:
            self.fert.load_state_dict(state["fert"])
        self.version, self.updates, self.pushed = state["version"], state["updates"], state["pushed"]
        self.collected, self.env_steps = list(state["collected"]), state["env_steps"]
        self.iteration_count, self.restarts, self.dead = state["iteration"], state["restarts"], set(state["dead"])
        self.generator.set_state(state["generator"])
        self.life, self.sent = state["life"] + 1, [-1] * self.num_robots
        seeds = [robot_seed(self.config.seed, robot, self.life) for robot in range(self.num_robots)]
        self.ray.get([worker.reseed.remote(seed) for worker, seed in zip(self.workers, seeds)])
        self._put_weights()

    def close(self) -> None:
        """Stop the robots, close the probe env and shut down a Ray this run started."""
        if self._closed:
            return
        self._closed = True
        for worker in self.workers:
            try:
                self.ray.kill(worker, no_restart=True)
            except Exception:  # noqa: BLE001 (an actor already gone)
                pass
        self.env.probe.close()
        ray_runtime.shutdown(self.owns_ray)
