"""TernGrad: clipping at c standard deviations, then stochastic ternarization, 2 bits per value.

Wen, Xu, Yan, Wu, Wang, Chen, Li, "TernGrad: Ternary Gradients to Reduce Communication in Distributed
Deep Learning", NeurIPS 2017. Section 3 (eq. 2): with ``s = max |g|`` (the per-layer scaler),

    tern(g_i) = s * sign(g_i) * b_i,   b_i ~ Bernoulli(|g_i| / s),

which is unbiased. Section 3.3 (gradient clipping) first clips ``g_i`` to ``[-c*sigma, c*sigma]``,
``sigma`` the standard deviation of ``g``, with ``c = 2.5`` (``clip_sigma``; 0 disables it). The
original TensorFlow code computes ``sigma`` as the population standard deviation
(``sqrt(mean((g - mean(g))**2))``) and clips symmetrically around zero, as here. After clipping,
``s = max |clipped| = min(max |g|, c*sigma)``. TernGrad is unbiased only with respect to the
*clipped* gradient, hence ``unbiased = False``.

Wire format (sections):

0. ``scale``: float32, one value: ``s``.
1. ``trits``: ``tern(g_i)/s + 1`` in ``{0, 1, 2}``, 2 bits each, four per byte (code 3 is invalid).

Implementation: ``s * sign(g_i) * b_i`` has the distribution of the stochastic rounding of
``g_i / s`` in ``[-1, 1]`` to its neighbouring integers in ``{-1, 0, 1}`` (for ``g_i >= 0``: 1 with
probability ``g_i/s``, else 0; symmetrically below zero). The codec computes the code as
``floor(clamp(g_i / s, -1, 1) + 1 + u_i)`` with the shared kernel of :mod:`~gcbench.compressors.codecs.qsgd` (16-bit uniforms of :mod:`~gcbench.compressors.kernels.dither`,
exact to within ``2**-17``); the clamp *is* the clipping, since ``s`` equals the clipping threshold
whenever clipping bites. Degenerate case: when ``sigma == 0`` (all values equal) clipping is skipped
(the paper's rule would clip everything to zero; there is no outlier to remove).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from ..base import Codec, Stage, expect_sections
from ..numerics import finite_aminmax, raise_if_non_finite
from ..wire.bitpack import packed_nbytes
from ..errors import CorruptPayloadError
from ..kernels.core import MOMENT_ROWS, moments, trits_decode, use_compiled
from ..kernels.dequantize import trits_decode_c, trits_native
from ..kernels.moments import moments_c, moments_native
from ..parallel.cpu_pool import caller_workers
from .rounding import MIN_SCALE, as_float32, stochastic_round


#: ``max |x|`` range where the float32 squares of :data:`~gcbench.compressors.kernels.core.moments` are trusted: no square
#: overflows (2**120 < float32 max) and the squares that underflow (values below 2**-63) are
#: below 2**-46 of the largest square; outside it the variance is recomputed in float64.
SQUARES_SAFE = (2.0**-40, 2.0**60)
#: Columns per eager call of the moments function (:func:`_column_moments`): its temporaries
#: (128 KB each) stay in cache.
MOMENT_CHUNK = 1 << 15


#: Off the CPU, :func:`fixed_sum`'s levels run on the device while at least this many values are
#: left, so only a few KB travel to the host (a whole host copy of the column sums of 64M values was
#: 80% of TernGrad's kernel time on an H200).
DEVICE_SUM_STOP = 1 << 16


def _fold_rows(a: Any, stop: int, cat: Callable[[list[Any]], Any]) -> Any:
    """:func:`fixed_sum`'s levels on a 1-D tensor or numpy array ``a`` (``cat`` joins two of them)
    while at least ``stop`` (and :data:`~gcbench.compressors.kernels.core.MOMENT_ROWS`) values are
    left: the rows of each level added elementwise into a new array, row 0 first, then the values
    past the last whole column kept as they are."""
    while len(a) >= max(stop, MOMENT_ROWS):
        cols = len(a) // MOMENT_ROWS
        head = a[: cols * MOMENT_ROWS].reshape(MOMENT_ROWS, cols)
        acc = head[0] + head[1]  # a new array: ``a`` itself is not written
        for j in range(2, MOMENT_ROWS):  # rows, not elements
            acc += head[j]
        rest = a[cols * MOMENT_ROWS :]
        a = cat([acc, rest]) if len(rest) else acc
    return a


def fixed_sum(v: torch.Tensor, *, host_below: int | None = None) -> float:
    """The float64 sum of the 1-D float64 ``v`` in a fixed order that neither the thread count nor
    the mode changes: rows of :data:`~gcbench.compressors.kernels.core.MOMENT_ROWS` added elementwise, row 0 first, level after
    level, then the last few values in index order. On the CPU in numpy on a host view, in place: a
    fresh tensor per row addition took 0.69 against 0.37 ms for the 781K column sums of 25M values.
    Off the CPU the levels run on the device while ``host_below`` (default :data:`DEVICE_SUM_STOP`)
    or more values are left; each level is the same elementwise additions in the same order, so
    the bits do not depend on where a level runs."""
    stop = host_below if host_below is not None else (None if v.device.type == "cpu" else DEVICE_SUM_STOP)
    if stop is not None:
        v = _fold_rows(v, stop, torch.cat)
    a = _fold_rows(v.detach().cpu().numpy(), 0, np.concatenate)
    total = 0.0
    for t in a.tolist():
        total += t
    return total


def _column_moments(body: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """:data:`~gcbench.compressors.kernels.core.moments` of ``body`` (``(MOMENT_ROWS, cols)``): compiled in one pass, in one
    C call where C kernels run (:func:`~gcbench.compressors.kernels.moments.moments_c`: below the
    compile threshold in the default mode), or its function eagerly on column chunks of
    :data:`MOMENT_CHUNK` (the same elementwise ops: the same bits). Returns the column sums, the
    column sums of squares, the min and the max."""
    if use_compiled(body.numel()):
        s, q, lo, hi = moments(body)
    elif body.is_contiguous() and moments_native(body.device):  # one C call, the same sums
        return moments_c(body)
    else:
        cols = body.shape[1]
        s, q, lo, hi = (torch.empty(cols, dtype=body.dtype, device=body.device) for _ in range(4))
        for a in range(0, cols, MOMENT_CHUNK):
            b = min(cols, a + MOMENT_CHUNK)
            s[a:b], q[a:b], lo[a:b], hi[a:b] = moments.fn(body[:, a:b])
    # exact in any order; NaN propagates. Two reductions, not one over a stack of both (a copy of
    # 2 x 781K floats for 25M values: 1.5 ms)
    return s, q, float(lo.min()), float(hi.max())


def abs_max_and_std(x: torch.Tensor) -> tuple[float, float]:
    """``max |x|`` and the population standard deviation ``sqrt(mean((x - mean(x))**2))`` of a
    float32 tensor, as Python floats.

    One read of ``x`` in the common case (:data:`~gcbench.compressors.kernels.core.moments`: min, max, and float32 sums and sums
    of squares of columns of :data:`~gcbench.compressors.kernels.core.MOMENT_ROWS` values, added in a fixed order, then summed
    in float64 in a fixed order by :func:`fixed_sum`: the same bits in eager and compiled mode,
    whatever the thread count); then ``var = E[x^2] - mean^2``. A second, exact float64 pass runs
    when that formula would cancel (``var`` small against ``mean^2``) or ``max |x|`` lies outside
    :data:`SQUARES_SAFE`. NaN / Inf raise
    :class:`.errors.NonFiniteGradientError` (the min/max is the codec's finiteness check).
    """
    n = x.numel()
    cols = n // MOMENT_ROWS
    tail = x[cols * MOMENT_ROWS :].to(torch.float64)
    lo, hi = (float(tail.min()), float(tail.max())) if tail.numel() else (math.inf, -math.inf)
    total = sumsq = 0.0
    if cols:
        s, q, blo, bhi = _column_moments(x[: cols * MOMENT_ROWS].view(MOMENT_ROWS, cols))
        lo, hi = min(lo, blo) if not math.isnan(blo) else blo, max(hi, bhi) if not math.isnan(bhi) else bhi
        total, sumsq = fixed_sum(s.to(torch.float64)), fixed_sum(q.to(torch.float64))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise_if_non_finite(x)
    for t in tail.tolist():
        total += t
        sumsq += t * t
    amax = max(hi, -lo)
    mean = total / n
    var = sumsq / n - mean * mean
    if not SQUARES_SAFE[0] <= amax <= SQUARES_SAFE[1] or not math.isfinite(var) or var <= 1e-3 * mean * mean:
        xd = x.to(torch.float64)
        mean = float(xd.mean())
        var = float(torch.linalg.vector_norm(xd - mean)) ** 2 / n
    return amax, math.sqrt(max(var, 0.0))


def population_std(x: torch.Tensor) -> float:
    """Population standard deviation of a float32 tensor (see :func:`abs_max_and_std`)."""
    return abs_max_and_std(x)[1]


_TRIT_TABLE = torch.tensor([[((b >> (2 * j)) & 3) - 1.0 for j in range(4)] for b in range(256)], dtype=torch.float32)
#: 1 for the bytes that hold a code 3 (both bits of some pair set): no encoder writes them.
_BAD_TRIT_BYTE = torch.tensor([int(bool(b & (b >> 1) & 0x55)) for b in range(256)], dtype=torch.uint8)


def decode_trits(packed: torch.Tensor, numel: int, scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Float32 ``(code - 1) * scale`` of ``numel`` 2-bit codes, with one table lookup per byte,
    written into ``out`` (a flat contiguous float32 tensor of ``numel`` values: the caller's buffer)
    or a new tensor; returns it.

    The byte values serve as the gather index of both the validity check and the decoding (one
    conversion, two gathers: few passes, which matters most on a loaded machine). The whole bytes
    are written in place (one compiled pass, or a gather into ``out``); the last, partial byte's
    values come from the same table.

    Raises:
        CorruptPayloadError: a code 3 (both bits of a pair set) or non-zero padding bits.
    """
    used = (numel % 4) * 2
    if used and int(packed[-1]) >> used:
        raise CorruptPayloadError("padding bits of the last trit byte are not zero")
    dev = packed.device
    if out is None:
        out = torch.empty(numel, dtype=torch.float32, device=dev)
    full = numel // 4
    if trits_native(dev):
        # one C pass over the bytes, on the caller's threads (the table's values: the same bits)
        table = (_TRIT_TABLE * scale).contiguous()
        bad = trits_decode_c(packed[:full].contiguous(), table, out[: full * 4], caller_workers())
        if bad or (numel % 4 and bool(_BAD_TRIT_BYTE[int(packed[full])])):
            raise CorruptPayloadError("TernGrad trit code 3 is not a valid symbol")
        if numel % 4:
            out[full * 4 :] = table[int(packed[full])][: numel % 4]
        return out
    if use_compiled(numel):
        # one compiled pass: the codes, their values and the code-3 check (the table's values)
        bad = False
        if full:
            bad = bool(trits_decode(packed[:full].view(-1, 1), torch.tensor([scale], dtype=torch.float32, device=dev),
                                    out[: full * 4].view(full, 4)))
        if bad or (numel % 4 and bool(_BAD_TRIT_BYTE[int(packed[full])])):
            raise CorruptPayloadError("TernGrad trit code 3 is not a valid symbol")
        if numel % 4:
            out[full * 4 :] = (_TRIT_TABLE[int(packed[full])] * scale)[: numel % 4].to(dev)
        return out
    idx = packed.to(torch.int32)
    if bool(torch.index_select(_BAD_TRIT_BYTE.to(dev), 0, idx).any()):
        raise CorruptPayloadError("TernGrad trit code 3 is not a valid symbol")
    table = _TRIT_TABLE.to(dev) * scale  # (256, 4): +-scale or 0 for each of a byte's trits
    if full:
        torch.index_select(table, 0, idx[:full], out=out[: full * 4].view(full, 4))
    if numel % 4:
        out[full * 4 :] = table[int(packed[full])][: numel % 4]
    return out


@dataclass(eq=False)
class TernGrad(Codec):
    """TernGrad with ``clip_sigma`` = c (clip to ``[-c*sigma, c*sigma]`` first; 0 disables)."""

    clip_sigma: float = 2.5
    seed: int = 0

    codec_id: ClassVar[int] = 21
    stochastic: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    decodes_finite: ClassVar[bool] = True  # the scale is checked finite; values are +-scale (or 0)
    unbiased: ClassVar[bool] = False  # unbiased for the clipped gradient only (and for clip_sigma=0)
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("clip to c standard deviations", lossless=False),
        Stage("stochastic ternarization", lossless=False),
        Stage("2-bit packing", lossless=True),
    )
    reference: ClassVar[str] = (
        "Wen et al., TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep Learning, "
        "NeurIPS 2017 (Sec. 3, 3.3)"
    )

    def __post_init__(self) -> None:
        self._require(
            isinstance(self.clip_sigma, (int, float)) and not isinstance(self.clip_sigma, bool),
            f"clip_sigma must be a float, got {self.clip_sigma!r}",
        )
        self.clip_sigma = float(self.clip_sigma)
        self._require(
            math.isfinite(self.clip_sigma) and self.clip_sigma >= 0,
            f"clip_sigma must be >= 0 and finite, got {self.clip_sigma}",
        )
        self._require(isinstance(self.seed, int) and not isinstance(self.seed, bool), "seed must be an int")
        self._require(0 <= self.seed < 1 << 63, f"seed must be in [0, 2**63) (an int64 on the wire), got {self.seed}")

    def scaler(self, x: torch.Tensor) -> float:
        """``s = max |clip(x)|`` as stored in the payload (float32-representable, >= MIN_SCALE)."""
        if self.clip_sigma > 0:
            s, sigma = abs_max_and_std(x)
            if sigma > 0:
                s = min(s, self.clip_sigma * sigma)
        else:
            lo, hi = finite_aminmax(x)
            s = max(hi, -lo)
        s = float(torch.tensor(s, dtype=torch.float32))  # what the payload holds
        return max(s, MIN_SCALE)

    def checks_finite(self, x: torch.Tensor) -> bool:
        """The scale's min/max is the finiteness check (:func:`abs_max_and_std`), except for float64
        input, whose range check (:func:`~gcbench.compressors.codecs.rounding.as_float32`) comes first and would name Inf otherwise."""
        return x.dtype != torch.float64

    def _encode(self, x, *, key, generator):
        x = as_float32(x, "TernGrad")
        s = self.scaler(x)
        packed = stochastic_round(x, 1.0 / s, offset=1.0, top=2, bits=2, generator=generator)
        return (torch.tensor([s], dtype=torch.float32, device=x.device), packed)

    def _decode_into(self, sections, numel, out):
        expect_sections(self, sections, [(torch.float32, 1), (torch.uint8, packed_nbytes(numel, 2))])
        scale, packed = sections
        s = float(scale[0])
        if not math.isfinite(s) or s < 0:
            raise CorruptPayloadError(f"TernGrad scale must be finite and non-negative, got {s}")
        decode_trits(packed, numel, s, out)
