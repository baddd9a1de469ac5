"""EF-signSGD's scale ``||p||_1 / d`` (compressors/kernels/sign.py): exact row sums against an
independent integer computation, independence of the eager blocking, accuracy against an exactly
rounded sum, and the same bits from the generic and the fused error-feedback paths on hostile values
(mixed exponents, subnormals, signed zeros, values near float32's max)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from gcbench.compressors import ErrorFeedback
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels import sign as fused_sign
from gcbench.compressors.errors import NumericOverflowError
from gcbench.compressors.codecs.sign import Sign, mean_abs
from hypothesis import given, settings
from hypothesis import strategies as st

F32_MAX = float(torch.finfo(torch.float32).max)


def naive_row_sum(row: list[float]) -> Fraction:
    """One row's sum as the module defines it, computed with Python integers: each ``|v|`` times
    ``2^(169 - E)`` (``E``: the biased float32 exponent of the row's max, at least 1), rounded to the
    nearest integer (ties to even), summed exactly and scaled back."""
    mags = [abs(v) for v in row]
    top = max(mags)
    biased = max(1, math.frexp(top)[1] + 126) if top > 0 else 1  # frexp: top = f * 2^e, 0.5 <= f < 1
    shift = 169 - biased
    total = sum(round(Fraction(v) * Fraction(2) ** shift) for v in mags)  # round(): ties to even
    return Fraction(total) * Fraction(2) ** (-shift)


def hostile(n: int, seed: int) -> torch.Tensor:
    """float32 values spanning the whole exponent range, with zeros, signed zeros and subnormals."""
    g = torch.Generator().manual_seed(seed)
    mant = torch.rand(n, generator=g) + 0.5
    expo = torch.randint(-140, 120, (n,), generator=g).float()
    x = (mant * torch.exp2(expo)).float() * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    x[:: 97] = 0.0
    x[5 :: 101] = -0.0
    x[7 :: 89] = 1e-45
    x[3 :: 211] = F32_MAX
    return x


@pytest.mark.parametrize("n", [1, 1023, 1024, 1025, 5000])
def test_row_sums_equal_the_integer_definition(n):
    x = hostile(n, n)
    sums = fused_sign.abs_row_sums(x, None, compiled=False)
    rows = [x[i : i + fused_sign.ROW].tolist() for i in range(0, n, fused_sign.ROW)]
    assert sums.dtype == torch.float64 and sums.numel() == len(rows)
    for got, row in zip(sums.tolist(), rows):
        assert Fraction(got) == naive_row_sum(row)


def test_row_sums_of_corrected_gradient_use_the_float32_sum():
    g, e = hostile(3000, 1), hostile(3000, 2) * 0.5
    both = fused_sign.abs_row_sums(g, e, compiled=False)
    assert torch.equal(both, fused_sign.abs_row_sums(g + e, None, compiled=False))


def test_eager_blocks_do_not_change_the_sums(monkeypatch):
    x = hostile(10_000, 3)
    whole = fused_sign.abs_row_sums(x, None, compiled=False)
    monkeypatch.setattr(fused_sign, "ROW_BLOCK", 2 * fused_sign.ROW)
    assert torch.equal(fused_sign.abs_row_sums(x, None, compiled=False), whole)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=-(2.0**100), max_value=2.0**100, allow_nan=False, width=32), min_size=1, max_size=3000))
def test_mean_is_within_1e12_of_the_exact_mean(values):
    x = torch.tensor(values, dtype=torch.float32)
    exact = math.fsum(abs(v) for v in x.tolist()) / len(values)
    assert mean_abs(x) == pytest.approx(exact, rel=1e-12, abs=1e-300)


def test_scale_of_float32_max_is_finite():
    x = torch.full((3000,), F32_MAX)
    (scale, _) = Sign(scale="mean_abs").encode(x).sections
    assert scale.item() == F32_MAX


def test_non_finite_rows_raise_with_the_memory_untouched():
    ef = ErrorFeedback(Sign(scale="mean_abs"))
    with fused.forced("eager"):
        spike = torch.zeros(3000)
        spike[0] = 2e38
        ef.encode(torch.full((3000,), 1.0), key="k")
        ef.encode(spike, key="k")  # the scale is 2e38 / 3000: the residual keeps almost all of the spike
        before = ef.residual("k").clone()
        assert before[0] > 1e38
        with pytest.raises(NumericOverflowError):
            ef.encode(spike, key="k")  # g + e overflows float32 at index 0
        assert torch.equal(ef.residual("k"), before)


@pytest.mark.parametrize("n", [7, 1024, 3001])
def test_blocked_feedback_equals_generic_on_hostile_values(n, monkeypatch):
    """The eager fused path (bits, scale and residual written over e) against the generic encode /
    decode / subtract, on values that stress the scale's rounding and the sign of zero."""
    xs = [hostile(n, 10 + i) for i in range(3)]
    xs[1][:4] = -0.0  # with a residual of -0.0 below (the generic path leaves one after -0.0 - 0.0)
    runs = []
    for blocked in (True, False):
        monkeypatch.setattr(Sign, "feedback_in_eager", blocked)
        ef, out = ErrorFeedback(Sign(scale="mean_abs")), []
        with fused.forced("eager"):
            for x in xs:
                x = x.clamp(-1e37, 1e37)  # g + e stays finite
                p = ef.encode(x, key="k")
                out.append((p.to_bytes(), ef.decode(p), ef.residual("k").clone()))
        runs.append(out)
    for (bb, db, rb), (bg, dg, rg) in zip(*runs):
        assert bb == bg and torch.equal(db, dg) and torch.equal(rb.view(torch.int32), rg.view(torch.int32))


def test_eager_blocks_are_larger_off_the_cpu():
    """Off the CPU each op of an eager block is a kernel launch: larger blocks, still whole rows."""
    assert fused_sign.row_block(torch.device("cpu")) == fused_sign.ROW_BLOCK
    assert fused_sign.row_block(torch.device("meta")) == fused_sign.DEVICE_ROW_BLOCK > fused_sign.ROW_BLOCK
    assert fused_sign.DEVICE_ROW_BLOCK % fused_sign.ROW == 0
