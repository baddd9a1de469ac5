"""How far a Count Sketch's estimates land from the vector it sketched, against what its definition allows,
and whether its hashes have the properties that bound assumes.

Sketched-SGD's candidates (Algorithm 2, line 8) are the coordinates with the largest estimates of a
Count Sketch of the workers' summed error accumulation (§3; the slides' "Count Sketch" and
"Mergeability"). The premise of the method is that those estimates are close to the true values. This
module measures that on the accumulations a run really selects from, against a bound that follows from
the Count Sketch's definition alone, whatever the vector:

* row ``j`` adds ``s_j(l) x_l`` into bucket ``h_j(l)`` for every coordinate ``l`` and estimates ``x_i`` by
  ``s_j(i) T_j[h_j(i)]``, so its error is ``sum_{l != i, h_j(l) = h_j(i)} s_j(i) s_j(l) x_l``. With the
  bucket hash pairwise independent (``((a i + b) mod p) mod c`` collides with probability ``1 / c`` up to
  ``O(1 / p^2)``, ``p = 2^61 - 1``) and the signs pairwise independent of each other and of the buckets
  (a parity of a uniform value mod an odd ``p``: mean ``-1 / p``), the error has mean 0 and variance
  ``sum_{l != i} x_l^2 / c <= ||x||^2 / c``, both up to terms of order ``1 / p``, far below float
  precision;
* by Chebyshev's inequality a row errs by more than ``t = 2 ||x|| / sqrt(c)`` with probability at most
  ``(||x||^2 / c) / t^2 = 1/4``;
* the estimate is the median over ``r`` rows with independent hashes: for it to err by more than ``t``, at
  least ``ceil(r / 2)`` rows must (all on the same side), so a coordinate's estimate errs by more than
  ``t`` with probability at most ``P(Binomial(r, 1/4) >= ceil(r / 2))`` (:func:`error_bound`: 0.1035 for
  the paper's ``r = 5``).

So over any vector, the expected share of coordinates whose estimate errs by more than ``t``
(:func:`error_share`) is at most that bound (derived here from the definition; the paper prints no such
number). A non-finite estimate of a finite vector errs by more than any width, and is counted so.

The bound holds for each coordinate whatever its own value (its estimate's error is a sum over the
*other* coordinates in its buckets), so it holds as well over any set of coordinates chosen from the
vector alone: over the *large* ones, ``|x_i| > t`` (:func:`large_errors`), the expected share estimated
more than ``t`` away is at most the same bound. That share is what tells a sketch that estimates from
one that estimates nothing: an estimate of 0 (or any constant near it) errs by ``|x_i| > t`` at every
large coordinate, a share of 1, while over all coordinates it errs only at the large ones, at most
``||x||^2 / t^2 = c / 4`` of the ``d``, a share the bound over all coordinates cannot see. The expectation is over the hash functions, so the vector must not depend on them: a run's own hashes decide what its accumulation keeps (the coordinates they
underestimate are the ones left behind), so the run measures it with a copy of its own codec whose
hashes the run does not use (:meth:`.methods.MethodRun.other_hash_recovery`). Chebyshev's
inequality is loose for sums of many small terms (the share is far below the bound for a working sketch),
while a hash that ignores the coordinate, or a table narrower than its configuration, puts most
estimates beyond ``t``.

Two breakages leave that share small, because a gradient accumulation's coordinates take both signs:
rows that share one hash (the median of equal rows is one row) and signs that do not vary. The
bound assumes neither, so the run's own hashes are checked against the properties it rests on
(:func:`hash_statistics`), each a count whose mean and variance the hash family fixes:

* a row's signs sum to ``Z = sum_l s_j(l)``: mean 0, variance ``d`` (pairwise-independent signs);
* two rows' buckets agree at ``M = #{l : h_i(l) = h_j(l)}`` coordinates: for independent rows with
  pairwise-independent buckets the events are pairwise independent with probability ``q = 1 / c``, so
  ``M`` has mean ``d q`` and variance ``d q (1 - q)``;
* two rows' signs agree at ``A = #{l : s_i(l) = s_j(l)}`` coordinates: mean ``d / 2``, variance ``d / 4``.

(All up to terms of order ``c / p``.) Each is taken as its distance from its mean in standard
deviations; by Chebyshev's inequality a working family puts one beyond ``HASH_WIDTHS = 50`` with
probability at most ``1 / 2500`` over its random coefficients, so any of a sketch's ``r + r (r - 1)``
with probability at most :func:`hash_false_alarm` (1% for ``r = 5``; per sketch: a check of ``n``
sketches at most ``n`` times that). Rows that share their buckets agree at every coordinate
(``sqrt(d (c - 1))`` deviations); rows that share their signs agree in sign at every coordinate, and
signs that are all equal sum to ``d`` (``sqrt(d)`` each, beyond the width only where
``d > HASH_WIDTHS^2 = 2500``). The statistics are counted on the codes rebuilt from the hash tables
the sketch accumulates and estimates with (:func:`sketch_code_blocks`), block by block.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import torch
from gcbench.compressors.codecs.countsketch.codec import CountSketch

#: How many standard deviations from its mean a hash statistic may lie (:func:`hash_statistics`).
HASH_WIDTHS = 50.0

#: Chebyshev's bound on one row's chance to err by more than ``ERROR_WIDTHS * ||x|| / sqrt(c)``: ``1 / ERROR_WIDTHS^2``.
ERROR_WIDTHS = 2.0


def row_error_probability() -> float:
    """Chebyshev's bound on one row erring by more than ``ERROR_WIDTHS`` standard deviations' worth: 1/4."""
    return 1.0 / ERROR_WIDTHS**2


def error_bound(rows: int) -> float:
    """``P(Binomial(rows, 1/4) >= ceil(rows / 2))``: the most a coordinate's median-of-rows estimate errs by
    more than ``2 ||x|| / sqrt(c)``, over independent pairwise-independent hashes (module docstring)."""
    r = int(rows)
    if r < 1:
        raise ValueError(f"rows must be >= 1, got {rows!r}")
    p = row_error_probability()
    need = math.ceil(r / 2)
    return sum(math.comb(r, j) * p**j * (1 - p) ** (r - j) for j in range(need, r + 1))


def estimate_misses(estimates: torch.Tensor, x: torch.Tensor, columns: int) -> tuple[float, tuple[int, int] | None]:
    """``(share, (beyond, large))`` in one pass over ``x``'s coordinates, with ``t = 2 ||x|| / sqrt(columns)``:
    the share of them whose ``estimates`` err by more than ``t`` (:func:`error_share`), and how many exceed
    ``t`` in absolute value (``large``) and at how many of those the estimates err by more than ``t``
    (``beyond``, :func:`large_errors`). A non-finite estimate is beyond any width. ``(nan, None)`` where
    ``x`` holds a non-finite value (a diverged accumulation).

    ``columns`` is the sketch's configured width (not read from the sketch, so a table narrower than
    its configuration shows)."""
    if estimates.shape != x.shape:
        raise ValueError(f"estimates {tuple(estimates.shape)} and x {tuple(x.shape)} differ in shape")
    if int(columns) < 1:
        raise ValueError(f"columns must be >= 1, got {columns!r}")
    xd = x.detach().reshape(-1).double()
    norm = float(torch.linalg.vector_norm(xd))  # 0 for an empty vector
    if not math.isfinite(norm):
        return math.nan, None
    t = ERROR_WIDTHS * norm / math.sqrt(int(columns))
    err = (estimates.detach().reshape(-1).to(xd.device, torch.float64) - xd).abs_()
    missed, large = ~(err <= t), xd.abs() > t
    share = int(torch.count_nonzero(missed)) / xd.numel() if xd.numel() else 0.0
    return share, (int(torch.count_nonzero(missed & large)), int(torch.count_nonzero(large)))


def error_share(estimates: torch.Tensor, x: torch.Tensor, columns: int) -> float:
    """The share of ``x``'s coordinates whose ``estimates`` err by more than ``2 ||x|| / sqrt(columns)``
    (:func:`estimate_misses`); NaN where ``x`` holds a non-finite value."""
    return estimate_misses(estimates, x, columns)[0]


def large_errors(estimates: torch.Tensor, x: torch.Tensor, columns: int) -> tuple[int, int] | None:
    """``(beyond, large)``: how many of ``x``'s coordinates exceed ``t = 2 ||x|| / sqrt(columns)`` in
    absolute value (``large``), and at how many of those the ``estimates`` err by more than ``t``
    (``beyond``; a non-finite estimate counts; :func:`estimate_misses`). The expected ``beyond / large``
    is at most :func:`error_bound` too (module docstring). None where ``x`` holds a non-finite value."""
    return estimate_misses(estimates, x, columns)[1]


def hash_statistics(blocks: Iterable[torch.Tensor], columns: int) -> dict[str, float]:
    """How far a Count Sketch's hashes lie from the properties its bound assumes (module docstring).

    ``blocks``: the sketch's codes ``2 * bucket + (sign < 0)`` as ``(r, n)`` integer blocks that together
    cover its ``d`` coordinates once (:func:`sketch_code_blocks`, or one ``(r, d)`` tensor in a list);
    ``columns``: its width ``c``. Returns, each as the largest distance from its mean in standard
    deviations: ``sign_balance`` (over the rows, ``|Z| / sqrt(d)``), ``bucket_agreement`` and
    ``sign_agreement`` (over the pairs of rows; bucket agreement is not measured with one column, where
    every row has one bucket), and ``largest``, the largest of the three. Counts only: memory is a few
    copies of one block.

    A breakage that makes a count ``d`` (signs all equal, two rows' signs equal) lies ``sqrt(d)``
    standard deviations out, so it passes ``HASH_WIDTHS`` for ``d <= HASH_WIDTHS^2`` (2,500 coordinates)."""
    c = int(columns)
    if c < 1:
        raise ValueError(f"columns must be >= 1, got {columns!r}")
    r = d = 0
    negatives: list[int] = []
    buckets_equal: dict[tuple[int, int], int] = {}
    signs_differ: dict[tuple[int, int], int] = {}
    for codes in blocks:
        if codes.dim() != 2 or codes.dtype not in (torch.int32, torch.int64) or codes.shape[0] < 1:
            raise ValueError(f"codes must be (r, n) integer blocks with r >= 1, got {tuple(codes.shape)} {codes.dtype}")
        if not negatives:
            r = codes.shape[0]
            negatives = [0] * r
            buckets_equal = {(i, j): 0 for i in range(r) for j in range(i + 1, r)}
            signs_differ = dict(buckets_equal)
        elif codes.shape[0] != r:
            raise ValueError(f"every block must hold the same {r} rows, got {codes.shape[0]}")
        d += codes.shape[1]
        buckets, negative = codes >> 1, codes & 1  # once per block, not once per pair of rows
        for i in range(r):
            negatives[i] += int(torch.count_nonzero(negative[i]))
            for j in range(i + 1, r):
                if c > 1:
                    buckets_equal[i, j] += int(torch.count_nonzero(buckets[i] == buckets[j]))
                signs_differ[i, j] += int(torch.count_nonzero(negative[i] != negative[j]))
    if d == 0:
        raise ValueError("codes of an empty vector have no statistics")
    q = 1.0 / c
    out = {"sign_balance": max(abs(d - 2 * n) for n in negatives) / math.sqrt(d),
           "bucket_agreement": max((abs(m - d * q) / math.sqrt(d * q * (1 - q)) for m in buckets_equal.values()),
                                   default=0.0) if c > 1 else 0.0,
           "sign_agreement": max((abs(d - n - d / 2) / math.sqrt(d / 4) for n in signs_differ.values()), default=0.0)}
    out["largest"] = max(out.values())
    return out


def sketch_code_blocks(sketch: CountSketch, block: int = 1 << 20) -> Iterator[torch.Tensor]:
    """A Count Sketch's codes, ``block`` coordinates at a time, rebuilt from the hash tables its
    accumulation and estimates use (:attr:`~gcbench.compressors.codecs.countsketch.codec.CountSketch.tables`:
    its bucket tables and packed sign bits), on the sketch's device."""
    tables = sketch.tables
    for start in range(0, sketch.d, int(block)):
        yield tables.codes(0, sketch.r, start, min(sketch.d, start + int(block)))


def hash_false_alarm(rows: int) -> float:
    """The most often a working hash family puts any of a sketch's ``r + r (r - 1)`` statistics beyond
    ``HASH_WIDTHS`` standard deviations: ``(r + r (r - 1)) / HASH_WIDTHS^2`` (Chebyshev, union bound)."""
    r = int(rows)
    if r < 1:
        raise ValueError(f"rows must be >= 1, got {rows!r}")
    return (r + r * (r - 1)) / HASH_WIDTHS**2
