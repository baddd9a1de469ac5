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

The scale ``||x||_1 / n`` is summed in a fixed order, exactly per row of 1024 values and the rows in
index order (:mod:`~gcbench.compressors.kernels.sign`), so eager, compiled and CUDA runs send the same float32 (float64
input: one float64 sum, eager). The compiled kernels (:mod:`~gcbench.compressors.kernels.sign`) pack the bits in one pass
and decode them in one; with error feedback, one read-only pass of ``g`` and ``e`` gives the scale
and the finiteness check, then one pass writes the bits and the new residual over the old one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..base import Codec, Stage, expect_sections
from ..numerics import overflow_error, raise_if_non_finite
from ..wire.bitpack import pack_small_into, packed_nbytes
from ..errors import CorruptPayloadError, UnsupportedInputError
from ..error_feedback import CORRECTED
from ..kernels import choice
from ..kernels.core import use_compiled
from ..kernels.workspace import widens, working_float32
from ..kernels.sign import (
    abs_row_sums, ef_sign, ef_sign_c, ef_sign_eager, mean_of_rows, sign_bits, sign_bits_c, sign_decode,
    row_block, sign_decode_c, sign_native,
)
from ..parallel.cpu_pool import caller_workers

_SCALES = ("none", "mean_abs")


def _sign_table(device: torch.device) -> torch.Tensor:
    """(256, 8) float32: row ``b`` holds ``+1``/``-1`` for bits 0..7 of byte ``b``."""
    bits = (torch.arange(256, device=device).unsqueeze(1) >> torch.arange(8, device=device)) & 1
    return bits.to(torch.float32).mul_(2).sub_(1)


def mean_abs(x: torch.Tensor, *, compiled: bool = False) -> float:
    """``||x||_1 / n`` as a Python float, summed in :mod:`~gcbench.compressors.kernels.sign`'s fixed order (exact row sums
    of 1024 values, rows added in index order: the same bits eager and ``compiled``, the latter for
    float32 only). float64 input: one float64 sum (eager).

    Raises:
        NonFiniteGradientError: ``x`` holds NaN or Inf (found by the row sums).
    """
    n = x.numel()
    if x.dtype == torch.float64:
        return float(x.abs().sum()) / n
    sums = abs_row_sums(x, None, compiled=compiled)
    if not bool(torch.isfinite(sums).all()):
        raise_if_non_finite(x)
    return mean_of_rows(sums, n)


def _float32(v: float) -> float:
    """``v`` rounded to float32 (the scale travels as float32)."""
    return float(torch.tensor(v, dtype=torch.float32))


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
        """Whether the compiled kernels run for ``x``: the sign bits where :meth:`_in_c` does not,
        and the mean-|x| scale's row sums (the choice's probe, ``"sign"``, times those)."""
        path = "sign" if x.device.type == "cpu" else None  # kernels.choice: its probe runs on the CPU
        return use_compiled(x.numel(), path) and x.numel() >= 8 and (x.dtype == torch.float32 or widens(x))

    @staticmethod
    def _in_c(x: torch.Tensor) -> bool:
        """Whether the sign bits are the C pass's (:func:`~gcbench.compressors.kernels.sign.sign_bits_c`): float32
        input, or 16-bit input that :meth:`_encode` widens (:func:`~gcbench.compressors.kernels.workspace.widens`)."""
        return ((x.dtype == torch.float32 or widens(x)) and x.numel() >= 8 and x.is_contiguous()
                and sign_native(x.device))

    def checks_finite(self, x: torch.Tensor) -> bool:
        """True where :meth:`_encode` finds NaN / Inf itself: the C pass and the compiled path
        (:data:`~gcbench.compressors.kernels.sign.sign_bits` reports finiteness from its pass) and the mean-|x| scale of
        float16/bfloat16/float32 input (its row sums)."""
        return self._in_c(x) or self._fused(x) or (self.scale == "mean_abs" and x.dtype != torch.float64)

    def _encode(self, x, *, key, generator):
        # a 16-bit input widened (the same signs, and the same scale: its row sums are exact) for the
        # float32 passes; torch's comparisons of 16-bit values run several times slower
        if widens(x):
            x = working_float32(x, "Sign.float32")
        n = x.numel()
        bits = torch.empty(packed_nbytes(n, 1), dtype=torch.uint8, device=x.device)
        in_c = self._in_c(x)
        # the compiled choice is asked only when it decides something (its probe compiles and measures)
        fused = not in_c and self._fused(x)
        if in_c or fused:  # other dtypes: eager (rare; no extra compile)
            # whole bytes in one C or compiled pass (the same bits); the last byte eager
            full = n // 8 * 8
            if in_c:
                finite = sign_bits_c(x[:full], bits[: full // 8], caller_workers())
            else:
                finite = sign_bits(x[:full], bits[: full // 8])
            if not bool(finite) or (n > full and not bool(torch.isfinite(x[full:]).all())):
                raise_if_non_finite(x)
            if n > full:
                pack_small_into(torch.ge(x[full:], 0).view(torch.uint8), 1, bits[full // 8 :])
        else:
            # the sign mask is a scratch buffer: packing multiplies in place in it (no temporaries)
            pack_small_into(torch.ge(x, 0).view(torch.uint8), 1, bits)
        if self.scale == "none":
            return (bits,)
        m = _float32(mean_abs(x, compiled=self._fused(x)))  # <= max |x|: finite for float32 input
        if not math.isfinite(m):
            raise UnsupportedInputError(
                "Sign stores its scale in float32; the float64 input's mean |x| exceeds its range"
            )
        return (torch.tensor([m], dtype=torch.float32, device=x.device), bits)

    def encode_with_feedback(
        self, g: torch.Tensor, e: torch.Tensor | None
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor] | None:
        """EF-signSGD's memory (Karimireddy et al. 2019, Alg. 1: ``e_{t+1} = p_t - Delta_t``) fused
        for :class:`~.error_feedback.ErrorFeedback` in two passes (:mod:`~gcbench.compressors.kernels.sign`): a read-only
        one of ``g`` and ``e`` for the row sums of ``|p|`` (``p = g + e``; the scale ``||p||_1 / d``,
        the same bits as :func:`mean_abs` of ``p``) and the finiteness check, then one that writes
        the sign bits and the residual ``p - scale * sign(p)`` (``p - decode``: the generic path's
        values) over ``e`` (into a new buffer on the first step, ``e`` None). ``g``, ``e``: flat
        float32. Compiled (:func:`~gcbench.compressors.kernels.core.use_compiled`): two kernel calls; eager: the same functions
        block by block. Same bytes and residual as the generic path.

        Raises:
            NumericOverflowError: ``p`` holds NaN or Inf (the generic path's message); ``e`` is untouched.
        """
        n = g.numel()
        compiled = use_compiled(n)
        sums = abs_row_sums(g, e, compiled=compiled)
        if not bool(torch.isfinite(sums).all()):
            raise overflow_error(CORRECTED, torch.float32)
        # the check passed: nothing fails from here, so the new residual overwrites the old buffer
        # (a new full-size buffer per step would cost its page faults)
        dev = g.device
        s = 1.0 if self.scale == "none" else _float32(mean_of_rows(sums, n))
        st = torch.tensor([s], dtype=torch.float32, device=dev)
        bits = torch.empty(packed_nbytes(n, 1), dtype=torch.uint8, device=dev)
        residual = torch.empty_like(g) if e is None else e
        full = n // 8 * 8
        if sign_native(dev) and all(t is None or t.is_contiguous() for t in (g, e)):  # one C pass, the same values
            ef_sign_c(g[:full], None if e is None else e[:full], s, bits[: full // 8],
                      residual[:full] if e is None else None, caller_workers())
        else:
            block = full if compiled else row_block(dev)  # eager: blocks whose temporaries stay in cache
            run = ef_sign if compiled else ef_sign_eager
            for i in range(0, full, max(block, 8)):  # one call compiled; eager: blocks, not elements
                k = min(block, full - i)
                run(g[i : i + k], None if e is None else e[i : i + k], st, bits[i // 8 : (i + k) // 8],
                    residual[i : i + k] if e is None else None)
        if n > full:  # the last, partial byte, eager; -1 pads it (padding bits are 0)
            t = n - full
            pad_g = torch.full((8,), -1.0, dtype=torch.float32, device=dev)
            pad_g[:t] = g[full:]
            pad_e = None if e is None else torch.zeros(8, dtype=torch.float32, device=dev)
            if pad_e is not None:
                pad_e[:t] = e[full:]
            res = torch.empty(8, dtype=torch.float32, device=dev)
            ef_sign_eager(pad_g, pad_e, st, bits[full // 8 :], res)
            residual[full:] = res[:t]
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
        # whole bytes straight into out (8 values per byte; compiled: one pass, the table's values),
        # the last partial byte apart
        full = numel // 8
        path = "sign-decode" if bits.device.type == "cpu" else None  # kernels.choice
        if full and sign_native(bits.device) and out.is_contiguous():  # one C pass, the table's values
            sign_decode_c(bits[:full], scale, out[: full * 8], caller_workers())
        elif full:  # 1 row: eager (its own shape would compile)
            table = _sign_table(bits.device)
            if scale != 1.0:
                table.mul_(scale)
            _decode_bytes(bits[:full], scale, table, out[: full * 8].view(full, 8), use_compiled(numel, path) and full > 1)
        if used:  # +-scale: the table's values (+-1 times a float32 scale is exact)
            last = int(bits[full])
            out[full * 8 :] = torch.tensor([scale if last >> j & 1 else -scale for j in range(used)], dtype=torch.float32,
                                           device=out.device)


def _decode_bytes(bits: torch.Tensor, scale: float, table: torch.Tensor, out: torch.Tensor, compiled: bool) -> None:
    """Whole bytes ``bits`` into ``out`` (``(bytes, 8)``) in torch: the compiled kernel's one pass
    (:data:`~gcbench.compressors.kernels.sign.sign_decode`) or a gather of ``table`` (each byte's
    eight values, already scaled)."""
    if compiled:
        sign_decode(bits, torch.tensor([scale], dtype=torch.float32, device=bits.device), out)
    else:
        torch.index_select(table, 0, bits.to(torch.int32), out=out)


# the probes of kernels.choice (the mean-|x| scale's row sums, the decode): whichever mode is faster here
def _probe_setup() -> dict[str, object]:
    """signSGD (``scale="none"``) on :data:`~gcbench.compressors.kernels.choice.PROBE_NUMEL` normal
    values (seed 0): the codec, its input, a payload and a decode buffer
    (:func:`~gcbench.compressors.kernels.choice.probe_input`)."""
    return choice.probe_input("sign", _build_probe_setup)


def _build_probe_setup(n: int) -> dict[str, object]:
    x = torch.randn(n, generator=torch.Generator().manual_seed(0))
    codec = Sign()
    return {"codec": codec, "x": x, "out": torch.empty_like(x), "payload": codec.encode(x)}


def _probe_encode(mode: str) -> None:
    """The row sums of the mean-|x| scale (the sign bits being a C pass's where C kernels build)."""
    p = _probe_setup()
    abs_row_sums(p["x"], None, compiled=mode == "compiled")  # type: ignore[arg-type]


def _probe_decode(mode: str) -> None:
    """The torch decode of the payload's bytes (the C pass decodes where C kernels build)."""
    p = _probe_setup()
    (bits,) = p["payload"].sections  # type: ignore[attr-defined]
    out = p["out"].view(-1, 8)  # type: ignore[attr-defined]
    _decode_bytes(bits, 1.0, _sign_table(bits.device), out, mode == "compiled")


choice.register("sign", _probe_encode)
choice.register("sign-decode", _probe_decode)
