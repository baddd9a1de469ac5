"""ZipML-style uniform fixed-point quantization with unbiased stochastic rounding.

Zhang, Li, Kara, Alistarh, Liu, Zhang, "ZipML: Training Linear Models with End-to-End Low Precision,
and a Little Bit of Deep Learning", ICML 2017, Section 2: values are stochastically rounded to a
uniform grid, ``Q(x) = l_i`` or ``l_{i+1}`` (the neighbouring grid points) with probabilities that
make ``E[Q(x)] = x``. SketchML (Jiang et al., SIGMOD 2018, Section 4 and Table 4) uses this as its
8-bit and 16-bit fixed-point baseline ("ZipML-8bit", "ZipML-16bit"), with the grid spanning the
gradient's ``[min, max]``.

Here: per tensor, ``2**bits`` grid points ``min + k * (max - min) / (2**bits - 1)``,
``k = 0 .. 2**bits - 1`` (so ``2**bits - 1`` equal intervals and the endpoints exact), the code
``k = floor((x - min) * (2**bits - 1) / (max - min) + u)`` with ``u`` uniform (the shared 16-bit
dither kernel of :mod:`~gcbench.compressors.codecs.qsgd`, counter-based uniforms of :mod:`~gcbench.compressors.kernels.dither`, exact to within ``2**-17`` of
a step), packed in ``bits`` bits.

Wire format (sections):

0. ``range``: float32 ``[min, max]``.
1. ``codes``: ``bits`` bits each, packed by :mod:`~gcbench.compressors.wire.bitpack` (planar low byte / high byte for 16).

A constant tensor (``max == min``) writes all-zero codes and decodes exactly. For float64 input the
range is rounded outwards to float32 (``min`` down, ``max`` up) so the grid still covers every value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ..base import Codec, Stage, expect_sections
from ..numerics import all_finite, finite_aminmax
from ..wire.bitpack import packed_nbytes, unpack_bits
from ..errors import CorruptPayloadError, UnsupportedInputError
from .rounding import MIN_SCALE, as_float32, decode_packed, round_up_f32, stochastic_round

_F32_MAX = torch.finfo(torch.float32).max


@dataclass(eq=False)
class ZipML(Codec):
    """Uniform ``bits``-bit fixed point over ``[min, max]`` with unbiased stochastic rounding."""

    bits: int = 8
    seed: int = 0

    codec_id: ClassVar[int] = 23
    stochastic: ClassVar[bool] = True
    unbiased: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    #: The values ``code * step + min`` lie in ``[min, max]`` up to rounding, and the range is checked
    #: finite: only a range with an end beyond half the float32 maximum can round past it, and
    #: :meth:`_decode_into` scans the output for those alone (the generic scan of every output cost
    #: ZipML-8's decode 0.5x a ``copy_`` at 25M values: 9.6 against 6.0 ms into a ready buffer).
    decodes_finite: ClassVar[bool] = True
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("min/max range (float32)", lossless=True),
        Stage("stochastic rounding to 2**bits grid points", lossless=False),
        Stage("bit packing", lossless=True),
    )
    reference: ClassVar[str] = (
        "Zhang et al., ZipML, ICML 2017 (Sec. 2); 8/16-bit baseline of Jiang et al., SketchML, SIGMOD 2018 (Sec. 4)"
    )

    def __post_init__(self) -> None:
        self._require(
            isinstance(self.bits, int) and not isinstance(self.bits, bool) and 1 <= self.bits <= 16,
            f"bits must be an int in 1..16, got {self.bits!r}",
        )
        self._require(isinstance(self.seed, int) and not isinstance(self.seed, bool), "seed must be an int")
        self._require(0 <= self.seed < 1 << 63, f"seed must be in [0, 2**63) (an int64 on the wire), got {self.seed}")

    @property
    def top(self) -> int:
        """Largest code, ``2**bits - 1``."""
        return (1 << self.bits) - 1

    def _range(self, x: torch.Tensor) -> tuple[float, float]:
        """``(min, max)`` as float32-representable Python floats covering every value of ``x``."""
        lo, hi = finite_aminmax(x)  # the codec's finiteness check
        if x.dtype == torch.float64:  # round min down and max up to float32
            if max(abs(lo), abs(hi)) > _F32_MAX:
                raise UnsupportedInputError("ZipML stores its range in float32; the float64 input exceeds its range")
            lo32, hi32 = np.float32(lo), np.float32(hi)
            if float(lo32) > lo:
                lo32 = np.nextafter(lo32, np.float32(-np.inf))
            if float(hi32) < hi:
                hi32 = np.nextafter(hi32, np.float32(np.inf))
            lo, hi = float(lo32), float(hi32)
        return lo, hi

    def checks_finite(self, x: torch.Tensor) -> bool:
        """True: the range's min/max (:meth:`_range`) is the finiteness check (one pass fewer)."""
        return True

    def _encode(self, x, *, key, generator):
        lo, hi = self._range(x)
        x = as_float32(x, "ZipML")
        top = self.top
        if hi == lo:  # constant tensor: code 0 decodes to min exactly
            packed = torch.zeros(packed_nbytes(x.numel(), self.bits), dtype=torch.uint8, device=x.device)
        else:
            if hi - lo < MIN_SCALE:
                # a range this small (subnormal values) is widened upwards so that top / range stays
                # finite in float32; the grid still covers [min, max]
                hi = float(round_up_f32(torch.tensor([lo + MIN_SCALE], dtype=torch.float64))[0])
            a = top / (hi - lo)
            if hi - lo <= _F32_MAX:
                # 0 <= (x - min) * a <= top (to rounding): codes fit before clamping (bounded)
                packed = stochastic_round(
                    x, a, offset=0.0, top=top, bits=self.bits, generator=generator, shift=lo, bounded=True
                )
            else:  # x - min would overflow float32: scale first (less exact; only for |x| > ~1.7e38)
                packed = stochastic_round(x, a, offset=-lo * a, top=top, bits=self.bits, generator=generator)
        rng = torch.tensor([lo, hi], dtype=torch.float32, device=x.device)
        return (rng, packed)

    def _decode_into(self, sections, numel, out):
        expect_sections(self, sections, [(torch.float32, 2), (torch.uint8, packed_nbytes(numel, self.bits))])
        rng, packed = sections
        lo, hi = float(rng[0]), float(rng[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise CorruptPayloadError(f"ZipML range [{lo}, {hi}] is not a finite interval")
        step = (hi - lo) / self.top
        wide = hi - lo > _F32_MAX / 2
        if wide:  # top * step could overflow float32 on the way: decode in float64
            codes = unpack_bits(packed, self.bits, numel, torch.int32)
            out.copy_(codes.to(torch.float64) * step + lo)
        else:
            decode_packed(packed, numel=numel, bits=self.bits, top=self.top, offset=0.0, factor=step, base=lo, out=out)
        # |min|, |max| <= F32_MAX / 2 (and a float32 decode): every value is at most max(|min|, |max|)
        # + (max - min) * 2**-22 in magnitude, finite; beyond, the float32 step's rounding can reach
        # infinity (the rare float64 decode is scanned too, rather than argued)
        if (wide or max(abs(lo), abs(hi)) > _F32_MAX / 2) and not all_finite(out):
            raise CorruptPayloadError("ZipML payload decodes to non-finite values (no encoder writes them)")
