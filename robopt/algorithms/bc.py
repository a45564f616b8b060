"""Behaviour cloning from a Minari dataset: the ``pretrain`` loop (``algo.name: bc``).

Shapes: M transitions, B minibatch, D obs dim, A action dim, H action-chunk length.

The policy's own ``imitation_loss(obs, action) -> [B]`` is minimized (Gaussian: negative log-likelihood; flow:
the conditional flow-matching loss; diffusion: noise regression), so one loop serves every policy kind that
implements ``SupportsImitation``. The observation normalizer is fitted on the training split once, before the
first step, and stays fixed. Whole episodes are held out for validation (transitions of one episode are
correlated, so a split by transition would flatter the validation loss). Early stopping keeps the weights of the
best validation epoch and restores them when training stops, by patience or at the last epoch. A policy that
acts in chunks of H actions (``policy.horizon``) clones each transition's actions t .. t + H - 1
(``chunk_actions``).

The loop exposes what the runner drives on every kind (``iteration``, ``state_dict``, ``load_state_dict``,
``iteration_count``, ``env_steps``, ``steps_per_iteration``), with an iteration being one epoch and the step
counter counting demonstration samples seen; ``total_iterations`` and ``finished`` let it stop on its own.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from robopt.core.errors import NonFiniteError
from robopt.core.protocols import SupportsImitation, require
from robopt.core.updaters import FirstOrderUpdater
from robopt.options import ConfigError, option


@dataclass(frozen=True)
class BCConfig:
    dataset: str = option("", "Minari dataset id (namespace/name-v0) or a dataset directory; required")
    dataset_root: str = option("", "directory of Minari datasets ('' : $MINARI_DATASETS_PATH, else ~/.minari/datasets)")
    epochs: int = option(200, "maximum passes over the training split (one iteration each)")
    minibatch_size: int = option(256, "samples per gradient step")
    learning_rate: float = option(1e-3, "Adam learning rate")
    max_grad_norm: float = option(1.0, "global gradient-norm clip")
    validation_fraction: float = option(0.1, "fraction of episodes held out (0: no validation, no early stopping)")
    patience: int = option(20, "stop after this many epochs without a better validation loss (0: never stop early)")

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ValueError(f"epochs and minibatch_size must be >= 1, got {self.epochs}, {self.minibatch_size}")
        if self.learning_rate <= 0.0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0, got {self.patience}")


def split_episodes(episode_index: torch.Tensor, num_episodes: int, fraction: float, seed: int):
    """Boolean masks [M] (train, validation) holding out round(fraction * E) whole episodes (at least 1 if > 0)."""
    if fraction == 0.0:
        everything = torch.ones_like(episode_index, dtype=torch.bool)
        return everything, ~everything
    if num_episodes < 2:
        raise ConfigError(
            f"algo.validation_fraction={fraction}: the dataset has {num_episodes} episode, a validation split needs "
            "at least 2; set algo.validation_fraction=0"
        )
    held_out = min(num_episodes - 1, max(1, round(fraction * num_episodes)))
    order = torch.randperm(num_episodes, generator=torch.Generator().manual_seed(seed))
    validation = torch.zeros(num_episodes, dtype=torch.bool)
    validation[order[:held_out]] = True
    validation_rows = validation[episode_index.cpu()].to(episode_index.device)
    return ~validation_rows, validation_rows


def chunk_actions(action: torch.Tensor, episode_index: torch.Tensor, horizon: int) -> torch.Tensor:
    """[M, A] -> [M, H * A]: the demonstrated actions t .. t + H - 1 of each transition's own episode.

    Transitions of an episode are consecutive (as datasets store them); a chunk running past its episode's
    last step repeats that last action. ``horizon`` 1 returns ``action`` unchanged.
    """
    if horizon == 1:
        return action
    size = action.shape[0]
    rows = torch.arange(size)
    last = torch.ones(size, dtype=torch.bool)  # the last transition of each episode
    last[:-1] = episode_index[1:] != episode_index[:-1]
    end = torch.flip(torch.cummin(torch.flip(torch.where(last, rows, size), (0,)), 0).values, (0,))  # [M]
    index = torch.minimum(rows[:, None] + torch.arange(horizon), end[:, None])  # [M, H]
    return action[index].reshape(size, -1)


class BehaviorCloningLoop:
    """Epochs of minibatch ``imitation_loss`` steps on the training split, validated on held-out episodes."""

    def __init__(self, config: BCConfig, env, policy, seed: int = 0, env_id: str = "") -> None:
        from robopt.data.demonstrations import check_compatible, load_demonstrations
        from robopt.policies.flow import refuse_one_step

        require(policy, SupportsImitation, "behaviour cloning", "it fits the policy's imitation loss")
        refuse_one_step(policy, "algo.name=bc")
        if not config.dataset:
            raise ConfigError("algo.dataset is empty: name a Minari dataset (e.g. hopper/medium-v0) or its directory")
        demos = load_demonstrations(config.dataset, root=config.dataset_root or None)
        horizon = getattr(env, "horizon", 1)  # an action-chunk env (robopt.envs.chunking): H actions per decision
        check_compatible(demos, env_id or env.env_id, env.obs_dim, env.action_dim // horizon)
        self.config, self.env, self.policy, self.demos = config, env, policy, demos
        device = next(policy.parameters()).device
        obs, action = demos.obs.to(device), chunk_actions(demos.action, demos.episode_index, horizon).to(device)
        train, validation = split_episodes(demos.episode_index, demos.num_episodes, config.validation_fraction, seed)
        self.train_obs, self.train_action = obs[train.to(device)], action[train.to(device)]
        self.val_obs, self.val_action = obs[validation.to(device)], action[validation.to(device)]
        policy.normalizer.update(self.train_obs)  # fitted on the data once; fixed while cloning
        self.updater = FirstOrderUpdater(policy.parameters(), config.learning_rate, config.max_grad_norm)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.total_iterations = config.epochs
        self.iteration_count, self.env_steps = 0, 0
        self.best_loss, self.epochs_since_best, self.finished = math.inf, 0, False
        self.best_state: dict | None = None

    @property
    def steps_per_iteration(self) -> int:
        return self.train_obs.shape[0]

    def _loss(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.policy.imitation_loss(obs, action).mean(), {}

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Mean imitation loss over the held-out episodes, in chunks (flow draws are random: the noise is seeded)."""
        if self.val_obs.shape[0] == 0:
            return math.nan
        state = torch.get_rng_state()
        torch.manual_seed(12345)  # the same flow-matching draws every epoch: epochs are compared on equal terms
        total = sum(
            float(self.policy.imitation_loss(o, a).sum())
            for o, a in zip(self.val_obs.split(4096), self.val_action.split(4096))
        )
        torch.set_rng_state(state)
        return total / self.val_obs.shape[0]

    def iteration(self, progress: float) -> dict[str, float]:
        """One epoch over the training split; returns train and validation loss (and whether it stopped)."""
        size = self.train_obs.shape[0]
        order = torch.randperm(size, device=self.train_obs.device, generator=self.generator)
        losses = []
        for rows in order.split(self.config.minibatch_size):
            obs, action = self.train_obs[rows], self.train_action[rows]
            metrics = self.updater.step(lambda o=obs, a=action: self._loss(o, a))
            losses.append(metrics["loss"])
        self.iteration_count += 1
        self.env_steps += size
        train_loss = float(torch.stack(losses).mean())
        if not math.isfinite(train_loss):
            raise NonFiniteError(f"epoch {self.iteration_count}: non-finite imitation loss ({train_loss})")
        values = {"train_loss": train_loss, "grad_norm": float(metrics["grad_norm"])}
        validation = self.validation_loss()
        if math.isfinite(validation):
            values["validation_loss"] = validation
            if validation < self.best_loss:
                self.best_loss, self.epochs_since_best = validation, 0
                self.best_state = copy.deepcopy(self.policy.state_dict())
            else:
                self.epochs_since_best += 1
            values["best_validation_loss"] = self.best_loss
            patience = self.config.patience
            if patience > 0 and self.epochs_since_best >= patience:
                self.finished = True
        if self.finished or self.iteration_count >= self.total_iterations:
            self.finished = True
            if self.best_state is not None:  # early stopping keeps the best validation epoch's weights
                self.policy.load_state_dict(self.best_state)
        values["stopped"] = float(self.finished)
        return values

    def state_dict(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.updater.state_dict(),
            "best_state": self.best_state,
            "best_loss": self.best_loss,
            "epochs_since_best": self.epochs_since_best,
            "finished": self.finished,
            "generator": self.generator.get_state(),
            "iteration": self.iteration_count,
            "env_steps": self.env_steps,
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.updater.load_state_dict(state["optimizer"])
        self.best_state, self.best_loss = state["best_state"], float(state["best_loss"])
        self.epochs_since_best, self.finished = int(state["epochs_since_best"]), bool(state["finished"])
        self.generator.set_state(state["generator"])
        self.iteration_count, self.env_steps = int(state["iteration"]), int(state["env_steps"])
