"""PPO (Schulman et al. 2017) as a config, a pure loss and an update plugged into the on-policy loop.

The ratio control (clip, clip-higher, dual clip, adaptive KL penalty, SPO, sigmoid gate) is data:
``algo.ratio.name=...`` picks it from ``robopt.core.surrogates``. Extra policy-loss terms of a variant (a language
policy's reference-KL penalty and token metrics, ``robopt.llm.variant``) come in as ``loss_terms`` when PPO is
built; a plain run has none.

Shapes: B minibatch, K the policy's inner log-ratio axis, D obs dim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from robopt.algorithms.symmetry import Symmetry, SymmetryConfig
from robopt.buffers.rollout import RolloutBatch, critic_value
from robopt.core.advantages import normalize_advantage
from robopt.core.compiled import CompiledFirstOrderStep, compile_unavailable_reason
from robopt.core.losses import explained_variance, value_error
from robopt.core.protocols import SupportsEntropy, SupportsKL, memory_width, require
from robopt.core.ratio_control import RatioControl
from robopt.core.schedules import SCHEDULES, make_schedule
from robopt.core.surrogates import REDUCTIONS, ratio_metrics, surrogate
from robopt.core.updaters import FirstOrderUpdater
from robopt.distributed.collective import LOCAL, Collective
from robopt.options import ConfigError, option
from robopt.policies.recurrent import check_sequence_minibatch

# (policy, log_ratio [B, K], info, with_metrics) -> (penalty added to the policy loss or None, metrics)
LossTerms = Callable[[nn.Module, torch.Tensor, dict, bool], tuple[torch.Tensor | None, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class PPOConfig:
    learning_rate: float = option(3e-4, "Adam learning rate (initial value of the schedule)")
    lr_schedule: str = option(
        "linear",
        "learning-rate schedule over training; adaptive: after every minibatch step, /1.5 when the step's "
        "approx KL exceeds 2 x desired_kl and x1.5 below half of it (rsl_rl's), within [1e-5, 1e-2]",
        (*SCHEDULES, "adaptive"),
    )
    desired_kl: float = option(0.01, "lr_schedule=adaptive: the approx KL per minibatch step to hold")
    epochs: int = option(10, "passes over each rollout")
    minibatch_size: int = option(64, "samples per gradient step")
    ratio: RatioControl = option(
        RatioControl(), "ratio control of the surrogate (algo.ratio.name=clip|spo_penalty|...)"
    )
    value_clip: float = option(0.0, "clip the value update around the old value (0 disables)")
    value_coef: float = option(0.5, "value loss coefficient")
    entropy_coef: float = option(0.0, "entropy bonus coefficient")
    max_grad_norm: float = option(0.5, "global gradient-norm clip")
    target_kl: float = option(0.0, "stop the epochs early when the epoch's approx KL exceeds 1.5x this (0 disables)")
    reduction: str = option(
        "mean",
        "surrogate over the policy's entries (tokens): mean | token_mean (DAPO) | sequence_mean (GRPO) | "
        "constant (Dr. GRPO: sum / (rows x loss_normalizer))",
        REDUCTIONS,
    )
    loss_normalizer: float = option(0.0, "reduction=constant: the constant (the max completion length)")
    minibatch_advantage_norm: bool = option(False, "normalize advantages per minibatch (as SB3 does) too")
    drift_metrics: bool = option(
        True,
        "after the epochs, one no-grad pass over the whole batch for the batch_* metrics (approx KL, clip "
        "fraction of the updated policy); kl_penalty_adaptive needs it; false saves a forward pass (language models)",
    )
    symmetry: SymmetryConfig = option(
        SymmetryConfig(), "left-right symmetry: mirrored transitions and/or a mirror loss (needs robot.mirror)"
    )
    compile: bool = option(
        False,
        "torch.compile each minibatch step (loss, gradient, clip, Adam) into one graph: about 2x faster "
        "updates on CPU after a one-off compile of 10-20 s (about 3 s once cached on disk); pays on long runs",
    )

    def __post_init__(self) -> None:
        if self.reduction == "constant" and not self.loss_normalizer > 0:
            raise ValueError(f"reduction=constant needs loss_normalizer > 0, got {self.loss_normalizer}")
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ValueError(f"epochs and minibatch_size must be >= 1, got {self.epochs}, {self.minibatch_size}")
        if self.learning_rate <= 0.0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not self.drift_metrics and self.ratio.name == "kl_penalty_adaptive":
            raise ValueError("ratio.name=kl_penalty_adaptive adapts to the after-update KL: set drift_metrics=true")
        if self.compile and self.symmetry.enabled:
            raise ValueError("compile=true does not support symmetry (its mirrored rows); use compile=false")
        if self.compile and self.ratio.name == "kl_penalty_adaptive":
            raise ValueError(
                "compile=true does not support ratio.name=kl_penalty_adaptive (its coefficient changes every "
                "update, which would recompile the step each time); use compile=false"
            )


def ppo_loss(
    policy,
    critic,
    batch: RolloutBatch,
    config: PPOConfig,
    control: RatioControl,
    with_metrics: bool = True,
    loss_terms: LossTerms | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Surrogate under ``control`` (+ the ``loss_terms`` penalty) + value_coef * value loss - entropy_coef * entropy,
    on one minibatch (pure).

    The advantages are used as given: ``PPO.update`` normalizes them per minibatch when
    ``minibatch_advantage_norm`` is set (see ``normalize_per_minibatch``). The value loss is
    0.5 * mean (V - R)^2 (``robopt.core.losses.value_error``). ``loss_terms(policy, log_ratio, info, with_metrics)``
    (a variant's, or None) returns a penalty added to the policy loss (or None) and metrics of its own.
    ``with_metrics=False`` returns empty metrics.
    """
    info = batch.policy_info
    log_ratio = policy.log_ratio(batch.obs, batch.action, info)  # [B, K]
    kl = None  # the adaptive penalty's exact KL when the policy has one; k3 on the log-ratio otherwise (flow)
    if control.name == "kl_penalty_adaptive" and isinstance(policy, SupportsKL):
        kl = policy.kl(batch.obs, info)
    policy_loss, metrics = surrogate(
        log_ratio,
        batch.advantage,
        control,
        mask=info.get("mask"),
        kl=kl,
        with_metrics=with_metrics,
        reduction=config.reduction,
        normalizer=config.loss_normalizer or None,
    )
    if loss_terms is not None:  # a variant's terms beside the surrogate (a language policy's reference KL)
        penalty, term_metrics = loss_terms(policy, log_ratio, info, with_metrics)
        if penalty is not None:
            policy_loss = policy_loss + penalty
        metrics.update(term_metrics)
    value = critic_value(critic, batch)  # [B] (of obs, or cat(obs, privileged); a recurrent critic's over sequences)
    squared_error = value_error(
        value, batch.return_target, batch.value, config.value_clip if config.value_clip > 0 else None
    )
    loss = torch.add(policy_loss, squared_error, alpha=0.5 * config.value_coef)  # one node for the weighted sum
    if config.entropy_coef > 0.0:
        entropy = policy.entropy(batch.obs).mean()
        loss = loss - config.entropy_coef * entropy
        if with_metrics:
            metrics["entropy"] = entropy.detach()
    if with_metrics:
        metrics["value_loss"] = 0.5 * squared_error.detach()
        metrics["policy_loss"] = policy_loss.detach()
    return loss, metrics


def normalize_per_minibatch(advantage: torch.Tensor, minibatch_size: int) -> torch.Tensor:
    """Each block of ``minibatch_size`` consecutive rows of ``advantage`` [B] normalized to zero mean, unit std.

    The same numbers as ``normalize_advantage`` on every minibatch of ``RolloutBatch.split`` (as SB3 does in
    ``train``), computed for all full blocks at once: five tensor operations per epoch instead of per minibatch.
    """
    size = advantage.shape[0]
    full = size - size % minibatch_size
    parts = []
    if full > 0:
        blocks = advantage[:full].reshape(-1, minibatch_size)  # [M, b]
        mean, std = blocks.mean(1, keepdim=True), blocks.std(1, keepdim=True)  # [M, 1]
        parts.append(((blocks - mean) / (std + 1e-8)).view(full))
    if full < size:
        parts.append(normalize_advantage(advantage[full:]))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def run_epochs(
    epochs: int, target_kl: float, epoch_steps, collective: Collective = LOCAL
) -> tuple[dict[str, torch.Tensor], int]:
    """Epochs of minibatch steps, stopping early when an epoch's mean approx KL exceeds 1.5 x ``target_kl`` (> 0).

    ``epoch_steps(with_metrics)`` runs one epoch, yielding each step's metrics; they are kept for the last epoch
    (reported) and, with ``target_kl``, for every epoch. Returns the last kept epoch's mean metrics and the
    epochs run (shared by PPO's and DPPO's updates). In a data-parallel run the KL that stops the epochs is the
    ranks' mean (``collective``), so every rank stops after the same epoch.
    """
    epochs_run, sums, count = 0, {}, 0
    for epoch in range(epochs):
        with_metrics = target_kl > 0.0 or epoch == epochs - 1
        sums, count = {}, 0
        for metrics in epoch_steps(with_metrics):
            if with_metrics:
                for key, value in metrics.items():
                    sums[key] = sums[key] + value if key in sums else value
                count += 1
        epochs_run += 1
        if target_kl > 0.0:
            kl = float(sums["approx_kl"]) / count
            if collective.world_size > 1:
                kl = float(collective.mean_dict({"kl": torch.tensor(kl)})["kl"])
            if kl > 1.5 * target_kl:
                break
    return {key: value / max(count, 1) for key, value in sums.items()}, epochs_run


class PPOObjective(nn.Module):
    """``ppo_loss`` over (policy, critic) as a module: what ``CompiledFirstOrderStep`` differentiates."""

    def __init__(
        self, policy: nn.Module, critic: nn.Module, config: PPOConfig, loss_terms: LossTerms | None = None
    ) -> None:
        super().__init__()
        self.policy, self.critic, self.config, self.loss_terms = policy, critic, config, loss_terms

    def forward(self, batch: RolloutBatch, control: RatioControl) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return ppo_loss(self.policy, self.critic, batch, self.config, control, True, self.loss_terms)


class PPO:
    """Epochs x minibatches of ``ppo_loss`` through one first-order updater over policy and critic.

    With ``config.compile`` each minibatch step is one compiled graph (``robopt.core.compiled``) sharing the
    updater's state; otherwise the eager ``FirstOrderUpdater.step``. ``loss_terms``: a variant's extra policy-loss
    terms (``ppo_loss``), or None.
    """

    def __init__(self, config: PPOConfig, policy, critic, loss_terms: LossTerms | None = None) -> None:
        if config.entropy_coef > 0.0:
            require(policy, SupportsEntropy, "PPO with entropy_coef > 0", "the bonus needs the policy's entropy")
        if config.ratio.name == "kl_penalty_adaptive" and not getattr(policy, "kl_available", True):
            raise ConfigError("ratio.name=kl_penalty_adaptive on a language policy needs policy.store_old_logits=true")
        self.config, self.policy, self.critic, self.loss_terms = config, policy, critic, loss_terms
        check_sequence_minibatch(policy, config.minibatch_size, "algo.minibatch_size")
        params = list(policy.parameters()) + list(critic.parameters())
        self.updater = FirstOrderUpdater(params, config.learning_rate, config.max_grad_norm)
        self.adaptive = config.lr_schedule == "adaptive"
        self.schedule = make_schedule("constant" if self.adaptive else config.lr_schedule, config.learning_rate)
        self.learning_rate = config.learning_rate  # the adaptive schedule's current value
        self.control = config.ratio  # adapted between updates (kl_penalty_adaptive); saved in state_dict
        self.compiled_step = None
        self.collective = LOCAL
        self.symmetry: Symmetry | None = None  # use_symmetry
        if config.compile and memory_width(policy) > 0:
            raise ConfigError(
                "algo.compile=true does not support a recurrent policy (its sequence loop); set algo.compile=false"
            )
        if config.compile:
            reason = compile_unavailable_reason(self.updater.flat.device)
            if reason is not None:
                raise ConfigError(f"algo.compile=true: {reason}; set algo.compile=false for the eager step")
            objective = PPOObjective(policy, critic, config, loss_terms)
            self.compiled_step = CompiledFirstOrderStep(self.updater, objective)

    def use_symmetry(self, env, privileged: bool) -> None:
        """``algo.symmetry``: mirror the env's transitions (``robopt.algorithms.symmetry``); one line if it cannot."""
        if memory_width(self.policy) > 0:
            raise ConfigError("algo.symmetry does not mirror a recurrent policy yet")
        self.symmetry = Symmetry(self.config.symmetry, env, self.policy, privileged)

    def update(self, batch: RolloutBatch, progress: float) -> dict[str, torch.Tensor]:
        config, adaptive = self.config, self.adaptive
        learning_rate = self.learning_rate if adaptive else self.schedule(progress)
        self.updater.set_lr(learning_rate)
        minibatch_size = config.minibatch_size
        if self.symmetry is not None and config.symmetry.augment:  # the batch and its mirror image, minibatches x 2
            batch, minibatch_size = self.symmetry.augment(batch, self.policy), 2 * minibatch_size

        def epoch_steps(with_metrics: bool):
            for minibatch in self._epoch_minibatches(batch, minibatch_size):
                if self.compiled_step is not None:
                    metrics = self._compiled_step(minibatch)
                else:
                    metrics = self.updater.step(lambda mb=minibatch: self.loss(mb, with_metrics or adaptive))
                if adaptive:
                    self._adapt_learning_rate(metrics["approx_kl"])
                yield metrics

        metrics, epochs_run = run_epochs(config.epochs, config.target_kl, epoch_steps, self.collective)
        drift = {}
        if config.drift_metrics:
            with torch.no_grad():  # after-update drift over the whole batch: what the trust region is about
                log_ratio = self.policy.log_ratio(batch.obs, batch.action, batch.policy_info)
                drift = self.collective.mean_dict(ratio_metrics(log_ratio, batch.policy_info.get("mask")))
        if self.control.name == "kl_penalty_adaptive":
            self.control = self.control.adapted(float(drift["approx_kl"]))
        return {
            **metrics,
            **{f"batch_{key}": value for key, value in drift.items()},
            "explained_variance": explained_variance(batch.value, batch.return_target),
            "epochs_run": torch.tensor(float(epochs_run)),
            "learning_rate": torch.tensor(self.learning_rate if adaptive else learning_rate),
        }

    def loss(self, minibatch: RolloutBatch, with_metrics: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``ppo_loss`` of the current policy, critic, ratio control and loss terms on ``minibatch`` (plus the mirror
        loss with ``algo.symmetry.mirror_loss``)."""
        loss, metrics = ppo_loss(
            self.policy, self.critic, minibatch, self.config, self.control, with_metrics, self.loss_terms
        )
        coef = self.config.symmetry.mirror_loss
        if self.symmetry is not None and coef > 0:
            mirror_loss = self.symmetry.loss(self.policy, minibatch.obs)
            loss = loss + coef * mirror_loss
            if with_metrics:
                metrics["mirror_loss"] = mirror_loss.detach()
        return loss, metrics

    def _adapt_learning_rate(self, approx_kl: torch.Tensor) -> None:
        """rsl_rl's adaptive schedule: the step's KL (the ranks' mean) against ``desired_kl``; one host read."""
        kl = approx_kl.detach()
        if self.collective.world_size > 1:
            kl = self.collective.mean_dict({"kl": kl})["kl"]
        kl, desired = float(kl), self.config.desired_kl
        if kl > 2.0 * desired:
            self.learning_rate = max(1e-5, self.learning_rate / 1.5)
        elif 0.0 < kl < 0.5 * desired:
            self.learning_rate = min(1e-2, self.learning_rate * 1.5)
        self.updater.set_lr(self.learning_rate)

    def use_collective(self, collective: Collective) -> None:
        """Data-parallel training: every minibatch step averages the flat gradient over ranks (before the clip), and
        the KL that stops the epochs or adapts the penalty is the ranks' mean. Each rank's minibatch is its equal
        share of the configured one, so the averaged gradient is the whole minibatch's."""
        if self.compiled_step is not None:
            raise ConfigError(
                "algo.compile=true runs in one process; data-parallel training takes the eager step: set "
                "algo.compile=false"
            )
        if self.config.minibatch_advantage_norm:
            raise ConfigError(
                "algo.minibatch_advantage_norm=true normalizes each rank's share of a minibatch on its own; with "
                "several ranks use the batch-wide normalization (rollout.normalize_advantage=true)"
            )
        if self.config.reduction == "token_mean":
            raise ConfigError(
                "algo.reduction=token_mean weighs ranks by their token counts, which the gradient average does not; "
                "with several ranks use reduction=mean, sequence_mean or constant"
            )
        self.collective = collective
        self.updater.collective = collective

    def _compiled_step(self, minibatch: RolloutBatch) -> dict[str, torch.Tensor]:
        try:
            return self.compiled_step(minibatch, self.control)
        except torch._dynamo.exc.TorchDynamoException as error:  # raised while building the graph (first calls)
            detail = (str(error).strip().splitlines() or [""])[0]
            raise ConfigError(
                f"algo.compile=true: torch.compile could not build the PPO step ({type(error).__name__}: {detail}); "
                "set algo.compile=false"
            ) from error

    def _epoch_minibatches(self, batch: RolloutBatch, minibatch_size: int) -> list[RolloutBatch]:
        """One epoch's shuffled minibatches (views of one permuted copy), advantages normalized per minibatch."""
        shuffled = batch.index(batch.permutation())  # whole sequences for a recurrent policy
        if self.config.minibatch_advantage_norm:
            advantage = normalize_per_minibatch(shuffled.advantage, minibatch_size)
            shuffled = dataclasses.replace(shuffled, advantage=advantage)
        return shuffled.split(minibatch_size)

    def state_dict(self) -> dict:
        return {
            "optimizer": self.updater.state_dict(),
            "kl_coef": self.control.kl_coef,
            "learning_rate": self.learning_rate,
        }

    def load_state_dict(self, state: dict) -> None:
        self.updater.load_state_dict(state["optimizer"])
        self.control = dataclasses.replace(self.control, kl_coef=state["kl_coef"])
        self.learning_rate = state.get("learning_rate", self.config.learning_rate)  # absent before the schedule
