"""The time budget of ``gcbench gpu-check``: each part is granted a share of what is left, and a
part that cannot have its minimum is skipped, with the reason written in the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Budget:
    """``total_s`` seconds from construction, ``reserve_s`` of them kept for writing the report.

    :meth:`grant` gives a part ``min(want, left - reserve)`` seconds, or None when that is below
    the part's ``minimum``; :attr:`log` lists every decision (part, granted or skipped, seconds left).
    """

    total_s: float
    reserve_s: float = 5.0
    clock: Callable[[], float] = time.monotonic
    log: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.total_s > 0:
            raise ValueError(f"the budget must be a positive number of seconds, got {self.total_s}")
        self._start = self.clock()

    def elapsed(self) -> float:
        """Seconds since the budget started."""
        return self.clock() - self._start

    def left(self) -> float:
        """Seconds left for parts (the report's reserve excluded); never negative."""
        return max(0.0, self.total_s - self.reserve_s - self.elapsed())

    def deadline(self, seconds: float) -> float:
        """The clock reading ``seconds`` from now."""
        return self.clock() + seconds

    def grant(self, part: str, want_s: float, minimum_s: float) -> float | None:
        """Seconds granted to ``part`` (None: skipped, too little time left)."""
        left = self.left()
        granted = min(want_s, left)
        ok = granted >= minimum_s
        self.log.append({"part": part, "want_s": round(want_s, 1), "minimum_s": minimum_s, "left_s": round(left, 1),
                         "granted_s": round(granted, 1) if ok else None})
        return granted if ok else None

    def skip_reason(self, minimum_s: float) -> str:
        """The report's words for a part skipped by :meth:`grant`."""
        return (f"skipped by the budget: {self.left():.0f} s left of {self.total_s:.0f} s, "
                f"the part needs at least {minimum_s:.0f} s")
