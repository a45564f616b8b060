"""One recurrent layer over a whole sequence with a hand-written backward pass (back-propagation through time).

Shapes: L steps, S sequences, H hidden size, G gates (GRU 3, LSTM 4).

``RecurrentTorso.sequence`` runs these for PPO's minibatches and the critic's rollout pass. The forward pass is the
written-out cell of ``robopt.policies.cells`` (the same operators in the same order, so its outputs are those of
the step-by-step path up to float rounding). The backward pass is where the time went: autograd records about 25
nodes per step (the gate slices alone materialize a zero-filled gradient each), while this one takes about 8
tensor operations per step, and the recurrent weight's gradient is one matrix product over all L steps instead of
L. It is differentiable once: TRPO's Fisher-vector products differentiate the KL twice, so TRPO runs the written-out
cells (``cells.write_out``).

The input projection of the whole sequence stays outside (one ``linear`` that autograd differentiates); these take
it as ``projected`` [L, S, G H], time-major, with the initial state and ``keep`` [L, S, 1] (0 where a row's episode
starts at that step, so its state is zeroed before the step; None when no row starts inside the sequence).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def _previous(initial: torch.Tensor, after: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """The state each step started from [L, S, W] (after its reset): the initial state, then each step's result."""
    previous = torch.cat((initial.unsqueeze(0), after[:-1]))
    return previous if keep is None else previous * keep


class GRUSequence(torch.autograd.Function):
    """h_t = GRU(projected_t, keep_t h_{t-1}) for t = 1..L in PyTorch's gate order (r, z, n): outputs [L, S, H]."""

    @staticmethod
    def forward(ctx, projected, initial, keep, weight, bias, resets):
        hidden = initial.shape[-1]
        steps = projected.shape[0]
        out = projected.new_empty(steps, *initial.shape)
        rz = projected.new_empty(steps, initial.shape[0], 2 * hidden)  # sigmoid gates r, z
        candidate = projected.new_empty(steps, *initial.shape)  # n
        recurrent = projected.new_empty(steps, initial.shape[0], 3 * hidden)  # W_hh h + b_hh
        weight_t, h = weight.t(), initial
        for t in range(steps):
            if resets[t]:
                h = h * keep[t]
            torch.addmm(bias, h, weight_t, out=recurrent[t])
            torch.sigmoid(projected[t, :, : 2 * hidden] + recurrent[t, :, : 2 * hidden], out=rz[t])
            torch.tanh(
                torch.addcmul(projected[t, :, 2 * hidden :], rz[t, :, :hidden], recurrent[t, :, 2 * hidden :]),
                out=candidate[t],
            )
            torch.lerp(candidate[t], h, rz[t, :, hidden:], out=out[t])
            h = out[t]
        ctx.save_for_backward(initial, keep, weight, out, rz, candidate, recurrent)
        ctx.hidden = hidden
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        initial, keep, weight, out, rz, candidate, recurrent = ctx.saved_tensors
        hidden = ctx.hidden
        previous = _previous(initial, out, keep)  # [L, S, H]
        r, z = rz[..., :hidden], rz[..., hidden:]
        # the factors of each gate's pre-activation gradient that do not depend on the incoming gradient, in bulk
        n_factor = (1 - z) * (1 - candidate * candidate)  # d a_n / d h
        z_factor = (previous - candidate) * z * (1 - z)  # d a_z / d h
        r_factor = recurrent[..., 2 * hidden :] * r * (1 - r)  # d a_r / d a_n
        grad_candidate = torch.empty_like(candidate)  # [L, S, H]: d a_n
        grad_recurrent = torch.empty_like(recurrent)  # [L, S, 3H]: d a_r, d a_z, r d a_n (written whole, contiguous)
        grad_h = torch.zeros_like(initial)
        for t in range(out.shape[0] - 1, -1, -1):
            grad_h = grad_h + grad_out[t]
            a_n = torch.mul(grad_h, n_factor[t], out=grad_candidate[t])
            torch.cat((a_n * r_factor[t], grad_h * z_factor[t], a_n * r[t]), dim=-1, out=grad_recurrent[t])
            grad_h = torch.addmm(grad_h * z[t], grad_recurrent[t], weight)
            if keep is not None:
                grad_h = grad_h * keep[t]
        grad_projected = torch.cat((grad_recurrent[..., : 2 * hidden], grad_candidate), dim=-1)
        flat = grad_recurrent.reshape(-1, grad_recurrent.shape[-1])
        grad_weight = flat.t() @ previous.reshape(-1, hidden)
        return grad_projected, grad_h, None, grad_weight, flat.sum(0), None


class LSTMSequence(torch.autograd.Function):
    """(h_t, c_t) = LSTM(projected_t, keep_t (h_{t-1}, c_{t-1})) in PyTorch's gate order (i, f, g, o): outputs
    h [L, S, H] and c [L, S, H]."""

    @staticmethod
    def forward(ctx, projected, initial_h, initial_c, keep, weight, bias, resets):
        hidden = initial_h.shape[-1]
        steps = projected.shape[0]
        out_h = projected.new_empty(steps, *initial_h.shape)
        out_c = projected.new_empty(steps, *initial_h.shape)
        gate = torch.empty_like(projected)  # sigmoid(i, f, .., o) with tanh(g) in g's place
        weight_t, h, c = weight.t(), initial_h, initial_c
        for t in range(steps):
            if resets[t]:
                h, c = h * keep[t], c * keep[t]
            gates = torch.addmm(bias, h, weight_t).add_(projected[t])
            torch.sigmoid(gates, out=gate[t])
            torch.tanh(gates[:, 2 * hidden : 3 * hidden], out=gate[t, :, 2 * hidden : 3 * hidden])
            torch.addcmul(gate[t, :, hidden : 2 * hidden] * c, gate[t, :, :hidden], gate[t, :, 2 * hidden : 3 * hidden],
                          out=out_c[t])  # fmt: skip
            torch.mul(gate[t, :, 3 * hidden :], torch.tanh(out_c[t]), out=out_h[t])
            h, c = out_h[t], out_c[t]
        ctx.save_for_backward(initial_h, initial_c, keep, weight, out_h, out_c, gate)
        ctx.hidden = hidden
        return out_h, out_c

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_out, grad_c_out):
        initial_h, initial_c, keep, weight, out_h, out_c, gate = ctx.saved_tensors
        hidden = ctx.hidden
        previous_h = _previous(initial_h, out_h, keep)
        previous_c = _previous(initial_c, out_c, keep)
        i, f = gate[..., :hidden], gate[..., hidden : 2 * hidden]
        g, o = gate[..., 2 * hidden : 3 * hidden], gate[..., 3 * hidden :]
        tanh_c = torch.tanh(out_c)
        o_factor = tanh_c * o * (1 - o)  # d a_o / d h
        c_factor = o * (1 - tanh_c * tanh_c)  # d c / d h
        i_factor, f_factor = g * i * (1 - i), previous_c * f * (1 - f)  # d a_i, d a_f / d c
        g_factor = i * (1 - g * g)  # d a_g / d c
        grad_gates = torch.empty_like(gate)  # [L, S, 4H]: d a_i, d a_f, d a_g, d a_o
        grad_h, grad_c = torch.zeros_like(initial_h), torch.zeros_like(initial_c)
        for t in range(out_h.shape[0] - 1, -1, -1):
            grad_h = grad_h + grad_h_out[t]
            grad_c = torch.addcmul(grad_c + grad_c_out[t], grad_h, c_factor[t])
            torch.cat((grad_c * i_factor[t], grad_c * f_factor[t], grad_c * g_factor[t], grad_h * o_factor[t]), dim=-1,
                      out=grad_gates[t])  # fmt: skip
            grad_h = grad_gates[t] @ weight
            grad_c = grad_c * f[t]
            if keep is not None:
                grad_h, grad_c = grad_h * keep[t], grad_c * keep[t]
        flat = grad_gates.reshape(-1, grad_gates.shape[-1])
        grad_weight = flat.t() @ previous_h.reshape(-1, hidden)
        return grad_gates, grad_h, grad_c, None, grad_weight, flat.sum(0), None
