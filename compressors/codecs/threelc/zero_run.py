"""3LC's zero-run encoding (Lim, Andersen, Kaminsky, SysML 2019, Section 3.3), lossless.

The quartic stream (:mod:`~gcbench.compressors.codecs.threelc.codec`, Section 3.2) uses byte values 0..242; 121 is a group of five
quantized zeros. A run of ``k`` (2..14) consecutive 121 bytes becomes the single byte
``243 + k - 2``. Runs longer than 14 are split greedily: 14, 14, ..., then the remainder; a
remainder of 1 stays a plain 121. This greedy output is the *canonical* stream and the decoder
accepts only it: a 121 or a 243..254 byte (both end a run) followed by 121 or by any run byte
243..255 is something the greedy encoder would have merged, and raises
:class:`~.errors.CorruptPayloadError`. Hence ``zero_run_encode(zero_run_decode(b)) == b`` for
every accepted ``b``.

On the CPU both directions are one pass of C (:func:`~gcbench.compressors.kernels.threelc.zero_run_encode_c`,
:func:`~gcbench.compressors.kernels.threelc.zero_run_expand_c`, or with the quartic decode in the same pass
:func:`~gcbench.compressors.kernels.threelc.zero_run_decode_c`; built on first use, :mod:`~gcbench.compressors.kernels.native`)
unless ``GCBENCH_COMPILE=0`` or no C compiler is found. The Python code below is their reference and
runs elsewhere (CUDA, eager mode), vectorised (no Python loop over bytes): the encoder works on the
positions of the bytes other than 121 (:func:`_encode`), the decoder on a per-byte prefix sum of the
expanded lengths (:func:`parse_zero_run`; compiled, one pass: :data:`~gcbench.compressors.kernels.threelc.zero_run_scan`).
The same bytes either way (``tests/test_threelc.py`` compares them); a dense error-feedback stream of
5M quartic bytes (1.5M kept) took 3.5 ms to encode in C against 18-20 ms for the vectorised numpy
code on two threads, and expanding it 1.2 ms against 4.6 ms for the scan, prefix sum and scatter
(25M-float ``copy_``: 7-8 ms).
"""

from __future__ import annotations

import numpy as np
import torch

from ...parallel.cpu_pool import caller_workers, map_blocks
from ...errors import CorruptPayloadError, InvalidParameterError
from ...numerics import nonzero_positions
from ...kernels.core import use_compiled
from ...kernels.native import use_native
from ...parallel.threads import single_thread
from ...kernels.threelc import ZERO_RUN_C, zero_run_decode_c, zero_run_encode_c, zero_run_expand_c, zero_run_scan

ZERO_GROUP = 121  # quartic code of five quantized zeros: 81+27+9+3+1
RUN_BASE = 243  # byte 243 + k - 2 encodes a run of k = 2..14 ZERO_GROUP bytes
MAX_RUN = 14
FULL_RUN = RUN_BASE + MAX_RUN - 2  # 255: a run of 14, the only run byte a longer run continues after
#: Code byte of a run's remainder chunk of r = L % 14 zero groups (r = 0: no such chunk; the
#: entry is the full chunk's code, written only where a kept byte or a full chunk overwrites it).
_REMAINDER_CODE = torch.tensor([FULL_RUN, ZERO_GROUP] + [RUN_BASE + r - 2 for r in range(2, MAX_RUN)], dtype=torch.uint8)
#: Kept (non-121) bytes per chunk of :func:`_encode` on CPU (its index temporaries: at most 1 MiB
#: each). 128K rather than 64K since chunks run on two threads at once: fewer, longer numpy calls
#: hold the GIL less of the time (5M-byte stream, 2.0M kept, two threads: 10.7 ms against 13.0).
RUN_BLOCK = 1 << 17
#: Stream bytes per ``flatnonzero`` of :func:`_encode` on CPU: its int64 positions take at most
#: 8 MiB, times the torch thread count of blocks scanned at once (a dense stream's, whole, would be
#: 1.6 bytes per encoded value: 0.4x a float32 input).
SCAN_BLOCK = 1 << 20

__all__ = ["zero_run_encode", "zero_run_decode", "parse_zero_run", "expand_zero_run", "nonzero_group_positions",
           "zero_run_native", "expand_checked", "decode_checked"]


def zero_run_encode(data: torch.Tensor) -> torch.Tensor:
    """Zero-run encoding: runs of 2..14 bytes equal to 121 -> one byte ``243 + k - 2`` (greedy).

    Runs longer than 14 are cut greedily into chunks of 14 and a remainder; a chunk of 1 stays 121.

    Args:
        data: 1-D uint8 quartic stream (values 0..242).

    Returns:
        The canonical zero-run encoded uint8 stream (``data`` is not modified).
    """
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise InvalidParameterError("zero_run_encode takes a 1-D uint8 tensor")
    return _encode(data)


def _encode(data: torch.Tensor) -> torch.Tensor:
    """Vectorised greedy zero-run encoding (a new tensor; ``data`` is not modified).

    Only the bytes other than 121 ("kept" bytes) are located; everything else is arithmetic on
    their positions. The stream is cut into *segments*: the zero-run before kept byte ``j`` (length
    ``L = p_j - p_{j-1} - 1``, possibly 0) and byte ``j`` itself, plus the trailing run. A run
    becomes ``L // 14`` bytes 255 and, when ``r = L % 14 > 0``, one remainder byte (121 for
    ``r = 1``, else ``243 + r - 2``): the greedy chunks of Section 3.3. Each segment's output
    starts at the exclusive prefix sum of the segment lengths; the output is filled with 255 and
    the remainder codes and kept bytes are written at their offsets (:func:`segments`).

    Segments are independent once the previous kept position is known, so on CPU the kept
    positions (a numpy ``flatnonzero`` per :data:`SCAN_BLOCK` stream bytes) are processed in chunks
    of :data:`RUN_BLOCK` *kept bytes* carrying the last one, with numpy: a chunk's index temporaries
    stay in cache and are reused whatever the stream's density, and numpy's byte comparison,
    ``flatnonzero`` and integer ops ran 3-10x faster than torch's here (its ``scatter_`` writes
    are faster than numpy's: :func:`segments`). Chunks of 64K *stream bytes* (the previous
    layout) made a sparse stream pay ~80 chunks of Python and numpy call overhead for a few kept
    bytes each. 5M quartic bytes of a 25M N(0,1) tensor (199K kept): 0.45-0.76x a 25M-float
    ``copy_`` before, 0.36-0.52x now; an error-feedback stream (1.3M kept of 5M): 1.25-1.65x
    before, 1.04-1.24x now (one core, same process, interleaved, load 3-4). The segment
    arithmetic is what remains (about 5 ns per kept byte). The scans of ``workers`` stream blocks,
    then their chunks, run on the caller's torch threads at once (:func:`~gcbench.compressors.parallel.cpu_pool.map_blocks`: each
    chunk only needs the last kept position before it, known once the blocks are scanned): 5M
    stream bytes with 2.0M kept took 12.1 ms on two threads against 15.7 ms for one chunk after the
    other, 0.2M kept 3.6-4.5 against 4.8-5.2 ms (same machine, same streams, one thread unchanged).
    Elsewhere (CUDA) one chunk, the same code on torch tensors.
    """
    n = data.numel()
    if n == 0:
        return data.clone()
    if data.device.type != "cpu":
        pos = torch.nonzero(data != ZERO_GROUP).reshape(-1)
        return segments(data, pos, -1, n)
    if zero_run_native(data):
        out = zero_run_encode_c(data.contiguous(), _REMAINDER_CODE)
        # a short output is copied out of the input-sized buffer (a payload keeps what it holds alive)
        return out.clone() if 2 * out.numel() < n else out
    src = data.numpy()
    workers = caller_workers()
    blocks = [(lo, min(n, lo + SCAN_BLOCK)) for lo in range(0, n, SCAN_BLOCK)]  # stream blocks, not bytes

    def scan(block: tuple[int, int]) -> np.ndarray:
        kept = np.flatnonzero(src[block[0] : block[1]] != ZERO_GROUP)
        kept += block[0]
        return kept

    pieces = []
    last = -1  # position of the last kept byte so far
    with single_thread(data.device):
        # `workers` stream blocks at a time (their positions in memory at once, not the whole
        # stream's), each phase on the caller's threads (.cpu_pool; numpy and torch release the GIL)
        for w in range(0, len(blocks), workers):
            tasks = []
            for kept in map_blocks(scan, blocks[w : w + workers], data.device, workers):
                for a in range(0, len(kept), RUN_BLOCK):  # chunks of kept positions, not bytes
                    tasks.append((kept[a : a + RUN_BLOCK], last))
                    last = int(kept[min(len(kept), a + RUN_BLOCK) - 1])
            pieces += map_blocks(lambda t: segments(src, t[0], t[1], None), tasks, data.device, workers)
    pieces.append(segments(src, np.empty(0, dtype=np.int64), last, n))  # the trailing run (may be empty)
    return torch.from_numpy(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))


def segments(data, pos, last: int, end: int | None):
    """The zero-run output (uint8) of the segments ending at the kept bytes ``pos`` (int64,
    ascending; the first one's run starts after position ``last``) and, when ``end`` is given, of
    the trailing run up to ``end``. ``data`` and ``pos``: numpy arrays or torch tensors (written
    with operators both accept, so CPU and CUDA run the same arithmetic); int32 arithmetic
    (positions of a stream under 2**31 bytes), in place where it can be (fewer fresh pages)."""
    k = len(pos)
    wide = (end if end is not None else int(pos[-1])) >= 2**31 - 1
    edges = _filled(pos, k + 1 + (end is not None), last, wide)
    edges[1 : k + 1] = pos
    if end is not None:
        edges[-1] = end
    run = edges[1:] - edges[:-1]
    run -= 1  # one run length per segment (0: no run)
    full = run // MAX_RUN
    rem = run
    rem -= full * MAX_RUN
    has = rem + (MAX_RUN - 1)
    has //= MAX_RUN  # 1 where a remainder chunk follows (rem in 0..13)
    seg = full + has  # chunks of each run ...
    seg[:k] += 1  # ... then the kept byte itself
    start = seg.cumsum(0)
    total = int(start[-1])
    out = _filled(data, total, FULL_RUN)
    if total == 0:
        return out
    start -= seg
    # the remainder chunk after the full ones; where r = 0 the index is the kept byte's (written
    # over below) or, for the trailing run, one past the end (moved onto a byte of the same value)
    at = start
    at += full
    if int(at[-1]) >= total:
        at[-1] = total - 1
    # gathers with np.take (9% less time for the whole function than fancy indexing), writes with
    # torch's scatter_ on zero-copy views of the numpy arrays (38 against 63 us per 64K bytes for
    # numpy's fancy-index assignment here); int64 indices (the prefix sum's)
    numpy = isinstance(data, np.ndarray)
    dst = torch.from_numpy(out) if numpy else out
    codes = torch.from_numpy(np.take(_REMAINDER_CODE.numpy(), rem)) if numpy else _REMAINDER_CODE.to(data.device)[rem]
    dst.scatter_(0, torch.from_numpy(at) if numpy else at, codes)
    if k:
        at = at[:k]
        at += has[:k]
        kept = torch.from_numpy(np.take(data, pos)) if numpy else data[pos]
        dst.scatter_(0, torch.from_numpy(at) if numpy else at, kept)
    return out


def _filled(like, size: int, value: int, wide: bool | None = None):
    """A new 1-D array of ``size`` copies of ``value``, numpy or torch (device) as ``like``; of
    ``like``'s dtype, or int32 / int64 (``wide``) when ``wide`` is given."""
    if isinstance(like, np.ndarray):
        dtype = like.dtype if wide is None else (np.int64 if wide else np.int32)
        return np.full(size, value, dtype=dtype)
    dtype = like.dtype if wide is None else (torch.int64 if wide else torch.int32)
    return torch.full((size,), value, dtype=dtype, device=like.device)


#: Class bits of a zero-run stream's byte values (one table lookup instead of several comparisons,
#: which cost 5-20x an arithmetic op over uint8 here): it ends a zero-run (121, a run code 243..254),
#: it continues one (121, any run code), it is a non-zero group (0..242 but 121).
_ENDS, _CONTINUES, _NONZERO = 1, 2, 4
_BYTE_CLASS = torch.tensor(
    [_NONZERO if b < RUN_BASE and b != ZERO_GROUP else _CONTINUES | (_ENDS if b != FULL_RUN else 0) for b in range(256)],
    dtype=torch.uint8,
)
#: The quartic byte a zero-run byte's first group has (a run code: 121; any other byte: itself).
_FIRST_GROUP = torch.tensor([b if b < RUN_BASE else ZERO_GROUP for b in range(256)], dtype=torch.uint8)
#: The quartic bytes a zero-run byte stands for (a run code ``b``: ``b - 241``; any other byte: 1).
_SPAN = torch.tensor([max(b - (RUN_BASE - 2), 1) for b in range(256)], dtype=torch.uint8)


def zero_run_native(data: torch.Tensor) -> bool:
    """Whether the zero-run stream ``data`` is coded by the C kernels here (a CPU tensor, and
    :func:`~gcbench.compressors.kernels.native.use_native`)."""
    return data.device.type == "cpu" and use_native(ZERO_RUN_C)


def expand_checked(data: torch.Tensor, expected_len: int) -> tuple[torch.Tensor, int]:
    """``(quartic, nonzero)``: the zero-run stream ``data`` validated and expanded to its
    ``expected_len`` quartic bytes, and its number of non-zero groups; by the C kernel where
    :func:`zero_run_native`, else :func:`parse_zero_run` then :func:`expand_zero_run`.

    Raises:
        CorruptPayloadError: as :func:`parse_zero_run` (the same checks, the same messages).
    """
    m = _check_length(data, expected_len)
    if m == 0 or not zero_run_native(data):
        ends, first, nonzero = parse_zero_run(data, expected_len)
        return expand_zero_run(ends, first, expected_len), nonzero
    quartic, status, total, nonzero = zero_run_expand_c(data.contiguous(), expected_len, _FIRST_GROUP, _SPAN, _BYTE_CLASS)
    _raise_for(status, total, expected_len)
    return quartic, nonzero


def decode_checked(data: torch.Tensor, numel: int, digits: torch.Tensor, m: float,
                   out: torch.Tensor | None = None) -> tuple[torch.Tensor, int, bool]:
    """``(values, nonzero, padding_ok)``: the zero-run stream ``data`` validated as :func:`expand_checked`
    does for the ``ceil(numel / 5)`` quartic bytes of ``numel`` values, and decoded straight into ``out``
    (flat contiguous float32 of ``numel`` values; a new tensor when None, allocated only once the stream's
    length can stand for them) in one C pass, without the quartic stream in between
    (:func:`~gcbench.compressors.kernels.threelc.zero_run_decode_c`: a shifted trit ``t`` of the quartic
    byte ``b``, ``digits[b]``, decodes to ``(-m, +0, m)[t]``); its number of non-zero groups, and whether
    the padding trits of its last group are quantized zeros. Where :func:`zero_run_native` says yes (the
    caller asks first); ``out`` holds unspecified values when it raises.

    Raises:
        CorruptPayloadError: as :func:`expand_checked` (the same checks, in the same order, the same
            messages).
    """
    expected_len = (numel + 4) // 5
    if _check_length(data, expected_len) == 0:
        raise CorruptPayloadError("decode_checked: an empty stream (no values to decode)")
    if out is None:
        out = torch.empty(numel, dtype=torch.float32)
    elif out.numel() != numel:
        raise InvalidParameterError(f"decode_checked: out holds {out.numel()} values, not {numel}")
    status, total, nonzero = zero_run_decode_c(data.contiguous(), _SPAN, _BYTE_CLASS, digits, m, out)
    _raise_for(status & 3, total, expected_len)
    return out, nonzero, not status & 4


def _check_length(data: torch.Tensor, expected_len: int) -> int:
    """The byte count of ``data``, a 1-D uint8 stream that can expand to ``expected_len`` bytes.

    Raises:
        CorruptPayloadError: not 1-D uint8; a length outside ``[len, 14 len]``.
    """
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise CorruptPayloadError("zero-run data must be a 1-D uint8 tensor")
    m = data.numel()
    if not m <= expected_len <= MAX_RUN * m:
        raise CorruptPayloadError(f"{m} zero-run bytes cannot expand to {expected_len} bytes")
    return m


def _raise_for(status: int, total: int, expected_len: int) -> None:
    """Raise for a C pass's status: 1 not canonical, else 2 a total other than ``expected_len``."""
    if status == 1:
        raise CorruptPayloadError("non-canonical zero-run stream (adjacent runs that the greedy encoder merges)")
    if status != 0:
        raise CorruptPayloadError(f"zero-run stream expands to {total} bytes, expected {expected_len}")


def parse_zero_run(data: torch.Tensor, expected_len: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Validate a zero-run stream that must expand to ``expected_len`` bytes.

    Returns:
        ``(ends, first, nonzero)``: per input byte where its expansion ends in the decoded stream
        (int64, exclusive: the inclusive prefix sum of the expanded lengths, so byte ``i`` starts
        at ``ends[i - 1]``) and the quartic byte of its first group (uint8: 121 for a run code,
        else the byte); and the number of non-zero groups (bytes 0..242 but 121). Compiled (in
        one pass, :data:`~gcbench.compressors.kernels.threelc.zero_run_scan`) or eager (table lookups on int32 indices).

    Raises:
        CorruptPayloadError: not 1-D uint8; a length outside ``[len, 14 len]`` (checked before
            anything is allocated); a non-canonical stream; a total other than ``expected_len``.
    """
    m = _check_length(data, expected_len)
    if m == 0:
        return data.new_zeros(0, dtype=torch.int64), data, 0
    if use_compiled(m):
        ends, first, bad, nonzero = zero_run_scan(data)
        ends.cumsum_(0)  # in place: a fresh int64 result cost 2.7x the sum itself (its pages)
    else:
        d = data.to(torch.int64)  # one conversion: the lookups' indices, then the sums in place
        classes = torch.index_select(_BYTE_CLASS.to(data.device), 0, d)
        # A byte that ends a zero-run (121, or a partial chunk 243..254) followed by 121 or by a
        # run byte: the greedy encoder would have merged them, so no encoder writes this.
        bad = (classes[:-1] & (classes[1:] >> 1) & _ENDS).any()
        nonzero = classes.bitwise_right_shift_(2).sum()  # bit 2: a non-zero group
        first = torch.index_select(_FIRST_GROUP.to(data.device), 0, d)
        # bytes expanded: b - 241 for a run byte b >= 243, else 1 (arithmetic, no comparison)
        ends = d.sub_(RUN_BASE - 2).clamp_(min=1).cumsum_(0)
    if bool(bad):
        raise CorruptPayloadError("non-canonical zero-run stream (adjacent runs that the greedy encoder merges)")
    total = int(ends[-1])
    if total != expected_len:
        raise CorruptPayloadError(f"zero-run stream expands to {total} bytes, expected {expected_len}")
    return ends, first, int(nonzero)


def expand_zero_run(ends: torch.Tensor, first: torch.Tensor, groups: int) -> torch.Tensor:
    """The quartic stream of ``groups`` bytes that a parsed zero-run stream stands for."""
    out = torch.full((groups,), ZERO_GROUP, dtype=torch.uint8, device=first.device)
    if first.numel():
        # every byte lands where the previous one ends; a run byte writes the first 121 of its run
        # (already there)
        out[:1] = first[:1]
        out.scatter_(0, ends[:-1], first[1:])
    return out


def zero_run_decode(data: torch.Tensor, expected_len: int | None = None) -> torch.Tensor:
    """Inverse of :func:`zero_run_encode`.

    Args:
        data: 1-D uint8 zero-run encoded stream.
        expected_len: the exact decoded length, checked before anything of that size is
            allocated. ``None`` accepts any length (at most ``14 len(data)`` by construction).

    Raises:
        CorruptPayloadError: not 1-D uint8, a non-canonical stream, or a decoded length other than
            ``expected_len``.
    """
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise CorruptPayloadError("zero-run data must be a 1-D uint8 tensor")
    if expected_len is None:
        expected_len = int(data.to(torch.int64).sub_(RUN_BASE - 2).clamp_(min=1).sum()) if data.numel() else 0
    return expand_checked(data, expected_len)[0]


def nonzero_group_positions(data: torch.Tensor) -> torch.Tensor:
    """Ascending int64 positions of the bytes of a zero-run stream (or of a quartic stream, one
    without run codes) that are non-zero quartic groups (0..242 but 121): the ones that decode to
    something other than zeros."""
    classes = torch.index_select(_BYTE_CLASS.to(data.device), 0, data.to(torch.int32))
    return nonzero_positions(classes & _NONZERO)
