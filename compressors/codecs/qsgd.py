"""QSGD: stochastic quantization to ``s`` levels per bucket, minimal-bit packing.

Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD: Communication-Efficient SGD via Gradient Quantization
and Encoding", NeurIPS 2017. Section 3.1 defines the quantizer: for a vector ``v`` of a bucket of
``d`` values and ``s`` levels,

    Q_s(v_i) = ||v|| * sign(v_i) * xi_i(v, s),

where ``xi_i = l/s`` or ``(l+1)/s`` with ``l = floor(|v_i| * s / ||v||)``, the upper one with
probability ``|v_i| * s / ||v|| - l``: ``E[Q_s(v)] = v`` (Lemma 3.1 (i)) and
``E||Q_s(v) - v||^2 <= min(d/s^2, sqrt(d)/s) ||v||^2`` (Lemma 3.1 (ii)), ``d`` being the bucket
size: the paper quantizes *buckets* of ``d`` consecutive values, each with its own norm.
``norm="max"`` normalises by ``max |v_i|`` instead of ``||v||_2``, a common practical variant: still
unbiased, and never more variance than the l2 norm (a smaller normaliser means finer levels).

Wire format (sections):

0. ``norms``: float32, one per bucket (``ceil(n / bucket_size)``).
1. ``levels``: uint8, the signed level ``sign(v_i) * l_i + s`` (in ``[0, 2s]``), packed in exactly
   ``bits_for_levels(2s + 1)`` bits by :mod:`~gcbench.compressors.wire.bitpack` (s=1: 2 bits, s=3: 3, s=7: 4, s=127: 8).

The paper's Elias coding of the levels (its lossless variable-length encoding) is not applied: this
is the fixed-width variant, as in the paper's 2-, 4- and 8-bit QSGD experiments.

The stochastic rounding and its decode, shared with :mod:`~gcbench.compressors.codecs.terngrad` and
:mod:`~gcbench.compressors.codecs.zipml`, are in :mod:`~gcbench.compressors.codecs.rounding`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..base import Codec, Stage, expect_sections
from ..numerics import raise_if_non_finite
from ..wire.bitpack import bits_for_levels, packed_nbytes
from ..errors import CorruptPayloadError
from ..kernels.dequantize import dequantize_native
from ..parallel.threads import single_thread
from ..kernels.core import bucket_factor, bucket_scale, use_compiled
from .rounding import (
    F32_MAX, MIN_SCALE, as_float32, cpu_path, decode_packed, round_down_nonneg_f32, round_up_f32, stochastic_round,
)

#: Normaliser of a QSGD bucket whose float32 l2 norm is 0 (its values are all below 2**-74.5).
ZERO_BUCKET_NORM = 2.0**-74


@dataclass(eq=False)
class QSGD(Codec):
    """QSGD with ``levels`` = s quantization levels per sign, one norm per bucket of ``bucket_size``.

    Args:
        levels: s >= 1; signed levels take ``bits_for_levels(2s + 1)`` bits (s=127: 8 bits).
        bucket_size: d, the number of consecutive values sharing one norm.
        norm: ``"l2"`` (the paper's ``||v||_2``) or ``"max"`` (``max |v_i|``, lower variance).
        seed: seeds the codec's own generator.
    """

    levels: int = 127
    bucket_size: int = 128
    norm: str = "l2"
    seed: int = 0

    codec_id: ClassVar[int] = 20
    stochastic: ClassVar[bool] = True
    unbiased: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    #: The norms are checked finite and at most the float32 maximum, codes at most 2s, and the
    #: factor is rounded down so that ``s * factor <= norm``: every ``(code - s) * factor`` is finite.
    decodes_finite: ClassVar[bool] = True
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("bucket norms (float32)", lossless=True),
        Stage("stochastic rounding to s levels", lossless=False),
        Stage("minimal-bit packing of signed levels", lossless=True),
    )
    reference: ClassVar[str] = (
        "Alistarh et al., QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding, "
        "NeurIPS 2017 (Sec. 3.1)"
    )

    def __post_init__(self) -> None:
        self._require(isinstance(self.levels, int) and not isinstance(self.levels, bool), "levels must be an int")
        self._require(1 <= self.levels <= 32767, f"levels must be in 1..32767, got {self.levels}")
        d = self.bucket_size
        self._require(
            isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 2**31,
            f"bucket_size must be an int in 1..2**31, got {d!r}",
        )
        self._require(self.norm in ("l2", "max"), f"norm must be 'l2' or 'max', got {self.norm!r}")
        self._require(isinstance(self.seed, int) and not isinstance(self.seed, bool), "seed must be an int")
        self._require(0 <= self.seed < 1 << 63, f"seed must be in [0, 2**63) (an int64 on the wire), got {self.seed}")

    @property
    def bits(self) -> int:
        """Bits per packed signed level."""
        return bits_for_levels(2 * self.levels + 1)

    def _norms(self, x: torch.Tensor) -> torch.Tensor:
        """Float32 normaliser of each bucket: its norm, never below ``max |x_i|`` nor MIN_SCALE.

        float32 squares underflow below ~2**-75 and overflow above ~2**64, so a bucket whose l2 norm
        computed in float32 is below 2**-60 or not finite is recomputed exactly in float64 (rounded up
        to float32, capped at the float32 maximum). A bucket whose computed norm is exactly 0 holds
        only values below 2**-74.5 in magnitude: it gets ``ZERO_BUCKET_NORM = 2**-74`` without a second
        look (cheap for sparse gradients). Any normaliser >= max |x_i| keeps the quantizer unbiased.
        """
        n, d = x.numel(), self.bucket_size
        full = n // d
        parts = []
        for seg, rows in ((x[: full * d], full), (x[full * d :], 1 if n % d else 0)):
            if not rows:
                continue
            v = seg.view(rows, -1)
            if self.norm == "max":
                lo, hi = torch.aminmax(v, dim=1)
                parts.append(torch.maximum(hi, -lo))
            else:
                parts.append(torch.linalg.vector_norm(v, dim=1))
        norms = torch.cat(parts) if len(parts) > 1 else parts[0]
        if self.norm == "max":
            lo, hi = torch.aminmax(norms)  # NaN propagates, Inf shows: the codec's finiteness check
            if not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
                raise_if_non_finite(x)
        if self.norm == "l2":
            # common case in one reduction: every norm in [2**-60, float32 max] needs no second look,
            # no zero-bucket substitute and no clamp (the checks below would all be no-ops)
            lo, hi = torch.aminmax(norms)
            if float(lo) >= 2.0**-60 and float(hi) <= F32_MAX:
                return norms
            redo = ((norms > 0) & (norms < 2.0**-60)) | ~torch.isfinite(norms)
            if bool(redo.any()):
                exact = torch.zeros(norms.numel(), dtype=torch.float64, device=x.device)
                rows = torch.nonzero(redo[:full]).reshape(-1)
                if rows.numel():
                    exact[rows] = torch.linalg.vector_norm(x[: full * d].view(full, d)[rows].to(torch.float64), dim=1)
                if n % d and bool(redo[-1]):
                    exact[-1] = torch.linalg.vector_norm(x[full * d :].to(torch.float64))
                # float64 norms of finite float32 values cannot overflow: a non-finite one is the
                # input's NaN/Inf (the codec's finiteness check, see checks_finite)
                if not bool(torch.isfinite(exact).all()):
                    raise_if_non_finite(x)
                norms = torch.where(redo, round_up_f32(exact.clamp(max=F32_MAX)), norms)
            norms = torch.where(norms == 0, torch.full_like(norms, ZERO_BUCKET_NORM), norms)
        return norms.clamp_(min=MIN_SCALE)

    def checks_finite(self, x: torch.Tensor) -> bool:
        """The bucket norms are the finiteness check (a NaN/Inf bucket has a non-finite norm, which
        :meth:`_norms` recomputes in float64 and reports), except for float64 input, whose range
        check (:func:`as_float32`) comes first and would name an Inf otherwise."""
        return x.dtype != torch.float64

    def _encode(self, x, *, key, generator):
        x = as_float32(x, "QSGD")
        s, d = self.levels, self.bucket_size
        norms = self._norms(x)
        if use_compiled(x.numel(), cpu_path("dither", x.device)):  # one compiled pass instead of three small parallel ops
            scale = bucket_scale(norms, torch.tensor([float(s)], dtype=torch.float64, device=x.device))
        else:
            scale = (s / norms.to(torch.float64)).to(torch.float32)
        # |x_i| * scale <= s (the normaliser is >= max |x_i|): codes fit before clamping (bounded)
        packed = stochastic_round(
            x, scale, offset=s, top=2 * s, bits=self.bits, generator=generator, bucket=d, bounded=True
        )
        return (norms, packed)

    def _decode_into(self, sections, numel, out):
        s, d = self.levels, self.bucket_size
        nbuckets = (numel + d - 1) // d
        expect_sections(self, sections, [(torch.float32, nbuckets), (torch.uint8, packed_nbytes(numel, self.bits))])
        norms, packed = sections
        # one thread where the C pass decodes: an OpenMP region just before it would leave its pool
        # thread waiting for a core (spinning team threads; 25M values, AVX2: 0.95x copy_, not 1.5x)
        with single_thread(norms.device, dequantize_native(norms.device)):
            lo, hi = torch.aminmax(norms)  # NaN propagates: fails both tests
            if not (float(lo) >= 0 and float(hi) <= F32_MAX):
                raise CorruptPayloadError("QSGD norms must be finite and non-negative")
            # rounded down so that s * factor <= norm: a norm near the float32 maximum never decodes to inf
            if use_compiled(numel, cpu_path("dequantize", norms.device)):  # one compiled pass instead of six small parallel ops (same bits)
                factor = bucket_factor(norms, torch.tensor([float(s)], dtype=torch.float64, device=norms.device))
            else:
                factor = round_down_nonneg_f32(norms.to(torch.float64) / s)
        decode_packed(packed, numel=numel, bits=self.bits, top=2 * s, offset=float(s), factor=factor, bucket=d, out=out)
