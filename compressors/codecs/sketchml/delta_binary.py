"""Delta-binary encoding of sorted integer keys (a lossless stage of SketchML).

Jiang et al., "SketchML: Accelerating Distributed Machine Learning with Data Sketches", SIGMOD 2018,
Section 3.4 (and Appendix A.3 for the expected size): sorted keys are replaced by the differences of
neighbouring keys ("delta keys"); each delta is written in the least number of bytes that hold it
(1 byte for [0, 255], 2 for [256, 65535], 3 for [65536, 2^24 - 1], 4 for [2^24, 2^32 - 1]) and a
2-bit "byte flag" per key records that count minus one (00 = one byte, 01 = two bytes, ...).

Wire layout of :func:`delta_binary_encode`'s output (one uint8 tensor)::

    ceil(n / 4) bytes   the 2-bit flags, 4 per byte, least-significant bits first (bitpack order)
    sum(widths) bytes   each delta's low bytes, little-endian, in key order
    8 * e bytes         the e escaped deltas (int64, little-endian), in key order

Escape (our addition; the paper and its code assume 32-bit keys): a delta >= 2^32 is written as a
4-byte delta of value 0 and its true value goes to the escape tail. A zero delta never needs four
bytes, so the marker cannot be mistaken for data, and sets without such gaps pay nothing. This keeps
the stage exact for any sorted set of non-negative int64 keys.

``widths="124"`` reproduces the released Java code (``DeltaBinaryEncoder.needBytes``), which writes
1, 2 or 4 bytes and never 3 (flag ``10`` unused); ``"1234"`` is the paper's rule.

Keys may be split into *segments* (SketchML encodes each MinMaxSketch group's keys separately, so a
segment's first delta is taken from 0, as in the Java code's ``prev = 0``).

Everything is vectorised torch: to encode, byte counts, offsets for the deltas wider than one byte
only (a ``cumsum`` over those), their further bytes scattered there and every low byte filled in
order by one ``masked_scatter_``, or a plain cast when every delta fits one byte; to decode, the
inverse placement (the first bytes by one ``masked_select``, the further bytes gathered for the
wide deltas only) and a ``cumsum`` per segment. Large inputs are coded segment by segment, on the
caller's threads (small ones as one array: :data:`WHOLE_ARRAY_MAX`). Inputs with escapes take a slower
path. Where the C kernels build (not in eager mode), decoding is one pass in C
(:func:`~gcbench.compressors.kernels.sketchml.delta_decode_c`: the same keys; the 2.5M keys of a
25M-value SketchML message at 10% density in 3.8-4.5 ms on one thread against 17.9 ms for the torch
code on two), and a stream that pass does not decode alone (escapes, or bytes no encoder writes)
goes on to the torch code, which decodes it or raises its error.
"""

from __future__ import annotations

import torch

from ...kernels.native import use_native
from ...kernels.sketchml import DELTA_BINARY_C, delta_decode_c
from ...wire.bitpack import pack_bits, packed_nbytes, unpack_bits
from ...parallel.cpu_pool import caller_workers, map_blocks
from ...errors import CorruptPayloadError, InvalidParameterError
from ...parallel.threads import single_thread

#: Deltas at or above this limit are escaped (they do not fit the 4-byte maximum).
ESCAPE_LIMIT = 1 << 32
WIDTH_MODES = ("1234", "124")
_THRESHOLDS = (1 << 8, 1 << 16, 1 << 24)
#: Up to this many keys are coded as one array whatever their segments (each segment's deltas from 0,
#: the same bytes): segment by segment, a small message pays each pass's fixed cost once per segment
#: (SketchML's 8 groups: 8 x ~20 small torch ops a way, and a thread hand-off each on 2 threads).
#: Measured with 8 segments on one thread, 8,700 keys: encode 1.06 -> 0.23 ms, decode 1.34 -> 0.33 ms.
#: One array stays faster up to ~256K keys, but its int64 deltas for every key raise the SketchML
#: encoder's peak (260K pairs: 2.3x the COO bytes against 1.65x by segment), so the cut is where the
#: encoder's grouping cuts its sorts on the CPU (64K keys: at most 512 KiB of deltas).
WHOLE_ARRAY_MAX = 1 << 16


def delta_nbytes(deltas: torch.Tensor, widths: str = "1234") -> torch.Tensor:
    """Bytes (1..4) each non-negative delta is written in; escaped deltas (>= 2^32) count 4.

    Args:
        deltas: int64 tensor of non-negative deltas.
        widths: ``"1234"`` (paper) or ``"124"`` (released code: 3 is rounded up to 4).

    Returns:
        uint8 byte counts.
    """
    nb = (deltas >= _THRESHOLDS[0]).to(torch.uint8)
    for t in _THRESHOLDS[1:]:
        nb += deltas >= t
    nb += 1
    if widths == "124":
        nb += nb == 3
    return nb


def _check_widths(widths: str) -> None:
    if widths not in WIDTH_MODES:
        raise InvalidParameterError(f"widths must be one of {WIDTH_MODES}, got {widths!r}")


def _segment_starts(segments: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor:
    """Indexes where a segment starts (its delta is taken from 0); empty segments are skipped."""
    if segments is None:
        return torch.zeros(1 if n else 0, dtype=torch.int64, device=device)
    seg = segments.to(device=device, dtype=torch.int64)
    starts = torch.cumsum(seg, 0) - seg
    return starts[seg > 0]


def delta_binary_encode(
    keys: torch.Tensor, segments: torch.Tensor | None = None, widths: str = "1234", *, workers: int | None = None
) -> torch.Tensor:
    """Encode non-negative int64 keys, ascending within each segment, into one uint8 tensor.

    Args:
        keys: 1-D int64 keys; strictly increasing within a segment is what SketchML sends, but any
            non-decreasing run encodes losslessly.
        segments: optional lengths of consecutive segments (summing to ``len(keys)``); each segment
            is delta-coded from 0. ``None`` = one segment.
        widths: ``"1234"`` (paper) or ``"124"`` (released code).
        workers: threads for the segments (:mod:`~gcbench.compressors.parallel.cpu_pool`; default ``torch.get_num_threads()``).

    Returns:
        The flags, delta bytes and escape tail described in the module docstring.

    Raises:
        InvalidParameterError: negative keys, keys decreasing within a segment, or bad lengths.
    """
    _check_widths(widths)
    if keys.dim() != 1:
        raise InvalidParameterError("keys must be a 1-D tensor")
    k = keys.to(torch.int64)
    n = k.numel()
    dev = k.device
    if segments is not None and int(segments.sum()) != n:
        raise InvalidParameterError(f"segment lengths sum to {int(segments.sum())}, not {n} keys")
    if segments is not None and n > WHOLE_ARRAY_MAX:
        workers = caller_workers(workers)
        with single_thread(dev):  # a few passes per segment (see .threads)
            per = _encode_segments(k, segments, widths, workers)
        if per is not None:
            return per
    d = torch.empty_like(k)
    big = False
    if n:
        torch.sub(k[1:], k[:-1], out=d[1:])
        d[:1] = k[:1]
        starts = _segment_starts(segments, n, dev)
        d[starts] = k[starts]
        lo, hi = torch.aminmax(d)
        if int(lo) < 0:
            raise InvalidParameterError("keys must be non-negative and ascending within each segment")
        big = int(hi) >= ESCAPE_LIMIT
        wide = int(hi) >= _THRESHOLDS[0]
    if not n:
        return pack_bits(d.to(torch.uint8), 2)
    if big:  # escapes: a zero in 4 bytes inline, the delta in the tail
        esc = d >= ESCAPE_LIMIT
        nb = delta_nbytes(d, widths)  # escaped deltas count 4 bytes
        body = _scatter_bytes(d.masked_fill(esc, 0), nb)
        tail = d[esc].contiguous().view(torch.uint8)
    elif not wide:  # every delta fits one byte: the body is the low bytes, the flags are all 00
        return torch.cat([torch.zeros(packed_nbytes(n, 2), dtype=torch.uint8, device=dev), d.to(torch.uint8)])
    else:
        flags, body = _encode_wide(d, widths, int(hi))
        return torch.cat([pack_bits(flags, 2), body])
    return torch.cat([pack_bits(nb - 1, 2), body, tail])


def _encode_segments(k: torch.Tensor, segments: torch.Tensor, widths: str, workers: int) -> torch.Tensor | None:
    """The same bytes as the whole-array path, one segment at a time (None: some delta needs an
    escape, left to the whole-array path).

    The wire format is all flags, then all bodies; a segment's flags and body depend on its own
    deltas only, so per-segment flags and bodies, concatenated, are the whole-array ones. Why: the
    int64 deltas and byte offsets then exist for ``workers`` segments at a time, not for all keys
    (the SketchML encoder's peak memory: its 8 groups are the segments), and the
    segments can be coded on ``workers`` threads at once.
    """
    lengths = segments.tolist()
    if min(lengths, default=0) < 0:
        raise InvalidParameterError("segment lengths must be non-negative")
    starts = [sum(lengths[:i]) for i in range(len(lengths))]

    def one(i: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        c = lengths[i]
        part = k[starts[i] : starts[i] + c]
        d = torch.empty_like(part)
        torch.sub(part[1:], part[:-1], out=d[1:])
        d[:1] = part[:1]
        lo, hi = (int(v) for v in torch.aminmax(d))
        if lo < 0:
            raise InvalidParameterError("keys must be non-negative and ascending within each segment")
        if hi >= ESCAPE_LIMIT:
            return None
        if hi < _THRESHOLDS[0]:
            return torch.zeros(c, dtype=torch.uint8, device=k.device), d.to(torch.uint8)
        return _encode_wide(d, widths, hi)

    # segments are independent: the caller's threads code them at once (.cpu_pool), same bytes
    parts = map_blocks(one, [i for i, c in enumerate(lengths) if c], k.device, workers)
    if any(p is None for p in parts):
        return None
    flags_parts = [p[0] for p in parts]
    body_parts = [p[1] for p in parts]
    return torch.cat([pack_bits(torch.cat(flags_parts), 2), *body_parts])


def _encode_wide(d: torch.Tensor, widths: str, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flags (byte count - 1, uint8) and body of non-negative deltas ``< 2^32`` whose maximum is ``hi``.

    Most deltas of a sparse gradient's keys take one byte (SketchML, Appendix A.3: a group's mean
    gap is ``rD/d``), so only the *wide* ones (``nonzero`` of the flags) get offsets: a wide delta's
    first byte sits at its index plus the extra bytes of the wide deltas before it (a ``cumsum``
    over the wide ones only). Their further bytes are written at those offsets + ``j``; every
    other body byte is a low byte, filled in key order by one ``masked_scatter_`` (measured on a
    312K-delta group, 4% wide, one thread: 1.7 ms vs 3.4 ms for two full-length scatters at
    ``cumsum`` offsets). Compares above ``hi`` are skipped.
    """
    n = d.numel()
    widest = 1 + sum(hi >= t for t in _THRESHOLDS)
    flags = (d >= _THRESHOLDS[0]).to(torch.uint8)
    for t in _THRESHOLDS[1:widest - 1]:
        flags += d >= t
    if widths == "124" and widest >= 3:
        flags += flags == 2  # 3 bytes are written as 4
        widest = 4
    wide = torch.nonzero(flags).squeeze(1)
    extra = flags.index_select(0, wide).to(torch.int64)  # bytes beyond the first
    first = torch.cumsum(extra, 0)
    first -= extra
    first += wide  # body offset of each wide delta's first byte
    total = n + int(extra.sum())
    low = torch.ones(total, dtype=torch.bool, device=d.device)
    out = torch.empty(total, dtype=torch.uint8, device=d.device)
    high = []
    for j in range(1, widest):
        sel = torch.nonzero(extra >= j).squeeze(1)
        pos = first.index_select(0, sel) + j
        low[pos] = False
        high.append((pos, ((d.index_select(0, wide.index_select(0, sel)) >> (8 * j)) & 0xFF).to(torch.uint8)))
    out.masked_scatter_(low, d.to(torch.uint8))  # the low bytes, in key order
    for pos, byte in high:
        out[pos] = byte
    return flags, out


def _scatter_bytes(d: torch.Tensor, nb: torch.Tensor) -> torch.Tensor:
    """The low ``nb[i]`` little-endian bytes of each ``d[i]``, concatenated.

    Every delta writes its first byte at its offset (one pass); bytes 2..4 only for the deltas that
    have them (typically a few percent), so the common 1-byte case costs one scatter.
    """
    n = d.numel()
    nb64 = nb.to(torch.int64)
    off = torch.cumsum(nb64, 0)
    total = int(off[-1]) if n else 0
    off -= nb64
    out = torch.empty(total, dtype=torch.uint8, device=d.device)
    by = d.contiguous().view(torch.uint8).reshape(n, 8)
    out[off] = by[:, 0]
    for b in range(1, 4):
        sel = torch.nonzero(nb > b).squeeze(1)
        if sel.numel():
            out[off[sel] + b] = by[sel, b]
    return out


def delta_binary_decode(
    data: torch.Tensor,
    n: int,
    segments: torch.Tensor | None = None,
    widths: str = "1234",
    *,
    workers: int | None = None,
) -> torch.Tensor:
    """Decode ``n`` keys written by :func:`delta_binary_encode` with the same segments and widths.

    Every byte is accounted for and every delta must be in its canonical (shortest) width, so any
    stream a correct encoder could not write is refused.

    Above :data:`WHOLE_ARRAY_MAX` keys each segment is decoded on its own (on ``workers`` threads,
    :mod:`~gcbench.compressors.parallel.cpu_pool`): its body starts after the earlier segments' bytes
    (``count + sum(flags)`` each); up to it, the deltas of all segments at once (their bodies are
    consecutive). The deltas come from the bytes as :func:`_decode_deltas` says; escapes are filled in key
    order afterwards, then each segment's ``cumsum``.

    Args:
        workers: threads for the segments (default ``torch.get_num_threads()``).

    Returns:
        int64 keys. They are exact; whether they are *strictly* increasing and in range is for the
        caller to check (a hostile stream may hold zero deltas or overflow int64).

    Raises:
        CorruptPayloadError: wrong length, an unused flag, a non-canonical width or a bad escape.
    """
    _check_widths(widths)
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise CorruptPayloadError("delta-binary data must be a 1-D uint8 tensor")
    if n < 0:
        raise CorruptPayloadError(f"negative key count {n}")
    nflag = packed_nbytes(n, 2)
    if data.numel() < nflag + n:  # at least one byte per delta: checked before allocating for n
        raise CorruptPayloadError(f"{data.numel()} bytes cannot hold {n} delta-coded keys")
    dev = data.device
    lengths = [n] if segments is None else segments.tolist()
    lengths_ok = sum(lengths) == n and min(lengths, default=0) >= 0
    if dev.type == "cpu" and n and lengths_ok and use_native(DELTA_BINARY_C):
        out = torch.empty(n, dtype=torch.int64)  # one C pass; what it cannot decode, the code below decides
        if delta_decode_c(data.contiguous(), nflag, lengths, widths == "124", out):
            return out
    flags = unpack_bits(data[:nflag], 2, n, torch.uint8)  # bytes beyond the first, per delta
    if widths == "124" and bool((flags == 2).any()):
        raise CorruptPayloadError("flag 10 (3 bytes) is never written with widths='124'")
    if not lengths_ok:
        raise CorruptPayloadError("segment lengths do not add up to the key count")
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    out = torch.empty(n, dtype=torch.int64, device=dev)
    if n <= WHOLE_ARRAY_MAX:  # every segment's deltas at once, then each segment's cumsum
        extra = int(flags.sum(dtype=torch.int32)) if n else 0
        total = _announced(data, nflag, n + extra)
        marker = _decode_deltas(data[nflag : nflag + total], flags, extra, out, widths)
        big = _escaped(data[nflag + total :], 0 if marker is None else marker.numel())
        if big is not None:
            out.index_copy_(0, marker, big)
        for s, c in zip(starts, lengths):
            if c:
                torch.cumsum(out[s : s + c], 0, out=out[s : s + c])
        return out
    workers = caller_workers(workers)
    with single_thread(dev):
        extras = [  # int32 sums are several times faster than int64 ones and hold 3 c
            int(flags[s : s + c].sum(dtype=torch.int32 if c < 1 << 29 else torch.int64)) if c else 0
            for s, c in zip(starts, lengths)
        ]
        total = _announced(data, nflag, n + sum(extras))
        body_starts = [nflag + sum(lengths[:i]) + sum(extras[:i]) for i in range(len(lengths))]

        def one(i: int) -> torch.Tensor | None:
            s, c = starts[i], lengths[i]
            d = out[s : s + c]
            marker = _decode_deltas(data[body_starts[i] : body_starts[i] + c + extras[i]], flags[s : s + c], extras[i],
                                    d, widths)
            if marker is None:
                torch.cumsum(d, 0, out=d)
            return marker  # escaped: filled from the tail, in key order, below

        used = [i for i, c in enumerate(lengths) if c]
        markers = dict(zip(used, map_blocks(one, used, dev, workers)))
    big = _escaped(data[nflag + total :], sum(m.numel() for m in markers.values() if m is not None))
    if big is not None:
        at = 0
        for i in used:
            m = markers[i]
            if m is not None:
                d = out[starts[i] : starts[i] + lengths[i]]
                d.index_copy_(0, m, big[at : at + m.numel()])
                at += m.numel()
                torch.cumsum(d, 0, out=d)
    return out


def _announced(data: torch.Tensor, nflag: int, total: int) -> int:
    """``total``, the delta bytes the flags announce, once ``data`` holds them after its ``nflag`` flag bytes."""
    if data.numel() < nflag + total:
        raise CorruptPayloadError(f"flags announce {total} delta bytes; {data.numel() - nflag} present")
    return total


def _decode_deltas(body: torch.Tensor, f: torch.Tensor, extra: int, d: torch.Tensor,
                   widths: str) -> torch.Tensor | None:
    """The deltas of consecutive keys (their flags ``f``, ``extra`` = ``sum(f)``) from their ``body`` bytes into
    ``d`` (int64, ``len(f)``), checked for the canonical width; escape markers are left 0 and their
    positions returned (None: no escape).

    The first bytes are the body's bytes less the further bytes of the wide deltas (the few with a
    non-zero flag), whose positions come from a ``cumsum`` over the wide ones only (the encoder's
    placement, inverted); the further bytes are gathered for the wide deltas only, and only theirs are
    checked for the canonical width (a one-byte delta always is)."""
    if not extra:  # every delta takes one byte
        d.copy_(body)
        return None
    dev = d.device
    wide = torch.nonzero(f).squeeze(1)
    extra_t = f.index_select(0, wide).to(torch.int64)
    first = torch.cumsum(extra_t, 0)
    first -= extra_t
    first += wide  # body offset of each wide delta's first byte
    low = torch.ones(body.numel(), dtype=torch.bool, device=dev)
    further = []
    for j in range(1, 4):
        sel = torch.nonzero(extra_t >= j).squeeze(1)
        if not sel.numel():
            break
        pos = first.index_select(0, sel) + j
        low[pos] = False
        further.append((sel, pos))
    # the first bytes, in key order (numpy's boolean index is 2.5x torch's masked_select)
    d.copy_(torch.from_numpy(body.numpy()[low.numpy()]) if dev.type == "cpu" else body[low])
    w = d.index_select(0, wide)
    for j, (sel, pos) in enumerate(further, 1):
        w.index_add_(0, sel, body.index_select(0, pos).to(torch.int64) << (8 * j))
    marker = (extra_t == 3) & (w == 0)
    if not bool(((delta_nbytes(w, widths) == extra_t + 1) | marker).all()):
        raise CorruptPayloadError("a delta is not written in its shortest width")
    d.index_copy_(0, wide, w)
    return wide[marker] if bool(marker.any()) else None


def _escaped(tail: torch.Tensor, markers: int) -> torch.Tensor | None:
    """The escaped deltas (int64, in key order) of the escape ``tail`` that ``markers`` markers announce
    (None: none), once it holds exactly theirs and each is one a correct encoder escapes."""
    if tail.numel() != 8 * markers:
        raise CorruptPayloadError(f"{markers} escape markers need {8 * markers} tail bytes, found {tail.numel()}")
    if not markers:
        return None
    big = tail.clone().view(torch.int64)
    if bool((big < ESCAPE_LIMIT).any()):
        raise CorruptPayloadError("an escaped delta below 2^32 (it would have been written inline)")
    return big
