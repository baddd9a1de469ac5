"""TernGrad's decoder refuses 2-bit streams no encoder writes, wherever the bad bits sit: a code 3
(it would decode to twice the scale) in any of the four positions of a byte, and any non-zero
padding bits after the last value, not only a code 3 there."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import CorruptPayloadError, Payload, decode
from gcbench.compressors.codecs.terngrad import TernGrad


def _payload(codec: TernGrad, n: int, scale: torch.Tensor, packed: torch.Tensor) -> Payload:
    return Payload(TernGrad.codec_id, torch.float32, (n,), codec.params, (scale, packed))


def _refused(codec: TernGrad, p: Payload) -> None:
    with pytest.raises(CorruptPayloadError):
        codec.decode(p)
    with pytest.raises(CorruptPayloadError):
        decode(Payload.from_bytes(p.to_bytes()))


@pytest.mark.parametrize("position", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [16, 18])
def test_a_code_3_in_any_position_of_a_byte_is_refused(position: int, n: int) -> None:
    """A code 3 in the first whole byte, at each of its four 2-bit positions (the fourth included)."""
    codec = TernGrad()
    scale, packed = codec.encode(torch.randn(n, generator=torch.Generator().manual_seed(1))).sections
    bad = packed.clone()
    bad[0] |= 3 << (2 * position)
    _refused(codec, _payload(codec, n, scale, bad))


@pytest.mark.parametrize("pad_code", [1, 2])
def test_padding_bits_holding_a_valid_code_are_refused(pad_code: int) -> None:
    """Padding after the last value must be zero bits; a valid-looking code 1 or 2 there is refused too."""
    n = 9  # two whole bytes and one value in the last byte: bits 2..7 of it are padding
    codec = TernGrad()
    scale, packed = codec.encode(torch.randn(n, generator=torch.Generator().manual_seed(2))).sections
    assert int(packed[-1]) >> 2 == 0
    for pair in (1, 2, 3):
        bad = packed.clone()
        bad[-1] |= pad_code << (2 * pair)
        _refused(codec, _payload(codec, n, scale, bad))


def test_the_untouched_stream_still_decodes() -> None:
    """The encoder's own bytes decode to ``{-s, 0, s}``."""
    n = 18
    codec = TernGrad()
    p = codec.encode(torch.randn(n, generator=torch.Generator().manual_seed(1)))
    s = float(p.sections[0][0])
    out = codec.decode(Payload.from_bytes(p.to_bytes()))
    assert set(out.unique().tolist()) <= {-s, 0.0, s}
