"""A progress display over cells and epochs (rich), with one plain line per finished cell.

On a terminal it shows two bars: cells done out of the run's total, and epochs of the current cell.
Off a terminal (CI logs) rich draws nothing live, so each finished cell also prints one line. It has
no refresh thread: the bars are redrawn when a cell starts or ends and, at most every
:data:`gcbench.progress.MIN_INTERVAL_S`, when an epoch ends, so nothing runs beside a cell that times its own work.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import Progress

from gcbench.progress import MIN_INTERVAL_S, threadless_progress


class RunProgress:
    """Context manager: ``with RunProgress(total_cells) as p: p.start_cell(...); p.advance_epoch(); ...``."""

    def __init__(self, total_cells: int, *, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self.console = console or Console(stderr=True)
        self._progress: Progress | None = None
        self._cells_task: Any = None
        self._epoch_task: Any = None
        self.total_cells = total_cells
        self._drawn_at = 0.0

    def __enter__(self) -> "RunProgress":
        if self.enabled:
            self._progress = threadless_progress(self.console, transient=False, label="[bold]{task.description}")
            self._progress.__enter__()
            self._cells_task = self._progress.add_task("cells", total=self.total_cells)
        return self

    def _draw(self, *, now: bool = True) -> None:
        """Redraw the bars (``now=False``: only when :data:`gcbench.progress.MIN_INTERVAL_S` has passed since the last)."""
        if self._progress is None:
            return
        t = time.monotonic()
        if now or t - self._drawn_at >= MIN_INTERVAL_S:
            self._drawn_at = t
            self._progress.refresh()

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    def add_cells(self, n: int) -> None:
        """``n`` more cells are planned (plans can grow as earlier cells finish)."""
        self.total_cells += n
        if self._progress is not None:
            self._progress.update(self._cells_task, total=self.total_cells)

    def start_cell(self, name: str, epochs: int | None, cached: bool) -> None:
        """A cell begins (``epochs`` = how many steps its inner bar has; None = no inner bar)."""
        if self._progress is None:
            return
        if self._epoch_task is not None:
            self._progress.remove_task(self._epoch_task)
            self._epoch_task = None
        if not cached and epochs:
            self._epoch_task = self._progress.add_task(f"  {name}", total=epochs)
        self._draw()

    def advance_epoch(self, n: int = 1) -> None:
        """One more epoch of the current cell is done."""
        if self._progress is not None and self._epoch_task is not None:
            self._progress.advance(self._epoch_task, n)
            self._draw(now=False)

    def finish_cell(self, name: str, cached: bool, elapsed_s: float, summary: str = "") -> None:
        """A cell is done (prints one line, advances the cells bar)."""
        if not self.enabled:
            return
        how = "cached" if cached else f"{elapsed_s:.1f}s"
        self.console.print(f"  cell {name}: {how}{('  ' + summary) if summary else ''}", highlight=False, markup=False, soft_wrap=True)
        if self._progress is not None:
            if self._epoch_task is not None:
                self._progress.remove_task(self._epoch_task)
                self._epoch_task = None
            self._progress.advance(self._cells_task)
            self._draw()

    def message(self, text: str) -> None:
        """Print a line above the bars."""
        if self.enabled:
            self.console.print(text, highlight=False, markup=False, soft_wrap=True)
