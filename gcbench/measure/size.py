"""Measured size of what a codec sends, per element of its input."""

from __future__ import annotations


def bits_per_element(nbytes: int, count: int) -> float:
    """``8 * nbytes / count``: the bits of ``nbytes`` sent bytes per element, non-zero or key-value pair
    counted in ``count`` (which must be positive)."""
    return 8.0 * nbytes / count
