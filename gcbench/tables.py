"""Tables: console tables whose numbers are never truncated (``gcbench compare``, ``bench``, ``bench-train``),
and the Markdown pipe tables of every report (:func:`md_table`).

rich fits a table to the console's width by wrapping and then cropping cells; piped output or an
80-column terminal would then show ``0.000e+…`` instead of a number. Here every column gets a
minimum width of its widest cell (and header line), so no number can wrap, except free-text
columns (a status message, a target's wording), which wrap between words; :func:`print_whole` lets the
table be wider than the console when its numbers need it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text


def number_cell(value: float | None, fmt: str) -> str:
    """A table cell: ``value`` formatted with ``fmt``, or ``-`` where there is no value (a codec that
    failed, a quantity not measured)."""
    return "-" if value is None else format(value, fmt)


def whole_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str,
    caption: str | None = None,
    left: Sequence[int] = (0,),
    styles: Sequence[str | None] | None = None,
    wrap_last: bool = False,
    wrap: Collection[int] = (),
    compact: bool = False,
) -> Table:
    """A table of ``rows`` (already formatted cells) under ``headers`` (``\\n`` folds a header).

    Args:
        left: indexes of left-justified columns (the others are right-justified numbers).
        styles: one rich style (or None) per row.
        wrap_last: let the last column wrap (free text such as a status message).
        wrap: indexes of other free-text columns that may wrap between words. A wrapping column
            needs room for its longest word and its header lines; every other column is no-wrap with
            room for its widest cell, so a number never wraps.
        compact: no box lines and no left padding (for narrow consoles).
    """
    # cells, headers and captions are plain text: a bracket is shown, not read as rich markup
    # (``pip install gcbench[peers]`` would lose its ``[peers]``)
    table = Table(
        title=Text(title), caption=None if caption is None else Text(caption),
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD, padding=(0, 1, 0, 0) if compact else (0, 1),
    )
    wrapping = set(wrap) | ({len(headers) - 1} if wrap_last else set())
    for i, header in enumerate(headers):
        heads = [len(h) for h in header.split("\n")]
        if i in wrapping:
            words = [len(w) for row in rows for w in row[i].split()]
            table.add_column(Text(header), justify="left" if i in left else "right", no_wrap=False,
                             min_width=max(words + heads))
        else:
            table.add_column(Text(header), justify="left" if i in left else "right", no_wrap=True,
                             min_width=max([len(row[i]) for row in rows] + heads))
    for j, row in enumerate(rows):
        table.add_row(*(Text(cell) for cell in row), style=styles[j] if styles is not None else None)
    return table


def _laid_out_width(console: Console, table: Table, width: int) -> int:
    """The width of the widest line of ``table`` laid out for ``width`` columns, before any cropping:
    with wrapping columns rich can lay a table out wider than it was given (its minimum measurement
    is then too small), and printing crops what passes the console's edge."""
    segments = console.render(table, console.options.update(width=width, max_width=width))
    return max((Segment.get_line_length(line) for line in Segment.split_lines(segments)), default=0)


def _width_for(console: Console, table: Table, width: int) -> int:
    """The smallest width from ``width`` up at which ``table`` is laid out within it."""
    width = max(width, Measurement.get(console, console.options.update(max_width=1 << 16), table).minimum)
    for _ in range(64):  # each try widens to what the last layout took; a few tries settle
        laid = _laid_out_width(console, table, width)
        if laid <= width:
            return width
        width = laid
    return width


def print_whole(console: Console, build: Callable[[bool], Table]) -> None:
    """Print ``build(compact)`` on ``console`` without truncating a number, a word or a header.

    The boxed table (``build(False)``) when it is laid out within the console's width; else the
    compact one; when that does not fit either, it is printed wider than the console (a terminal
    then wraps the lines, a file keeps them whole)."""
    table = build(False)
    need = _width_for(console, table, console.width)
    if need > console.width:
        table = build(True)
        need = _width_for(console, table, console.width)
    if need <= console.width:
        console.print(table)
        return
    width = console.width
    console.width = need  # rich lays a table out within the console's width and crops to it
    try:
        console.print(table)
    finally:
        console.width = width


def md_cell(value: Any) -> str:
    """A Markdown table cell: ``str(value)`` with its pipes escaped and its line breaks folded to spaces."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Collection[int] = ()) -> str:
    """A GitHub-flavoured Markdown pipe table (no trailing newline): the header as given, a ``---`` rule
    (``---:`` under the column indexes in ``right``, right-aligned numbers), and one line per row of
    :func:`md_cell` cells."""
    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
