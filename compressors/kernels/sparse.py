"""Compiled kernels of the sparse codecs: top-k's candidate scan, DGC's in-place momentum step
(:class:`~gcbench.compressors.kernels.core.Kernel`, the same modes and eager-reference rule as :mod:`~gcbench.compressors.kernels.core`).

Top-k by a threshold (:mod:`~gcbench.compressors.codecs.topk`, :mod:`~gcbench.compressors.codecs.dgc`; Lin et al., DGC, ICLR 2018, Sec. 3.1 and 5) makes
one pass over the whole tensor, ``|x| >= thr``, and works on the few candidates after it. A
full-size eager mask is one bool per element (two comparisons and an ``or``: three passes and 25 MB
of fresh memory at 25M elements) that ``torch.nonzero`` reads again; the eager path (:mod:`~gcbench.compressors.codecs.topk`)
avoids it with cache-sized blocks, each still several torch ops. Here one compiled pass reads
``x`` and writes one *bit* per element, packed eight to a byte
(1/32 of the input's bytes); the candidates' positions are then found on that small tensor. A
compiled bool mask was measured slower than eager's comparisons (CPU Inductor stores bools
unvectorised); the packed byte vectorises like :func:`~gcbench.compressors.kernels.sign.sign_bits`.

On the CPU, where C kernels run (:func:`~gcbench.compressors.kernels.native.use_native`), the scan is
two C passes instead (:func:`abs_at_least_c`, :file:`c/abs_at_least.c`): the bits with one compare
and movemask per eight values and each block's count, then the positions from the bits alone, one
count-trailing-zeros each. Inductor's packing goes through a 64-bit multiply that AVX2 has no vector
instruction for, and the positions of the compiled bits take several torch ops (``nonzero`` twice,
a gather, a shift): at 25M values with 2 threads, the compiled scan measured about 2.7x ``copy_``.

The result is the same int64 positions, in the same ascending order, as
``torch.nonzero(x.abs() >= thr)`` (compared in ``tests/test_topk.py``): comparisons are exact, so
eager, compiled and C cannot differ. On CUDA the kernel compiles to Triton and the rest are torch ops.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch

from . import native
from .core import NO_FMA, Kernel, use_compiled

#: Slabs of the scan: bit ``j`` of byte ``i`` is element ``j * R + i`` (``R = n // 8``).
GROUP = 8


def _abs_at_least_bits(x: torch.Tensor, thr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One byte per column of ``(8, R)`` values: bit ``j`` of byte ``i`` is ``|x[j, i]| >= thr``
    (``thr``: a one-element tensor of ``x``'s dtype, so that a new threshold does not recompile);
    and whether every ``x`` is finite (the contract's input check, folded into the same pass).

    The eight rows are eight contiguous slabs of the tensor, so every load is contiguous and the
    loop vectorises (measured 0.54x ``copy_`` at 25M on one core; the same bits from eight
    *consecutive* elements, a ``(R, 8)`` view, took 0.93x: strided loads)."""
    b = (x.abs() >= thr).to(torch.int32)
    out = b[0] + b[1] * 2 + b[2] * 4 + b[3] * 8 + b[4] * 16 + b[5] * 32 + b[6] * 64 + b[7] * 128
    return out.to(torch.uint8), torch.isfinite(x).all()


#: Top-k's candidate scan ``|x| >= thr`` as packed bits (:func:`abs_at_least`).
abs_at_least_bits = Kernel(_abs_at_least_bits, "abs_at_least_bits")


def compiles_scan(x: torch.Tensor) -> bool:
    """Whether :func:`abs_at_least` runs the compiled kernel for ``x`` in the current mode (float32
    only: one compiled signature; other dtypes take the eager comparisons)."""
    return x.dtype == torch.float32 and x.numel() >= GROUP and use_compiled(x.numel())


def _slab_positions(packed: torch.Tensor, limit: int | None = None) -> tuple[torch.Tensor | None, int]:
    """Positions (int64, ascending) of the set bits of the ``R`` bytes of :func:`_abs_at_least_bits`:
    bit ``j`` of byte ``i`` is position ``j * R + i``; and how many bits are set. Only the non-zero
    bytes are expanded; their ``(bit, byte)`` pairs in row-major order are ascending positions.
    With more than ``limit`` bits set, None for the positions: the pairs (16 bytes each) are not
    formed, only the non-zero bytes' numbers (at most one int64 per byte, a quarter of a float32
    input's bytes) and their bits."""
    r = packed.numel()
    w = torch.nonzero(packed).reshape(-1)
    b = packed.index_select(0, w)
    shifts = torch.arange(GROUP, dtype=torch.uint8, device=packed.device).unsqueeze(1)
    bits = (b.unsqueeze(0) >> shifts) & 1
    count = int(bits.sum())
    if limit is not None and count > limit:
        return None, count
    jw = torch.nonzero(bits)  # (bit, byte) pairs, bit-major
    return w.index_select(0, jw[:, 1]).add_(jw[:, 0] * r), count


def abs_at_least(x: torch.Tensor, thr: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``torch.nonzero(x.abs() >= thr).reshape(-1)`` of a 1-D float32 ``x`` (int64, ascending), by
    the compiled packed-bit scan, and whether every ``x`` is finite (from the same pass); ``thr``: a
    0-d or one-element tensor of ``x``'s dtype."""
    idx, _, finite = abs_at_least_capped(x, thr, None)
    assert idx is not None
    return idx, finite


def abs_at_least_capped(
    x: torch.Tensor, thr: torch.Tensor, limit: int | None
) -> tuple[torch.Tensor | None, int, bool]:
    """:func:`abs_at_least`, the count of positions that pass, and finiteness; where more than
    ``limit`` pass, None for the positions, which are then never paired up as int64
    (:func:`_slab_positions`)."""
    n = x.numel()
    main = n - n % GROUP
    thr1 = thr.reshape(1)
    packed, finite = abs_at_least_bits(x[:main].view(GROUP, -1), thr1)
    tail_idx = None
    if main != n:  # the last n % 8 elements: a few eager comparisons
        tail = x[main:]
        tail_idx = torch.nonzero(tail.abs() >= thr1).reshape(-1).add_(main)
        finite = finite & torch.isfinite(tail).all()
    extra = 0 if tail_idx is None else tail_idx.numel()
    idx, count = _slab_positions(packed, None if limit is None else limit - extra)
    if idx is not None and tail_idx is not None:
        idx = torch.cat([idx, tail_idx])
    return idx, count + extra, bool(finite)


# --------------------------------------------------------------------------------------------------
# the scan in C (CPU)
# --------------------------------------------------------------------------------------------------

#: The C source of :func:`abs_at_least_c` (``c/abs_at_least.c``).
SCAN_C = "abs_at_least"
_P, _SIZE = ctypes.c_void_p, ctypes.c_size_t
_SIGNATURES = {
    "gcbench_abs_at_least_mask": ([_P, _SIZE, ctypes.c_float, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, _P], ctypes.c_int),
    "gcbench_mask_positions": ([_P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, _P, _P, _P], None),
    "gcbench_openmp": ([], ctypes.c_int),
}
#: Mask bytes per block of the C passes: 512K values (2 MiB of float32) a block.
C_BLOCK = 1 << 16


def scan_native(x: torch.Tensor) -> bool:
    """Whether :func:`abs_at_least_c` runs for ``x``: contiguous float32 on the CPU, in a mode that runs C
    kernels (:func:`~gcbench.compressors.kernels.native.use_native`; not ``GCBENCH_COMPILE=0``)."""
    return (x.dtype == torch.float32 and x.device.type == "cpu" and x.is_contiguous() and x.numel() > 0
            and native.use_native(SCAN_C))


class Scan(NamedTuple):
    """What :func:`abs_at_least_c` found: the positions (None past the limit), their count, whether
    every value is finite, and the values at the positions (None past the limit)."""

    positions: torch.Tensor | None
    count: int
    finite: bool
    values: torch.Tensor | None


def abs_at_least_c(x: torch.Tensor, thr: float, limit: int | None, workers: int) -> Scan:
    """:func:`abs_at_least_capped` in C: the int64 positions (ascending) of ``|x| >= thr`` of a
    contiguous 1-D float32 CPU ``x``, how many there are, whether every ``x`` is finite, and ``x`` at
    the positions (``x.index_select(0, positions)``, read in the positions' pass); where more than
    ``limit`` pass, None for the positions and values (none is formed: the memory is the bits' ``n / 8``
    bytes). Blocks on up to ``workers`` threads.

    Raises:
        ValueError: ``x`` is not a contiguous 1-D float32 CPU tensor.
    """
    if not (x.dtype == torch.float32 and x.device.type == "cpu" and x.is_contiguous() and x.dim() == 1):
        raise ValueError("abs_at_least_c: a contiguous 1-D float32 CPU tensor only")
    n = x.numel()
    if n == 0:
        return Scan(torch.zeros(0, dtype=torch.int64), 0, True, torch.zeros(0))
    nbytes = -(-n // 8)
    lib = native.typed(SCAN_C, _SIGNATURES)
    native.record_call(SCAN_C)
    mask = torch.empty(nbytes, dtype=torch.uint8)
    counts = torch.empty(-(-nbytes // C_BLOCK), dtype=torch.int64)
    ptrs = (x.data_ptr(), n, thr)
    bad = native.in_blocks(
        SCAN_C, lambda a, b, block, threads: lib.gcbench_abs_at_least_mask(*ptrs, a, b, block, threads, mask.data_ptr(),
                                                                          counts.data_ptr()),
        0, nbytes, C_BLOCK, x.device, workers)
    ends = counts.cumsum(0)
    count = int(ends[-1])
    if limit is not None and count > limit:
        return Scan(None, count, not any(bad), None)
    offsets = ends - counts
    out = torch.empty(count, dtype=torch.int64)
    vals = torch.empty(count, dtype=torch.float32)
    if count:
        native.in_blocks(
            SCAN_C, lambda a, b, block, threads: lib.gcbench_mask_positions(
                mask.data_ptr(), a, b, block, threads, offsets.data_ptr(), out.data_ptr(), x.data_ptr(), vals.data_ptr()),
            0, nbytes, C_BLOCK, x.device, workers)
    return Scan(out, count, not any(bad), vals)


# --------------------------------------------------------------------------------------------------
# DGC's momentum correction in place: a read-only check, then the update
# --------------------------------------------------------------------------------------------------


def _dgc_step_finite(u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Whether every ``v + fl(fl(u * m) + g)`` is finite (Lin et al. 2018, Sec. 3.2: ``u' = m u + g``,
    ``v' = v + u'``), reading ``u``, ``v``, ``g`` once and writing nothing; ``m``: a one-element
    float32 tensor (a Python float would compile in as a double constant)."""
    return torch.isfinite(v + (u * m + g)).all()


#: DGC's check before its in-place update (:meth:`~gcbench.compressors.codecs.dgc.DGC._encode`).
dgc_step_finite = Kernel(_dgc_step_finite, "dgc_step_finite", NO_FMA)


def _dgc_step(u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, m: torch.Tensor) -> None:
    """``u <- fl(fl(u * m) + g)``, ``v <- v + u`` in place, one pass: the same separately rounded
    products and sums as eager ``u.mul_(m).add_(g)``, ``v.add_(u)`` (``u`` and ``v`` must not share
    memory)."""
    u2 = u * m + g
    v.copy_(v + u2)
    u.copy_(u2)


#: DGC's momentum update in place (:meth:`~gcbench.compressors.codecs.dgc.DGC._encode`): no fresh full-size buffers, whose
#: page faults cost more than the arithmetic (a fresh ``clone`` is 4-8x ``copy_``).
dgc_step = Kernel(_dgc_step, "dgc_step", NO_FMA)
