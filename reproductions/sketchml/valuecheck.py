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
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gcbench.compressors import Payload

#: SketchML's payload section holding ``[r_neg, n_0, ..., n_{r-1}]`` (see ``compressors/codecs/sketchml/codec.py``).
META_SECTION = 0


def rank_errors(true: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """Per value, the number of ``true`` values strictly between ``true[i]`` and ``decoded[i]`` over ``len(true)``."""
    s = np.sort(true)
    lo_t, hi_t = np.searchsorted(s, true, "left"), np.searchsorted(s, true, "right")
    lo_d, hi_d = np.searchsorted(s, decoded, "left"), np.searchsorted(s, decoded, "right")
    return np.maximum(0, np.maximum(lo_d - hi_t, lo_t - hi_d)) / max(len(s), 1)


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


def message_check(data: bytes, keys: np.ndarray, values: np.ndarray, dkeys: np.ndarray, dvals: np.ndarray,
                  codec) -> tuple[float, float]:
    """``(sum of rank errors, d x bound)`` of one SketchML message: its payload bytes ``data``, the true
    ``keys``/``values`` the worker encoded and the driver's decode ``dkeys``/``dvals``; ``codec`` the
    SketchML codec (its ``buckets``, ``groups``, ``sketch`` and ``k``). Summed over messages, their
    ratio is the pushed values' mean rank error as a share of what the construction allows."""
    d = len(values)
    if d == 0:
        return 0.0, 0.0
    err = float(rank_errors(values, aligned(keys, dkeys, dvals)).sum())
    r = int(codec.groups)
    r_neg = int(Payload.from_bytes(data).sections[META_SECTION][0])  # the groups the payload gives the negatives
    n_neg = int(np.count_nonzero(values < 0))
    bound = mean_rank_bound((n_neg, d - n_neg), (r_neg, r - r_neg), int(codec.buckets), r,
                            sketch_rank_error(codec.sketch, int(codec.k)))
    return err, d * bound
