"""Packing of small unsigned integers into the minimal number of bytes (a lossless stage).

``pack_bits(values, bits)`` stores ``n`` values, each ``< 2**bits``, in exactly
``ceil(n * bits / 8)`` bytes; ``unpack_bits`` inverts it. Layout:

* ``bits <= 8``: one little-endian bit stream, least-significant bit first: value ``i`` occupies
  bit positions ``[i*bits, (i+1)*bits)`` (bit ``p`` is bit ``p % 8`` of byte ``p // 8``). Unused
  bits of the last byte are zero.
* ``bits > 8``: *planar*. The low bytes of all ``n`` values come first (``n`` bytes), followed by
  ``pack_bits(values >> 8, bits - 8)``, recursively. The size is still exactly
  ``n + ceil(n * (bits - 8) / 8) = ceil(n * bits / 8)`` bytes.

Vectorised torch (CPU and CUDA): values are processed in groups of ``g = 8 / gcd(bits, 8)`` so that a
group fills a whole number of bytes (at most 8); the Python loops run over the ``g`` columns of a
group and its bytes, never over elements. One and two bits per value (signs, trits) pack a whole
machine word of byte-sized values with one multiplication (see :func:`_pack1`, :func:`_pack2`).
Three, five, six and seven bits take eight values (one int64 word of bytes) to ``bits`` bytes by
three shift-and-merge rounds on whole words, and back (see :func:`_pack_odd`, :func:`_unpack_odd`):
a dozen passes over the bytes instead of one int64 pass per value and column.
"""

from __future__ import annotations

import sys

import torch

from ..errors import CorruptPayloadError, InvalidParameterError

MAX_BITS = 32

# Eight bytes b_0..b_7 (each 0 or 1, b_i in bits [8i, 8i+8) of a little-endian int64) times this
# constant put b_i at bit 56 + i: the partial product b_i * 2**(8i + 56 - 7j) lands on bit 56 + i only
# for j == i; every other partial product has a distinct exponent below 56 (so no carries reach bit
# 56) or at/above 64 (dropped by the two's-complement wrap of the int64 product).
PACK1_MAGIC = 0x0102040810204080


def packed_nbytes(n: int, bits: int) -> int:
    """Bytes that ``pack_bits`` writes for ``n`` values of ``bits`` bits."""
    return (n * bits + 7) // 8


def _check_bits(bits: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
        raise InvalidParameterError(f"bits must be an int in 1..{MAX_BITS}, got {bits!r}")


def _top_byte(words: torch.Tensor) -> torch.Tensor:
    """The most significant byte of each int32/int64 word, as a strided uint8 view (no copy).

    Equals ``(words >> (8 * (size - 1))).to(torch.uint8)`` on a little-endian machine (x86, ARM,
    every CUDA device), reading the byte in place instead of shifting and converting.
    """
    size = words.element_size()
    if _LITTLE_ENDIAN:
        return words.view(torch.uint8)[size - 1 :: size]
    return (words >> (8 * (size - 1))).to(torch.uint8)


_LITTLE_ENDIAN = sys.byteorder == "little"


def _pack1(v: torch.Tensor, out: torch.Tensor | None = None, clobber: bool = False) -> torch.Tensor:
    """Pack a 1-D uint8 tensor of 0/1 values, LSB first, 8 values per byte.

    ``out`` (optional) receives the bytes; ``clobber=True`` lets the multiplication run in place in
    ``v`` (a scratch buffer of the caller).
    """
    n = v.numel()
    main = n - n % 8
    if out is None:
        out = torch.empty(packed_nbytes(n, 1), dtype=torch.uint8, device=v.device)
    if main:
        head = v[:main]
        if head.storage_offset() % 8:  # int64 views need 8-byte aligned offsets
            head, clobber = head.clone(), True
        words = head.view(torch.int64)
        prod = words.mul_(PACK1_MAGIC) if clobber else words * PACK1_MAGIC
        out[: main // 8] = _top_byte(prod)
    if main != n:
        tail = v[main:].to(torch.int64)
        shifts = torch.arange(n - main, device=v.device, dtype=torch.int64)
        out[main // 8] = (tail << shifts).sum().to(torch.uint8)
    return out


# Four bytes c_0..c_3 (each < 4) of a little-endian int32 times this constant put c_i at bits
# 24 + 2i: partial products c_i * 2**(8i + 24 - 6j) with j != i land at or above bit 32 (dropped by
# the wrap of the int32 product) or below bit 24, and those lower ones sum to less than 2**24.
_PACK2_MAGIC = 0x01041040


def _pack2(v: torch.Tensor, out: torch.Tensor | None = None, clobber: bool = False) -> torch.Tensor:
    """Pack a 1-D uint8 tensor of values < 4, four per byte, LSB first (``out``, ``clobber``: as
    :func:`_pack1`)."""
    n = v.numel()
    main = n - n % 4
    if out is None:
        out = torch.empty(packed_nbytes(n, 2), dtype=torch.uint8, device=v.device)
    if main:
        head = v[:main]
        if head.storage_offset() % 4:
            head, clobber = head.clone(), True
        words = head.view(torch.int32)
        prod = words.mul_(_PACK2_MAGIC) if clobber else words * _PACK2_MAGIC
        out[: main // 4] = _top_byte(prod)
    if main != n:
        tail = v[main:].to(torch.int64)
        shifts = 2 * torch.arange(n - main, device=v.device, dtype=torch.int64)
        out[main // 4] = (tail << shifts).sum().to(torch.uint8)
    return out


#: The widths below 8 whose values do not divide a byte: :func:`_pack_odd` packs them.
ODD_BITS = (3, 5, 6, 7)


def _merge_rounds(bits: int) -> list[tuple[int, int, int]]:
    """The three rounds that pack eight byte-sized values of ``bits`` bits (bytes of one int64 word,
    little-endian) into the word's low ``8 * bits`` bits: round ``r`` keeps the low half of each lane
    of ``16 << r`` bits (mask ``keep``) and moves its high half (mask ``move``) down by ``shift``,
    next to the low half's ``bits << r`` used bits. Bit 63 of a word is never set (a value of byte 7
    is below ``2**7``), so the masks leave it out and int64 arithmetic shifts equal logical ones."""
    rounds = []
    for r, lane in enumerate((16, 32, 64)):
        half = lane // 2
        low = sum(((1 << half) - 1) << p for p in range(0, 64, lane))
        rounds.append((low, ~low & ((1 << 63) - 1), half - (bits << r)))
    return rounds


def _split_rounds(bits: int) -> list[tuple[int, int, int]]:
    """The rounds of :func:`_merge_rounds` undone, last first: round ``r`` keeps each lane's low
    ``bits << r`` used bits (mask ``keep``) and moves the ``bits << r`` above them up by ``shift``
    into the lane's high half (mask ``move``)."""
    rounds = []
    for (_, move, shift), r, lane in zip(_merge_rounds(bits), range(3), (16, 32, 64)):
        keep = sum(((1 << (bits << r)) - 1) << p for p in range(0, 64, lane))
        rounds.append((keep, move, shift))
    return rounds[::-1]


def _merge(word: torch.Tensor, bits: int) -> torch.Tensor:
    """Int64 words of eight byte-sized values of ``bits`` bits each packed into their low ``8 * bits``
    bits by :func:`_merge_rounds` (``word`` is consumed)."""
    for keep, move, shift in _merge_rounds(bits):
        high = word & move
        word = (word & keep).bitwise_or_(high.bitwise_right_shift_(shift))
    return word


def _split(word: torch.Tensor, bits: int) -> torch.Tensor:
    """:func:`_merge` undone: each word's low ``8 * bits`` bits back to eight bytes (:func:`_split_rounds`)."""
    for keep, move, shift in _split_rounds(bits):
        high = (word << shift).bitwise_and_(move)
        word = (word & keep).bitwise_or_(high)
    return word


def _pack_odd(v: torch.Tensor, bits: int) -> torch.Tensor:
    """:func:`pack_bits` for ``bits`` in :data:`ODD_BITS`: groups of eight values as int64 words of
    bytes merged by :func:`_merge`, each word's low ``bits`` bytes kept; the last fewer than eight values
    zero-padded to one word (the zeros pack to the zero padding bits)."""
    n = v.numel()
    main = n - n % 8
    out = torch.empty(packed_nbytes(n, bits), dtype=torch.uint8, device=v.device)
    if main:
        head = v[:main]
        if head.dtype != torch.uint8 or not head.is_contiguous() or head.storage_offset() % 8:
            head = head.to(torch.uint8, memory_format=torch.contiguous_format).clone()  # int64 views need 8-byte alignment
        word = _merge(head.view(torch.int64), bits)
        out[: main * bits // 8].view(-1, bits).copy_(word.view(torch.uint8).view(-1, 8)[:, :bits])
    if main != n:
        tail = torch.zeros(8, dtype=torch.uint8, device=v.device)
        tail[: n - main] = v[main:]
        rest = out[main * bits // 8 :]
        rest.copy_(_merge(tail.view(torch.int64), bits).view(torch.uint8)[: rest.numel()])
    return out


def _unpack_odd(data: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """:func:`unpack_bits` (uint8 values) for ``bits`` in :data:`ODD_BITS`: each ``bits`` bytes
    zero-extended to an int64 word and :func:`_split`; the last fewer than eight values from their
    remaining bytes, zero-extended the same way."""
    groups = -(-n // 8)
    if not groups:
        return torch.empty(0, dtype=torch.uint8, device=data.device)
    full = min(groups, data.numel() // bits)  # groups whose bytes are all there (every one but a short last)
    word = torch.zeros(groups, 8, dtype=torch.uint8, device=data.device)
    word[:full, :bits] = data[: full * bits].reshape(full, bits)
    if full < groups:
        last = data[full * bits :]
        word[full, : last.numel()] = last
    return _split(word.view(torch.int64), bits).view(torch.uint8).view(-1)[:n]


def pack_small_into(codes: torch.Tensor, bits: int, out: torch.Tensor) -> None:
    """``out.copy_(pack_bits(codes, bits))`` for a 1-D uint8 scratch tensor ``codes`` (``bits < 8``).

    For 1 and 2 bits the packing multiplies in place in ``codes`` (clobbering it) and writes
    straight into ``out``: no temporaries. Other widths go through :func:`pack_bits`.
    """
    if bits == 1:
        _pack1(codes, out, clobber=True)
    elif bits == 2:
        _pack2(codes, out, clobber=True)
    else:
        out.copy_(pack_bits(codes, bits))


def pack_bits(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack a 1-D tensor of non-negative integers ``< 2**bits`` into a uint8 tensor.

    ``values`` may be bool or any integer dtype. The caller guarantees the range (values are
    produced by a quantizer); it is not re-checked here to keep the hot path to one pass.
    """
    _check_bits(bits)
    v = values.reshape(-1)
    n = v.numel()
    if bits > 8:
        # planar: low bytes, then the high bits packed recursively (see the module docstring)
        wide = torch.int64 if bits > 31 else torch.int32
        if v.dtype not in (torch.int32, torch.int64):
            v = v.to(wide)
        low = (v & 0xFF).to(torch.uint8)
        high = pack_bits(v >> 8, bits - 8)
        return torch.cat([low, high])
    if v.dtype == torch.bool:
        v = v.view(torch.uint8)
    if bits == 8:
        return v.to(torch.uint8)
    if bits == 1:
        return _pack1(v.to(torch.uint8).contiguous())
    if bits == 2:
        return _pack2(v.to(torch.uint8).contiguous())
    if bits in ODD_BITS:
        return _pack_odd(v, bits)
    # bits == 4 (every other width is handled above): two values a byte, the first in the low nibble
    v = v.to(torch.uint8)
    if n % 2:
        v = torch.cat([v, v.new_zeros(1)])
    v = v.reshape(-1, 2)
    return v[:, 0] | (v[:, 1] << 4)


def check_padding(data: torch.Tensor, bits: int, n: int) -> None:
    """Raise :class:`CorruptPayloadError` where the unused bits of the last byte of ``n`` packed values
    of ``bits`` < 8 bits (``data``, uint8, its length already checked) are not zero: :func:`pack_bits`
    writes zeros there, so anything else is not its output."""
    used = (n * bits) % 8
    if used and int(data[-1]) >> used:
        raise CorruptPayloadError(f"padding bits of the last packed byte are not zero ({int(data[-1]):#04x})")


def unpack_bits(data: torch.Tensor, bits: int, n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: ``n`` values of ``bits`` bits from ``data`` (uint8).

    Raises:
        CorruptPayloadError: ``data`` is not a 1-D uint8 tensor of exactly ``packed_nbytes(n, bits)``
            bytes, or the unused bits of its last byte are not zero (``pack_bits`` writes zeros).
    """
    _check_bits(bits)
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
        raise CorruptPayloadError("packed data must be a 1-D uint8 tensor")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise CorruptPayloadError(f"value count must be a non-negative int, got {n!r}")
    expected = packed_nbytes(n, bits)
    if data.numel() != expected:
        raise CorruptPayloadError(f"{data.numel()} packed bytes for {n} values of {bits} bits; expected {expected}")
    if bits > 8:
        wide = torch.int64 if bits > 31 else torch.int32
        low = data[:n].to(wide)
        high = unpack_bits(data[n:], bits - 8, n, wide)
        return (low | (high << 8)).to(dtype)
    if bits == 8:
        return data.to(dtype)
    check_padding(data, bits, n)
    if bits in ODD_BITS:
        return _unpack_odd(data, bits, n).to(dtype)
    # bits 1, 2 or 4 (every other width is handled above): g values a byte, the first in the low bits
    g, mask = 8 // bits, (1 << bits) - 1
    out = torch.empty((data.numel(), g), dtype=torch.uint8, device=data.device)
    for j in range(g):
        torch.bitwise_and(data >> (bits * j), mask, out=out[:, j])
    return out.reshape(-1)[:n].to(dtype)


def bits_for_levels(levels: int) -> int:
    """Minimal bit width that can hold ``levels`` distinct values (``levels >= 1``)."""
    return max(1, (levels - 1).bit_length())
