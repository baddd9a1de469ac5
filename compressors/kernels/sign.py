"""signSGD / EF-signSGD kernels: the sign bits, the scale's row sums, the error-feedback residual, the decode.

Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019, Algorithm 1 (EF-SIGNSGD) sends
``(||p||_1 / d) sign(p)`` for the corrected gradient ``p = g + e`` and keeps ``e' = p - Delta``. The
scale needs the whole sum before the first sign is worth sending, so error feedback takes two
passes here, the fewest this order allows:

1. :data:`abs_rows` reads ``g`` and ``e`` once, read-only (a non-finite ``p`` raises with the memory
   untouched), and returns per row of :data:`ROW` values the sum of ``|p|`` in fixed point (a NaN
   or Inf makes it non-finite: the finiteness check of the same pass);
2. :data:`ef_sign` reads ``g`` and ``e`` again and writes the packed bits and the residual
   ``p - s sign(p)`` over ``e``.

**The scale's summation order.** A float sum depends on its order, and eager torch, Inductor's C++
(its vector width) and Triton each reduce in their own, but the scale must be the same float32 in
every mode. So each row's sum is exact: every ``|p|`` (float32, exact in float64) is multiplied
by the power of two ``2^(169 - E)`` that brings the row's max below ``2^43`` (``E``: the max's
biased float32 exponent, at least 1) and rounded to an integer; 1024 such integers sum to at most
``2^53``, exactly in float64 in any order, and scale back exactly (``* 2^(E - 169)``). The rounding
moves each value by at most ``2^-44`` of its row's max, the same in every mode. The rows are then
added in index order on the CPU (:func:`mean_of_rows`: ``cumsum``, a sequential loop) and divided
by ``n``: the scale is within ``1e-12`` (relative) of the exact mean for any float32 input, and
bit-identical eager, compiled, CPU and CUDA. Rows are ``ROW`` consecutive values from the start,
the last one shorter; compiled, the whole rows run in one kernel call and the short last row
eagerly; eager, the same rows block by block (:func:`_abs_rows_eager`: the same values).

**The bits.** ``p >= 0`` (``sign(0) = +1``) as 0/1 bytes, 8 bytes read as one little-endian int64
and multiplied by :data:`~gcbench.compressors.wire.bitpack.PACK1_MAGIC` (:func:`~gcbench.compressors.wire.bitpack.pack_bits`'s 1-bit layout, LSB
first), the packed byte being the product's top byte. The 0/1 bytes go through int32 because
Inductor's C++ converts a comparison mask to uint8 one element at a time (measured at 25M: 11x a
``copy_``, against 1.1x through int32); a column-wise weighted sum of ``(groups, 8)`` views (the
previous kernels) compiles to a scalar loop (3.3x). :data:`sign_decode` turns the bytes back into
``+-s`` in one pass. The kernels write into the caller's buffers and run on CUDA as Triton through
``torch.compile`` unchanged. On the CPU, where C kernels build, the bits, the error-feedback pass
and the decode are C passes instead (:file:`c/sign.c`, :func:`sign_native`: the same bytes and
values); the row sums stay as above, their order being the scale's bits.
"""

from __future__ import annotations

import ctypes

import torch

from ..wire.bitpack import PACK1_MAGIC, pack_small_into
from . import native
from .core import Kernel
from ..parallel.cpu_pool import caller_workers

#: Values per exact partial sum of the scale (a row); the last row holds the rest. At most 1024:
#: a row's sum of integers of at most ``2^43`` stays within ``2^53``, where float64 counts exactly.
ROW = 1024
#: Eager row sums and the eager error-feedback pass run over blocks of this many values (a multiple
#: of :data:`ROW`): their temporaries (float64 ones included) stay a few MB, in cache.
ROW_BLOCK = 256 * ROW
#: The eager block off the CPU: there each op of a block is a kernel launch, and 256 rows made a
#: 64M-value EF-signSGD encode on an H200 take 660x a ``copy_``. A multiple of :data:`ROW`.
DEVICE_ROW_BLOCK = 4096 * ROW


def row_block(device: torch.device) -> int:
    """The eager block on ``device``: :data:`ROW_BLOCK` on the CPU, else :data:`DEVICE_ROW_BLOCK`."""
    return ROW_BLOCK if device.type == "cpu" else DEVICE_ROW_BLOCK
#: ``|p| * 2^(_SHIFT - E)`` is below ``2^43`` for every ``|p|`` up to the row's max of biased float32
#: exponent ``E`` (that max is below ``2^(E - 126)``).
_SHIFT = 127 + 42
_FLOAT64_BIAS = 1023
#: ``(y + 2^52) - 2^52`` is ``y`` rounded to the nearest integer (ties to even) for ``0 <= y < 2^52``:
#: two exact float64 ops, vectorised everywhere (eager torch's ``trunc_`` of float64 is not: 6x slower).
_ROUND = 2.0**52


def _row_exponent(m: torch.Tensor) -> torch.Tensor:
    """The biased float32 exponent of each row max ``m`` (non-negative), at least 1 (0 and
    subnormal maxima share the smallest normal exponent's scale), int64."""
    return ((m.view(torch.int32) >> 23) & 255).clamp(min=1).to(torch.int64)


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """``2.0 ** k`` (float64, exact) for integer ``k`` in float64's normal range, built from its
    bits (an ``exp2`` would depend on the math library)."""
    return ((k + _FLOAT64_BIAS) << 52).view(torch.float64)


def _abs_rows(g: torch.Tensor, e: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact row sums of the scale, in fixed point: for float32 ``(rows, L)`` inputs
    (``L <= ROW``), per row ``S = sum(round(|p| * 2^(169 - E)))`` (float64) of ``p = g + e`` (``g``
    when ``e`` is None; not stored) and the row's max ``m`` of ``|p|`` (float32), ``E``:
    :func:`_row_exponent` of ``m``. :func:`_scaled_back` turns them into the row's sum.

    Every product is exact (a float32 value times a power of two, in float64) and below ``2^43``;
    rounded to an integer (at most ``2^43``), so the row's float64 sum is exact in any order. A NaN or Inf in a row
    makes its ``S`` non-finite (the caller's check: one read-only pass). The scaling back stays
    out of the kernel: as a third loop it would keep Inductor from fusing the max and the sum
    into one pass over each row (measured: two passes over memory)."""
    a = (g if e is None else g + e).abs()
    m = a.amax(1, keepdim=True)
    y = a.to(torch.float64) * _pow2(_SHIFT - _row_exponent(m))
    r = (y + _ROUND) - _ROUND
    return r.sum(1), m.squeeze(1)


#: EF-signSGD's (and the mean-|x| scale's) row sums (:func:`abs_row_sums`).
abs_rows = Kernel(_abs_rows, "sign_abs_rows")


def _scaled_back(sums: torch.Tensor, maxes: torch.Tensor) -> torch.Tensor:
    """``S * 2^(E - 169)``: :func:`_abs_rows`' fixed-point row sums as float64 sums of ``|p|``
    (exact: ``S`` is an integer below ``2^53``)."""
    return sums * _pow2(_row_exponent(maxes) - _SHIFT)


def _abs_rows_eager(
    g: torch.Tensor, e: torch.Tensor | None, width: int, buf: torch.Tensor, wide: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager reference of :func:`_abs_rows` for rows of ``width`` values of the flat ``g`` (any
    float dtype but float64, widened exactly) and ``e`` (float32 or None): the same values, in place
    in the caller's scratch buffers ``buf`` (float32) and ``wide`` (float64) of at least
    ``g.numel()`` values (a float32-times-float64 product would take a slow mixed-dtype path)."""
    k = g.numel()
    a = buf[:k].view(-1, width)
    if e is not None:
        torch.add(g, e, out=a.view(-1)).abs_()
    elif g.dtype == torch.float32:
        torch.abs(g, out=a.view(-1))
    else:
        a.view(-1).copy_(g).abs_()
    m = a.amax(1, keepdim=True)
    y = wide[:k].view(-1, width)
    y.copy_(a)
    y.mul_(_pow2(_SHIFT - _row_exponent(m))).add_(_ROUND).sub_(_ROUND)
    return y.sum(1), m.squeeze(1)


def abs_row_sums(g: torch.Tensor, e: torch.Tensor | None, *, compiled: bool) -> torch.Tensor:
    """The sums of ``|g + e|`` over rows of :data:`ROW` values of the flat tensors ``g`` and ``e``
    (``|g|`` when ``e`` is None), the last row shorter, each exact up to the rounding of its
    values to multiples of ``2^-43`` of (a power of two above) the row's max (:func:`_abs_rows`): float64, one per row; non-finite where
    the row holds NaN or Inf.

    ``compiled``: the whole rows in one :data:`abs_rows` call (float32 only, two rows or more); else
    one C call where C kernels run (:func:`abs_row_sums_c`, float32), or eager
    (:func:`_abs_rows_eager`), block by block (:func:`row_block`). The last, shorter row runs eager
    in the compiled mode and the eager one."""
    n = g.numel()
    if not compiled and sign_native(g.device) and _flat32(g, e) and (e is None or e.numel() == n):
        return abs_row_sums_c(g, e, caller_workers())
    body = n // ROW * ROW
    parts = []
    lo = 0
    if compiled and body > ROW:  # one row: eager (a 1-row shape would compile a graph of its own)
        parts.append(abs_rows(g[:body].view(-1, ROW), None if e is None else e[:body].view(-1, ROW)))
        lo = body
    if lo < n:
        block = row_block(g.device)
        size = min(block, n - lo)
        buf = torch.empty(size, dtype=torch.float32, device=g.device)
        wide = torch.empty(size, dtype=torch.float64, device=g.device)
        for i in range(lo, n, block):  # blocks, not elements
            hi = min(i + block, n)
            rows_end = i + (hi - i) // ROW * ROW
            for a, b, w in ((i, rows_end, ROW), (rows_end, hi, hi - rows_end)):
                if b > a:
                    parts.append(_abs_rows_eager(g[a:b], None if e is None else e[a:b], w, buf, wide))
    if not parts:
        return torch.zeros(0, dtype=torch.float64, device=g.device)
    return _scaled_back(torch.cat([s for s, _ in parts]), torch.cat([m for _, m in parts]))


def mean_of_rows(sums: torch.Tensor, n: int) -> float:
    """``||p||_1 / n`` from :func:`abs_row_sums`' (finite) row sums: added in index order on the CPU
    (``cumsum``: a sequential loop, the same on every machine and for every device's sums), divided
    by ``n`` (Python float)."""
    if n == 0 or sums.numel() == 0:
        return 0.0
    return float(sums.cpu().cumsum(0)[-1]) / n


def _pack_signs(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p >= 0, packed)`` for flat float32 ``p`` of a multiple of 8 values: bit ``i % 8`` of byte
    ``i // 8`` of ``packed`` (int64 values 0..255) is ``p_i >= 0`` (module docstring). Compiled,
    Inductor stores the 0/1 bytes (``n`` bytes: a quarter of the input's) for the int64 view and
    packs them in a second loop over that small buffer."""
    pos = p >= 0
    words = pos.to(torch.int32).to(torch.uint8).view(torch.int64) * PACK1_MAGIC
    return pos, (words >> 56) & 255


def _sign_bits(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """``bits`` = the packed sign bits of flat float32 ``x`` (a multiple of 8 values;
    :func:`~gcbench.compressors.wire.bitpack.pack_bits` with 1 bit of ``x >= 0``), written in place; returns whether every
    ``x`` is finite (the contract's check, folded into the same pass)."""
    _, packed = _pack_signs(x)
    bits.copy_(packed)
    return torch.isfinite(x).all()


#: signSGD's sign mask and its packing in one pass (:meth:`~gcbench.compressors.codecs.sign.Sign._encode`).
sign_bits = Kernel(_sign_bits, "sign_bits")


def _ef_sign(
    g: torch.Tensor, e: torch.Tensor | None, s: torch.Tensor, bits: torch.Tensor, res: torch.Tensor | None
) -> None:
    """EF-signSGD's second pass over flat float32 ``g`` and ``e`` (a multiple of 8 values):
    ``p = g + e`` (``g`` when ``e`` is None, the first step), ``bits`` = its packed signs, and the
    residual ``p - s sign(p)`` (``p - s`` where ``p >= 0``, else ``p + s``: the float32 values of
    ``p - decode``) written over ``e`` (``res is None``) or into ``res`` (the first step).
    ``s``: a one-element float32 tensor (a tensor, so a new scale does not recompile)."""
    p = g if e is None else g + e
    pos, packed = _pack_signs(p)
    bits.copy_(packed)
    out = e if res is None else res
    assert out is not None  # the first step passes res
    out.copy_(torch.where(pos, p - s, p + s))


#: EF-signSGD's sign bits and residual in one pass (:meth:`~gcbench.compressors.codecs.sign.Sign.encode_with_feedback`).
ef_sign = Kernel(_ef_sign, "ef_sign")


def ef_sign_eager(
    g: torch.Tensor, e: torch.Tensor | None, s: torch.Tensor, bits: torch.Tensor, res: torch.Tensor | None
) -> None:
    """The eager reference of :func:`_ef_sign` (same arguments): ``p = e + g`` formed in ``e``
    (addition commutes exactly), the decoded ``+-s`` built as ``(2u - 1) * s`` from the 0/1 sign
    mask ``u`` (exact) and subtracted (``p - (-s)`` is ``p + s`` exactly), the mask then packed in
    place (:func:`~gcbench.compressors.wire.bitpack.pack_small_into`). A boolean ``where`` or a float conversion of a bool
    tensor would cost more than all of these (eager torch: 4x and 20x a ``copy_`` of the block)."""
    p = g if e is None else e.add_(g)
    u = torch.ge(p, 0).view(torch.uint8)
    decoded = u.to(torch.float32).mul_(2).sub_(1).mul_(float(s))
    torch.sub(p, decoded, out=p if res is None else res)
    pack_small_into(u, 1, bits)


def _sign_decode(bits: torch.Tensor, s: torch.Tensor, out: torch.Tensor) -> None:
    """The decoder's values for ``(groups,)`` packed bytes: ``out`` (float32 ``(groups, 8)``) = ``s``
    where bit ``j`` of byte ``g`` is set, else ``-s`` (``s``: a one-element float32 tensor): the
    values of :meth:`~gcbench.compressors.codecs.sign.Sign._decode_into`'s table (``+-1 * s``), in one pass that reads the
    bytes and writes the floats (a table gather reads int32 codes converted first: 1.4x a
    ``copy_`` at 25M, against 0.5x here)."""
    shifts = torch.arange(8, dtype=torch.int32, device=bits.device)
    set_ = ((bits.to(torch.int32).unsqueeze(1) >> shifts) & 1) == 1
    out.copy_(torch.where(set_, s, -s))


#: signSGD / EF-signSGD decode of whole bytes (:meth:`~gcbench.compressors.codecs.sign.Sign._decode_into`).
sign_decode = Kernel(_sign_decode, "sign_decode")


# --------------------------------------------------------------------------------------------------
# the same passes in C (c/sign.c): where C kernels build, on the CPU
# --------------------------------------------------------------------------------------------------

#: The C source (:file:`c/sign.c`).
SIGN_C = "sign"
_P, _SIZE = ctypes.c_void_p, ctypes.c_size_t
#: ctypes signatures of :file:`c/sign.c`.
_SIGNATURES = {
    "gcbench_sign_bits": ([_P, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P], ctypes.c_int),
    "gcbench_ef_sign": ([_P, _P, ctypes.c_float, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, _P], None),
    "gcbench_sign_decode": ([_P, ctypes.c_float, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P], None),
    "gcbench_abs_row_sums": ([_P, _P, _SIZE, _SIZE, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P], None),
    "gcbench_openmp": ([], ctypes.c_int),
}
#: Bytes per block on the caller's threads (:func:`~gcbench.compressors.kernels.native.in_blocks`):
#: 64K values.
C_BLOCK = 1 << 13


def sign_native(device: torch.device) -> bool:
    """Whether the C passes (:func:`sign_bits_c`, :func:`ef_sign_c`, :func:`sign_decode_c`) run on
    ``device``: the CPU, in a mode that runs C kernels
    (:func:`~gcbench.compressors.kernels.native.use_native`). Inductor packs the bits through a
    64-bit multiply, which has no vector instruction on AVX2 (signSGD's 25M-value encode: 41 ms
    compiled and 30 ms eager there, a ``copy_`` 8.4 ms); a C pass packs a byte with one compare."""
    return device.type == "cpu" and native.use_native(SIGN_C)


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"{what}: tensors of other dtypes, devices, layouts or sizes")


def _flat32(*ts: torch.Tensor | None) -> bool:
    return all(t is None or (t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous()) for t in ts)


def sign_bits_c(x: torch.Tensor, bits: torch.Tensor, workers: int) -> bool:
    """:func:`_sign_bits` in C: ``bits`` (uint8, ``x.numel() / 8``) = the packed ``x >= 0`` of float32
    ``x`` (a multiple of 8 values, contiguous CPU); returns whether every ``x`` is finite. Blocks on
    up to ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    nb = x.numel() // 8
    _check(_flat32(x) and x.numel() % 8 == 0 and bits.dtype == torch.uint8 and bits.is_contiguous()
           and bits.device.type == "cpu" and bits.numel() == nb, "sign_bits_c")
    if nb == 0:
        return True
    fn = native.typed(SIGN_C, _SIGNATURES).gcbench_sign_bits
    native.record_call(SIGN_C)
    bad = native.in_blocks(SIGN_C, lambda a, b, block, threads: fn(x.data_ptr(), a, b, block, threads, bits.data_ptr()),
                           0, nb, C_BLOCK, x.device, workers)
    return not any(bad)


def ef_sign_c(
    g: torch.Tensor, e: torch.Tensor | None, s: float, bits: torch.Tensor, res: torch.Tensor | None, workers: int
) -> None:
    """:func:`_ef_sign` in C (the same arguments, ``s`` a float): ``p = g + e`` (``g`` when ``e`` is
    None), ``bits`` its packed signs, and ``p - s sign(p)`` over ``e`` (``res`` None) or into ``res``.
    Float32, contiguous CPU, a multiple of 8 values. Blocks on up to ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes; neither ``e`` nor ``res``.
    """
    n = g.numel()
    out = e if res is None else res
    _check(out is not None and _flat32(g, e, res) and n % 8 == 0 and all(t is None or t.numel() == n for t in (e, res))
           and bits.dtype == torch.uint8 and bits.is_contiguous() and bits.numel() == n // 8, "ef_sign_c")
    if n == 0:
        return
    fn = native.typed(SIGN_C, _SIGNATURES).gcbench_ef_sign
    native.record_call(SIGN_C)
    ptrs = (g.data_ptr(), None if e is None else e.data_ptr(), s)
    native.in_blocks(SIGN_C, lambda a, b, block, threads: fn(*ptrs, a, b, block, threads, bits.data_ptr(), out.data_ptr()),
                     0, n // 8, C_BLOCK, g.device, workers)


def sign_decode_c(bits: torch.Tensor, s: float, out: torch.Tensor, workers: int) -> None:
    """:func:`_sign_decode` in C: ``out`` (float32, 8 values per byte of ``bits``, contiguous CPU) = ``s``
    where a bit is set, else ``-s``. Blocks on up to ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    nb = bits.numel()
    _check(_flat32(out) and out.numel() == 8 * nb and bits.dtype == torch.uint8 and bits.is_contiguous()
           and bits.device.type == "cpu", "sign_decode_c")
    if nb == 0:
        return
    fn = native.typed(SIGN_C, _SIGNATURES).gcbench_sign_decode
    native.record_call(SIGN_C)
    native.in_blocks(SIGN_C, lambda a, b, block, threads: fn(bits.data_ptr(), s, a, b, block, threads, out.data_ptr()),
                     0, nb, C_BLOCK, bits.device, workers)


def abs_row_sums_c(g: torch.Tensor, e: torch.Tensor | None, workers: int) -> torch.Tensor:
    """:func:`abs_row_sums` in C (not compiled): the float64 sums of ``|g + e|`` (``|g|`` when ``e``
    is None) over rows of :data:`ROW` values, the last row shorter, with the values of
    :func:`_abs_rows` and :func:`_scaled_back`. Float32, contiguous CPU. Blocks of rows on up to
    ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    n = g.numel()
    _check(_flat32(g, e) and (e is None or e.numel() == n), "abs_row_sums_c")
    rows = -(-n // ROW)
    out = torch.empty(rows, dtype=torch.float64)
    if rows == 0:
        return out
    fn = native.typed(SIGN_C, _SIGNATURES).gcbench_abs_row_sums
    native.record_call(SIGN_C)
    ptrs = (g.data_ptr(), None if e is None else e.data_ptr(), n, ROW)
    native.in_blocks(SIGN_C, lambda a, b, block, threads: fn(*ptrs, a, b, block, threads, out.data_ptr()),
                     0, rows, ROW_BLOCK // ROW, g.device, workers)
    return out
