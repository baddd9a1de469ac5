"""QSGD (Alistarh et al., NeurIPS 2017): naive reference, Lemma 3.1, wire format, hostile payloads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import devices
from dither_reference import uniforms
from gcbench.compressors import CorruptPayloadError, InvalidParameterError, Payload, decode, get
from gcbench.compressors.codecs import rounding
from gcbench.compressors.wire.bitpack import pack_bits, unpack_bits
from gcbench.compressors.codecs.qsgd import QSGD
from hypothesis import given
from hypothesis import strategies as st


def naive_qsgd(x: np.ndarray, s: int, d: int, norm: str, u: np.ndarray):
    """Python-loop QSGD (Sec. 3.1): per bucket, l = floor(|v_i| s / ||v||), then l+1 w.p. the remainder.

    Written with the paper's magnitude/sign split: with uniform u_i, a negative value rounds its
    magnitude up when u_i < frac (the mirror image of the positive case, u_i >= 1 - frac), which is
    what rounding the signed value y_i + s + u_i down does. Returns (norms, signed codes level + s,
    distance of the rounding argument to the nearest integer).
    """
    norms, codes, margin = [], [], []
    for b0 in range(0, len(x), d):
        v = x[b0 : b0 + d].astype(np.float64)
        nv = math.sqrt(sum(t * t for t in v)) if norm == "l2" else max(abs(t) for t in v)
        norms.append(nv)
        for i, t in enumerate(v):
            y = abs(t) * s / nv if nv > 0 else 0.0
            low = math.floor(y)
            frac = y - low
            ui = u[b0 + i]
            if t >= 0:
                level = low + (1 if ui >= 1 - frac else 0)
                arg = y + ui
            else:
                level = -(low + (1 if ui < frac else 0))
                arg = -y + ui
            codes.append(level + s)
            margin.append(abs(arg - round(arg)))
    return np.array(norms), np.array(codes), np.array(margin)


def codes_of(codec: QSGD, payload: Payload) -> torch.Tensor:
    return unpack_bits(payload.sections[1], codec.bits, payload.numel)


@pytest.mark.parametrize("norm", ["l2", "max"])
@pytest.mark.parametrize("s,d,n", [(127, 128, 300), (1, 16, 100), (7, 32, 257), (3, 5, 64), (300, 64, 130)])
def test_matches_naive_reference(s, d, n, norm):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n + s)) * 3
    x[::7] = 0.0
    codec = QSGD(levels=s, bucket_size=d, norm=norm, seed=5)
    payload = codec.encode(x, generator=torch.Generator().manual_seed(5))
    ref_norms, ref_codes, margin = naive_qsgd(x.numpy(), s, d, norm, uniforms(5, n, d))
    np.testing.assert_allclose(payload.sections[0].numpy(), ref_norms, rtol=2e-6)
    codes = codes_of(codec, payload).numpy()
    # float32 arithmetic may land on the other side of an integer only when the argument is that close
    differ = codes != ref_codes
    assert np.all(margin[differ] < 1e-4 * s), (codes[differ], ref_codes[differ])
    assert np.all(np.abs(codes - ref_codes) <= 1)
    assert differ.sum() <= max(1, n // 100)
    # decoded value = sign * level * norm / s, exactly as the paper writes it
    out = codec.decode(payload).numpy().astype(np.float64)
    expect = (codes - s) * np.repeat(payload.sections[0].numpy().astype(np.float64), d)[:n] / s
    np.testing.assert_allclose(out, expect, rtol=1e-6, atol=0)
    assert np.all(out[x.numpy() == 0] == 0)


def test_chunked_encoding_is_identical(monkeypatch):
    x = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    whole = QSGD(levels=7, bucket_size=24).encode(x)
    monkeypatch.setattr(rounding, "CHUNK", 100)  # many chunks of whole buckets
    assert rounding.chunk_size(5000, 24, x.device) < 5000
    chunked = QSGD(levels=7, bucket_size=24).encode(x)
    assert whole.to_bytes() == chunked.to_bytes()
    assert torch.equal(QSGD(levels=7, bucket_size=24).decode(chunked), QSGD(levels=7, bucket_size=24).decode(whole))
    for s, d in ((1, 5), (127, 128), (300, 7)):  # 2-bit, 8-bit and 10-bit (planar) codes
        monkeypatch.setattr(rounding, "CHUNK", 1 << 22)
        ref = QSGD(levels=s, bucket_size=d).encode(x).to_bytes()
        monkeypatch.setattr(rounding, "CHUNK", 50)
        assert QSGD(levels=s, bucket_size=d).encode(x).to_bytes() == ref


def test_neighbouring_levels_only():
    """Every decoded value is one of the two grid points around the input (Sec. 3.1)."""
    x = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    for s in (1, 4, 127):
        codec = QSGD(levels=s, bucket_size=100)
        p = codec.encode(x)
        step = np.repeat(p.sections[0].numpy().astype(np.float64) / s, 100)
        q = codec.decode(p).numpy() / step
        y = x.numpy() / step
        level = np.rint(q)
        assert np.all(np.abs(q - level) < 1e-4)
        near = np.abs(y - np.rint(y)) < 1e-4  # float32 may put y on either side of an integer
        assert np.all((level == np.floor(y)) | (level == np.floor(y) + 1) | (near & (np.abs(level - y) < 1 + 1e-4)))
        assert np.all(np.abs(level) <= s)


@pytest.mark.parametrize("s,norm", [(1, "l2"), (3, "l2"), (2, "max")])
def test_unbiased_within_five_sigma(s, norm):
    n, d, reps = 200, 50, 1500
    x = torch.randn(n, generator=torch.Generator().manual_seed(s)).double()
    codec = QSGD(levels=s, bucket_size=d, norm=norm, seed=11)
    total = torch.zeros(n, dtype=torch.float64)
    for _ in range(reps):
        total += codec.roundtrip(x.float()).double()
    mean = total / reps
    x32 = x.float().double()
    # exact per-element variance of the quantizer: step^2 f (1 - f)
    p = codec.encode(x.float())
    step = p.sections[0].double().repeat_interleave(d)[:n] / s
    y = x32.abs() / step
    f = y - y.floor()
    se = (step**2 * f * (1 - f) / reps).sqrt()
    assert torch.all((mean - x32).abs() <= 5 * se + 1e-6 * step)


def lemma_bound(v: np.ndarray, s: int) -> float:
    d = v.size
    return min(d / s**2, math.sqrt(d) / s) * float(np.dot(v, v))


def exact_mse(v: np.ndarray, s: int) -> float:
    nv = float(np.linalg.norm(v))
    y = np.abs(v) * s / nv
    f = y - np.floor(y)
    return float(np.sum((nv / s) ** 2 * f * (1 - f)))


@given(st.integers(1, 200), st.integers(1, 130), st.integers(0, 2**16), st.sampled_from(["gauss", "sparse", "flat"]))
def test_exact_variance_within_lemma_3_1(s, d, seed, kind):
    rng = np.random.default_rng(seed)
    if kind == "gauss":
        v = rng.standard_normal(d)
    elif kind == "sparse":
        v = (rng.random(d) < 0.1) * rng.standard_normal(d)
    else:
        v = np.ones(d)
    if not v.any():
        v[0] = 1.0
    assert exact_mse(v, s) <= lemma_bound(v, s) * (1 + 1e-9)


@pytest.mark.parametrize("s,d", [(1, 128), (2, 16), (7, 128), (127, 128)])
def test_empirical_variance_within_lemma_3_1(s, d):
    """E||Q(v) - v||^2 <= min(d/s^2, sqrt(d)/s) ||v||^2 per bucket, measured over many draws."""
    reps, nb = 400, 4
    g = torch.Generator().manual_seed(d + s)
    x = torch.randn(nb * d, generator=g)
    x[d : 2 * d] = 1.0  # a flat bucket: where the d/s^2 term is closest to tight for s = 1
    codec = QSGD(levels=s, bucket_size=d, seed=3)
    err = torch.zeros(nb, dtype=torch.float64)
    for _ in range(reps):
        e = (codec.roundtrip(x) - x).double().view(nb, d)
        err += (e * e).sum(1)
    err /= reps
    for b in range(nb):
        v = x[b * d : (b + 1) * d].double().numpy()
        assert err[b] <= lemma_bound(v, s)
        # and the measurement agrees with the exact expectation (so the bound is not vacuous here)
        assert err[b] == pytest.approx(exact_mse(v, s), rel=0.1, abs=1e-9 * float(np.dot(v, v)))


@pytest.mark.parametrize("s,bits", [(1, 2), (2, 3), (3, 3), (7, 4), (8, 5), (127, 8), (128, 9), (1000, 11)])
@pytest.mark.parametrize("n,d", [(1, 128), (128, 128), (1000, 128), (777, 10)])
def test_payload_sizes(s, bits, n, d):
    codec = QSGD(levels=s, bucket_size=d)
    assert codec.bits == bits
    p = codec.encode(torch.randn(n))
    assert [t.dtype for t in p.sections] == [torch.float32, torch.uint8]
    assert p.sections[0].numel() == math.ceil(n / d)
    assert p.sections[1].numel() == math.ceil(n * bits / 8)
    assert p.data_nbytes == 4 * math.ceil(n / d) + math.ceil(n * bits / 8)
    assert p.nbytes == len(p.to_bytes()) == p.data_nbytes + p.overhead_nbytes


def test_registry_defaults_and_seed():
    codec = get("qsgd")
    assert isinstance(codec, QSGD) and (codec.levels, codec.bucket_size, codec.norm, codec.bits) == (127, 128, "l2", 8)
    x = torch.randn(3000)
    assert get("qsgd", seed=4).encode(x).to_bytes() == get("qsgd", seed=4).encode(x).to_bytes()
    assert get("qsgd", seed=4).encode(x).to_bytes() != get("qsgd", seed=5).encode(x).to_bytes()
    p = Payload.from_bytes(codec.encode(x).to_bytes())
    assert torch.equal(decode(p), codec.decode(p))


@pytest.mark.parametrize(
    "kw", [{"levels": 0}, {"levels": 32768}, {"levels": 2.0}, {"bucket_size": 0}, {"norm": "l1"}, {"seed": 1.5}]
)
def test_invalid_parameters(kw):
    with pytest.raises(InvalidParameterError):
        QSGD(**kw)


def _payload(codec: QSGD, n: int, sections) -> Payload:
    return Payload(QSGD.codec_id, torch.float32, (n,), codec.params, tuple(sections))


def test_hostile_payloads():
    n = 10
    codec = QSGD(levels=1, bucket_size=4)  # 2s + 1 = 3 symbols in 2-bit fields
    good = codec.encode(torch.randn(n))
    norms, packed = good.sections
    codes = unpack_bits(packed, 2, n)
    bad_codes = codes.clone()
    bad_codes[3] = 3  # a 2-bit field can hold 3, but 2s = 2
    cases = {
        "level above 2s": (norms, pack_bits(bad_codes, 2)),
        "nan norm": (torch.tensor([1.0, float("nan"), 1.0]), packed),
        "inf norm": (torch.tensor([1.0, float("inf"), 1.0]), packed),
        "negative norm": (torch.tensor([1.0, -1.0, 1.0]), packed),
        "short norms": (norms[:2], packed),
        "long packed": (norms, torch.cat([packed, packed[:1]])),
        "short packed": (norms, packed[:-1]),
        "float64 norms": (norms.double(), packed),
        "int8 packed": (norms, packed.to(torch.int8)),
        "one section": (norms,),
        "three sections": (norms, packed, packed),
        "padding bits": (norms, torch.cat([packed[:-1], packed[-1:] | 0x80])),
    }
    for sections in cases.values():
        with pytest.raises(CorruptPayloadError):
            codec.decode(_payload(codec, n, sections))
        # the same through the wire format and the standalone decoder
        wire = _payload(codec, n, sections).to_bytes()
        with pytest.raises(CorruptPayloadError):
            decode(Payload.from_bytes(wire))
    assert torch.equal(codec.decode(_payload(codec, n, good.sections)), codec.decode(good))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_dtypes(dtype):
    x = (torch.randn(500, generator=torch.Generator().manual_seed(9)) * 2).to(dtype)
    codec = QSGD(levels=15, bucket_size=64)
    p = codec.encode(x, generator=torch.Generator().manual_seed(1))
    ref = codec.encode(x.float(), generator=torch.Generator().manual_seed(1))
    # the quantizer works on float32(x): identical sections
    assert all(torch.equal(a, b) for a, b in zip(p.sections, ref.sections))
    out = codec.decode(p)
    assert out.dtype == dtype and out.shape == x.shape
    step = p.sections[0].double().repeat_interleave(64)[:500] / 15
    assert torch.all((out.double() - x.double()).abs() <= step * 1.01 + 1e-2 * x.double().abs())


def test_extreme_magnitudes_stay_finite_and_bounded():
    codec = QSGD(levels=127, bucket_size=16)
    for scale in (1e-40, 1e-30, 1e-20, 1e20, 1e30, 3e38):
        x = torch.randn(64, generator=torch.Generator().manual_seed(0)).clamp(-1, 1) * scale
        p = codec.encode(x)
        norms = p.sections[0]
        assert torch.all(torch.isfinite(norms))
        # every normaliser covers its bucket's largest value: levels never clip
        assert torch.all(norms >= x.abs().view(4, 16).amax(1))
        out = codec.decode(p)
        assert torch.all(torch.isfinite(out))
        assert torch.all(out.abs() <= norms.repeat_interleave(16) * 1.000001)
    zeros = torch.zeros(100)
    assert torch.equal(codec.roundtrip(zeros), zeros)


def test_large_bucket_norm_is_exact():
    """A bucket whose squares overflow float32 gets the float64 norm (within float32 rounding, not inf)."""
    x = torch.full((8,), 1e20)
    p = QSGD(levels=3, bucket_size=8).encode(x)
    assert p.sections[0][0].item() == pytest.approx(1e20 * math.sqrt(8), rel=1e-6)


@pytest.mark.parametrize("device", devices())
def test_device_round_trip(device):
    x = torch.randn(1000, device=device)
    codec = QSGD(levels=7, bucket_size=128)
    p = codec.encode(x)
    assert all(s.device.type == device for s in p.sections)
    out = codec.decode(p)
    assert out.device.type == device
    step = p.sections[0].repeat_interleave(128)[:1000] / 7
    assert torch.all((out - x).abs() <= step * 1.0001)


@pytest.mark.parametrize("levels", [1, 3, 7, 64, 127])
def test_bounded_fast_path_writes_the_same_codes(levels):
    # QSGD passes bounded=True (clamp on the uint8 codes after the float->uint8 conversion); the
    # generic float clamp must give identical bytes for the same generator state
    g = torch.Generator().manual_seed(levels)
    x = torch.randn(10_007, generator=g) * torch.rand(10_007, generator=g) ** 4
    x[::97] = 0.0
    codec = QSGD(levels=levels, bucket_size=128)
    norms = codec._norms(x)
    scale = (levels / norms.to(torch.float64)).to(torch.float32)
    kw = {"offset": levels, "top": 2 * levels, "bits": codec.bits, "bucket": 128}
    fast = rounding.stochastic_round(
        x, scale, generator=torch.Generator().manual_seed(5), bounded=True, **kw
    )
    slow = rounding.stochastic_round(x, scale, generator=torch.Generator().manual_seed(5), **kw)
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_decode_packed_fast_paths_equal_the_formula(bits):
    # generic path (one factor) and int8 path (per-bucket factors) against numpy float32 arithmetic
    # rounded the way the generic path rounds: float32 (code - offset), times factor, plus base
    top = (1 << bits) - 2
    offset = top // 2
    g = torch.Generator().manual_seed(bits)
    codes = torch.randint(0, top + 1, (3001,), generator=g, dtype=torch.int64)
    packed = pack_bits(codes, bits)
    c32 = codes.numpy().astype(np.float32)
    got = rounding.decode_packed(
        packed, numel=3001, bits=bits, top=top, offset=0.0, factor=0.37, base=-1.5
    )
    want = (c32 * np.float32(0.37)).astype(np.float32) + np.float32(-1.5)
    np.testing.assert_array_equal(got.numpy(), want)
    factor = torch.rand(3001 // 100 + 1, generator=g, dtype=torch.float32) + 0.5
    got = rounding.decode_packed(
        packed, numel=3001, bits=bits, top=top, offset=float(offset), factor=factor, bucket=100
    )
    want = (c32 - np.float32(offset)) * np.repeat(factor.numpy(), 100)[:3001]
    np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))
    bad = codes.clone()
    bad[-1] = top + 1
    with pytest.raises(CorruptPayloadError):
        rounding.decode_packed(
            pack_bits(bad, bits), numel=3001, bits=bits, top=top, offset=float(offset), factor=factor, bucket=100
        )


@pytest.mark.parametrize("levels,bucket", [(1, 5), (3, 24), (127, 128), (300, 7)])
def test_chunked_decoding_is_identical_and_checks_every_chunk(monkeypatch, levels, bucket):
    # decoding runs in DECODE_CHUNK pieces (separate from the encoder's CHUNK): many small chunks
    # must give the same values, and a code above 2s in a late chunk must still be rejected
    x = torch.randn(5003, generator=torch.Generator().manual_seed(levels))
    codec = QSGD(levels=levels, bucket_size=bucket)
    p = codec.encode(x)
    whole = codec.decode(p)
    monkeypatch.setattr(rounding, "DECODE_CHUNK", 64)
    assert rounding.chunk_size(5003, bucket, x.device, rounding.DECODE_CHUNK) < 5003
    assert torch.equal(codec.decode(p), whole)
    norms, packed = p.sections
    codes = unpack_bits(packed, codec.bits, 5003)
    codes[4900] = 2 * levels + 1  # invalid: above the largest signed level
    if 2 * levels + 1 < (1 << codec.bits):
        bad = Payload(QSGD.codec_id, torch.float32, (5003,), codec.params, (norms, pack_bits(codes, codec.bits)))
        with pytest.raises(CorruptPayloadError):
            codec.decode(bad)


def test_round_down_nonneg_f32_equals_negated_round_up():
    # the decoder's branch-free round-down (bit decrement) against the reference -round_up(-v)
    f32 = torch.finfo(torch.float32)
    g = torch.Generator().manual_seed(11)
    exponent = torch.randint(-46, 38, (20_000,), generator=g).double()
    v = torch.rand(20_000, generator=g, dtype=torch.float64) * 10.0**exponent
    edge = torch.tensor(
        [0.0, 2.0**-150, 2.0**-149, 3 * 2.0**-151, 1.0, 1 + 2.0**-30, f32.max, f32.max * (1 - 2.0**-30)],
        dtype=torch.float64,
    )
    v = torch.cat([v, edge]).clamp(max=f32.max)
    got = rounding.round_down_nonneg_f32(v)
    want = -rounding.round_up_f32(-v)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert bool((got.to(torch.float64) <= v).all())


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_16_bit_code_above_top_raises_in_both_modes(mode):
    """16-bit codes are decoded from their two byte planes (no int32 unpacking, both modes): a code
    above 2s (65535 > 65534 at s = 32767) still raises, with the same message."""
    from gcbench.compressors.kernels import core as fused

    codec = QSGD(levels=32767, bucket_size=128)
    with fused.forced(mode):
        p = codec.encode(torch.randn(1000, generator=torch.Generator().manual_seed(3)))
        norms, packed = p.sections
        bad = packed.clone()
        bad[999] = bad[1999] = 255  # value 999's low and high bytes: code 65535
        with pytest.raises(CorruptPayloadError, match="code 65535 exceeds the largest valid code 65534"):
            codec.decode(_payload(codec, 1000, (norms, bad)))
