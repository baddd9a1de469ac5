"""The reproductions' progress display: drawn between a cell's own work only (no refresh thread beside
a cell that times itself), bars on a terminal, one plain line per finished cell everywhere (and off a terminal the bars' last
frame, once, at the end)."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from gcbench.reproductions.framework.progress import RunProgress


def _run(console: Console) -> tuple[int, int]:
    before = threading.active_count()
    with RunProgress(2, console=console) as p:
        during = threading.active_count()
        p.start_cell("a", 3, False)
        for _ in range(3):
            p.advance_epoch()
        p.finish_cell("a", False, 1.25)
        p.start_cell("b", None, True)
        p.finish_cell("b", True, 0.0)
    return before, during


def test_no_thread_runs_beside_the_cells_and_the_bars_draw_on_a_terminal():
    buf = io.StringIO()
    before, during = _run(Console(file=buf, force_terminal=True, width=80))
    assert during == before  # no refresh thread
    out = buf.getvalue()
    assert "cells" in out and "━" in out and "cell a: 1.2s" in out and "cell b: cached" in out


def test_off_a_terminal_each_cell_is_one_plain_line_then_the_final_count():
    buf = io.StringIO()
    _run(Console(file=buf, force_terminal=False, width=80))
    lines = buf.getvalue().splitlines()
    assert lines[:2] == ["  cell a: 1.2s", "  cell b: cached"]
    assert len(lines) == 3 and lines[2].startswith("cells") and "2/2" in lines[2]  # rich's last frame, once
