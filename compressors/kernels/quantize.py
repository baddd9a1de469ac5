"""Stochastic rounding in C (:file:`c/quantize.c`, built by
:mod:`~gcbench.compressors.kernels.native`): the codes of 1 to 8 or of 16 bits of QSGD, TernGrad and
ZipML for the paired values (:func:`~gcbench.compressors.kernels.dither.split_point`), one hash word
per pair, packed to whole bytes (eight codes of 3, 5, 6 or 7 bits to as many bytes; 16-bit codes
split into two byte planes) in the same pass, in blocks of rows on the caller's threads; and the
int32 codes of the values after the pairs (:func:`dither_rest_c`), which are all of a small tensor's.

The eager code of :func:`~gcbench.compressors.codecs.rounding.stochastic_round` stays the reference (the
same bytes: the same 32-bit hash words, the same float32 operations, each rounded on its own).
Inductor's compiled pass (:data:`~gcbench.compressors.kernels.core.dither_codes`) computes them too,
more slowly: QSGD's 25M-value rounding took 8.9 against 13.2 ms with AVX-512 and 9.5 against 17.6 ms
limited to AVX2 (where Inductor also loads its integers through a stack buffer,
:func:`~gcbench.compressors.kernels.core.places_dtype`), one process, two threads, a ``copy_`` 7.6 ms.
"""

from __future__ import annotations

import ctypes

import torch

from . import native
from .dither import PAIRS_32

#: The C source (:file:`c/quantize.c`).
QUANTIZE_C = "quantize"
#: The code widths it writes: packed to whole bytes, or as two byte planes (16 bits).
BITS = (1, 2, 3, 4, 5, 6, 7, 8, 16)
_P, _SIZE, _U32, _F = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_float
#: ctypes signatures of :file:`c/quantize.c`.
_SIGNATURES = {
    **{f"gcbench_dither_u{bits}": ([_P, _SIZE, _SIZE, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, ctypes.c_int, _U32, _U32,
                                    _F, _F, _F, _P, _P], None) for bits in BITS},
    "gcbench_dither_rest": ([_P, _SIZE, _SIZE, _SIZE, _P, ctypes.c_int, _U32, _U32, _F, _F, _F, _P], None),
    "gcbench_openmp": ([], ctypes.c_int),
}
#: Values per block of each half (whole rows; several blocks per thread, taken in turn:
#: :func:`~gcbench.compressors.kernels.native.in_blocks`).
BLOCK = 1 << 16


def values_per_group(bits: int) -> int:
    """The codes of ``bits`` bits (in :data:`BITS`) that :func:`dither_c` writes as a unit of whole
    bytes: ``8 / bits`` to a byte for 1, 2 and 4 bits, eight (to ``bits`` bytes) for 3, 5, 6 and 7
    bits, one for 8 and 16 bits. A row of ``span`` values must hold whole units."""
    return 8 // bits if bits in (1, 2, 4) else 8 if bits < 8 else 1


def quantize_native(device: torch.device) -> bool:
    """Whether :func:`dither_c` rounds on ``device``: the CPU, in a mode that runs C kernels
    (:func:`~gcbench.compressors.kernels.native.use_native`)."""
    return device.type == "cpu" and native.use_native(QUANTIZE_C)


def dither_c(
    x: torch.Tensor, split: int, span: int, scales: torch.Tensor, words: tuple[int, int], const: float, shift: float,
    top: int, bits: int, out: torch.Tensor, workers: int,
) -> None:
    """The stochastically rounded codes of ``x[p]`` and ``x[split + p]`` for ``p < split`` (float32,
    contiguous CPU), ``clamp(fl(fl(fl(x - shift) * scale) + fl(const + r * 2**-16)), 0, top)``
    truncated, ``r`` the low and the high 16 bits of the pair's word under the key words ``words``
    (:func:`~gcbench.compressors.kernels.dither.key_words`, as ints), into ``out`` (uint8, contiguous)
    as :func:`~gcbench.compressors.wire.bitpack.pack_bits` lays out the codes of ``n`` values
    (``out``'s length times ``8 / bits``, or half its length for 16 bits): one bit stream, least
    significant first, the first half's bytes first, the second half's after them; 16-bit
    codes as their low bytes at ``out[p]``, ``out[split + p]`` and their high bytes ``n`` bytes later.
    ``split``: whole rows of ``span`` values, at most ``2**31``; ``span``: a multiple of
    :func:`values_per_group`;
    ``scales``: float32, one per row of the whole tensor, or one for all. Blocks of whole rows run on
    up to ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes; ``bits`` not in :data:`BITS`;
            ``split`` or ``span`` not as above; ``top`` not below ``2**bits``.
    """
    group = values_per_group(bits) if bits in BITS else 0
    rows = split // span if span > 0 else 0
    one = scales.numel() == 1
    n = out.numel() // 2 if bits == 16 else out.numel() * 8 // bits
    if (not group or x.dtype != torch.float32 or out.dtype != torch.uint8 or scales.dtype != torch.float32
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (x, out, scales))
            or span < 1 or span % group or split % span or split > PAIRS_32 or 2 * split > min(n, x.numel())
            or not (one or scales.numel() >= 2 * rows) or not 0 <= top < 1 << bits):
        raise ValueError("dither_c: tensors of other dtypes, devices, layouts or sizes")
    if rows == 0:
        return
    fn = getattr(native.typed(QUANTIZE_C, _SIGNATURES), f"gcbench_dither_u{bits}")
    native.record_call(QUANTIZE_C)
    k0, k1 = (w & 0xFFFFFFFF for w in words)
    args = (x.data_ptr(), split, span)
    high = out.data_ptr() + n if bits == 16 else None
    rest = (scales.data_ptr(), int(one), k0, k1, const, shift, float(top), out.data_ptr(), high)
    native.in_blocks(QUANTIZE_C, lambda a, b, block, threads: fn(*args, a, b, block, threads, *rest), 0, rows,
                     max(1, BLOCK // span), x.device, workers)


def dither_rest_c(
    x: torch.Tensor, start: int, span: int, scales: torch.Tensor, words: tuple[int, int], const: float, shift: float,
    top: int, out: torch.Tensor,
) -> torch.Tensor:
    """The int32 codes of the values ``x[start:]`` after the pairs (``start >= 2 split``, whole rows of
    ``span`` values; all of a tensor shorter than two rows), each with the high 16 bits of its own
    word, as :func:`~gcbench.compressors.kernels.core.dither_unpaired` computes them (the same float32
    operations as :func:`dither_c`), into ``out`` (int32, ``x.numel() - start`` values), which is
    returned. ``scales``: float32, one per row of ``span`` values of the whole tensor (value ``e``'s
    is ``scales[e // span]``), or one for all. One C call on the caller's thread (the values are
    fewer than two rows): a small tensor's rounding in one call instead of some twenty small ops.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes; ``start`` not whole rows;
            an index from ``2**32`` on; ``top`` negative or from ``2**16`` on.
    """
    n = x.numel()
    one = scales.numel() == 1
    if (x.dtype != torch.float32 or out.dtype != torch.int32 or scales.dtype != torch.float32
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (x, out, scales))
            or span < 1 or not 0 <= start <= n or start % span or n > 2 * PAIRS_32 or out.numel() != n - start
            or not (one or scales.numel() >= -(-n // span)) or not 0 <= top < 1 << 16):
        raise ValueError("dither_rest_c: tensors of other dtypes, devices, layouts or sizes")
    if start < n:
        native.record_call(QUANTIZE_C)
        k0, k1 = (w & 0xFFFFFFFF for w in words)
        native.typed(QUANTIZE_C, _SIGNATURES).gcbench_dither_rest(
            x.data_ptr(), start, n, span, scales.data_ptr(), int(one), k0, k1, const, shift, float(top), out.data_ptr())
    return out
