"""Quantile splits of one sign for SketchML's quantile-bucket quantification (Jiang et al., SIGMOD
2018, Section 3.2 Step 1, with the signs separated as in Section 3.3 "Solution 1"): exact order
statistics, or DataSketches quantile sketches fed on the host - in this process, or the negatives'
sketch in :mod:`~gcbench.compressors.codecs.sketchml.feed`'s helper process while this one feeds the positives'.
"""

from __future__ import annotations

import numpy as np
import torch

from ...kernels.labels import stage_label
from .feed import helper as sketch_helper
from .feed import sketch_quantiles


def quantile_splits(
    magnitudes: torch.Tensor,
    parts: int,
    *,
    sketch: str = "quantiles",
    k: int = 128,
    bounds: tuple[float, float] | None = None,
) -> torch.Tensor:
    """``parts + 1`` non-decreasing float64 splits of non-negative values (Section 3.2, Step 1).

    The splits are ``[min, Q(1/parts), ..., Q((parts-1)/parts), max]`` with ``Q`` from a DataSketches
    quantile sketch (``"quantiles"``: the classic sketch the paper used; ``"kll"``) or, for
    ``"exact"``, the order statistic of rank ``floor(n * i / parts)`` (as the Java code's
    ``getQuantiles`` reads its summary). The sketch runs on CPU numpy (the paper's method).

    Args:
        magnitudes: the values fed to the sketch.
        parts: number of buckets.
        sketch, k: which quantile sketch, and its size.
        bounds: the outer splits ``(min, max)`` when ``magnitudes`` is a sample of the data;
            default: the minimum and maximum of ``magnitudes``.
    """
    n = magnitudes.numel()
    if n == 0 or parts < 1:
        raise ValueError("quantile_splits needs values and parts >= 1")
    dev = magnitudes.device
    if sketch != "exact" and parts > 1:
        interior, lo, hi = sketch_quantiles(sketch_input(magnitudes), parts, sketch, k)
        if bounds is not None:
            lo, hi = bounds
        return with_bounds(torch.tensor(interior, dtype=torch.float64, device=dev), lo, hi)
    if bounds is None:
        lo, hi = (float(t) for t in torch.aminmax(magnitudes))
    else:
        lo, hi = bounds
    if parts == 1:
        interior = torch.empty(0, dtype=torch.float64, device=dev)
    else:  # exact order statistics
        srt = torch.sort(magnitudes.to(torch.float64)).values
        pos = torch.tensor([min(n * i // parts, n - 1) for i in range(1, parts)], device=dev)
        interior = srt[pos]
    return with_bounds(interior, lo, hi)


def with_bounds(interior: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """``[lo, interior clamped to [lo, hi], hi]``: the splits of one sign."""
    interior = interior.clamp(lo, hi)
    return torch.cat([interior.new_full((1,), lo), interior, interior.new_full((1,), hi)])


def sketch_input(values: torch.Tensor) -> np.ndarray:
    """CPU numpy copy-free view (where possible) of values for a DataSketches sketch: float32 stays
    float32 (fp16/bf16 widen to it, exactly), float64 stays float64."""
    v = values.detach().to("cpu")
    if v.dtype not in (torch.float32, torch.float64):
        v = v.float()
    return v.contiguous().numpy()


def host_signs(values: torch.Tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """``(values as CPU numpy, values < 0, count of negatives)`` for the DataSketches path."""
    v_np = sketch_input(values)
    neg_np = v_np < 0
    return v_np, neg_np, int(np.count_nonzero(neg_np))


#: Fewest values of each sign for which the negative sign's sketch goes to the helper process
#: (:mod:`~gcbench.compressors.codecs.sketchml.feed`): below it the sketch takes a few ms and the helper's start would dominate.
HELPER_MIN = 1 << 17


def host_splits(
    neg_np: np.ndarray, v_np: np.ndarray, n_neg: int, qn: int, qp: int, sketch: str, k: int, dev: torch.device,
    workers: int = 1,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Float64 splits of the negatives' magnitudes (``qn + 1``, ascending magnitude) and of the other
    values (``qp + 1``) from DataSketches sketches on the host arrays (None for an absent sign).

    With both signs large and a :func:`~gcbench.compressors.codecs.sketchml.feed.helper` free, the negatives' sketch runs in
    the helper process while this one feeds the positives' (the binding holds the GIL, so threads
    could not overlap them): the same items in the same order to the same sketch type, so the same
    splits for the same coins; a failing helper falls back to this process (see :mod:`~gcbench.compressors.codecs.sketchml.feed`).
    Only when the caller has ``workers`` > 1 threads (its ``torch.get_num_threads()``): a caller on
    one thread keeps all of the work on it, so that a measurement of its CPU time (the SketchML
    reproduction's clock, ``time.thread_time`` with torch on one thread) counts the whole encode.
    """
    f64 = {"dtype": torch.float64, "device": dev}
    n_pos = v_np.size - n_neg

    def splits_of(arr: np.ndarray, parts: int) -> torch.Tensor:
        if parts == 1:
            return torch.tensor([float(arr.min()), float(arr.max())], **f64)
        interior, lo, hi = sketch_quantiles(arr, parts, sketch, k, scratch=True)  # arr: a fresh compress
        return with_bounds(torch.tensor(interior, **f64), lo, hi)

    h = sketch_helper() if workers > 1 and qn > 1 and qp > 1 and min(n_neg, n_pos) >= HELPER_MIN else None
    if h is not None and h.lock.acquire(blocking=False):
        try:
            with stage_label("sketchml/sign_split"):
                neg_arr = h.buffer(n_neg, v_np.dtype)
                np.compress(neg_np, v_np, out=neg_arr)
                np.negative(neg_arr, out=neg_arr)
            with stage_label("sketchml/quantile_sketch"):
                h.start(qn, sketch, k)
            with stage_label("sketchml/sign_split"):
                pos_arr = np.compress(~neg_np, v_np)
            with stage_label("sketchml/quantile_sketch"):
                s_pos = splits_of(pos_arr, qp)
                del pos_arr
                interior, lo, hi = h.result()
                return with_bounds(torch.tensor(interior, **f64), lo, hi), s_pos
        finally:
            h.lock.release()
    s_neg = s_pos = None
    if qn:
        with stage_label("sketchml/sign_split"):  # np.compress: several times faster than boolean indexing
            arr = np.compress(neg_np, v_np)
            np.negative(arr, out=arr)
        with stage_label("sketchml/quantile_sketch"):
            s_neg = splits_of(arr, qn)
        del arr
    if qp:
        with stage_label("sketchml/sign_split"):
            arr = np.compress(~neg_np, v_np)
        with stage_label("sketchml/quantile_sketch"):
            s_pos = splits_of(arr, qp)
    return s_neg, s_pos
