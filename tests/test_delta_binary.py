"""Delta-binary keys (SketchML Section 3.4): exact for any sorted key set, byte-identical to a naive
Python encoder, canonical widths, the 2^32 escape, and refusal of streams no encoder writes."""

from __future__ import annotations


import pytest
import torch
import gcbench.compressors.codecs.sketchml.delta_binary as delta_binary
from gcbench.compressors.codecs.sketchml.delta_binary import ESCAPE_LIMIT, delta_binary_decode, delta_binary_encode
from gcbench.compressors.errors import CorruptPayloadError, InvalidParameterError
from gcbench.compressors.kernels import core, native
from gcbench.compressors.kernels.sketchml import DELTA_BINARY_C, delta_decode_c
from hypothesis import given
from hypothesis import strategies as st

INT64_MAX = (1 << 63) - 1


def naive_encode(keys: list[int], segments: list[int] | None = None, widths: str = "1234") -> bytes:
    """The module docstring's layout, one key at a time: 2-bit flags (4 per byte, LSB first),
    little-endian delta bytes, then the escaped deltas as int64."""
    segments = [len(keys)] if segments is None else segments
    deltas, pos = [], 0
    for length in segments:
        prev = 0
        for k in keys[pos : pos + length]:
            deltas.append(k - prev)
            prev = k
        pos += length
    flags = bytearray((len(deltas) + 3) // 4)
    body, tail = bytearray(), bytearray()
    for i, d in enumerate(deltas):
        if d >= 1 << 32:
            nbytes, inline = 4, 0
            tail += d.to_bytes(8, "little")
        else:
            nbytes = 1 if d < 1 << 8 else 2 if d < 1 << 16 else 3 if d < 1 << 24 else 4
            if widths == "124" and nbytes == 3:
                nbytes = 4
            inline = d
        flags[i // 4] |= (nbytes - 1) << (2 * (i % 4))
        body += inline.to_bytes(nbytes, "little")
    return bytes(flags + body + tail)


def _outcome(fn, *args):
    """What a call gives: its tensor's values, or its error's type and message."""
    try:
        return fn(*args).tolist()
    except (CorruptPayloadError, InvalidParameterError) as e:
        return type(e), str(e)


def _both_ways(fn, *args):
    """``fn(*args)``'s outcome coded as one array (the small-input path) and segment by segment (the large-input
    path, forced by a threshold of 0): the two must agree, values or error. A decode is also run where
    the C kernels run (default mode: the one C pass, and the torch code for what it does not decode
    alone): the same keys or the same error."""
    whole = _outcome(fn, *args)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(delta_binary, "WHOLE_ARRAY_MAX", 0)
        assert _outcome(fn, *args) == whole
    if fn is delta_binary_decode:
        with core.forced("auto"):
            assert _outcome(fn, *args) == whole
    return whole


def _roundtrip(keys: list[int], segments=None, widths="1234") -> torch.Tensor:
    k = torch.tensor(keys, dtype=torch.int64)
    seg = None if segments is None else torch.tensor(segments, dtype=torch.int64)
    data = delta_binary_encode(k, seg, widths)
    assert bytes(data.numpy().tobytes()) == naive_encode(keys, segments, widths)
    assert _both_ways(delta_binary_encode, k, seg, widths) == data.tolist()
    out = delta_binary_decode(data, len(keys), seg, widths)
    assert out.tolist() == keys
    assert _both_ways(delta_binary_decode, data, len(keys), seg, widths) == keys
    return data


@given(keys=st.sets(st.integers(0, INT64_MAX), max_size=60), widths=st.sampled_from(["1234", "124"]))
def test_any_sorted_unique_int64_set_is_exact_and_matches_the_naive_encoder(keys, widths):
    _roundtrip(sorted(keys), widths=widths)


@given(
    groups=st.lists(st.sets(st.integers(0, 1 << 40), max_size=20), min_size=1, max_size=6),
    widths=st.sampled_from(["1234", "124"]),
)
def test_segments_restart_from_zero(groups, widths):
    keys, segments = [], []
    for g in groups:
        keys += sorted(g)
        segments.append(len(g))
    _roundtrip(keys, segments, widths)


@pytest.mark.parametrize(
    "gap, width",
    [
        (2**8 - 1, 1),
        (2**8, 2),
        (2**16 - 1, 2),
        (2**16, 3),
        (2**24 - 1, 3),
        (2**24, 4),
        (2**32 - 1, 4),
        (2**32, 4),
        (2**61, 4),
    ],
)
def test_gaps_at_the_byte_boundaries(gap, width):
    keys = [0, gap, 2 * gap, 2 * gap + 1]
    data = _roundtrip(keys)
    escaped = gap >= ESCAPE_LIMIT
    # flags (1 byte) + key 0 (1 byte) + two gaps + the final gap of 1 (1 byte) + escape tail
    assert data.numel() == 1 + 1 + 2 * width + 1 + (16 if escaped else 0)
    # the released code's rule: 3-byte deltas take 4
    data124 = _roundtrip(keys, widths="124")
    assert data124.numel() == data.numel() + (2 if width == 3 else 0)


@pytest.mark.parametrize("keys", [[], [0], [5], [INT64_MAX], [0, INT64_MAX], [INT64_MAX - 1, INT64_MAX]])
def test_edge_sets(keys):
    _roundtrip(keys)


def test_ten_million_keys():
    g = torch.Generator().manual_seed(0)
    gaps = torch.randint(1, 300, (10_000_000,), generator=g)
    gaps[::1000] = 70_000  # some 3-byte deltas
    keys = torch.cumsum(gaps, 0)
    data = delta_binary_encode(keys)  # its time is benchmarked in benchmarks/bench_stages.py (SketchMLDeltaBinary)
    out = delta_binary_decode(data, keys.numel())
    assert torch.equal(out, keys)
    ones = int((gaps < 256).sum())
    assert data.numel() == 2_500_000 + ones + 2 * int(((gaps >= 256) & (gaps < 65536)).sum()) + 3 * int(
        (gaps >= 65536).sum()
    )


def test_unsorted_or_negative_keys_are_refused():
    with pytest.raises(InvalidParameterError):
        delta_binary_encode(torch.tensor([3, 2]))
    with pytest.raises(InvalidParameterError):
        delta_binary_encode(torch.tensor([-1, 2]))
    with pytest.raises(InvalidParameterError):
        delta_binary_encode(torch.tensor([1, 2]), torch.tensor([1]))


def _bad(data: bytes | list[int], n: int, widths: str = "1234", segments=None):
    t = torch.tensor(list(data), dtype=torch.uint8)
    with pytest.raises(CorruptPayloadError):
        delta_binary_decode(t, n, segments, widths)
    assert _both_ways(delta_binary_decode, t, n, segments, widths)[0] is CorruptPayloadError


@given(data=st.binary(max_size=40), n=st.integers(0, 24), cuts=st.lists(st.integers(0, 24), max_size=4),
       widths=st.sampled_from(["1234", "124"]))
def test_any_stream_decodes_or_is_refused_alike_as_one_array_and_by_segment(data, n, cuts, widths):
    """Arbitrary bytes, key counts and segments (escape markers, tails, non-canonical widths among them):
    the same keys or the same error either way."""
    bounds = sorted({min(c, n) for c in cuts} | {0, n})
    segments = torch.tensor([b - a for a, b in zip(bounds, bounds[1:])] or [0], dtype=torch.int64)
    _both_ways(delta_binary_decode, torch.tensor(list(data), dtype=torch.uint8), n, segments, widths)


@given(groups=st.lists(st.lists(st.integers(0, 1 << 34), max_size=12), min_size=1, max_size=5),
       widths=st.sampled_from(["1234", "124"]))
def test_any_keys_encode_or_are_refused_alike_as_one_array_and_by_segment(groups, widths):
    """Keys in any order (some segments not ascending), gaps past the escape limit among them."""
    keys = torch.tensor([k for g in groups for k in g], dtype=torch.int64)
    _both_ways(delta_binary_encode, keys, torch.tensor([len(g) for g in groups], dtype=torch.int64), widths)


def test_hostile_streams_raise_corrupt_payload():
    good = naive_encode([1, 300, 70_000])  # widths 1, 2, 3
    assert delta_binary_decode(torch.tensor(list(good), dtype=torch.uint8), 3).tolist() == [1, 300, 70_000]
    _bad(good[:-1], 3)  # truncated
    _bad(good + b"\x00", 3)  # trailing byte
    _bad(good, 4)  # more keys than bytes
    _bad(good, 3, widths="124")  # flag 10 is never written by the code's rule
    _bad(bytes([0b01, 5, 0]), 1)  # a 1-byte delta written in 2 bytes (not canonical)
    _bad(bytes([0b11, 0, 0, 0, 0]), 1)  # escape marker without its tail
    _bad(bytes([0b11, 0, 0, 0, 0]) + (5).to_bytes(8, "little"), 1)  # escaped delta below 2^32
    _bad(bytes([0b00, 7]) + bytes(8), 1)  # a tail without a marker
    _bad(good, 3, segments=torch.tensor([1, 1]))  # segments do not add up
    _bad(bytes([0b100, 7]), 1)  # an unused flag bit set (the encoder writes zeros)


@pytest.mark.parametrize("widths", ["1234", "124"])
@pytest.mark.parametrize("top", [1 << 8, 1 << 16, 1 << 24, 1 << 32])
def test_many_keys_of_mixed_widths_match_the_naive_encoder(widths, top):
    """The vectorised encoder places the wide deltas' bytes by offsets over the wide ones and fills
    the low bytes around them: check it byte for byte against the naive
    encoder on thousands of deltas of every width below ``top``, in several segments, including
    width changes between neighbours and a segment ending on a wide delta."""
    g = torch.Generator().manual_seed(top + len(widths))
    n = 6000
    cls = torch.randint(0, 4, (n,), generator=g)
    lo = torch.tensor([1, 1 << 8, 1 << 16, 1 << 24])[cls]
    hi = torch.tensor([1 << 8, 1 << 16, 1 << 24, 1 << 32])[cls]
    gaps = lo + (torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo).double()).long()
    gaps = torch.where(gaps < top, gaps, torch.randint(1, 1 << 8, (n,), generator=g))
    segments = [1000, 0, 2500, 1, 2499]
    keys = []
    pos = 0
    for length in segments:
        keys += torch.cumsum(gaps[pos : pos + length], 0).tolist()
        pos += length
    data = _roundtrip(keys, segments, widths)
    single = sorted(set(keys))
    _roundtrip(single, None, widths)
    assert data.numel() > n  # some deltas really are wider than a byte


def _segmented_keys(g: torch.Generator, segments: list[int], wide_every: int, wide: tuple[int, int]) -> torch.Tensor:
    """Keys ascending within each segment from 0: gaps below 256, and about one in ``wide_every``
    drawn from ``[wide[0], wide[1])`` instead."""
    cls = torch.randint(0, wide_every, (sum(segments),), generator=g)
    gaps = torch.where(cls == 0, torch.randint(*wide, cls.shape, generator=g), torch.randint(1, 256, cls.shape, generator=g))
    return torch.cat([torch.cumsum(part, 0) for part in torch.split(gaps, segments)])


@pytest.mark.parametrize("widths", ["1234", "124"])
def test_the_c_pass_decodes_a_message_as_the_torch_code_does(widths):
    """Where the C kernels run, a SketchML-sized message (8 segments, deltas of every width, some
    segments ending inside a flag byte) is decoded by the one C pass: the same keys as the torch code,
    and no call back into it; a stream with an escape goes on to the torch code, which decodes it."""
    g = torch.Generator().manual_seed(len(widths))
    segments = [70_001, 3, 0, 65_537, 1, 90_000, 4, 50_002]
    k = _segmented_keys(g, segments, wide_every=4, wide=(1, 1 << 24))
    seg = torch.tensor(segments, dtype=torch.int64)
    data = delta_binary_encode(k, seg, widths)
    before = native.call_count(DELTA_BINARY_C)
    with core.forced("auto"), pytest.MonkeyPatch.context() as m:
        m.setattr(delta_binary, "unpack_bits", None)  # the torch code would need it
        assert torch.equal(delta_binary_decode(data, k.numel(), seg, widths), k)
    assert native.call_count(DELTA_BINARY_C) == before + 1
    escaped = torch.tensor([5, 5 + ESCAPE_LIMIT, 6 + ESCAPE_LIMIT])
    data = delta_binary_encode(escaped, None, widths)
    out = torch.empty(3, dtype=torch.int64)
    assert not delta_decode_c(data, 1, [3], widths == "124", out)  # left to the torch code
    with core.forced("auto"):
        assert delta_binary_decode(data, 3, None, widths).tolist() == escaped.tolist()
    with pytest.raises(ValueError):
        delta_decode_c(data, 2, [3], widths == "124", out)  # not the flag bytes of 3 keys


@pytest.mark.parametrize("widths", ["1234", "124"])
def test_a_corrupted_message_decodes_or_is_refused_alike_in_c_and_torch(widths):
    """A valid stream of a few thousand keys (every width, several segments) with one byte changed,
    at seeded places in the flags and the deltas, or cut short or lengthened: the C pass and the torch
    code give the same keys or the same error (most changes decode to other keys, which only the
    caller's checks can refuse)."""
    g = torch.Generator().manual_seed(7 + len(widths))
    segments = torch.tensor([1999, 2, 2999], dtype=torch.int64)
    k = _segmented_keys(g, segments.tolist(), wide_every=8, wide=(256, 1 << 25))
    good = delta_binary_encode(k, segments, widths)
    cases = []
    for _ in range(150):
        bad = good.clone()
        at = int(torch.randint(0, bad.numel(), (1,), generator=g))
        bad[at] = int(torch.randint(0, 256, (1,), generator=g))
        cases.append(bad)
    cases += [good[:-1], torch.cat([good, good[-1:]]), good[: good.numel() // 2]]
    refused = 0
    for data in cases:
        want = _outcome(delta_binary_decode, data, k.numel(), segments, widths)
        with core.forced("auto"):
            assert _outcome(delta_binary_decode, data, k.numel(), segments, widths) == want
        refused += isinstance(want, tuple)
    assert 3 <= refused < len(cases)  # both kinds of outcome were compared
