"""Measured wall-clock timing: the median of a few repeats, with CUDA synchronisation.

Every time gcbench prints is either *measured* here (``time.perf_counter`` around the real call,
``torch.cuda.synchronize`` before and after it on CUDA so queued kernels are counted) or labelled
as *modelled* where it is computed from a formula (network profiles: ``gcbench train --profile``).
:class:`Timing` carries that label so it travels with the number into tables and JSON.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds taken by ``repeat`` calls of one function (after ``warmup`` untimed calls).

    Attributes:
        samples: seconds per timed call, in call order.
        warmup: untimed calls made before the first sample.
        device: the device synchronised around each call (``"cpu"`` = no synchronisation).
        kind: ``"measured"`` (always, for timings from this module).
    """

    samples: tuple[float, ...]
    warmup: int
    device: str
    kind: str = "measured"

    @property
    def median_s(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.samples)

    @property
    def min_s(self) -> float:
        """Fastest call, in seconds."""
        return min(self.samples)

    @property
    def max_s(self) -> float:
        """Slowest call, in seconds."""
        return max(self.samples)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (seconds)."""
        return {
            "kind": self.kind,
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "repeat": len(self.samples),
            "warmup": self.warmup,
            "device": self.device,
        }


def synchronize(device: torch.device | str | None) -> None:
    """Wait for queued work on ``device`` (a no-op on CPU)."""
    if device is None or getattr(device, "type", device) == "cpu":  # the common case, without a torch.device
        return
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def measure(
    fn: Callable[[], Any],
    *,
    repeat: int = 5,
    warmup: int = 1,
    device: torch.device | str | None = "cpu",
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeat`` timed ones.

    Each timed call is bracketed by :func:`synchronize` on ``device`` so asynchronous CUDA work is
    included. Report :attr:`Timing.median_s`; the samples are kept for anyone who wants spread.

    Raises:
        ValueError: ``repeat < 1`` or ``warmup < 0``.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples), warmup, str(torch.device(device)) if device is not None else "cpu")
