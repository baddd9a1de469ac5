"""A Count Sketch table holding NaN or Inf is refused when the sketch itself is read from a payload
(Sketched-SGD's candidate selection reads the summed table, not the decoded vector), not only when
the payload is decoded to a vector."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import CorruptPayloadError, Payload
from gcbench.compressors.codecs.countsketch.codec import CountSketchCodec
from gcbench.compressors.methods.sketched_sgd import select_candidates


def _forged(codec: CountSketchCodec, bad: float, cell: int) -> Payload:
    """A real payload of ``codec`` with one table cell set to ``bad``."""
    p = codec.encode(torch.randn(4096, generator=torch.Generator().manual_seed(0)))
    table = p.sections[0].clone()
    table[cell] = bad
    return Payload(p.codec_id, p.dtype, p.shape, p.params, (table,), p.sparse)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("cell", [0, -1])
def test_sketch_of_a_non_finite_table_is_refused(bad: float, cell: int) -> None:
    """``sketch_of`` and ``select_candidates`` refuse the table before any estimate is formed."""
    codec = CountSketchCodec(rows=5, compression=4.0, seed=3)
    forged = _forged(codec, bad, cell)
    with pytest.raises(CorruptPayloadError):
        codec.sketch_of(forged)
    with pytest.raises(CorruptPayloadError):
        select_candidates(forged, 16, codec=codec)
    with pytest.raises(CorruptPayloadError):
        codec.decode(Payload.from_bytes(forged.to_bytes()))


def test_a_finite_table_still_gives_its_sketch() -> None:
    """The same payload unforged reads back as the encoder's table."""
    codec = CountSketchCodec(rows=5, compression=4.0, seed=3)
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    p = codec.encode(x)
    sketch = codec.sketch_of(p)
    assert torch.equal(sketch.table.reshape(-1), p.sections[0])
    assert select_candidates(p, 16, codec=codec).numel() == 16
