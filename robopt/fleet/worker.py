"""One robot of the fleet: a Ray actor owning its env (num_envs=1, its own fixed dynamics) and a policy copy.

Shapes: L rows of one episode, D obs dim, A action dim.

``collect(n_steps, weights, version, random)`` steps the env ``n_steps`` times and returns the episodes that
ENDED in those steps, one Experience dict each (``robopt.fleet.hub``: robot, version, obs [L, D], action [L, A],
reward [L], next_obs [L, D] (the true final obs on the last row), terminated [L], truncated [L], and success [1]
on goal tasks). An unfinished episode stays in the actor until a later call ends it, so a robot whose process
dies never leaves half an episode anywhere. An episode's ``version`` is the policy version at its first step (the
oldest that acted in it; versions only grow within a robot's life). Actions: uniform in the bounds with
``random=True`` (the learner's warm-up), else the policy's sample (SAC), or for a config with
``exploration_noise`` (TD3, DDPG) the mean action plus Gaussian noise of that many half-ranges, clipped.

Restarts: Ray restarts a robot whose process died (``max_restarts``). The new incarnation's first ``collect``
raises ``WorkerRestarted`` once, so the learner counts every restart, also one that happened while the robot
was idle; it reseeds from fresh entropy (its old env stream died with the process).
"""

from __future__ import annotations

import os

import numpy as np
import torch


class WorkerRestarted(RuntimeError):
    """Raised by the first ``collect`` of a robot that Ray restarted after its process died."""


class RobotWorker:
    """The actor's body (``robot_actor`` wraps it for Ray); ``corrupt_after`` > 0 (tests: fault injection) makes
    every episode returned after that many collect calls carry NaN rewards."""

    def __init__(self, config, robot: int, env_kwargs: dict, seed: int, corrupt_after: int = 0) -> None:
        import ray

        from robopt.build import section_env_options
        from robopt.envs import make_env
        from robopt.policies import POLICIES

        torch.set_num_threads(1)
        self.robot, self.corrupt_after = robot, corrupt_after
        env_kwargs = {**section_env_options(config), **env_kwargs}  # a robot from its description: robot, task
        self.env = make_env(config.env.id, 1, backend=config.env.backend, device="cpu", **env_kwargs)
        self.policy = POLICIES[config.policy.name].build(config.policy, self.env)
        self.noise = getattr(config.algo, "exploration_noise", None)  # TD3/DDPG explore around the mean action
        self.goal_task = hasattr(self.env, "compute_reward")
        self.version = 0  # the policy version episodes are tagged with (the learner's first publish is version 0)
        self.loaded = False  # whether learner weights were loaded yet (the first weights given always are)
        self.steps = self.episodes = self.calls = 0
        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        if self.restarted:
            seed = int(np.random.SeedSequence().generate_state(1)[0])  # fresh entropy
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Reset the env and the action generators with ``seed``; the unfinished episode is dropped.

        torch's global generator is seeded too: the policy's ``act`` samples from it (SAC), and every actor process
        would otherwise start from torch's same default seed, so all robots would draw the same noise.
        """
        torch.manual_seed(seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.obs = self.env.reset(seed=seed)  # [1, D]
        self.rows: list[tuple[torch.Tensor, ...]] = []  # the unfinished episode's rows
        self.episode_version = self.version

    def pid(self) -> int:
        return os.getpid()

    def pending(self) -> torch.Tensor:
        """Observations [k, D] of the unfinished episode (k = 0 right after an episode ended)."""
        if not self.rows:
            return torch.zeros(0, self.env.obs_dim)
        return torch.stack([row[0] for row in self.rows])

    def stats(self) -> dict:
        """Per-robot counters: env steps, finished episodes and collect calls of this incarnation."""
        return {"robot": self.robot, "steps": self.steps, "episodes": self.episodes, "calls": self.calls}

    def randomization(self):
        """The env's randomization config (the robot's fixed dynamics)."""
        return getattr(self.env, "randomization", None)

    @torch.no_grad()
    def _action(self, random: bool) -> torch.Tensor:
        env = self.env
        if random:
            unit = torch.rand(1, env.action_dim, generator=self.generator)
            return env.action_low + unit * (env.action_high - env.action_low)
        if self.noise is not None:
            action = self.policy.mean_action(self.obs)
            noise = torch.randn(action.shape, generator=self.generator)
            action = action + noise * self.noise * (env.action_high - env.action_low) / 2
        else:
            action, _ = self.policy.act(self.obs)
        return torch.maximum(torch.minimum(action, env.action_high), env.action_low)

    @torch.no_grad()
    def collect(self, n_steps: int, weights: dict | None, version: int, random: bool = False) -> list[dict]:
        """``n_steps`` env steps; the Experience dicts of the episodes that ended in them (module doc).

        ``weights``: the policy state_dict of ``version`` (loaded when it differs from the held version or none was
        loaded yet), or None to keep the held policy.
        """
        if self.restarted:
            self.restarted = False
            raise WorkerRestarted(f"robot {self.robot} was restarted (its process died); its episode was lost")
        if weights is not None and (version != self.version or not self.loaded):
            self.policy.load_state_dict(weights)
            self.version, self.loaded = version, True
        if not self.rows:
            self.episode_version = self.version
        self.calls += 1
        finished = []
        for _ in range(n_steps):
            action = self._action(random)
            next_obs, reward, terminated, truncated, info = self.env.step(action)
            row = (self.obs[0].clone(), action[0], reward[0], info["final_obs"][0].clone(), terminated[0], truncated[0])
            self.rows.append(row)
            self.obs = next_obs
            self.steps += 1
            if bool(terminated[0] | truncated[0]):
                success = info["is_success"][0] if self.goal_task else None
                finished.append(self._episode(success))
        if 0 < self.corrupt_after < self.calls:
            for experience in finished:
                experience["reward"] = torch.full_like(experience["reward"], float("nan"))
        return finished

    def _episode(self, success: torch.Tensor | None) -> dict:
        """The finished episode in ``self.rows`` as an Experience dict; starts the next episode."""
        obs, action, reward, next_obs, terminated, truncated = (torch.stack(column) for column in zip(*self.rows))
        experience = {
            "robot": self.robot, "version": self.episode_version, "obs": obs.float(), "action": action.float(),
            "reward": reward.float(), "next_obs": next_obs.float(), "terminated": terminated.bool(),
            "truncated": truncated.bool(),
        }  # fmt: skip
        if success is not None:
            experience["success"] = success.reshape(1).bool()
        self.rows, self.episode_version = [], self.version
        self.episodes += 1
        return experience


def robot_actor(cpus: float, max_restarts: int):
    """``RobotWorker`` as a Ray actor class: restarted up to ``max_restarts`` times, calls never retried."""
    import ray

    return ray.remote(num_cpus=cpus, max_restarts=max_restarts, max_task_retries=0)(RobotWorker)


def wait_ready(workers, timeout_s: float = 120.0) -> None:
    """Wait for every robot's env and policy; a robot that cannot start, or robots not started within
    ``timeout_s`` (a joined cluster without free CPUs for them), is a one-line ConfigError."""
    import ray

    from robopt.options import ConfigError

    try:
        ray.get([worker.pid.remote() for worker in workers], timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise ConfigError(
            f"the robots did not start within {timeout_s:g} s: Ray has no free CPUs for them "
            "(fleet.cpus_per_robot x fleet.num_robots) or cannot schedule them"
        ) from None
    except ray.exceptions.RayError as error:
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        raise ConfigError(f"a robot failed to start: {lines[-1] if lines else type(error).__name__}") from None
