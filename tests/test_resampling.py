"""model/resampling.py against the F.interpolate calls it stands in for, at the lengths a
bucket can have, and the patch that puts it into Kokoro's UpSample1d."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kokoro_tvm.model.patches import patched
from kokoro_tvm.model.resampling import linear_down, linear_up, middle_samples, nearest_up

# SineGen's factor (samples per F0 value), the generator's first upsampling, the decode blocks'.
FACTORS = (300, 10, 2)
LENGTHS = (1, 7, 160, 4096)  # 4096 F0 values: the longest frame bucket the tests know, 2048


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", LENGTHS)
def test_nearest_up_is_interpolate_bit_for_bit(dtype, length):
    x = torch.rand(2, 3, length, dtype=dtype)
    for factor in FACTORS:
        assert torch.equal(nearest_up(x, factor),
                           F.interpolate(x, scale_factor=factor, mode="nearest"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", LENGTHS)
def test_linear_down_is_interpolate_bit_for_bit(dtype, length):
    x = torch.randn(2, 9, 300 * length, dtype=dtype)
    assert torch.equal(linear_down(x, 300),
                       F.interpolate(x, scale_factor=1 / 300, mode="linear"))


class LinearUp(torch.nn.Module):
    def forward(self, x):
        return linear_up(x, 300)


@pytest.fixture(scope="module")
def exported_linear_up():
    """linear_up as torch.export traces it (the length symbolic), runnable."""
    length = torch.export.Dim("length", min=2)
    return {dtype: torch.export.export(
        LinearUp(), (torch.zeros(2, 9, 8, dtype=dtype),), strict=False,
        dynamic_shapes=({2: length},)).module() for dtype in (torch.float32, torch.float64)}


@pytest.mark.parametrize("dtype, rounding", [(torch.float32, 4e-7), (torch.float64, 1e-15)])
@pytest.mark.parametrize("length", LENGTHS)
def test_linear_up_is_interpolate_to_rounding(dtype, rounding, length, exported_linear_up):
    """SineGen's use: a phase that grows to hundreds of thousands of radians, blended between
    neighbours. Exported: the positions and weights are PyTorch's, the blend's rounding may
    differ; run eagerly: interpolate itself."""
    x = torch.cumsum(torch.rand(2, 9, length, dtype=dtype), dim=-1) * 300
    expected = F.interpolate(x, scale_factor=300, mode="linear")
    assert torch.equal(linear_up(x, 300), expected)
    graph = exported_linear_up[dtype].graph
    assert not any("upsample" in str(node.target) for node in graph.nodes), graph
    # No gather either: TVM would not fuse it, and would hold the output's size in a buffer.
    assert not any("index" in str(node.target) for node in graph.nodes), graph
    found = exported_linear_up[dtype](x)
    assert found.shape == expected.shape and found.dtype == dtype
    assert float((found - expected).abs().max() / expected.abs().max()) < rounding


def test_linear_down_refuses_an_odd_factor():
    with pytest.raises(ValueError, match="odd"):
        linear_down(torch.zeros(1, 1, 9), 3)


def test_nearest_upsample_patch_keeps_kokoros_upsample1d():
    from kokoro.istftnet import UpSample1d

    x = torch.randn(1, 4, 33)
    expected = {kind: UpSample1d(kind)(x) for kind in ("none", True)}
    before = UpSample1d.forward
    with patched(("nearest_upsample",)):
        assert UpSample1d.forward is not before
        for kind, value in expected.items():
            assert torch.equal(UpSample1d(kind)(x), value)
    assert UpSample1d.forward is before


def test_middle_samples_are_what_linear_down_reads_along_any_axis():
    x = torch.randn(2, 300 * 7, 9)
    first, second = middle_samples(x, 300, dim=1)
    assert first.shape == second.shape == (2, 7, 9)
    assert torch.equal((first + second) * 0.5,
                       linear_down(x.transpose(1, 2), 300).transpose(1, 2))


@pytest.mark.parametrize("length", LENGTHS)
def test_sinegen_patch_computes_kokoros_sines_bit_for_bit(length):
    """The patched SineGen computes the phase increments only at the samples Kokoro's
    downsampling reads: on F0 upsampled as Kokoro upsamples it, its sines are Kokoro's bit for
    bit, whatever Kokoro's random initial phase (which lands on a sample never read)."""
    from kokoro.istftnet import SineGen

    sinegen = SineGen(24000, 300, harmonic_num=8)
    f0 = torch.rand(1, 1, length) * 400 + 50
    harmonics = torch.arange(1, 10, dtype=f0.dtype)
    f0_values = nearest_up(f0, 300).transpose(1, 2) * harmonics  # [1, samples, 9]
    expected = sinegen._f02sine(f0_values)
    with patched(("sinegen_noise_inputs",)):
        got = sinegen._f02sine(f0_values, torch.rand(1, 9))
    assert torch.equal(got, expected)
