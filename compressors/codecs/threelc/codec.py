"""3LC: 3-value quantization with sparsity multiplication, quartic encoding, zero-run encoding.

Lim, Andersen, Kaminsky, "3LC: Lightweight and Effective Traffic Compression for Distributed
Machine Learning", SysML 2019 (arXiv:1802.07389), Section 3 ("Design"):

* **3.1 3-value quantization with sparsity multiplication** (lossy). ``M = max|T| * s`` with the
  sparsity multiplier ``s`` in ``[1, 2)``; every value becomes ``round(T / M)`` in ``{-1, 0, 1}``;
  decoding is ``M * trit``. A larger ``s`` maps more values to 0 (more zero-runs, more error).
  The paper accumulates the quantization error (error feedback); in gcbench that is the generic
  :class:`~.error_feedback.ErrorFeedback` wrapper, which the ``"3lc"`` registry entry applies.
  :class:`ThreeLC` itself is the raw, stateless codec.
* **3.2 Quartic encoding** (lossless). Shift the trits to ``{0, 1, 2}``, take 5 *consecutive*
  values ``p0..p4`` and write one byte ``81 p0 + 27 p1 + 9 p2 + 3 p3 + p4`` (0..242;
  ``log2(3^5) = 7.92 < 8``). Five zeros give ``121``.
* **3.3 Zero-run encoding** (lossless). The byte values 243..255 are unused by quartic encoding: a
  run of ``k`` (2..14) consecutive ``121`` bytes becomes the single byte ``243 + k - 2``
  (:mod:`~gcbench.compressors.codecs.threelc.zero_run`).

Choices the paper leaves open (documented, tested):

* Rounding ties: ``trit = +1 if x > M/2, -1 if x < -M/2, else 0``, i.e. ``round(x / M)`` with
  ties (``|x| == M/2`` exactly) going to 0, evaluated without a division (exact).
* Padding: the trit stream is padded to a multiple of 5 with *quantized zeros* (shifted value 1),
  so a trailing all-zero group is 121 and can join a zero-run. The decoder strips the padding
  using ``n`` from the payload header and rejects a last byte whose padding digits are not 1.
* Zero-runs longer than 14 are split greedily and only that canonical stream decodes (see
  :mod:`~gcbench.compressors.codecs.threelc.zero_run`).
* ``M`` travels as float32 (float64 for float64 inputs), clamped to the input dtype's largest
  finite value so that ``max|x| * s`` can never overflow to Inf (``M >= max|x|`` still holds, so
  the trits stay in ``{-1, 0, 1}``).

Wire sections: ``(M, data)`` with ``M`` one float and ``data`` uint8 (zero-run encoded quartic
bytes, or the plain quartic bytes when ``zero_run=False``).

Hot paths are vectorised torch (the same code on CPU and CUDA), no Python loop over elements:
eager quantization is two comparisons written into a uint8 buffer (no division, no float
temporary) and quartic packing a uint8 Horner scheme over the 5 columns; compiled, one pass
(:mod:`~gcbench.compressors.kernels.threelc`), with error feedback the residual and trits in one pass and their bytes in
a second. Decoding (straight into ``decode(out=)``'s buffer: ``decodes_into``) parses the
zero-run stream (:func:`~gcbench.compressors.codecs.threelc.zero_run.parse_zero_run`; on the CPU
expanded and checked in one pass of C, :func:`~gcbench.compressors.codecs.threelc.zero_run.expand_checked`),
then either writes only the non-zero groups into a zeroed output (sparse streams, eager) or expands
the quartic stream and maps each byte to its five decoded floats with one table lookup (a 256 x 5
table of ``M * trit``). On the CPU below the compile threshold (every tensor of a small model) the
stream is checked and decoded into the output in one pass of C instead, with no quartic stream in
between (:func:`~gcbench.compressors.codecs.threelc.zero_run.decode_checked`): a fixed cost of a
few microseconds per call where the tensor operations of the other paths cost about a hundred.
Zero-run encoding runs in C on the CPU too (:mod:`~gcbench.compressors.codecs.threelc.zero_run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from ...base import Codec, Stage
from ...numerics import finite_aminmax, quarter_block, saturating_cast
from ...wire.bitpack import pack_bits
from ...errors import CorruptPayloadError, InvalidParameterError
from ...error_feedback import checked_amax, corrected_scan, eager_block
from ...kernels.core import use_compiled
from ...kernels.threelc import (
    decode_groups,
    feedback_native,
    feedback_pack_c,
    feedback_scan_c,
    feedback_trits,
    pack_shifted,
    pack_trits,
)
from ...parallel.cpu_pool import caller_workers
from ...kernels.workspace import scratch, widens, working_float32
from .zero_run import (
    RUN_BASE,
    ZERO_GROUP,
    decode_checked,
    expand_checked,
    expand_zero_run,
    nonzero_group_positions,
    parse_zero_run,
    zero_run_decode,
    zero_run_encode,
    zero_run_native,
)

MAX_QUARTIC = 242  # 3**5 - 1
GROUP = 5
_POW3 = (81, 27, 9, 3, 1)

__all__ = [
    "ThreeLC",
    "quantize_3value",
    "quartic_encode",
    "quartic_decode",
    "zero_run_encode",
    "zero_run_decode",
    "stage_sizes",
]


# --- 3-value quantization (Section 3.1) -------------------------------------------------------------


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _scale(x: torch.Tensor, sparsity: float, dtype: torch.dtype | None = None) -> float:
    """``M = max|x| * s`` rounded to the wire dtype and clamped to the input dtype's finite range
    (``dtype``, default ``x``'s: a 16-bit input's, where ``x`` is its float32 copy).

    Raises:
        NonFiniteGradientError: ``x`` holds NaN or Inf (the min/max shows it: this scan is the
            codec's finiteness check, see :meth:`ThreeLC.checks_finite`).
    """
    if x.numel() == 0:
        return 0.0
    lo, hi = finite_aminmax(x)
    return _scale_of(max(-lo, hi), sparsity, x.dtype if dtype is None else dtype)


def _scale_of(amax: float, sparsity: float, dtype: torch.dtype) -> float:
    """:func:`_scale` from ``max |x|`` (computed by the caller, e.g. inside a fused pass)."""
    m = amax * sparsity
    m = min(m, float(torch.finfo(dtype).max))
    # round to the dtype M travels in, so that the encoder's thresholds use the decoder's M exactly
    # (cannot overflow: m <= the input dtype's max <= the wire dtype's max); numpy's conversion is the
    # same IEEE round to nearest as torch's, without a tensor per call
    return float(np.float32(m)) if _work_dtype(dtype) == torch.float32 else m


def _shifted_trits(
    x: torch.Tensor, m: float, out: torch.Tensor | None = None, tmp: torch.Tensor | None = None
) -> torch.Tensor:
    """``1 + round(x / m)`` as uint8 in {0, 1, 2} (ties to 0), without a division.

    ``(x > m/2) + (x >= -m/2)`` is 2 above ``m/2``, 1 in ``[-m/2, m/2]``, 0 below ``-m/2``.
    ``out`` (uint8) and ``tmp`` (bool) are optional buffers of ``x.numel()`` elements.
    """
    if out is None:
        out = torch.empty(x.numel(), dtype=torch.uint8, device=x.device)
    if m == 0.0:
        return out.fill_(1)
    h = m * 0.5
    xw = x if x.dtype in (torch.float32, torch.float64) else x.float()
    if xw.device.type == "cpu" and xw.is_contiguous():
        # numpy's comparisons (SIMD; the same IEEE comparisons in the input's dtype): torch's
        # comparison into a bool buffer took 1.35x as long here (25M float32, A/B in one process:
        # 25 against 18.5 ms)
        xn = xw.detach().numpy()
        hn = xn.dtype.type(h)
        on = out.numpy()
        np.greater(xn, hn, out=on.view(np.bool_))
        tn = np.greater_equal(xn, -hn, out=None if tmp is None else tmp.numpy())
        on += tn.view(np.uint8)
        return out
    torch.gt(xw, h, out=out.view(torch.bool))
    out += torch.ge(xw, -h, out=tmp).view(torch.uint8)
    return out


#: CPU block (values, a multiple of 5). Each block costs 9 torch ops, i.e. 9 parallel regions whose
#: threads meet at a barrier; on a loaded machine every region waits for a preempted thread, so the
#: region count decides: one block up to ~42M values is faster under load and only slightly slower
#: when idle.
CPU_BLOCK = 5 * 2**23
#: Smallest CPU block (a block is also at most a quarter of the tensor).
_MIN_BLOCK = 5 * 2**16
#: Groups per block of :func:`_gather_groups` (a block's int32 indices: 4 MiB).
_GATHER_BLOCK = 1 << 20


def _quantize_quartic(x: torch.Tensor, m: float) -> torch.Tensor:
    """Quantize ``x`` with scale ``m`` and quartic-pack it: ``ceil(n / 5)`` bytes, padded with zeros.

    On CPU the work runs over blocks of a quarter of the tensor (a multiple of 5), at least
    ``_MIN_BLOCK`` (5 * 2^16) and at most ``CPU_BLOCK`` (5 * 2^23) values: a loop over a few blocks,
    not over elements; on CUDA the whole tensor is one block.
    """
    n = x.numel()
    full = n // GROUP
    if m != 0.0 and full and use_compiled(n) and x.dtype in (torch.float32, torch.float16, torch.bfloat16):
        # one compiled pass over the whole groups (the same float32 comparisons as _shifted_trits);
        # the last, partial group in eager; float64 input stays eager (no second compilation)
        h = torch.tensor([m * 0.5], dtype=torch.float32, device=x.device)
        packed = pack_trits(x[: full * GROUP], h, -h)
        if n % GROUP == 0:
            return packed
        out = torch.empty(full + 1, dtype=torch.uint8, device=x.device)
        out[:full] = packed
        _pack_tail(x[full * GROUP :], m, out[full:])
        return out
    out = torch.empty(_pad_len(n) // GROUP, dtype=torch.uint8, device=x.device)
    if m == 0.0:
        return out.fill_(ZERO_GROUP)
    # a multiple of 5 either way; on CPU at most about a quarter of the tensor, so that the block's
    # buffers (2 bytes per value) stay well below the input's size (peaks <= 2x the input)
    block = quarter_block(n, GROUP, _MIN_BLOCK, CPU_BLOCK) if x.device.type == "cpu" else _pad_len(n)
    q = torch.empty(min(block, _pad_len(n)), dtype=torch.uint8, device=x.device)
    tmp = torch.empty(min(block, n), dtype=torch.bool, device=x.device)
    for i in range(0, n, block):
        xb = x[i : i + block]
        k = xb.numel()
        kp = _pad_len(k)
        qb = q[:kp]
        qb[k:] = 1  # padding: quantized zeros
        _shifted_trits(xb, m, out=qb[:k], tmp=tmp[:k])
        _quartic_pack(qb, out=out[i // GROUP : i // GROUP + kp // GROUP])
    return out


def _pack_tail(x: torch.Tensor, m: float, out: torch.Tensor) -> None:
    """The quartic byte of the last, partial group ``x`` (fewer than 5 values) into ``out`` (1 byte)."""
    q = torch.ones(GROUP, dtype=torch.uint8, device=x.device)  # padding: quantized zeros
    _shifted_trits(x, m, out=q[: x.numel()])
    _quartic_pack(q, out=out)


def quantize_3value(x: torch.Tensor, sparsity: float = 1.0) -> tuple[torch.Tensor, float]:
    """3LC's 3-value quantization with sparsity multiplication (paper Section 3.1).

    Args:
        x: a floating tensor (any shape; it is flattened).
        sparsity: the multiplier ``s`` in ``[1, 2)``; larger gives more zeros.

    Returns:
        ``(trits, M)``: a flat int8 tensor in {-1, 0, 1} with ``trits = round(x / M)`` (ties at
        exactly ``|x| = M/2`` go to 0) and the scale ``M = max|x| * s`` as a Python float (already
        rounded to float32, or float64 for float64 input). ``M * trits`` is the decoded tensor.
    """
    if not 1.0 <= sparsity < 2.0:
        raise InvalidParameterError(f"sparsity must be in [1, 2), got {sparsity}")
    flat = x.detach().reshape(-1)
    m = _scale(flat, sparsity)
    q = _shifted_trits(flat, m)
    return q.view(torch.int8) - 1, m


# --- quartic encoding (Section 3.2) -----------------------------------------------------------------


def _quartic_pack(q: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Pack shifted trits (uint8 in {0,1,2}, length a multiple of 5) into bytes ``81a+27b+9c+3d+e``.

    Five uint8 ops over the strided columns (``add_`` with ``alpha`` fuses the multiply); the sum
    is at most 242, so uint8 never overflows.
    """
    g = q.view(-1, GROUP)
    a = torch.mul(g[:, 0], _POW3[0], out=out)
    for j in range(1, GROUP):  # 4 columns, not elements
        a.add_(g[:, j], alpha=_POW3[j])
    return a


def _gather_groups(data: torch.Tensor, tab: torch.Tensor, numel: int, out: torch.Tensor | None) -> torch.Tensor:
    """The first ``numel`` values of ``tab[data]`` (rows of five decoded values per quartic byte),
    written into ``out`` (a fresh tensor when None) block by block with int32 indices: the same
    values as one ``embedding(data.long(), tab)``, without int64 indices for every byte (8 bytes
    per 5 values: 0.4x a float32 output) or a padded temporary."""
    if out is None:
        out = torch.empty(numel, dtype=tab.dtype, device=data.device)
    full = numel // GROUP
    rows = out[: full * GROUP].view(full, GROUP)
    if full and tab.dtype == torch.float32 and use_compiled(numel):
        decode_groups(data[:full], tab, rows)  # one streaming write of the output
    else:
        step = _GATHER_BLOCK if data.device.type == "cpu" else max(1, full)
        for a in range(0, full, step):
            b = min(full, a + step)
            torch.index_select(tab, 0, data[a:b].to(torch.int32), out=rows[a:b])
    if numel % GROUP:  # the partial last group
        out[full * GROUP :] = tab[int(data[full])][: numel % GROUP]
    return out


def _pad_len(n: int) -> int:
    return (n + GROUP - 1) // GROUP * GROUP


def quartic_encode(trits: torch.Tensor) -> torch.Tensor:
    """Quartic encoding: 5 consecutive trits -> one byte ``81a+27b+9c+3d+e`` of the shifted values.

    Args:
        trits: integer tensor with values in {-1, 0, 1} (flattened).

    Returns:
        uint8 tensor of ``ceil(n / 5)`` bytes in 0..242; the stream is padded with quantized zeros.

    Raises:
        InvalidParameterError: a value outside {-1, 0, 1}, or a non-integer tensor.
    """
    t = trits.reshape(-1)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise InvalidParameterError(f"trits must be an integer tensor, got {t.dtype}")
    n = t.numel()
    if n and (int(t.min()) < -1 or int(t.max()) > 1):
        raise InvalidParameterError("trits must be in {-1, 0, 1}")
    q = torch.ones(_pad_len(n), dtype=torch.uint8, device=t.device)
    q[:n] = (t + 1).to(torch.uint8)
    return _quartic_pack(q)


def _pad_value(n: int) -> int | None:
    """Remainder (mod 3**pad) that the last quartic byte must have: its padding digits are all 1."""
    pad = _pad_len(n) - n
    return (3**pad - 1) // 2 if pad else None


def _check_quartic(data: torch.Tensor, n: int) -> None:
    """Raise CorruptPayloadError unless ``data`` is a quartic stream an encoder writes for ``n`` values."""
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise CorruptPayloadError("quartic data must be a 1-D uint8 tensor")
    groups = _pad_len(n) // GROUP
    if data.numel() != groups:
        raise CorruptPayloadError(f"{data.numel()} quartic bytes for {n} values; expected {groups}")
    if groups == 0:
        return
    if int(data.max()) > MAX_QUARTIC:
        raise CorruptPayloadError(f"quartic byte above {MAX_QUARTIC} (zero-run code in a quartic-only stream?)")
    pv = _pad_value(n)
    pad = _pad_len(n) - n
    if pv is not None and int(data[-1]) % 3**pad != pv:
        raise CorruptPayloadError("the padding trits of the last quartic byte are not quantized zeros")


def _check_stream_values(nonzero: int, m: float, padding_ok: bool) -> None:
    """Raise unless a zero-run stream, checked and expanded, holds what an encoder writes: no non-zero
    group under ``M = 0`` (only an all-zero input has M = 0; its trits and padding are all zeros,
    bytes 121) and quantized zeros in the last group's padding trits."""
    if nonzero and m == 0.0:
        raise CorruptPayloadError("scale M = 0 with non-zero trits")
    if not padding_ok:
        raise CorruptPayloadError("the padding trits of the last quartic byte are not quantized zeros")


#: (256, 5) uint8: row ``a`` = the five shifted trits (0, 1, 2) of byte ``a``, first value first
#: (rows >= 243 unused).
_SHIFTED_DIGITS = torch.stack([(torch.arange(256) // p) % 3 for p in _POW3], dim=1).to(torch.uint8).contiguous()

_DIGIT_TABLES: dict[tuple[str, torch.dtype], torch.Tensor] = {}


def _digit_table(device: torch.device) -> torch.Tensor:
    """(256, 5) float32 table: row ``a`` = the five trits of byte ``a`` (rows >= 243 unused)."""
    key = (str(device), torch.float32)
    tab = _DIGIT_TABLES.get(key)
    if tab is None:
        tab = (_SHIFTED_DIGITS.to(torch.float32) - 1).to(device)
        _DIGIT_TABLES[key] = tab
    return tab


def quartic_decode(data: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`quartic_encode`: ``n`` trits (int8 in {-1, 0, 1}).

    Raises:
        CorruptPayloadError: wrong length, a byte above 242, or padding that is not quantized zeros.
    """
    if n < 0:
        raise CorruptPayloadError(f"negative value count {n}")
    _check_quartic(data, n)
    if n == 0:
        return torch.zeros(0, dtype=torch.int8, device=data.device)
    return F.embedding(data.long(), _digit_table(data.device)).to(torch.int8).reshape(-1)[:n]


# --- per-stage sizes ------------------------------------------------------------------------------


def stage_sizes(x: torch.Tensor, sparsity: float = 1.0) -> dict[str, int]:
    """Bytes of ``x`` after each 3LC stage, all measured on real encoder output.

    Returns:
        ``{"n", "fp32", "2bit", "quartic", "zero_run", "payload"}``: the value count, 4 bytes per
        value, the shifted trits packed 2 bits each with :func:`~gcbench.compressors.wire.bitpack.pack_bits`, the quartic
        stream, the zero-run stream (data bytes only, without the 4-byte scale ``M``), and the
        full serialized payload of :class:`ThreeLC` (header, scale and CRC included).
    """
    flat = x.detach().reshape(-1)
    n = flat.numel()
    if n == 0:
        empty = ThreeLC(sparsity).encode(flat).nbytes
        return {"n": 0, "fp32": 0, "2bit": 0, "quartic": 0, "zero_run": 0, "payload": empty}
    trits, _ = quantize_3value(flat, sparsity)
    two_bit = pack_bits((trits + 1).to(torch.uint8), 2)
    quartic = quartic_encode(trits)
    zr = zero_run_encode(quartic)
    return {
        "n": n,
        "fp32": 4 * n,
        "2bit": int(two_bit.numel()),
        "quartic": int(quartic.numel()),
        "zero_run": int(zr.numel()),
        "payload": ThreeLC(sparsity).encode(flat).nbytes,
    }


# --- the codec --------------------------------------------------------------------------------------


@dataclass(eq=False)
class ThreeLC(Codec):
    """3LC (Lim et al., SysML 2019): 3-value quantization + quartic + zero-run encoding.

    The raw codec is stateless; the paper's error accumulation is the generic
    :class:`~.error_feedback.ErrorFeedback` wrapper (``compressors.get("3lc")`` applies it).

    Args:
        sparsity: the sparsity multiplier ``s`` in ``[1, 2)`` (paper default 1.0).
        zero_run: apply zero-run encoding after quartic encoding (disable to measure the stages).
    """

    sparsity: float = 1.0
    zero_run: bool = True

    codec_id: ClassVar[int] = 43
    decodes_into: ClassVar[bool] = True
    #: :meth:`encode_with_feedback` also runs eager (block by block): error feedback's later encodes
    #: update the residual in place instead of holding the corrected tensor and the decode at once.
    feedback_in_eager: ClassVar[bool] = True
    decodes_finite: ClassVar[bool] = True  # M is checked finite; values are -M, 0, M
    contractive: ClassVar[bool] = True  # |x - M round(x/M)| <= |x| elementwise since M >= max|x|
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("3-value quantization", lossless=False),
        Stage("quartic encoding", lossless=True),
        Stage("zero-run encoding", lossless=True),
    )
    reference: ClassVar[str] = (
        "Lim, Andersen, Kaminsky, 3LC: Lightweight and Effective Traffic Compression for "
        "Distributed Machine Learning, SysML 2019, Section 3"
    )

    def __post_init__(self) -> None:
        number = isinstance(self.sparsity, (int, float)) and not isinstance(self.sparsity, bool)
        self._require(number, "sparsity must be a float")
        self.sparsity = float(self.sparsity)
        self._require(1.0 <= self.sparsity < 2.0, f"sparsity must be in [1, 2), got {self.sparsity}")
        self._require(isinstance(self.zero_run, bool), "zero_run must be a bool")

    def checks_finite(self, x: torch.Tensor) -> bool:
        """True: the scale's min/max (:func:`_scale`) is the finiteness check (one pass fewer)."""
        return True

    def _encode(self, x, *, key, generator):
        dtype = x.dtype
        # a 16-bit input widened (its float32 comparisons are the ones made anyway; M still clamped
        # to the input dtype's range); torch's reductions of 16-bit values run several times slower
        if widens(x):
            x = working_float32(x, "ThreeLC.float32")
        m = _scale(x, self.sparsity, dtype)
        data = _quantize_quartic(x, m)
        if self.zero_run:
            data = zero_run_encode(data)
        scale = torch.tensor([m], dtype=_work_dtype(dtype), device=x.device)
        return (scale, data)

    def encode_with_feedback(
        self, g: torch.Tensor, e: torch.Tensor | None
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor] | None:
        """The paper's error accumulation (Sec. 3.1) fused for :class:`~.error_feedback.ErrorFeedback`:
        ``max |g + e|`` in one read-only compiled pass, then the residual ``c - M * trit`` of
        ``c = g + e`` written over ``e`` and the shifted trits (uint8) in a second
        (:data:`~gcbench.compressors.kernels.threelc.feedback_trits`), their quartic bytes in a third over the trits
        (:data:`~gcbench.compressors.kernels.threelc.pack_shifted`); zero-run encoding as in
        :meth:`_encode`. Same bytes and residual as the generic path; ``g``, ``e``: flat float32.
        None (the generic path) for an all-zero ``c`` (M = 0).

        On the CPU where the C kernels run (:func:`~gcbench.compressors.kernels.threelc.feedback_native`)
        the second and third passes are one C pass (:func:`~gcbench.compressors.kernels.threelc.feedback_pack_c`):
        the same residual and bytes, no trits in memory; below the compile threshold the scan is a C pass
        too (:func:`~gcbench.compressors.kernels.threelc.feedback_scan_c`: the same maximum, the same error).

        Eager (not :func:`~gcbench.compressors.kernels.core.use_compiled`): the same scan block by block, then ``c = g + e``
        formed in ``e``'s buffer (``g`` itself on the first step), :func:`_quantize_quartic` of
        ``c`` (the codec's own eager quantization: the generic path's bytes), zero-run encoding of
        a copy of the quartic bytes, and ``c - decoded`` written over ``c`` (into a new buffer on
        the first step) block by block, ``decoded`` gathered from the quartic bytes with the
        decoder's table (:meth:`_decode`'s values)."""
        n = g.numel()
        dev = g.device
        c_pass = feedback_native(dev) and g.is_contiguous() and (e is None or e.is_contiguous())
        compiled = use_compiled(n)
        # the read-only scan: in C where the feedback pass is C and nothing would run compiled
        amax = checked_amax(feedback_scan_c(g, e)) if c_pass and not compiled else corrected_scan(g, e)
        m = _scale_of(amax, self.sparsity, torch.float32)
        if m == 0.0:
            return None
        if not c_pass and not compiled:
            return self._feedback_eager(g, e, m)
        # the scan passed, nothing fails from here
        mt = torch.tensor([m], dtype=torch.float32, device=dev)
        h = mt * 0.5
        if c_pass:  # the residual (over e) and the quartic bytes in one C pass, no trits in memory
            residual = torch.empty(n, dtype=torch.float32, device=dev) if e is None else e
            groups = _pad_len(n) // GROUP  # zero-run encoding makes the quartic bytes an intermediate
            data = (scratch("threelc.quartic", groups, torch.uint8, dev) if self.zero_run
                    else torch.empty(groups, dtype=torch.uint8, device=dev))
            feedback_pack_c(g, e, m, float(h), residual, data, caller_workers())
            if self.zero_run:
                data = zero_run_encode(data)
            return (mt, data), residual
        # the residual (over e) and the shifted trits of c = g + e in one compiled elementwise
        # pass, then their quartic bytes (a 4x smaller read)
        residual = torch.empty(n, dtype=torch.float32, device=dev) if e is None else e
        trits = torch.empty(_pad_len(n), dtype=torch.uint8, device=dev)
        trits[n:] = 1  # padding: quantized zeros
        feedback_trits(g, e, h, -h, mt, residual, trits[:n])
        data = pack_shifted(trits)
        del trits
        if self.zero_run:
            data = zero_run_encode(data)
        return (mt, data), residual

    def _feedback_eager(
        self, g: torch.Tensor, e: torch.Tensor | None, m: float
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The eager :meth:`encode_with_feedback` after its scan (nothing fails from here)."""
        n = g.numel()
        c = g if e is None else e.add_(g)  # e + g: the generic path's g + e, in place
        quartic = _quantize_quartic(c, m)
        # zero-run encoding first (it leaves the quartic bytes as they are): its index temporaries
        # then never coexist with a new residual buffer or the decode blocks
        data = zero_run_encode(quartic) if self.zero_run else quartic
        mt = torch.tensor([m], dtype=torch.float32, device=g.device)
        tab = _digit_table(g.device) * mt  # the decoder's table: row a = the five values of byte a
        residual = torch.empty_like(c) if e is None else c  # first step: g is the caller's
        block = eager_block(n, GROUP)
        for i in range(0, n, block):  # blocks, not elements
            k = min(block, n - i)
            decoded = _gather_groups(quartic[i // GROUP : (i + k + GROUP - 1) // GROUP], tab, k, None)
            torch.sub(c[i : i + k], decoded, out=residual[i : i + k])
        return (mt, data), residual

    def _decode(self, sections, numel):
        return self._decode_to(sections, numel, None)

    def _decode_into(self, sections: tuple[torch.Tensor, ...], numel: int, out: torch.Tensor) -> None:
        """:meth:`_decode` written straight into ``out`` (float32): zeros and the non-zero groups,
        or the expanded quartic stream gathered into it; no full-size temporary."""
        self._decode_to(sections, numel, out)

    def _decode_to(self, sections: tuple[torch.Tensor, ...], numel: int, out: torch.Tensor | None) -> torch.Tensor:
        """The decoded values in ``out`` (a fresh tensor of the scale's dtype when None)."""
        if len(sections) != 2:
            raise CorruptPayloadError(f"ThreeLC payload has {len(sections)} sections, expected 2")
        scale, data = sections
        if scale.dtype not in (torch.float32, torch.float64) or scale.numel() != 1:
            raise CorruptPayloadError("ThreeLC scale section must hold one float32/float64")
        m = float(scale[0])
        if not (m >= 0.0 and m != float("inf")):
            raise CorruptPayloadError(f"ThreeLC scale {m} is not a finite non-negative number")
        if out is not None and out.dtype != scale.dtype:
            # a float64 scale in a float32 payload (no encoder writes it): the values in float64,
            # then base decode's saturating cast, as without ``out``
            return out.copy_(saturating_cast(self._decode_to(sections, numel, None), out.dtype))
        if self.zero_run and scale.dtype == torch.float32 and not use_compiled(numel) and zero_run_native(data):
            # below the compile threshold on the CPU: expanded, checked and decoded in one C pass
            out, count, padding_ok = decode_checked(data, numel, _SHIFTED_DIGITS, m, out)
            _check_stream_values(count, m, padding_ok)
            return out
        groups = _pad_len(numel) // GROUP
        tab = _digit_table(data.device)
        if scale.dtype == torch.float64:
            tab = tab.to(torch.float64)
        tab = tab * scale.to(tab.dtype)  # row a = the five decoded values of byte a
        if not self.zero_run:
            _check_quartic(data, numel)
            if m == 0.0 and bool((data != ZERO_GROUP).any()):
                raise CorruptPayloadError("scale M = 0 with non-zero trits")
            return _gather_groups(data, tab, numel, out)
        native = zero_run_native(data)  # C: expanded and checked in one pass
        if native:
            quartic, count = expand_checked(data, groups)
        else:
            ends, first, count = parse_zero_run(data, groups)
        pad = _pad_len(numel) - numel
        last = int(data[-1])
        _check_stream_values(count, m, not (pad and last < RUN_BASE and last % 3**pad != _pad_value(numel)))
        if count * 4 > groups or (use_compiled(numel) and tab.dtype == torch.float32):
            # dense (or compiled: one pass writing every value): expand to the quartic stream and
            # decode it with one gather (blocks of it)
            if not native:
                quartic = expand_zero_run(ends, first, groups)
                del ends, first  # int64 per byte: freed before the full-size output exists
            return _gather_groups(quartic, tab, numel, out)
        # sparse: zeros, then write the few non-zero groups
        if native:
            rows = nonzero_group_positions(quartic)  # a quartic byte is one group
            values = F.embedding(quartic.gather(0, rows).long(), tab)
            del quartic
        else:
            del first
            nz = nonzero_group_positions(data)
            rows = ends.gather(0, nz).sub_(1)  # a non-zero group's byte expands to itself alone
            del ends
            values = F.embedding(data.gather(0, nz).long(), tab)
        out = torch.zeros(numel, dtype=tab.dtype, device=data.device) if out is None else out.zero_()
        full = numel // GROUP
        if pad and count and int(rows[-1]) == full:  # the partial last group is a non-zero one
            out[full * GROUP :] = values[-1, : GROUP - pad]
            rows, values = rows[:-1], values[:-1]
        # scatter_ of whole rows: faster than index_copy_ here
        out[: full * GROUP].view(full, GROUP).scatter_(0, rows.unsqueeze(1).expand(-1, GROUP), values)
        return out
