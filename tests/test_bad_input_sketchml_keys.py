"""SketchML keys whose packed form ``key << gbits | group`` would not fit an int64 (keys at or above
2^60 with 8 groups, 2^55 with 256): decoded to the same coordinates and values as the reference
decode (each group queried on its own, then a stable sort), never wrapped to another coordinate;
a corrupt payload with such keys is refused with :class:`CorruptPayloadError`. Below the bound
the decode is unchanged, and the wide merge gives the packed merge's keys and values bit for bit."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from test_sketchml_decode import reference_decode

from gcbench import compressors
from gcbench.compressors.codecs.sketchml import merge
from gcbench.compressors.codecs.sketchml.codec import SketchML
from gcbench.compressors.errors import CorruptPayloadError


def _sparse(keys: list[list[int]], shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    vals = torch.randn(len(keys[0]), generator=g)
    return torch.sparse_coo_tensor(torch.tensor(keys), vals, shape, check_invariants=True).coalesce()


def _flat(x: torch.Tensor) -> torch.Tensor:
    idx = x.indices()
    if x.dim() == 1:
        return idx[0]
    return idx[0] * x.shape[1] + idx[1]


BIG = [2**60 - 1, 2**60, 2**61, 2**61 + 1, 2**62 - 2, 2**62 - 1]


@pytest.mark.parametrize("key", BIG)
def test_one_key_at_or_above_2_to_the_60_decodes_to_itself(key):
    x = _sparse([[key]], (2**62,))
    c = compressors.get("sketchml")
    out = c.decode(c.encode(x)).coalesce()
    assert out.indices().tolist() == [[key]]
    assert torch.equal(out.values(), x.values())  # one key: its bucket value is the value itself


@pytest.mark.parametrize("groups", [8, 256])
@pytest.mark.parametrize(
    "shape, keys",
    [
        ((2**62,), [[0, 5, 2**54, 2**55, 2**59 + 3] + BIG]),
        ((2**63 - 1,), [[1, 2**62, 2**63 - 3, 2**63 - 2]]),
        ((2**31, 2**31), [[0, 3, 2**29, 2**30, 2**31 - 1, 2**31 - 1], [7, 1, 2**31 - 1, 0, 2**31 - 2, 2**31 - 1]]),
    ],
)
def test_wide_keys_equal_the_reference_decode(shape, keys, groups):
    """Several keys a group (hash collisions matter), in both key halves of the 8- and 256-group
    codecs, 1-D and 2-D shapes: the public decode gives the input's coordinates and the reference's
    values bit for bit."""
    x = _sparse(keys, shape, seed=groups)
    codec = SketchML(sketch="exact", groups=groups, columns=0.5, rows=3, seed=11)
    p = codec.encode(x)
    want_keys, want_values = reference_decode(codec, p.sections, x.numel())
    out = codec.decode(p).coalesce()
    assert tuple(out.shape) == shape
    assert torch.equal(_flat(out), _flat(x)) and torch.equal(_flat(out), want_keys)
    assert torch.equal(out.values(), want_values.to(out.dtype))
    # the same through the bytes
    again = compressors.decode(compressors.Payload.from_bytes(p.to_bytes())).coalesce()
    assert torch.equal(again.indices(), out.indices()) and torch.equal(again.values(), out.values())


@pytest.mark.parametrize("use_numpy", [True, False])
@pytest.mark.parametrize("groups", [2, 8, 16])
def test_the_wide_merge_equals_the_packed_merge_below_the_bound(groups, use_numpy):
    """Forced onto keys that would pack, the wide merge returns the packed merge's keys and values
    (numpy or torch query), bit for bit."""
    g = torch.Generator().manual_seed(groups)
    numel = 1 << 20
    keys = torch.randperm(numel, generator=g)[:20_000].sort().values
    vals = torch.randn(keys.numel(), generator=g)
    x = torch.sparse_coo_tensor(keys[None], vals, (numel,), check_invariants=True).coalesce()
    codec = SketchML(sketch="exact", groups=groups, seed=groups)
    p = codec.encode(x)
    packed = codec._decode_sparse(p.sections, numel)

    def engine(*args, **kw):
        return merge.merge_and_query(*args, **{**kw, "use_numpy": use_numpy})

    calls = []
    real = merge.merge_wide

    def wide(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    with patch.object(merge, "packs", lambda numel, groups: False), patch.object(merge, "merge_wide", wide):
        with patch("gcbench.compressors.codecs.sketchml.codec.merge_and_query", engine):
            forced = codec._decode_sparse(p.sections, numel)
    assert calls  # the wide merge ran
    assert torch.equal(forced[0], packed[0]) and torch.equal(forced[1], packed[1])


def test_the_bound_of_the_packing():
    assert merge.packs(2**60, 8) and not merge.packs(2**60 + 1, 8)
    assert merge.packs(2**55, 256) and not merge.packs(2**55 + 1, 256)
    assert merge.packs(2**62, 2) and not merge.packs(2**62 + 1, 2)


@pytest.mark.parametrize(
    "keys_g, counts, match",
    [
        ([2**61, 2**62 - 5, 2**61], [2, 1], "two groups"),  # a key in two groups
        ([2**62 - 5, 2**61, 7], [2, 1], "strictly increasing"),  # a group that does not ascend
        ([2**61, 2**61, 7], [2, 1], "strictly increasing"),  # a key twice in a group
        ([2**61, 2**62, 7], [2, 1], "strictly increasing"),  # out of range
        ([-1, 2**61, 7], [2, 1], "strictly increasing"),
    ],
)
def test_wide_keys_of_a_corrupt_payload_are_refused(keys_g, counts, match):
    table = torch.zeros(2 * 2 * 4, dtype=torch.uint8)  # 2 groups x 2 rows x 4 columns
    with pytest.raises(CorruptPayloadError, match=match):
        merge.merge_and_query(torch.tensor(keys_g), counts, 2**62, table, [4, 4], 2, 0, torch.zeros(2, 1))


def test_a_corrupt_payload_with_wide_keys_is_refused_by_decode():
    """A payload whose key bytes are swapped between two groups: the public decode raises the
    typed error (no wrapped coordinate, no other exception)."""
    x = _sparse([[2**61, 2**61 + 9, 2**62 - 7, 2**62 - 2]], (2**62,))
    codec = SketchML(sketch="exact", groups=2, seed=1)
    p = codec.encode(x)
    meta, bv, key_bytes, tables = p.sections
    for mutate in range(1, min(64, key_bytes.numel())):
        kb = key_bytes.clone()
        kb[mutate] ^= 0x40
        q = compressors.Payload(p.codec_id, p.dtype, p.shape, p.params, (meta, bv, kb, tables), p.sparse)
        try:
            out = codec.decode(q).coalesce()
        except CorruptPayloadError:
            continue
        flat = out.indices()[0]
        assert bool((flat >= 0).all()) and bool((flat < 2**62).all())
        assert flat.numel() < 2 or bool((flat[1:] > flat[:-1]).all())
