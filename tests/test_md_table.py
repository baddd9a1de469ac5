"""One Markdown pipe table for every report: its format, its escaping, and no hand-built table elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

from gcbench.commands.compare import CompareRow, to_markdown
from gcbench.tables import md_cell, md_table

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("gcbench", "envs", "compressors", "reproductions", "benchmarks")


def test_format_is_pinned():
    assert md_table(["a", "b c"], [[1, None], [1.5, ""]]) == "| a | b c |\n|---|---|\n| 1 | None |\n| 1.5 |  |"
    assert md_table(["x", "n", "m"], [], right=(1, 2)) == "| x | n | m |\n|---|---:|---:|"


def test_cells_cannot_break_the_table():
    assert md_cell("x|y\ntwo") == "x\\|y two"
    text = md_table(["h"], [["a|b"], ["one\ntwo"]])
    assert text.splitlines()[2:] == ["| a\\|b |", "| one two |"]


def test_compare_markdown_escapes_a_multi_line_error():
    meta = {"gradient": {"sparse": False, "source": "s", "numel": 1, "tensors": [], "nnz": 1}, "baseline": {"what": "w", "nbytes": 1},
            "bytes": "b", "timing": {"what": "t", "repeat": 1}, "device": "cpu", "torch": "x", "threads": 1, "gcbench": "0"}
    md = to_markdown(meta, [CompareRow("x", "failed", error="ValueError: a | b\nsecond line")])
    row = next(line for line in md.splitlines() if line.startswith("| x |"))
    assert "a \\| b second line" in row and row.endswith(" |")


def test_no_module_builds_a_pipe_table_by_hand():
    offenders = []
    for folder in PROJECT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "gcbench" / "tables.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and "|---" in node.value:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
