"""TernGrad's column statistics in C (:file:`c/moments.c`, built by
:mod:`~gcbench.compressors.kernels.native`): for float32 values viewed as
:data:`~gcbench.compressors.kernels.core.MOMENT_ROWS` rows, the float32 sum and sum of squares of
each column, added row 0 first, and the min and max of all values, in one read and one call. The
eager reference (:data:`~gcbench.compressors.kernels.core.moments`' function on column chunks) takes
some 120 small ops per call, which dominated a small tensor's encode; the same column sums.
"""

from __future__ import annotations

import ctypes

import torch

from . import native
from .core import MOMENT_ROWS

#: The C source (:file:`c/moments.c`).
MOMENTS_C = "moments"
_P, _SIZE = ctypes.c_void_p, ctypes.c_size_t
_SIGNATURES = {"gcbench_moments": ([_P, _SIZE, _P, _P, _P], None)}


def moments_native(device: torch.device) -> bool:
    """Whether :func:`moments_c` runs on ``device``: the CPU, in a mode that runs C kernels
    (:func:`~gcbench.compressors.kernels.native.use_native`)."""
    return device.type == "cpu" and native.use_native(MOMENTS_C)


def moments_c(body: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """The column sums, column sums of squares (float32, one per column), min and max (NaN when a
    value is NaN) of ``body``, a contiguous float32 CPU tensor of ``(MOMENT_ROWS, cols)``: what
    :data:`~gcbench.compressors.kernels.core.moments` computes, with the same sums.

    Raises:
        ValueError: a tensor of another dtype, device, layout or shape.
    """
    if (body.dtype != torch.float32 or body.device.type != "cpu" or not body.is_contiguous() or body.dim() != 2
            or body.shape[0] != MOMENT_ROWS):
        raise ValueError("moments_c takes a contiguous float32 CPU tensor of (MOMENT_ROWS, cols)")
    cols = body.shape[1]
    s, q = torch.empty(cols), torch.empty(cols)
    extremes = torch.empty(2)
    native.record_call(MOMENTS_C)
    native.typed(MOMENTS_C, _SIGNATURES).gcbench_moments(body.data_ptr(), cols, s.data_ptr(), q.data_ptr(),
                                                        extremes.data_ptr())
    lo, hi = extremes.tolist()
    return s, q, lo, hi
