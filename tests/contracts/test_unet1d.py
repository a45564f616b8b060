"""Temporal U-Net noise predictor: shapes, row independence, conditioning, output scale, fitting, export parity, errors.

Shapes: B batch, K inner axis, H action horizon, A action dim, C cond dim.
"""

from __future__ import annotations

import re

import pytest
import torch

from robopt.policies.unet1d import TemporalUNet1D

A, H, C, B, K = 3, 8, 6, 4, 2
CHANNELS = (16, 32)


def make_net(seed: int = 0, **overrides) -> TemporalUNet1D:
    """A small U-Net; ``output_scale`` 1 so the output clearly depends on the inputs."""
    torch.manual_seed(seed)
    fields = {"channels": CHANNELS, "kernel_size": 3, "groups": 4, "output_scale": 1.0, **overrides}
    return TemporalUNet1D(A, H, C, **fields)


@pytest.mark.parametrize("leading", [(), (B,), (B, K), (2, 3, 2)])
def test_output_shape_for_leading_dims(leading):
    net = make_net()
    out = net(torch.randn(*leading, H, A), torch.randn(*leading, C))
    assert out.shape == (*leading, H, A) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("channels", [(16,), (16, 32), (8, 16, 32)])
def test_flattened_leading_dims_equal_row_by_row(channels):
    net = make_net(channels=channels, groups=8).double()  # float64: batched and single-row convs agree to 1e-12
    x, cond = torch.randn(B, K, H, A, dtype=torch.float64), torch.randn(B, K, C, dtype=torch.float64)
    out = net(x, cond)
    rows = torch.stack([torch.stack([net(x[b, k], cond[b, k]) for k in range(K)]) for b in range(B)])
    torch.testing.assert_close(out, rows, rtol=0, atol=1e-12)
    assert not torch.allclose(out[0, 0], out[1, 1], atol=1e-3)  # rows differ: the comparison is not vacuous


def test_output_depends_on_cond_through_film():
    net = make_net()
    x, cond = torch.randn(B, H, A), torch.randn(B, C)
    out = net(x, cond)
    changed = cond.clone()
    changed[:, 0] += 1.0
    assert (net(x, changed) - out).abs().amin(dim=(-2, -1)).gt(0).all()  # every row moves
    # With the FiLM maps zeroed (scale 0, bias 0: the identity) cond has no path into the output at all.
    with torch.no_grad():
        for module in net.modules():
            if hasattr(module, "film"):
                module.film.weight.zero_()
                module.film.bias.zero_()
    torch.testing.assert_close(net(x, changed), net(x, cond), rtol=0, atol=0)


@pytest.mark.parametrize("channels", [(16,), (16, 32)])
def test_last_output_step_depends_on_first_input_step(channels):
    # Through the convolutions' receptive field (and GroupNorm's per-sample statistics over time): d out[H-1] / d x[0].
    horizon = 16
    torch.manual_seed(0)
    net = TemporalUNet1D(A, horizon, C, channels=channels, kernel_size=3, groups=4, output_scale=1.0)
    x, cond = torch.randn(B, horizon, A), torch.randn(B, C)
    out = net(x, cond)
    perturbed = x.clone()
    perturbed[:, 0] += 1.0
    change = (net(perturbed, cond) - out)[:, -1].abs()  # [B, A]
    assert (change > 1e-6).all()
    jacobian = torch.autograd.functional.jacobian(lambda chunk: net(chunk, cond[:1])[0, -1], x[:1])  # [A, 1, H, A]
    assert jacobian[:, 0, 0].abs().sum() > 1e-4


def test_initial_output_is_small_and_proportional_to_output_scale():
    x, cond = torch.randn(B, H, A), torch.randn(B, C)
    unit = make_net(seed=3, output_scale=1.0)(x, cond)
    small = make_net(seed=3, output_scale=0.01)(x, cond)
    # Same seed, same weights except the head's 1x1 conv w -> 0.01 w with zero bias: the output is exactly scaled.
    torch.testing.assert_close(small, 0.01 * unit, rtol=1e-5, atol=1e-8)
    assert unit.abs().mean() > 0.05 and small.abs().max() < 0.05


def test_adam_fits_a_fixed_regression_target():
    net = make_net(output_scale=0.01)
    torch.manual_seed(1)
    x, cond, target = torch.randn(16, H, A), torch.randn(16, C), torch.randn(16, H, A)
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = (net(x, cond) - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # At init the output is about 0, so the loss is about mean(target^2) = 1; memorizing 16 rows drives it down.
    assert losses[0] == pytest.approx(target.square().mean().item(), rel=0.05)
    assert losses[-1] < 0.3 * losses[0]


def test_torch_export_matches_eager(tmp_path):
    from robopt.sim2real.export import export_pt2, load_torch_file

    net = make_net().eval()
    export_pt2(net, (torch.randn(B, H, A), torch.randn(B, C)), tmp_path / "unet1d.pt2")  # one dynamic batch axis
    loaded = load_torch_file("pt2", tmp_path / "unet1d.pt2")
    for size, scale in ((1, 1.0), (5, 3.0)):  # the program's aten ops against eager: equal up to float rounding
        x, cond = torch.randn(size, H, A) * scale, torch.randn(size, C)
        torch.testing.assert_close(loaded(x, cond), net(x, cond), rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.export's own pytree deprecation
@pytest.mark.filterwarnings("ignore:# The axis name:UserWarning")  # both inputs share the one batch symbol
def test_onnx_runtime_matches_eager(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    net = make_net().eval()
    path = tmp_path / "unet1d.onnx"
    batch = torch.export.Dim("batch")  # one symbol for both inputs: their leading dims must agree
    program = torch.onnx.export(
        net,
        (torch.randn(B, H, A), torch.randn(B, C)),
        dynamo=True,
        dynamic_shapes={"x": {0: batch}, "cond": {0: batch}},
        input_names=["x", "cond"],
        output_names=["noise"],
        verbose=False,
    )
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [tuple(node.shape) for node in session.get_inputs()] == [("batch", H, A), ("batch", C)]
    for size in (1, 5):
        x, cond = torch.randn(size, H, A) * 2, torch.randn(size, C)
        (noise,) = session.run(None, {"x": x.numpy(), "cond": cond.numpy()})
        expected = net(x, cond)
        assert expected.abs().mean() > 0.05  # output_scale 1: a real signal, not a near-zero output
        torch.testing.assert_close(torch.from_numpy(noise), expected, rtol=0, atol=1e-5)


# ---------------------------------------------------------------- bad input: one-line errors at build time


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"horizon": 3, "channels": (64, 128)},
            "horizon 3 is not divisible by 2 for channels (64, 128): use a horizon divisible by 2 or fewer levels",
        ),
        ({"horizon": 12, "channels": (8, 16, 32, 64)}, "horizon 12 is not divisible by 8 for channels (8, 16, 32, 64)"),
        ({"channels": (16, 20), "groups": 8}, "groups 8 must divide every channel count (16, 20)"),
        ({"groups": 0}, "groups 0 must divide"),
        ({"kernel_size": 4}, "kernel_size must be odd and >= 1"),
        ({"kernel_size": 0}, "kernel_size must be odd and >= 1"),
        ({"kernel_size": -1}, "kernel_size must be odd and >= 1"),
        ({"channels": ()}, "channels must be a non-empty sequence"),
        ({"channels": (16, 0)}, "channels must be a non-empty sequence"),
        ({"action_dim": 0}, "action_dim must be >= 1"),
        ({"cond_dim": 0}, "cond_dim must be >= 1"),
        ({"output_scale": 0.0}, "output_scale must be > 0"),
    ],
)
def test_bad_arguments_raise_one_line_value_errors(overrides, message):
    arguments = {"action_dim": A, "horizon": H, "cond_dim": C, "channels": CHANNELS, "groups": 8, **overrides}
    with pytest.raises(ValueError, match="^" + re.escape(message)) as error:
        TemporalUNet1D(**arguments)
    assert "\n" not in str(error.value)


def test_list_channels_and_divisible_horizons_are_accepted():
    net = TemporalUNet1D(A, 12, C, channels=[8, 16, 32], groups=8, kernel_size=1)  # 12 = 3 * 2^2
    assert net.channels == (8, 16, 32)
    assert net(torch.randn(2, 12, A), torch.randn(2, C)).shape == (2, 12, A)


def test_wrong_input_shapes_raise():
    net = make_net()
    with pytest.raises(ValueError, match=r"expected x \[\.\.\., 8, 3\] and cond \[\.\.\., 6\]"):
        net(torch.randn(B, H + 1, A), torch.randn(B, C))
    with pytest.raises(ValueError, match="leading dims of x"):
        net(torch.randn(B, H, A), torch.randn(B + 1, C))
