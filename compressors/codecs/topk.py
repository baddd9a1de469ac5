"""Top-k sparsification: send the ``k`` largest-magnitude coordinates and their indices.

References:

* Aji & Heafield, "Sparse Communication for Distributed Gradient Descent", EMNLP 2017 (gradient
  dropping: keep the largest magnitudes);
* Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory", NeurIPS 2018 (Definition 2.1: top-k is
  a ``k/n``-contraction, ``||x - top_k(x)||^2 <= (1 - k/n) ||x||^2``);
* Lin et al., "Deep Gradient Compression", ICLR 2018 (Sec. 3.1; threshold estimated from a
  sample, Sec. 5, and the released ``dgc/compression.py``): the *sampled* threshold used by
  ``method="sampled"`` and by :class:`~gcbench.compressors.codecs.dgc.DGC`.

Selection (``k = max(1, round(ratio * n))``, clipped to ``n``; Python's ``round``):

* ``method="exact"``: ``torch.topk`` on ``|x|``; exactly ``k`` coordinates. Among equal magnitudes
  the choice is torch's (deterministic for a given input and device).
* ``method="sampled"`` (:func:`sampled_topk_indices`): DGC's estimate. ``s = max(ceil(n / 100),
  ceil(2 n / k))`` magnitudes are drawn uniformly (with replacement) with the codec generator; the
  threshold is the smallest of the sample's top ``ceil(s k / n)``; every ``|x| >= thr`` is a
  candidate. If more than ``k`` candidates pass, the exact top ``k`` *among the candidates* is kept
  (DGC does this above ``1.3 k`` and otherwise truncates by position; refining is cheap and never
  worse). If fewer than ``0.8 k`` pass, the threshold is multiplied by 0.8 and the mask rebuilt, at
  most 10 times (DGC's ``compress_lower_bound`` / ``max_adaptation_iters``). So ``1 <= count <= k``,
  and ``count >= 0.8 k`` unless ten lowerings did not get there (e.g. a tensor with fewer than
  ``0.8 k`` non-zeros). The selected set is always a top set: every unselected magnitude is
  ``<=`` every selected one. Tensors with ``n <= s`` (tiny ones, ``k <= 2``) use the exact path,
  as DGC does. Deviation from DGC: samples are uniform random positions (DGC's
  ``strided_sample=False``), not a strided slice with a random start, and DGC's ``k`` is
  ``ceil(ratio n)`` where gcbench uses ``round``.

Payload: ``[indices, values]``. Indices are sorted ascending, unique, int32 when ``n < 2**31``
else int64; values are ``x[indices]`` in the input's dtype (exact copies, so nothing is lost that
``decode`` would keep: it returns the input dtype anyway; fp16/bf16 inputs pay 2 bytes a value).
``decode`` scatters the values into zeros (``decode(payload, out=buf)``: zeroes ``buf`` and
scatters into it, no fresh full-size tensor). It rejects (``CorruptPayloadError``) indices out of
range, unsorted or repeated indices, non-float or non-finite values, and counts a correct encoder
cannot write (``!= k`` for exact, outside ``1..k`` for sampled).

How the exact selection runs on tensors of 2^17 values or more (the result is ``torch.topk``'s,
checked against it in ``tests/test_topk.py``): a threshold from a strided sample lets about
``1.5 k`` candidates pass one scan of ``|x| >= thr``; their k-th largest magnitude comes from a
histogram of the float bits (:func:`kth_largest`; ``torch.kthvalue`` below 16k candidates); when
exactly ``k`` candidates reach it, no tie crosses the boundary and that set is every top-k
routine's answer, else ``torch.topk`` of the whole ``|x|`` decides. The scan is the one full-size
pass: two C passes on the CPU where C kernels run (:func:`~gcbench.compressors.kernels.sparse.abs_at_least_c`),
compiled (:mod:`~gcbench.compressors.kernels.sparse`, one bit per element) or, eager on the CPU with
one intra-op thread, in cache-sized blocks; each is also the input's finiteness check.

Memory where many magnitudes tie at a threshold (an all-zero tensor, a few distinct values): the
scans count the candidates before forming their int64 positions, and past
:func:`candidate_limit` (``2 k`` plus a sample-stride term) they form none. The exact path then
runs ``torch.topk`` of the full ``|x|`` directly (its own queue is 16 bytes an element: about 5x a
float32 input, the bound of a tie); the sampled one gathers only the candidates' importance and
finds the chosen ranks' positions by a second scan (:func:`_top_by_rescan`). Both select what the
gathered path selects, ties included, so the payload is the same.

The helpers :func:`num_selected`, :func:`index_dtype`, :func:`topk_indices`,
:func:`sampled_topk_indices` (and their ``*_with_values`` forms), :func:`decode_sparse` and
:func:`decode_sparse_into` are shared with :mod:`~gcbench.compressors.codecs.dgc`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np
import torch

from ..base import FLOAT_DTYPES, Codec, Stage, check_ratio, check_seed, expect_sections
from ..numerics import nonzero_positions, quarter_block, raise_if_non_finite, saturating_cast
from ..errors import CorruptPayloadError
from ..kernels.sparse import abs_at_least_c, abs_at_least_capped, compiles_scan, scan_native
from ..parallel.cpu_pool import caller_workers

METHODS = ("exact", "sampled")

#: DGC defaults (``dgc/compression.py``): fraction of the tensor sampled, and the adaptation rule.
SAMPLE_RATIO = 0.01
LOWER_BOUND = 0.8
MAX_ADAPTATION_ITERS = 10


def num_selected(n: int, ratio: float) -> int:
    """``k = max(1, round(ratio * n))`` clipped to ``n`` (0 for an empty tensor)."""
    if n <= 0:
        return 0
    return min(n, max(1, int(round(ratio * n))))


def index_dtype(n: int) -> torch.dtype:
    """Wire dtype of indices into a tensor of ``n`` elements: int32 below ``2**31``, else int64."""
    return torch.int32 if n < 2**31 else torch.int64


#: Deterministic strided sample of the exact path's threshold estimate (values).
_EXACT_SAMPLES = 1 << 16
#: Tensors below this size take the plain ``torch.topk`` path: below twice the sample, the sample's
#: stride is 1 and its ``topk`` alone is the plain path's (the filter took 1.9x the plain path's time
#: at 2^16 values, and broke even at 2^17). So do selections of more than ``1/_FILTER_MAX_FRACTION``
#: of the tensor.
_FILTER_MIN_NUMEL = 2 * _EXACT_SAMPLES
_FILTER_MAX_FRACTION = 8
#: Candidates per selected value the threshold aims at (the sample's top ``margin * k / n``).
_CANDIDATE_MARGIN = 1.5
#: Elements per block of the eager CPU candidate scan (:func:`_abs_at_least_blocks`): its ``|x|``
#: (8 MiB) and mask stay in cache (L3); larger blocks, fewer ops: 2 threads pay a barrier per op.
_SCAN_BLOCK = 1 << 21
_SCAN_MIN_BLOCK = 1 << 16
#: Bits of the histogram that finds the k-th largest candidate (:func:`kth_largest`).
_RADIX_BITS = 16
#: Below this many candidates :func:`kth_largest` is ``torch.kthvalue`` itself: the histogram's 2^16
#: counts cost more than selecting among so few (measured crossover on the CPU: about 16k).
_RADIX_MIN = 1 << 14
#: Candidates gathered as positions and values at most (:func:`candidate_limit`): this many per
#: selected value, plus this many per element of the exact path's sample stride, plus a constant.
_LIMIT_PER_K = 2
_LIMIT_PER_STRIDE = 32
_LIMIT_SLACK = 4096


def candidate_limit(n: int, k: int) -> int:
    """Most candidates a selection of ``k`` of ``n`` gathers as int64 positions and values (about 16
    bytes each, 32 with the selection's temporaries); the threshold estimates aim at ``1.5 k`` and
    ``k`` of them. Above it, ties at the threshold (an all-zero tensor, a few distinct magnitudes)
    take paths that hold no position per candidate: :func:`_select_topk` the plain ``torch.topk``,
    :func:`sampled_topk_with_values` the candidates' importance alone (:func:`_top_by_rescan`).
    The result is the same either way."""
    return min(n, _LIMIT_PER_K * k + _LIMIT_PER_STRIDE * max(1, n // _EXACT_SAMPLES) + _LIMIT_SLACK)


def _magnitude(t: torch.Tensor, absolute: bool) -> torch.Tensor:
    return t.abs() if absolute else t


def nonzero_sorted(mask: torch.Tensor) -> torch.Tensor:
    """``torch.nonzero(mask).reshape(-1)`` (int64, ascending) of a 1-D bool tensor, faster when sparse.

    On the CPU :func:`~gcbench.compressors.numerics.nonzero_positions` (numpy's). Elsewhere
    ``torch.nonzero`` costs about as much per element as a copy; there the mask is first read as
    64-bit words (8 flags each), only the non-zero words are expanded, and the positions inside them
    are found on that much smaller tensor. Same result, in the same (ascending) order.
    """
    if mask.device.type == "cpu":
        return nonzero_positions(mask)
    n = mask.numel()
    main = n - n % 8
    if n < 1 << 16 or mask.storage_offset() % 8:
        return torch.nonzero(mask).reshape(-1)
    words = mask[:main].view(torch.int64)
    w = torch.nonzero(words).reshape(-1)  # ascending word numbers
    if 2 * w.numel() > words.numel():  # dense mask: expanding most words gains nothing
        return torch.nonzero(mask).reshape(-1)
    inner = torch.nonzero(mask[:main].view(-1, 8).index_select(0, w)).t()  # (row, column) pairs, row-major
    idx = w.index_select(0, inner[0]).mul_(8).add_(inner[1])
    if main != n:
        idx = torch.cat([idx, torch.nonzero(mask[main:]).reshape(-1) + main])
    return idx


def _abs_at_least_blocks(
    t: torch.Tensor, threshold: torch.Tensor, limit: int
) -> tuple[torch.Tensor | None, int, bool]:
    """Eager CPU form of :func:`~gcbench.compressors.kernels.sparse.abs_at_least_capped`: ``nonzero(|t|
    >= thr)`` (int64, ascending; None once more than ``limit`` pass), their count, and whether every
    ``t`` is finite, block by block so that ``|t|`` and the mask
    live in two cache-sized scratch buffers: ``t`` is read from memory once, nothing full-size is
    written (a full-size ``t >= thr or t <= -thr`` wrote two fresh bool tensors and read them
    twice: 6.6x ``copy_`` at 25M against 3.7x blocked, one core). The blocks' ``max |t|`` is the
    finiteness check (NaN and Inf show in it), so the contract's separate scan is skipped; it runs
    to the end also past the limit, where the blocks' positions are only counted."""
    n = t.numel()
    block = quarter_block(n, 64, _SCAN_MIN_BLOCK, _SCAN_BLOCK)
    mag = torch.empty(min(n, block), dtype=t.dtype, device=t.device)
    mask = torch.empty(min(n, block), dtype=torch.bool, device=t.device)
    # numpy's comparison into the bool mask, several times torch's (65,536 float32: 4 against 29 us),
    # where numpy has the dtype; the threshold, a value of t's dtype, compares exactly in it
    in_numpy = t.dtype in (torch.float32, torch.float64, torch.float16) and threshold.dtype == t.dtype
    thr = mag.numpy().dtype.type(float(threshold)) if in_numpy else None
    parts: list[torch.Tensor] | None = []
    peaks, count = [], 0
    for a in range(0, n, block):
        m = torch.abs(t[a : a + block], out=mag[: min(block, n - a)])
        peaks.append(m.amax())
        hit = mask[: m.numel()]
        if in_numpy:
            np.greater_equal(m.numpy(), thr, out=hit.numpy())
        else:
            torch.ge(m, threshold, out=hit)
        if parts is None:
            count += _count(hit)
            continue
        parts.append(nonzero_sorted(hit).add_(a))
        count += parts[-1].numel()
        if count > limit:
            parts = None
    finite = bool(torch.isfinite(torch.stack(peaks)).all())
    return (None if parts is None else torch.cat(parts)), count, finite


def _scan_engine(t: torch.Tensor) -> str | None:
    """The whole-tensor scan :func:`_indices_at_least` runs with ``absolute``, each of which reports a
    non-finite ``t`` itself: ``"c"`` (the C passes), ``"compiled"``, ``"blocks"`` (eager, CPU, one
    intra-op thread); None for the full-size comparisons. With several threads each of a block's ~9
    ops ends in a barrier of the thread pool, and on a loaded machine the barriers cost more than the
    cache saves: 25M, 2 threads, load 5.5, eager encode 25-28x ``copy_`` blocked against 13x with the
    three full-size ops; one thread, load 4: 4.6x blocked against 9x."""
    if scan_native(t):
        return "c"
    if compiles_scan(t):
        return "compiled"
    if t.device.type == "cpu" and torch.get_num_threads() == 1:
        return "blocks"
    return None


def _scan_checks_finite(t: torch.Tensor) -> bool:
    """Whether :func:`_indices_at_least` with ``absolute`` reports a non-finite ``t`` itself (:func:`_scan_engine`)."""
    return _scan_engine(t) is not None


def _indices_at_least(
    t: torch.Tensor, threshold: torch.Tensor, absolute: bool, limit: int
) -> tuple[torch.Tensor | None, int, torch.Tensor | None]:
    """int64 indices (ascending) of ``importance >= threshold``, ``importance = |t|`` if ``absolute``,
    and how many there are; None for the indices where more than ``limit`` pass (then no int64
    position is formed for all of them: the memory of a tie at the threshold stays bounded). Third,
    ``t`` at the indices where the scan read them in its pass (the C scan), else None: the caller
    gathers them (:func:`_candidates`).

    With ``absolute``: where C kernels run (contiguous float32 on the CPU), two C passes
    (:func:`~gcbench.compressors.kernels.sparse.abs_at_least_c`); compiled mode (float32), one packed-bit pass
    (:func:`~gcbench.compressors.kernels.sparse.abs_at_least_capped`); eager on the CPU with one thread,
    :func:`_abs_at_least_blocks`; all raise :class:`NonFiniteGradientError` for a non-finite ``t``
    (the codec's input check, :meth:`TopK.checks_finite`). Otherwise ``|t| >= thr`` is evaluated as
    ``t >= thr or t <= -thr`` (the same for every finite ``t`` and any ``thr``): two comparisons,
    never a full-size ``|t|``. All give the same positions (exact comparisons).
    """
    vals = None
    engine = _scan_engine(t) if absolute else None
    if engine is not None:
        if engine == "c":
            idx, count, finite, vals = abs_at_least_c(t.reshape(-1), float(threshold), limit, caller_workers())
        elif engine == "compiled":
            idx, count, finite = abs_at_least_capped(t, threshold, limit)
        else:
            idx, count, finite = _abs_at_least_blocks(t, threshold, limit)
        if not finite:
            raise_if_non_finite(t)
        return idx, count, vals
    if absolute:
        mask = torch.ge(t, threshold)
        mask |= torch.le(t, -threshold)
    else:
        mask = t >= threshold
    count = _count(mask)
    return (nonzero_sorted(mask) if count <= limit else None), count, None


def _candidates(t: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor | None) -> torch.Tensor:
    """``t`` at the candidates ``idx``: the scan's copies where it made them, else one gather."""
    return vals if vals is not None else t.index_select(0, idx)


def _scan_blocks(n: int) -> range:
    """Starts of the blocks of :func:`_candidate_importance` and :func:`_positions_of_ranks`."""
    return range(0, n, quarter_block(n, 64, _SCAN_MIN_BLOCK, _SCAN_BLOCK))


def _candidate_importance(t: torch.Tensor, threshold: torch.Tensor, absolute: bool, count: int) -> torch.Tensor:
    """The importance of the ``count`` elements with ``importance >= threshold``, in position order
    (``importance.index_select(0, idx)`` of :func:`_indices_at_least`'s ``idx``, the same values),
    block by block: the only full-size buffer is the result."""
    n = t.numel()
    starts = _scan_blocks(n)
    out = torch.empty(count, dtype=t.dtype, device=t.device)
    at = 0
    for a in starts:
        imp = _magnitude(t[a : a + starts.step], absolute)
        part = torch.masked_select(imp, imp >= threshold)
        out[at : at + part.numel()] = part
        at += part.numel()
    if at != count:  # the scans disagree: not for a finite t and exact comparisons
        raise AssertionError(f"{at} candidates where the scan counted {count}")
    return out


def _positions_of_ranks(t: torch.Tensor, threshold: torch.Tensor, absolute: bool, ranks: torch.Tensor) -> torch.Tensor:
    """Positions (int64) of the ``ranks``-th (ascending) elements with ``importance >= threshold``
    in position order: ``idx[ranks]`` of :func:`_indices_at_least`'s ``idx``, without forming it
    (one block's positions at a time)."""
    n, dev = t.numel(), t.device
    starts = _scan_blocks(n)
    out = torch.empty_like(ranks)
    seen = done = 0
    for a in starts:
        if done == ranks.numel():
            break
        imp = _magnitude(t[a : a + starts.step], absolute)
        hit = imp >= threshold
        cnt = _count(hit)
        upto = int(torch.searchsorted(ranks, torch.tensor([seen + cnt], dtype=ranks.dtype, device=dev)))
        if upto > done:
            local = nonzero_sorted(hit).index_select(0, ranks[done:upto] - seen)
            out[done:upto] = local.add_(a)
            done = upto
        seen += cnt
    return out


def kth_largest(a: torch.Tensor, k: int, block: int | None = None) -> torch.Tensor:
    """The ``k``-th largest entry of a 1-D ``a`` (``torch.kthvalue(a, len - k + 1).values``).

    For non-negative float32 (magnitudes; the caller says so by the dtype and ``absolute``), their
    bit patterns order like the values, so a radix step finds it: a histogram of the top 16 bits of
    ``bits - min`` (``bincount``) names the bucket holding the k-th largest, and ``kthvalue`` runs on
    that bucket alone (measured 0.12x ``copy_`` against kthvalue's 0.6x on 378k candidates of 25M).

    Fewer than ``_RADIX_MIN`` entries (and no ``block``): ``kthvalue`` on ``a`` itself, faster there
    than a histogram of 2^16 counts, and with no read back to the host.

    ``block``: the histograms are built ``block`` values at a time and the bucket's entry comes from
    a second histogram, of the low bits of the bucket's values, instead of ``kthvalue`` on a copy of
    them: besides ``a``, memory for one block and 2^16 counts (a bucket may hold every value: an
    all-zero ``a``). The same value.
    """
    if block is None and a.numel() < _RADIX_MIN:
        return torch.kthvalue(a, a.numel() - k + 1).values
    b = a.view(torch.int32)
    lo, hi = torch.aminmax(b)
    lo_i, span = int(lo), int(hi) - int(lo)
    shift = max(0, span.bit_length() - _RADIX_BITS)
    if block is not None:
        return _kth_largest_blocks(b, k, lo_i, span, shift, block)
    key = (b - lo_i) >> shift
    hist = torch.bincount(key, minlength=(span >> shift) + 1)
    above = hist.flip(0).cumsum(0)  # above[t]: how many lie in the top t + 1 buckets
    t = int(torch.searchsorted(above, k))  # the first t with above[t] >= k
    need = k - (int(above[t - 1]) if t else 0)  # the need-th largest of that bucket
    inb = a[key == hist.numel() - 1 - t]
    return torch.kthvalue(inb, inb.numel() - need + 1).values


def _kth_largest_blocks(b: torch.Tensor, k: int, lo: int, span: int, shift: int, block: int) -> torch.Tensor:
    """:func:`kth_largest` of the non-negative float32 whose bit patterns are ``b`` (int32), by
    histograms built ``block`` values at a time: the top bits' (as there), then the low ``shift``
    bits' of the chosen bucket, which name the entry's bit pattern."""
    n, dev = b.numel(), b.device

    def ranked(hist: torch.Tensor, k: int) -> tuple[int, int]:
        above = hist.flip(0).cumsum(0)
        t = int(torch.searchsorted(above, k))
        return hist.numel() - 1 - t, k - (int(above[t - 1]) if t else 0)

    hist = torch.zeros((span >> shift) + 1, dtype=torch.int64, device=dev)
    for s in range(0, n, block):
        key = b[s : s + block] - lo
        key >>= shift
        hist += torch.bincount(key, minlength=hist.numel())
    bucket, need = ranked(hist, k)
    low = 0
    if shift:  # the bucket spans 2^shift bit patterns: which of them holds its need-th largest
        lows = torch.zeros(1 << shift, dtype=torch.int64, device=dev)
        for s in range(0, n, block):
            key = b[s : s + block] - lo
            inb = torch.masked_select(key & ((1 << shift) - 1), (key >> shift) == bucket)
            lows += torch.bincount(inb, minlength=lows.numel())
        low, _ = ranked(lows, need)
    return torch.tensor(lo + (bucket << shift) + low, dtype=torch.int32, device=dev).view(torch.float32)


def _top_of_candidates(
    importance_c: torch.Tensor, k: int, magnitudes: bool, block: int | None = None
) -> torch.Tensor | None:
    """Ranks (int64, ascending) of the ``k`` candidates of largest importance, when that set is
    unique, else None.

    ``importance_c``: the candidates' importance in position order; ``magnitudes``: it is ``|t|``
    (non-negative). The k-th largest value ``v`` comes from a selection (linear
    time); when exactly ``k`` candidates are ``>= v`` no tie crosses the boundary, so *every* top-k
    routine (``torch.topk`` included) selects exactly this set, and it is already in ascending
    order. With a tie at the boundary the caller falls back to ``torch.topk``, whose choice among
    the tied values is what the codec has always sent. ``block``: :func:`kth_largest`'s.
    """
    c = importance_c.numel()
    if magnitudes and importance_c.dtype == torch.float32:
        v = kth_largest(importance_c, k, block)
    else:
        v = torch.kthvalue(importance_c, c - k + 1).values
    ge = importance_c >= v
    if _count(ge) != k:
        return None
    return nonzero_positions(ge)


def _count(mask: torch.Tensor) -> int:
    """Number of True in a bool tensor (numpy's count on the CPU)."""
    return int(np.count_nonzero(mask.numpy())) if mask.device.type == "cpu" else int(mask.sum())


def _plain_topk(t: torch.Tensor, k: int, absolute: bool) -> torch.Tensor:
    """``torch.topk`` of the full importance, indices sorted ascending (the reference behaviour)."""
    return torch.sort(torch.topk(_magnitude(t, absolute), k, sorted=False).indices).values


def _importance_of(vals: torch.Tensor, absolute: bool) -> torch.Tensor:
    """The importance of the candidates' values ``vals`` (a new tensor: ``vals`` is sent as it is)."""
    return vals.abs() if absolute else vals


def _with_values(t: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return idx, t.index_select(0, idx)


def _select_topk(t: torch.Tensor, k: int, absolute: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted int64 indices of ``torch.topk(importance, k)``, ``importance = |t|`` if ``absolute``,
    and ``t`` at them.

    Same result as the plain path (``torch.topk`` then ``sort``), faster on large tensors: a
    deterministic strided sample of ``importance`` gives a threshold that about ``1.5 k + 16 n / s``
    values pass (``s`` samples); the k-th largest of those candidates (linear-time selection)
    decides the set. Whenever the shortcut could differ from ``torch.topk`` - fewer than ``k``
    candidates (an unlucky sample), or a tie at the k-th value - the plain path runs instead.
    """
    n = t.numel()
    if n < _FILTER_MIN_NUMEL or k * _FILTER_MAX_FRACTION > n:
        return _with_values(t, _plain_topk(t, k, absolute))
    stride = max(1, n // _EXACT_SAMPLES)
    sample = _magnitude(t[::stride], absolute)
    m = sample.numel()
    q = min(m, math.ceil(_CANDIDATE_MARGIN * m * k / n) + 16)
    threshold = torch.topk(sample, q, sorted=False).values.min()
    del sample
    idx, _, vals = _indices_at_least(t, threshold, absolute, candidate_limit(n, k))
    if idx is not None and idx.numel() >= k:
        vals = _candidates(t, idx, vals)
        sel = _top_of_candidates(_importance_of(vals, absolute), k, absolute)
        if sel is not None:
            return idx.index_select(0, sel), vals.index_select(0, sel)
    del idx, vals  # not held while torch.topk runs
    return _with_values(t, _plain_topk(t, k, absolute))


def topk_with_values(
    importance: torch.Tensor, k: int, *, absolute: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`topk_indices` and ``importance`` at them (one gather of the few candidates, not a
    second gather of the selection)."""
    n = importance.numel()
    if k >= n:
        return torch.arange(n, device=importance.device), importance.clone()
    return _select_topk(importance, k, absolute)


def topk_indices(importance: torch.Tensor, k: int, *, absolute: bool = False) -> torch.Tensor:
    """Indices (int64, sorted ascending) of the ``k`` largest entries of a 1-D ``importance``
    (of ``|importance|`` with ``absolute=True``, without materialising it in full)."""
    return topk_with_values(importance, k, absolute=absolute)[0]


def _num_samples(n: int, k: int, sample_ratio: float) -> int:
    """DGC's sample size: ``sample_ratio`` of the tensor, at least ``2 n / k``."""
    return max(math.ceil(n * sample_ratio), math.ceil(2 * n / k))


def sampled_topk_with_values(
    importance: torch.Tensor,
    k: int,
    generator: torch.Generator | None,
    *,
    sample_ratio: float = SAMPLE_RATIO,
    lower_bound: float = LOWER_BOUND,
    max_iters: int = MAX_ADAPTATION_ITERS,
    absolute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sampled_topk_indices` and ``importance`` at them (the same arguments)."""
    n = importance.numel()
    if k >= n:
        return torch.arange(n, device=importance.device), importance.clone()
    num_samples = _num_samples(n, k, sample_ratio)
    if num_samples >= n:  # tiny tensor: DGC samples everything, i.e. exact selection
        return _select_topk(importance, k, absolute)
    top_samples = math.ceil(num_samples * k / n)
    pos = torch.randint(0, n, (num_samples,), generator=generator, device=importance.device)
    samples = _magnitude(importance.index_select(0, pos), absolute)
    threshold = torch.topk(samples, top_samples, sorted=False).values.min()
    limit = candidate_limit(n, k)
    for it in range(max_iters + 1):
        idx, count, vals = _indices_at_least(importance, threshold, absolute, limit)  # sorted ascending
        if idx is None:  # more than ``limit`` (> k) pass: their importance alone is gathered
            return _top_by_rescan(importance, threshold, absolute, k, count)
        if count > k:
            # Too many candidates: keep the exact top-k among them (DGC's "resample" branch).
            vals = _candidates(importance, idx, vals)
            cand = _importance_of(vals, absolute)
            sel = _top_of_candidates(cand, k, absolute)
            if sel is None:
                sel = torch.sort(torch.topk(cand, k, sorted=False).indices).values
            return idx.index_select(0, sel), vals.index_select(0, sel)
        if count >= lower_bound * k or it == max_iters:
            return idx, _candidates(importance, idx, vals)
        threshold = threshold * lower_bound  # too few: lower the threshold (DGC's adaptation)
    raise AssertionError("unreachable")  # pragma: no cover


def _top_by_rescan(
    t: torch.Tensor, threshold: torch.Tensor, absolute: bool, k: int, count: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled selection's top ``k`` of the ``count`` (> k) elements with ``importance >=
    threshold``, as the gathered path picks them (the unique top set, or ``torch.topk`` of the
    candidates' importance in position order where a tie crosses the k-th value), holding the
    candidates' importance (one value each) and no position per candidate: the ranks of the chosen
    ones are turned into positions by a second scan."""
    cand = _candidate_importance(t, threshold, absolute, count)
    sel = _top_of_candidates(cand, k, absolute, _scan_blocks(count).step)
    if sel is None:
        sel = torch.sort(torch.topk(cand, k, sorted=False).indices).values
    del cand
    return _with_values(t, _positions_of_ranks(t, threshold, absolute, sel))


def sampled_topk_indices(
    importance: torch.Tensor,
    k: int,
    generator: torch.Generator | None,
    *,
    sample_ratio: float = SAMPLE_RATIO,
    lower_bound: float = LOWER_BOUND,
    max_iters: int = MAX_ADAPTATION_ITERS,
    absolute: bool = False,
) -> torch.Tensor:
    """DGC's sampled-threshold top-k (Lin et al., ICLR 2018, Sec. 5; ``DGCCompressor._sparsify``).

    Args:
        importance: 1-D non-negative tensor (``|x|``, or ``|v|`` in DGC); with ``absolute=True``
            a signed tensor whose magnitudes are the importance (never materialised in full).
        k: target count, ``1 <= k``.
        generator: random source for the sample positions (on ``importance.device``).
        sample_ratio: fraction of the tensor sampled (DGC: 0.01, at least ``2 n / k`` samples).
        lower_bound: if fewer than ``lower_bound * k`` pass, the threshold is multiplied by it.
        max_iters: at most this many threshold lowerings.
        absolute: rank by ``|importance|`` (same result as passing ``importance.abs()``).

    Returns:
        int64 indices, sorted ascending, ``1 <= len <= k``; they index a top set of ``importance``.
    """
    return sampled_topk_with_values(
        importance, k, generator, sample_ratio=sample_ratio, lower_bound=lower_bound, max_iters=max_iters,
        absolute=absolute,
    )[0]


def _checked_sparse(
    codec: Codec, sections: tuple[torch.Tensor, ...], numel: int, min_count: int, max_count: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sections' int64 indices and values, once every check of :func:`decode_sparse` passed."""
    name = type(codec).__name__
    if len(sections) != 2:
        expect_sections(codec, sections, [(index_dtype(numel), None), (torch.float32, None)])
    idx, vals = sections
    if idx.dtype != index_dtype(numel):
        raise CorruptPayloadError(f"{name} indices have dtype {idx.dtype}, expected {index_dtype(numel)}")
    if vals.dtype not in FLOAT_DTYPES:
        raise CorruptPayloadError(f"{name} values have dtype {vals.dtype}, expected a float dtype")
    count = idx.numel()
    if vals.numel() != count:
        raise CorruptPayloadError(f"{name} payload has {count} indices but {vals.numel()} values")
    if not min_count <= count <= max_count:
        raise CorruptPayloadError(f"{name} payload holds {count} coordinates; expected {min_count}..{max_count}")
    if count == 0:
        return idx.to(torch.int64), vals
    idx = idx.to(torch.int64)
    # One device sync for every check: sorted strictly ascending => unique; then only the ends
    # need a range check.
    ok = (idx[0] >= 0) & (idx[-1] < numel) & torch.isfinite(vals).all()
    if count > 1:
        ok &= (idx[1:] > idx[:-1]).all()
    if not bool(ok):
        if int(idx.min()) < 0 or int(idx.max()) >= numel:
            raise CorruptPayloadError(f"{name} index out of range [0, {numel})")
        if not bool(torch.isfinite(vals).all()):
            raise CorruptPayloadError(f"{name} payload holds non-finite values")
        raise CorruptPayloadError(f"{name} indices are not strictly ascending (unsorted or repeated)")
    return idx, vals


def decode_sparse(
    codec: Codec,
    sections: tuple[torch.Tensor, ...],
    numel: int,
    *,
    min_count: int,
    max_count: int,
) -> torch.Tensor:
    """Validate ``[indices, values]`` sections and scatter them into a zero tensor of ``numel``.

    Raises:
        CorruptPayloadError: wrong section count/dtypes, a count outside ``[min_count, max_count]``,
            indices out of range, unsorted or repeated, or non-finite values.
    """
    idx, vals = _checked_sparse(codec, sections, numel, min_count, max_count)
    out = torch.zeros(numel, dtype=vals.dtype, device=vals.device)
    out.index_copy_(0, idx, vals)
    return out


def decode_sparse_into(
    codec: Codec,
    sections: tuple[torch.Tensor, ...],
    out: torch.Tensor,
    *,
    min_count: int,
    max_count: int,
) -> None:
    """:func:`decode_sparse` written into the 1-D float32 buffer ``out`` (zeroed, then the values
    scattered: no fresh full-size tensor), the same checks and the same bits: values of another
    float dtype are cast as the fresh path's result is (:func:`.numerics.saturating_cast`)."""
    idx, vals = _checked_sparse(codec, sections, out.numel(), min_count, max_count)
    out.zero_()
    out.index_copy_(0, idx, saturating_cast(vals, out.dtype))


@dataclass(eq=False)
class TopK(Codec):
    """Keep the ``k = round(ratio * n)`` largest-magnitude coordinates (see the module docstring).

    ``stochastic`` describes the default ``method="exact"`` (deterministic, draws nothing) at class
    level; an instance with ``method="sampled"`` (which draws sample positions from the codec
    generator) sets ``stochastic = True`` on itself, so ``codec.stochastic`` is always right.
    """

    ratio: float = 0.01
    method: str = "exact"
    seed: int = 0

    codec_id: ClassVar[int] = 10
    stochastic: ClassVar[bool] = False  # True on instances with method="sampled" (see __post_init__)
    contractive: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    decodes_into_own_dtype: ClassVar[bool] = True
    decodes_finite: ClassVar[bool] = True  # values are checked finite; the rest is zeros
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("top-k selection by magnitude", lossless=False),
        Stage("indices (int32/int64) + values (input dtype)", lossless=True),
    )
    reference: ClassVar[str] = (
        "Aji & Heafield, Sparse Communication for Distributed Gradient Descent, EMNLP 2017; "
        "Stich et al., Sparsified SGD with Memory, NeurIPS 2018; sampled threshold: Lin et al., DGC, ICLR 2018"
    )

    def __post_init__(self) -> None:
        check_ratio(self)
        self._require(self.method in METHODS, f"method must be one of {METHODS}, got {self.method!r}")
        check_seed(self)
        if self.method == "sampled":
            self.stochastic = True  # instance attribute shadowing the ClassVar: this instance draws

    def checks_finite(self, x: torch.Tensor) -> bool:
        """True when the candidate scan runs on the whole input (compiled, or eager blocks on the CPU
        with one thread): it reports finiteness from its own pass, before anything is selected."""
        n = x.numel()
        k = num_selected(n, self.ratio)
        if k >= n or not _scan_checks_finite(x):
            return False
        if self.method == "exact":
            return n >= _FILTER_MIN_NUMEL and k * _FILTER_MAX_FRACTION <= n
        return _num_samples(n, k, SAMPLE_RATIO) < n

    def _encode(self, x: torch.Tensor, *, key: str | None, generator: torch.Generator | None) -> Sequence[torch.Tensor]:
        n = x.numel()
        k = num_selected(n, self.ratio)
        # |x| is taken of the sample and the candidates only (a tie at the k-th value falls back to
        # torch.topk of the full |x|)
        if self.method == "exact":
            idx, vals = topk_with_values(x, k, absolute=True)
        else:
            gen = generator if generator is not None else self.generator(x.device)
            idx, vals = sampled_topk_with_values(x, k, gen, absolute=True)
        return idx.to(index_dtype(n)), vals

    def _decode(self, sections: tuple[torch.Tensor, ...], numel: int) -> torch.Tensor:
        k = num_selected(numel, self.ratio)
        return decode_sparse(self, sections, numel, min_count=k if self.method == "exact" else 1, max_count=k)

    def _decode_into(self, sections: tuple[torch.Tensor, ...], numel: int, out: torch.Tensor) -> None:
        k = num_selected(numel, self.ratio)
        decode_sparse_into(self, sections, out, min_count=k if self.method == "exact" else 1, max_count=k)
