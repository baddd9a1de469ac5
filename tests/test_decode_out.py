"""``Codec.decode(payload, out=buf)``: the same values, bit for bit, as a fresh decode, written into
the caller's buffer (issue 21: a fresh result pays the page faults of new memory). Every registered
codec, in eager and compiled mode, on float32 (the direct ``_decode_into`` path of codecs that have
one) and narrower or wider dtypes (the generic copy); plus the typed errors for a wrong ``out``.
"""

from __future__ import annotations

import pytest
import torch

from gcbench import compressors
from gcbench.compressors import fused
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
