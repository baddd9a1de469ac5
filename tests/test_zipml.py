"""ZipML-style fixed point (Zhang et al., ICML 2017; SketchML's 8/16-bit baseline)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import devices
from dither_reference import uniforms
from gcbench.compressors import CorruptPayloadError, InvalidParameterError, Payload, UnsupportedInputError, decode, get
from gcbench.compressors.codecs import rounding as kernel_module
from gcbench.compressors.wire.bitpack import pack_bits, unpack_bits
from gcbench.compressors.codecs.zipml import ZipML
from hypothesis import given
from hypothesis import strategies as st


def naive_zipml(x: np.ndarray, bits: int, u: np.ndarray):
    """Python loop: grid min + k (max - min) / (2^bits - 1); round up w.p. the distance to the lower point."""
    lo, hi = min(x), max(x)
    top = 2**bits - 1
    codes, margin = [], []
    for v, ui in zip(x, u):
        if hi == lo:
            codes.append(0)
            margin.append(1.0)
            continue
        pos = (v - lo) / (hi - lo) * top
        k = math.floor(pos)
        frac = pos - k
        codes.append(min(k + (1 if ui >= 1 - frac else 0), top))
        margin.append(abs(ui - (1 - frac)))
    return lo, hi, np.array(codes), np.array(margin)


@pytest.mark.parametrize("bits", [1, 2, 3, 8, 11, 16])
@pytest.mark.parametrize("n", [1, 2, 101, 600])
@pytest.mark.parametrize("span", [None, 40])  # 40: rows short enough that these sizes pair values (dither.split_point)
def test_matches_naive_reference(bits, n, span, monkeypatch):
    if span:
        monkeypatch.setattr(kernel_module, "FUSED_SPAN", span)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n + bits)) * 5 + 1
    codec = ZipML(bits=bits, seed=7)
    p = codec.encode(x, generator=torch.Generator().manual_seed(7))
    lo, hi, ref, margin = naive_zipml(x.double().numpy(), bits, uniforms(7, n, kernel_module.FUSED_SPAN))
    assert p.sections[0].tolist() == [lo, hi]  # float32 input: exact
    codes = unpack_bits(p.sections[1], bits, n).numpy()
    differ = codes != ref
    # float32 rounds (x - min), its product with the scale and the sum with the uniform: three
    # roundings of values up to 2**bits, each within half an ulp (2**(bits - 25))
    bound = max(1e-3, 3 * 2.0 ** (bits - 25))
    assert np.all(margin[differ] < bound) and differ.sum() <= max(1, n // 100)
    out = codec.decode(p).double().numpy()
    expect = lo + codes * ((hi - lo) / (2**bits - 1))
    np.testing.assert_allclose(out, expect, rtol=1e-6, atol=1e-6 * (hi - lo))


@given(st.integers(1, 16), st.integers(0, 2**16), st.integers(1, 200))
def test_values_land_on_neighbouring_grid_points(bits, seed, n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).float()
    codec = ZipML(bits=bits, seed=seed)
    out = codec.roundtrip(x).double()
    lo, hi = float(x.min()), float(x.max())
    if hi == lo:
        assert torch.equal(out, x.double())
        return
    step = (hi - lo) / (2**bits - 1)
    pos = (x.double() - lo) / step
    got = (out - lo) / step
    level = got.round()
    assert torch.all((got - level).abs() < 1e-3)
    near = (pos - pos.round()).abs() < 1e-3
    ok = (level == pos.floor()) | (level == pos.floor() + 1) | near
    assert torch.all(ok) and torch.all((level >= 0) & (level <= 2**bits - 1))
    assert out.min() >= lo - 1e-6 * (hi - lo) and out.max() <= hi + 1e-6 * (hi - lo)


@pytest.mark.parametrize("bits", [1, 2, 8])
def test_unbiased_within_five_sigma(bits):
    n, reps = 200, 2000
    x = torch.randn(n, generator=torch.Generator().manual_seed(bits))
    codec = ZipML(bits=bits, seed=3)
    total = torch.zeros(n, dtype=torch.float64)
    for _ in range(reps):
        total += codec.roundtrip(x).double()
    mean = total / reps
    lo, hi = float(x.min()), float(x.max())
    step = (hi - lo) / (2**bits - 1)
    pos = (x.double() - lo) / step
    f = pos - pos.floor()
    se = step * (f * (1 - f) / reps).sqrt()
    # plus float32 rounding of the decode grid lo + k * step (k up to 2^bits - 1)
    assert torch.all((mean - x.double()).abs() <= 5 * se + 1e-6 * step + 2.5e-7 * (abs(lo) + abs(hi)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("value", [0.0, 1.5, -3.25e-7, 6e4])
def test_constant_tensor_round_trips_exactly(dtype, value):
    x = torch.full((37,), value).to(dtype)
    for bits in (1, 8, 16):
        out = ZipML(bits=bits).roundtrip(x)
        assert out.dtype == dtype and torch.equal(out, x)


@pytest.mark.parametrize("bits", range(1, 17))
def test_payload_sizes(bits):
    for n in (1, 9, 1000):
        p = ZipML(bits=bits).encode(torch.randn(n))
        assert [t.dtype for t in p.sections] == [torch.float32, torch.uint8]
        assert p.data_nbytes == 8 + math.ceil(n * bits / 8)
        assert p.nbytes == len(p.to_bytes()) == p.data_nbytes + p.overhead_nbytes


def test_registry_presets_and_params():
    assert get("zipml8").bits == 8 and get("zipml16").bits == 16
    x = torch.randn(1000)
    assert get("zipml8", seed=1).encode(x).to_bytes() == get("zipml8", seed=1).encode(x).to_bytes()
    assert get("zipml8", seed=1).encode(x).to_bytes() != get("zipml8", seed=2).encode(x).to_bytes()
    for kw in ({"bits": 0}, {"bits": 17}, {"bits": 8.0}, {"seed": "1"}):
        with pytest.raises(InvalidParameterError):
            ZipML(**kw)


@pytest.mark.parametrize("seed", range(5))
def test_16_bit_error_is_tiny(seed):
    # Stochastic rounding moves a value at most one step; decoding computes
    # lo + index * step in fp32, which adds a few ulps of the range's magnitude.
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(seed))
    out = ZipML(bits=16).roundtrip(x)
    step = float(x.max() - x.min()) / 65535
    ulps = 4 * torch.finfo(torch.float32).eps * float(x.abs().max())
    assert float((out - x).abs().max()) <= step + ulps


@pytest.mark.parametrize("bits", [8, 12])
def test_hostile_payloads(bits):
    n = 10
    codec = ZipML(bits=bits)
    good = codec.encode(torch.randn(n))
    rng, packed = good.sections
    cases = [
        (torch.tensor([1.0, 0.0]), packed),  # min > max
        (torch.tensor([float("nan"), 1.0]), packed),
        (torch.tensor([0.0, float("inf")]), packed),
        (torch.tensor([0.0]), packed),
        (rng, packed[:-1]),
        (rng, torch.cat([packed, packed[:1]])),
        (rng.double(), packed),
        (rng, packed, packed),
    ]
    for sections in cases:
        payload = Payload(ZipML.codec_id, torch.float32, (n,), codec.params, tuple(sections))
        with pytest.raises(CorruptPayloadError):
            codec.decode(payload)
        with pytest.raises(CorruptPayloadError):
            decode(Payload.from_bytes(payload.to_bytes()))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_range_near_the_float32_maximum_that_rounds_past_it_is_rejected(mode):
    """Codes at the top of a range with an end above half the float32 maximum: the float32 step's
    rounding carries ``min + code * step`` past the maximum, to Inf (no encoder writes this range and
    these codes together); decode scans such ranges and raises, in either mode. A range within half
    the maximum decodes with no scan (ZipML.decodes_finite) and stays finite."""
    from gcbench.compressors.kernels import core as fused

    f32max = float(np.finfo(np.float32).max)
    lo = float(np.float32(f32max * 0.5005001500750376))  # found by a search: overflows by rounding
    n = 20_000
    with fused.forced(mode):
        codec = ZipML(bits=8)
        top = torch.full((n,), 255, dtype=torch.uint8)
        bad = Payload(ZipML.codec_id, torch.float32, (n,), codec.params, (torch.tensor([lo, f32max]), top))
        with pytest.raises(CorruptPayloadError, match="non-finite"):
            codec.decode(bad)
        half = float(np.float32(f32max / 2))
        fine = Payload(ZipML.codec_id, torch.float32, (n,), codec.params, (torch.tensor([-half, half]), top))
        assert torch.isfinite(codec.decode(fine)).all()


def test_padding_bits_are_rejected():
    codec = ZipML(bits=3)
    good = codec.encode(torch.randn(9))  # 27 bits: 5 padding bits in the last byte
    rng, packed = good.sections
    bad = torch.cat([packed[:-1], packed[-1:] | 0x80])
    with pytest.raises(CorruptPayloadError):
        codec.decode(Payload(ZipML.codec_id, torch.float32, (9,), codec.params, (rng, bad)))
    assert torch.equal(pack_bits(unpack_bits(packed, 3, 9), 3), packed)


def test_float64_range_is_rounded_outwards():
    x = torch.tensor([0.1, 0.2, 0.30000000000000004, 1 / 3], dtype=torch.float64)
    p = ZipML(bits=4).encode(x)
    lo, hi = p.sections[0].double().tolist()
    assert lo <= float(x.min()) and hi >= float(x.max())
    assert lo == pytest.approx(0.1, rel=1e-7) and hi == pytest.approx(1 / 3, rel=1e-7)
    with pytest.raises(UnsupportedInputError):
        ZipML().encode(torch.tensor([0.0, 1e300], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_dtypes(dtype):
    x = torch.randn(300, generator=torch.Generator().manual_seed(8)).to(dtype)
    codec = ZipML(bits=8)
    out = codec.roundtrip(x)
    assert out.dtype == dtype
    step = float(x.double().max() - x.double().min()) / 255
    assert float((out.double() - x.double()).abs().max()) <= step * 1.01 + 1e-2 * float(x.double().abs().max())


def test_extreme_ranges_stay_finite():
    for x in (torch.tensor([-3e38, 3e38, 0.0, 1e38]), torch.tensor([1e-30, -1e-30, 5e-31])):
        for bits in (1, 8, 16):
            out = ZipML(bits=bits).roundtrip(x)
            assert torch.all(torch.isfinite(out))
            assert out.min() >= x.min() and out.max() <= x.max() * (1 + 1e-6)
    # a subnormal range is widened upwards (to 2**-110) so that the scale stays finite
    x = torch.tensor([1e-42, 2e-42, 0.0])
    p = ZipML(bits=8).encode(x)
    lo, hi = p.sections[0].tolist()
    assert lo == 0.0 and 2e-42 <= hi <= 2.0**-109
    assert torch.all(torch.isfinite(ZipML(bits=8).decode(p)))
    # small but normal ranges keep their resolution
    x = torch.tensor([1e-30, -1e-30, 5e-31])
    out = ZipML(bits=16).roundtrip(x)
    assert torch.allclose(out, x, rtol=0, atol=2e-30 / 65535 * 1.01)


@pytest.mark.parametrize("device", devices())
def test_device_round_trip(device):
    x = torch.randn(1000, device=device)
    for bits in (8, 16):
        p = ZipML(bits=bits).encode(x)
        out = ZipML(bits=bits).decode(p)
        assert out.device.type == device
        step = float(x.max() - x.min()) / (2**bits - 1)
        assert float((out - x).abs().max()) <= step * 1.001


@pytest.mark.parametrize("bits", [3, 8, 12])
def test_chunked_encoding_is_identical(monkeypatch, bits):
    x = torch.randn(3001, generator=torch.Generator().manual_seed(bits))
    whole = ZipML(bits=bits).encode(x)
    monkeypatch.setattr(kernel_module, "CHUNK", 40)
    chunked = ZipML(bits=bits).encode(x)
    assert whole.to_bytes() == chunked.to_bytes()
    assert torch.equal(ZipML(bits=bits).decode(chunked), ZipML(bits=bits).decode(whole))
