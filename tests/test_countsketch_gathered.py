"""Count Sketch's accelerator accumulation (compressors/codecs/countsketch/gathered.py) and the int64
fixed point it sums in (compressors/numerics.py), run here on the CPU: the same code runs on a GPU,
where its point is that integer atomics give the same bits in any order."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from gcbench.compressors.codecs.countsketch.codec import CountSketch
from gcbench.compressors.codecs.countsketch.gathered import accumulate_gathered
from gcbench.compressors.numerics import (
    FIXED_POINT_BITS,
    fixed_point_scale,
    from_fixed_point,
    to_fixed_point,
)


def naive_signed_sums(sk: CountSketch, x: torch.Tensor) -> list[list[Fraction]]:
    """Row j, bucket b: the exact sum of s_j(i) x_i over h_j(i) = b (Python fractions)."""
    codes = sk.tables.codes_at(torch.arange(sk.d)).long().numpy()
    vals = [Fraction(float(v)) for v in x.tolist()]
    out = [[Fraction(0)] * sk.c for _ in range(sk.r)]
    for j in range(sk.r):
        for i, code in enumerate(codes[j].tolist()):
            out[j][code >> 1] += -vals[i] if code & 1 else vals[i]
    return out


def float32_of(q: Fraction) -> float:
    """``q`` rounded to the nearest float32 (ties to even), through exact float64 steps where they suffice."""
    return float(np.float32(float(q)))


# --- the fixed point ------------------------------------------------------------------------------


@pytest.mark.parametrize("top", [0.0, 1e-40, 1e-30, 0.75, 1.0, 3.0, 1e20, float(np.finfo(np.float32).max)])
@pytest.mark.parametrize("count", [0, 1, 2, 3, 1000, (1 << 26) + 1])
def test_scale_keeps_any_count_of_rounded_values_within_the_int64(top, count):
    s = fixed_point_scale(top, count)
    assert math.frexp(s)[0] == 0.5  # a power of two: the products are exact
    largest = round(top * s)  # one value at the top, rounded
    assert max(count, 1) * largest <= 1 << FIXED_POINT_BITS
    if top > 0:  # and the scale is not smaller than it must be: the top value uses the upper bits
        assert max(count, 1) * largest * 4 > 1 << FIXED_POINT_BITS


@pytest.mark.parametrize("bad", [(-1.0, 5), (math.inf, 5), (math.nan, 5), (1.0, -1)])
def test_scale_refuses_what_it_cannot_bound(bad):
    with pytest.raises(ValueError, match="fixed_point_scale"):
        fixed_point_scale(*bad)


def test_many_equal_top_values_sum_exactly_without_overflow():
    n = (1 << 20) + 7
    top = float(np.float32(3.3e37))
    x = torch.full((n,), top)
    s = fixed_point_scale(top, n)
    total = int(to_fixed_point(x, s).sum())
    assert 0 < total < 1 << 63
    assert Fraction(total) / Fraction(s) == Fraction(top) * n  # exact: top is a multiple of 1/s


def test_fixed_point_round_trip_of_one_value_is_within_half_a_unit():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(1)) * torch.logspace(-30, 3, 10_000)
    s = fixed_point_scale(float(x.abs().max()), x.numel())
    back = from_fixed_point(to_fixed_point(x, s), s, torch.float64)
    assert float((back - x.double()).abs().max()) <= 0.5 / s


# --- the accumulation -----------------------------------------------------------------------------


def test_every_bucket_is_the_exact_sum_rounded_once():
    """Sums with heavy cancellation and magnitudes over 20 decades: every bucket equals the float32
    rounding of the exact sum, up to one unit where the quantization (<= 0.5 / s per value) reaches
    a rounding boundary; float32 additions in index order (the CPU's) miss many."""
    d, c, r = 20_000, 7, 3
    g = torch.Generator().manual_seed(4)
    x = torch.randn(d, generator=g) * torch.pow(10.0, torch.randint(-12, 8, (d,), generator=g).float())
    sk = CountSketch(d, c, r, seed=11)
    ours = accumulate_gathered(sk.tables, x, r, c).tolist()
    exact = naive_signed_sums(sk, x)
    cpu = CountSketch(d, c, r, seed=11).accumulate(x).table.tolist()
    rounded = [[float32_of(q) for q in row] for row in exact]
    assert sum(o == e for orow, erow in zip(ours, rounded) for o, e in zip(orow, erow)) >= r * c - 1
    assert sum(p != e for prow, erow in zip(cpu, rounded) for p, e in zip(prow, erow)) >= r * c // 2
    for orow, erow in zip(ours, rounded):
        for o, e in zip(orow, erow):
            assert abs(o - e) <= abs(math.ulp(np.float32(e)))


@pytest.mark.parametrize("step", [1 << 22, 1000, 7])
def test_same_bits_for_any_chunk_length_and_close_to_the_cpu_table(step):
    d, c, r = 50_003, 301, 5
    x = torch.randn(d, generator=torch.Generator().manual_seed(2))
    sk = CountSketch(d, c, r, seed=3)
    ours = accumulate_gathered(sk.tables, x, r, c, step=step)
    assert torch.equal(ours, accumulate_gathered(sk.tables, x, r, c))
    torch.testing.assert_close(ours, CountSketch(d, c, r, seed=3).accumulate(x).table, rtol=1e-5, atol=1e-5)


def test_the_same_bits_whatever_the_order_of_the_additions():
    """The property the GPU needs: the int64 sums do not depend on the order in which values reach a
    bucket (the atomics' order), here the chunks taken from last to first."""
    d, c, r = 30_011, 5, 2
    g = torch.Generator().manual_seed(9)
    x = torch.randn(d, generator=g) * torch.pow(10.0, torch.randint(-6, 6, (d,), generator=g).float())
    sk = CountSketch(d, c, r, seed=5)
    s = fixed_point_scale(float(x.abs().max()), d)
    codes = sk.tables.codes_at(torch.arange(d))
    forward = torch.zeros(r, 2 * c, dtype=torch.int64)
    backward = torch.zeros(r, 2 * c, dtype=torch.int64)
    q = to_fixed_point(x, s)
    for lo in range(0, d, 977):
        for j in range(r):
            forward[j].index_add_(0, codes[j, lo:lo + 977], q[lo:lo + 977])
    for lo in reversed(range(0, d, 977)):
        for j in range(r):
            backward[j].index_add_(0, codes[j, lo:lo + 977], q[lo:lo + 977])
    assert torch.equal(forward, backward)
    pairs = forward.view(r, c, 2)
    assert torch.equal(from_fixed_point(pairs[..., 0] - pairs[..., 1], s), accumulate_gathered(sk.tables, x, r, c))


def test_non_finite_values_show_where_the_cpu_shows_them():
    d, c, r = 4_001, 13, 3
    x = torch.randn(d, generator=torch.Generator().manual_seed(6))
    x[10], x[2000], x[3000] = math.nan, math.inf, -math.inf
    sk = CountSketch(d, c, r, seed=8)
    ours = accumulate_gathered(sk.tables, x, r, c)
    cpu = CountSketch(d, c, r, seed=8).accumulate(x).table
    assert torch.equal(torch.isnan(ours), torch.isnan(cpu))
    assert torch.equal(torch.isposinf(ours), torch.isposinf(cpu))
    assert torch.equal(torch.isneginf(ours), torch.isneginf(cpu))
    finite = torch.isfinite(cpu)
    torch.testing.assert_close(ours[finite], cpu[finite], rtol=1e-5, atol=1e-5)


def test_zeros_and_an_empty_vector():
    sk = CountSketch(1_000, 9, 2, seed=1)
    assert torch.equal(accumulate_gathered(sk.tables, torch.zeros(1_000), 2, 9), torch.zeros(2, 9))
    assert accumulate_gathered(sk.tables, torch.zeros(0), 2, 9).shape == (2, 9)


@pytest.mark.cuda
def test_cuda_sums_equal_the_cpu_ones_bit_for_bit():
    """Integer sums are exact and every conversion is a correctly rounded IEEE operation on both
    devices, so the GPU (atomics in any order) gives the CPU's bits for the same codes."""
    d, c, r = 1_000_003, 4_099, 5
    g = torch.Generator().manual_seed(12)
    x = torch.randn(d, generator=g) * torch.pow(10.0, torch.randint(-9, 4, (d,), generator=g).float())
    cpu = accumulate_gathered(CountSketch(d, c, r, seed=2).tables, x, r, c, step=1 << 18)
    gpu_sk = CountSketch(d, c, r, seed=2, device="cuda")
    assert torch.equal(accumulate_gathered(gpu_sk.tables, x.cuda(), r, c).cpu(), cpu)
    assert torch.equal(gpu_sk.accumulate(x.cuda()).table.cpu(), cpu)
