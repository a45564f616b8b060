from __future__ import annotations

import torch
from torch import nn

from robopt.core.updaters import FirstOrderUpdater


def _nets():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), nn.Linear(3, 1)


def test_flat_updater_matches_per_tensor_adam_with_clipping():
    (a, b), (ref_a, ref_b) = _nets(), _nets()
    updater = FirstOrderUpdater(list(a.parameters()) + list(b.parameters()), lr=1e-2, max_grad_norm=0.5)
    ref_params = list(ref_a.parameters()) + list(ref_b.parameters())
    reference = torch.optim.Adam(ref_params, lr=1e-2, eps=1e-5)
    x = torch.randn(16, 3)
    for _ in range(5):
        metrics = updater.step(lambda: ((a(x).square().sum() + 3 * b(x).sum()), {}))
        reference.zero_grad()
        (ref_a(x).square().sum() + 3 * ref_b(x).sum()).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref_params, 0.5)
        reference.step()
        torch.testing.assert_close(metrics["grad_norm"], ref_norm)
    for p, q in zip(list(a.parameters()) + list(b.parameters()), ref_params):
        torch.testing.assert_close(p, q)


def test_parameters_stay_views_through_load_state_dict():
    a, _ = _nets()
    updater = FirstOrderUpdater(a.parameters(), lr=1e-2)
    a.load_state_dict({k: torch.ones_like(v) for k, v in a.state_dict().items()})
    assert torch.equal(updater.flat.detach(), torch.ones_like(updater.flat))
    updater.step(lambda: (a(torch.ones(2, 3)).sum(), {}))
    assert not torch.equal(updater.flat.detach(), torch.ones_like(updater.flat))
    assert torch.equal(torch.cat([p.detach().reshape(-1) for p in a.parameters()]), updater.flat.detach())


def test_written_out_adam_matches_the_fused_kernel():
    # Devices without torch's fused Adam use the seven-operation form; both must take the same steps.
    (a, b), (ref_a, ref_b) = _nets(), _nets()
    fused = FirstOrderUpdater(list(a.parameters()) + list(b.parameters()), lr=1e-2, max_grad_norm=0.5)
    written = FirstOrderUpdater(list(ref_a.parameters()) + list(ref_b.parameters()), lr=1e-2, max_grad_norm=0.5)
    assert fused.fused
    written.fused = False
    x = torch.randn(16, 3)
    for _ in range(5):
        fused.step(lambda: ((a(x).square().sum() + 3 * b(x).sum()), {}))
        written.step(lambda: ((ref_a(x).square().sum() + 3 * ref_b(x).sum()), {}))
    torch.testing.assert_close(fused.flat, written.flat)
    torch.testing.assert_close(fused.exp_avg_sq, written.exp_avg_sq)
