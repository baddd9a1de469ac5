"""No compression and plain casts: the baselines every ratio is measured against.

* :class:`Identity` sends the tensor's own bytes in its own dtype (lossless for every dtype).
* :class:`Cast` sends it cast to float16 or bfloat16 (Micikevicius et al., "Mixed Precision
  Training", ICLR 2018, for fp16; Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training",
  2019, for bf16). A cast is linear: fp16 payloads of several workers can be summed by all_reduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..base import Codec, Stage, expect_sections
from ..numerics import all_finite, overflow_error, raise_if_non_finite, saturating_cast
from ..error_feedback import CORRECTED
from ..errors import CorruptPayloadError
from ..kernels.cast16 import cast16_native, from_f16_c, to_f16_c
from ..kernels.core import ef_cast16
from ..kernels.workspace import fresh
from ..parallel.cpu_pool import caller_workers

_CAST_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(eq=False)
class Identity(Codec):
    """The tensor's raw bytes in its own dtype."""

    codec_id: ClassVar[int] = 1
    linear: ClassVar[bool] = True
    elementwise: ClassVar[bool] = True
    unbiased: ClassVar[bool] = True
    contractive: ClassVar[bool] = True
    stages: ClassVar[tuple[Stage, ...]] = (Stage("raw bytes", lossless=True),)
    reference: ClassVar[str] = "uncompressed baseline"
    no_kernel_reason: ClassVar[str] = "encode returns the input itself: no pass to fuse"
    decodes_into: ClassVar[bool] = True
    decodes_into_own_dtype: ClassVar[bool] = True
    passthrough: ClassVar[bool] = True

    def _encode(self, x, *, key, generator):
        return (x,)

    def _decode(self, sections, numel):
        if len(sections) != 1 or sections[0].numel() != numel or not sections[0].is_floating_point():
            expect_sections(self, sections, [(torch.float32, numel)])
        return sections[0]

    def _decode_into(self, sections, numel, out):
        saturating_cast(self._decode(sections, numel), out.dtype, out=out)  # one copy: the values are the payload's own


@dataclass(eq=False)
class Cast(Codec):
    """Cast to a 16-bit float type (``to`` = ``"float16"`` or ``"bfloat16"``).

    Both saturate (the finite-input policy): values beyond the target's range (|x| > 65504 for
    float16, ~3.39e38 for bfloat16) become its largest finite value rather than Inf, so a finite
    gradient never decodes to a non-finite one.
    """

    to: str = "float16"

    codec_id: ClassVar[int] = 2
    linear: ClassVar[bool] = True
    elementwise: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    stages: ClassVar[tuple[Stage, ...]] = (Stage("16-bit float cast", lossless=False),)
    reference: ClassVar[str] = "Micikevicius et al., Mixed Precision Training, ICLR 2018 (fp16); Kalamkar et al. 2019 (bf16)"
    #: The 16-bit section is checked finite by ``_encode`` (a saturated value replaces a non-finite
    #: cast of a finite input) and by ``_decode`` (a received one), in its own dtype: half the bytes
    #: of the float32 result the base class would scan, with ``aminmax``.
    encodes_finite: ClassVar[bool] = True
    decodes_finite: ClassVar[bool] = True
    no_kernel_reason: ClassVar[str] = (
        "the cast then a scan of its 16-bit result is as fast as one compiled pass (25M values, same run: "
        "3.2-3.9x copy_ against 5.3-5.8x; the fresh 50 MB payload's page faults dominate both); "
        "error feedback has its kernel, and on the CPU the float16 cast and its scan are one C pass "
        "(compressors/kernels/cast16.py)"
    )

    def __post_init__(self) -> None:
        self._require(self.to in _CAST_DTYPES, f"to must be one of {sorted(_CAST_DTYPES)}, got {self.to!r}")

    def checks_finite(self, x: torch.Tensor) -> bool:
        """True for float32 input: the scan of the 16-bit result (half the bytes) stands for the
        contract's scan of the input (see :meth:`_encode`)."""
        return x.dtype == torch.float32

    def _encode(self, x, *, key, generator):
        dtype = _CAST_DTYPES[self.to]
        if x.dtype != torch.float32:
            return (saturating_cast(x, dtype),)
        top = torch.finfo(dtype).max
        # cast first, then saturate the result: the same bits as saturating_cast's clamp then cast
        # (a finite value beyond the 16-bit range rounds to the largest finite value or to +-inf,
        # which becomes it), without its float32 temporary. NaN / Inf input shows as a non-finite
        # result; a non-finite result of finite input is a saturated value.
        q = fresh(x.numel(), dtype, x.device).view(x.shape)
        if dtype == torch.float16 and x.is_contiguous() and cast16_native(x.device):
            # the cast and the scan of its result in one C pass (the same bits)
            finite = to_f16_c(x, q, caller_workers())
        else:
            finite = all_finite(q.copy_(x))  # x.to(dtype)'s bits
        if not finite:
            raise_if_non_finite(x)
            torch.nan_to_num_(q, posinf=top, neginf=-top)
        return (q,)

    def encode_with_feedback(
        self, g: torch.Tensor, e: torch.Tensor | None
    ) -> tuple[tuple[torch.Tensor], torch.Tensor]:
        """The cast with error feedback for :class:`~.error_feedback.ErrorFeedback` in one compiled
        pass (:data:`~gcbench.compressors.kernels.core.ef_cast16`): ``c = g + e``, its saturating cast, the residual ``c - cast``
        and the finiteness check. ``g``, ``e``: flat float32. Same bytes and residual as the generic
        path (the residual of a saturated value is what it lost)."""
        dtype = _CAST_DTYPES[self.to]
        q, residual, finite = ef_cast16(g, e, torch.finfo(dtype).max, dtype)
        if not bool(finite):
            raise overflow_error(CORRECTED, torch.float32)
        return (q,), residual

    def _decode(self, sections, numel):
        expect_sections(self, sections, [(_CAST_DTYPES[self.to], numel)])
        if not all_finite(sections[0]):
            raise self._non_finite_payload()
        return sections[0]

    def _decode_into(self, sections, numel, out):
        q = sections[0] if len(sections) == 1 else None
        native = isinstance(q, torch.Tensor) and q.dtype == torch.float16 and q.is_contiguous()
        if not (native and cast16_native(q.device)):
            out.copy_(self._decode(sections, numel))  # the exact widening, one pass, no float32 temporary
            return
        expect_sections(self, sections, [(_CAST_DTYPES[self.to], numel)])
        # the exact widening and the scan in one C pass
        if not from_f16_c(q, out, caller_workers()):
            raise self._non_finite_payload()

    def _non_finite_payload(self) -> CorruptPayloadError:
        return CorruptPayloadError(f"{type(self).__name__} payload holds non-finite values (no encoder writes them)")
