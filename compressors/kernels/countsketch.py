"""A compiled kernel for Count Sketch: the exact rebuild of hash codes from compact tables.

Count Sketch's ``accumulate`` (Charikar et al. 2002; Ivkin et al. NeurIPS 2019, section 3) adds
``s_j(i) x_i`` into bucket ``h_j(i)`` of every row ``j``. Its codes ``2 * bucket + (sign < 0)`` are
rebuilt from :class:`~gcbench.compressors.codecs.countsketch.hashes.HashTables` (small bucket tables and packed sign bits)
instead of being held (``4 r d`` bytes, 5x the input): eager, about ten ops per
2^16-coordinate block (numpy on the CPU, torch elsewhere), each a pass over the block's int32
values. Compiled (:class:`~gcbench.compressors.kernels.core.Kernel`)
the table reads, the branch-free select and the sign bit are one pass that writes each code once,
straight into the caller's row of codes: measured 1.15 ns per code against 1.7 ns for the eager
rebuild in numpy (2^18 coordinates, one thread; the output and the sign bits are passed as
``(blocks, 2^16)`` views, so that the codes and their sign bits are one loop, not a loop that writes
a temporary and a second one that reads it back: 1.5 ns). The bounds checks of the table reads are
off (``assert_indirect_indexing``): every index is a block or row number of the caller's own tables.

Only the rebuild is compiled by Inductor, not the scatter-add: ``index_add_`` on the CPU adds in
index order, which fixes the float32 sums' bits (the payload's bytes); a compiled scatter is an
``atomic_add`` loop with no faster inner step (measured: 2.74 ns per element into a 4 MB
accumulator, against ``index_add_``'s 2.68). That scatter-add, bound by the accumulator's cache
misses, is the floor of this design. Where C kernels build, the accumulate is one C loop instead
(:func:`accumulate_c`, :file:`c/countsketch.c`): the same integer steps and the same additions in the
same order, without a codes buffer or a compiled call per span (whose Python and guard overhead,
~0.3 ms per span, cost more than its kernel). The codes are integers, so
the compiled kernel's equal the eager ones bit for bit, and so does every sketch built from them
(``tests/test_countsketch.py``, ``tests/test_fused.py``).

The sign bits the tables hold are evaluated in C too (:func:`negbits_c`,
:file:`c/countsketch_signs.c`): the degree-3 polynomial mod 2^61 - 1 with 128-bit products, where
torch needs a dozen int64 passes per row and coordinate (``tests/test_countsketch_signs.py``).

Shapes: one call = one row at :data:`SPAN` coordinates (a multiple of the table block), whole
tables, and the block, row and ``2c`` as values of a parameter tensor, so that the graph's shapes
do not depend on the row, the offset or the vector length: a few graphs in all (the sign bits'
and the output's offsets 0 or not), where row ranges and views as inputs compiled a new graph for nearly every
call kind and reached Dynamo's limit of 8 recompilations. The kernel is compiled single-threaded
(``cpp.threads = 1``): ``accumulate`` runs the two halves of a vector on its own thread pool, so
OpenMP teams inside would oversubscribe the cores. Compilations are serialised by a lock.
"""

from __future__ import annotations

import ctypes
import threading

import torch
import torch.fx.experimental._config as fx_config

from . import native
from .core import Kernel

#: Coordinates per block of the bucket tables: must equal ``countsketch_hashes.BLOCK_BITS``
#: (checked by the caller, which owns the tables' layout).
BLOCK_BITS = 16
#: Coordinates per kernel call: a fixed length, so that the compiled graph has fixed shapes (4 blocks:
#: 1 MiB of codes, in L2 for the scatter-add that reads them next; a call costs tens of microseconds).
SPAN = 4 << BLOCK_BITS


def _sketch_codes(
    params: torch.Tensor, rank: torch.Tensor, vc2: torch.Tensor, km1: torch.Tensor, delta: torch.Tensor,
    base0: torch.Tensor, negbits: torch.Tensor, out: torch.Tensor,
) -> None:
    """``out`` (int32, :data:`SPAN` coordinates as ``(SPAN / 2^16, 2^16)``) = the codes of row ``j``
    at the :data:`SPAN` coordinates from block ``b0`` on (``b0 2^16`` is the first).

    ``params``: int64 ``[b0, 2c, j]``; ``rank``, ``vc2``: int32 ``(r, 2^16)`` tables over the low
    16 bits of a coordinate; ``km1``, ``delta``, ``base0``: int32 ``(r, blocks)`` tables over the
    high bits; ``negbits``: uint8, the packed sign bits of these :data:`SPAN` coordinates (row ``j``
    in bit ``j``, ``r <= 8``), shaped as ``out``. Whole tables, values in ``params`` and one fixed
    span length keep the compiled graphs to a few (``negbits`` and ``out`` at offset 0 or not: Dynamo
    specialises offsets 0 and 1), whatever the row, offset or vector length.

    The integer steps are those of ``HashTables._finish`` (:mod:`~gcbench.compressors.codecs.countsketch.hashes`): ``u + v``
    wraps past ``p`` iff ``rank(v) > k - 1``, read from the sign bit of ``km1 - rank``; then
    ``2 * bucket`` is reduced into ``[0, 2c)`` without a compare.
    """
    nb = SPAN >> BLOCK_BITS
    b0, two_c, j = params[0], params[1].to(torch.int32), params[2:3]
    hi = j * km1.shape[1] + torch.arange(nb, dtype=torch.int64, device=out.device) + b0  # (nb,)
    o = km1.reshape(-1)[hi].unsqueeze(1) - rank.index_select(0, j)  # (nb, 2^16): km1 - rank
    o = (o >> 31) & delta.reshape(-1)[hi].unsqueeze(1)  # delta where u + v wraps past p, else 0
    o = o + vc2.index_select(0, j) + base0.reshape(-1)[hi].unsqueeze(1) - two_c
    o = o + ((o >> 31) & two_c)  # 2 * bucket in [0, 2c)
    neg = (negbits.to(torch.int32) >> j.to(torch.int32)) & 1
    out.copy_(o + neg)


#: The codes of whole blocks of coordinates (:meth:`~gcbench.compressors.codecs.countsketch.hashes.HashTables.codes`, compiled).
sketch_codes = Kernel(_sketch_codes, "sketch_codes", {"cpp.threads": 1, "assert_indirect_indexing": False})

_FIRST_CALL = threading.Lock()
_warm: set[tuple] = set()


def run_sketch_codes(
    first: int, row: int, tables: tuple[torch.Tensor, ...], negbits: torch.Tensor, two_c: int, out: torch.Tensor
) -> torch.Tensor:
    """:data:`sketch_codes` of row ``row`` at :data:`SPAN` coordinates from ``first`` (a multiple of
    2^16) into ``out`` (:data:`SPAN` contiguous int32 elements: a whole tensor or a slice of a row of
    codes; its offset 0 or not is part of the graph, as the sign bits'); ``tables`` = ``(rank, vc2,
    km1, delta, base0)``; ``negbits`` ``(1, d)``. Safe to call from several threads (compilations run
    one at a time, under a lock). Returns ``out``."""
    params = torch.tensor([first >> BLOCK_BITS, two_c, row], dtype=torch.int64, device=out.device)
    shape = (SPAN >> BLOCK_BITS, 1 << BLOCK_BITS)
    bits = negbits[0, first : first + SPAN].view(shape)
    args = (params, *tables, bits, out.view(shape))
    key = (out.device.type, first == 0, out.storage_offset() == 0, tables[2].shape[0] == 1, tables[2].shape[1] == 1)
    if key in _warm:
        sketch_codes(*args)
        return out
    # Compiles: one thread at a time, and without duck sizing (two sizes equal by chance, e.g. rows
    # and blocks, would become a guard, and the next call where they differ another compilation).
    # The setting is process-wide, so it is changed only here, under the lock, for the compilation.
    with _FIRST_CALL, fx_config.patch(use_duck_shape=False):
        sketch_codes(*args)
        _warm.add(key)
    return out


#: The C source of the fused accumulate, scan and gathers (:file:`c/countsketch.c`).
SKETCH_C = "countsketch"
_P, _SIZE = ctypes.c_void_p, ctypes.c_size_t
_TABLES = [_P, _P, _SIZE, _P, _P, _P, _SIZE]  # rank, vc2, their width; km1, delta, base0, their width
#: ctypes signatures of the functions of :file:`c/countsketch.c`.
_SIGNATURES = {
    "gcbench_sketch_accumulate": ([_P, ctypes.c_int32, _P, _SIZE, _SIZE, *[_P] * 6, ctypes.c_uint], _SIZE),
    "gcbench_sketch_at_least": ([_P, ctypes.c_int32, ctypes.c_uint, _SIZE, _SIZE, *_TABLES, _P, ctypes.c_uint,
                                 ctypes.c_uint, _P, ctypes.POINTER(_SIZE)], _SIZE),
    "gcbench_sketch_gather": ([_P, ctypes.c_int32, ctypes.c_uint, _P, _SIZE, *_TABLES, _P, _P], _SIZE),
}
#: The C source of the sign hashes' direct evaluation (:file:`c/countsketch_signs.c`).
SIGNS_C = "countsketch_signs"
_SIGNS_SIGNATURES = {
    "gcbench_sketch_negbits": ([_P, _P, ctypes.c_uint, ctypes.c_uint64, _SIZE, _SIZE, ctypes.c_int], None),
}


def _sketch_lib() -> ctypes.CDLL:
    return native.typed(SKETCH_C, _SIGNATURES)


def _check_tables(tables: tuple[torch.Tensor, ...], rows: int, end: int) -> bool:
    """Whether ``(rank, vc2, km1, delta, base0)`` are int32, contiguous CPU tables of at least
    ``rows`` rows that cover coordinates below ``end``."""
    return (all(t.dtype == torch.int32 and t.dim() == 2 and t.shape[0] >= rows and t.is_contiguous()
                and t.device.type == "cpu" for t in tables)
            and tables[0].shape == tables[1].shape and tables[2].shape == tables[3].shape == tables[4].shape
            and tables[0].shape[1] >= min(end, 1 << BLOCK_BITS) and tables[2].shape[1] << BLOCK_BITS >= end)


def at_least_c(
    flags: torch.Tensor, start: int, end: int, tables: tuple[torch.Tensor, ...], negbits: torch.Tensor,
    need_pos: int, need_neg: int, out: torch.Tensor,
) -> int:
    """The coordinates in ``[start, end)`` whose flags (``flags``: uint8 ``(r, 2c)``, 1 for a signed
    cell ``>= t``, 16 for one ``<= -t``) summed over the rows of their codes reach ``need_pos`` in the
    low nibble or ``16 need_neg``: written in ascending order into ``out`` (int64, at least
    ``end - start`` elements); returns how many. The codes are rebuilt from ``tables`` = ``(rank,
    vc2, km1, delta, base0)`` as :data:`sketch_codes` does, in one pass of C per 2048 coordinates
    (:file:`c/countsketch.c`); the same indices as the torch gathers of
    :meth:`~gcbench.compressors.codecs.countsketch.codec.CountSketch._at_least`.

    Raises:
        ValueError: tensors of other types or layouts; a code outside ``[0, 2c)``.
    """
    r, two_c = flags.shape
    ok = (flags.dtype == torch.uint8 and flags.is_contiguous() and 1 <= r <= 8 and negbits.dtype == torch.uint8
          and negbits.shape[0] == 1 and negbits.is_contiguous() and 0 <= start <= end <= negbits.shape[1]
          and _check_tables(tables, r, end) and out.dtype == torch.int64 and out.is_contiguous()
          and out.numel() >= end - start and 0 < two_c < 1 << 31)
    if not ok:
        raise ValueError("at_least_c takes uint8 (r <= 8, 2c) flags, int32 tables, (1, d) uint8 sign bits and an int64 output, contiguous, on the CPU")
    rank, vc2, km1, delta, base0 = tables
    bad = ctypes.c_size_t()
    native.record_call(SKETCH_C)
    n = _sketch_lib().gcbench_sketch_at_least(
        flags.data_ptr(), two_c, r, start, end, rank.data_ptr(), vc2.data_ptr(), rank.shape[1], km1.data_ptr(),
        delta.data_ptr(), base0.data_ptr(), km1.shape[1], negbits.data_ptr(), need_pos, need_neg, out.data_ptr(),
        ctypes.byref(bad),
    )
    if bad.value:
        raise ValueError(f"{bad.value} codes outside [0, {two_c})")
    return int(n)


def gather_c(
    signed: torch.Tensor, idx: torch.Tensor, tables: tuple[torch.Tensor, ...], negbits: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """``out[j, t] = signed[j, code(j, idx[t])]`` for every row ``j``: the values a point query takes
    the median of (:meth:`~gcbench.compressors.codecs.countsketch.codec.CountSketch.query`), with the
    codes rebuilt from ``tables`` = ``(rank, vc2, km1, delta, base0)`` as :data:`sketch_codes` does,
    in one pass of C per row (:file:`c/countsketch.c`); the same values as ``codes_at`` and
    ``index_select``. ``signed``: float32 ``(r <= 8, 2c)``; ``idx``: int64 coordinates in ``[0, d)``
    (checked by the caller); ``out``: float32 ``(r, len(idx))``. Returns ``out``.

    Raises:
        ValueError: tensors of other types or layouts; a code outside ``[0, 2c)``.
    """
    r, two_c = signed.shape
    n = idx.numel()
    ok = (signed.dtype == torch.float32 and signed.is_contiguous() and 1 <= r <= 8 and idx.dtype == torch.int64
          and idx.is_contiguous() and negbits.dtype == torch.uint8 and negbits.shape[0] == 1 and negbits.is_contiguous()
          and _check_tables(tables, r, negbits.shape[1]) and out.dtype == torch.float32 and out.is_contiguous()
          and tuple(out.shape) == (r, n) and 0 < two_c < 1 << 31
          and all(t.device.type == "cpu" for t in (signed, idx, negbits, out)))
    if not ok:
        raise ValueError("gather_c takes float32 (r <= 8, 2c) values, int64 indices, int32 tables, (1, d) uint8 sign bits and a float32 (r, n) output, contiguous, on the CPU")
    rank, vc2, km1, delta, base0 = tables
    native.record_call(SKETCH_C)
    bad = _sketch_lib().gcbench_sketch_gather(
        signed.data_ptr(), two_c, r, idx.data_ptr(), n, rank.data_ptr(), vc2.data_ptr(), rank.shape[1],
        km1.data_ptr(), delta.data_ptr(), base0.data_ptr(), km1.shape[1], negbits.data_ptr(), out.data_ptr(),
    )
    if bad:
        raise ValueError(f"{bad} codes outside [0, {two_c})")
    return out


def accumulate_c(
    acc: torch.Tensor, v: torch.Tensor, start: int, end: int, row: int, tables: tuple[torch.Tensor, ...],
    negbits: torch.Tensor, two_c: int,
) -> None:
    """Row ``row``'s codes at coordinates ``start..end-1``, rebuilt from ``tables`` = ``(rank, vc2,
    km1, delta, base0)`` as :data:`sketch_codes` does, and ``v[i]`` added into ``acc[code]`` in index
    order (``index_add_``'s additions, so the same bytes), in one pass of C (:file:`c/countsketch.c`):
    no codes buffer and no call per span. ``acc``: contiguous float32 of ``two_c`` bins; ``v``:
    contiguous float32, the whole vector; the tables int32 and contiguous, ``negbits`` ``(1, d)``
    uint8 (``r <= 8``).

    Raises:
        ValueError: tensors of other types or layouts; a code outside ``[0, two_c)`` (tables that are
            not a sketch's own: the others are added).
    """
    ok = (acc.dtype == torch.float32 and v.dtype == torch.float32 and negbits.dtype == torch.uint8
          and negbits.shape[0] == 1 and acc.numel() == two_c and 0 <= start <= end <= v.numel() <= negbits.shape[1]
          and _check_tables(tables, row + 1, end)
          and all(t.is_contiguous() and t.device.type == "cpu" for t in (acc, v, negbits)))
    if not ok:
        raise ValueError("accumulate_c takes float32 acc (2c bins) and v, int32 tables and (1, d) uint8 sign bits, contiguous, on the CPU")
    rank, vc2, km1, delta, base0 = (t[row] for t in tables)
    native.record_call(SKETCH_C)
    bad = _sketch_lib().gcbench_sketch_accumulate(
        acc.data_ptr(), two_c, v.data_ptr(), start, end, rank.data_ptr(), vc2.data_ptr(), km1.data_ptr(),
        delta.data_ptr(), base0.data_ptr(), negbits.data_ptr(), row,
    )
    if bad:
        raise ValueError(f"{bad} codes outside [0, {two_c})")


def negbits_c(coef: torch.Tensor, first: int, out: torch.Tensor, *, packed: bool) -> torch.Tensor:
    """The sign flags (1 = negative) of coordinates ``first .. first + n - 1`` for every row of the
    ``(r, 6)`` int64 hash coefficients ``coef`` (each in ``[0, p)``), evaluated exactly in one pass
    of C (:file:`c/countsketch_signs.c`, products in 128 bits): the bytes of
    :func:`~gcbench.compressors.codecs.countsketch.hashes.negative_flags`. ``out``: contiguous
    uint8 on the CPU, ``(r, n)``, or ``(ceil(r / 8), n)`` with row ``j`` in bit ``j % 8`` when
    ``packed``; its rows contiguous (a column slice of a wider table will do); every byte is
    written. Returns ``out``.

    Raises:
        ValueError: tensors of other types or layouts, or coordinates at or past ``2^61 - 1``.
    """
    r = coef.shape[0] if coef.dim() == 2 else 0
    n = out.shape[1] if out.dim() == 2 else -1
    ok = (coef.dtype == torch.int64 and coef.dim() == 2 and coef.shape[1] == 6 and r >= 1 and coef.is_contiguous()
          and out.dtype == torch.uint8 and out.dim() == 2 and out.shape[0] == (-(-r // 8) if packed else r)
          and out.stride(1) == 1 and out.stride(0) >= n and all(t.device.type == "cpu" for t in (coef, out))
          and 0 <= first and first + n <= (1 << 61) - 1)
    if not ok:
        raise ValueError("negbits_c takes (r, 6) int64 coefficients and a (ceil(r/8) or r, n) uint8 output, "
                         "with contiguous rows, on the CPU, for coordinates below 2^61 - 1")
    native.record_call(SIGNS_C)
    native.typed(SIGNS_C, _SIGNS_SIGNATURES).gcbench_sketch_negbits(out.data_ptr(), coef.data_ptr(), r, first, n, out.stride(0), int(packed))
    return out
