"""SketchML details that a round trip alone does not show: without hash collisions every value,
negative or positive, decodes to exactly its own bucket value (the bucket farthest from zero
included); the MinMaxSketch hashes follow SplitMix64 with odd multipliers; and a payload whose
bucket values do not ascend is refused even when every value keeps its sign."""

from __future__ import annotations

import pytest
import torch

from gcbench import compressors
from gcbench.compressors import CorruptPayloadError, Payload
from gcbench.compressors.codecs.sketchml.codec import SketchML, quantile_bucketize
from gcbench.compressors.codecs.sketchml.minmaxsketch import hash_params


MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64's output for state ``x`` (Steele, Lea and Flood 2014), written out as the reference."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _sparse(keys: torch.Tensor, values: torch.Tensor, numel: int) -> torch.Tensor:
    return torch.sparse_coo_tensor(keys[None], values, (numel,), is_coalesced=True, check_invariants=True)


def _gradient(d: int, seed: int) -> torch.Tensor:
    """``d`` float32 values, about half negative, of distinct magnitudes."""
    g = torch.Generator().manual_seed(seed)
    sign = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0)
    return (sign * (torch.randperm(d, generator=g).float() + 1.0) * 1e-3).float()


def test_every_bucket_decodes_to_its_own_value_without_collisions() -> None:
    """With a table far wider than its keys no key shares all its cells, so each value decodes to its
    bucket's value: a group's zero-side end off by one would move the bucket farthest from zero (in
    every negative group) onto its neighbour's value."""
    d, numel = 256, 4096
    keys = torch.arange(0, numel, numel // d)
    v = _gradient(d, 3)
    codec = SketchML(sketch="exact", buckets=16, groups=4, rows=4, columns=64.0, seed=11)
    out = codec.decode(codec.encode(_sparse(keys, v, numel)))
    assert torch.equal(out.indices()[0], keys)
    n_neg, r = int((v < 0).sum()), codec.groups
    r_neg = min(max(round(r * n_neg / d), 1), r - 1)
    quant = quantile_bucketize(v, codec.buckets, negative_buckets=codec._layout(r_neg).edges[r_neg], sketch="exact")
    expected = quant.bucket_values.float()[quant.index]
    assert torch.equal(out.values(), expected)
    # the most negative bucket, whose value only this layout detail decides, is among them
    assert bool((quant.index == 0).any())


def test_hash_parameters_are_splitmix64_with_odd_multipliers() -> None:
    """Both ends derive the hashes from the seed: SplitMix64 (its published first output for state
    0) and an odd multiplier ``a`` per row (an even one drops a bit of every key)."""
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    for seed in (0, 1, 7, 12345, (1 << 63) - 1):
        params = hash_params(seed, 6)
        assert len(params) == 6
        for a, b in params:
            assert a % 2 == 1
            assert -(1 << 63) <= a < 1 << 63 and -(1 << 63) <= b < 1 << 63
    a0 = splitmix64(0) | 1
    b0 = splitmix64(splitmix64(0))
    assert [(a & MASK64, b & MASK64) for a, b in hash_params(0, 1)] == [(a0, b0)]


@pytest.mark.parametrize("side", ["negative", "positive"])
def test_bucket_values_out_of_order_within_a_sign_are_refused(side: str) -> None:
    """Two neighbouring bucket values swapped (signs kept) make a payload no encoder writes."""
    d, numel = 400, 4000
    keys = torch.arange(0, numel, numel // d)
    codec = SketchML(sketch="exact", buckets=16, groups=4)
    p = codec.encode(_sparse(keys, _gradient(d, 5), numel))
    bv = p.sections[1].clone()
    i = 1 if side == "negative" else bv.numel() - 3
    assert bool(bv[i] != bv[i + 1]) and bool(bv[i] * bv[i + 1] > 0)
    bv[i], bv[i + 1] = bv[i + 1].clone(), bv[i].clone()
    secs = list(p.sections)
    secs[1] = bv
    bad = Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(secs), p.sparse)
    with pytest.raises(CorruptPayloadError):
        compressors.decode(Payload.from_bytes(bad.to_bytes()))
