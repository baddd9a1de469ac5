"""TernGrad (Wen et al., NeurIPS 2017): naive reference, unbiasedness w.r.t. the clipped gradient."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import devices
from dither_reference import uniforms
from gcbench.compressors import CorruptPayloadError, InvalidParameterError, NonFiniteGradientError, Payload, decode, get
from gcbench.compressors.codecs import rounding as kernel_module
from gcbench.compressors.wire.bitpack import pack_bits, unpack_bits
from gcbench.compressors.codecs.terngrad import TernGrad, population_std


def naive_terngrad(x: np.ndarray, c: float, u: np.ndarray):
    """Python loop of Sec. 3 / 3.3: clip at c*sigma, s = max |clipped|, b_i = 1 w.p. |g_i|/s.

    With uniform u_i the Bernoulli is decided as ``u_i >= 1 - |g_i|/s`` for g_i >= 0 and
    ``u_i < |g_i|/s`` below zero (the same probabilities as the paper's ``u < |g|/s``; this coupling
    is the one of rounding ``g/s + 1 + u`` down). Returns (s, trits in {-1,0,1}, margins).
    """
    mean = sum(x) / len(x)
    sigma = math.sqrt(sum((t - mean) ** 2 for t in x) / len(x))
    thr = c * sigma if c > 0 and sigma > 0 else math.inf
    g = [min(max(t, -thr), thr) for t in x]
    s = max(abs(t) for t in g)
    trits, margin = [], []
    for gi, ui in zip(g, u):
        p = abs(gi) / s if s > 0 else 0.0
        if gi >= 0:
            trits.append(1 if ui >= 1 - p else 0)
        else:
            trits.append(-1 if ui < p else 0)
        margin.append(min(abs(ui - (1 - p)), abs(ui - p)))
    return s, np.array(trits), np.array(margin)


@pytest.mark.parametrize("c", [2.5, 1.0, 0.0])
@pytest.mark.parametrize("n", [1, 7, 333])
@pytest.mark.parametrize("span", [None, 40])  # 40: rows short enough that these sizes pair values (dither.split_point)
def test_matches_naive_reference(c, n, span, monkeypatch):
    if span:
        monkeypatch.setattr(kernel_module, "FUSED_SPAN", span)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 0.1
    if n > 10:
        x[5] = 4.0  # an outlier that clipping removes
        x[::11] = 0.0
    codec = TernGrad(clip_sigma=c, seed=2)
    p = codec.encode(x, generator=torch.Generator().manual_seed(2))
    s, trits, margin = naive_terngrad(x.double().numpy(), c, uniforms(2, n, kernel_module.FUSED_SPAN))
    assert p.sections[0].item() == pytest.approx(s, rel=1e-6)
    got = unpack_bits(p.sections[1], 2, n).numpy() - 1
    differ = got != trits
    assert np.all(margin[differ] < 1e-5) and differ.sum() <= 1
    out = codec.decode(p)
    assert torch.equal(out, torch.from_numpy(got).float() * p.sections[0])


def test_population_std_is_exact_even_with_cancellation():
    for mean, std in [(0.0, 1.0), (1e4, 1e-2), (-3.0, 0.0), (1e-30, 1e-31), (0.5, 1e20)]:
        x = (torch.randn(10_000, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * std + mean).float()
        ref = float(np.std(x.double().numpy()))
        assert population_std(x) == pytest.approx(ref, rel=1e-5, abs=1e-45)


def test_population_std_of_a_long_tensor():
    # a single float32 accumulation over 2**21 squares drifts by ~1e-5; the codec's must not
    x = torch.randn(2**21 + 5, generator=torch.Generator().manual_seed(2)) + 0.3
    ref = float(np.std(x.double().numpy()))
    assert population_std(x) == pytest.approx(ref, rel=1e-6)


def test_scale_is_min_of_max_and_clip_threshold():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(3))
    sigma = float(np.std(x.double().numpy()))
    assert TernGrad(clip_sigma=2.5).encode(x).sections[0].item() == pytest.approx(2.5 * sigma, rel=1e-6)
    assert TernGrad(clip_sigma=0.0).encode(x).sections[0].item() == pytest.approx(float(x.abs().max()), rel=1e-7)
    assert TernGrad(clip_sigma=100.0).encode(x).sections[0].item() == pytest.approx(float(x.abs().max()), rel=1e-7)


def _mean_decode(codec, x, reps):
    total = torch.zeros(x.numel(), dtype=torch.float64)
    for _ in range(reps):
        total += codec.roundtrip(x).double()
    return total / reps


@pytest.mark.parametrize("c", [2.5, 1.0])
def test_unbiased_for_the_clipped_gradient(c):
    n, reps = 300, 2000
    x = torch.randn(n, generator=torch.Generator().manual_seed(4))
    x[0], x[1] = 5.0, -6.0
    codec = TernGrad(clip_sigma=c, seed=1)
    s = codec.encode(x).sections[0].double().item()
    clipped = x.double().clamp(-s, s)
    mean = _mean_decode(codec, x, reps)
    p = clipped.abs() / s
    se = s * (p * (1 - p) / reps).sqrt()
    assert torch.all((mean - clipped).abs() <= 5 * se + 1e-6 * s)
    # and biased for the raw gradient where clipping bites (why unbiased = False)
    assert mean[0] == pytest.approx(s) and float(x[0]) > s * 1.5


def test_unbiased_without_clipping_and_paper_probabilities():
    n, reps = 200, 2000
    x = torch.randn(n, generator=torch.Generator().manual_seed(5))
    codec = TernGrad(clip_sigma=0.0, seed=9)
    s = float(x.abs().max())
    hits = torch.zeros(n, dtype=torch.float64)
    for _ in range(reps):
        out = codec.roundtrip(x).double()
        assert torch.all((out == 0) | (out == s * x.sign().double()))  # s * sign(g) * b
        hits += (out != 0).double()
    freq = hits / reps
    p = x.double().abs() / s  # b ~ Bernoulli(|g|/s), eq. (2)
    assert torch.all((freq - p).abs() <= 5 * (p * (1 - p) / reps).sqrt() + 1e-6)


def test_constant_and_zero_tensors_round_trip_exactly():
    for v in (0.0, 0.75, -2.0):
        x = torch.full((100,), v)
        assert torch.equal(TernGrad().roundtrip(x), x)  # sigma = 0: no clipping, |g|/s = 1 or 0


@pytest.mark.parametrize("n", [1, 4, 5, 1001])
def test_payload_sizes(n):
    p = TernGrad().encode(torch.randn(n))
    assert [t.dtype for t in p.sections] == [torch.float32, torch.uint8]
    assert p.data_nbytes == 4 + math.ceil(n / 4)
    assert p.nbytes == len(p.to_bytes()) == p.data_nbytes + p.overhead_nbytes


def test_registry_and_params():
    codec = get("terngrad")
    assert isinstance(codec, TernGrad) and codec.clip_sigma == 2.5 and not TernGrad.unbiased
    assert get("terngrad", clip_sigma=0).clip_sigma == 0.0
    for kw in ({"clip_sigma": -1.0}, {"clip_sigma": float("nan")}, {"clip_sigma": "2"}, {"seed": 0.5}):
        with pytest.raises(InvalidParameterError):
            TernGrad(**kw)


def test_hostile_payloads():
    n = 9
    codec = TernGrad()
    good = codec.encode(torch.randn(n))
    scale, packed = good.sections
    trits = unpack_bits(packed, 2, n)
    bad = trits.clone()
    bad[4] = 3
    cases = [
        (scale, pack_bits(bad, 2)),  # invalid trit code 3
        (torch.tensor([float("nan")]), packed),
        (torch.tensor([float("inf")]), packed),
        (torch.tensor([-1.0]), packed),
        (torch.tensor([1.0, 1.0]), packed),
        (scale, packed[:-1]),
        (scale, torch.cat([packed, packed[:1]])),
        (scale, torch.cat([packed[:-1], packed[-1:] | 0xC0])),  # padding bits
        (scale.double(), packed),
        (packed,),
    ]
    for sections in cases:
        payload = Payload(TernGrad.codec_id, torch.float32, (n,), codec.params, tuple(sections))
        with pytest.raises(CorruptPayloadError):
            codec.decode(payload)
        with pytest.raises(CorruptPayloadError):
            decode(Payload.from_bytes(payload.to_bytes()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_dtypes(dtype):
    x = torch.randn(400, generator=torch.Generator().manual_seed(6)).to(dtype)
    codec = TernGrad()
    p = codec.encode(x, generator=torch.Generator().manual_seed(0))
    ref = codec.encode(x.float(), generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(p.sections, ref.sections))
    out = codec.decode(p)
    assert out.dtype == dtype
    s = p.sections[0].item()
    s_cast = float(torch.tensor(s, dtype=dtype))
    assert set(out.double().unique().tolist()) <= {-s_cast, 0.0, s_cast}


@pytest.mark.parametrize("device", devices())
def test_device_round_trip(device):
    x = torch.randn(1000, device=device)
    p = TernGrad().encode(x)
    out = TernGrad().decode(p)
    s = p.sections[0].item()
    assert out.device.type == device
    assert torch.all((out == 0) | (out.abs() == s))


def test_chunked_encoding_is_identical_and_checks_every_chunk(monkeypatch):
    x = torch.randn(5001, generator=torch.Generator().manual_seed(7))
    whole = TernGrad().encode(x)
    monkeypatch.setattr(kernel_module, "CHUNK", 64)  # 79 chunks of 64 values = 16 packed bytes
    chunked = TernGrad().encode(x)
    assert whole.to_bytes() == chunked.to_bytes()
    assert torch.equal(TernGrad().decode(chunked), TernGrad().decode(whole))
    scale, packed = whole.sections
    bad = packed.clone()
    bad[1000] |= 0x03  # a trit code 3 in the middle of a late chunk
    with pytest.raises(CorruptPayloadError):
        TernGrad().decode(Payload(TernGrad.codec_id, torch.float32, (5001,), TernGrad().params, (scale, bad)))


@pytest.mark.parametrize("n", [1, 31, 32, 33, 1000, 70_001])
@pytest.mark.parametrize("scale", [1.0, 1e25, 1e-30, 3e-13])
def test_statistics_in_one_read_equal_in_both_modes_and_match_float64(n, scale, monkeypatch):
    """abs_max_and_std's one-read statistics (fused.moments: 32-value columns summed in a fixed
    order, then a fixed-order float64 sum; eager in column chunks) give the same floats compiled and
    eager, and agree with float64 numpy; magnitudes whose float32 squares would overflow or
    underflow take the exact float64 path."""
    from gcbench.compressors.kernels import core as fused
    from gcbench.compressors.codecs import terngrad

    monkeypatch.setattr(terngrad, "MOMENT_CHUNK", 7)  # several eager column chunks
    x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3 + 0.25) * scale
    with fused.forced("eager"):
        eager = terngrad.abs_max_and_std(x)
    with fused.forced("compiled"):
        compiled = terngrad.abs_max_and_std(x)
    assert eager == compiled
    xd = x.double().numpy()
    assert eager[0] == float(np.abs(xd).max())
    assert math.isclose(eager[1], float(xd.std()), rel_tol=1e-5, abs_tol=1e-300)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 1057, 70_001, 2_100_000])
def test_fixed_sum_gives_the_same_bits_wherever_its_levels_run(n):
    """fixed_sum's levels on the tensor's device (as off the CPU) or in numpy on the host (as on the
    CPU): the same additions in the same order, so the same float."""
    from gcbench.compressors.codecs import terngrad

    v = torch.randn(n, generator=torch.Generator().manual_seed(n), dtype=torch.float64) * 1e3 + 0.1
    host = terngrad.fixed_sum(v)
    assert terngrad.fixed_sum(v, host_below=0) == host
    assert terngrad.fixed_sum(v, host_below=4096) == host
    assert math.isclose(host, float(v.sum()), rel_tol=1e-9)


@pytest.mark.parametrize("n", [32, 33, 1000, 70_001])
@pytest.mark.parametrize("scale", [1.0, 1e25, 3e-13])
def test_statistics_in_c_equal_the_eager_ones(n, scale):
    """In the default mode below the compile threshold the column statistics are one C call
    (kernels.moments.moments_c) with the eager reference's floats: the column sums bit for bit (a
    build that fused a product into the sum, or summed another row first, fails this test), the min
    and the max."""
    from gcbench.compressors.codecs import terngrad
    from gcbench.compressors.kernels import core as fused, native
    from gcbench.compressors.kernels.moments import MOMENTS_C, moments_c

    if native.library(MOMENTS_C) is None:
        pytest.skip("no C compiler here")
    x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3 + 0.25) * scale
    body = x[: n // 32 * 32].view(32, -1)
    s, q, lo, hi = moments_c(body)
    es, eq, elo, ehi = fused.moments.fn(body)
    assert torch.equal(s, es) and torch.equal(q, eq)
    assert (lo, hi) == (float(elo.min()), float(ehi.max()))
    with fused.forced("eager"):
        eager = terngrad.abs_max_and_std(x)
    before = native.call_count(MOMENTS_C)
    with fused.forced("auto"):
        assert terngrad.abs_max_and_std(x) == eager
    assert native.call_count(MOMENTS_C) == before + 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", [0, 31 * 40 + 39, 600])
def test_statistics_in_c_see_every_non_finite_value(bad, where):
    """A NaN or an infinity anywhere among the columns (first row, last value, in between) reaches
    the min or the max of the C statistics, and TernGrad's encode refuses the tensor."""
    from gcbench.compressors.kernels.moments import MOMENTS_C, moments_c
    from gcbench.compressors.kernels import native

    if native.library(MOMENTS_C) is None:
        pytest.skip("no C compiler here")
    x = torch.randn(32 * 40)
    x[where] = bad
    _, _, lo, hi = moments_c(x.view(32, 40))
    assert not (math.isfinite(lo) and math.isfinite(hi))
    with pytest.raises(NonFiniteGradientError):
        TernGrad().encode(x)


def test_statistics_in_c_refuse_other_tensors():
    from gcbench.compressors.kernels.moments import moments_c

    for bad in (torch.randn(31, 4), torch.randn(32, 4).double(), torch.randn(4, 32).t(), torch.randn(128)):
        with pytest.raises(ValueError):
            moments_c(bad)
