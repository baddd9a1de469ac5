"""Count Sketch's sign hashes evaluated in C (compressors/kernels/c/countsketch_signs.c): the same
flags as Python integers and as the torch evaluation, packed or not, for any row count, range and
coordinate below 2^61 - 1; bad arguments refused; the tables take them where C kernels run."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors.codecs.countsketch import hashes as csh
from gcbench.compressors.codecs.countsketch import modp
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels import countsketch as fused_sketch
from gcbench.compressors.kernels import native

P = modp.PRIME
CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(native.library(fused_sketch.SIGNS_C) is None, reason="no C compiler here")


def python_flags(coef: torch.Tensor, xs: list[int]) -> list[list[int]]:
    """1 where row j's sign polynomial of x is even (sign -1), in Python's exact integers."""
    rows = []
    for a, b, e3, e2, e1, e0 in coef.tolist():
        rows.append([1 - (((e3 * x + e2) * x + e1) * x + e0) % P % 2 for x in xs])
    return rows


def packed(flags: list[list[int]]) -> list[list[int]]:
    r, n = len(flags), len(flags[0])
    return [[sum(flags[j][t] << (j % 8) for j in range(8 * q, min(r, 8 * q + 8))) for t in range(n)]
            for q in range(-(-r // 8))]


@pytest.mark.parametrize("r", [1, 5, 8, 9, 17])
@pytest.mark.parametrize("first", [0, 12_345, (1 << 31) - 40, (1 << 40) + 7, P - 61])
def test_flags_equal_python_integers_with_extreme_coefficients(r, first):
    coef = modp.hash_coefficients(r, r + first)
    edge = torch.tensor([P - 1, P - 2, 0, 1, (1 << 60) + 12_345, (1 << 31) - 1], dtype=torch.int64)
    coef[0, 2:] = edge[:4]  # the first row's sign coefficients at the ends of [0, p)
    n = 60
    want = python_flags(coef, list(range(first, first + n)))
    for pack in (False, True):
        out = torch.full((-(-r // 8) if pack else r, n), 0xAA, dtype=torch.uint8)  # every byte is written
        fused_sketch.negbits_c(coef, first, out, packed=pack)
        assert out.tolist() == (packed(want) if pack else want)


@pytest.mark.parametrize(("d", "first", "last"), [(1 << 20, 0, 1 << 20), (1_000_003, 70_001, 999_000),
                                                   (1 << 33, (1 << 33) - 300_000, (1 << 33) - 5)])
@pytest.mark.parametrize("r", [3, 8, 11])
@pytest.mark.parametrize("pack", [False, True])
def test_flags_equal_the_torch_evaluation(d, first, last, r, pack):
    """Threaded spans (the pool's cuts), the fast torch path (d <= 2^31) and the exact one alike."""
    coef = modp.hash_coefficients(r, d + r)
    with fused.forced("eager"):
        want = csh.negative_flags(d, coef, CPU, first, last, packed=pack)
    calls = native.call_count(fused_sketch.SIGNS_C)
    with fused.forced("compiled"):
        got = csh.negative_flags(d, coef, CPU, first, last, packed=pack)
        assert native.call_count(fused_sketch.SIGNS_C) > calls
        alone = csh.negative_flags(d, coef, CPU, first, last, packed=pack, threads=False)
    assert torch.equal(got, want) and torch.equal(alone, want)


def test_a_column_slice_is_written_and_nothing_beside_it():
    coef = modp.hash_coefficients(5, 1)
    wide = torch.full((5, 300), 7, dtype=torch.uint8)
    fused_sketch.negbits_c(coef, 1000, wide[:, 100:200], packed=False)
    assert torch.equal(wide[:, 100:200], torch.tensor(python_flags(coef, list(range(1000, 1100))), dtype=torch.uint8))
    assert (wide[:, :100] == 7).all() and (wide[:, 200:] == 7).all()


def test_tables_take_the_c_flags_where_c_kernels_run_and_equal_eager_ones():
    coef = modp.hash_coefficients(5, 9)
    with fused.forced("eager"):
        calls = native.call_count(fused_sketch.SIGNS_C)
        eager = csh.HashTables(300_000, 1_000, coef, CPU)
        assert native.call_count(fused_sketch.SIGNS_C) == calls
    with fused.forced("compiled"):
        c = csh.HashTables(300_000, 1_000, coef, CPU)
        assert native.call_count(fused_sketch.SIGNS_C) > calls
    assert torch.equal(c.negbits, eager.negbits)


@pytest.mark.parametrize("bad", [
    lambda c, o: (c.to(torch.int32), o),                         # coefficients not int64
    lambda c, o: (c[:, :5].contiguous(), o),                     # not six per row
    lambda c, o: (c, o.to(torch.int16)),                         # output not bytes
    lambda c, o: (c, torch.zeros(2, 10, dtype=torch.uint8)),     # packed rows: ceil(5 / 8) = 1
    lambda c, o: (c, torch.zeros(10, 1, dtype=torch.uint8).t()),  # rows not contiguous
])
def test_bad_arguments_are_refused(bad):
    coef, out = bad(modp.hash_coefficients(5, 2), torch.zeros(1, 10, dtype=torch.uint8))
    with pytest.raises(ValueError, match="negbits_c takes"):
        fused_sketch.negbits_c(coef, 0, out, packed=True)


def test_coordinates_at_the_prime_are_refused():
    out = torch.zeros(1, 10, dtype=torch.uint8)
    fused_sketch.negbits_c(modp.hash_coefficients(2, 0), P - 10, out, packed=True)  # the last ten below p
    with pytest.raises(ValueError, match="below 2\\^61 - 1"):
        fused_sketch.negbits_c(modp.hash_coefficients(2, 0), P - 9, out, packed=True)  # the last one is p


def test_a_step_that_lands_on_p_reduces_to_zero():
    """Sums equal to p exactly (0 mod p, even: sign -1) at each Horner step and for other coordinates
    than 1: the final conditional subtraction decides the parity there, so a kernel without it is red."""
    rows = [[0, 0, 0, 0, 1, P - 1],        # e1 x + e0 = p at x = 1 (the last step)
            [0, 0, 0, 1, P - 1, 0],        # (e2 x + e1) = p at x = 1, then times x
            [0, 0, 1, P - 1, 5, 7],        # (e3 x + e2) = p at x = 1 (the first step)
            [0, 0, 0, 0, 3, P - 6]]        # e1 x + e0 = p at x = 2
    coef = torch.tensor(rows, dtype=torch.int64)
    out = torch.zeros(4, 3, dtype=torch.uint8)
    fused_sketch.negbits_c(coef, 0, out, packed=False)
    assert out.tolist() == python_flags(coef, [0, 1, 2])
    assert out[0, 1] == out[3, 2] == 1  # 0 mod p: even, negative
