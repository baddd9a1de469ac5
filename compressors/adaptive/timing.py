"""Time-aware objectives (L-GreCo Sec. 4, Sec. 5.6, Appendix A) and the overhead of Table 1.

* **Time objective** (Sec. 4 "time optimisation"; Sec. 5.6): DDP overlaps early buckets'
  communication with the backward pass, so bytes in different buckets cost different time. The
  paper measures the gradient synchronisation time for various per-bucket compression ratios
  (50 steps, 5 warm-up steps per setting), fits a linear regression of sync time on the bytes
  sent per bucket, and uses the per-bucket coefficients ``T(b)``: the objective becomes
  ``sum_l size(l, c_l) * T(bucket(l))``. :func:`fit_bucket_coefficients` is that regression
  (``seconds ~ intercept + sum_b T_b * bytes_b``, non-negative least squares so that no bucket
  gets a negative price); :func:`fit_linear` is the one-bucket case (``seconds ~ a * bytes + b``);
  :func:`time_costs` turns a byte table into a time table.
* **Bucket priority** (Appendix A): "a linear priority for the layers in Algorithm 1, multiplying
  the size of each layer by the index of the bucket the layer is communicated in", so that the
  last buckets in transmission order (the model's first layers) are compressed more. A 0-based
  index would make bucket 0 free, so gcbench multiplies by the 1-based transmission position
  ``bucket + 1`` (DDP's bucket 0 is sent first). The paper found it worse than plain L-GreCo.
* **Overhead** (Table 1): the time of the error computation and of the DP per decision, as a
  fraction of training time (``every`` steps of ``step_time`` plus the overhead itself).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidParameterError


@dataclass(frozen=True)
class LinearFit:
    """``seconds = slope * bytes + intercept`` by least squares; ``r2`` its coefficient of determination."""

    slope: float
    intercept: float
    r2: float
    samples: int

    def predict(self, nbytes: float | np.ndarray) -> float | np.ndarray:
        """Modelled seconds for ``nbytes``."""
        return self.slope * np.asarray(nbytes, dtype=np.float64) + self.intercept


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - pred) ** 2).sum())
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)


def fit_linear(nbytes: Sequence[float], seconds: Sequence[float]) -> LinearFit:
    """Least-squares line through ``(bytes, seconds)`` samples (at least two distinct sizes)."""
    x = np.asarray(nbytes, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or np.unique(x).size < 2:
        raise InvalidParameterError("fit_linear needs matching 1-D samples with at least two distinct sizes")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InvalidParameterError("samples must be finite")
    a, b = np.polyfit(x, y, 1)
    return LinearFit(float(a), float(b), _r2(y, a * x + b), int(x.size))


def fit_bucket_coefficients(
    bucket_bytes: np.ndarray, seconds: Sequence[float], *, nonnegative: bool = True
) -> tuple[np.ndarray, float, float]:
    """Per-bucket time coefficients ``T_b`` from ``seconds ~ intercept + sum_b T_b * bytes_b``.

    Args:
        bucket_bytes: ``(samples, buckets)`` bytes sent per bucket in each measured step.
        seconds: ``(samples,)`` measured gradient synchronisation time of each step.
        nonnegative: solve by non-negative least squares (``scipy.optimize.nnls``), else plain
            least squares.

    Returns:
        ``(T (buckets,), intercept, r2)``.
    """
    X = np.asarray(bucket_bytes, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],) or X.shape[0] < X.shape[1] + 1:
        raise InvalidParameterError("need (samples, buckets) bytes with samples >= buckets + 1 and one time per sample")
    # scale columns for conditioning (bytes ~ 1e6, seconds ~ 1e-3)
    scale = np.where(X.max(0) > 0, X.max(0), 1.0)
    A = np.hstack([X / scale, np.ones((X.shape[0], 1))])
    if nonnegative:
        from scipy.optimize import nnls

        coef, _ = nnls(A, y)
    else:
        coef = np.linalg.lstsq(A, y, rcond=None)[0]
    T = coef[:-1] / scale
    return T, float(coef[-1]), _r2(y, A @ coef)


def _bucket_index(layer_bucket: Sequence[int], layers: int) -> np.ndarray:
    b = np.asarray(layer_bucket, dtype=np.int64)
    if b.shape != (layers,) or (layers and b.min() < 0):
        raise InvalidParameterError(f"layer_bucket must hold one non-negative bucket index per layer ({layers})")
    return b


def time_costs(costs: np.ndarray, layer_bucket: Sequence[int], coefficients: Sequence[float]) -> np.ndarray:
    """``size(l, c) * T(bucket(l))``: the cost table of the time objective (Sec. 4)."""
    c = np.asarray(costs, dtype=np.float64)
    b = _bucket_index(layer_bucket, c.shape[0])
    T = np.asarray(coefficients, dtype=np.float64)
    if b.size and b.max() >= T.size:
        raise InvalidParameterError("a layer's bucket has no coefficient")
    return c * T[b][:, None]


def bucket_priority_costs(costs: np.ndarray, layer_bucket: Sequence[int]) -> np.ndarray:
    """``size(l, c) * (bucket(l) + 1)``: Appendix A's linear bucket priority."""
    c = np.asarray(costs, dtype=np.float64)
    b = _bucket_index(layer_bucket, c.shape[0])
    return c * (b + 1)[:, None]


@dataclass(frozen=True)
class Overhead:
    """Per-decision overhead as fractions of training time (Table 1: total [error computation]).

    ``fraction`` = (tables + dp + accumulate) / (every * step_time + tables + dp + accumulate).
    """

    tables_s: float
    dp_s: float
    accumulate_s: float
    step_time_s: float
    every: int

    @property
    def total_s(self) -> float:
        return self.tables_s + self.dp_s + self.accumulate_s

    @property
    def period_s(self) -> float:
        """Training time of one decision period including the overhead."""
        return self.every * self.step_time_s + self.total_s

    @property
    def fraction(self) -> float:
        return self.total_s / self.period_s

    @property
    def error_fraction(self) -> float:
        """The bracketed number of Table 1: error computation (tables + accumulation)."""
        return (self.tables_s + self.accumulate_s) / self.period_s

    @property
    def dp_fraction(self) -> float:
        return self.dp_s / self.period_s

    def as_dict(self) -> dict[str, float]:
        return {
            "tables_s": self.tables_s,
            "dp_s": self.dp_s,
            "accumulate_s": self.accumulate_s,
            "step_time_s": self.step_time_s,
            "every": self.every,
            "fraction": self.fraction,
            "error_fraction": self.error_fraction,
            "dp_fraction": self.dp_fraction,
        }


def overhead(tables_s: float, dp_s: float, step_time_s: float, every: int, accumulate_s: float = 0.0) -> Overhead:
    """Overhead of one decision every ``every`` steps of ``step_time_s`` seconds (Table 1)."""
    vals = (tables_s, dp_s, step_time_s, accumulate_s)
    if not all(math.isfinite(v) and v >= 0 for v in vals) or step_time_s <= 0 or every < 1:
        raise InvalidParameterError("times must be finite and non-negative, step_time_s > 0, every >= 1")
    return Overhead(float(tables_s), float(dp_s), float(accumulate_s), float(step_time_s), int(every))


def measure_overhead(
    ladder,
    grads,
    step_time_s: float,
    every: int,
    *,
    error_method: str | None = None,
    D: int = 10000,
    alpha: float = 1.0,
) -> tuple[Overhead, object, object]:
    """Time one decision (error/cost tables, then the DP) on ``grads`` and express it as Table 1 does.

    Returns ``(Overhead, Tables, LGreCoResult)``.
    """
    from .dp import lgreco
    from .tables import measure_tables

    tables = measure_tables(ladder, grads, error_method=error_method)
    result = lgreco(tables.errors, tables.costs, ladder.reference_index, alpha=alpha, D=D)
    return overhead(tables.seconds, result.seconds, step_time_s, every), tables, result
