"""signSGD and EF-signSGD: one bit per value.

* ``scale="none"``: signSGD, Bernstein, Wang, Azizzadenesheli, Anandkumar, "signSGD: Compressed
  Optimisation for Non-Convex Problems", ICML 2018, Algorithm 1: the worker sends ``sign(g)``; the
  decoded tensor is ``+-1``. The payload is the packed bits alone: ``ceil(n/8)`` bytes of data.
* ``scale="mean_abs"``: the scaled sign of Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes
  SignSGD and other Gradient Compression Schemes", ICML 2019, Algorithm 1 (EF-SIGNSGD):
  ``C(p) = (||p||_1 / d) * sign(p)``. This compressor is a ``delta``-approximate compressor with
  ``||C(p) - p||^2 = ||p||^2 - ||p||_1^2 / d`` (Section 3, the scaled sign), so it is contractive. The
  registry's ``"ef-signsgd"`` wraps it in :class:`~.error_feedback.ErrorFeedback` (the ``e_{t+1} =
  p_t - Delta_t`` memory of the algorithm).

``sign(0)`` is taken as ``+1`` (and so is ``sign(-0.0)``): every value maps to one of two symbols,
as one bit requires. The class declares ``contractive = False`` because it holds for
``mean_abs`` only (``+-1`` is not contractive for small gradients).

Wire format (sections):

* ``"none"``: 0. ``bits``: uint8, bit ``i % 8`` of byte ``i // 8`` is 1 when ``x_i >= 0`` (LSB first,
  unused bits of the last byte are 0).
* ``"mean_abs"``: 0. ``scale``: float32, one value ``||x||_1 / n``; 1. ``bits`` as above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Codec, Stage, expect_sections, raise_if_non_finite
from .bitpack import pack_small_into, packed_nbytes
from .errors import CorruptPayloadError, UnsupportedInputError
from .error_feedback import corrected_scan, eager_block
from .fused import ef_sign, sign_bits, use_compiled

_SCALES = ("none", "mean_abs")


def _sign_table(device: torch.device) -> torch.Tensor:
    """(256, 8) float32: row ``b`` holds ``+1``/``-1`` for bits 0..7 of byte ``b``."""
    bits = (torch.arange(256, device=device).unsqueeze(1) >> torch.arange(8, device=device)) & 1
    return bits.to(torch.float32).mul_(2).sub_(1)


def mean_abs(x: torch.Tensor) -> float:
    """``||x||_1 / n`` as a Python float.

    The l1 norms of rows of 1024 values are combined in float64 (a single float32 accumulation over
    millions of values drifts by 0.1%); float64 when the float32 sums overflow.
    """
    n = x.numel()
    if x.dtype == torch.float64:
        return float(x.abs().sum()) / n
    rows = n // 1024
    total = float(torch.linalg.vector_norm(x[rows * 1024 :], ord=1, dtype=torch.float64))
    if rows:
        norms = torch.linalg.vector_norm(x[: rows * 1024].view(rows, 1024), ord=1, dim=1, dtype=torch.float32)
        total += float(norms.to(torch.float64).sum())
    if not math.isfinite(total):
        total = float(x.to(torch.float64).abs().sum())
    return total / n


@dataclass(eq=False)
class Sign(Codec):
    """One bit per value; ``scale`` = ``"none"`` (signSGD, +-1) or ``"mean_abs"`` (EF-signSGD's scale)."""

    scale: str = "none"

    codec_id: ClassVar[int] = 22
    decodes_into: ClassVar[bool] = True
    #: :meth:`encode_with_feedback` also runs eager (block by block): error feedback's later encodes
    #: update the residual in place instead of holding the corrected tensor and the decode at once.
    feedback_in_eager: ClassVar[bool] = True
    contractive: ClassVar[bool] = False  # true for scale="mean_abs" only (tested there)
    decodes_finite: ClassVar[bool] = True  # the scale is checked finite; values are +-scale (or 0)
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("sign (1 bit)", lossless=False),
        Stage("bit packing", lossless=True),
    )
    reference: ClassVar[str] = (
        "Bernstein et al., signSGD, ICML 2018 (Alg. 1); "
        "Karimireddy et al., Error Feedback Fixes SignSGD, ICML 2019 (Alg. 1)"
    )

    def __post_init__(self) -> None:
        self._require(self.scale in _SCALES, f"scale must be one of {_SCALES}, got {self.scale!r}")

    def _fused(self, x: torch.Tensor) -> bool:
        return use_compiled(x.numel()) and x.numel() >= 8 and x.dtype == torch.float32

    def checks_finite(self, x: torch.Tensor) -> bool:
        """True on the compiled path: :data:`.fused.sign_bits` reports finiteness from its own pass."""
        return self._fused(x)

    def _encode(self, x, *, key, generator):
        # the sign mask is a scratch buffer: packing multiplies in place in it (no temporaries)
        n = x.numel()
        bits = torch.empty(packed_nbytes(n, 1), dtype=torch.uint8, device=x.device)
        if self._fused(x):  # other dtypes: eager (rare; no extra compile)
            # whole bytes in one compiled pass (fused.sign_bits: the same bits); the last byte eager
            full = n // 8
            packed, finite = sign_bits(x[: full * 8].view(full, 8))
            if not bool(finite) or (n % 8 and not bool(torch.isfinite(x[full * 8 :]).all())):
                raise_if_non_finite(x)
            bits[:full] = packed
            if n % 8:
                pack_small_into(torch.ge(x[full * 8 :], 0).view(torch.uint8), 1, bits[full:])
        else:
            pack_small_into(torch.ge(x, 0).view(torch.uint8), 1, bits)
        if self.scale == "none":
            return (bits,)
        m = float(torch.tensor(mean_abs(x), dtype=torch.float32))  # <= max |x|: finite for float32 input
        if not math.isfinite(m):
            raise UnsupportedInputError(
                "Sign stores its scale in float32; the float64 input's mean |x| exceeds its range"
            )
        return (torch.tensor([m], dtype=torch.float32, device=x.device), bits)

    def encode_with_feedback(
        self, g: torch.Tensor, e: torch.Tensor | None
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor] | None:
        """EF-signSGD's memory (Karimireddy et al. 2019, Alg. 1: ``e_{t+1} = p_t - Delta_t``) fused
        for :class:`~.error_feedback.ErrorFeedback`: ``p = g + e`` in one compiled pass, its scale
        ``||p||_1 / d`` by :func:`mean_abs` (eager: its float64 row combination is the reference's
        summation order, which a compiled reduction would not keep), then the sign bits and the
        residual ``p - scale * sign(p)`` in one more compiled pass (:data:`.fused.ef_sign`).
        ``g``, ``e``: flat float32. Same bytes and residual as the generic path.

        Eager (not :func:`.fused.use_compiled`): the scan block by block, ``p`` formed in ``e``'s
        buffer (``g`` itself on the first step), the codec's own eager :meth:`_encode` of ``p`` (the
        generic path's bytes), then ``p - decoded`` written over ``p`` (into a new buffer on the
        first step) block by block with the decoder's table (:meth:`_decode`'s values)."""
        corrected_scan(g, e)
        if not use_compiled(g.numel()):
            c = g if e is None else e.add_(g)
            sections = self._encode(c, key=None, generator=None)
            residual = torch.empty_like(c) if e is None else c  # first step: g is the caller's
            table = _sign_table(c.device)
            if self.scale != "none" and float(sections[0][0]) != 1.0:  # as _decode
                table.mul_(float(sections[0][0]))
            bits = sections[-1]
            n = c.numel()
            block = eager_block(n, 8)
            for i in range(0, n, block):  # blocks, not elements
                k = min(block, n - i)
                decoded = torch.index_select(table, 0, bits[i // 8 : (i + k + 7) // 8].to(torch.int32)).reshape(-1)[:k]
                torch.sub(c[i : i + k], decoded, out=residual[i : i + k])
            return sections, residual
        # the scan passed: nothing fails from here, so c = g + e is formed in the residual's buffer
        # (e + g: the same sum) and the new residual overwrites it (a new full-size buffer per step
        # would cost its page faults)
        c = g if e is None else e.add_(g)
        n = c.numel()
        dev = c.device
        s = 1.0 if self.scale == "none" else float(torch.tensor(mean_abs(c), dtype=torch.float32))
        st = torch.tensor([s], dtype=torch.float32, device=dev)
        bits = torch.empty(packed_nbytes(n, 1), dtype=torch.uint8, device=dev)
        residual = torch.empty(n, dtype=torch.float32, device=dev) if e is None else c
        full = n // 8
        if full:
            ef_sign(c[: full * 8].view(full, 8), st, bits[:full], residual[: full * 8].view(full, 8))
        if n % 8:  # the last, partial byte, eager; -1 pads it (padding bits are 0)
            tail = torch.full((1, 8), -1.0, dtype=torch.float32, device=dev)
            tail[0, : n % 8] = c[full * 8 :]
            res = torch.empty_like(tail)
            ef_sign.fn(tail, st, bits[full:], res)
            residual[full * 8 :] = res[0, : n % 8]
        return ((bits,) if self.scale == "none" else (st, bits)), residual

    def _decode_into(self, sections, numel, out):
        nbytes = packed_nbytes(numel, 1)
        if self.scale == "none":
            expect_sections(self, sections, [(torch.uint8, nbytes)])
            (bits,) = sections
            scale = 1.0
        else:
            expect_sections(self, sections, [(torch.float32, 1), (torch.uint8, nbytes)])
            s, bits = sections
            scale = float(s[0])
            if not math.isfinite(scale) or scale < 0:
                raise CorruptPayloadError(f"sign scale must be finite and non-negative, got {scale}")
        used = numel % 8
        if used and int(bits[-1]) >> used:
            raise CorruptPayloadError("padding bits of the last sign byte are not zero")
        table = _sign_table(bits.device)
        if scale != 1.0:
            table.mul_(scale)
        # whole bytes gathered straight into out (8 values per byte), the last partial byte apart
        full = numel // 8
        if full:
            torch.index_select(table, 0, bits[:full].to(torch.int32), out=out[: full * 8].view(full, 8))
        if used:
            out[full * 8 :] = table[int(bits[full])][:used]
