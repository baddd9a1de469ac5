"""Whether a run's training has settled enough to test a claim about its final metric.

A paper's parity claims (a compressed training ends within a few percent of a reference's held-out
metric) are about finished trainings, where the metric hardly moves any more. A run of a few hundred
steps compares the methods at equal steps; where the reference training's metric still falls by more
than the claim's tolerance within the run's last window, two methods differ there by how fast they
progress as much as by where they would end, and the run cannot test the claim.

:func:`window_fall` measures that fall on the per-step training losses of the reference training's
seeds; :func:`claims_bound` reads the tolerance of the claims that name a flag as their ``testable``,
so the flag's bound and the claims' tolerance are one number; :func:`settled` is the flag; and
:func:`fall_text` says it in a report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .spec import Spec

#: The share of a run's steps in each of the two windows that :func:`window_fall` compares: the last
#: tenth of the training against the tenth before it.
SETTLED_SHARE = 0.1


def window_fall(losses: Sequence[Sequence[float]], share: float = SETTLED_SHARE, *, perplexity: bool = False) -> float | None:
    """How much a training's metric still falls over the last ``share`` of its steps, relative to the last
    window, on the mean of the seeds' per-step losses (each window ``share`` of the steps).

    With ``perplexity`` the metric is ``exp(loss)``: ``exp(mean before - mean last) - 1``; otherwise the loss
    itself (a cross entropy): ``mean before / mean last - 1``. Positive while the metric falls; ``math.inf``
    where the perplexity falls by more than a float can hold (the loss's means more than about 709 apart, e.g.
    a loss recovering from a divergence). None without at least two steps per window, with curves of
    different lengths, or with a non-finite or (for a loss, not a perplexity) non-positive window mean.
    """
    if not losses or len({len(curve) for curve in losses}) != 1:
        return None
    n = len(losses[0])
    w = int(n * share)
    if w < 2 or 2 * w > n:
        return None
    mean = [math.fsum(curve[i] for curve in losses) / len(losses) for i in range(n)]
    before, last = math.fsum(mean[n - 2 * w:n - w]) / w, math.fsum(mean[n - w:]) / w
    if not (math.isfinite(before) and math.isfinite(last)):
        return None
    if perplexity:
        try:
            return math.exp(before - last) - 1.0
        except OverflowError:
            return math.inf
    return before / last - 1.0 if before > 0 and last > 0 else None


def claims_bound(spec: Spec, flag: str) -> float | None:
    """The tolerance of the claims whose ``testable`` is ``flag`` (None where none names it).

    Raises:
        ValueError: the claims that name ``flag`` have different tolerances.
    """
    bounds = {c.tolerance for c in spec.claims if c.testable == flag}
    if len(bounds) > 1:
        raise ValueError(f"{spec.path}: the claims testable by {flag} have different tolerances {sorted(bounds)}")
    return bounds.pop() if bounds else None


def settled(fall: float | None, bound: float | None) -> float | None:
    """1.0 where the metric falls by at most ``bound`` over the last window, 0.0 where by more, None without either."""
    return None if fall is None or bound is None else float(fall <= bound)


def fall_text(subject: str, fall: float, share: float = SETTLED_SHARE) -> str:
    """A report's words for :func:`window_fall`'s ``fall``: ``"<subject> falls 13.5% over the last 10% of the
    steps (the seeds' mean, against the 10% before)"``, or ``rises`` where the metric went up."""
    return (f"{subject} {'falls' if fall >= 0 else 'rises'} {100 * abs(fall):.1f}% over the last {100 * share:.0f}% of "
            f"the steps (the seeds' mean, against the {100 * share:.0f}% before)")
