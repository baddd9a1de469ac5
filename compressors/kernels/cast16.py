"""The float16 cast and its widening in C (:file:`c/cast16.c`, built by
:mod:`~gcbench.compressors.kernels.native`), each one pass that also reports whether a float16 value
is NaN or infinite: what :class:`~gcbench.compressors.codecs.identity.Cast` does with a cast and a
scan of its result (two reads), in one read, on the caller's threads.

torch's cast stays the reference: F16C's conversion rounds to nearest even as torch's does, and the
widening is exact, so the same bits (``tests/test_cast16_c.py``). Where the build has no F16C
(:func:`cast16_native` is False) the codec keeps torch's ops.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from . import native

#: The C source (:file:`c/cast16.c`).
CAST16_C = "cast16"
_P, _SIZE = ctypes.c_void_p, ctypes.c_size_t
#: ctypes signatures of :file:`c/cast16.c`.
_SIGNATURES = {
    "gcbench_to_f16": ([_P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P], ctypes.c_int),
    "gcbench_from_f16": ([_P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P], ctypes.c_int),
    "gcbench_cast16_native": ([], ctypes.c_int),
    "gcbench_openmp": ([], ctypes.c_int),
}
#: Values per block on the caller's threads (:func:`~gcbench.compressors.kernels.native.in_blocks`).
BLOCK = 1 << 16


def cast16_native(device: torch.device) -> bool:
    """Whether :func:`to_f16_c` and :func:`from_f16_c` run on ``device``: the CPU, in a mode that runs
    C kernels (:func:`~gcbench.compressors.kernels.native.use_native`), built with F16C."""
    return device.type == "cpu" and native.use_native(CAST16_C) and f16c_built()


@functools.cache
def f16c_built() -> bool:
    """Whether :file:`c/cast16.c` builds here with its F16C conversions (whatever the mode; once per
    process, as :func:`~gcbench.compressors.kernels.native.library` builds)."""
    return native.library(CAST16_C) is not None and bool(native.typed(CAST16_C, _SIGNATURES).gcbench_cast16_native())


def _flat(t: torch.Tensor, dtype: torch.dtype) -> bool:
    return t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()


def to_f16_c(x: torch.Tensor, q: torch.Tensor, workers: int) -> bool:
    """``q`` (float16) = ``x`` (float32) cast as ``x.to(torch.float16)`` casts it; returns whether every
    value of ``q`` is finite. Contiguous CPU tensors of one length; blocks on up to ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes, or a build without F16C.
    """
    return _run("gcbench_to_f16", x, torch.float32, q, torch.float16, workers)


def from_f16_c(q: torch.Tensor, out: torch.Tensor, workers: int) -> bool:
    """``out`` (float32) = ``q`` (float16) widened exactly; returns whether every value is finite.
    Contiguous CPU tensors of one length; blocks on up to ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes, or a build without F16C.
    """
    return _run("gcbench_from_f16", q, torch.float16, out, torch.float32, workers)


def _run(name: str, src: torch.Tensor, src_dtype: torch.dtype, dst: torch.Tensor, dst_dtype: torch.dtype,
         workers: int) -> bool:
    if not (_flat(src, src_dtype) and _flat(dst, dst_dtype) and src.numel() == dst.numel()):
        raise ValueError(f"{name}: tensors of other dtypes, devices, layouts or sizes")
    n = src.numel()
    if n == 0:
        return True
    fn = getattr(native.typed(CAST16_C, _SIGNATURES), name)
    native.record_call(CAST16_C)
    bad = native.in_blocks(CAST16_C, lambda a, b, block, threads: fn(src.data_ptr(), a, b, block, threads, dst.data_ptr()),
                           0, n, BLOCK, src.device, workers)
    if any(v < 0 for v in bad):
        raise ValueError(f"{name}: built without F16C")
    return not any(bad)
