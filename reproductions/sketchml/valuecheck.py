"""How far SketchML's decoded gradient values land from the true ones, against what its construction allows.

Measured on the real pushed messages: the driver's decode of a worker's payload bytes beside the
values the worker encoded. The error of one value is its **rank error**: how many of the message's
true values lie strictly between the true value ``v`` and its decoded value ``v'``, as a share of the
message's ``d`` values (ties counted as no distance).

Why ranks and not a relative L2 error: SketchML's MinMaxSketch answers each key with a level at or
below its true one inside its group (§3.3), so on heavy-tailed gradients the decoded large values sit
well below the true ones and the L2 error of a correct codec is already large (relative L2 0.58-0.64
on the smoke preset's LR/SVM/linear gradients), about that of sending ``sign(v) x mean|v|`` (0.62-0.67)
and *above* that of uniform instead of quantile buckets (0.40-0.49): an L2 bound cannot tell the method
from those breakages. What the method does guarantee is positional, and that is what this measures.

The bound (:func:`mean_rank_bound`), from the paper's definition (§3.2-3.3) and the codec's
parameters: ``q`` buckets of equal mass per sign (quantile splits), cut into ``r`` groups of ``q / r``
consecutive buckets; a decoded value keeps its sign and its group and is the midpoint of a bucket
between the group's zero-side bucket and its own (MinMaxSketch: insert keeps the minimum level, query
the maximum over rows, so the answer never exceeds the true level). So every true value between ``v``
and ``v'`` belongs to ``v``'s group and lies on the zero side of ``v`` or within half of ``v``'s
bucket beyond it: a value's rank error is at most its position in its group counted from the zero side
plus half a bucket. Averaged over a group of ``n_g`` values that is at most ``n_g / 2`` plus half a
bucket (``n_g r / 2q``). Equal-mass buckets give each of the ``r_s`` groups of a sign ``n_s / r_s`` of
its ``n_s`` values, so over the message

    mean rank error <= sum_s (n_s / d)^2 / r_s x (1 + r / q) / 2 + eps

with ``r_s`` the groups the payload gives each sign (its ``meta`` section) and ``eps`` the quantile
sketch's normalized rank error at its size ``k`` (DataSketches' published bound), which covers groups
and buckets off their equal share where the sketch's splits are off. The group sizes come from the
definition, not from the payload's counts: buckets of unequal mass would otherwise widen their own bound. With ``r = 8`` groups of about ``d / 8``
values it is ``1/16 x 1.03 + 0.014 = 0.079`` at ``q = 256``, ``k = 128``: a correct codec stays within it
whatever its columns and rows (all keys colliding puts every answer at the group's zero side, which
the bound allows), while values that leave their group (``sign x mean|v|``) or buckets that do not
hold equal mass (uniform buckets on heavy-tailed gradients) exceed it.

Because that bound allows every answer at its group's zero side, it cannot see a broken MinMaxSketch.
:func:`exact_check` measures the sketch itself, on the same messages: how many keys it answers
**exactly** (decoded bucket = true bucket), against how many its definition (§3.3) answers exactly in
expectation under independent uniformly random hash functions (:func:`exact_probability`), given the
configuration's rows, the columns the definition gives each group and the keys' true levels. The true
buckets are the codec's own: the payload's bucket values are the midpoints of the codec's splits, and
each split is one of the message's values, so the splits are re-derived from the two exactly
(:func:`side_splits`, :func:`true_buckets`). A hash that ignores the key, a table of one column or rows
that share one hash answer far fewer keys exactly (measured 0.10, 0.10 and 0.69 of the expectation on a
20k-key message, against 0.99-1.03 for the real codec whatever its rows, columns or key structure).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from gcbench.compressors import Payload
from gcbench.compressors.codecs.sketchml.minmaxsketch import MAX_COLUMNS

#: What a SketchML training cell's checks record (part of those cells' config, so a change computes them
#: again and no other cell): 2 = the decoded values' rank error and the MinMaxSketch's exact answers.
CHECKS_VERSION = 2
#: SketchML's payload section holding ``[r_neg, n_0, ..., n_{r-1}]`` (see ``compressors/codecs/sketchml/codec.py``).
META_SECTION = 0
#: SketchML's payload section holding the ``q`` bucket values (midpoints of the splits, ascending).
BUCKET_SECTION = 1


def _runs(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of equal values of the sorted ``s`` starts, and the run of each element."""
    new = np.empty(len(s), dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    return np.flatnonzero(new), np.cumsum(new) - 1


def rank_errors(true: np.ndarray, decoded: np.ndarray, *, order: np.ndarray | None = None) -> np.ndarray:
    """Per value, the number of ``true`` values strictly between ``true[i]`` and ``decoded[i]`` over ``len(true)``
    (finite values: the codec refuses others before a message exists); ``order``: ``argsort(true)`` where the
    caller has it (:func:`message_checks` sorts a message once for both checks).

    ``true[i]``'s equal values in ``sort(true)`` span ``[lo_t, hi_t)`` and ``decoded[i]``'s insertion points are
    ``lo_d <= hi_d``; the values strictly between the two number ``max(0, lo_d - hi_t, lo_t - hi_d)``. Each
    position comes from one sort of each array and its runs of equal values (``searchsorted`` of a message's
    unsorted values cost several times as much: a mispredicted branch per level of its binary search)."""
    n = len(true)
    if n == 0:
        return np.zeros(0)
    if order is None:
        order = np.argsort(true)
    s = true[order]
    starts, run = _runs(s)
    lo_t, hi_t = np.empty(n, dtype=np.intp), np.empty(n, dtype=np.intp)
    lo_t[order], hi_t[order] = starts[run], np.append(starts[1:], n)[run]
    d_order = np.argsort(decoded)
    ds = decoded[d_order]
    d_starts, d_run = _runs(ds)
    distinct = ds[d_starts]  # few: a decoded value is one of the payload's bucket values or 0
    lo_d, hi_d = np.empty(n, dtype=np.intp), np.empty(n, dtype=np.intp)
    lo_d[d_order] = np.searchsorted(s, distinct, "left")[d_run]
    hi_d[d_order] = np.searchsorted(s, distinct, "right")[d_run]
    return np.maximum(0, np.maximum(lo_d - hi_t, lo_t - hi_d)) / n


@lru_cache(maxsize=None)
def sketch_rank_error(sketch: str, k: int) -> float:
    """The quantile sketch's normalized rank error (DataSketches' bound for a single rank; 0 for ``exact``)."""
    if sketch == "exact":
        return 0.0
    import datasketches

    make = {"quantiles": datasketches.quantiles_floats_sketch, "kll": datasketches.kll_floats_sketch}[sketch]
    return float(make.get_normalized_rank_error(int(k), False))


def mean_rank_bound(sign_counts: tuple[int, int], sign_groups: tuple[int, int], buckets: int, groups: int,
                    eps: float) -> float:
    """The most a correct SketchML lets a message's mean rank error be (module docstring): ``sign_counts``
    the message's negative and other values, ``sign_groups`` the groups each sign fills. A group holds
    ``n_s / r_s`` of its sign's values by the method's definition (equal-mass buckets), not by what a
    payload's counts say, so buckets that do not hold equal mass cannot widen the bound."""
    d = sum(sign_counts)
    if d == 0:
        return 0.0
    share = sum((n / d) ** 2 / g for n, g in zip(sign_counts, sign_groups) if n and g)
    return share * (1.0 + groups / buckets) / 2.0 + eps


def aligned(keys: np.ndarray, dkeys: np.ndarray, dvals: np.ndarray) -> np.ndarray:
    """The decoded value of each of ``keys`` (0 where the message lost the key)."""
    if np.array_equal(keys, dkeys):
        return dvals
    idx = np.clip(np.searchsorted(dkeys, keys), 0, max(len(dkeys) - 1, 0))
    found = (dkeys[idx] == keys) if len(dkeys) else np.zeros(len(keys), dtype=bool)
    return np.where(found, dvals[idx] if len(dkeys) else 0.0, 0.0)


def rank_check(payload: Payload, values: np.ndarray, decoded: np.ndarray, codec, *,
               order: np.ndarray | None = None) -> tuple[float, float]:
    """``(sum of rank errors, d x bound)`` of one SketchML message, parsed (``payload``) and decoded in the
    order of its true ``values`` (``decoded``, :func:`aligned`; ``values`` not empty); ``codec`` the SketchML
    codec (its ``buckets``, ``groups``, ``sketch`` and ``k``); ``order`` ``argsort(values)`` if known. Summed
    over messages, their ratio is the pushed values' mean rank error as a share of what the construction allows."""
    d = len(values)
    err = float(rank_errors(values, decoded, order=order).sum())
    r = int(codec.groups)
    r_neg = int(payload.sections[META_SECTION][0])  # the groups the payload gives the negatives
    n_neg = int(np.count_nonzero(values < 0))
    bound = mean_rank_bound((n_neg, d - n_neg), (r_neg, r - r_neg), int(codec.buckets), r,
                            sketch_rank_error(codec.sketch, int(codec.k)))
    return err, d * bound


# -- the MinMaxSketch's exact answers ------------------------------------------------------------------


def side_splits(mids: np.ndarray, values: np.ndarray, dtype=np.float64) -> tuple[np.ndarray, bool, list[tuple[float, float]]]:
    """The splits ``[e_0, ..., e_n]`` (ascending) of one sign whose bucket values are ``mids`` (``n`` of
    them), re-derived from the payload: each split is one of the sign's ``values`` (the quantile sketch's
    answers are items it was fed, and the outer splits its exact minimum and maximum), and bucket ``j``'s
    value is ``0.5 e_j + 0.5 e_{j+1}`` (the codec's midpoint, rounded to the payload's float ``dtype``).
    From ``e_0 = min(values)``, each next split is a value within a few units in the last place of
    ``2 m_j - e_j`` that gives the bucket's midpoint exactly, ending at ``max(values)``; where
    several values do (values a unit or two apart), the nearest is taken and the search goes back to the
    others if no later split fits (a bounded depth-first search).

    Returns the splits, whether every midpoint was reproduced so (if not, the values nearest ``2 m_j -
    e_j`` stand in for the splits), and the ranges ``(lo, hi)`` of values whose bucket the payload leaves
    open: where several values give a bucket's midpoint, a value from the least of them up to (not
    including) the greatest may lie on either side of the split."""
    return _side_splits(mids, np.unique(values), dtype)


def _side_splits(mids: np.ndarray, distinct: np.ndarray, dtype) -> tuple[np.ndarray, bool, list[tuple[float, float]]]:
    """:func:`side_splits` of a sign's ``distinct`` values (ascending, each once)."""
    n = len(mids)
    if len(distinct) == 0:  # a sign the payload gives buckets but the message lacks: nothing to re-derive
        return np.concatenate([mids[:1], mids]), False, []
    ul = distinct.tolist()
    ms = mids.tolist()
    last = ul[-1]

    if np.dtype(dtype) == np.float64:
        def rounding(x: float) -> float:
            return x
    else:
        def rounding(x: float) -> float:
            return float(dtype(x))
    # At least the unit in the last place of x rounded to dtype (twice float64's ulp scaled to dtype's
    # precision, plus its smallest step). A value giving the midpoint m lies within a unit of m of 2 m - e,
    # so any window of a few units holds the same values: a wider one finds the same splits.
    ulp_scale = 2.0 * float(np.finfo(dtype).eps / np.finfo(np.float64).eps)
    ulp_floor = float(np.finfo(dtype).smallest_subnormal)

    def hits(j: int, e: float) -> list[float]:
        m = ms[j]
        if j == n - 1:  # the last split is the sign's largest value
            return [last] if rounding(0.5 * e + 0.5 * last) == m else []
        target = 2.0 * m - e
        tol = 4.0 * ((math.ulp(m) + math.ulp(target)) * ulp_scale + 2.0 * ulp_floor)
        lo, hi = bisect_left(ul, target - tol), bisect_left(ul, target + tol)
        found = [c for c in ul[lo : hi + 1] if c >= e and rounding(0.5 * e + 0.5 * c) == m]
        return sorted(found, key=lambda c: abs(c - target))

    edges, options = [ul[0]], [hits(0, ul[0])]
    spans = [(min(options[0]), max(options[0])) if len(options[0]) > 1 else None]
    budget = 8 * n + 64  # steps, going back included
    while options and budget > 0:
        budget -= 1
        if not options[-1]:  # no value gives this midpoint after the splits chosen so far: back to an alternative
            options.pop()
            spans.pop()
            edges.pop()
            continue
        edges.append(options[-1].pop(0))
        if len(edges) == n + 1:
            return np.array(edges), True, [s for s in spans if s is not None]
        h = hits(len(edges) - 1, edges[-1])
        options.append(h)
        spans.append((min(h), max(h)) if len(h) > 1 else None)
    # not reproduced: the greedy reconstruction, each split the value nearest 2 m_j - e_j
    edges = [ul[0]]
    for j, m in enumerate(ms):
        e = edges[-1]
        target = last if j == n - 1 else max(2.0 * m - e, e)
        i = min(bisect_left(ul, target), len(ul) - 1)
        edges.append(min(ul[max(i - 1, 0) : i + 1], key=lambda c: abs(c - target)))
    return np.array(edges), False, []


class TrueBuckets(NamedTuple):
    """Where the codec put each value of a message (:func:`true_buckets`)."""

    index: np.ndarray  # bucket (0 .. q-1, ascending in value)
    group: np.ndarray  # group of q / r buckets
    level: np.ndarray  # distance to the group's zero-side end
    open: np.ndarray  # True where the payload leaves the bucket open (:func:`side_splits`)
    bucket_values: np.ndarray  # the payload's, float64
    reproduced: bool  # every bucket value reproduced from splits among the values


def true_buckets(payload: Payload, values: np.ndarray, codec, *, order: np.ndarray | None = None) -> TrueBuckets:
    """Each of ``values`` as the codec quantified it. The splits come from the payload (its bucket values
    and its negatives' groups) and the message's own values (:func:`side_splits`); a value's bucket is
    the number of splits at or below it (negatives fill buckets ``[0, q_neg)``, 0 is the split between
    the signs), its group the run of ``q / r`` buckets holding it and its level the distance to the
    group's zero-side end (the codec's layout, ``compressors/codecs/sketchml/codec.py``). ``order``:
    ``argsort(values)`` if known. Worked on the sorted values (rounding to the payload's float type keeps
    their order): each sign is a run of them, its distinct values their runs, and a bucket a range of
    positions found by one binary search per split, where searching each of a message's unsorted values
    costs a mispredicted branch per level."""
    q, r = int(codec.buckets), int(codec.groups)
    r_neg = int(payload.sections[META_SECTION][0])
    bv = payload.sections[BUCKET_SECTION]
    dtype = np.float64 if bv.dtype.itemsize == 8 else np.float32  # float32 bucket values: float32 input
    if order is None:
        order = np.argsort(values)
    v = values[order].astype(dtype).astype(np.float64)  # ascending
    mids = bv.double().numpy()
    edges = np.array([(j * q) // r for j in range(r + 1)])
    q_neg = int(edges[r_neg])
    n_neg = int(np.searchsorted(v, 0.0, "left"))  # the negatives: a prefix
    ok, bounds, spans = True, [], []
    for run, lo, hi in ((v[:n_neg], 0, q_neg), (v[n_neg:], q_neg, q)):
        if lo < hi:
            if bounds:
                bounds.append(np.zeros(1))  # the zero split
            s, good, open_ = _side_splits(mids[lo:hi], run[_runs(run)[0]], dtype)
            bounds.append(s[1 : hi - lo])
            spans += open_
            ok &= good
    n = len(v)
    # bucket of v = splits at or below it: a split counts for the positions from its left insertion point on
    starts = np.searchsorted(v, np.concatenate(bounds), "left")
    index = np.empty(n, dtype=np.intp)
    index[order] = np.cumsum(np.bincount(starts, minlength=n + 1)[:n])
    group = np.searchsorted(edges, index, "right") - 1
    level = np.where(group < r_neg, edges[group + 1] - 1 - index, index - edges[group])
    unsure_sorted = np.zeros(n, dtype=bool)
    for lo, hi in spans:  # a few ranges at most: the positions of values in [lo, hi)
        unsure_sorted[np.searchsorted(v, lo, "left") : np.searchsorted(v, hi, "left")] = True
    unsure = np.empty(n, dtype=bool)
    unsure[order] = unsure_sorted
    return TrueBuckets(index, group, level, unsure, mids, ok)


def exact_probability(group: np.ndarray, level: np.ndarray, groups: int, columns: np.ndarray, rows: int) -> np.ndarray:
    """Per key, the chance that a MinMaxSketch answers it exactly under independent uniformly random hash
    functions (§3.3): a key with ``m`` keys of strictly smaller level in its group's sketch of ``t`` bins
    per row keeps its own level in one row with probability ``(1 - 1/t)^m`` (insert keeps the minimum),
    and the query (the maximum over the ``s`` rows) is exact when one row is: ``1 - (1 - (1 - 1/t)^m)^s``."""
    if len(level) == 0:
        return np.zeros(0)
    width = int(level.max()) + 1
    counts = np.bincount(group * width + level, minlength=groups * width).reshape(groups, width)
    below = np.cumsum(counts, axis=1) - counts  # keys of the same group with a smaller level
    m = below[group, level]
    one_row = np.power(1.0 - 1.0 / columns[group], m)
    return 1.0 - np.power(1.0 - one_row, rows)


def sketch_columns(counts: np.ndarray, codec) -> np.ndarray:
    """The bins of each group's table by the codec's definition: ``ceil(columns x n_g)`` for a group of
    ``n_g`` keys (the paper's ``t = d / 5`` at ``columns = 0.2``), at least 1. Computed here from the
    configuration, not read from the payload, so that a codec sizing its tables otherwise falls short."""
    return np.array([min(max(math.ceil(codec.columns * c), 1), MAX_COLUMNS) for c in counts.tolist()], dtype=np.float64)


def exact_check(payload: Payload, values: np.ndarray, decoded: np.ndarray, codec, *,
                order: np.ndarray | None = None) -> tuple[float, float, int, int]:
    """``(keys answered exactly, keys the definition answers exactly in expectation, 1 if the payload's
    bucket values were not reproduced else 0, keys left out)`` of one SketchML message (arguments as for
    :func:`rank_check`). A key is answered exactly when its decoded value is its true bucket's value
    (the payload's bucket values at the index :func:`true_buckets` gives); the expectation is the sum of
    :func:`exact_probability` with the configuration's rows and the columns the definition gives each
    group (:func:`sketch_columns`), so a sketch with fewer bins than that, or hashes that spread keys
    worse than random ones, answers fewer keys exactly than expected. Keys whose bucket the payload
    leaves open (values a unit in the last place from a split) are left out of both counts: which of them
    are left out depends on the values and the bucket values only, never on the sketch. ``order``:
    ``argsort(values)`` if known."""
    tb = true_buckets(payload, values, codec, order=order)
    held = ~tb.open
    exact = int(np.count_nonzero((decoded == tb.bucket_values[tb.index]) & held))
    r = int(codec.groups)
    columns = sketch_columns(np.bincount(tb.group, minlength=r), codec)
    expected = float(exact_probability(tb.group, tb.level, r, columns, int(codec.rows))[held].sum())
    return float(exact), expected, 0 if tb.reproduced else 1, int(np.count_nonzero(tb.open))


def message_checks(data: bytes, keys: np.ndarray, values: np.ndarray, dkeys: np.ndarray, dvals: np.ndarray,
                   codec) -> tuple[tuple[float, float], tuple[float, float, int, int]]:
    """Both checks of one SketchML message, :func:`rank_check`'s and :func:`exact_check`'s, on one parse of
    its payload bytes ``data`` and one alignment (:func:`aligned`) of the driver's decode ``dkeys``/``dvals``
    to the true ``keys``/``values`` the worker encoded, and one sort of ``values``; ``codec`` the SketchML codec.
    An empty message gives zeros."""
    if len(values) == 0:
        return (0.0, 0.0), (0.0, 0.0, 0, 0)
    payload, decoded = Payload.from_bytes(data), aligned(keys, dkeys, dvals)
    order = np.argsort(values)
    return (rank_check(payload, values, decoded, codec, order=order),
            exact_check(payload, values, decoded, codec, order=order))
