"""SketchML: quantile-bucket quantification + grouped MinMaxSketch + delta-binary keys.

Jiang, Fu, Yang, Cui, "SketchML: Accelerating Distributed Machine Learning with Data Sketches",
SIGMOD 2018. A sparse gradient of ``d`` key-value pairs is sent as

1. **Quantile-bucket quantification** (Section 3.2, lossy). A quantile sketch (Apache DataSketches,
   as in the paper) gives ``q`` equal-count buckets; a value is replaced by its bucket index and the
   decoder maps an index back to the bucket value, "the average of two splits" (Step 2 (3); the
   proof of Theorem A.2 uses ``(v_b + v_{b+1}) / 2`` too). Positive and negative values get
   separate sketches and buckets ("Solution 1: Separation of Positive/Negative Gradients"), so 0 is
   always a split and no bucket straddles it.
2. **Grouped MinMaxSketch** (Section 3.3, lossy). The buckets are cut into ``r`` groups of
   ``q / r`` consecutive indexes ([0, 32), [32, 64), ... for q = 256, r = 8); each group has its own
   ``s x t`` :mod:`MinMaxSketch <.minmaxsketch>` storing the index's distance to the group's
   zero-side end. Insert keeps the minimum (closest to zero), query returns the maximum over the
   rows, so a decoded value never exceeds its bucket value in magnitude and never changes sign.
3. **Delta-binary keys** (Section 3.4, lossless). Each group's keys (the decoder learns a key's
   group from the list it is in, as in the released code and Appendix A.3's ``rD/d`` gap) are
   :mod:`delta-binary coded <.delta_binary>`.

Decisions where the paper is silent or differs from the released Java code
(github.com/ccchengff/SketchML, ``QuantileQuantizer``/``GroupedMinMaxSketch``/``DeltaBinaryEncoder``):

* *Bucket value.* Paper and code agree: the midpoint of the bucket's two splits (the code's
  ``Quantizer.getValues`` averages neighbouring splits, with the minimum and maximum as outer
  edges). ``bucket_value="mean"`` (the mean of the values in the bucket, clamped to the bucket;
  lower error, same guarantees) is offered as an extension; both presets use ``"midpoint"``.
* *Signs.* The code builds one sketch over all values and aligns group edges with the bucket
  holding zero (``FSketchUtils.calGroupEdges``), so that bucket's midpoint can have the wrong sign
  (the paper's "Case 1"). We follow the paper: one sketch per sign. The paper does not say how the
  ``q`` buckets are shared between the signs; we give each sign a number of whole *groups*
  proportional to its count (at least one group for a sign that occurs), so every bucket holds about
  ``d / q`` values as Theorem A.2's proof assumes and the zero split is a group edge, so every group
  holds one sign (``groups >= 2`` is therefore required).
* *Columns.* Paper: ``t = d / 5`` in total (Appendix B.2, Table 3), i.e. ``t / r`` per group
  (Section 3.5); code: ``ceil(0.3 x group size)`` per group. ``columns`` is that ratio per group:
  ``ceil(columns x n_g)`` (0.2 = the paper's d/5 when groups hold d/r keys each, 0.3 = code).
* *Rows.* Section 4/B.2 state both 2 and 4 as the default; the code's default is 2; both presets use 2.
* *Cells.* Paper: ``ceil(log256 q)`` bytes per cell (Section 3.5); code's size accounting
  (``MinMaxSketch.memoryBytes``): ``log2(group width)`` bits, bit-packed. ``cells="bytes"|"bits"``.
  ``cells="bytes"`` sizes a cell by what it holds, an index's distance to its group's zero-side
  end: ``ceil(log256 w)`` bytes (at least one), ``w`` the widest group's ``ceil(q / r)`` indexes, not
  ``q``. That is the paper's count wherever ``w`` and ``q`` need as many bytes (the presets' q = 256:
  one byte), and fewer where they do not (q = 512, r = 2: one byte, the paper's two).
* *Key widths.* Paper: 1-4 bytes; code: 1, 2 or 4 bytes (``key_widths="1234"|"124"``). Gaps
  >= 2^32 use an escape (see :mod:`~gcbench.compressors.codecs.sketchml.delta_binary`), so keys are exact for any int64 key set.
* *Key range.* Any shape of fewer than 2^63 elements. The decoder merges the groups' lists by
  sorting ``key << gbits | group`` (``gbits = max(1, ceil(log2 r))``), which fits an int64 for keys
  below ``2^(63 - gbits)``: 2^60 with the presets' 8 groups, 2^55 with 256. Larger keys (a sparse
  tensor of shape ``(2^62,)`` or ``(2^31, 2^31)``) are merged by a sort of the keys with their groups
  alongside (:mod:`~gcbench.compressors.codecs.sketchml.merge`): the same coordinates and values,
  the same payload bytes.
* *Bucket values* travel as float32 (float64 for float64 input), ``4q`` bytes instead of ``8q``.
* *Randomness.* DataSketches' quantile sketches (classic and KLL) flip coins when they compact,
  from an engine seeded by the clock that the Python binding cannot seed. With more than
  ``2k`` values of a sign the splits, hence the bytes, differ from call to call; so do the
  original code's (``QSketchUtils`` uses an unseeded ``java.util.Random``). The codec is declared
  ``stochastic``; ``seed`` seeds only the MinMaxSketch hashes. ``sketch="exact"`` (exact order
  statistics by ``torch.sort``, not the paper's method) is deterministic.
* ``sample`` (0 = off, the paper) feeds the sketches every ``ceil(d / sample)``-th value: a speed
  option, not in the paper; the outer edges stay the exact minimum and maximum of each sign.
* *Sketch item type.* Every value of a sign goes to the sketch in one ``update`` call with a numpy
  array: float32 (and fp16/bf16, widened exactly) input to DataSketches' *float* sketch, float64
  input to its double sketch. Same algorithm, same items, same order (a float32 is a double
  exactly), so the same splits as feeding doubles, without a float64 copy. The outer edges are
  the sketch's exact minimum and maximum. The binding holds the GIL while it feeds a sketch, so
  for large inputs the negatives' sketch is fed in a helper process (:mod:`~gcbench.compressors.codecs.sketchml.feed`: the same
  items in the same order to the same sketch) while this process feeds the positives'.

Presets: ``preset="paper"`` or ``"code"`` fills every parameter left as ``None``; parameters given
explicitly win. The resolved values are what travel in the payload header, so
``SketchML(**payload.params)`` rebuilds an identical codec.

Stages are labelled for ``torch.profiler`` (``sketchml/sign_split``, ``sketchml/quantile_sketch``,
``sketchml/bucketize``, ``sketchml/group``, ``sketchml/minmax_insert``, ``sketchml/table_pack``,
``sketchml/delta_binary_encode``) so benchmarks can split the time. The encode runs its ops on one
intra-op thread and spreads the per-slice/group/segment stages over the caller's threads itself
(:mod:`~gcbench.compressors.parallel.cpu_pool`), with the same bytes as one thread.

Payload sections: ``meta`` int64 ``[r_neg, n_0, ..., n_{r-1}]`` (groups holding negative
values, keys per group); ``bucket_values`` float32/64 ``(q,)``; ``keys`` uint8 (delta-binary, group
after group); ``tables`` uint8 (the r MinMaxSketches, packed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
import torch

from ...base import Codec, SparseInput, Stage, expect_sections
from ...kernels.labels import stage_label
from ...kernels.native import use_native
from ...kernels.sketchml import SKETCHML_C, bucketize_c
from ...numerics import ordered_add_at
from ...wire.bitpack import bits_for_levels, pack_bits, packed_nbytes, unpack_bits
from ...parallel.cpu_pool import caller_workers, map_blocks
from .delta_binary import WIDTH_MODES, delta_binary_decode, delta_binary_encode
from ...errors import CorruptPayloadError
from .merge import merge_and_query
from .minmaxsketch import MAX_COLUMNS, minmax_insert, table_layout
from .groups import GroupLayout, group_keys
from .splits import host_signs, host_splits, quantile_splits
from ...parallel.threads import single_thread

SKETCHES = ("quantiles", "kll", "exact")
BUCKET_VALUES = ("midpoint", "mean")
CELL_MODES = ("bytes", "bits")
PRESETS: dict[str, dict] = {
    # Section 3/4 and Appendix B.2 of the paper
    "paper": {
        "sketch": "quantiles",
        "k": 128,
        "buckets": 256,
        "groups": 8,
        "rows": 2,
        "columns": 0.2,
        "bucket_value": "midpoint",
        "cells": "bytes",
        "key_widths": "1234",
        "sample": 0,
    },
    # defaults of the released Java code (Quantizer.DEFAULT_BIN_NUM, HeapQuantileSketch.DEFAULT_K,
    # MinMaxSketch.DEFAULT_MINMAXSKETCH_ROW_NUM, colRatio 0.3, 8 groups, needBytes 1/2/4)
    "code": {
        "sketch": "quantiles",
        "k": 128,
        "buckets": 256,
        "groups": 8,
        "rows": 2,
        "columns": 0.3,
        "bucket_value": "midpoint",
        "cells": "bits",
        "key_widths": "124",
        "sample": 0,
    },
}
MAX_BUCKETS = 1 << 16

# bucketize fast path: float32 bits >> 15 = sign, 8 exponent and 8 mantissa bits (2^17 cells)
_LUT_SHIFT = 15
LUT_MAX_STEPS = 6
#: fewest values the table serves: building it is two searches over its 2^17 cells (2.5-4 ms on one
#: thread), which a direct searchsorted of fewer values than about as many beats
LUT_MIN_N = 1 << 17
#: the table path's slices on several threads are multiples of this
_LUT_BLOCK = 1 << 15


# -- stage 1: quantile-bucket quantification -----------------------------------------------------


_LUT_CELLS: dict[tuple[str, bool], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _lut_cells(dev: torch.device, wide: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Smallest and largest float32 value of every bit-pattern cell, and which cells are not NaN
    (they depend on nothing but the device: computed once per device).

    ``wide``: the cells of float64 values located through their float32 rounding, as float64: one
    float32 step below the smallest and one above the largest, since rounding to nearest moves a
    value by less than a step (the infinity cell also holds the finite values beyond float32's
    range, down to one step below its largest value)."""
    key = (str(dev), wide)
    hit = _LUT_CELLS.get(key)
    if hit is None:
        cell = torch.arange(1 << (32 - _LUT_SHIFT), dtype=torch.int64, device=dev)
        mag_lo = ((cell & 0xFFFF) << _LUT_SHIFT).to(torch.int32).view(torch.float32)
        mag_hi = (((cell & 0xFFFF) << _LUT_SHIFT) | ((1 << _LUT_SHIFT) - 1)).to(torch.int32).view(torch.float32)
        ok = ~torch.isnan(mag_lo)  # cells of NaN patterns are never looked up; the infinity cell is
        mag_lo = torch.where(ok, mag_lo, 0.0)
        mag_hi = torch.where(torch.isnan(mag_hi), math.inf, mag_hi)
        neg = cell >= (1 << 16)
        lo, hi = torch.where(neg, -mag_hi, mag_lo), torch.where(neg, -mag_lo, mag_hi)
        if wide:
            lo = torch.nextafter(lo, lo.new_full((), -math.inf)).double()
            hi = torch.nextafter(hi, hi.new_full((), math.inf)).double()
        hit = (lo, hi, ok)
        _LUT_CELLS[key] = hit
    return hit


def bucket_lut(boundaries: torch.Tensor, wide: bool = False) -> tuple[torch.Tensor, int]:
    """For each float32 bit-pattern cell: #boundaries <= the cell's smallest value, and the most
    boundaries any (finite) cell spans (``wide``: the cells of :func:`_lut_cells` for float64
    values, against float64 ``boundaries``)."""
    v_lo, v_hi, ok = _lut_cells(boundaries.device, wide)
    lut = torch.searchsorted(boundaries, v_lo, right=True)
    span = torch.where(ok, torch.searchsorted(boundaries, v_hi, right=True) - lut, 0)
    return lut, int(span.max())


def bucketize(
    values: torch.Tensor, boundaries: torch.Tensor, *, out_int32: bool = False, workers: int = 1
) -> torch.Tensor:
    """Bucket of each value: the number of ``boundaries`` (sorted) that are ``<= value``.

    Exactly ``torch.searchsorted(boundaries, values, right=True, out_int32=out_int32)`` for values
    that are not NaN (the codec refuses non-finite gradients before). For large float32 input a
    table indexed by the top 17 bits of each value's float32 pattern gives a lower bound, and a few
    vectorised compare-and-step passes finish it (about 4x faster than ``searchsorted`` on CPU).
    Float64 input (the paper's gradient values) indexes the same table through its float32
    rounding, with each cell widened by one float32 step on either side (rounding moves a value by
    less than that), and steps by exact float64 comparisons (about 4x faster too). Other dtypes,
    fewer values than :data:`LUT_MIN_N`, or boundaries too dense for the table, use ``searchsorted``;
    on the CPU, fewer float32 or float64 values than :data:`LUT_MIN_N` take its branch-free form in C
    where the C kernels run (:func:`~gcbench.compressors.kernels.sketchml.bucketize_c`: the values
    come in no order, so ``searchsorted``'s branches mispredict at about every level).
    ``out_int32``: int32 result (half the memory traffic) instead of int64.
    ``workers`` > 1 (CPU): the table path runs in that many contiguous slices on as many threads
    (:mod:`~gcbench.compressors.parallel.cpu_pool`; elementwise, so the same result).
    """
    if values.dtype in (torch.float16, torch.bfloat16):
        values = values.float()  # exact
    b = boundaries.to(device=values.device, dtype=values.dtype).contiguous()
    values = values.contiguous()
    wide = values.dtype == torch.float64
    if values.dtype not in (torch.float32, torch.float64) or b.numel() == 0:
        return torch.searchsorted(b, values, right=True, out_int32=out_int32)
    if values.numel() < LUT_MIN_N:
        if values.device.type == "cpu" and values.dim() == 1 and use_native(SKETCHML_C):
            return bucketize_c(values, b, out_int32=out_int32)
        return torch.searchsorted(b, values, right=True, out_int32=out_int32)
    lut, steps = bucket_lut(b, wide)
    if steps > LUT_MAX_STEPS:
        return torch.searchsorted(b, values, right=True, out_int32=out_int32)
    if out_int32:
        lut = lut.to(torch.int32)
    padded = torch.cat([b, b.new_full((1,), math.nan)])  # NaN <= v is False: never steps past the end
    idx = torch.empty(values.shape, dtype=lut.dtype, device=values.device)
    n = values.numel()
    per = -(-n // max(workers, 1) // _LUT_BLOCK) * _LUT_BLOCK

    def lut_steps(a: int) -> None:
        v, out = values[a : a + per], idx[a : a + per]
        if wide:
            cell = v.to(torch.float32).view(torch.int32)  # the rounding's buffer: this block's own
            cell >>= _LUT_SHIFT
        else:
            cell = v.view(torch.int32) >> _LUT_SHIFT
        cell &= (1 << (32 - _LUT_SHIFT)) - 1
        torch.index_select(lut, 0, cell, out=out)
        # the split above each value: in cell's memory, free again (a float64 block needs its own)
        edge = torch.empty_like(v) if wide else cell.view(torch.float32)
        step = None
        for _ in range(steps):
            torch.index_select(padded, 0, out, out=edge)
            step = torch.le(edge, v, out=step)
            out += step

    with single_thread(values.device, enabled=workers > 1):
        map_blocks(lut_steps, range(0, n, per), values.device, workers)
    return idx


class Quantized(NamedTuple):
    """Result of :func:`quantile_bucketize` (buckets ascend in value; negatives first)."""

    index: torch.Tensor  # bucket of each value (int64; int32 with quantile_bucketize(_int32=True))
    bucket_values: torch.Tensor  # float64 (buckets,)
    lower: torch.Tensor  # float64 (buckets,) lower edge of each bucket
    upper: torch.Tensor  # float64 (buckets,) upper edge
    negative_buckets: int  # buckets [0, negative_buckets) hold the negative values


def quantile_bucketize(
    values: torch.Tensor,
    buckets: int,
    *,
    negative_buckets: int | None = None,
    sketch: str = "quantiles",
    k: int = 128,
    sample: int = 0,
    bucket_value: str = "midpoint",
    _host: tuple[np.ndarray, np.ndarray, int] | None = None,
    _int32: bool = False,
    _workers: int = 1,
) -> Quantized:
    """Quantile-bucket quantification with separated signs (Section 3.2 + Section 3.3 Solution 1).

    Negative values fill buckets ``[0, negative_buckets)`` and the others (zeros included) the rest;
    each side's buckets come from its own quantile sketch of the magnitudes, so 0 is always a split.
    A value equal to a split goes to the bucket above it (``searchsorted(..., right=True)``: the
    half-open buckets ``[split_i, split_{i+1})`` on the signed axis), which is the bucket farther
    from zero for a positive value and the one nearer zero for a negative value; 0 itself goes to
    the first non-negative bucket, so ties never cross zero.

    Args:
        values: 1-D float values (finite).
        buckets: ``q``.
        negative_buckets: buckets for the negative values; default: proportional to their count
            (at least one per sign that occurs).
        sketch, k: see :func:`quantile_splits`.
        sample: at most this many values (every ``ceil(n / sample)``-th) are fed to the sketches;
            0 = all (the paper). The outer edges stay the exact minimum and maximum.
        bucket_value: ``"midpoint"`` of the two splits (paper and code) or ``"mean"`` of the values
            in the bucket (clamped to it; an empty bucket keeps its midpoint).
        _host: :func:`~gcbench.compressors.codecs.sketchml.splits.host_signs` of ``values`` when the caller has it already.
        _int32: return ``index`` as int32 (the codec's fast path; default int64).
        _workers: threads for :func:`bucketize`.
    """
    n = values.numel()
    split = None
    if sketch != "exact" and not (sample and n > sample):
        # DataSketches runs on CPU numpy: split the signs there (one copy of the values, no
        # masked_select on the device); the sketches see exactly the same values.
        v_np, neg_np, n_neg = host_signs(values) if _host is None else _host
        split = (neg_np, v_np)
    else:
        neg = values < 0
        n_neg = int(neg.sum())
    n_pos = n - n_neg
    if negative_buckets is None:
        negative_buckets = (
            0 if n_neg == 0 else buckets if n_pos == 0 else min(max(round(buckets * n_neg / n), 1), buckets - 1)
        )
    qn, qp = negative_buckets, buckets - negative_buckets
    if not (0 <= qn <= buckets and (qn > 0) == (n_neg > 0) and (qp > 0) == (n_pos > 0)):
        raise ValueError(f"{qn} negative of {buckets} buckets cannot hold {n_neg} negative and {n_pos} other values")
    f64 = {"dtype": torch.float64, "device": values.device}
    sub = values[:: -(-n // sample)] if sample and n > sample else None  # stride sample (speed option)

    def splits(negative: bool, parts: int) -> torch.Tensor:
        with stage_label("sketchml/sign_split"):
            m, bounds = fed(negative)
        with stage_label("sketchml/quantile_sketch"):
            return quantile_splits(m, parts, sketch=sketch, k=k, bounds=bounds)

    def fed(negative: bool) -> tuple[torch.Tensor, tuple[float, float] | None]:
        if sub is None:
            return (torch.masked_select(values, neg).neg_() if negative else torch.masked_select(values, ~neg)), None
        # exact outer edges from all values, interior splits from the sample
        if negative:
            bounds = (float(torch.where(neg, -values, math.inf).min()), float(-values.min()))
            part = -sub[sub < 0]
        else:
            bounds = (float(torch.where(neg, math.inf, values).min()), float(values.max()))
            part = sub[sub >= 0]
        if part.numel() == 0:  # the sample missed this sign: use all of its values
            part = torch.masked_select(values, neg).neg_() if negative else torch.masked_select(values, ~neg)
        return part, bounds

    if split is not None:
        s_neg, s_pos = host_splits(*split, n_neg, qn, qp, sketch, k, values.device, _workers)
    else:
        s_neg = splits(True, qn) if qn else None
        s_pos = splits(False, qp) if qp else None
    parts_b, lower, upper = [], [], []
    if s_neg is not None:
        s = s_neg.flip(0).neg()  # ascending
        parts_b.append(s[1:qn])
        lower.append(s[:-1])
        upper.append(s[1:])
    if qn and qp:
        parts_b.append(torch.zeros(1, **f64))  # the zero split
    if s_pos is not None:
        parts_b.append(s_pos[1:qp])
        lower.append(s_pos[:-1])
        upper.append(s_pos[1:])
    boundaries = torch.cat(parts_b) if parts_b else torch.zeros(0, **f64)
    lo, hi = (torch.cat(lower), torch.cat(upper)) if lower else (torch.zeros(0, **f64), torch.zeros(0, **f64))
    with stage_label("sketchml/bucketize"):
        index = bucketize(values, boundaries, out_int32=_int32 and buckets < 1 << 31, workers=_workers)
    mid = 0.5 * lo + 0.5 * hi  # the "average of two splits" (no overflow near the float64 limit)
    if bucket_value == "mean":
        sums = ordered_add_at(torch.zeros(buckets, **f64), index, values.to(torch.float64))
        counts = torch.bincount(index, minlength=buckets)
        mid = torch.where(counts > 0, sums / counts.clamp(min=1), mid)
        mid = torch.minimum(torch.maximum(mid, lo), hi)
    return Quantized(index, mid, lo, hi, qn)


# -- the codec -------------------------------------------------------------------------------------


@dataclass(eq=False)
class SketchML(Codec):
    """SketchML (Jiang et al., SIGMOD 2018); see the module docstring for every parameter's source.

    Args:
        preset: ``"paper"`` or ``"code"``: fills every parameter left as ``None``.
        sketch: ``"quantiles"`` (DataSketches classic, the paper's), ``"kll"`` or ``"exact"``.
        k: quantile sketch size (the paper's m; 128).
        buckets: quantile buckets q (256).
        groups: MinMaxSketch groups r (8; at least 2 so that zero is a group edge).
        rows: MinMaxSketch rows s (hash functions).
        columns: MinMaxSketch columns per key of a group (0.2 = paper's d/5, 0.3 = code).
        bucket_value: ``"midpoint"`` (paper and code) or ``"mean"``.
        cells: ``"bytes"`` (``ceil(log256 w)`` bytes per cell, ``w`` the widest group's bucket
            count; the paper's rule counts ``q``: see the module docstring) or ``"bits"`` (code's
            accounting).
        key_widths: ``"1234"`` (paper) or ``"124"`` (code) bytes per key delta.
        sample: values fed to the sketches at most (0 = all, the paper).
        seed: seed of the MinMaxSketch hash functions.
    """

    preset: str = "paper"
    sketch: str | None = None
    k: int | None = None
    buckets: int | None = None
    groups: int | None = None
    rows: int | None = None
    columns: float | None = None
    bucket_value: str | None = None
    cells: str | None = None
    key_widths: str | None = None
    sample: int | None = None
    seed: int = 0

    codec_id: ClassVar[int] = 40
    stochastic: ClassVar[bool] = True  # DataSketches' compaction coins (see the module docstring)

    @property
    def reproducible(self) -> bool:  # type: ignore[override]
        """Byte-reproducible only with ``sketch="exact"``: DataSketches' coins cannot be seeded."""
        return self.sketch == "exact"
    sparse_native: ClassVar[bool] = True
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("quantile-bucket quantification (DataSketches splits per sign)", lossless=False),
        Stage("grouped MinMaxSketch of bucket indexes", lossless=False),
        Stage("delta-binary keys", lossless=True),
    )
    reference: ClassVar[str] = (
        "Jiang, Fu, Yang, Cui. SketchML: Accelerating Distributed Machine Learning with Data Sketches. "
        "SIGMOD 2018 (Sections 3.2-3.4, Appendix A)"
    )

    def __post_init__(self) -> None:
        self._require(self.preset in PRESETS, f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        for name, value in PRESETS[self.preset].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if isinstance(self.columns, int) and not isinstance(self.columns, bool):
            self.columns = float(self.columns)

        def is_int(v: object) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        self._require(self.sketch in SKETCHES, f"sketch must be one of {SKETCHES}, got {self.sketch!r}")
        self._require(is_int(self.k), f"k must be an int, got {self.k!r}")
        if self.sketch == "quantiles":
            self._require(
                2 <= self.k <= 32768 and self.k & (self.k - 1) == 0,
                f"classic quantiles k must be a power of 2 in 2..32768, got {self.k}",
            )
        elif self.sketch == "kll":
            self._require(8 <= self.k <= 65535, f"KLL k must be in 8..65535, got {self.k}")
        else:
            self._require(self.k >= 1, f"k must be >= 1, got {self.k}")
        self._require(
            is_int(self.buckets) and 2 <= self.buckets <= MAX_BUCKETS,
            f"buckets must be an int in 2..{MAX_BUCKETS}, got {self.buckets!r}",
        )
        self._require(
            is_int(self.groups) and 2 <= self.groups <= min(self.buckets, 256),
            f"groups must be an int in 2..min(buckets, 256), got {self.groups!r}",
        )
        self._require(is_int(self.rows) and 1 <= self.rows <= 16, f"rows must be an int in 1..16, got {self.rows!r}")
        self._require(
            isinstance(self.columns, float) and 0.0 < self.columns <= 64.0 and math.isfinite(self.columns),
            f"columns must be a float in (0, 64], got {self.columns!r}",
        )
        self._require(
            self.bucket_value in BUCKET_VALUES,
            f"bucket_value must be one of {BUCKET_VALUES}, got {self.bucket_value!r}",
        )
        self._require(self.cells in CELL_MODES, f"cells must be one of {CELL_MODES}, got {self.cells!r}")
        self._require(
            self.key_widths in WIDTH_MODES, f"key_widths must be one of {WIDTH_MODES}, got {self.key_widths!r}"
        )
        self._require(
            is_int(self.sample) and (self.sample == 0 or self.sample >= 2),
            f"sample must be 0 (all) or >= 2, got {self.sample!r}",
        )
        self._require(
            is_int(self.seed) and 0 <= self.seed < 1 << 63, f"seed must be an int in [0, 2^63), got {self.seed!r}"
        )

    # -- layout helpers ----------------------------------------------------------------------------

    def _layout(self, r_neg: int) -> GroupLayout:
        q, r = self.buckets, self.groups
        edges = [(j * q) // r for j in range(r + 1)]
        width = [edges[j + 1] - edges[j] for j in range(r)]
        base = [edges[j + 1] - 1 if j < r_neg else edges[j] for j in range(r)]
        step = [-1 if j < r_neg else 1 for j in range(r)]
        return GroupLayout(edges, width, base, step)

    def _columns(self, counts: list[int]) -> list[int]:
        return [min(max(math.ceil(self.columns * c), 1), MAX_COLUMNS) if c else 0 for c in counts]

    def _cell_bits(self, width: list[int]) -> list[int]:
        if self.cells == "bits":
            return [bits_for_levels(w) for w in width]
        # ceil(log256(max width)) bytes: Section 3.5's byte cells, sized by the group width, not q
        nbytes = -(-bits_for_levels(max(width)) // 8)
        return [8 * nbytes] * len(width)

    def _table_nbytes(self, columns: list[int], bits: list[int]) -> list[int]:
        return [packed_nbytes(self.rows * t, b) for t, b in zip(columns, bits)]

    # -- encode ------------------------------------------------------------------------------------

    def _encode_sparse(self, sparse: SparseInput, *, key, generator):
        # One intra-op thread for the whole encode and the caller's threads as workers of the
        # per-slice/group/segment stages (.cpu_pool) and the helper process for one sketch
        # (.sketch_feed): no op-level OpenMP region waits for a second core a busy machine does not
        # give it (measured at 25M/10%, load 2-3: encode 2x slower right after a 2-thread copy_).
        workers = caller_workers()
        with single_thread(sparse.keys.device):
            return self._encode_steps(sparse, workers)

    def _encode_steps(self, sparse: SparseInput, workers: int):
        keys, values = sparse.keys, sparse.values
        dev, n, r = keys.device, keys.numel(), self.groups
        bv_dtype = torch.float64 if values.dtype == torch.float64 else torch.float32
        if n == 0:
            return (
                torch.zeros(r + 1, dtype=torch.int64, device=dev),
                torch.zeros(0, dtype=bv_dtype, device=dev),
                torch.zeros(0, dtype=torch.uint8, device=dev),
                torch.zeros(0, dtype=torch.uint8, device=dev),
            )
        host = None
        if self.sketch != "exact" and not (self.sample and n > self.sample):
            with stage_label("sketchml/sign_split"):  # the host copy and sign mask the sketches use
                host = host_signs(values)
        n_neg = host[2] if host is not None else int((values < 0).sum())
        # whole groups per sign, proportional to the counts, at least one per sign present
        r_neg = 0 if n_neg == 0 else r if n_neg == n else min(max(round(r * n_neg / n), 1), r - 1)
        lay = self._layout(r_neg)
        quant = quantile_bucketize(
            values,
            self.buckets,
            negative_buckets=lay.edges[r_neg],
            sketch=self.sketch,
            k=self.k,
            sample=self.sample,
            bucket_value=self.bucket_value,
            _host=host,
            _int32=True,
            _workers=workers,
        )
        bucket_values, held = quant.bucket_values, [quant.index]
        del quant  # group_keys frees the bucket index once it has the groups and levels
        with stage_label("sketchml/group"):
            keys_g, levels_g, counts_t = group_keys(keys, held, lay, self.buckets, workers)
            counts = counts_t.tolist()
        with stage_label("sketchml/minmax_insert"):
            cols = self._columns(counts)
            fill = [w - 1 for w in lay.width]
            table = minmax_insert(keys_g, levels_g, counts, cols, self.rows, self.seed, fill, workers=workers)
            del levels_g
        with stage_label("sketchml/table_pack"):
            tables = self._pack_tables(table, cols, self._cell_bits(lay.width))
        with stage_label("sketchml/delta_binary_encode"):
            key_bytes = delta_binary_encode(keys_g, counts_t, self.key_widths, workers=workers)
        meta = torch.tensor([r_neg] + counts, dtype=torch.int64, device=dev)
        return meta, bucket_values.to(bv_dtype), key_bytes, tables

    def _pack_tables(self, table: torch.Tensor, cols: list[int], bits: list[int]) -> torch.Tensor:
        # each group's table is packed on its own (so a group starts on a byte boundary); with one
        # byte per cell everywhere that is the whole table as bytes, in one op
        if all(b == 8 for t, b in zip(cols, bits) if t):
            return table.to(torch.uint8)
        parts, start = [], 0
        for t, b in zip(cols, bits):
            cells = self.rows * t
            if cells:
                parts.append(pack_bits(table[start : start + cells], b))
            start += cells
        return torch.cat(parts) if parts else table.new_zeros(0, dtype=torch.uint8)

    # -- decode ------------------------------------------------------------------------------------

    def _decode_sparse(self, sections, numel):
        # one intra-op thread, as in encode: its ops right after another 2-thread op waited for the
        # second core (25M/10%, load 6: decode 2.65 s on 2 threads, 0.48 s on one); the caller's
        # threads work on the per-group and per-block stages instead (.cpu_pool)
        workers = caller_workers()
        with single_thread(sections[0].device if sections else torch.device("cpu")):
            return self._decode_steps(sections, numel, workers)

    def _decode_steps(self, sections, numel, workers: int = 1):
        r, q = self.groups, self.buckets
        if len(sections) != 4 or sections[1].dtype not in (torch.float32, torch.float64):
            expect_sections(
                self, sections, [(torch.int64, r + 1), (torch.float32, None), (torch.uint8, None), (torch.uint8, None)]
            )
        expect_sections(
            self, sections, [(torch.int64, r + 1), (sections[1].dtype, None), (torch.uint8, None), (torch.uint8, None)]
        )
        meta, bucket_values, key_bytes, tables = sections
        dev = meta.device
        r_neg, *counts = meta.tolist()
        if not 0 <= r_neg <= r or any(c < 0 or c > numel for c in counts) or sum(counts) > numel:
            raise CorruptPayloadError(f"SketchML meta {meta.tolist()} is impossible for {numel} elements")
        n = sum(counts)
        if n == 0:
            if r_neg or bucket_values.numel() or key_bytes.numel() or tables.numel():
                raise CorruptPayloadError("SketchML payload without keys carries data")
            return torch.zeros(0, dtype=torch.int64, device=dev), bucket_values
        if (r_neg > 0) != (sum(counts[:r_neg]) > 0) or (r_neg < r) != (sum(counts[r_neg:]) > 0):
            raise CorruptPayloadError("SketchML groups of a sign without values")
        lay = self._layout(r_neg)
        q_neg = lay.edges[r_neg]
        if bucket_values.numel() != q:
            raise CorruptPayloadError(f"{bucket_values.numel()} bucket values, expected {q}")
        bv = bucket_values
        if (
            not bool(torch.isfinite(bv).all())
            or bool((bv[1:] < bv[:-1]).any())
            or bool((bv[:q_neg] > 0).any())
            or bool((bv[q_neg:] < 0).any())
        ):
            raise CorruptPayloadError(
                "SketchML bucket values must be finite, ascending, <= 0 before the zero split and >= 0 after"
            )
        cols = self._columns(counts)
        bits = self._cell_bits(lay.width)
        table_bytes = self._table_nbytes(cols, bits)
        if tables.numel() != sum(table_bytes):
            raise CorruptPayloadError(f"{tables.numel()} table bytes, expected {sum(table_bytes)}")
        counts_t = torch.tensor(counts, dtype=torch.int64, device=dev)
        with stage_label("sketchml/delta_binary_decode"):  # checks lengths first
            keys_g = delta_binary_decode(key_bytes, n, counts_t, self.key_widths, workers=workers)
        # one byte per cell where every level fits (a quarter of the cache lines to gather from)
        table = self._unpack_tables(tables, cols, bits, table_bytes, torch.uint8 if max(lay.width) <= 256 else torch.int32)
        cells = [self.rows * t for t in cols]
        highest = [int(table[a : a + c].max()) for a, c in zip(table_layout(cols, self.rows), cells) if c]
        if any(m > w - 1 for m, w in zip(highest, [w for w, c in zip(lay.width, cells) if c])):
            raise CorruptPayloadError("SketchML sketch cell beyond its group's bucket range")
        # value of each (group, level): bucket base + step * level (levels past a group's width
        # are never answered, the cells being checked above)
        level = torch.arange(max(lay.width), device=dev)
        index = torch.tensor(lay.base, device=dev).unsqueeze(1) + torch.tensor(lay.step, device=dev).unsqueeze(1) * level
        values = bv[index.clamp_(0, q - 1)]
        with stage_label("sketchml/merge_query"):
            # the groups' lists merged into one ascending list, each key's level read from its
            # group's MinMaxSketch in that order (.merge)
            return merge_and_query(keys_g, counts, numel, table, cols, self.rows, self.seed, values, workers=workers)

    def _unpack_tables(self, tables, cols, bits, table_bytes, dtype=torch.int32) -> torch.Tensor:
        parts, start = [], 0
        for t, b, nb in zip(cols, bits, table_bytes):
            if t:
                parts.append(unpack_bits(tables[start : start + nb], b, self.rows * t, dtype))
            start += nb
        return torch.cat(parts)
