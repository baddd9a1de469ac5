"""The BLEU claims' noise: how far apart two BLEU values must be before their order or ratio says more
than the held-out pairs' sampling.

Each run's final BLEU comes with a 95% percentile bootstrap interval over the held-out pairs; these
functions turn those intervals into the spread of the measure each claim compares (the reasoning, fixed
before any run, is in the spec's comment above the BLEU claims).
"""

from __future__ import annotations

import math


def seed_mean_interval(mean: float | None, half: float | None) -> tuple[float | None, float | None, float | None]:
    """``(bleu, lo, hi)`` of a method's BLEU mean over its seeds, the value the BLEU claims compare: the mean
    and its 95% half-width over the held-out pairs, ``(mean, None, None)`` where a seed has no interval."""
    if mean is None or half is None:
        return mean, None, None
    return mean, mean - half, mean + half


def half_width(bleu: float | None, lo: float | None, hi: float | None) -> float | None:
    """The 95% half-width in BLEU points of one method's bootstrap interval, None without one."""
    if bleu is None or lo is None or hi is None or any(math.isnan(float(x)) for x in (bleu, lo, hi)):
        return None
    return max(0.0, (float(hi) - float(lo)) / 2.0)


def bleu_noise(intervals: list[tuple[float | None, float | None, float | None]]) -> float | None:
    """The spread of BLEU's orders over one model's methods, from each method's ``(bleu, lo, hi)`` (its BLEU
    mean over the seeds and that mean's 95% interval over the held-out pairs, :func:`seed_mean_interval`), in the unit an order's
    gap is measured in (the gap as a share of the pair's larger BLEU,
    :func:`gcbench.reproductions.framework.claims.relative_gap`): for every pair of methods, the 95%
    half-width of their difference taken as independent, ``sqrt(h_a^2 + h_b^2)`` in BLEU points with
    ``h = (hi - lo) / 2``, over the pair's larger BLEU; the largest over the pairs, so that no pair's
    spread is larger. A pair of two zero BLEU is left out (their gap is 0, a tie whatever the spread).
    ``0.0`` for a single method, None where a method has no interval.

    Each half-width is a share of the pair's larger BLEU, not of the method's own: a method whose BLEU
    collapses has a relative half-width that grows without bound, which would widen the spread of
    every pair, its reversal against a working method included, until no order could differ."""
    half = []
    for bleu, lo, hi in intervals:
        h = half_width(bleu, lo, hi)
        if h is None:
            return None
        half.append((float(bleu), h))  # type: ignore[arg-type]
    if not half:
        return None
    spread = 0.0
    for i, (a, ha) in enumerate(half):
        for b, hb in half[i + 1:]:
            top = max(abs(a), abs(b))
            if top > 0:
                spread = max(spread, math.hypot(ha, hb) / top)
    return spread


def bleu_ratio_noise(method: tuple[float | None, float | None, float | None],
                     vanilla: tuple[float | None, float | None, float | None]) -> float | None:
    """The spread of ``method``'s BLEU over vanilla's, in the unit of the 'comparable' claims' measure
    ``|m / v - 1|``: the 95% half-width of the ratio ``m / v`` with the two BLEU errors taken as
    independent (first order), ``sqrt(h_m^2 + (m / v)^2 h_v^2) / v``, each ``(bleu, lo, hi)`` as in
    :func:`bleu_noise`. It stays the ratio's own spread however low ``m`` falls (a collapsed method's
    half-width in BLEU points is small). None without both intervals; infinite where vanilla's BLEU is 0
    (no ratio to it)."""
    hm, hv = half_width(*method), half_width(*vanilla)
    if hm is None or hv is None:
        return None
    m, v = float(method[0]), float(vanilla[0])  # type: ignore[arg-type]
    if v <= 0:
        return math.inf
    return math.hypot(hm, m / v * hv) / v
