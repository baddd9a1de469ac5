"""A cluster profile calibrated on the paper's own rows: effective bandwidth β and per-epoch compute C.

The nominal profiles price transfer at the clusters' link speeds (1 and 10 Gbps). The paper's own
Table 4 says its Cluster-2 moved data far slower than that ("more congested than Cluster-1 since
Cluster-2 serves many applications simultaneously", §4.3.1). This module fits the model

    T_m = C + coding_m + bytes_m / β

to paper rows (method ``m``: its run time per epoch ``T_m`` from the paper, ``bytes_m`` the bytes on
the driver's link per epoch and ``coding_m`` the codec seconds on the critical path per epoch, both
*ours*, measured at the paper's message size), by least squares (:func:`scipy.optimize.lsq_linear`,
with ``C >= 0`` and ``1/β >= 0``), and predicts every other row. What it returns is *modelled*: the
fitted β and C, the rows used, the residuals on them and the misfit of every prediction.

The model's ceiling (:func:`speedup_ceiling`): with one ``C`` for every method, SketchML's speed-up over
a method ``m`` is at most ``T_m / (C + bytes_SketchML / β)``, its epoch with its own coding at zero, with
``T_m`` the paper's row of ``m``. The ceiling rests on the fit (C and β from the paper's rows), the
paper's row and SketchML's bytes (the wire format's), not on how fast our SketchML codes, so it says
before any timing whether the model can reach a paper ratio.

The model's test (:func:`passes_held_out`): the misfit of rows held out of the fit, each within a
tolerance of the paper's; a model that fails it cannot tell a predicted ratio inside a claim's band from
one outside.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import lsq_linear


@dataclass(frozen=True)
class Row:
    """One method's data: ``epoch_s`` the paper's run time per epoch (None: not given), ``link_bytes``
    and ``coding_s`` ours, per epoch."""

    method: str
    link_bytes: float
    coding_s: float
    epoch_s: float | None = None


@dataclass(frozen=True)
class Fit:
    """A calibrated profile: ``C`` seconds per epoch, ``beta_Bps`` bytes per second, the rows it was
    fitted on, and per method the predicted epoch seconds and misfit (predicted / paper - 1)."""

    C_s: float
    beta_Bps: float
    fitted_on: tuple[str, ...]
    predicted_s: Mapping[str, float] = field(default_factory=dict)
    misfit: Mapping[str, float] = field(default_factory=dict)

    @property
    def beta_gbps(self) -> float:
        """β in gigabits per second."""
        return self.beta_Bps * 8 / 1e9

    def held_out(self) -> dict[str, float]:
        """Misfit of the rows not used for the fit."""
        return {m: e for m, e in self.misfit.items() if m not in self.fitted_on}

    def as_dict(self) -> dict:
        """JSON-able form."""
        d = asdict(self)
        d["beta_gbps"] = self.beta_gbps
        d["fitted_on"] = list(self.fitted_on)
        return d


def fit(rows: Sequence[Row], on: Sequence[str]) -> Fit:
    """Fit ``C`` and ``β`` on the rows named in ``on`` (each with a paper ``epoch_s``) and predict all rows.

    Raises:
        ValueError: a fit row missing from ``rows``, fewer than two fit rows, a fit row without a paper
            time, or fit rows whose bytes are all equal (β cannot be told from C).
    """
    by = {r.method: r for r in rows}
    missing = [m for m in on if m not in by]
    if missing:
        raise ValueError(f"no data for fit row(s) {missing}")
    used = [by[m] for m in on]
    if len(used) < 2:
        raise ValueError("a fit of C and beta needs at least two rows")
    if any(r.epoch_s is None for r in used):
        raise ValueError("every fit row needs the paper's epoch time")
    if len({r.link_bytes for r in used}) < 2:
        raise ValueError("fit rows with equal bytes cannot separate beta from C")
    scale = max(r.link_bytes for r in used)  # columns of similar size for the solver
    A = np.array([[1.0, r.link_bytes / scale] for r in used])
    b = np.array([float(r.epoch_s) - r.coding_s for r in used])  # type: ignore[arg-type]
    sol = lsq_linear(A, b, bounds=([0.0, 0.0], [np.inf, np.inf]), method="bvls")
    C, inv = float(sol.x[0]), float(sol.x[1]) / scale
    beta = 1.0 / inv if inv > 0 else np.inf
    predicted = {r.method: C + r.coding_s + r.link_bytes * inv for r in rows}
    misfit = {r.method: predicted[r.method] / r.epoch_s - 1.0 for r in rows if r.epoch_s}
    return Fit(C, float(beta), tuple(on), predicted, misfit)


def speedup_ceiling(f: Fit, rows: Sequence[Row], over: str, of: str = "sketchml") -> float:
    """The most the fitted model lets ``of`` be faster than ``over``: ``over``'s epoch **as the paper gives
    it** (its row's ``epoch_s``; the model's prediction only for a method without a paper row) over ``of``'s
    epoch with its coding at zero, ``C + bytes_of / β`` (``inf`` where that floor is 0).

    The paper's row, not the prediction: the question is whether the model can place ``of``'s epoch where
    the paper's ratio puts it against the paper's own ``over`` epoch. A prediction of ``over`` that the
    model gets wrong (e.g. twice the paper's) would move the ceiling by that error and let a band look
    reachable that the paper's rows put out of reach."""
    by = {r.method: r for r in rows}
    floor = f.C_s + (by[of].link_bytes / f.beta_Bps if math.isfinite(f.beta_Bps) and f.beta_Bps > 0 else 0.0)
    top = by[over].epoch_s if over in by and by[over].epoch_s is not None else f.predicted_s[over]
    return top / floor if floor > 0 else math.inf


def passes_held_out(f: Fit, test_rows: Sequence[str], tolerance: float) -> bool | None:
    """The model's test: every row of ``test_rows`` (held out of the fit, each with a paper time) predicted
    within ``tolerance`` of the paper's (``|misfit| <= tolerance``); None where a row has no misfit.

    Raises:
        ValueError: a row of ``test_rows`` is one the fit was fitted on (it would not be held out).
    """
    if any(m in f.fitted_on for m in test_rows):
        raise ValueError(f"test rows {list(test_rows)} overlap the fit's rows {list(f.fitted_on)}")
    errors = [f.misfit.get(m) for m in test_rows]
    if not errors or any(e is None for e in errors):
        return None
    return all(abs(e) <= tolerance for e in errors)  # type: ignore[arg-type]
