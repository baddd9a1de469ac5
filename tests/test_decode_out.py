"""``Codec.decode(payload, out=buf)``: the same values, bit for bit, as a fresh decode, written into
the caller's buffer (a fresh result pays the page faults of new memory). Every registered
codec, in eager and compiled mode, on float32 (the direct ``_decode_into`` path of codecs that have
one) and narrower or wider dtypes (the generic copy); plus the typed errors for a wrong ``out``.
"""

from __future__ import annotations

import pytest
import torch

from gcbench import compressors
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.errors import CorruptPayloadError, UnsupportedInputError


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", compressors.names())
def test_decode_into_out_equals_fresh_decode(name, mode):
    with fused.forced(mode):
        codec = compressors.get(name)
        g = torch.Generator().manual_seed(7)
        for shape, dtype in (((4099,), torch.float32), ((37, 29), torch.float32), ((1000,), torch.float16), ((33,), torch.float64)):
            x = (torch.randn(shape, generator=g) * 3).to(dtype)
            if codec.sparse_native:
                x = x * (torch.rand(shape, generator=g) < 0.1)
            p = codec.encode(x, key=f"{shape}{dtype}")
            fresh = codec.decode(p)
            buf = torch.full(shape, float("nan"), dtype=dtype)  # stale contents must not leak through
            got = codec.decode(p, out=buf)
            assert got is buf
            assert _bits_equal(got, fresh), f"{name} {mode} {shape} {dtype}: decode(out=) differs"
            assert _bits_equal(compressors.decode(p, out=torch.empty(shape, dtype=dtype)), fresh)


def test_decode_out_of_an_empty_payload_returns_out():
    codec = compressors.get("qsgd")
    p = codec.encode(torch.zeros(0, 3))
    buf = torch.empty(0, 3)
    assert codec.decode(p, out=buf) is buf


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: torch.empty(10), "decodes to"),  # wrong shape
        (lambda: torch.empty(4, 5, dtype=torch.float64), "decodes to"),  # wrong dtype
        (lambda: torch.empty(5, 4).t(), "contiguous"),
        (lambda: torch.empty(4, 5).to_sparse(), "dense"),
        (lambda: [0.0] * 20, "torch.Tensor"),
    ],
)
def test_decode_refuses_a_wrong_out(make, match):
    codec = compressors.get("qsgd")
    p = codec.encode(torch.randn(4, 5))
    with pytest.raises(UnsupportedInputError, match=match):
        codec.decode(p, out=make())


def test_decode_refuses_out_on_another_device_than_asked():
    codec = compressors.get("signsgd")
    p = codec.encode(torch.randn(8))
    with pytest.raises(UnsupportedInputError, match="decode was asked for"):
        codec.decode(p, out=torch.empty(8), device="meta")


def test_decode_refuses_out_that_aliases_the_payload():
    codec = compressors.get("identity")
    p = codec.encode(torch.randn(8))
    with pytest.raises(UnsupportedInputError, match="shares memory"):
        codec.decode(p, out=p.sections[0].view(8))


def test_decode_refuses_out_for_a_sparse_payload():
    codec = compressors.get("topk")
    p = codec.encode(torch.randn(6, 6).to_sparse())
    with pytest.raises(UnsupportedInputError, match="sparse COO"):
        codec.decode(p, out=torch.empty(6, 6))


def test_corrupt_payload_still_raises_with_out():
    codec = compressors.get("qsgd")
    p = codec.encode(torch.randn(100))
    bad = p.sections[0].clone()
    bad.view(torch.uint8)[:4] = 0xFF  # a NaN scale or norm
    import dataclasses

    broken = dataclasses.replace(p, sections=(bad, *p.sections[1:]), _cache={})
    with pytest.raises(CorruptPayloadError):
        codec.decode(broken, out=torch.empty(100))


#: The dense elementwise codecs whose ``_decode_into`` writes straight into ``out``.
DIRECT = ("qsgd", "terngrad", "zipml8", "zipml16", "signsgd", "ef-signsgd", "fp16", "bf16", "identity")


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", DIRECT)
def test_dense_elementwise_codecs_decode_straight_into_out(name, mode):
    """The direct path: same bits as a fresh decode on sizes with a partial last byte / bucket, and
    (for the quantizers) without calling the allocating ``_decode`` at all."""
    codec = compressors.get(name)
    inner = getattr(codec, "codec", codec)
    assert inner.decodes_into
    g = torch.Generator().manual_seed(3)
    with fused.forced(mode):
        for n in (1, 7, 128 * 40 + 5, 70_001):
            x = torch.randn(n, generator=g) * 3
            p = codec.encode(x, key=f"k{n}")
            fresh = codec.decode(p)
            buf = torch.full((n,), float("nan"))
            if name not in ("fp16", "bf16", "identity"):  # those copy the payload's own values
                inner._decode = lambda *a: pytest.fail("decode(out=) allocated through _decode")
            try:
                assert codec.decode(p, out=buf) is buf
            finally:
                inner.__dict__.pop("_decode", None)
            assert _bits_equal(buf, fresh), f"{name} {mode} n={n}"


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_qsgd_code_above_top_raises_with_out(mode):
    """The compiled decode folds the code range check into its pass: a code 2s + 1 still raises."""
    codec = compressors.get("qsgd")  # s = 127: codes 0..254 in 8 bits
    with fused.forced(mode):
        p = codec.encode(torch.randn(1000), key="k")
        bad = p.sections[1].clone()
        bad[999] = 255
        import dataclasses

        broken = dataclasses.replace(p, sections=(p.sections[0], bad), _cache={})
        for out in (None, torch.empty(1000)):
            with pytest.raises(CorruptPayloadError, match="exceeds the largest valid code"):
                codec.decode(broken, out=out)


def _clamp_then_cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    top = torch.finfo(dtype).max
    return x.double().clamp(-top, top).to(dtype) if torch.finfo(x.dtype).max > top else x.to(dtype)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", [n for n in compressors.names() if not compressors.get(n).sparse_native])
def test_sixteen_bit_decodes_are_the_working_values_clamped_then_cast(name, dtype, mode):
    """A 16-bit payload decodes to the codec's working values (``_decode``: float32, or the payload's own
    values for codecs that carry them) clamped to the dtype's largest finite value and then cast, with and
    without ``out`` (the float32 intermediate of ``out=`` is a reused per-thread buffer; the codecs with
    ``decodes_into_own_dtype`` write into ``out`` directly). Inputs up to the float16 range, so that some
    decoded values lie beyond it."""
    with fused.forced(mode):
        codec = compressors.get(name)
        inner = getattr(codec, "codec", codec)
        g = torch.Generator().manual_seed(11)
        for n, scale in ((4099, 3.0), (1000, 60000.0), (70_001, 1.0)):
            x = (torch.randn(n, generator=g) * scale).clamp(-65504, 65504).to(dtype)
            p = codec.encode(x, key=f"{n}")
            want = _clamp_then_cast(inner._decode(p.sections, n), dtype)
            assert bool(torch.isfinite(want).all())
            buf = torch.full((n,), float("nan"), dtype=dtype)
            assert codec.decode(p, out=buf) is buf
            assert _bits_equal(buf, want), f"{name} {mode} {dtype} n={n}: decode(out=)"
            assert _bits_equal(codec.decode(p), want), f"{name} {mode} {dtype} n={n}: decode()"
