"""The C stochastic rounding (compressors/kernels/quantize.py, compressors/kernels/c/quantize.c)
against the eager reference of ``rounding.stochastic_round``, byte for byte: codes of 1 to 8 and of 16 bits,
rows per scale or one scale for all, a shift, values clamped at both ends, one and two threads; and
the codecs that use it (tests/test_fused.py compares every codec's compiled bytes with eager's)."""

from __future__ import annotations

import pytest
import torch
from gcbench.compressors.codecs import rounding
from gcbench.compressors.kernels import core, native
from gcbench.compressors.kernels.dither import draw_key, key_words, split_point
from gcbench.compressors.kernels.quantize import QUANTIZE_C, dither_c, dither_rest_c

pytestmark = pytest.mark.skipif(native.library(QUANTIZE_C) is None, reason="no C compiler here")


def _eager(x, scale, offset, top, bits, span, shift, seed):
    with core.forced("eager"):
        return rounding.stochastic_round(x, scale, offset=offset, top=top, bits=bits, bucket=span, shift=shift,
                                     generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 6, 7, 8, 16])
@pytest.mark.parametrize("span", [8, 96, 128, 264, 4096])
@pytest.mark.parametrize("per_row", [True, False])
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_c_rounding_has_the_eager_bytes(bits, span, per_row, workers, openmp, monkeypatch):
    """The paired values' packed codes equal the eager reference's first bytes (a fused multiply-add,
    another hash half or another packing order changes them: this test fails)."""
    if not openmp:  # a build without OpenMP: a call per block, on the caller's pool threads
        monkeypatch.setattr(native, "openmp", lambda name: False)
    g = torch.Generator().manual_seed(bits * span)
    if not per_row:  # one scale: rows of FUSED_SPAN values define the pairs (monkeypatched smaller here)
        span = 8 * span
    n = 7 * span + 13 if span > 8 else 20_011
    top = (1 << bits) - 1 if bits < 8 else (1 << bits) - 2
    offset = top / 2
    x = torch.randn(n, generator=g) * 3
    rows = -(-n // span)
    # scales from tiny to large: codes at both clamps and everywhere between
    scale = (torch.rand(rows if per_row else 1, generator=g) * (top / 4)) * torch.exp2(
        torch.randint(-3, 4, (rows if per_row else 1,), generator=g).float())
    shift = 0.0 if per_row else -0.25
    monkeypatch.setattr(rounding, "FUSED_SPAN", span)
    split = split_point(n, span)
    want = _eager(x, scale if per_row else float(scale), offset, top, bits, span, shift, seed=span)
    out = torch.full((want.numel(),), 0xAA, dtype=torch.uint8)
    k0, k1 = key_words(draw_key(torch.Generator().manual_seed(span), x.device))
    dither_c(x, split, span, scale.contiguous(), (int(k0), int(k1)), rounding.dither_const(offset), shift, top, bits, out,
             workers)
    # the paired values' bytes: packed codes, or the low and the high byte planes of 16-bit ones
    parts = [slice(0, 2 * split), slice(n, n + 2 * split)] if bits == 16 else [slice(0, 2 * split * bits // 8)]
    assert split and all(torch.equal(out[p], want[p]) for p in parts)
    assert bool((out[2 * split * min(bits, 8) // 8 : n if bits == 16 else None] == 0xAA).all())  # nothing else


def test_the_codecs_round_in_c_on_the_cpu():
    """QSGD (at 4, 3, 5 and 8 bits), TernGrad and ZipML in compiled mode take the C pass on the CPU,
    with the eager bytes."""
    x = torch.randn(70_001, generator=torch.Generator().manual_seed(2)) * 3
    cases = [("qsgd", {}), ("qsgd", {"levels": 3}), ("qsgd", {"levels": 15}), ("qsgd", {"levels": 127}),
             ("terngrad", {}), ("zipml8", {}), ("zipml16", {})]
    for name, params in cases:
        (eager, eager_c), (compiled, compiled_c) = (_bytes_and_c_use(name, params, x, m) for m in ("eager", "compiled"))
        assert not eager_c and compiled_c, (name, params)
        assert eager == compiled, (name, params)


def _bytes_and_c_use(name: str, params: dict, x: torch.Tensor, mode: str) -> tuple[bytes, bool]:
    """The payload bytes of codec ``name`` encoding ``x`` in ``mode``, and whether the C rounding ran."""
    from gcbench import compressors

    with core.forced(mode):
        before = native.call_count(QUANTIZE_C)
        data = compressors.get(name, **params).encode(x, key="k").to_bytes()
        return data, native.call_count(QUANTIZE_C) > before


@pytest.mark.parametrize("n", [1, 7, 16, 100, 513, 1000, 2304, 20_001])
def test_small_tensors_round_in_one_c_call_with_the_eager_bytes(n):
    """In the default mode a tensor shorter than two rows (no pairs) or the values after the pairs
    are rounded by one C call (``dither_rest_c``), with the eager reference's bytes, at every code
    width the codecs write (a rest that took the low half of its word, another row's scale or the
    pairs' index fails this test)."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3
    cases = [("qsgd", {}), ("qsgd", {"levels": 3}), ("qsgd", {"levels": 15, "bucket_size": 64}),
             ("qsgd", {"levels": 127}), ("qsgd", {"levels": 30000, "bucket_size": 128}), ("terngrad", {}),
             ("zipml8", {}), ("zipml16", {})]
    for name, params in cases:
        (eager, eager_c), (auto, auto_c) = (_bytes_and_c_use(name, params, x, m) for m in ("eager", "auto"))
        # (ZipML writes a constant tensor's codes without rounding: one value is one)
        assert not eager_c and auto_c == (not (name.startswith("zipml") and n == 1)), (name, params)
        assert eager == auto, (name, params, n)


@pytest.mark.parametrize("per_row", [True, False])
def test_c_rest_equals_dither_unpaired(per_row):
    """``dither_rest_c`` against the eager ``dither_unpaired`` it replaces: whole rows and a partial
    one after ``start``, codes clamped at both ends."""
    span, start, n, top = 96, 192, 192 + 2 * 96 + 37, 254
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, generator=g) * 3
    rows = -(-n // span)
    scales = torch.rand(rows if per_row else 1, generator=g) * 60
    key = draw_key(torch.Generator().manual_seed(9), x.device)
    const, shift = rounding.dither_const(127.0), -0.5
    ct, st = torch.tensor([const]), torch.tensor([shift])
    want = torch.cat([
        core.dither_unpaired(x[start : start + 2 * span].view(2, span), scales[start // span : start // span + 2]
                             if per_row else scales, key, start, ct, st, top).reshape(-1),
        core.dither_unpaired(x[start + 2 * span :].view(1, -1), scales[-1:] if per_row else scales, key,
                             start + 2 * span, ct, st, top).reshape(-1)])
    k0, k1 = key_words(key)
    got = dither_rest_c(x, start, span, scales, (int(k0), int(k1)), const, shift, top,
                        torch.empty(n - start, dtype=torch.int32))
    assert torch.equal(got, want)
    assert 0 in got.tolist() and top in got.tolist()  # both clamps reached


def test_bad_arguments_raise_value_error():
    x, out, one = torch.randn(256), torch.empty(256, dtype=torch.uint8), torch.ones(1)
    words = (1, 2)
    with pytest.raises(ValueError):  # 12-bit codes are not written by the pass
        dither_c(x, 128, 8, one, words, 0.5, 0.0, 7, 12, out, 1)
    with pytest.raises(ValueError):  # 3-bit codes in rows that are not whole groups of 8
        dither_c(x, 120, 12, one, words, 0.5, 0.0, 7, 3, out, 1)
    with pytest.raises(ValueError):  # 16-bit codes need two bytes per value
        dither_c(x, 128, 8, one, words, 0.5, 0.0, 7, 16, out, 1)
    with pytest.raises(ValueError):  # a code above the width
        dither_c(x, 128, 8, one, words, 0.5, 0.0, 4, 2, out, 1)
    with pytest.raises(ValueError):  # split not whole rows
        dither_c(x, 100, 8, one, words, 0.5, 0.0, 3, 2, out, 1)
    with pytest.raises(ValueError):  # output too short
        dither_c(x, 128, 8, one, words, 0.5, 0.0, 254, 8, out[:200], 1)
    with pytest.raises(ValueError):  # float64 values
        dither_c(x.double(), 128, 8, one, words, 0.5, 0.0, 254, 8, out, 1)
    with pytest.raises(ValueError):  # too few scales
        dither_c(x, 128, 8, torch.ones(5), words, 0.5, 0.0, 254, 8, out, 1)
    codes = torch.empty(56, dtype=torch.int32)
    with pytest.raises(ValueError):  # the rest does not start at a whole row
        dither_rest_c(x, 200, 12, one, words, 0.5, 0.0, 254, codes)
    with pytest.raises(ValueError):  # int64 codes
        dither_rest_c(x, 200, 8, one, words, 0.5, 0.0, 254, codes.long())
    with pytest.raises(ValueError):  # an output of another length
        dither_rest_c(x, 192, 8, one, words, 0.5, 0.0, 254, codes)
    with pytest.raises(ValueError):  # too few scales for the rows
        dither_rest_c(x, 200, 8, torch.ones(31), words, 0.5, 0.0, 254, codes)
    with pytest.raises(ValueError):  # a code over 16 bits
        dither_rest_c(x, 200, 8, one, words, 0.5, 0.0, 1 << 16, codes)


def test_values_where_a_fused_multiply_add_rounds_otherwise(monkeypatch):
    """Inputs built so that ``fl(fl(x * s) + w)`` and a fused ``fl(x * s + w)`` truncate to different
    codes (the sum within a rounding of an integer): the C pass gives the eager codes there, so a
    build that contracted them (no ``-ffp-contract=off``, no pragma) fails this test."""
    import numpy as np

    from gcbench.compressors.kernels import dither

    monkeypatch.setattr(rounding, "FUSED_SPAN", 8)
    split, seed = 4096, 7
    low, high = torch.empty(split), torch.empty(split)
    dither.pair_uniforms_into(low, high, 0, draw_key(torch.Generator().manual_seed(seed), torch.device("cpu")))
    w = np.float32(rounding.dither_const(127.0)) + torch.cat([low, high]).numpy() * np.float32(2.0**-16)
    s = np.float32(1 + 2**-20 + 2**-22)
    # for each value, the first of 81 neighbouring float32 x around (130 - w) / s where the two differ
    x0 = ((np.float32(130) - w) / s).astype(np.float32)
    cand = [x0]
    up, down = x0.copy(), x0.copy()
    for _ in range(40):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        cand += [up, down]
    xs = np.stack(cand, 1)
    two = np.floor((xs * s).astype(np.float32) + w[:, None])
    fused = np.floor((xs.astype(np.float64) * np.float64(s) + w[:, None]).astype(np.float32))
    differ = two != fused
    pick = np.where(differ.any(1), differ.argmax(1), 0)
    x = torch.from_numpy(np.ascontiguousarray(xs[np.arange(2 * split), pick]))
    fma_codes = torch.from_numpy(fused[np.arange(2 * split), pick]).to(torch.uint8)
    want = _eager(x, float(s), 127.0, 254, 8, 8, 0.0, seed)
    assert int((want != fma_codes).sum()) > 1000  # the test's power: an FMA build gives other codes
    out = torch.empty(2 * split, dtype=torch.uint8)
    k0, k1 = key_words(draw_key(torch.Generator().manual_seed(seed), x.device))
    dither_c(x, split, 8, torch.tensor([s]), (int(k0), int(k1)), rounding.dither_const(127.0), 0.0, 254, 8, out, 2)
    assert torch.equal(out, want)
