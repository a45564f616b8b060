"""SAC's and TD3's whole update (targets, critic, actor and temperature losses, their Adam steps, Polyak
averaging) as one compiled graph per call (``algo.compile: true``).

Shapes: B batch, C critics, A action dim. The graph runs the same update order as the eager update
(``robopt.algorithms.offpolicy_updates``: ``sac_update``, ``td3_update``) over ``GraphParts``. Gradients come from
``torch.func.grad_and_value`` over ``functional_call`` of the algorithm's own modules (no autograd graph at run
time); Adam is written out as
torch's fused Adam computes it (robopt.core.compiled's formula) on torch's own optimizer state, which is
created here in torch's format when the optimizer has not stepped yet. So the eager and compiled updates share
parameters, moments and step counts: a run switches between them freely and checkpoints are the same.

The update's random draws (SAC's reparameterization noise for s' and s, TD3's target smoothing noise) are drawn by
the algorithm outside the graph from the global torch RNG and passed in, as to the eager update: eager and
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

from robopt.algorithms.offpolicy_updates import sac_update, td3_update
from robopt.core.compiled import compile_unavailable_reason

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


class GraphParts:
    """The update's parts inside the graph: the networks called with the optimizers' own parameter tensors,
    ``torch.func`` gradients, Adam in place on torch's optimizer state, Polyak averaging with ``_foreach_lerp_``."""

    def __init__(self, update: CompiledUpdate, actor_state, critic_state, target_critic, **extra) -> None:
        self.update, self.actor_state, self.critic_state, self.target_params = (
            update,
            actor_state,
            critic_state,
            target_critic,
        )
        self.alpha_state = extra.get("alpha_state")  # SAC's temperature
        self.target_actor_params = extra.get("target_actor")  # TD3's target actor
        self.auto_temperature = getattr(update.algorithm, "auto_temperature", False)

    def actor(self, obs: torch.Tensor, *noise) -> torch.Tensor:
        return self.update.actor(self.actor_state[0], obs, *noise)

    def target_actor(self, obs: torch.Tensor) -> torch.Tensor:
        return self.update.target_actor(self.target_actor_params, obs)

    def critic(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.update.critic(self.critic_state[0], obs, action)

    def target_critic(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.update.critic(self.target_params, obs, action)

    def alpha(self) -> torch.Tensor:
        return self.alpha_state[0][0].exp()

    def without_gradient(self, compute):
        return compute()

    def critic_step(self, objective):
        critic = self.update.critic
        grads, (loss, aux) = torch.func.grad_and_value(
            lambda params: objective(lambda *a: critic(params, *a)), has_aux=True
        )(tuple(self.critic_state[0]))
        adam_(self.critic_state, grads, *_hyper(self.update.algorithm.critic_optimizer))
        return loss, aux

    def actor_step(self, objective, has_aux: bool = False):
        actor = self.update.actor
        grads, out = torch.func.grad_and_value(lambda params: objective(lambda *a: actor(params, *a)), has_aux=has_aux)(
            tuple(self.actor_state[0])
        )
        adam_(self.actor_state, grads, *_hyper(self.update.algorithm.actor_optimizer))
        return out

    def alpha_step(self, objective) -> torch.Tensor:
        grad, loss = torch.func.grad_and_value(objective)(self.alpha_state[0][0])
        adam_(self.alpha_state, (grad,), *_hyper(self.update.algorithm.alpha_optimizer))
        return loss

    def polyak(self, tau: float) -> None:
        torch._foreach_lerp_(self.target_params, self.critic_state[0], tau)
        if self.target_actor_params is not None:
            torch._foreach_lerp_(self.target_actor_params, self.actor_state[0], tau)


class CompiledSACUpdate(CompiledUpdate):
    """SAC's update (``sac_update``) as one graph: soft target, critic, actor and temperature steps, Polyak."""

    name = "SAC update"

    def refresh(self) -> None:
        sac = self.algorithm
        self.actor = _Functional(sac.policy, "rsample", list(sac.policy.parameters()))
        self.critic = _Functional(sac.critic, "forward", list(sac.critic.parameters()))
        self.actor_state = adam_state(sac.actor_optimizer)
        self.critic_state = adam_state(sac.critic_optimizer)
        self.alpha_state = adam_state(sac.alpha_optimizer)
        self.target = [p.detach() for p in sac.target_critic.parameters()]

    def __call__(self, batch: dict[str, torch.Tensor], next_noise, noise) -> dict[str, torch.Tensor] | None:
        inputs = tuple(batch[key] for key in BATCH_KEYS)
        return self.run(self.actor_state, self.critic_state, self.alpha_state, self.target, inputs, next_noise, noise)

    def _step(self, actor_state, critic_state, alpha_state, target, inputs, next_noise, noise):
        sac = self.algorithm
        parts = GraphParts(self, actor_state, critic_state, target, alpha_state=alpha_state)
        batch = dict(zip(BATCH_KEYS, inputs))
        return sac_update(parts, batch, next_noise, noise, sac.target_entropy, sac.config.tau)


class CompiledTD3Update(CompiledUpdate):
    """TD3's update (``td3_update``) as one graph: the critic-only update and the full one (every ``policy_delay``)
    compile apart."""

    name = "TD3 update"

    def refresh(self) -> None:
        td3 = self.algorithm
        self.actor = _Functional(td3.policy, "mean_action", td3.actor_params)
        self.target_actor = _Functional(td3.target_policy, "mean_action", td3.target_actor_params)
        self.critic = _Functional(td3.critic, "forward", list(td3.critic.parameters()))
        self.actor_state = adam_state(td3.actor_optimizer)
        self.critic_state = adam_state(td3.critic_optimizer)
        target_critic = [p.detach() for p in td3.target_critic.parameters()]
        self.targets = ([p.detach() for p in td3.target_actor_params], target_critic)

    def __call__(self, batch: dict[str, torch.Tensor], noise, update_actor: bool) -> dict[str, torch.Tensor] | None:
        inputs = tuple(batch[key] for key in BATCH_KEYS)
        return self.run(
            self.actor_state, self.critic_state, self.targets, inputs, noise, update_actor, kind=update_actor
        )

    def _step(self, actor_state, critic_state, targets, inputs, noise, update_actor):
        td3 = self.algorithm
        parts = GraphParts(self, actor_state, critic_state, targets[1], target_actor=targets[0])
        batch = dict(zip(BATCH_KEYS, inputs))
        return td3_update(parts, batch, noise, update_actor, td3.smoothing, td3.config.tau)
