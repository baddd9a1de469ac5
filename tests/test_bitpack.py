"""compressors/wire/bitpack.py against a naive Python bit-string packer.

Layout (module docstring): widths up to 8 form one LSB-first bit stream; wider values are planar
(all low bytes, then the remaining high bits packed the same way, recursively).
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import devices
from gcbench.compressors.wire.bitpack import bits_for_levels, pack_bits, packed_nbytes, unpack_bits
from gcbench.compressors.errors import CorruptPayloadError, InvalidParameterError
from hypothesis import given
from hypothesis import strategies as st


def naive_pack(values: list[int], bits: int) -> bytes:
    """Reference packer: a Python string of '0'/'1' characters, one value after the other."""
    if bits > 8:
        low = bytes(v & 0xFF for v in values)
        return low + naive_pack([v >> 8 for v in values], bits - 8)
    stream = "".join(format(v, f"0{bits}b")[::-1] for v in values)  # LSB first
    stream += "0" * (-len(stream) % 8)
    return bytes(int(stream[i : i + 8][::-1], 2) for i in range(0, len(stream), 8))


@st.composite
def packable(draw):
    bits = draw(st.integers(1, 32))
    n = draw(st.integers(0, 300))
    values = draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=n, max_size=n))
    return bits, values


@given(packable())
def test_pack_matches_naive_bitstring_and_round_trips(case):
    bits, values = case
    v = torch.tensor(values, dtype=torch.int64)
    packed = pack_bits(v, bits)
    assert packed.dtype == torch.uint8 and packed.dim() == 1
    assert packed.numel() == math.ceil(len(values) * bits / 8) == packed_nbytes(len(values), bits)
    assert bytes(packed.tolist()) == naive_pack(values, bits)
    assert unpack_bits(packed, bits, len(values)).tolist() == values


@given(st.integers(0, 300), st.integers(1, 8), st.data())
def test_narrow_integer_inputs_pack_like_int64(n, bits, data):
    values = data.draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=n, max_size=n))
    ref = pack_bits(torch.tensor(values, dtype=torch.int64), bits)
    for dtype in (torch.uint8, torch.int32, torch.int16):
        assert torch.equal(pack_bits(torch.tensor(values, dtype=dtype), bits), ref)
    if bits == 1:
        assert torch.equal(pack_bits(torch.tensor(values, dtype=torch.bool), 1), ref)


@pytest.mark.parametrize("bits", [1, 2, 3, 5, 6, 7])
@pytest.mark.parametrize("offset", [1, 3, 8])
def test_word_packing_of_unaligned_view(offset, bits):
    # the 1-, 2-bit and odd-width paths view bytes as int64/int32 words: a view that starts
    # mid-word must still pack correctly
    g = torch.Generator().manual_seed(offset)
    base = torch.randint(0, 1 << bits, (offset + 203,), generator=g, dtype=torch.uint8)
    view = base[offset:]
    assert bytes(pack_bits(view, bits).tolist()) == naive_pack(view.tolist(), bits)
    # and a non-contiguous input
    strided = base[::2]
    assert bytes(pack_bits(strided, bits).tolist()) == naive_pack(strided.tolist(), bits)
    # and the bytes unpacked from a view that starts mid-word, and from a strided one
    packed = pack_bits(view, bits)
    shifted = torch.cat([packed.new_zeros(offset), packed])[offset:]
    assert torch.equal(unpack_bits(shifted, bits, view.numel(), torch.uint8), view)
    spread = torch.stack([packed, packed]).t().reshape(-1)[::2]
    assert torch.equal(unpack_bits(spread, bits, view.numel(), torch.uint8), view)


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 24, 31, 32])
def test_unpack_rejects_wrong_lengths(bits):
    n = 37
    packed = pack_bits(torch.zeros(n, dtype=torch.int64), bits)
    for bad in (packed[:-1], torch.cat([packed, packed.new_zeros(1)]), packed[:0]):
        with pytest.raises(CorruptPayloadError):
            unpack_bits(bad, bits, n)
    with pytest.raises(CorruptPayloadError):
        unpack_bits(packed.to(torch.int16), bits, n)  # wrong dtype
    with pytest.raises(CorruptPayloadError):
        unpack_bits(packed.reshape(1, -1), bits, n)  # not 1-D


@pytest.mark.parametrize("bits", [1, 2, 3, 5, 7, 10, 13])
def test_unpack_rejects_nonzero_padding_bits(bits):
    n = 9  # 9 * bits is never a multiple of 8 for these widths' low part
    packed = pack_bits(torch.ones(n, dtype=torch.int64), bits).clone()
    packed[-1] |= 0x80  # the top bit of the last byte is padding
    with pytest.raises(CorruptPayloadError, match="padding"):
        unpack_bits(packed, bits, n)


def test_bad_widths_are_rejected():
    for bits in (0, 33, -1):
        with pytest.raises(InvalidParameterError):
            pack_bits(torch.zeros(3, dtype=torch.int64), bits)
        with pytest.raises(InvalidParameterError):
            unpack_bits(torch.zeros(3, dtype=torch.uint8), bits, 3)


def test_bits_for_levels():
    expected = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 7: 3, 8: 3, 9: 4, 15: 4, 16: 4, 17: 5, 255: 8, 256: 8, 257: 9, 65536: 16}
    for levels, bits in expected.items():
        assert bits_for_levels(levels) == bits
        assert (1 << bits) >= levels and (bits == 1 or (1 << (bits - 1)) < levels)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("bits", [1, 2, 3, 5, 6, 7, 8, 16])
def test_round_trip_on_device(device, bits):
    n = 1000 + 3
    g = torch.Generator().manual_seed(bits)
    v = torch.randint(0, 1 << bits, (n,), generator=g)
    packed = pack_bits(v.to(device), bits)
    assert packed.device.type == device
    assert bytes(packed.cpu().tolist()) == naive_pack(v.tolist(), bits)
    assert torch.equal(unpack_bits(packed, bits, n).cpu(), v)


@pytest.mark.parametrize("bits", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 64, 1001, 4099])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_pack_small_into_equals_pack_bits(bits, n, offset):
    # pack_small_into may clobber its scratch input; the bytes must equal pack_bits of the values,
    # also for views at offsets that are not word-aligned (1 and 2 bits multiply int64/int32 words)
    from gcbench.compressors.wire.bitpack import pack_small_into

    g = torch.Generator().manual_seed(n * 8 + bits)
    base = torch.randint(0, 1 << bits, (n + offset,), generator=g, dtype=torch.uint8)
    values = base[offset:]
    expected = pack_bits(values.clone(), bits)
    out = torch.full((packed_nbytes(n, bits),), 0xAA, dtype=torch.uint8)
    pack_small_into(values.clone(), bits, out)
    assert torch.equal(out, expected)
    assert torch.equal(unpack_bits(out, bits, n, torch.uint8), values)


def test_pack_bits_leaves_its_input_alone():
    v = torch.randint(0, 2, (4096,), dtype=torch.uint8)
    before = v.clone()
    pack_bits(v, 1)
    pack_bits(v, 2)
    assert torch.equal(v, before)
