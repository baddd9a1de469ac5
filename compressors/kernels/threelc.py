"""3LC's compiled kernels (:class:`~gcbench.compressors.kernels.core.Kernel`): quantization + quartic packing, the residual
and trits of error accumulation, and the table decode into a ready buffer; and its zero-run coding in C
(:file:`c/zero_run.c`, built by :mod:`~gcbench.compressors.kernels.native`): :func:`zero_run_encode_c`,
:func:`zero_run_expand_c`, :func:`zero_run_decode_c`; and the error accumulation's scan and pass in C
(:file:`c/threelc.c`): :func:`feedback_scan_c`, :func:`feedback_pack_c`.

Each kernel is the compiled twin of an eager path in :mod:`~gcbench.compressors.codecs.threelc.codec`, which stays the reference
(``tests/test_fused.py`` and ``tests/test_threelc_fast.py`` compare the bytes and values). They
take the flat float32 tensors and view them as ``(groups, 5)`` *inside* the compiled function, so
the group width 5 is a constant of the generated loop (passed in as a view it is a symbolic
stride under ``dynamic=True``), and the quartic byte is a weighted sum over that axis (Inductor
writes it as a short reduction; the five strided column loads of the Horner form it compiled to
a scalar loop): 1.4x against 2.4x a 25M-float ``copy_`` for the quantization alone (one core),
and 0.6-0.8x with 256-bit vectors (:data:`_PACK_OPTIONS`).

The paper's quantization (Lim et al., SysML 2019, Sec. 3.1): ``t = 1 + round(x / M)`` with ties
to 0, i.e. ``(x > M/2) + (x >= -M/2)``; the quartic byte (Sec. 3.2) ``81 t0 + 27 t1 + 9 t2 + 3 t3 +
t4``; integer arithmetic, so eager and compiled agree bit for bit. The residual of the error
accumulation is ``c - M`` / ``c`` / ``c + M``, one correctly rounded float32 op as in eager.
"""

from __future__ import annotations

import ctypes
import math
import struct

import torch

from . import native
from .core import DYNAMIC_THREADS, Kernel


def _pack_trits(x: torch.Tensor, h: torch.Tensor, neg_h: torch.Tensor) -> torch.Tensor:
    """The quartic bytes (uint8, ``n / 5``) of flat ``x`` (``n`` a multiple of 5), each shifted trit
    ``(x > h) + (x >= -h)``; ``h``, ``neg_h``: one-element float32 tensors. Returned, not written
    into a caller's buffer: Inductor compiled the in-place variant to a loop 2.5x slower here;
    a second input (``g + e`` inside the kernel) also made it a scalar loop (3x slower than
    ``e += g`` in eager followed by this kernel)."""
    g = x.to(torch.float32).view(-1, 5)
    return _quartic_bytes((g > h).to(torch.float32) + (g >= neg_h).to(torch.float32))


def _quartic_bytes(t: torch.Tensor) -> torch.Tensor:
    """The quartic bytes (Section 3.2) of float32 shifted trits ``t`` (0., 1., 2.) in rows of five
    (traced into each kernel that calls it). The weights are a literal: Dynamo folds it into the
    kernel as a constant (a module-level tuple became five scalar loads and a scalar loop: 3.5x
    against 1.6x a copy_); float32 sums of at most 242 are exact whatever the order of the additions."""
    return (t * torch.tensor([81.0, 27.0, 9.0, 3.0, 1.0], device=t.device)).sum(1).to(torch.uint8)


#: Inductor's C++ vector width for :data:`pack_trits`: 256-bit (8 lanes). Its loads of each group
#: column are stride-5 gathers (8 or 16 scalar loads into a stack buffer, then one vector load);
#: at the default 512 bits on an AVX-512 CPU the kernel took 1.26-1.61x a 25M-float
#: ``copy_``, at 256 bits 0.61-0.81x (same process, interleaved; 128 bits or 0: a scalar loop,
#: 3.2x). The other 3LC kernels ran 2-4x slower at 256 bits, so they keep the default. Ignored on
#: CUDA (Triton).
_PACK_OPTIONS = {"cpp.simdlen": 256}

#: 3LC's 3-value quantization and quartic packing in one read of the input (:func:`~gcbench.compressors.codecs.threelc.codec._quantize_quartic`).
pack_trits = Kernel(_pack_trits, "threelc_pack_trits", options=_PACK_OPTIONS)


def _feedback_trits(
    g: torch.Tensor, e: torch.Tensor | None, h: torch.Tensor, neg_h: torch.Tensor, m: torch.Tensor,
    res: torch.Tensor, trits: torch.Tensor,
) -> None:
    """Error accumulation (Sec. 3.1) on flat ``c = g + e`` (``g`` when ``e`` is None), elementwise:
    ``res`` = ``c - M * round(c / M)`` (``c - M`` above ``h``, ``c + M`` below ``-h``, else ``c``)
    and ``trits`` (uint8) = the shifted trits ``(c > h) + (c >= -h)``; both written in place,
    ``res`` may be ``e`` itself (each element is read before it is written). The trits go through
    float32 (0., 1., 2.: exact) because a bool -> uint8 store made Inductor's loop scalar (20x
    slower); the bytes are :data:`pack_shifted` of the trits, a second, 4x smaller read (one kernel
    with the bytes' reduction over groups ran 5x slower than the two, 25M floats, one core)."""
    c = g if e is None else g + e
    t = (c > h).to(torch.float32) + (c >= neg_h).to(torch.float32)
    res.copy_(torch.where(c > h, c - m, torch.where(c < neg_h, c + m, c)))
    trits.copy_(t.to(torch.uint8))


#: 3LC's residual and trits of the error-corrected gradient in one pass
#: (:meth:`~gcbench.compressors.codecs.threelc.codec.ThreeLC.encode_with_feedback`).
feedback_trits = Kernel(_feedback_trits, "threelc_feedback_trits", DYNAMIC_THREADS)


def _pack_shifted(trits: torch.Tensor) -> torch.Tensor:
    """The quartic bytes (uint8, ``n / 5``) of flat shifted trits (uint8 in {0, 1, 2}, ``n`` a
    multiple of 5), summed in uint8 (at most 242: no wrap-around): 0.54x a 25M-float ``copy_``
    against 0.66x for the float32 weighted sum of :func:`_quartic_bytes` (same process, one core)."""
    g = trits.view(-1, 5)
    return g[:, 0] * 81 + g[:, 1] * 27 + g[:, 2] * 9 + g[:, 3] * 3 + g[:, 4]


#: Quartic packing of the trits that :data:`feedback_trits` wrote.
pack_shifted = Kernel(_pack_shifted, "threelc_pack_shifted", DYNAMIC_THREADS)


def _decode_groups(data: torch.Tensor, tab: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (float32 ``(groups, 5)``) = ``tab[data]``: each quartic byte's five decoded values
    (``tab``: the decoder's ``(256, 5)`` table ``M * trit``), one streaming write of ``out``."""
    out.copy_(tab[data.to(torch.int64)])


#: The quartic stream's table decode straight into the caller's buffer (:func:`~gcbench.compressors.codecs.threelc.codec._gather_groups`).
decode_groups = Kernel(_decode_groups, "threelc_decode_groups")


def _zero_run_scan(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pass over a zero-run stream (Sec. 3.3; uint8, at least one byte): per byte the number
    of quartic bytes it expands to (int64: ``b - 241`` for a run code ``b >= 243``, else 1) and
    the quartic byte its first group has (121 for a run code, else itself); whether the stream is
    non-canonical (a byte ending a zero-run, 121 or 243..254, followed by 121 or a run code: the
    greedy encoder merges those); and the number of non-zero groups (bytes 0..242 but 121).
    The eager twin is :func:`~gcbench.compressors.codecs.threelc.zero_run.parse_zero_run`'s table lookups."""
    d = data.to(torch.int32)
    counts = (d - 241).clamp(min=1).to(torch.int64)
    first = torch.where(d >= 243, 121, d).to(torch.uint8)
    continues = (d == 121) | (d >= 243)
    ends = continues & (d != 255)
    bad = (ends[:-1] & continues[1:]).any()
    nonzero = ((d < 243) & (d != 121)).sum()
    return counts, first, bad, nonzero


#: The zero-run decoder's per-byte pass (:func:`~gcbench.compressors.codecs.threelc.zero_run.parse_zero_run`).
zero_run_scan = Kernel(_zero_run_scan, "threelc_zero_run_scan")


#: The C source of the zero-run coder (:file:`c/zero_run.c`).
ZERO_RUN_C = "zero_run"
_SIZE = ctypes.c_size_t
_P = ctypes.c_void_p


#: ctypes signatures of the functions of :file:`c/zero_run.c`: addresses as plain integers (a tensor's
#: ``data_ptr``), no array conversion per call.
_SIGNATURES = {
    "gcbench_zero_run_encode": ([_P, _SIZE, _P, _P], _SIZE),
    "gcbench_zero_run_expand": ([_P, _SIZE, _P, _P, _P, _P, _SIZE, ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE)],
                                ctypes.c_int),
    "gcbench_zero_run_decode": ([_P, _SIZE, _P, _P, _P, ctypes.c_float, _P, _SIZE, ctypes.POINTER(_SIZE),
                                 ctypes.POINTER(_SIZE)], ctypes.c_int),
}


def _zero_run_lib() -> ctypes.CDLL:
    return native.typed(ZERO_RUN_C, _SIGNATURES)


def _flat_cpu(*tensors: torch.Tensor, dtype: torch.dtype = torch.uint8) -> bool:
    """Whether every tensor is a contiguous CPU tensor of ``dtype`` (what the C loops index)."""
    return all(t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def zero_run_encode_c(src: torch.Tensor, remainder: torch.Tensor) -> torch.Tensor:
    """The greedy zero-run encoding of the quartic bytes ``src`` (1-D contiguous uint8, CPU), in one C
    pass (kept bytes found 64 at a time); ``remainder``: the 14 codes of a run's last chunk of
    ``r = 0..13`` zero groups. A new tensor, at most ``len(src)`` bytes (a view of a buffer 16 bytes longer).

    Raises:
        ValueError: tensors of other dtypes, devices or layouts, or a remainder table of another size.
    """
    if not (_flat_cpu(src, remainder) and remainder.numel() == 14):
        raise ValueError("zero_run_encode_c: tensors of other dtypes, devices, layouts or sizes")
    lib = _zero_run_lib()
    native.record_call(ZERO_RUN_C)
    out = torch.empty(src.numel() + 16, dtype=torch.uint8)  # 16 bytes of slack the loop may write past the end
    n = lib.gcbench_zero_run_encode(src.data_ptr(), src.numel(), out.data_ptr(), remainder.data_ptr())
    return out[:n]


def zero_run_expand_c(
    data: torch.Tensor, groups: int, first: torch.Tensor, span: torch.Tensor, classes: torch.Tensor
) -> tuple[torch.Tensor, int, int, int]:
    """``(quartic, status, total, nonzero)``: the zero-run stream ``data`` (1-D contiguous uint8, CPU)
    expanded into ``groups`` quartic bytes and checked in one C pass (never writing past them);
    ``status`` 0 (valid), 1 (not canonical) or 2 (it expands to ``total`` bytes, not ``groups``);
    ``nonzero``: its non-zero groups. ``first``, ``span``, ``classes``: the 256-entry tables of a
    byte's first quartic byte, expanded length and class bits (``c/zero_run.c``).

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    if not (_flat_cpu(data, first, span, classes) and first.numel() == span.numel() == classes.numel() == 256):
        raise ValueError("zero_run_expand_c: tensors of other dtypes, devices, layouts or sizes")
    lib = _zero_run_lib()
    native.record_call(ZERO_RUN_C)
    quartic = torch.empty(groups, dtype=torch.uint8)
    total, nonzero = _SIZE(), _SIZE()
    status = lib.gcbench_zero_run_expand(data.data_ptr(), data.numel(), first.data_ptr(), span.data_ptr(),
                                         classes.data_ptr(), quartic.data_ptr(), groups, ctypes.byref(total),
                                         ctypes.byref(nonzero))
    return quartic, int(status), int(total.value), int(nonzero.value)


def zero_run_decode_c(
    data: torch.Tensor, span: torch.Tensor, classes: torch.Tensor, digits: torch.Tensor, m: float, out: torch.Tensor
) -> tuple[int, int, int]:
    """``(status, total, nonzero)``: the 3LC zero-run stream ``data`` (1-D contiguous uint8, CPU)
    decoded straight into ``out`` (flat contiguous float32, CPU: every one of its values written) and
    checked in the same C pass, without the quartic stream in between. ``status``: bit 1 not
    canonical, 2 it expands to ``total`` quartic bytes, not ``ceil(out.numel() / 5)``, 4 the last
    byte's padding trits are not quantized zeros; ``nonzero``: its non-zero groups. ``span``,
    ``classes``: the zero-run tables of :func:`zero_run_expand_c`; ``digits``: ``(256, 5)`` uint8,
    a quartic byte's shifted trits in decoding order; ``m``: the scale (a shifted trit ``t``
    decodes to ``(-m, +0, m)[t]``). ``out`` holds unspecified values where ``status`` is not 0."""
    if not (_flat_cpu(data, span, classes, digits) and _flat_cpu(out, dtype=torch.float32)
            and span.numel() == classes.numel() == 256 and digits.numel() == 256 * 5):
        raise ValueError("zero_run_decode_c: tensors of other dtypes, devices, layouts or sizes")
    fn = _zero_run_lib().gcbench_zero_run_decode
    native.record_call(ZERO_RUN_C)
    total, nonzero = _SIZE(), _SIZE()
    status = fn(data.data_ptr(), data.numel(), span.data_ptr(), classes.data_ptr(), digits.data_ptr(), m,
                out.data_ptr(), out.numel(), ctypes.byref(total), ctypes.byref(nonzero))
    return int(status), int(total.value), int(nonzero.value)


#: The C source of the error accumulation with quartic packing (:file:`c/threelc.c`).
THREELC_C = "threelc"
#: ctypes signatures of the functions of :file:`c/threelc.c`.
_FEEDBACK_SIGNATURES = {
    "gcbench_threelc_feedback": ([_P, _P, ctypes.c_float, ctypes.c_float, _SIZE, _SIZE, _SIZE, _SIZE, ctypes.c_int, _P, _P],
                                 None),
    "gcbench_threelc_scan": ([_P, _P, _SIZE], ctypes.c_uint32),
    "gcbench_openmp": ([], ctypes.c_int),
}
#: The bits of float32 Inf: :func:`feedback_scan_c`'s maximum at or above them is Inf or NaN.
_INF_BITS = 0x7F800000
#: Groups of five values per block on the caller's threads (:func:`~gcbench.compressors.kernels.native.in_blocks`):
#: 320K values.
FEEDBACK_BLOCK = 1 << 16


def feedback_native(device: torch.device) -> bool:
    """Whether :func:`feedback_pack_c` runs on ``device``: the CPU, in a mode that runs C kernels
    (:func:`~gcbench.compressors.kernels.native.use_native`). It replaces :data:`feedback_trits` and
    :data:`pack_shifted` there: their byte per value written and read again, and Inductor's
    stride-5 gathers in the packing (25M values on 2 threads with AVX2: 1.7 + 0.85 against a ``copy_``)."""
    return device.type == "cpu" and native.use_native(THREELC_C)


def feedback_scan_c(g: torch.Tensor, e: torch.Tensor | None) -> float:
    """``max |g + e|`` (``|g|`` when ``e`` is None) in one read-only C pass on this thread, as a float
    (exact: a maximum of float32 magnitudes); ``inf`` when some ``g + e`` is Inf or NaN. The scan of
    :data:`~gcbench.compressors.kernels.core.ef_scan` for inputs below the compile threshold, where
    eager torch's blocks, ``aminmax`` and reductions cost tens of microseconds per call. Flat
    float32, contiguous CPU, ``e`` as long as ``g``.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    if not (_flat_cpu(g, dtype=torch.float32) and (e is None or (_flat_cpu(e, dtype=torch.float32)
                                                                 and e.numel() == g.numel()))):
        raise ValueError("feedback_scan_c: tensors of other dtypes, devices, layouts or sizes")
    fn = native.typed(THREELC_C, _FEEDBACK_SIGNATURES).gcbench_threelc_scan
    native.record_call(THREELC_C)
    bits = fn(g.data_ptr(), None if e is None else e.data_ptr(), g.numel())
    return math.inf if bits >= _INF_BITS else struct.unpack("<f", struct.pack("<I", bits))[0]


def feedback_pack_c(g: torch.Tensor, e: torch.Tensor | None, m: float, h: float, res: torch.Tensor,
                    quartic: torch.Tensor, workers: int) -> None:
    """:data:`feedback_trits` then :data:`pack_shifted` in one C pass: ``res`` = the residual of
    ``c = g + e`` (``g`` when ``e`` is None; ``res`` may be ``e``) and ``quartic`` (uint8, one byte per
    group of five values, the last padded with quantized zeros) its quartic bytes. ``m``, ``h``: the
    scale and its half as float32 values. Flat float32, contiguous CPU; blocks on up to ``workers`` threads.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    n = g.numel()
    groups = (n + 4) // 5
    floats = [t for t in (g, e, res) if t is not None]
    if not (_flat_cpu(*floats, dtype=torch.float32) and all(t.numel() == n for t in floats)
            and _flat_cpu(quartic) and quartic.numel() == groups):
        raise ValueError("feedback_pack_c: tensors of other dtypes, devices, layouts or sizes")
    if n == 0:
        return
    fn = native.typed(THREELC_C, _FEEDBACK_SIGNATURES).gcbench_threelc_feedback
    native.record_call(THREELC_C)
    ptrs = (g.data_ptr(), None if e is None else e.data_ptr(), m, h, n)
    native.in_blocks(THREELC_C, lambda a, b, block, threads: fn(*ptrs, a, b, block, threads, res.data_ptr(),
                                                                quartic.data_ptr()),
                     0, groups, FEEDBACK_BLOCK, g.device, workers)
