"""How far a Count Sketch's estimates land from the vector it sketched, against what its definition allows.

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
number). The expectation is over the hash functions, so the vector must not depend on them: a run's own hashes decide what its accumulation keeps (the coordinates they
underestimate are the ones left behind), so the run measures it with a copy of its own codec whose
hashes the run does not use (:meth:`.methods.MethodRun.other_hash_recovery`). Chebyshev's
inequality is loose for sums of many small terms (the share is far below the bound for a working sketch),
while a hash that ignores the coordinate, or a table narrower than its configuration, puts most
estimates beyond ``t``.
"""

from __future__ import annotations

import math

import torch

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


def error_share(estimates: torch.Tensor, x: torch.Tensor, columns: int) -> float:
    """The share of ``x``'s coordinates whose ``estimates`` err by more than ``2 ||x|| / sqrt(columns)``.

    ``columns`` is the sketch's configured width (not read from the sketch, so a table narrower than
    its configuration shows). NaN where ``x`` holds a non-finite value (a diverged accumulation)."""
    if estimates.shape != x.shape:
        raise ValueError(f"estimates {tuple(estimates.shape)} and x {tuple(x.shape)} differ in shape")
    if int(columns) < 1:
        raise ValueError(f"columns must be >= 1, got {columns!r}")
    xd = x.detach().reshape(-1).double()
    if xd.numel() == 0:
        return 0.0
    norm = float(torch.linalg.vector_norm(xd))
    if not math.isfinite(norm):
        return math.nan
    t = ERROR_WIDTHS * norm / math.sqrt(int(columns))
    err = (estimates.detach().reshape(-1).to(xd.device, torch.float64) - xd).abs_()
    return int(torch.count_nonzero(err > t)) / xd.numel()
