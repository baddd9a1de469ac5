"""``nonzero_positions`` (compressors/numerics.py): the positions every sparse path takes from a mask
or from a dense tensor's values, equal to ``torch.nonzero``'s on any dtype, shape and layout."""

from __future__ import annotations

import math

import pytest
import torch

from gcbench.compressors.numerics import nonzero_positions


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x.reshape(-1)).reshape(-1)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                                   torch.float32, torch.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 64, 1000, (1 << 16) + 5])
def test_equals_torch_nonzero(dtype, n):
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=g) * (torch.rand(n, generator=g) < 0.3)).to(dtype)
    got = nonzero_positions(x)
    assert got.dtype == torch.int64
    assert torch.equal(got, reference(x))


def test_nan_counts_as_non_zero_and_negative_zero_as_zero():
    x = torch.tensor([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-45, -1e-45, 0.0])
    assert nonzero_positions(x).tolist() == [2, 3, 4, 5, 6] == reference(x).tolist()


def test_any_shape_and_layout_is_read_in_flat_order():
    x = (torch.randn(6, 9, generator=torch.Generator().manual_seed(3)) > 0.4).float()
    for t in (x, x.t(), x[:, ::2], x[2:4], x.reshape(3, 2, 9).permute(2, 0, 1), x[0, 0]):
        assert torch.equal(nonzero_positions(t), reference(t))


def test_the_result_owns_its_memory():
    mask = torch.zeros(100, dtype=torch.bool)
    mask[[3, 50]] = True
    got = nonzero_positions(mask)
    mask.zero_()
    assert got.tolist() == [3, 50]
