"""A first-order minibatch step (loss, gradient, gradient-norm clip, Adam) compiled into one graph.

Eager PyTorch spends most of a small network's CPU gradient step on per-operation overhead (Python
dispatch, autograd nodes, the backward engine), not arithmetic: for PPO's 64x64 actor-critic on 64
samples, about two thirds of a 1 ms step. Here the gradient of the loss with respect to views of the
updater's flat parameter buffer is taken with ``torch.func.grad_and_value`` (no autograd graph at run
time), the clip and Adam (Kingma & Ba 2015, Algorithm 1, torch.optim.Adam's placement of eps) follow in
the same function, and ``torch.compile`` turns the whole of it into one graph: one call per minibatch
(0.45 ms against 1.0 ms eager for that PPO step; about 50 us of it is Dynamo checking its guards).

It shares its state with a ``FirstOrderUpdater`` (flat parameters, moments, step count, learning rate),
so a run can switch between the eager and compiled steps, and checkpoints are the same. The first call
compiles (10-20 s on a small CPU; inductor caches the result on disk, and a later run with the same
shapes loads it in about 3 s), and each new minibatch shape compiles once more.
"""

from __future__ import annotations

import shutil
import types

import torch
from torch import nn

from robopt.core.updaters import FirstOrderUpdater


def compile_unavailable_reason(device: torch.device | str) -> str | None:
    """Why ``torch.compile`` cannot build the step on ``device`` here, or None when it can."""
    device_type = torch.device(device).type
    if device_type == "cpu":
        compiler = next((name for name in ("c++", "g++", "clang++") if shutil.which(name)), None)
        return None if compiler else "torch.compile on CPU needs a C++ compiler (c++, g++ or clang++) on PATH"
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "torch.compile on CUDA needs triton (pip install triton)"
    return f"torch.compile of the step is supported on cpu and cuda, not {device_type}"


class CompiledFirstOrderStep:
    """``step(*inputs) -> metrics``: one Adam step on ``objective(*inputs)``'s loss, as one compiled graph.

    Args:
        updater: the FirstOrderUpdater whose flat buffer holds ``objective``'s trainable parameters.
        objective: a module whose ``forward(*inputs)`` is a pure loss ``-> (loss, metrics)``; each of its trainable
            parameters must be one of the updater's (``torch.func.functional_call`` substitutes views of the flat
            buffer for them). Python state it reads (configs, flags) is compiled in as constants.
    """

    def __init__(self, updater: FirstOrderUpdater, objective: nn.Module) -> None:
        self.updater, self.objective = updater, objective
        offsets, offset = {}, 0
        for parameter in updater.params:
            offsets[id(parameter)] = (offset, parameter.numel(), parameter.shape)
            offset += parameter.numel()
        self.layout = []  # (name, offset, numel, shape) of each parameter of ``objective`` in the flat buffer [P]
        for name, parameter in objective.named_parameters():
            if id(parameter) not in offsets:
                if parameter.requires_grad:
                    raise ValueError(f"CompiledFirstOrderStep: parameter {name!r} is not in the updater's buffer")
                continue
            self.layout.append((name, *offsets.pop(id(parameter))))
        self.layout.sort(key=lambda entry: entry[1])  # flat-buffer order: the gradient is concatenated in it
        if offsets:
            raise ValueError(f"CompiledFirstOrderStep: {len(offsets)} updater parameters are not in the objective")
        device = updater.flat.device
        # t and lr as [1] float64 tensors: values, not constants, of the graph (a 0-d CPU tensor would be read
        # back as a Python number, guarded on every call); float64 like the eager step's Python arithmetic.
        self._step_tensor = torch.zeros(1, dtype=torch.float64, device=device)
        self._lr_tensor = torch.zeros(1, dtype=torch.float64, device=device)
        options = {"cpp_wrapper": True} if device.type == "cpu" else None  # C++ launcher: ~60 us less per call
        # Dynamo keeps its compiled graphs (and a limit of 8) per code object: a copy of ``_step``'s code per
        # instance keeps each step's graphs apart from those of other steps (other configs) in the process.
        step = types.FunctionType(CompiledFirstOrderStep._step.__code__.replace(), globals(), "_step")
        self._compiled = torch.compile(types.MethodType(step, self), dynamic=False, fullgraph=True, options=options)

    def _loss_of(self, parameters: tuple, inputs: tuple) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        named = {name: parameter for (name, *_), parameter in zip(self.layout, parameters)}
        return torch.func.functional_call(self.objective, named, inputs, strict=False, tie_weights=False)

    def _step(
        self,
        flat: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        step: torch.Tensor,
        lr: torch.Tensor,
        inputs: tuple,
    ) -> dict[str, torch.Tensor]:
        # Differentiate w.r.t. per-parameter views and concatenate: the gradient of slices of one flat tensor
        # would compile to a kernel testing every element against every slice.
        parameters = tuple(flat[offset : offset + numel].view(shape) for _, offset, numel, shape in self.layout)
        grads, (loss, metrics) = torch.func.grad_and_value(self._loss_of, has_aux=True)(parameters, inputs)
        grad = torch.cat([g.reshape(-1) for g in grads])  # [P], in the updater's order
        grad_norm = torch.linalg.vector_norm(grad)
        max_norm = self.updater.max_grad_norm
        if max_norm is not None:  # torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when < 1
            grad = grad * torch.clamp(max_norm / (grad_norm + 1e-6), max=1.0)
        beta1, beta2 = self.updater.betas
        # m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
        exp_avg.lerp_(grad, 1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bias_correction2_sqrt = torch.sqrt(1.0 - beta2**step).to(flat.dtype)  # float64 like Python's, then cast
        step_size = (lr / (1.0 - beta1**step)).to(flat.dtype)
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.updater.eps)
        flat.sub_(step_size * exp_avg / denom)
        return {**metrics, "loss": loss.detach(), "grad_norm": grad_norm}

    def __call__(self, *inputs) -> dict[str, torch.Tensor]:
        """One minibatch step on ``inputs`` (what ``objective.forward`` takes); returns its metrics."""
        updater = self.updater
        updater.step_count += 1
        self._step_tensor.fill_(updater.step_count)
        self._lr_tensor.fill_(updater.lr)
        flat = updater.flat.detach()  # the same storage as the module parameters, updated in place
        return self._compiled(flat, updater.exp_avg, updater.exp_avg_sq, self._step_tensor, self._lr_tensor, inputs)
