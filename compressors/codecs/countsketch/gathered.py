"""Count Sketch accumulation off the CPU: codes gathered for long chunks of coordinates, bucket sums
in int64 fixed point.

On an accelerator a scatter-add of float32 values adds with atomics, in whatever order the threads
reach a bucket, so the table's bits would change from run to run; a sorted scatter-add
(``index_put_(accumulate=True)``) fixes the order but sorts every chunk's indices on every call
(most of a GPU's accumulate time). Integer additions give the same bits in any order: each value is
scaled by one power of two and rounded to int64 (:func:`~gcbench.compressors.numerics.fixed_point_scale`:
no sum of the vector's values can overflow), the atomics add integers, and each row's positive and
negative halves are subtracted exactly before one conversion back to float32.

The CPU keeps its own loops (:class:`~gcbench.compressors.codecs.countsketch.codec.CountSketch`): float32
additions in index order, the bytes its tests and committed results were made with. A vector with
NaN or Inf cannot be scaled: it is added in float32 in a fixed order (sorted), so that a non-finite
gradient shows in the table as it does on the CPU.
"""

from __future__ import annotations

import math

import torch

from ...numerics import fixed_point_scale, from_fixed_point, ordered_add_at, to_fixed_point
from .hashes import HashTables

#: Coordinates whose codes (every row) are gathered at once: ``4 r`` bytes each for the codes and 16
#: for the values' fixed-point copy and its float64 temporary.
STEP = 1 << 22


def accumulate_gathered(tables: HashTables, v: torch.Tensor, r: int, c: int, step: int = STEP) -> torch.Tensor:
    """``(r, c)`` float32: row ``j``, bucket ``b`` holds the sum of ``s_j(i) v_i`` over the coordinates
    ``i`` with ``h_j(i) = b``, to add to a Count Sketch's table.

    Finite ``v``: each value rounded to a multiple of ``1 / scale`` (one power-of-two scale for the
    whole vector, from its largest magnitude and its length: one read back), their sums exact in
    int64, then rounded once to float32, so the same bits whatever the order of the additions and the
    chunk length. Otherwise float32 sums in a fixed order
    (:func:`~gcbench.compressors.numerics.ordered_add_at`).

    Args:
        tables: the sketch's hash tables (codes of any coordinates: ``codes_at``).
        v: the float32 vector (length ``tables.d``) on the tables' device.
        r, c: rows and columns of the table.
        step: coordinates per chunk (the bytes do not depend on it).
    """
    d = v.numel()
    dev = v.device
    if d == 0:
        return torch.zeros(r, c, dtype=torch.float32, device=dev)
    lo, hi = torch.stack(torch.aminmax(v)).tolist()  # one pass, one read back: NaN shows at both ends, Inf at one
    finite = math.isfinite(lo) and math.isfinite(hi)
    if finite:
        scale = fixed_point_scale(max(-lo, hi), d)
        sums = torch.zeros(r, 2 * c, dtype=torch.int64, device=dev)
    else:
        sums = torch.zeros(r, 2 * c, dtype=torch.float32, device=dev)
    for start in range(0, d, step):
        stop = min(d, start + step)
        codes = tables.codes_at(torch.arange(start, stop, device=dev))
        if finite:
            q = to_fixed_point(v[start:stop], scale)  # once for every row
            for row in range(r):
                sums[row].index_add_(0, codes[row], q)
        else:
            for row in range(r):
                ordered_add_at(sums[row], codes[row], v[start:stop])
    pairs = sums.view(r, c, 2)  # code 2 b: sign +1, code 2 b + 1: sign -1
    signed = pairs[..., 0] - pairs[..., 1]  # exact in int64: each half is within 2**61
    return from_fixed_point(signed, scale) if finite else signed
