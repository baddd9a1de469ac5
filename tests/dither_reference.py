"""An independent reference of the quantizers' documented uniforms (compressors/kernels/dither.py), for the
codec tests: numpy unsigned 32-bit arithmetic (wrapping, as pcg_hash is specified in C) on whole
arrays of uint64 indices, where the compiled kernels use masked int64 torch ops and the eager CPU path
in-place uint32 sub-chunks split at each new high word."""

from __future__ import annotations

import numpy as np
import torch


def pcg_hash(v: np.ndarray) -> np.ndarray:
    """Jarzynski and Olano (JCGT 2020)'s pcg_hash on uint32."""
    v = v.astype(np.uint32)
    with np.errstate(over="ignore"):
        state = v * np.uint32(747796405) + np.uint32(2891336453)
        word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


def key_of(seed: int) -> int:
    """The key a codec seeded with ``seed`` draws on its first encode (one int64 in [0, 2**63))."""
    return int(torch.empty(1, dtype=torch.int64).random_(generator=torch.Generator().manual_seed(seed)))


def words(key: int, p: np.ndarray) -> np.ndarray:
    """``pcg(pcg(lo32(p) ^ k0) ^ (k1 + hi32(p)))`` (uint32, wrapping) for uint64 pair indices ``p``,
    ``k0`` = the key's low word, ``k1 = pcg(k0) ^`` its high word."""
    p = p.astype(np.uint64)
    k0 = np.uint32(key & 0xFFFFFFFF)
    k1 = pcg_hash(np.array([k0]))[0] ^ np.uint32(key >> 32)
    lo = (p & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (p >> np.uint64(32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        return pcg_hash(pcg_hash(lo ^ k0) ^ (k1 + hi))


def uniform16(key: int, n: int, span: int) -> np.ndarray:
    """The 16-bit uniforms of elements 0..n-1: element e < S takes the low half of word e, S + e its
    high half, e >= 2S the high half of word e, where S = u * floor(n / (2 u)), u = lcm(span, 8)."""
    unit = np.lcm(span, 8)
    split = int(unit * (n // (2 * unit)))
    e = np.arange(n, dtype=np.uint64)
    pair = np.where(e < split, e, np.where(e < 2 * split, e - np.uint64(split), e))
    w = words(key, pair)
    return np.where(e < split, w & np.uint32(0xFFFF), w >> np.uint32(16)).astype(np.int64)


def uniforms(seed: int, n: int, span: int) -> np.ndarray:
    """The uniforms ``(r + 0.5) / 2**16`` in (0, 1) of a codec seeded with ``seed`` (its first encode),
    rows of ``span`` values (QSGD: the bucket; TernGrad, ZipML: rounding.FUSED_SPAN)."""
    return (uniform16(key_of(seed), n, span).astype(np.float64) + 0.5) / 65536.0
