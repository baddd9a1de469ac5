"""Exact arithmetic modulo the Mersenne prime p = 2^61 - 1 on int64 tensors, and the hash coefficients.

Count Sketch (as CSVec) hashes coordinates with polynomials over this prime: a 2-wise bucket hash
and a 4-wise sign hash. Every function here stays exact in int64 (no partial product reaches 2^63).
"""

from __future__ import annotations

import torch

#: The Mersenne prime 2^61 - 1 over which the hash polynomials are evaluated (as CSVec).
PRIME = (1 << 61) - 1
M31 = (1 << 31) - 1
M30 = (1 << 30) - 1


def fold(s: torch.Tensor) -> torch.Tensor:
    """``s mod p`` for ``0 <= s < 2^63``: one Mersenne fold then one conditional subtraction."""
    t = (s & PRIME) + (s >> 61)  # 2^61 = 1 (mod p); t < 2^61 + 4
    return torch.where(t >= PRIME, t - PRIME, t)


def addmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a + b) mod p`` for int64 tensors with ``0 <= a, b < p`` (exact, broadcasts)."""
    return fold(a + b)


def mulmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a * b) mod p`` for int64 tensors with ``0 <= a, b < p`` (exact, broadcasts).

    ``a = a1 2^31 + a0`` and ``b = b1 2^31 + b0`` with ``a0, b0 < 2^31`` and ``a1, b1 < 2^30``;
    then ``a b = a1 b1 2^62 + (a1 b0 + a0 b1) 2^31 + a0 b0`` and, modulo ``p``, ``2^62 = 2``
    and ``m 2^31 = (m >> 30) + (m mod 2^30) 2^31``. Every partial product and sum stays below
    ``2^63``, so int64 never overflows.
    """
    a0, a1 = a & M31, a >> 31
    b0, b1 = b & M31, b >> 31
    high = (a1 * b1) << 1  # a1 b1 2^62 = 2 a1 b1 (mod p); < 2^61
    mid = a1 * b0 + a0 * b1  # < 2^62
    mid = (mid >> 30) + ((mid & M30) << 31)  # mid 2^31 (mod p); < 2^32 + 2^61
    low = fold(a0 * b0)  # a0 b0 < 2^62
    return fold(low + mid + high)  # < 3 2^61 + 2^32 < 2^63


def mulmod_small(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``(a * x) mod p`` for ``0 <= a < p`` and ``0 <= x < 2^31`` (the Horner steps; cheaper)."""
    a0, a1 = a & M31, a >> 31
    low = fold(a0 * x)  # < 2^62 before folding
    m = a1 * x  # < 2^61
    mid = (m >> 30) + ((m & M30) << 31)  # m 2^31 (mod p)
    return fold(low + mid)


def hash_coefficients(rows: int, seed: int) -> torch.Tensor:
    """The ``(rows, 6)`` int64 hash coefficients in ``[0, p)`` for ``seed`` (CPU).

    Columns: ``a, b`` of the bucket hash ``((a i + b) mod p) mod c``; ``e3, e2, e1, e0`` of the
    sign polynomial ``((e3 i + e2) i + e1) i + e0 mod p``. Drawn by a CPU generator seeded with
    ``seed`` (the global random state is not touched), so every process gets the same numbers.
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    return torch.randint(0, PRIME, (rows, 6), generator=gen, dtype=torch.int64)


def mul_lazy(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A value congruent to ``a * x`` mod p, in ``[0, 2^61 + 3]``, for ``0 <= a <= 2^62 + 2^31``
    and ``0 <= x < 2^31`` (as :func:`mulmod_small` without its final conditional subtraction;
    every partial sum stays below ``2^63``)."""
    m = (a >> 31) * x  # < 2^62
    s = (a & M31) * x + (m >> 30) + ((m & M30) << 31)  # < 2^62 + 2^32 + 2^61
    return (s & PRIME) + (s >> 61)
