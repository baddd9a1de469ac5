"""Stochastic rounding to packed integer codes and its decode: the quantizing core of
:mod:`~gcbench.compressors.codecs.qsgd`, :mod:`~gcbench.compressors.codecs.terngrad` and
:mod:`~gcbench.compressors.codecs.zipml`: ``clamp(floor((x - shift) * scale + offset + u), 0, top)``
with a uniform ``u`` per value, packed in the codes' minimal width (:func:`stochastic_round`), and
``(code - offset) * factor + base`` back (:func:`decode_packed`).

* For QSGD, ``sign(v_i) * xi_i`` is the stochastic rounding of the signed value ``y_i = v_i * s / ||v||`` to
  its two neighbouring integers (``floor(y)`` and ``floor(y) + 1``, the upper one with probability
  ``y - floor(y)``); for negative ``y`` this picks the same two magnitudes with the same
  probabilities as the paper's ``sign * xi(|y|)``. The codec computes ``floor(y_i + s + u_i)`` with one
  uniform ``u_i`` per element, which is the shifted signed level directly.
* Uniforms (:mod:`~gcbench.compressors.kernels.dither`, ``DITHER_VERSION`` 2): 16 bits each, a counter-based hash of a key and
  the element's index (two keyed rounds of ``pcg_hash``, one 32-bit word for two elements), computed
  inside the quantizing pass (eager: chunked integer ops, numpy uint32 on the CPU; compiled: in the
  kernel, on the CPU the C pass of :mod:`~gcbench.compressors.kernels.quantize`), with one
  key drawn per encode from the codec's generator (same seed, same bytes; successive calls differ),
  and ``u_i = (r_i + 0.5) / 65536``. A float32 uniform's extra bits would be lost anyway: ``y + s +
  u`` is a float32 in ``[0, 2s+1)`` whose resolution is ``2**-16`` for ``s = 127``. The rounding
  probability is the exact one to within ``2**-17``, i.e. the quantizer is unbiased to within
  ``2**-17`` of a quantization step (``||v|| / s``). For ``s >= 128`` the float32 sum itself is
  coarser (its ulp near ``2s`` is ``2**(floor(log2(2s)) - 23)``, e.g. ``2**-8`` of a step at
  ``s = 32767``). (``DITHER_VERSION`` 1 drew four 16-bit lanes per int64 word of the generator's
  serial stream: a pass no kernel could fuse, 3.45x a ``copy_`` at 25M values.)
* CPU work runs in chunks of ``CHUNK`` elements (and at most a quarter of the tensor, at least
  ``MIN_CHUNK``) when encoding and ``DECODE_CHUNK`` when decoding
  (whole buckets, a multiple of 8) so that the temporaries stay bounded and each chunk packs to
  whole bytes; each value's uniform depends on its index only, so chunking does not change the output. CUDA
  runs in one chunk. The chunks are large (16M / 32M values): every torch op is a parallel region,
  and on a loaded machine the number of regions costs more than cache misses (see ``CHUNK``).
"""

from __future__ import annotations

import math
import sys

import torch

from ..numerics import quarter_block
from ..wire.bitpack import bits_for_levels, check_padding, pack_bits, pack_small_into, packed_nbytes, unpack_bits
from ..errors import CorruptPayloadError, UnsupportedInputError
from ..kernels import choice
from ..kernels.workspace import fresh, working_float32
from ..kernels.dequantize import dequantize_native, dequantize_u16_c, dequantize_u8_c, unpack_bits_c, unpack_native
from ..kernels.quantize import BITS as C_BITS, dither_c, dither_rest_c, quantize_native, values_per_group
from ..parallel.cpu_pool import caller_workers
from ..kernels.dither import (PAIRS_32, draw_key, key_words_int, kernel_words, pair_uniforms_into,
                              split_point, uniforms_into)
from ..kernels.core import (
    bucket_scale, by_rows, dequantize, dequantize16, dither_codes, dither_planar16, dither_unpaired, places_dtype,
    row_places, use_compiled,
)

#: Elements per chunk on CPU (rounded to whole buckets); CUDA runs in one chunk. Each chunk costs
#: 4-5 torch ops, each a parallel region whose threads meet at a barrier; on a loaded machine a
#: region waits for a preempted thread, so the number of regions costs more than cache misses.
#: Large chunks keep that number low while the temporaries stay bounded; smaller chunks are a little
#: faster only on an idle machine.
CHUNK = 1 << 24
#: Decoding chunk on CPU: decoding has fewer ops per chunk and no random stream, so the chunk is
#: larger still for the same reason.
DECODE_CHUNK = 1 << 25
#: Row length of the compiled encode under one scale (TernGrad, ZipML; a multiple of 8): Inductor's
#: OpenMP loop splits the outer (row) loop over threads, so one row of n values would run on one.
FUSED_SPAN = 1 << 14
#: Smallest encoding chunk on CPU: an encode chunk is also at most a quarter of its tensor (so its
#: buffers stay below the input's size), but not below this many values.
MIN_CHUNK = 1 << 18
_LITTLE_ENDIAN = sys.byteorder == "little"
#: Normalisers (bucket norms, TernGrad scales, ZipML ranges) are kept at least this large so that
#: ``s / norm`` stays finite in float32 (s < 2**15); any normaliser >= max |v_i| keeps the quantizer
#: unbiased.
MIN_SCALE = 2.0**-110
#: The largest float32.
F32_MAX = torch.finfo(torch.float32).max


def as_float32(x: torch.Tensor, codec: str) -> torch.Tensor:
    """``x`` as float32 (the arithmetic type of the quantizers); float64 values must fit float32."""
    if x.dtype == torch.float32:
        return x
    if x.dtype == torch.float64 and bool(x.abs().max() > F32_MAX):
        raise UnsupportedInputError(f"{codec} quantizes in float32; the input holds float64 values beyond its range")
    return working_float32(x, f"{codec}.float32")  # a 16-bit input in the codec's buffer: it never leaves the encode


def chunk_size(n: int, bucket: int, device: torch.device, chunk: int | None = None) -> int:
    """Chunk length: whole buckets and a multiple of 8 (1-bit bytes); all of ``n`` on GPU.

    ``chunk`` is the target length on CPU (default :data:`CHUNK`).
    """
    if device.type != "cpu":
        return n
    unit = bucket * 8 // math.gcd(bucket, 8)
    return max(1, (CHUNK if chunk is None else chunk) // unit) * unit


def _rowwise(
    t: torch.Tensor,
    factor: torch.Tensor | float,
    row0: int,
    bucket: int,
    op: str,
    src: torch.Tensor | None = None,
    tmp: torch.Tensor | None = None,
) -> None:
    """In place on a flat chunk ``t`` starting at bucket ``row0``: ``t *= f`` (op "mul") or
    ``t += fl(src * f)`` (op "muladd": the product rounded to float32 first, in the scratch ``tmp``
    of ``t``'s length), ``f`` per bucket (a 1-D tensor) or one float.

    "muladd" is deliberately two ops: ``addcmul``/``add(alpha=)`` use a fused multiply-add on CPUs
    that have one (so the result depended on the CPU), and the compiled kernels of :mod:`~gcbench.compressors.kernels.core`
    never fuse; two correctly rounded ops give the same bits everywhere.
    """
    if op == "muladd":
        m = t.numel()
        prod = tmp[:m]
        if isinstance(factor, torch.Tensor):
            # the products written straight into the scratch (one pass, not a copy and a multiply)
            full = m // bucket
            if full:
                torch.mul(src[: full * bucket].view(full, bucket), factor[row0 : row0 + full].unsqueeze(1),
                          out=prod[: full * bucket].view(full, bucket))
            if m % bucket:
                torch.mul(src[full * bucket :], factor[row0 + full], out=prod[full * bucket :])
        else:
            torch.mul(src, factor, out=prod)
        t.add_(prod)
        return
    if not isinstance(factor, torch.Tensor):
        t.mul_(factor)
        return
    m = t.numel()
    full = m // bucket
    rows = slice(row0, row0 + full)
    if full:
        t[: full * bucket].view(full, bucket).mul_(factor[rows].unsqueeze(1))
    if m % bucket:
        t[full * bucket :].mul_(factor[row0 + full])


def stochastic_round(
    x: torch.Tensor,
    scale: torch.Tensor | float,
    *,
    offset: float,
    top: int,
    bits: int,
    generator: torch.Generator | None,
    bucket: int = 0,
    shift: float = 0.0,
    bounded: bool = False,
) -> torch.Tensor:
    """Packed codes ``clamp(floor((x - shift) * scale + offset + u), 0, top)``, ``u`` from :mod:`~gcbench.compressors.kernels.dither`.

    Args:
        x: 1-D float32 tensor.
        scale: one float, or a float32 tensor with one factor per bucket of ``bucket`` elements.
        offset: added before rounding.
        top: largest code (``top < 2**bits``).
        bits: code width; the result is exactly ``pack_bits(codes, bits)``.
        generator: source of the uniforms' key (one draw per call, :func:`~gcbench.compressors.kernels.dither.draw_key`).
        bucket: bucket length when ``scale`` is a tensor.
        shift: subtracted from ``x`` first (before scaling: ZipML's ``x - min``).
        bounded: the caller guarantees ``-1 < (x - shift) * scale + offset + u < top + 2`` (QSGD,
            whose normaliser bounds ``|x| * scale`` by ``s``; ZipML's ``x - min``). Then, when
            ``top + 1 < 256``, the float-to-uint8 conversion (which truncates, i.e. floors above -1)
            happens first and the clamp runs on the uint8 codes (a quarter of the bytes); same codes.

    The expectation of a code is ``(x - shift) * scale + offset`` (to within ``2**-17``) wherever that
    lies in ``[0, top]``; values outside are clamped (TernGrad's clipping relies on this). Chunks hold
    a multiple of 8 values, so for ``bits <= 8`` each chunk packs to whole bytes in cache and the
    packed chunks concatenate to the packing of the whole.

    Per chunk: the 16-bit uniforms are computed as exact float32 integers
    (:func:`~gcbench.compressors.kernels.dither.uniforms_into`, rows of ``bucket`` values, or of :data:`FUSED_SPAN` under one
    scale, define which values share a hash word: :func:`~gcbench.compressors.kernels.dither.split_point`), then ``u + offset`` is one fused
    ``const + 2**-16 * r`` (exact: ``2**-16 * r`` is exact, so fused and unfused rounding agree),
    then the scaled values ``fl(x * scale)`` are added (two correctly rounded ops, no FMA: see
    :func:`_rowwise`). This chunked eager code is the reference; for large tensors (see
    :mod:`~gcbench.compressors.kernels.core`) one compiled pass computes the same codes (:data:`~gcbench.compressors.kernels.core.dither_codes`).
    """
    n = x.numel()
    device = x.device
    per_bucket = isinstance(scale, torch.Tensor)
    in_c = rounds_in_c(n, bits, bucket if per_bucket else FUSED_SPAN, device)
    if in_c or use_compiled(n, cpu_path("dither", device)):
        return _stochastic_round_fused(x, scale, offset=offset, top=top, bits=bits, generator=generator,
                                       bucket=bucket, shift=shift, in_c=in_c)
    # at most a quarter of the tensor per chunk: the chunk buffers (about 14-18 bytes per value)
    # then stay below the input's own size (encode peaks <= 2x the input)
    step = chunk_size(n, bucket if per_bucket else 1, device, quarter_block(n, 1, MIN_CHUNK, CHUNK))
    first = min(step, n)
    key = draw_key(generator, device)
    split = split_point(n, bucket if per_bucket else FUSED_SPAN)
    # the pairs first: a chunk of the first half and its partner chunk S later share one hash per
    # value pair (dither.split_point: S is a multiple of the chunks' alignment); then the rest
    unit = math.lcm(bucket if per_bucket else 1, 8)
    half = max(unit, step // 2 // unit * unit)
    work = torch.empty(first, dtype=torch.float32, device=device)
    partner = torch.empty(min(half, split), dtype=torch.float32, device=device) if split else None
    clamp_codes = bounded and bits <= 8 and top + 1 < 256
    # up to 16 bits the packed bytes are written chunk by chunk (planar: low bytes, then the high
    # bits packed, as pack_bits lays them out); wider codes go through int32 codes and pack_bits
    direct = bits <= 16
    cbuf = None
    if direct:
        out = fresh(packed_nbytes(n, bits), torch.uint8, device)  # the payload's section
        if bits > 8:
            cbuf = torch.empty(first, dtype=torch.int32, device=device)
            hbuf = torch.empty(first, dtype=torch.uint8, device=device) if bits < 16 else None
        elif bits < 8:
            cbuf = torch.empty(first, dtype=torch.uint8, device=device)
    else:
        out = torch.empty(n, dtype=torch.int32, device=device)
    xbuf = torch.empty(first, dtype=torch.float32, device=device) if shift else None
    pbuf = torch.empty(first, dtype=torch.float32, device=device)
    const = torch.tensor(dither_const(offset), dtype=torch.float32, device=device)

    def emit(a: int, b: int, w: torch.Tensor) -> None:
        # the codes of values a..b (a chunk: whole buckets, a multiple of 8) from their uniforms w
        m = b - a
        torch.add(const, w, alpha=2.0**-16, out=w)
        xc = x[a:b]
        if shift:
            xc = torch.sub(xc, shift, out=xbuf[:m])
        _rowwise(w, scale, a // bucket if per_bucket else 0, bucket, "muladd", xc, pbuf)
        if not clamp_codes:
            w.clamp_(0.0, float(top))
        # float -> integer conversion truncates, i.e. floors since w > -1
        if bits == 8 or not direct:
            c = out[a:b]
        else:
            c = cbuf[:m]
        c.copy_(w)
        if clamp_codes and bits < 8:
            c.clamp_(max=top)
        if bits < 8:
            o = a * bits // 8
            pack_small_into(c, bits, out[o : o + packed_nbytes(m, bits)])
        elif bits > 8 and direct:
            _write_planar16(c, bits, out, a, n, hbuf)

    for a in range(0, split, half):
        b = min(split, a + half)
        low, high = work[: b - a], partner[: b - a]
        pair_uniforms_into(low, high, a, key)
        emit(a, b, low)
        emit(split + a, split + b, high)
    for a in range(2 * split, n, step):
        b = min(n, a + step)
        emit(a, b, uniforms_into(work[: b - a], a, key, split))
    if clamp_codes and bits == 8:
        out.clamp_(max=top)  # once for all chunks: one op (one parallel region) instead of one per chunk
    return out if direct else pack_bits(out, bits)


def _write_planar16(c: torch.Tensor, bits: int, out: torch.Tensor, a: int, n: int, hbuf: torch.Tensor | None) -> None:
    """Write the int32 codes ``c`` (``< 2**bits``, ``8 < bits <= 16``) of the chunk starting at value
    ``a`` (a multiple of 8) into ``out``, the planar packing of all ``n`` codes by :func:`~gcbench.compressors.wire.bitpack.pack_bits`:
    their low bytes at ``out[a:]``, their high parts (``bits - 8`` bits each) packed at ``n + a * (bits - 8) / 8``.
    The bytes are read in place from the int32 words (no full-size int32 temporaries)."""
    m = c.numel()
    if _LITTLE_ENDIAN:
        low, high = c.view(torch.uint8)[0::4], c.view(torch.uint8)[1::4]
    else:
        low, high = (c & 0xFF).to(torch.uint8), (c >> 8).to(torch.uint8)
    out[a : a + m].copy_(low)
    hb = bits - 8
    o = n + a * hb // 8
    if hb == 8:
        out[o : o + m].copy_(high)
    else:
        h = hbuf[:m]
        h.copy_(high)
        pack_small_into(h, hb, out[o : o + packed_nbytes(m, hb)])


def rounds_in_c(n: int, bits: int, span: int, device: torch.device) -> bool:
    """Whether the paired values' codes are rounded by the C pass
    (:func:`~gcbench.compressors.kernels.quantize.dither_c`, where
    :func:`~gcbench.compressors.kernels.quantize.quantize_native` says so): codes of 1 to 8 bits in
    whole bytes per row of ``span`` values, or of 16 bits, whose pairs hash in 32 bits. It
    runs in the compiled pass's place (:func:`_stochastic_round_fused`), whatever the per-machine
    choice of that pass: it is the faster of the two on every CPU measured."""
    return bits in C_BITS and span % values_per_group(bits) == 0 and n <= 2 * PAIRS_32 and quantize_native(device)


def cpu_path(path: str, device: torch.device) -> str | None:
    """``path`` (:func:`~gcbench.compressors.kernels.core.use_compiled`'s per-machine choice, whose
    probes run on the CPU) for a CPU tensor; None (the size rule alone) on another device."""
    return path if device.type == "cpu" else None


def _f32(v: float, device: torch.device) -> torch.Tensor:
    """A one-element float32 tensor of ``v`` (rounded as a float32 op rounds a Python scalar)."""
    return torch.tensor([v], dtype=torch.float32, device=device)


def dither_const(offset: float) -> float:
    """``u + offset = r * 2**-16 + (offset + 2**-17)`` for the 16-bit uniform ``r`` of
    :mod:`~gcbench.compressors.kernels.dither` (``u = (r + 0.5) / 65536``): the constant, exact in float32 for
    ``offset < 128`` (as is the sum, whose resolution there is ``2**-17``)."""
    return offset + 2.0**-17


def _stochastic_round_fused(
    x: torch.Tensor, scale: torch.Tensor | float, *, offset: float, top: int, bits: int,
    generator: torch.Generator | None, bucket: int, shift: float, in_c: bool,
) -> torch.Tensor:
    """:func:`stochastic_round` in one compiled pass (same codes: the uniforms are the same hash of
    the same key and indices, :mod:`~gcbench.compressors.kernels.dither`), or the C pass where
    ``in_c`` (:func:`rounds_in_c`).

    The first ``2S`` values (:func:`~gcbench.compressors.kernels.dither.split_point`) run compiled as two halves of rows (a
    bucket each, or :data:`FUSED_SPAN` values under one scale), one hash word serving a value of
    each half; the fewer than ``2 span`` values after them (all of a tensor shorter than two rows)
    run eagerly (:func:`~gcbench.compressors.kernels.core.dither_unpaired`), or in one C call where
    ``in_c`` (:func:`~gcbench.compressors.kernels.quantize.dither_rest_c`).
    Codes of 1, 2 or 4 bits are packed inside the kernel (``8 / bits`` codes per byte) when a row
    holds whole bytes, and so are those of 3, 5, 6 or 7 bits in the C pass; 16-bit codes are written
    as their two byte planes; other widths write uint8 / int32 codes, packed afterwards. No scratch
    beyond the output: the uniforms never exist in memory.
    """
    n, device = x.numel(), x.device
    per_bucket = isinstance(scale, torch.Tensor)
    factors = scale if per_bucket else _f32(scale, device)
    key = draw_key(generator, device)
    # the compiled and eager passes' constants (the C passes take them as float32 arguments)
    const, shift_t = (None, None) if in_c else (_f32(dither_const(offset), device), _f32(shift, device))
    span = bucket if per_bucket else FUSED_SPAN
    split = split_point(n, span)
    planar = bits == 16  # the kernel writes pack_bits's low and high byte planes itself
    per_byte = 8 // bits if bits in (1, 2, 4) and span % (8 // bits) == 0 else 1
    # the kernel writes the packed bytes (the C pass: of every width up to 8 bits)
    packed = planar or per_byte > 1 or bits == 8 or (in_c and bits < 8)
    if packed:
        codes = fresh(packed_nbytes(n, bits), torch.uint8, device)  # the payload's section
    else:
        codes = torch.empty(n, dtype=torch.uint8 if top < 256 else torch.int32, device=device)
    words_c = key_words_int(key) if in_c else None
    if split and in_c:  # one C pass, the same bytes
        dither_c(x.contiguous(), split, span, factors.contiguous(), words_c, dither_const(offset), shift,
                 top, bits, codes, caller_workers())
    elif split:
        rows = split // span
        x0, x1 = x[:split].view(rows, span), x[split : 2 * split].view(rows, span)
        s0, s1 = (factors[:rows], factors[rows : 2 * rows]) if per_bucket else (factors, factors)
        words = kernel_words(key, split)
        if planar:
            low0, low1 = codes[:split].view(rows, span), codes[split : 2 * split].view(rows, span)
            high0, high1 = codes[n : n + split].view(rows, span), codes[n + split : n + 2 * split].view(rows, span)
            places = row_places(span, 1, places_dtype(span, words), device)
            dither_planar16(x0, x1, s0, s1, words, places, const, shift_t, top, low0, low1, high0, high1)
        else:
            nb = split // per_byte
            out0, out1 = codes[:nb].view(rows, -1), codes[nb : 2 * nb].view(rows, -1)
            places = row_places(span // per_byte, per_byte, places_dtype(span, words), device)
            dither_codes(x0.view(rows, -1, per_byte), x1.view(rows, -1, per_byte), s0, s1, words, places, const, shift_t,
                         top, out0, out1)
    if n > 2 * split:  # the unpaired rest: in C, or eagerly (whole rows, then a partial one)
        a = 2 * split
        if in_c:
            rest = dither_rest_c(x.contiguous(), a, span, factors.contiguous(), words_c, dither_const(offset), shift, top,
                                 torch.empty(n - a, dtype=torch.int32, device=device))
        else:
            rest = _unpaired_eager(x, factors, per_bucket, span, key, a, const, shift_t, top)
        if planar:
            codes[a:n] = rest & 0xFF
            codes[n + a :] = rest >> 8
        elif packed:  # a = 2 split: whole rows, whose codes fill whole bytes
            codes[a * bits // 8 :] = pack_bits(rest, bits)
        else:
            codes[a:n] = rest
    if packed:
        return codes
    if bits < 8:
        out = fresh(packed_nbytes(n, bits), torch.uint8, device)  # the payload's section
        pack_small_into(codes, bits, out)
        return out
    return pack_bits(codes, bits)


def _unpaired_eager(
    x: torch.Tensor, factors: torch.Tensor, per_bucket: bool, span: int, key: torch.Tensor, a: int, const: torch.Tensor,
    shift: torch.Tensor, top: int,
) -> torch.Tensor:
    """The int32 codes of ``x[a:]`` (the values after the pairs, ``a`` whole rows of ``span``) by
    :func:`~gcbench.compressors.kernels.core.dither_unpaired`: whole rows, then a partial one."""
    n = x.numel()
    full = (n - a) // span
    parts = []
    if full:
        rs = factors[a // span : a // span + full] if per_bucket else factors
        parts.append(dither_unpaired(x[a : a + full * span].view(full, span), rs, key, a, const, shift, top))
    if (n - a) % span:
        b = a + full * span
        rs = factors[b // span : b // span + 1] if per_bucket else factors
        parts.append(dither_unpaired(x[b:].view(1, -1), rs, key, b, const, shift, top))
    return torch.cat([p.reshape(-1) for p in parts]) if len(parts) > 1 else parts[0].reshape(-1)


def _byte_codes(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """The ``n`` codes of ``pack_bits(codes, bits)`` (``bits <= 8``) one to a byte, for the decode:
    the packed bytes themselves at 8 bits; below, one C pass where C kernels run
    (:func:`~gcbench.compressors.kernels.dequantize.unpack_bits_c`, after the padding check
    :func:`~gcbench.compressors.wire.bitpack.unpack_bits` makes), else ``unpack_bits``."""
    if bits == 8:
        return packed
    if packed.is_contiguous() and unpack_native(packed.device):
        check_padding(packed, bits, n)
        out = torch.empty(n, dtype=torch.uint8, device=packed.device)
        unpack_bits_c(packed, bits, n, out, caller_workers())
        return out
    return unpack_bits(packed, bits, n, torch.uint8)


def decode_packed(
    packed: torch.Tensor,
    *,
    numel: int,
    bits: int,
    top: int,
    offset: float,
    factor: torch.Tensor | float,
    bucket: int = 0,
    base: float = 0.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Float32 ``(codes - offset) * factor + base`` from ``pack_bits(codes, bits)``, in chunks,
    written into ``out`` (a flat contiguous float32 tensor of ``numel`` values: the caller's
    buffer, :meth:`.base.Codec.decode`'s ``out``) or a new tensor; returns it.

    ``factor`` is one float or one float32 per bucket of ``bucket`` values.

    Fast path for ``bits <= 8`` with an integer ``offset`` and codes within ``offset +- 127`` (QSGD):
    the subtraction runs on the uint8 codes (wrapping to the int8 value ``code - offset``), then one
    int8-to-float conversion and one multiplication: the same values as the generic ``copy, sub,
    mul`` (``code - offset`` is exact either way). A 256-entry table with one ``index_select`` per
    value is slower than ``copy, mul, add`` on CPU, so a single factor (ZipML) takes the generic
    path.

    Raises:
        CorruptPayloadError: wrong packed length, non-zero padding bits, or a code above ``top``.
    """
    n = numel
    device = packed.device
    if packed.numel() != packed_nbytes(n, bits):
        raise CorruptPayloadError(f"{packed.numel()} packed bytes for {n} codes of {bits} bits")
    per_bucket = isinstance(factor, torch.Tensor)
    if out is None:
        out = fresh(n, torch.float32, device)
    if (bits <= 8 or bits == 16) and dequantize_native(device):
        # one C pass over the one-byte codes or the two byte planes, on the caller's threads (the same
        # bits, on every x86 ISA)
        factors = factor.to(torch.float32).contiguous() if per_bucket else _f32(factor, device)
        span = bucket if per_bucket else FUSED_SPAN
        if bits == 16:
            peak = dequantize_u16_c(packed[:n], packed[n:], factors, span, offset, base, out, caller_workers())
        else:
            codes = _byte_codes(packed, bits, n).contiguous()
            peak = dequantize_u8_c(codes, factors, span, offset, base, out, caller_workers())
        if top < (1 << bits) - 1 and peak > top:
            raise CorruptPayloadError(f"code {peak} exceeds the largest valid code {top}")
        return out
    if use_compiled(n, cpu_path("dequantize", device)):
        kernel = dequantize
        if bits == 16:  # the planar bytes read in the kernel's pass (pack_bits's layout)
            codes, kernel = (packed[:n], packed[n:]), dequantize16
        elif bits > 8:
            codes = (unpack_bits(packed, bits, n, torch.int32),)
        else:
            codes = (_byte_codes(packed, bits, n),)
        # one factor (ZipML): rows of FUSED_SPAN sharing it (a stride-0 view), not one row of n, so
        # that the kernel's OpenMP loop over rows spreads the work over threads
        factors, span = (factor, bucket) if per_bucket else (_f32(factor, device).expand(-(-n // FUSED_SPAN)), FUSED_SPAN)
        # the kernel returns the largest code of its rows: the range check reads the codes once, with
        # the decode (out then holds unspecified values on a raise, as decode's contract allows)
        out, peaks = by_rows(kernel, codes, factors, span, _f32(offset, device), _f32(base, device),
                             out_dtype=torch.float32, out=out)
        if top < (1 << bits) - 1 and n:
            peak = max(int(p) for p in peaks)
            if peak > top:
                raise CorruptPayloadError(f"code {peak} exceeds the largest valid code {top}")
        return out
    # 16 bits: each chunk's codes are read from their two byte planes (low + 256 * high, exact in
    # float32) straight into the output, with no full-size int32 codes (unpack_bits: several passes)
    planar = bits == 16
    codes = unpack_bits(packed, bits, n, torch.int32) if bits > 8 and not planar else None
    step = chunk_size(n, bucket if per_bucket else 1, device, DECODE_CHUNK)
    first = min(step, n)
    check = top < (1 << bits) - 1
    dbuf = None
    if bits <= 8 and offset == int(offset) and 0 < offset <= 127 and top - offset <= 127 and not base:
        dbuf = torch.empty(first, dtype=torch.uint8, device=device)
    for a in range(0, n, step):
        b = min(n, a + step)
        m = b - a
        o = out[a:b]
        if planar:
            o.copy_(packed[n + a : n + b])
            o.mul_(256.0)
            o.add_(packed[a:b])
            if check and float(o.max()) > top:
                raise CorruptPayloadError(f"code {int(o.max())} exceeds the largest valid code {top}")
            if offset:
                o.sub_(offset)
            _rowwise(o, factor, a // bucket if per_bucket else 0, bucket, "mul")
            if base:
                o.add_(base)
            continue
        if codes is not None:
            c = codes[a:b]
        elif bits == 8:
            c = packed[a:b]
        else:
            o = a * bits // 8
            c = _byte_codes(packed[o : o + packed_nbytes(m, bits)], bits, m)
        if check and int(c.max()) > top:
            raise CorruptPayloadError(f"code {int(c.max())} exceeds the largest valid code {top}")
        o = out[a:b]
        if dbuf is not None:
            # code - offset in [-127, 127]: uint8 arithmetic wraps to its int8 bit pattern
            o.copy_(torch.sub(c, int(offset), out=dbuf[:m]).view(torch.int8))
        else:
            o.copy_(c)
            if offset:
                o.sub_(offset)
        _rowwise(o, factor, a // bucket if per_bucket else 0, bucket, "mul")
        if base:
            o.add_(base)
    return out


def round_down_nonneg_f32(v: torch.Tensor) -> torch.Tensor:
    """Non-negative float64 ``v`` (at most the float32 maximum) as float32, rounded towards -inf
    (so ``result <= v``); equals ``-round_up_f32(-v)``.

    Branch-free in four ops: where round-to-nearest went up, the float32 bit pattern is decremented,
    which for a positive float is ``nextafter(r, -inf)`` (a zero never rounds up).
    """
    r = v.to(torch.float32)
    high = r.to(torch.float64) > v
    bits = r.view(torch.int32)
    bits -= high.view(torch.uint8)  # uint8 0/1 promoted to int32
    return r


def round_up_f32(v: torch.Tensor) -> torch.Tensor:
    """float64 ``v`` as float32, rounded towards +inf (so ``result >= v``)."""
    r = v.to(torch.float32)
    low = r.to(torch.float64) < v
    if bool(low.any()):
        r = torch.where(low, torch.nextafter(r, torch.full_like(r, math.inf)), r)
    return r


# --------------------------------------------------------------------------------------------------
# the probes of kernels.choice: eager or compiled, whichever is faster on this machine
# --------------------------------------------------------------------------------------------------

#: QSGD's levels in the ``"dither"`` probe: s = 2047, codes of ``bits_for_levels(2 s + 1) = 12`` bits,
#: a width the C pass does not round (:data:`~gcbench.compressors.kernels.quantize.BITS`).
PROBE_LEVELS = 2047


def _probe_inputs() -> dict[str, torch.Tensor]:
    """The probes' fixed input (:func:`~gcbench.compressors.kernels.choice.probe_input`):
    :data:`~gcbench.compressors.kernels.choice.PROBE_NUMEL` normal values (seed 0), their max-abs
    norms per bucket of 128, QSGD's 8-bit codes of them and their decode factors."""
    return choice.probe_input("rounding", _build_probe_inputs)


def _build_probe_inputs(n: int) -> dict[str, torch.Tensor]:
    d, s = 128, 127
    x = torch.randn(n, generator=torch.Generator().manual_seed(0))
    norms = x.view(-1, d).abs().amax(dim=1)
    scale = (s / norms.to(torch.float64)).to(torch.float32)
    packed = stochastic_round(x, scale, offset=127.0, top=254, bits=8, generator=torch.Generator().manual_seed(1),
                              bucket=d, bounded=True)
    return {"x": x, "norms": norms, "factor": round_down_nonneg_f32(norms.to(torch.float64) / s),
            "out": torch.empty(n), "packed": packed}


def _probe_dither(mode: str) -> torch.Tensor:
    """QSGD's bucket scales and stochastic rounding of the probe input at s = :data:`PROBE_LEVELS`
    (12-bit codes, held as int32 before they are packed), as QSGD's encode runs them in ``mode``.

    This is the code the ``"dither"`` choice governs: it is consulted only where the C pass does not
    round (:func:`rounds_in_c`), i.e. for QSGD's bucket scales (every QSGD encode of a large CPU
    tensor in ``auto`` mode) and for the rounding
    of widths outside :data:`~gcbench.compressors.kernels.quantize.BITS` (9 to 15 bits), of rows
    that do not hold whole bytes of codes, of tensors over ``2 * PAIRS_32`` values, and of every
    width where the C kernels do not build. A C width (1 to 8 or 16 bits) would time the C pass in
    compiled mode (eager mode runs no C kernels), not the compiled pass the choice decides on."""
    p = _probe_inputs()
    x, s = p["x"], PROBE_LEVELS
    if use_compiled(x.numel(), cpu_path("dither", x.device)):
        scale = bucket_scale(p["norms"], torch.tensor([float(s)], dtype=torch.float64))
    else:
        scale = (s / p["norms"].to(torch.float64)).to(torch.float32)
    return stochastic_round(x, scale, offset=float(s), top=2 * s, bits=bits_for_levels(2 * s + 1),
                            generator=torch.Generator().manual_seed(1), bucket=128, bounded=True)


def _probe_dequantize(mode: str) -> None:
    """One decode of the probe's 8-bit codes into a ready buffer."""
    p = _probe_inputs()
    decode_packed(p["packed"], numel=p["x"].numel(), bits=8, top=254, offset=127.0, factor=p["factor"], bucket=128,
                  out=p["out"])


choice.register("dither", _probe_dither)
choice.register("dequantize", _probe_dequantize)
