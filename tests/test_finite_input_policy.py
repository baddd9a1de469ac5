"""The finite-input policy, registry-wide.

Finite input gives a finite payload, finite state and a finite decode, or a typed error raised
before any state changes: narrowing casts saturate, overflowing arithmetic raises
``NumericOverflowError``. Values are drawn near each dtype's limits.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench import compressors
from gcbench.compressors import CorruptPayloadError, GCBenchError, NonFiniteGradientError, Payload, PayloadError
from gcbench.compressors.numerics import saturating_cast
from gcbench.compressors.errors import NumericOverflowError

NAMES = compressors.names()
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _near_limits(dtype: torch.dtype) -> list[float]:
    fi = torch.finfo(dtype)
    vals = [fi.max, fi.max * (1 - fi.eps), fi.max / 2, fi.max / 3, fi.max / 64]
    vals += [fi.tiny, fi.smallest_normal / 4, 0.0, 1.0]
    if dtype == torch.float64:
        vals += [3.5e38, 1e39, 1e300, 1e37]  # beyond float32: formats with float32 fields must cope
    return vals


@st.composite
def near_limit_tensors(draw):
    dtype = draw(st.sampled_from(DTYPES))
    vals = _near_limits(dtype)
    n = draw(st.integers(1, 96))
    picks = draw(st.lists(st.sampled_from(vals), min_size=n, max_size=n))
    signs = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    x = torch.tensor([v if s else -v for v, s in zip(picks, signs)], dtype=torch.float64).to(dtype)
    assert bool(torch.isfinite(x).all())
    if draw(st.booleans()) and n % 8 == 0:
        x = x.reshape(8, n // 8)  # a matrix: PowerSGD compresses it
    return x


def _wire_and_decode(codec, payload: Payload) -> torch.Tensor:
    for s in payload.sections:
        if s.is_floating_point():
            assert bool(torch.isfinite(s).all()), "a payload section holds NaN/Inf"
    out = codec.decode(Payload.from_bytes(payload.to_bytes()))
    dense = out.to_dense() if out.layout == torch.sparse_coo else out
    assert bool(torch.isfinite(dense).all()), "finite input decoded to NaN/Inf"
    return dense


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(NAMES), x=near_limit_tensors(), steps=st.integers(1, 3))
def test_finite_input_gives_finite_output_or_a_typed_error_and_no_state_change(name, x, steps):
    codec = compressors.get(name)
    twin = compressors.get(name)  # sees only the successful encodes
    ordinary = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).to(x.dtype)
    for _ in range(steps):
        try:
            payload = codec.encode(x, key="w")
        except PayloadError as err:  # an encoder's own payload is never corrupt
            raise AssertionError(f"encode raised a payload error: {err!r}") from err
        except GCBenchError:
            pass  # NonFiniteGradientError / NumericOverflowError / UnsupportedInputError: typed, before state
        else:
            twin.encode(x, key="w")
            _wire_and_decode(codec, payload)
    # whatever failed left no trace: the next ordinary encode matches the twin's, byte for byte (or
    # both raise the same error: the accumulated state itself may be near the limit)
    results = []
    for c in (codec, twin):
        try:
            results.append(c.encode(ordinary, key="w"))
        except GCBenchError as err:
            assert not isinstance(err, PayloadError)
            results.append(type(err))
    after, twin_after = results
    assert isinstance(after, Payload) == isinstance(twin_after, Payload)
    if isinstance(after, Payload):
        _wire_and_decode(codec, after)
        if codec.reproducible:
            assert after.to_bytes() == twin_after.to_bytes()
    else:
        assert after is twin_after


# --- saturating casts, overflow to infinity and the state it must not change ----------------------


@pytest.mark.parametrize("name", ["fp16", "bf16"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_casts_saturate(name, dtype):
    target = torch.float16 if name == "fp16" else torch.bfloat16
    top = torch.finfo(dtype).max
    x = torch.tensor([top, -top, 1.0, 0.0], dtype=dtype)
    out = compressors.get(name).roundtrip(x)
    assert bool(torch.isfinite(out).all()) and out.dtype == dtype
    expected_top = min(torch.finfo(target).max, torch.finfo(dtype).max)
    assert float(out[0]) == pytest.approx(expected_top, rel=0.01) and float(out[1]) == -float(out[0])
    assert float(out[2]) == 1.0 and float(out[3]) == 0.0


def test_saturating_cast_is_the_plain_cast_within_range():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(1)) * 1000
    for dtype in (torch.float16, torch.bfloat16):
        assert torch.equal(saturating_cast(x, dtype), x.to(dtype))
    assert torch.equal(saturating_cast(torch.tensor([1e39], dtype=torch.float64), torch.float32),
                       torch.tensor([torch.finfo(torch.float32).max]))
    bf = torch.tensor([3e38], dtype=torch.bfloat16)  # bf16 65504 rounds up to 65536: clamp in float32
    assert float(saturating_cast(bf, torch.float16)) == 65504.0


def _clamp_then_cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The definition: clamp to ``dtype``'s largest finite value in a precision where it is exact, then cast."""
    top = torch.finfo(dtype).max
    if torch.finfo(x.dtype).max <= top:
        return x.to(dtype)
    wide = x.double() if x.dtype in (torch.float16, torch.bfloat16) else x
    return wide.clamp(-top, top).to(dtype)


@pytest.mark.parametrize("src, dst", [(torch.float32, torch.float16), (torch.float32, torch.bfloat16),
                                      (torch.float64, torch.float32), (torch.float64, torch.float16),
                                      (torch.bfloat16, torch.float16), (torch.float16, torch.float32),
                                      (torch.float16, torch.float16)])
def test_saturating_cast_is_a_clamp_then_the_cast_with_or_without_out(src, dst):
    """Cast first and clamp the infinities back in the target dtype (no full-size temporary): the bits of a
    clamp to the target's largest value then the cast, at and around the rounding boundary, for NaN and the
    infinities, into a new tensor and into ``out`` (the input unchanged)."""
    top = float(torch.finfo(dst).max)
    edges = [top, -top, top * (1 + 2**-12), top * (1 + 2**-9), top * 2, float("inf"), -float("inf"), float("nan"),
             0.0, -0.0, 1e-30, 65519.0, 65520.0, -65536.0, 3.3961e38, 3e38]
    g = torch.Generator().manual_seed(5)
    x = torch.cat([torch.tensor(edges, dtype=torch.float64), torch.randn(4096, generator=g, dtype=torch.float64) * top])
    with torch.no_grad():
        x = x.clamp(-torch.finfo(src).max * 4, torch.finfo(src).max * 4).to(src)  # the source's own infinities
    before = x.clone()
    want = _clamp_then_cast(x, dst)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dst.itemsize]
    got = saturating_cast(x, dst)
    assert torch.equal(got.view(width), want.view(width))
    out = torch.full_like(x, 7.0, dtype=dst)
    assert saturating_cast(x, dst, out=out) is out and torch.equal(out.view(width), want.view(width))
    assert torch.equal(x.view(torch.uint8), before.view(torch.uint8))


def test_countsketch_fp16_60000_decodes_finite():
    x = torch.full((64,), 60000.0, dtype=torch.float16)
    out = compressors.get("countsketch").roundtrip(x)
    assert bool(torch.isfinite(out).all())


@pytest.mark.parametrize("scale", [1e37, 1e38, 3e38])
def test_powersgd_overflow_raises_before_the_warm_start_changes(scale):
    codec, twin = compressors.get("powersgd", rank=2), compressors.get("powersgd", rank=2)
    ordinary = torch.randn(32, 16, generator=torch.Generator().manual_seed(0))
    codec.encode(ordinary, key="w"), twin.encode(ordinary, key="w")
    with pytest.raises(NumericOverflowError):
        codec.encode(torch.full((32, 16), scale), key="w")
    assert codec.encode(ordinary, key="w").to_bytes() == twin.encode(ordinary, key="w").to_bytes()


def test_dgc_fed_3e38_raises_before_its_buffers_change():
    codec, twin = compressors.get("dgc", ratio=0.1), compressors.get("dgc", ratio=0.1)
    big = torch.full((100,), 3e38)
    p = codec.encode(big, key="w")
    twin.encode(big, key="w")
    assert bool(torch.isfinite(codec.decode(p)).all())
    with pytest.raises(NumericOverflowError):  # momentum 0.9 * 3e38 + 3e38 overflows float32
        codec.encode(big, key="w")
    assert issubclass(NumericOverflowError, NonFiniteGradientError)
    for a, b in zip(codec.state_dict().values(), twin.state_dict().values()):
        assert torch.equal(a, b)
    # the state is finite (3e38 unsent per coordinate) and decodable; after reset_state, the key
    # works again; a fresh key works at once
    small = torch.randn(100, generator=torch.Generator().manual_seed(1))
    assert codec.encode(small, key="v").to_bytes() == twin.encode(small, key="v").to_bytes()
    codec.reset_state()
    assert bool(torch.isfinite(codec.roundtrip(small, key="w")).all())


def test_error_feedback_overflow_leaves_the_residual():
    codec = compressors.get("ef-signsgd")
    x = torch.zeros(16)
    x[0] = 3e38  # scale mean|x| = 1.9e37: the residual keeps 2.8e38, and g + residual overflows
    codec.encode(x, key="w")
    before = {k: v.clone() for k, v in codec.state_dict().items()}
    with pytest.raises(NumericOverflowError):
        codec.encode(x, key="w")
    after = codec.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(bool(torch.isfinite(v).all()) for v in after.values() if v.is_floating_point())


def test_decode_refuses_what_no_encoder_writes():
    p = compressors.get("identity").encode(torch.ones(4))
    forged = Payload(p.codec_id, p.dtype, p.shape, p.params, (torch.tensor([1.0, float("inf"), 0.0, 1.0]),))
    with pytest.raises(CorruptPayloadError, match="non-finite"):
        compressors.decode(forged)
