"""The recurrent torsos (robopt.policies.cells): cells against torch's, sequences against steps, resets."""

from __future__ import annotations

import pytest
import torch

from robopt.policies.cells import RecurrentConfig, RecurrentTorso, sequences


def _torch_cell(torso: RecurrentTorso):
    """torch.nn.GRUCell / LSTMCell holding the same weights as layer 0 of ``torso`` (a peer oracle)."""
    cell = (torch.nn.GRUCell if torso.cell == "gru" else torch.nn.LSTMCell)(torso.weight_ih[0].shape[1], torso.hidden)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(torso, name)[0])
    return cell


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_one_step_matches_torch_cell(kind):
    torch.manual_seed(0)
    torso = RecurrentTorso(5, 8, layers=1, cell=kind)
    cell, x = _torch_cell(torso), torch.randn(3, 5)
    state = torch.randn(3, torso.state_dim)
    out, next_state = torso.step(x, state)
    if kind == "gru":
        expected = cell(x, state)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)  # same operations, other kernels: rounding
        torch.testing.assert_close(next_state, expected, rtol=0, atol=1e-6)
    else:
        h, c = cell(x, (state[:, :8], state[:, 8:]))
        torch.testing.assert_close(out, h, rtol=0, atol=1e-6)
        torch.testing.assert_close(next_state, torch.cat((h, c), dim=-1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind,layers", [("gru", 1), ("gru", 2), ("lstm", 2)])
def test_sequence_equals_steps_with_resets(kind, layers):
    """The sequence pass (one input projection, the recurrence looped) equals stepping one step at a time, with the
    state zeroed where an episode starts, within 1e-5 (matrix products of other shapes round differently)."""
    torch.manual_seed(1)
    torso = RecurrentTorso(4, 6, layers=layers, cell=kind)
    x, state = torch.randn(5, 7, 4), torch.randn(5, torso.state_dim)
    start = torch.zeros(5, 7, dtype=torch.bool)
    start[0, 3] = start[2, 0] = start[4, 6] = True
    out, after = torso.sequence(x, state, start)
    assert out.shape == (5, 7, 6) and after.shape == (5, 7, torso.state_dim)
    h = state
    for t in range(7):
        h = torch.where(start[:, t : t + 1], torch.zeros_like(h), h)
        step_out, h = torso.step(x[:, t], h)
        torch.testing.assert_close(out[:, t], step_out, rtol=0, atol=1e-5)
        torch.testing.assert_close(after[:, t], h, rtol=0, atol=1e-5)


def test_reset_forgets_the_past():
    """After a reset the output depends on nothing before it: two different pasts, the same outputs."""
    torch.manual_seed(2)
    torso = RecurrentTorso(3, 5)
    x = torch.randn(2, 6, 3)
    x[1, :3] = torch.randn(3, 3)  # row 1 differs from row 0 only before the reset at t = 3
    x[1, 3:] = x[0, 3:]
    start = torch.zeros(2, 6, dtype=torch.bool)
    start[:, 3] = True
    out, _ = torso.sequence(x, torch.randn(2, torso.state_dim), start)
    assert (out[0, :3] - out[1, :3]).abs().max() > 1e-2
    # The same numbers after the reset, but rows of one batched matmul may take different kernel paths (AVX2 tails),
    # so their last bits may differ (DESIGN.md section 8): a float tolerance, far below the pre-reset difference.
    torch.testing.assert_close(out[0, 3:], out[1, 3:], rtol=0, atol=1e-6)


def test_state_width_and_sequences_helper():
    assert RecurrentTorso(3, 16, layers=2, cell="gru").state_dim == 32
    assert RecurrentTorso(3, 16, layers=2, cell="lstm").state_dim == 64  # h and c per layer
    assert sequences(torch.arange(6), 3, "x").tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="not whole sequences of 4 steps"):
        sequences(torch.arange(6), 4, "x")
    with pytest.raises(ValueError, match="must be >= 1"):
        RecurrentConfig(type="gru", sequence_length=0)


def _grads(torso: RecurrentTorso, x, state, start):
    """Outputs, after-states and the gradients of a loss of both w.r.t. the input, the state and every weight."""
    out, after = torso.sequence(x, state, start)
    loss = (out * out).sum() + after.pow(3).sum()  # every output and state feeds the loss, nonlinearly
    return [out, after, *torch.autograd.grad(loss, [x, state, *torso.parameters()])]


@pytest.mark.parametrize("kind,layers", [("gru", 1), ("gru", 2), ("lstm", 1), ("lstm", 2)])
def test_fused_backward_equals_autograd_of_the_written_out_cells(kind, layers):
    """The fused pass's hand-written back-propagation through time gives autograd's gradients of the written-out
    cells, resets inside the sequences included: float64, within 1e-10 (the sums run in other orders)."""
    torch.manual_seed(3)
    torso = RecurrentTorso(4, 6, layers=layers, cell=kind).double()
    x = torch.randn(5, 7, 4, dtype=torch.float64, requires_grad=True)
    state = torch.randn(5, torso.state_dim, dtype=torch.float64, requires_grad=True)
    start = torch.zeros(5, 7, dtype=torch.bool)
    start[0, 3] = start[2, 0] = start[4, 6] = start[1, 1] = True
    fused = _grads(torso, x, state, start)
    torso.fused = False
    written = _grads(torso, x, state, start)
    for a, b in zip(fused, written, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_fused_sequence_matches_torch_recurrent_layer(kind):
    """Against torch.nn.GRU / LSTM (a peer oracle) holding the same weights, two layers, no resets: outputs and
    weight gradients within 1e-10 in float64."""
    torch.manual_seed(4)
    torso = RecurrentTorso(3, 5, layers=2, cell=kind).double()
    peer = (torch.nn.GRU if kind == "gru" else torch.nn.LSTM)(3, 5, num_layers=2, batch_first=True).double()
    with torch.no_grad():
        for layer in range(2):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(peer, f"{name}_l{layer}").copy_(getattr(torso, name)[layer])
    x, state = torch.randn(4, 6, 3, dtype=torch.float64), torch.randn(4, torso.state_dim, dtype=torch.float64)
    out, _ = torso.sequence(x, state, torch.zeros(4, 6, dtype=torch.bool))
    if kind == "gru":
        expected, _ = peer(x, state.reshape(4, 2, 5).transpose(0, 1).contiguous())
    else:
        layers = state.reshape(4, 2, 2, 5)  # per layer h then c
        expected, _ = peer(
            x, (layers[:, :, 0].transpose(0, 1).contiguous(), layers[:, :, 1].transpose(0, 1).contiguous())
        )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(torso.weight_hh[0].grad, peer.weight_hh_l0.grad, rtol=0, atol=1e-10)
    torch.testing.assert_close(torso.weight_ih[1].grad, peer.weight_ih_l1.grad, rtol=0, atol=1e-10)


def test_write_out_gives_twice_differentiable_sequences():
    """The fused backward is differentiable once (its gradients carry no graph, so a second derivative through it
    fails); after
    ``write_out`` the written-out cells give second derivatives (what TRPO's Fisher-vector products need)."""
    from robopt.policies.cells import write_out

    torch.manual_seed(5)
    torso = RecurrentTorso(3, 4)
    x, state, start = torch.randn(2, 5, 3), torch.zeros(2, torso.state_dim), torch.zeros(2, 5, dtype=torch.bool)

    def second_derivative():
        (grad,) = torch.autograd.grad(torso.sequence(x, state, start)[0].pow(2).sum(), torso.weight_hh[0],
                                      create_graph=True)  # fmt: skip
        return torch.autograd.grad(grad.pow(2).sum(), torso.weight_ih[0])[0]

    with pytest.raises(RuntimeError, match="once_differentiable|not have been used"):
        second_derivative()
    write_out(torch.nn.Sequential(torso))
    assert not torso.fused and second_derivative().abs().sum() > 0
