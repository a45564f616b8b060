"""First-order updater shared by robot and language policies (Adam + global gradient-norm clipping).

The parameters it owns are re-homed into one flat buffer (and their gradients into another), so the
optimizer step, the gradient-norm clip and zeroing are each a single tensor operation instead of one
per layer: for the small networks of robot control that is a large share of a CPU gradient step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class FirstOrderUpdater:
    """Adam over ``params`` (flattened into one buffer); ``step`` takes a loss closure and returns metrics.

    The module parameters stay ordinary leaves whose storage is a view into the flat buffer, so
    ``state_dict``/``load_state_dict`` and in-place writes (e.g. a trust-region step) keep working.
    Do not move the modules to another device after building the updater.
    """

    def __init__(
        self, params: Iterable[torch.nn.Parameter], lr: float, max_grad_norm: float | None = 0.5, eps: float = 1e-5
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("FirstOrderUpdater needs at least one parameter that requires grad")
        first = self.params[0]
        if any(p.device != first.device or p.dtype != first.dtype for p in self.params):
            raise ValueError("FirstOrderUpdater needs every parameter on one device with one dtype")
        self.flat = torch.nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self.params]))  # [P]
        self.flat.grad = torch.zeros_like(self.flat)  # [P]
        offset = 0
        for p in self.params:
            n = p.numel()
            p.data = self.flat.data[offset : offset + n].view_as(p)
            p.grad = self.flat.grad[offset : offset + n].view_as(p)  # backward accumulates into this view in place
            offset += n
        # The fused kernel is several times faster than the per-tensor loop on CPU.
        self.optimizer = torch.optim.Adam([self.flat], lr=lr, eps=eps, fused=True)
        self.max_grad_norm = max_grad_norm

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, loss_fn: Callable[[], tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
        """Evaluate ``loss_fn() -> (loss, metrics)``, backprop, clip, step; returns metrics with grad_norm."""
        loss, metrics = loss_fn()
        grad = self.flat.grad
        grad.zero_()
        loss.backward()
        grad_norm = torch.linalg.vector_norm(grad)
        if self.max_grad_norm is not None:
            # torch.nn.utils.clip_grad_norm_ semantics: scale by max_norm / (norm + 1e-6) when that is < 1
            grad.mul_(torch.clamp(self.max_grad_norm / (grad_norm + 1e-6), max=1.0))
        self.optimizer.step()
        return {**metrics, "loss": loss.detach(), "grad_norm": grad_norm}

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
