"""Trust-region updater: natural-gradient step under a mean-KL bound (TRPO, Schulman et al. 2015).

The updater maximizes a surrogate ``J(theta)`` (we minimize ``loss = -J``) subject to
``mean KL(pi_old || pi_theta) <= delta``:

1. ``g = -grad loss`` at the old parameters.
2. Solve ``F s = g`` by conjugate gradient, where ``F`` is the Hessian of the mean KL at the old
   parameters (the Fisher matrix, TRPO appendix C.1), applied as Fisher-vector products by double
   backprop, with damping ``F + lambda I``.
3. Scale to the KL bound under the quadratic model ``KL ~ 1/2 x^T F x``:
   ``step = sqrt(2 delta / s^T F s) * s`` (TRPO eq. 14 and appendix C).
4. Backtrack ``theta_old + beta^i step`` and accept the first trial whose surrogate improves and whose
   mean KL is at most ``delta``; if none does, the old parameters are restored.

It knows nothing about Gaussians: the caller passes closures over the actor parameters, typically
``lambda: policy.kl(obs, info).mean()`` for any ``SupportsKL`` policy, so it serves robot and language
policies alike.

Shapes: P is the number of scalar parameters (all actor parameters flattened).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

LossClosure = Callable[[], "torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]"]
KLClosure = Callable[[], torch.Tensor]


@dataclass(frozen=True)
class TrustRegionConfig:
    """Hyperparameters of the trust-region step (defaults follow sb3-contrib's TRPO)."""

    max_kl: float = 0.01
    """delta: bound on the mean KL(pi_old || pi_new) of an accepted step."""
    damping: float = 0.1
    """lambda in (F + lambda I) s = g; keeps CG well conditioned."""
    cg_iterations: int = 15
    """Maximum conjugate-gradient iterations."""
    cg_residual_tol: float = 1e-10
    """CG stops when the squared residual norm falls below this."""
    line_search_steps: int = 10
    """Maximum number of backtracking trials (the full step included)."""
    backtrack_ratio: float = 0.8
    """beta: each trial shrinks the step by this factor."""

    def __post_init__(self) -> None:
        if self.max_kl <= 0:
            raise ValueError(f"max_kl={self.max_kl}: must be > 0")
        if self.damping < 0:
            raise ValueError(f"damping={self.damping}: must be >= 0")
        if self.cg_iterations < 1 or self.line_search_steps < 1:
            raise ValueError("cg_iterations and line_search_steps must be >= 1")
        if not 0.0 < self.backtrack_ratio < 1.0:
            raise ValueError(f"backtrack_ratio={self.backtrack_ratio}: must be in (0, 1)")


def flat_params(params: list[nn.Parameter]) -> torch.Tensor:
    """Concatenate parameters into one detached vector [P]."""
    return torch.cat([p.detach().reshape(-1) for p in params])


@torch.no_grad()
def set_flat_params(params: list[nn.Parameter], flat: torch.Tensor) -> None:
    """Write the vector ``flat`` [P] back into ``params`` in place."""
    offset = 0
    for p in params:
        n = p.numel()
        p.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def flat_grad(
    output: torch.Tensor, params: list[nn.Parameter], create_graph: bool = False, retain_graph: bool | None = None
) -> torch.Tensor:
    """Gradient of scalar ``output`` w.r.t. ``params`` as one vector [P] (zeros for unused parameters)."""
    grads = torch.autograd.grad(output, params, create_graph=create_graph, retain_graph=retain_graph, allow_unused=True)
    pairs = zip(grads, params, strict=True)
    return torch.cat([torch.zeros_like(p).reshape(-1) if g is None else g.reshape(-1) for g, p in pairs])


def conjugate_gradient(
    matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, iterations: int = 15, residual_tol: float = 1e-10
) -> tuple[torch.Tensor, int]:
    """Solve ``M x = b`` for symmetric positive-definite ``M`` given only ``x -> M x`` (Nocedal & Wright alg. 5.2).

    Args:
        matvec: the product ``v -> M v`` for v [P].
        b: right-hand side [P].
        iterations: maximum iterations (exact after P in exact arithmetic).
        residual_tol: stop when ``|r|^2`` drops below this.

    Returns:
        x [P] and the number of iterations run.
    """
    x = torch.zeros_like(b)
    residual = b.clone()  # r = b - M x with x = 0
    direction = b.clone()
    residual_sq = residual.dot(residual)
    done = 0
    for done in range(1, iterations + 1):
        if residual_sq.item() < residual_tol:
            return x, done - 1
        m_direction = matvec(direction)
        alpha = residual_sq / direction.dot(m_direction)
        x = x + alpha * direction
        residual = residual - alpha * m_direction
        new_residual_sq = residual.dot(residual)
        direction = residual + (new_residual_sq / residual_sq) * direction
        residual_sq = new_residual_sq
    return x, done


def fisher_vector_product(
    kl_fn: KLClosure, params: list[nn.Parameter], damping: float, average: Callable | None = None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return ``v -> (H + damping I) v`` with H the Hessian of the mean KL at the current params (TRPO app. C.1).

    The KL gradient is built once with ``create_graph=True``; each product then costs one backward pass
    of ``(grad KL . v)`` (Pearlmutter 1994), instead of forming the P x P matrix. ``average`` (a data-parallel
    run's ``Collective.average_``) makes H v the ranks' mean: the Hessian of the KL over every rank's rows.
    """
    kl_grad = flat_grad(kl_fn(), params, create_graph=True)  # [P], graph kept for the second backward

    def product(vector: torch.Tensor) -> torch.Tensor:
        hessian_vector = flat_grad(kl_grad.dot(vector), params, retain_graph=True)  # [P]
        if average is not None:
            average(hessian_vector)
        return hessian_vector + damping * vector

    return product


def scale_to_kl_bound(direction: torch.Tensor, fisher_direction: torch.Tensor, max_kl: float) -> torch.Tensor:
    """Scale ``s`` so the quadratic KL model hits the bound: ``sqrt(2 delta / s^T F s) * s`` (TRPO app. C).

    Returns a zero step if ``s^T F s`` is not positive (e.g. a zero gradient).
    """
    shs = direction.dot(fisher_direction)
    if not torch.isfinite(shs) or shs.item() <= 0.0:
        return torch.zeros_like(direction)
    return torch.sqrt(2.0 * max_kl / shs) * direction


def _loss_value(loss_fn: LossClosure) -> torch.Tensor:
    out = loss_fn()
    return out[0] if isinstance(out, tuple) else out


class TrustRegionUpdater:
    """Natural-gradient step with a KL-bounded backtracking line search over a fixed parameter list.

    Composition, not inheritance: the algorithm owns one of these for the actor and an ordinary
    first-order optimizer for the critic.
    """

    def __init__(self, params: Iterable[nn.Parameter], config: TrustRegionConfig | None = None) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("TrustRegionUpdater needs at least one parameter that requires grad")
        self.config = config or TrustRegionConfig()
        # a data-parallel run's robopt.distributed.Collective: the gradient, every Fisher-vector product and the
        # line search's loss and KL are the ranks' means, so every rank solves the same system and takes one step
        self.collective = None

    def _average(self, *values: torch.Tensor) -> list[torch.Tensor]:
        """Scalars averaged over ranks (one all_reduce); as given in one process."""
        if self.collective is None:
            return list(values)
        stacked = self.collective.average_(torch.stack([value.detach().reshape(()) for value in values]))
        return list(stacked.unbind())

    def step(self, loss_fn: LossClosure, kl_fn: KLClosure, fisher_kl_fn: KLClosure | None = None) -> dict[str, float]:
        """One trust-region update of ``self.params``.

        Args:
            loss_fn: closure returning the surrogate loss to MINIMIZE (scalar, or ``(loss, metrics)``),
                evaluated at the current parameters against the fixed old policy.
            kl_fn: closure returning the mean KL(pi_old || pi_current) as a scalar (a [B] result is averaged).
            fisher_kl_fn: optional cheaper KL closure for the Fisher products only (e.g. on a subsample);
                defaults to ``kl_fn``.

        Returns:
            Metrics: ``kl`` (mean KL after the step; 0 when rejected), ``kl_full_step`` (KL of the
            unshrunk step), ``line_search_steps`` (backtracks before acceptance; ``line_search_steps``
            config value when rejected), ``surrogate_improvement`` (old loss minus new loss),
            ``expected_improvement`` (first-order prediction for the full step), ``rejected`` (0/1),
            ``cg_iterations``, ``grad_norm``, ``step_norm``.
        """
        cfg = self.config
        old_params = flat_params(self.params)  # [P]
        loss = _loss_value(loss_fn)
        gradient = -flat_grad(loss, self.params)  # [P], ascent direction of the surrogate
        average = None if self.collective is None else self.collective.average_
        if average is not None:
            average(gradient)
            (loss,) = self._average(loss)
        fisher_kl = kl_fn if fisher_kl_fn is None else fisher_kl_fn
        fvp = fisher_vector_product(lambda: _mean(fisher_kl), self.params, cfg.damping, average)
        direction, cg_done = conjugate_gradient(fvp, gradient, cfg.cg_iterations, cfg.cg_residual_tol)
        full_step = scale_to_kl_bound(direction, fvp(direction), cfg.max_kl)  # [P]
        expected = gradient.dot(full_step).item()
        old_loss = loss.item()
        metrics = {
            "grad_norm": gradient.norm().item(),
            "step_norm": full_step.norm().item(),
            "cg_iterations": float(cg_done),
            "expected_improvement": expected,
        }
        # no ascent direction (e.g. every advantage 0): no step is tried, and an untried step moved nothing (KL 0)
        search = _LineSearchResult(accepted=False, backtracks=cfg.line_search_steps, loss=old_loss, kl_full_step=0.0)
        if expected > 0:
            search = self._line_search(loss_fn, kl_fn, old_params, full_step, old_loss)
        if not search.accepted:
            set_flat_params(self.params, old_params)
        return metrics | {
            "kl": search.kl if search.accepted else 0.0,
            "kl_full_step": search.kl_full_step,
            "line_search_steps": float(search.backtracks),
            "surrogate_improvement": old_loss - search.loss if search.accepted else 0.0,
            "rejected": 0.0 if search.accepted else 1.0,
        }

    @torch.no_grad()
    def _line_search(
        self, loss_fn: LossClosure, kl_fn: KLClosure, old_params: torch.Tensor, full_step: torch.Tensor, old_loss: float
    ) -> _LineSearchResult:
        """Backtrack ``old + beta^i step``; accept iff loss < old loss AND mean KL <= delta (TRPO sec. 6).

        On failure the parameters are left at the last trial; the caller restores them.
        """
        cfg = self.config
        kl_full_step = float("nan")
        for i in range(cfg.line_search_steps):
            set_flat_params(self.params, old_params + cfg.backtrack_ratio**i * full_step)
            new_loss, kl = (value.item() for value in self._average(_loss_value(loss_fn), _mean(kl_fn)))
            kl_full_step = kl if i == 0 else kl_full_step
            if math.isfinite(new_loss) and math.isfinite(kl) and new_loss < old_loss and kl <= cfg.max_kl:
                return _LineSearchResult(True, i, new_loss, kl, kl_full_step)
        return _LineSearchResult(False, cfg.line_search_steps, old_loss, float("nan"), kl_full_step)


@dataclass(frozen=True)
class _LineSearchResult:
    accepted: bool
    backtracks: int
    loss: float
    kl: float = float("nan")
    kl_full_step: float = float("nan")


def _mean(kl_fn: KLClosure) -> torch.Tensor:
    kl = kl_fn()
    return kl.mean() if kl.dim() > 0 else kl
