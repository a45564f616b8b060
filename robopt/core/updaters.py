"""First-order updater shared by robot and language policies (Adam + global gradient-norm clipping)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class FirstOrderUpdater:
    """Wraps an Adam optimizer over ``params``; ``step`` takes a loss closure and returns metrics."""

    def __init__(
        self, params: Iterable[torch.nn.Parameter], lr: float, max_grad_norm: float | None = 0.5, eps: float = 1e-5
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        # The fused kernel is several times faster for small networks on CPU (one kernel for all tensors).
        self.optimizer = torch.optim.Adam(self.params, lr=lr, eps=eps, fused=True)
        self.max_grad_norm = max_grad_norm

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, loss_fn: Callable[[], tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
        """Evaluate ``loss_fn() -> (loss, metrics)``, backprop, clip, step; returns metrics with grad_norm."""
        loss, metrics = loss_fn()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        else:
            grad_norm = torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in self.params if p.grad is not None))
        self.optimizer.step()
        return {**metrics, "loss": loss.detach(), "grad_norm": grad_norm.detach()}

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
