"""Whether a run's traffic reduction still moves: its framed reduction per window of steps.

A run's whole-run reduction is what the claims compare (what a training run sends). The per-window
series says how much that number depends on the run's length: when the windows still move, a
longer (or shorter) run would give another ratio. :func:`drift_verdict` flags a series in which any
window's reduction differs from the one before by more than ``tolerance`` (relative), as a
series falling by a sixth or more per window does. :func:`direction_window_reductions` splits each window's reduction into
push and pull, which the learning-rate schedule reaches differently (the report lists each window's
learning rate beside them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def window_reductions(fp32_per_step: float, sent: Sequence[int], window: int) -> list[float]:
    """The reduction (fp32 bytes / bytes sent) of each whole non-overlapping window of ``window`` steps."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out = []
    for i in range(0, len(sent) - window + 1, window):
        total = sum(sent[i : i + window])
        out.append(fp32_per_step * window / total if total else math.inf)
    return out


def drift_verdict(fp32_per_step: float, sent: Sequence[int], window: int, tolerance: float) -> dict[str, Any]:
    """The per-window series of one run and whether it drifts.

    ``drifting`` is True when some window's reduction differs from the previous window's by more
    than ``tolerance`` (relative), False when every step between windows is within it, and None
    when fewer than two whole windows were measured (too short to tell).
    """
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    red = window_reductions(fp32_per_step, sent, window)
    changes = [b / a - 1.0 for a, b in zip(red, red[1:]) if math.isfinite(a) and a > 0]
    drifting = None if len(red) < 2 else any(abs(c) > tolerance for c in changes)
    return {"windows": red, "changes": changes, "window": window, "tolerance": tolerance, "drifting": drifting}


def direction_window_reductions(result: Mapping[str, Any], window: int) -> dict[str, list[float]]:
    """Per direction (``push``: the workers' gradients, ``pull``: the server's model changes), the
    reduction of each whole ``window``-step window of a 3LC cell: fp32 bytes of one direction (half
    the uncompressed run's) / the framed bytes that direction sent in the window."""
    s = result["summary"]
    fp32_one_way = s["baseline_fp32_bytes"] / s["steps"] / 2
    return {side: window_reductions(fp32_one_way, [int(b) for b in result["stages"][side]["framed_per_step"]], window)
            for side in ("push", "pull")}


def sent_per_step(result: Mapping[str, Any]) -> list[int]:
    """Per step, the framed bytes a 3LC cell sent (push + pull)."""
    st = result["stages"]
    return [int(a) + int(b) for a, b in zip(st["push"]["framed_per_step"], st["pull"]["framed_per_step"])]


__all__ = ["direction_window_reductions", "drift_verdict", "sent_per_step", "window_reductions"]
