"""Packing of small unsigned integers into the minimal number of bytes (a lossless stage).

``pack_bits(values, bits)`` stores ``n`` values, each ``< 2**bits``, in exactly
``ceil(n * bits / 8)`` bytes, least-significant bit first: value ``i`` occupies bit positions
``[i*bits, (i+1)*bits)`` of the little-endian bit stream. ``unpack_bits`` inverts it.

Vectorised torch (CPU and CUDA): values are processed in groups of ``g = 8 / gcd(bits, 8)`` so that a
group fills a whole number of bytes (at most 8); the Python loops run over the ``g`` columns of a
group and its bytes, never over elements. Widths above 8 are split into a low byte and the
remaining high bits.
"""

from __future__ import annotations

import math

import torch

from .errors import CorruptPayloadError, InvalidParameterError

MAX_BITS = 32


def packed_nbytes(n: int, bits: int) -> int:
    """Bytes that ``pack_bits`` writes for ``n`` values of ``bits`` bits."""
    return (n * bits + 7) // 8


def pack_bits(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack a 1-D tensor of non-negative integers ``< 2**bits`` into a uint8 tensor.

    The caller guarantees the range (values are produced by a quantizer); it is not re-checked here
    to keep the hot path to one pass.
    """
    if not 1 <= bits <= MAX_BITS:
        raise InvalidParameterError(f"bits must be in 1..{MAX_BITS}, got {bits}")
    n = values.numel()
    if bits > 8:
        v = values.reshape(-1).to(torch.int64)
        low = (v & 0xFF).to(torch.uint8)
        high = pack_bits(v >> 8, bits - 8)
        return torch.cat([low, high])
    out_len = packed_nbytes(n, bits)
    if bits == 8:
        return values.reshape(-1).to(torch.uint8)
    g = 8 // math.gcd(bits, 8)  # values per group
    gbytes = g * bits // 8  # bytes per group
    pad = (-n) % g
    v = values.reshape(-1)
    if bits in (1, 2, 4):
        # g * bits == 8: one byte per group, uint8 arithmetic throughout
        v = v.to(torch.uint8)
        if pad:
            v = torch.cat([v, v.new_zeros(pad)])
        v = v.reshape(-1, g)
        acc = v[:, 0].clone()
        for j in range(1, g):
            acc |= v[:, j] << (bits * j)
        return acc[:out_len]
    v = v.to(torch.int64)
    if pad:
        v = torch.cat([v, v.new_zeros(pad)])
    v = v.reshape(-1, g)
    word = v[:, 0].clone()
    for j in range(1, g):
        word |= v[:, j] << (bits * j)
    out = torch.empty((word.numel(), gbytes), dtype=torch.uint8, device=values.device)
    for b in range(gbytes):
        out[:, b] = ((word >> (8 * b)) & 0xFF).to(torch.uint8)
    return out.reshape(-1)[:out_len]


def unpack_bits(data: torch.Tensor, bits: int, n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: ``n`` values of ``bits`` bits from ``data`` (uint8).

    Raises:
        CorruptPayloadError: ``data`` does not hold exactly ``packed_nbytes(n, bits)`` bytes.
    """
    if not 1 <= bits <= MAX_BITS:
        raise InvalidParameterError(f"bits must be in 1..{MAX_BITS}, got {bits}")
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise CorruptPayloadError("packed data must be a 1-D uint8 tensor")
    expected = packed_nbytes(n, bits)
    if data.numel() != expected:
        raise CorruptPayloadError(f"{data.numel()} packed bytes for {n} values of {bits} bits; expected {expected}")
    if bits > 8:
        low = data[:n].to(torch.int64)
        high = unpack_bits(data[n:], bits - 8, n, torch.int64)
        return (low | (high << 8)).to(dtype)
    if bits == 8:
        return data.to(dtype)
    g = 8 // math.gcd(bits, 8)
    gbytes = g * bits // 8
    ngroups = (n + g - 1) // g
    pad = ngroups * gbytes - data.numel()
    d = torch.cat([data, data.new_zeros(pad)]) if pad else data
    d = d.reshape(ngroups, gbytes)
    mask = (1 << bits) - 1
    if bits in (1, 2, 4):
        out = torch.empty((ngroups, g), dtype=torch.uint8, device=data.device)
        col = d[:, 0]
        for j in range(g):
            out[:, j] = (col >> (bits * j)) & mask
        return out.reshape(-1)[:n].to(dtype)
    word = d[:, 0].to(torch.int64)
    for b in range(1, gbytes):
        word |= d[:, b].to(torch.int64) << (8 * b)
    out = torch.empty((ngroups, g), dtype=torch.int64, device=data.device)
    for j in range(g):
        out[:, j] = (word >> (bits * j)) & mask
    return out.reshape(-1)[:n].to(dtype)


def bits_for_levels(levels: int) -> int:
    """Minimal bit width that can hold ``levels`` distinct values (``levels >= 1``)."""
    return max(1, (levels - 1).bit_length())
