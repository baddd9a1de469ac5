"""Algorithm 1 of L-GreCo: the error budget, its discretisation, the dynamic programme, reconstruction.

The problem (L-GreCo Sec. 3, "constrained optimisation problem", Eq. 3)::

    minimise   sum_l size(l, c_l)     subject to   sum_l error(l, c_l) <= E_max

with ``error(l, c)`` the L2 norm of layer ``l``'s compression error at parameter ``c`` and
``size(l, c)`` its transmission cost (bytes; or bytes x a per-bucket time coefficient, Sec. 4).

The errors summed are the layers' L2 norms, not their squares, as Sec. 3 defines ``error(l, c)`` ("the
L2 norm of the compression error"), Algorithm 1 line 5 discretises "the L2 value" of each error,
Appendix B.1 computes PowerSGD's ``e_r = sqrt(sum_{i>r} sigma_i^2)`` and the public code sums these
per-layer norms into its budget; the paper's wording elsewhere speaks of the squared L2 error (Sec. 3's
motivation; Sec. 4: "the squared L2 error is not discrete"), a sum of squares that gcbench does not use
(:mod:`gcbench.compressors.adaptive.tables` measures the norms).

* **Budget** (Sec. 3 "error bound", Algorithm 1 line 2): ``E_max = alpha * sum_l error(l, c_d)``,
  the summed error of a reference setting ``c_d`` known to keep accuracy (the uniform default;
  per layer with Accordion, Sec. 5.3); ``alpha = 1`` in the public code.
* **Discretisation** (Sec. 4 "we use D = 10000 as the discretisation factor, i.e. steps of size
  E_max / D"; Algorithm 1 lines 3 and 5): the error axis is cut in ``D`` cells of
  ``step = E_max / D`` and each error becomes an integer number of cells. The paper does not say
  how errors are rounded; the public code (``lgreco_hook.py``) takes
  ``min(max(ceil(E / step), 1), D)``. gcbench rounds **up** by default (``rounding="ceil"``):
  ``sum_l ceil(E_l / step) <= D`` implies ``sum_l E_l <= E_max``, so the chosen setting never
  exceeds the real budget. ``"round"`` and ``"floor"`` are available (then the real error can
  exceed ``E_max`` by up to ``L/2`` or ``L`` cells). Deviations from the public code, on purpose:
  an error of exactly 0 (lossless candidates, PowerSGD layers sent uncompressed) stays 0 cells
  (the code's ``max(., 1)`` avoids a numpy ``a[:-0]`` slicing bug), and an error above ``E_max``
  is infeasible (the code clamps it to ``D`` cells, making it silently affordable). A relative
  tolerance of 1e-9 absorbs float noise in ``E / step`` (so a uniform setting whose errors are
  exact multiples of ``step`` keeps its ``D`` cells).
* **DP** (Algorithm 1 lines 6-24): ``DP[l][e]`` = least total cost of layers ``1..l`` whose
  discretised errors sum to exactly ``e`` (``0 <= e <= D``); ``DP[l][e] = min_c DP[l-1][e - d(l,
  c)] + C(l, c)``, ``PD[l][e]`` = the minimising ``c``. Vectorised over the error axis: per layer
  one ``(K, D + 1)`` array of shifted copies of ``DP[l-1]`` and one ``min``/``argmin`` over the
  candidates. Ties go to the lowest candidate index, as the paper's strict ``t < DP[l][e]`` in
  candidate order does. ``O(L K D)`` time, ``O(L D)`` memory for ``PD``.
* **Reconstruction** (lines 25-30): ``e* = argmin_e DP[L][e]`` (the first, i.e. least error, among
  equal costs), then walk back ``c_l = PD[l][e]``, ``e -= d(l, c_l)``.

``fallback_to_reference`` (default on, gcbench's guard, not in the paper): ceil-rounding can push
the uniform setting itself just past ``D`` cells, so the DP could in rare cases return something
costlier than the reference; when the reference really fits the budget and is cheaper (or the DP
finds nothing), it is returned instead and the result says so. Turn it off for Algorithm 1 alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidParameterError

ROUNDINGS = ("ceil", "round", "floor")
#: Relative tolerance on ``E / step`` before rounding (float noise, see the module docstring).
REL_TOL = 1e-9
#: Default number of discretisation cells (L-GreCo Sec. 4, public code ``DPBUCKETS``).
DEFAULT_D = 10000
#: The most cells :func:`discretise` and :func:`solve_dp` take (100 times the paper's ``D``), and the
#: most entries of the DP's ``(L, D + 1)`` choice table (2**28: 512 MiB of int16): beyond them the DP's
#: memory, ``O(L D)``, would not be bounded.
MAX_D = 1_000_000
MAX_TABLE = 1 << 28


def check_cells(D: object, layers: int = 1) -> int:
    """``D`` as an int in ``1..MAX_D`` whose ``layers x (D + 1)`` table fits :data:`MAX_TABLE`, or
    :class:`~gcbench.compressors.errors.InvalidParameterError`."""
    if not isinstance(D, int) or isinstance(D, bool) or not 1 <= D <= MAX_D:
        raise InvalidParameterError(f"D must be an int in 1..{MAX_D}, got {D!r}")
    if layers * (D + 1) > MAX_TABLE:
        raise InvalidParameterError(f"{layers} layers x {D + 1} cells exceed the DP table's {MAX_TABLE} entries; use a smaller D")
    return D


def _as_tables(errors: np.ndarray, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    e = np.asarray(errors, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    if e.ndim != 2 or e.shape != c.shape or e.shape[1] == 0:
        raise InvalidParameterError(
            f"errors and costs must be (layers, candidates) tables of one shape, got {e.shape}, {c.shape}"
        )
    return e, c


def reference_vector(reference: int | Sequence[int], layers: int, candidates: int) -> np.ndarray:
    """Per-layer reference candidate indexes from one index (uniform) or one per layer."""
    ref = (
        np.full(layers, int(reference), dtype=np.int64)
        if np.ndim(reference) == 0
        else np.asarray(reference, dtype=np.int64)
    )
    if ref.shape != (layers,) or (layers and (ref.min() < 0 or ref.max() >= candidates)):
        raise InvalidParameterError(f"reference must be one index or {layers} indexes in 0..{candidates - 1}")
    return ref


def error_budget(errors: np.ndarray, reference: int | Sequence[int], alpha: float = 1.0) -> float:
    """``E_max = alpha * sum_l errors[l, ref_l]`` (Algorithm 1 line 2)."""
    e = np.asarray(errors, dtype=np.float64)
    ref = reference_vector(reference, e.shape[0], e.shape[1])
    if not (math.isfinite(alpha) and alpha > 0):
        raise InvalidParameterError(f"alpha must be positive and finite, got {alpha}")
    return float(alpha * e[np.arange(e.shape[0]), ref].sum())


def discretise(errors: np.ndarray, budget: float, D: int = DEFAULT_D, rounding: str = "ceil") -> np.ndarray:
    """Errors in cells of ``budget / D`` (Algorithm 1 lines 3, 5); ``D + 1`` marks "infeasible".

    ``ceil`` (default) guarantees ``sum cells <= D  =>  sum errors <= budget`` (up to ``L * REL_TOL``
    relative, for ``L`` layers: each layer's cells may fall short by up to ``REL_TOL * D``).
    Errors above the budget, and non-finite errors, become ``D + 1``. A zero budget leaves only the
    zero-error candidates feasible, and so does a non-finite one (a reference whose error overflowed
    bounds nothing: no cell size can be derived from it).
    """
    if rounding not in ROUNDINGS:
        raise InvalidParameterError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    check_cells(D)
    e = np.asarray(errors, dtype=np.float64)
    if np.any(e < 0):
        raise InvalidParameterError("errors must be non-negative")
    finite = np.isfinite(e)
    if not (budget > 0 and math.isfinite(budget)):
        return np.where(finite & (e == 0), 0, D + 1).astype(np.int64)
    # A budget near the smallest float makes e / budget overflow to inf: that error is infeasible,
    # and the clip below maps inf to D + 1, so the overflow is expected, not a fault.
    with np.errstate(over="ignore"):
        x = np.where(finite, e, 0.0) / budget * D
    if rounding == "ceil":
        cells = np.ceil(x - REL_TOL * D)
    elif rounding == "round":
        cells = np.floor(x + 0.5)
    else:
        cells = np.floor(x + REL_TOL * D)
    cells = np.clip(cells, 0, D + 1)
    return np.where(finite & (cells <= D), cells, D + 1).astype(np.int64)


def solve_dp(cells: np.ndarray, costs: np.ndarray, D: int = DEFAULT_D) -> tuple[np.ndarray | None, float, int]:
    """Algorithm 1 lines 6-30 on discretised errors: least total cost with ``sum cells <= D``.

    Args:
        cells: ``(L, K)`` integer errors (``> D`` = infeasible candidate).
        costs: ``(L, K)`` costs (non-finite = infeasible candidate).
        D: number of cells of the budget.

    Returns:
        ``(choice, cost, cells_used)``: the per-layer candidate indexes, their total cost and total
        cells; ``(None, inf, -1)`` when no setting fits.
    """
    raw = np.asarray(cells)
    c = np.asarray(costs, dtype=np.float64)
    if raw.ndim != 2 or raw.shape != c.shape:
        raise InvalidParameterError("cells and costs must be (layers, candidates) tables of one shape")
    if raw.dtype.kind not in "iu" and raw.size:
        raise InvalidParameterError(f"cells must be an integer table, got dtype {raw.dtype}")
    if raw.size and raw.min() < 0:
        raise InvalidParameterError(f"cells must be non-negative, got {raw.min()}")
    d = raw.astype(np.int64)
    L, K = d.shape
    check_cells(D, L)
    if L == 0:
        return np.zeros(0, dtype=np.int64), 0.0, 0
    width = D + 1
    pd_dtype = np.int16 if K < 2**15 else np.int32
    PD = np.zeros((L, width), dtype=pd_dtype)
    prev = np.full(width, np.inf)
    prev[0] = 0.0  # zero layers: error 0 at cost 0 (lines 9-11 are this row's first transition)
    shifted = np.empty((K, width))
    for l in range(L):
        shifted.fill(np.inf)
        for j in range(K):
            dj, cj = int(d[l, j]), c[l, j]
            if dj > D or not math.isfinite(cj):
                continue
            # line 17: t = DP[l-1][e - d(l, j)] + C(l, j) for every e >= d(l, j), at once
            np.add(prev[: width - dj], cj, out=shifted[j, dj:])
        PD[l] = np.argmin(shifted, axis=0)  # first minimum: the lowest index wins ties (line 18's strict <)
        prev = shifted[PD[l], np.arange(width)]
    if not np.isfinite(prev).any():
        return None, math.inf, -1
    e = int(np.argmin(prev))  # line 25
    total, used = float(prev[e]), e
    choice = np.zeros(L, dtype=np.int64)
    for l in range(L - 1, -1, -1):  # lines 27-30
        j = int(PD[l, e])
        choice[l] = j
        e -= int(d[l, j])
    assert e == 0, "DP reconstruction must end at zero error"
    return choice, total, used


@dataclass
class LGreCoResult:
    """Outcome of one L-GreCo decision.

    Attributes:
        choice: per-layer candidate index.
        cost: total objective cost of ``choice`` (bytes, or modelled seconds).
        error: total real (undiscretised) error of ``choice``.
        budget: ``E_max``.
        cells: discretised error of ``choice`` (``<= D`` unless it is the reference fallback).
        D: number of cells.
        feasible: some setting fits the budget (``False`` when none does: ``alpha < 1`` makes even
            the reference too costly in error, or the reference's error is not finite and not every
            layer has a zero-error candidate; ``choice`` is then the reference).
        fallback: the reference was returned instead of the DP's choice (see the module docstring).
        reference: per-layer reference indexes; ``reference_cost``/``reference_error`` its totals.
        seconds: wall time of discretisation + DP + reconstruction.
    """

    choice: np.ndarray
    cost: float
    error: float
    budget: float
    cells: int
    D: int
    feasible: bool
    fallback: bool
    reference: np.ndarray
    reference_cost: float
    reference_error: float
    seconds: float


def lgreco(
    errors: np.ndarray,
    costs: np.ndarray,
    reference: int | Sequence[int],
    *,
    alpha: float = 1.0,
    D: int = DEFAULT_D,
    rounding: str = "ceil",
    fallback_to_reference: bool = True,
) -> LGreCoResult:
    """Algorithm 1: the per-layer parameters of least total cost within the reference's error budget.

    Args:
        errors: ``(L, K)`` error table ``E[l][j]``.
        costs: ``(L, K)`` cost table ``C[l][j]`` (bytes, or any additive objective).
        reference: the uniform default's candidate index, or one index per layer.
        alpha: budget multiplier (``E_max = alpha * reference error``).
        D: discretisation cells (10000).
        rounding: ``"ceil"`` (never exceeds the budget), ``"round"`` or ``"floor"``.
        fallback_to_reference: return the reference when it fits and the DP's choice costs more.
    """
    t0 = time.perf_counter()
    e, c = _as_tables(errors, costs)
    L, K = e.shape
    ref = reference_vector(reference, L, K)
    budget = error_budget(e, ref, alpha)
    cells = discretise(e, budget, D, rounding)
    choice, cost, used = solve_dp(cells, c, D)
    rows = np.arange(L)
    ref_cost = float(c[rows, ref].sum())
    ref_error = float(e[rows, ref].sum())
    ref_fits = math.isfinite(budget) and ref_error <= budget * (1 + REL_TOL)
    feasible, fallback = choice is not None, False
    if fallback_to_reference and ref_fits and (choice is None or ref_cost < cost):
        choice, cost, used, fallback, feasible = ref.copy(), ref_cost, int(cells[rows, ref].sum()), True, True
    if choice is None:
        choice, cost, used = ref.copy(), ref_cost, int(cells[rows, ref].sum())
    return LGreCoResult(
        choice=choice,
        cost=float(cost),
        error=float(e[rows, choice].sum()),
        budget=budget,
        cells=int(used),
        D=D,
        feasible=feasible,
        fallback=fallback,
        reference=ref,
        reference_cost=ref_cost,
        reference_error=ref_error,
        seconds=time.perf_counter() - t0,
    )
