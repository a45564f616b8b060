"""SAC's and TD3's whole update (targets, critic, actor and temperature losses, their Adam steps, Polyak
averaging) as one compiled graph per call (``algo.compile: true``).

Shapes: B batch, C critics, A action dim. Gradients come from ``torch.func.grad_and_value`` over
``functional_call`` of the algorithm's own modules (no autograd graph at run time); Adam is written out as
torch's fused Adam computes it (robopt.core.compiled's formula) on torch's own optimizer state, which is
created here in torch's format when the optimizer has not stepped yet. So the eager and compiled updates share
parameters, moments and step counts: a run switches between them freely and checkpoints are the same.

The update's random draws (SAC's reparameterization noise for s' and s, TD3's target smoothing noise) are drawn
outside the graph from the global torch RNG, in the order the eager update draws them, and passed in: eager and
compiled updates on the same batch and RNG state agree to float rounding (tests/algorithms/test_offpolicy_compiled.py).
On CPU, inductor's C++ wrapper launches the graph; on CUDA the graph is also captured as a CUDA graph
(``mode="reduce-overhead"``).
"""

from __future__ import annotations

import sys
import time
import types

import torch
from torch import nn

from robopt.core.compiled import compile_unavailable_reason
from robopt.core.q_losses import (
    deterministic_actor_loss,
    q_regression_loss,
    sac_actor_loss,
    smoothed_target_action,
    soft_q_target,
    temperature_loss,
)

BATCH_KEYS = ("obs", "action", "reward", "discount", "terminated", "next_obs", "weights")


class _Method(nn.Module):
    """``forward(*args)`` = ``module.<method>(*args)``: what ``functional_call`` calls on a substituted module."""

    def __init__(self, module: nn.Module, method: str) -> None:
        super().__init__()
        self.module, self.method = module, method

    def forward(self, *args):
        return getattr(self.module, self.method)(*args)


class _Functional:
    """A module's method called with given parameter tensors in place of its own (names of ``parameters``)."""

    def __init__(self, module: nn.Module, method: str, parameters: list[nn.Parameter]) -> None:
        self.call = _Method(module, method)
        names = {id(p): f"module.{name}" for name, p in module.named_parameters()}
        self.names = [names[id(p)] for p in parameters]

    def __call__(self, tensors, *args):
        named = dict(zip(self.names, tensors))
        return torch.func.functional_call(self.call, named, args, strict=False, tie_weights=False)


def adam_state(optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], ...]:
    """(parameters, exp_avg, exp_avg_sq, step) of a one-group Adam, detached, in torch's own state tensors.

    The state is created as torch's fused Adam creates it (a float32 step tensor on the parameter's device,
    zero moments) when the optimizer has not stepped yet.
    """
    (group,) = optimizer.param_groups
    lists: tuple[list[torch.Tensor], ...] = ([], [], [], [])
    for p in group["params"]:
        state = optimizer.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        for target, tensor in zip(lists, (p, state["exp_avg"], state["exp_avg_sq"], state["step"])):
            target.append(tensor.detach())
    return lists


def adam_(state: tuple[list[torch.Tensor], ...], grads, lr: float, betas: tuple[float, float], eps: float) -> None:
    """One Adam step in place: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), with t the incremented step (float64 factors)."""
    params, exp_avgs, exp_avg_sqs, steps = state
    beta1, beta2 = betas
    torch._foreach_add_(steps, 1.0)
    step = steps[0].to(torch.float64)
    torch._foreach_lerp_(exp_avgs, list(grads), 1.0 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, list(grads), list(grads), value=1.0 - beta2)
    step_size = (lr / (1.0 - beta1**step)).to(params[0].dtype)
    bias_correction2_sqrt = torch.sqrt(1.0 - beta2**step).to(params[0].dtype)
    denoms = torch._foreach_div(torch._foreach_sqrt(exp_avg_sqs), bias_correction2_sqrt)
    torch._foreach_add_(denoms, eps)
    torch._foreach_sub_(params, torch._foreach_mul(torch._foreach_div(exp_avgs, denoms), step_size))


def _hyper(optimizer: torch.optim.Optimizer) -> tuple[float, tuple[float, float], float]:
    (group,) = optimizer.param_groups
    return float(group["lr"]), tuple(group["betas"]), float(group["eps"])


class CompiledUpdate:
    """Base of the compiled SAC and TD3 updates: compile once, fall back to eager with one line on failure."""

    name = "update"

    def __init__(self, algorithm) -> None:
        self.algorithm = algorithm
        self.device = next(algorithm.policy.parameters()).device
        self.compile_seconds, self._compiled_kinds = 0.0, set()
        self.failed: str | None = compile_unavailable_reason(self.device)
        if self.failed is not None:
            say_eager(self.name, self.failed)
            return
        self.refresh()
        # a copy of _step's code per instance: Dynamo keeps compiled graphs (at most 8) per code object
        step = types.FunctionType(type(self)._step.__code__.replace(), sys.modules[type(self).__module__].__dict__)
        options = {"cpp_wrapper": True} if self.device.type == "cpu" else None  # C++ launcher: less per call
        mode = "reduce-overhead" if self.device.type == "cuda" else None
        self._compiled = torch.compile(
            types.MethodType(step, self), dynamic=False, fullgraph=True, mode=mode, options=options
        )

    @property
    def active(self) -> bool:
        return self.failed is None

    def refresh(self) -> None:
        """Re-read the optimizers' state tensors (after ``load_state_dict`` replaced them)."""
        raise NotImplementedError

    def _step(self, *args):
        raise NotImplementedError

    def _critic_step(self, critic_state, optimizer, y: torch.Tensor, inputs: tuple, scale: float):
        """Regress the critics on the target y [B] (weighted, ``scale`` x the summed MSEs) and take their Adam step;
        returns (loss, td_error [B], mean Q) from before the step."""
        obs, action, weights = inputs[0], inputs[1], inputs[6]

        def objective(params):
            q = self.critic(params, obs, action)  # [C, B]
            loss, td_error = q_regression_loss(q, y, weights, scale=scale)
            return loss, (td_error, q.mean())

        grads, (loss, (td_error, q_mean)) = torch.func.grad_and_value(objective, has_aux=True)(tuple(critic_state[0]))
        adam_(critic_state, grads, *_hyper(optimizer))
        return loss, td_error, q_mean

    def run(self, *args, kind: object = None) -> dict[str, torch.Tensor] | None:
        """The compiled step's metrics, or None (said once, eager from then on) when it cannot be compiled.

        The first call of each ``kind`` of graph compiles it; those calls' seconds add up in ``compile_seconds``.
        """
        try:
            if kind in self._compiled_kinds:
                return self._compiled(*args)
            start = time.perf_counter()
            metrics = self._compiled(*args)
            self._compiled_kinds.add(kind)
            self.compile_seconds += time.perf_counter() - start
            return metrics
        except Exception as error:  # noqa: BLE001  (inductor raises many kinds; the eager path is always there)
            detail = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
            self.failed = f"torch.compile could not build the {self.name} ({type(error).__name__}: {detail})"
            say_eager(self.name, self.failed)
            return None


def say_eager(name: str, reason: str) -> None:
    print(f"algo.compile=true: {reason}; the eager {name} runs instead", file=sys.stderr, flush=True)


class CompiledSACUpdate(CompiledUpdate):
    """SAC.update as one graph: soft target, critic step, actor step, temperature step, Polyak averaging."""

    name = "SAC update"

    def refresh(self) -> None:
        sac = self.algorithm
        self.actor = _Functional(sac.policy, "rsample", list(sac.policy.parameters()))
        self.critic = _Functional(sac.critic, "forward", list(sac.critic.parameters()))
        self.actor_state = adam_state(sac.actor_optimizer)
        self.critic_state = adam_state(sac.critic_optimizer)
        self.alpha_state = adam_state(sac.alpha_optimizer)
        self.target = [p.detach() for p in sac.target_critic.parameters()]

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        next_noise = torch.randn_like(batch["action"])  # the eager update's order: s' first, then s
        noise = torch.randn_like(batch["action"])
        inputs = tuple(batch[key] for key in BATCH_KEYS)
        return self.run(self.actor_state, self.critic_state, self.alpha_state, self.target, inputs, next_noise, noise)

    def _step(self, actor_state, critic_state, alpha_state, target, inputs, next_noise, noise):
        sac = self.algorithm
        obs, action, reward, discount, terminated, next_obs, weights = inputs
        actor, critic, log_alpha = actor_state[0], critic_state[0], alpha_state[0][0]
        alpha = log_alpha.exp()
        next_action, next_log_prob = self.actor(actor, next_obs, next_noise)
        next_q = self.critic(target, next_obs, next_action)  # [C, B]
        y = soft_q_target(reward, discount, terminated, next_q, next_log_prob, alpha)

        critic_loss, td_error, q_mean = self._critic_step(critic_state, sac.critic_optimizer, y, inputs, scale=0.5)

        def actor_objective(params):
            new_action, log_prob = self.actor(params, obs, noise)
            return sac_actor_loss(self.critic(critic, obs, new_action), log_prob, alpha), log_prob

        grads, (actor_loss, log_prob) = torch.func.grad_and_value(actor_objective, has_aux=True)(tuple(actor))
        adam_(actor_state, grads, *_hyper(sac.actor_optimizer))
        metrics = {"critic_loss": critic_loss, "actor_loss": actor_loss, "alpha": alpha,
                   "entropy": -log_prob.mean(), "q_mean": q_mean, "td_error": td_error}  # fmt: skip
        if sac.auto_temperature:
            metrics["alpha_loss"] = temperature_loss(log_alpha, log_prob, sac.target_entropy)
            # d/d log_alpha of -mean(log_alpha (log pi + H)) = -mean(log pi + H)
            alpha_grad = -(log_prob + sac.target_entropy).mean()
            adam_(alpha_state, (alpha_grad,), *_hyper(sac.alpha_optimizer))
        torch._foreach_lerp_(target, critic, sac.config.tau)
        return metrics


class CompiledTD3Update(CompiledUpdate):
    """TD3.update as one graph: the critic-only update and the full one (every ``policy_delay``) compile apart."""

    name = "TD3 update"

    def refresh(self) -> None:
        td3 = self.algorithm
        self.actor = _Functional(td3.policy, "mean_action", td3.actor_params)
        target_actor = [p for name, p in td3.target_policy.named_parameters() if name != "log_std"]
        self.target_actor = _Functional(td3.target_policy, "mean_action", target_actor)
        self.critic = _Functional(td3.critic, "forward", list(td3.critic.parameters()))
        self.scale = float(td3.half_range.mean())  # a constant of the graph, as the eager update's float()
        self.actor_state = adam_state(td3.actor_optimizer)
        self.critic_state = adam_state(td3.critic_optimizer)
        self.targets = ([p.detach() for p in target_actor], [p.detach() for p in td3.target_critic.parameters()])

    def __call__(self, batch: dict[str, torch.Tensor], update_actor: bool) -> dict[str, torch.Tensor] | None:
        td3, action = self.algorithm, batch["action"]
        noise = None
        if td3.config.target_noise > 0.0:  # as smoothed_target_action draws it, from the global RNG
            noise = torch.randn(action.shape, device=action.device, dtype=action.dtype)
        inputs = tuple(batch[key] for key in BATCH_KEYS)
        return self.run(
            self.actor_state, self.critic_state, self.targets, inputs, noise, update_actor, kind=update_actor
        )

    def _step(self, actor_state, critic_state, targets, inputs, noise, update_actor):
        td3 = self.algorithm
        config = td3.config
        obs, action, reward, discount, terminated, next_obs, weights = inputs
        actor, critic = actor_state[0], critic_state[0]
        target_actor, target_critic = targets
        scale = self.scale
        next_action = smoothed_target_action(
            self.target_actor(target_actor, next_obs), config.target_noise * scale, config.target_noise_clip * scale,
            td3.low, td3.high, standard_normal=noise,
        )  # fmt: skip
        y = soft_q_target(reward, discount, terminated, self.critic(target_critic, next_obs, next_action))

        critic_loss, td_error, q_mean = self._critic_step(critic_state, td3.critic_optimizer, y, inputs, scale=1.0)
        metrics = {"critic_loss": critic_loss, "q_mean": q_mean, "td_error": td_error}
        if update_actor:

            def actor_objective(params):
                return deterministic_actor_loss(self.critic(critic, obs, self.actor(params, obs))[0])

            grads, actor_loss = torch.func.grad_and_value(actor_objective)(tuple(actor))
            adam_(actor_state, grads, *_hyper(td3.actor_optimizer))
            torch._foreach_lerp_(target_critic, critic, config.tau)
            torch._foreach_lerp_(target_actor, actor, config.tau)
            metrics["actor_loss"] = actor_loss
        return metrics
