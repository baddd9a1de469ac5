"""PowerSGD's decoder refuses factors whose product overflows float32 even when each pair of entries
multiplies to a finite number: every entry of ``P Q^T`` sums ``r`` such products, so the bound
that lets it skip the check on the result counts the rank."""

from __future__ import annotations

import pytest
import torch

from gcbench import compressors
from gcbench.compressors import CorruptPayloadError, Payload
from gcbench.compressors.codecs.powersgd import PowerSGD


def _forged(scale: float) -> tuple[PowerSGD, Payload]:
    """A rank-4 payload of a 64 x 64 tensor with every entry of P and Q set to ``scale``."""
    codec = PowerSGD(rank=4)
    p = codec.encode(torch.randn(64, 64, generator=torch.Generator().manual_seed(0)), key="w")
    hdr, pp, qq = p.sections
    assert hdr.tolist() == [64, 64, 4]
    secs = (hdr, torch.full_like(pp, scale), torch.full_like(qq, scale))
    return codec, Payload(p.codec_id, p.dtype, p.shape, p.params, secs, p.sparse)


def test_factors_that_overflow_only_when_summed_over_the_rank_are_refused() -> None:
    """1e19 * 1e19 = 1e38 is finite, but each entry of P Q^T is 4 such products: 4e38 > float32 max."""
    codec, forged = _forged(1e19)
    with pytest.raises(CorruptPayloadError):
        codec.decode(forged)
    with pytest.raises(CorruptPayloadError):
        codec.decode(forged, out=torch.empty(64, 64))
    with pytest.raises(CorruptPayloadError):
        compressors.decode(Payload.from_bytes(forged.to_bytes()))


def test_large_factors_whose_sum_stays_finite_still_decode() -> None:
    """4 * (4e18)^2 = 6.4e37 is finite: the payload decodes to exactly that value everywhere."""
    codec, forged = _forged(4e18)
    out = codec.decode(forged)
    assert bool(torch.isfinite(out).all())
    expected = torch.full((64, 4), 4e18) @ torch.full((64, 4), 4e18).T
    assert torch.equal(out, expected)
