"""First-order updater shared by robot and language policies (Adam + global gradient-norm clipping).

The parameters it owns are re-homed into one flat buffer (and their gradients into another), so the
optimizer step, the gradient-norm clip and zeroing are each a few tensor operations instead of a loop
over layers. Adam (Kingma & Ba 2015, Algorithm 1, with torch.optim.Adam's placement of eps) runs as one
call of torch's fused Adam kernel on that buffer (the kernel behind ``torch.optim.Adam(fused=True)``,
without ``Adam.step``'s Python bookkeeping, which alone costs about as much as a 64x64 MLP's forward and
backward pass); on devices without that kernel it is written out in seven tensor operations. On CPU the
fused call is 8 us against 37 us for the written-out form on a 64x64 actor-critic's 11k parameters; the
two agree to within a rounding of the last step (the kernel forms ``p - step_size * m / denom``).

Python numbers in tensor arithmetic are wrapped into a fresh tensor per call (about 2 us each on CPU), so
the constants of the clip live in 0-d tensors made once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

FUSED_ADAM_DEVICES = ("cpu", "cuda")
"""Device types whose fused Adam kernel the updater calls; others use the written-out form."""


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
        self.lr, self.betas, self.eps = lr, (0.9, 0.999), eps
        self.exp_avg = torch.zeros_like(self.flat.detach())  # [P] first moment
        self.exp_avg_sq = torch.zeros_like(self.flat.detach())  # [P] second moment
        self.step_count = 0
        self.max_grad_norm = max_grad_norm
        # a data-parallel run's robopt.distributed.Collective: the gradient is averaged over ranks before the clip
        self.collective = None
        device = first.device
        self.fused = device.type in FUSED_ADAM_DEVICES and hasattr(torch, "_fused_adam_")
        self._fused_step = torch.zeros((), device=device)  # the kernel reads t from a tensor (float32, like Adam's)
        if max_grad_norm is not None:
            self._max_norm = torch.tensor(float(max_grad_norm), dtype=first.dtype, device=device)
            self._clip_eps = torch.tensor(1e-6, dtype=first.dtype, device=device)

    def set_lr(self, lr: float) -> None:
        self.lr = lr

    @torch.no_grad()
    def _adam(self, grad: torch.Tensor) -> None:
        # m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
        beta1, beta2 = self.betas
        self.step_count += 1
        if self.fused:
            self._fused_step.fill_(self.step_count)
            torch._fused_adam_(
                [self.flat.data],
                [grad],
                [self.exp_avg],
                [self.exp_avg_sq],
                [],
                [self._fused_step],
                lr=self.lr,
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )
            return
        self.exp_avg.lerp_(grad, 1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bias_correction2_sqrt = math.sqrt(1.0 - beta2**self.step_count)
        denom = (self.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        self.flat.data.addcdiv_(self.exp_avg, denom, value=-self.lr / (1.0 - beta1**self.step_count))

    def clip_and_step(self) -> torch.Tensor:
        """Clip the accumulated gradient [P] (averaged over ranks in a data-parallel run) to ``max_grad_norm`` and
        take the Adam step; returns the norm before."""
        grad = self.flat.grad
        if self.collective is not None:  # one all_reduce of the flat buffer: every rank takes the same step
            self.collective.average_(grad)
        grad_norm = torch.linalg.vector_norm(grad)
        if self.max_grad_norm is not None:
            # torch.nn.utils.clip_grad_norm_ semantics: scale by max_norm / (norm + 1e-6) when that is < 1
            grad.mul_(torch.div(self._max_norm, grad_norm + self._clip_eps).clamp_(max=1.0))
        self._adam(grad)
        return grad_norm

    def step(self, loss_fn: Callable[[], tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
        """Evaluate ``loss_fn() -> (loss, metrics)``, backprop, clip, step; returns metrics with grad_norm."""
        loss, metrics = loss_fn()
        self.flat.grad.zero_()
        loss.backward()
        grad_norm = self.clip_and_step()
        return {**metrics, "loss": loss.detach(), "grad_norm": grad_norm}

    def state_dict(self) -> dict:
        return {
            "step": self.step_count,
            "exp_avg": self.exp_avg.clone(),
            "exp_avg_sq": self.exp_avg_sq.clone(),
            "lr": self.lr,
        }

    def load_state_dict(self, state: dict) -> None:
        self.step_count, self.lr = int(state["step"]), float(state["lr"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
