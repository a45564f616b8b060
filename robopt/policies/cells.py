"""The recurrent cells: stacked GRU and LSTM layers over one step or a sequence with episode-start resets
(``RecurrentTorso``), and ``policy.recurrent``'s config, which picks them.

Shapes: N rows, S sequences, L steps per sequence, H hidden size, G gates (GRU 3, LSTM 4), M the flat state width
(GRU: layers * H; LSTM: 2 * layers * H, each layer's h then c).

The cells are written out (Cho et al. 2014 for the GRU, Hochreiter & Schmidhuber 1997 with a forget gate for the
LSTM, in PyTorch's gate order and parameter layout, checked against ``torch.nn.GRUCell``/``LSTMCell``): their
step-by-step gradients are plain autograd, the input projection of a whole sequence is one matrix product, and ONNX
and TorchScript export them as ordinary operators. Over a sequence (PPO's minibatches, the critic's rollout pass)
the torso runs ``robopt.policies.fused_cells``: the same forward operators with a hand-written backward pass, about
a third of autograd's operators per step. That backward is differentiable once, so a torso that must be
differentiated twice (TRPO's Fisher-vector products) is switched to the written-out cells by ``write_out``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from robopt.options import option
from robopt.policies.fused_cells import GRUSequence, LSTMSequence

CELLS = ("none", "gru", "lstm")
GATES = {"gru": 3, "lstm": 4}


@dataclass(frozen=True)
class RecurrentConfig:
    """``policy.recurrent``: a memory torso in front of the Gaussian policy's and the value critic's MLPs."""

    type: str = option("none", "memory cell of the actor and the critic (none: a memoryless MLP policy)", CELLS)
    hidden: int = option(128, "hidden state size H of each recurrent layer")
    layers: int = option(1, "stacked recurrent layers")
    sequence_length: int = option(
        16,
        "truncated back-propagation through time: minibatches are sequences of L consecutive steps of one env "
        "(rollout.num_steps and algo.minibatch_size must be multiples of L)",
    )

    def __post_init__(self) -> None:
        if self.hidden < 1 or self.layers < 1 or self.sequence_length < 1:
            raise ValueError(
                f"recurrent.hidden, layers and sequence_length must be >= 1, got {self.hidden}, {self.layers}, "
                f"{self.sequence_length}"
            )

    @property
    def enabled(self) -> bool:
        return self.type != "none"


class RecurrentTorso(nn.Module):
    """Stacked GRU or LSTM layers: [.., in_dim] -> [.., H], the state flat as [.., M]."""

    def __init__(self, in_dim: int, hidden: int, layers: int = 1, cell: str = "gru") -> None:
        super().__init__()
        if cell not in GATES:
            raise ValueError(f"unknown recurrent cell {cell!r}; allowed: {', '.join(GATES)}")
        self.cell, self.hidden, self.layers = cell, hidden, layers
        self.fused = True  # sequences through fused_cells (differentiable once); write_out turns it off
        gates = GATES[cell] * hidden
        bound = 1.0 / math.sqrt(hidden)  # PyTorch's initialization of its recurrent layers
        widths = [in_dim] + [hidden] * (layers - 1)

        def uniform(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))

        self.weight_ih = nn.ParameterList(uniform(gates, width) for width in widths)  # each [G H, in]
        self.weight_hh = nn.ParameterList(uniform(gates, hidden) for _ in widths)  # each [G H, H]
        self.bias_ih = nn.ParameterList(uniform(gates) for _ in widths)
        self.bias_hh = nn.ParameterList(uniform(gates) for _ in widths)

    @property
    def state_dim(self) -> int:
        """M: the flat state width."""
        return self.layers * self.hidden * (2 if self.cell == "lstm" else 1)

    def initial_state(self, n: int) -> torch.Tensor:
        """Zeros [n, M] on the parameters' device."""
        return torch.zeros(n, self.state_dim, device=self.weight_hh[0].device)

    def _split(self, state: torch.Tensor) -> list[torch.Tensor]:
        """The flat state [.., M] as one [.., H] (GRU) or [.., 2H] (LSTM: h, c) block per layer."""
        return list(state.split(self.state_dim // self.layers, dim=-1))

    def _cell(
        self, weight: torch.Tensor, bias: torch.Tensor, projected: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of a layer with recurrent ``weight`` [G H, H] and ``bias`` [G H]: input projection [.., G H] and its
        state -> (output h, new state). Gates are sliced as views (cheaper per step than ``split``'s Python wrapper)."""
        hidden = self.hidden
        recurrent = torch.nn.functional.linear(state[..., :hidden], weight, bias)
        if self.cell == "gru":  # r, z gates; n = tanh(i_n + r h_n); h' = (1 - z) n + z h = lerp(n, h, z)
            gates = torch.sigmoid(projected[..., : 2 * hidden] + recurrent[..., : 2 * hidden])
            candidate = torch.tanh(
                torch.addcmul(projected[..., 2 * hidden :], gates[..., :hidden], recurrent[..., 2 * hidden :])
            )
            h = torch.lerp(candidate, state, gates[..., hidden:])
            return h, h
        # i, f, g, o gates; c' = f c + i g, h' = o tanh(c'); one sigmoid over all four (g's share is unused)
        gates = projected + recurrent
        gate = torch.sigmoid(gates)
        c = torch.addcmul(
            gate[..., hidden : 2 * hidden] * state[..., hidden:],
            gate[..., :hidden],
            torch.tanh(gates[..., 2 * hidden : 3 * hidden]),
        )
        h = gate[..., 3 * hidden :] * torch.tanh(c)
        return h, torch.cat((h, c), dim=-1)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One time step: x [N, in], state [N, M] -> output [N, H], next state [N, M]."""
        states, new_states = self._split(state), []
        for layer in range(self.layers):
            projected = torch.nn.functional.linear(x, self.weight_ih[layer], self.bias_ih[layer])
            x, layer_state = self._cell(self.weight_hh[layer], self.bias_hh[layer], projected, states[layer])
            new_states.append(layer_state)
        return x, new_states[0] if self.layers == 1 else torch.cat(new_states, dim=-1)

    def sequence(
        self, x: torch.Tensor, state: torch.Tensor, episode_start: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [S, L, in] from ``state`` [S, M], zeroing a row's state where ``episode_start`` [S, L] is set.

        Returns the outputs [S, L, H] and the state after each step [S, L, M] (before the next step's reset). Each
        layer's input projection of the whole sequence is one matrix product; the recurrence loops over L.
        """
        resets = episode_start.any(0).tolist()  # [L]: steps where some row starts (one host read per call)
        if self.fused:
            return self._fused_sequence(x, state, episode_start, resets)
        keep = (~episode_start).to(x.dtype).unsqueeze(-1).unbind(1)  # L of [S, 1]
        states, after = self._split(state), []
        for layer in range(self.layers):
            weight, bias = self.weight_hh[layer], self.bias_hh[layer]  # fetched once, not once per step
            projected = torch.nn.functional.linear(x, self.weight_ih[layer], self.bias_ih[layer])  # [S, L, G H]
            layer_state, outputs, layer_after = states[layer], [], []
            for t, projected_t in enumerate(projected.unbind(1)):
                if resets[t]:
                    layer_state = layer_state * keep[t]
                h, layer_state = self._cell(weight, bias, projected_t, layer_state)
                outputs.append(h)
                layer_after.append(layer_state)
            x = torch.stack(outputs, dim=1)  # [S, L, H]: the next layer's input
            after.append(torch.stack(layer_after, dim=1))
        return x, after[0] if self.layers == 1 else torch.cat(after, dim=-1)

    def _fused_sequence(self, x, state, episode_start, resets):
        """``sequence`` through ``fused_cells``: time-major inside, one autograd node per layer's recurrence."""
        keep = (~episode_start).to(x.dtype).t().unsqueeze(-1).contiguous() if any(resets) else None  # [L, S, 1]
        x = x.transpose(0, 1)  # [L, S, in]
        states, after = self._split(state), []
        for layer in range(self.layers):
            projected = torch.nn.functional.linear(x, self.weight_ih[layer], self.bias_ih[layer])  # [L, S, G H]
            weight, bias = self.weight_hh[layer], self.bias_hh[layer]
            if self.cell == "gru":
                x = GRUSequence.apply(projected, states[layer], keep, weight, bias, resets)
                after.append(x)
            else:
                h, c = states[layer].split(self.hidden, dim=-1)
                x, c = LSTMSequence.apply(projected, h, c, keep, weight, bias, resets)
                after.append(torch.cat((x, c), dim=-1))
        after = after[0] if self.layers == 1 else torch.cat(after, dim=-1)
        return x.transpose(0, 1), after.transpose(0, 1)

    def over_rows(self, x: torch.Tensor, state: torch.Tensor, episode_start: torch.Tensor, length: int, what: str):
        """The outputs [B, H] of rows that are whole sequences of ``length`` steps in time order: x [B, in], the state
        of each row [B, M] (each sequence starts from its first row's) and ``episode_start`` [B]."""
        first_state = sequences(state, length, what)[:, 0]  # [S, M]
        out, _ = self.sequence(sequences(x, length, what), first_state, sequences(episode_start, length, what))
        return out.reshape(x.shape[0], -1)


def sequences(tensor: torch.Tensor, length: int, what: str) -> torch.Tensor:
    """Rows [B, ...] as [S, L, ...]; a ValueError when B is not a whole number of sequences."""
    if tensor.shape[0] % length != 0:
        raise ValueError(f"{what}: {tensor.shape[0]} rows are not whole sequences of {length} steps")
    return tensor.reshape(tensor.shape[0] // length, length, *tensor.shape[1:])


def write_out(module: nn.Module) -> None:
    """Every recurrent torso in ``module`` runs its sequences through the written-out cells, whose autograd graph can
    be differentiated twice (TRPO's Fisher-vector products), instead of the fused, once-differentiable pass."""
    for torso in module.modules():
        if isinstance(torso, RecurrentTorso):
            torso.fused = False
