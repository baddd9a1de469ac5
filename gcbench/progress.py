"""One progress bar for long commands (``gcbench bench``, ``compare``, ``bench-train``, ``train``): rich, on stderr, on a terminal only.

Description, bar, done/total, elapsed time; transient (it disappears when the run ends, leaving the command's own output), and off a
terminal (a pipe, a file, CI logs) it draws nothing at all.

Unlike a plain :class:`rich.progress.Progress` it has no refresh thread: it redraws only when
:meth:`ProgressBar.update` is called, and at most every ``min_interval_s`` (the last step and a new
description always), so a caller that times work between two updates is never disturbed by it.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


#: Least time between two redraws on a step's end (a new description, a cell's start or end, the last
#: step always redraw).
MIN_INTERVAL_S = 0.1


def threadless_progress(console: Console, *, transient: bool, label: str = "[progress.description]{task.description}",
                        redirect_stdout: bool = True) -> Progress:
    """The bars of every long command (here and in the reproductions' display): ``label``, bar,
    done/total, elapsed time, and no refresh thread (``auto_refresh=False``): the caller redraws
    between its own timed work only."""
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                    transient=transient, auto_refresh=False, redirect_stdout=redirect_stdout)


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stdout
        return False


class ProgressBar:
    """``with ProgressBar("bench", total) as bar: ...; bar.update(advance=1)``: drawn only when ``console``
    (default: a new one on stderr) is a terminal; it counts either way (``completed``, ``description``)."""

    def __init__(self, description: str, total: int, *, console: Console | None = None, min_interval_s: float = MIN_INTERVAL_S):
        self.console = console if console is not None else Console(stderr=True)
        self.enabled = self.console.is_terminal
        self.description, self.total, self.completed = description, total, 0
        self.min_interval_s = min_interval_s
        self._progress: Progress | None = None
        self._task: Any = None
        self._drawn_at = 0.0

    def __enter__(self) -> "ProgressBar":
        if self.enabled:
            # a piped stdout keeps its own text
            self._progress = threadless_progress(self.console, transient=True, redirect_stdout=_stdout_is_terminal())
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total)
            self._drawn_at = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def update(self, completed: int | None = None, *, advance: int = 0, description: str | None = None) -> None:
        """Set ``completed`` and/or add ``advance`` steps, optionally with a new ``description``; redraw
        when the bar is shown and ``min_interval_s`` has passed, the run is complete or the description changed."""
        if completed is not None:
            self.completed = completed
        self.completed += advance
        renamed = description is not None and description != self.description
        if description is not None:
            self.description = description
        if self._progress is None:
            return
        try:
            self._progress.update(self._task, completed=self.completed, description=self.description)
            now = time.monotonic()
            if renamed or self.completed >= self.total or now - self._drawn_at >= self.min_interval_s:
                self._drawn_at = now
                self._progress.refresh()
        except Exception:  # a bar that cannot draw (a closed terminal) stops drawing; the run goes on
            progress, self._progress = self._progress, None
            try:
                progress.stop()
            except Exception:
                pass
