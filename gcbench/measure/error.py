"""Measured reconstruction error of a codec: how far ``decode(encode(x))`` lies from ``x``."""

from __future__ import annotations

import math

import torch


def relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``||y - x|| / ||x||`` (dense or sparse COO tensors, float64 accumulation); 0 where both are zero
    and ``inf`` where only ``x`` is."""
    xd = x.to_dense() if x.layout == torch.sparse_coo else x
    yd = y.to_dense() if y.layout == torch.sparse_coo else y
    num = float((yd.double() - xd.double()).norm())
    den = float(xd.double().norm())
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)
