"""The decode of one-byte quantization codes in C (:file:`c/dequantize.c`, built by
:mod:`~gcbench.compressors.kernels.native`): ``fl(fl(code - offset) * factor) + base`` per value and
the largest code, in one pass over the codes, split into blocks on the caller's threads; the same for
16-bit codes in two byte planes (:func:`dequantize_u16_c`); TernGrad's two-bit codes, four table
values per byte (:func:`trits_decode_c`); and codes of 1 to 7 bits unpacked to one byte each
(:func:`unpack_bits_c`).

The torch code of :func:`~gcbench.compressors.codecs.rounding.decode_packed` stays the reference (the
same bits: the same float32 operations, each rounded on its own). The C passes run on every x86 ISA:
a C loop widens bytes to floats in vector lanes on AVX2 and AVX-512 alike, where Inductor's compiled
decode (:data:`~gcbench.compressors.kernels.core.dequantize`) loads each 8 codes through a stack
buffer on AVX2 (ATen's ``Vectorized<uint8_t>::loadu`` with a count) and, with AVX-512, was still the
slower (:func:`dequantize_native`).
"""

from __future__ import annotations

import ctypes

import torch

from . import native

#: The C source (:file:`c/dequantize.c`).
DEQUANTIZE_C = "dequantize"
_P, _SIZE = ctypes.c_void_p, ctypes.c_size_t
#: ctypes signatures of :file:`c/dequantize.c`.
_SIGNATURES = {
    "gcbench_dequantize_u8": ([_P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, _SIZE, ctypes.c_int, ctypes.c_float,
                               ctypes.c_float, ctypes.c_int, _P], ctypes.c_uint),
    "gcbench_dequantize_u16": ([_P, _P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, _SIZE, ctypes.c_int, ctypes.c_float,
                                ctypes.c_float, ctypes.c_int, _P], ctypes.c_uint),
    "gcbench_trits_decode": ([_P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, _P], ctypes.c_int),
    "gcbench_unpack_bits": ([_P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _SIZE, ctypes.c_uint, _P], None),
    "gcbench_openmp": ([], ctypes.c_int),
}
#: Values per block on the caller's threads (blocks end at row boundaries): several blocks per thread,
#: taken in turn (:func:`~gcbench.compressors.kernels.native.in_blocks`), so that a thread kept off
#: its core leaves its share to the others.
BLOCK = 1 << 18


def dequantize_native(device: torch.device) -> bool:
    """Whether :func:`dequantize_u8_c` and :func:`dequantize_u16_c` decode on ``device``: the CPU, in
    a mode that runs C kernels (:func:`~gcbench.compressors.kernels.native.use_native`), whatever
    the ISA.

    Limited to AVX2, the compiled decode took 3.3x a ``copy_`` for QSGD's 25M values and eager torch
    1.9x, the C pass 0.9-1.1x on OpenMP threads. With AVX-512 (2-core AMD EPYC, 25M values, decode into a
    ready buffer, medians of 11 rounds against a same-run ``copy_``): ZipML-16 0.94x in C, 1.21x
    compiled, 7.5x eager (five torch passes over the byte planes); ZipML-8 0.78x, 0.94x and 1.75x;
    QSGD 0.86x and 1.0x compiled."""
    return device.type == "cpu" and native.use_native(DEQUANTIZE_C)


def unpack_native(device: torch.device) -> bool:
    """Whether :func:`unpack_bits_c` unpacks codes of 1 to 7 bits on ``device``: the CPU, in a mode
    that runs C kernels, whatever the ISA (the torch passes of
    :func:`~gcbench.compressors.wire.bitpack.unpack_bits` over 1M codes took 10-16x a ``copy_`` of as
    many floats, the C pass 2.6-2.9x)."""
    return device.type == "cpu" and native.use_native(DEQUANTIZE_C)


def trits_native(device: torch.device) -> bool:
    """Whether :func:`trits_decode_c` decodes TernGrad's bytes on ``device``: the CPU, in a mode that
    runs C kernels, whatever the ISA (a table copy per byte: TernGrad's 25M-value decode 0.86-0.92x a
    ``copy_`` against Inductor's 1.05-1.09x with AVX-512, 0.8-1.05x against 2.6x limited to AVX2)."""
    return device.type == "cpu" and native.use_native(DEQUANTIZE_C)


def dequantize_u8_c(
    codes: torch.Tensor, factors: torch.Tensor, span: int, offset: float, base: float, out: torch.Tensor,
    workers: int,
) -> int:
    """``out[i] = fl(fl(codes[i] - offset) * factors[i // span]) + base`` (``base`` added when not 0,
    as the reference does) for the uint8 ``codes`` (contiguous CPU) into float32 ``out`` (contiguous
    CPU, as many values); ``factors``: float32, one per row of ``span`` values, or one for all.
    ``offset``, ``base``: rounded to float32. Blocks of whole rows run on up to ``workers`` threads.
    Returns the largest code.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    return _dequantize("gcbench_dequantize_u8", (codes,), factors, span, offset, base, out, workers)


def dequantize_u16_c(
    low: torch.Tensor, high: torch.Tensor, factors: torch.Tensor, span: int, offset: float, base: float,
    out: torch.Tensor, workers: int,
) -> int:
    """:func:`dequantize_u8_c` for 16-bit codes held as two byte planes (``low + 256 * high``,
    :func:`~gcbench.compressors.wire.bitpack.pack_bits`'s 16-bit layout): ``low``, ``high`` uint8 of
    ``out``'s length. Returns the largest code.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    return _dequantize("gcbench_dequantize_u16", (low, high), factors, span, offset, base, out, workers)


def _dequantize(
    name: str, planes: tuple[torch.Tensor, ...], factors: torch.Tensor, span: int, offset: float, base: float,
    out: torch.Tensor, workers: int,
) -> int:
    """The C decode ``name`` of the uint8 code ``planes`` (one, or the low and high bytes), checked."""
    n = out.numel()
    rows = -(-n // span) if span > 0 else 0
    one = factors.numel() == 1
    if (any(t.dtype != torch.uint8 or t.numel() != n for t in planes) or out.dtype != torch.float32
            or factors.dtype != torch.float32
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (*planes, out, factors))
            or span < 1 or not (one or factors.numel() >= rows)):
        raise ValueError(f"{name}: tensors of other dtypes, devices, layouts or sizes")
    if n == 0:
        return 0
    fn = getattr(native.typed(DEQUANTIZE_C, _SIGNATURES), name)
    native.record_call(DEQUANTIZE_C)
    ptrs = tuple(t.data_ptr() for t in planes)
    rest = (factors.data_ptr(), span, int(one), offset, base, int(base != 0), out.data_ptr())
    peaks = native.in_blocks(DEQUANTIZE_C, lambda a, b, block, threads: fn(*ptrs, a, b, block, threads, *rest),
                             0, n, -(-BLOCK // span) * span, out.device, workers)  # blocks of whole rows
    return max(peaks)


def unpack_bits_c(packed: torch.Tensor, bits: int, n: int, out: torch.Tensor, workers: int) -> None:
    """``out.copy_(unpack_bits(packed, bits, n, torch.uint8))`` for ``bits`` from 1 to 7: each eight
    codes' ``bits`` bytes zero-extended to a 64-bit word and split by bitpack's three shift rounds, in
    one pass, in blocks of groups on up to ``workers`` threads. The caller checks what
    :func:`~gcbench.compressors.wire.bitpack.unpack_bits` checks first (the length, and zero padding
    bits in the last byte).

    Raises:
        ValueError: ``bits`` not from 1 to 7; tensors of other dtypes, devices, layouts or sizes.
    """
    if (not 1 <= bits <= 7 or packed.dtype != torch.uint8 or out.dtype != torch.uint8 or out.numel() != n
            or packed.numel() != (n * bits + 7) // 8
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (packed, out))):
        raise ValueError("unpack_bits_c: bits not from 1 to 7, or tensors of other dtypes, devices, layouts or sizes")
    if n == 0:
        return
    fn = native.typed(DEQUANTIZE_C, _SIGNATURES).gcbench_unpack_bits
    native.record_call(DEQUANTIZE_C)
    native.in_blocks(DEQUANTIZE_C, lambda a, b, block, threads: fn(packed.data_ptr(), a, b, block, threads, n, bits,
                                                                   out.data_ptr()),
                     0, -(-n // 8), BLOCK // 8, packed.device, workers)


def trits_decode_c(packed: torch.Tensor, table: torch.Tensor, out: torch.Tensor, workers: int) -> bool:
    """TernGrad's whole bytes ``packed`` (uint8, four 2-bit codes each) into ``out`` (float32, four
    values a byte) from ``table`` (float32 ``(256, 4)``: each byte's four values), on up to
    ``workers`` threads; returns whether a byte holds the code 3 (invalid).

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    n = packed.numel()
    if (packed.dtype != torch.uint8 or out.dtype != torch.float32 or table.dtype != torch.float32
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (packed, out, table))
            or out.numel() != 4 * n or table.numel() != 1024):
        raise ValueError("trits_decode_c: tensors of other dtypes, devices, layouts or sizes")
    if n == 0:
        return False
    fn = native.typed(DEQUANTIZE_C, _SIGNATURES).gcbench_trits_decode
    native.record_call(DEQUANTIZE_C)
    bad = native.in_blocks(DEQUANTIZE_C, lambda a, b, block, threads: fn(packed.data_ptr(), a, b, block, threads,
                                                                         table.data_ptr(), out.data_ptr()),
                           0, n, BLOCK // 4, packed.device, workers)
    return any(bad)
