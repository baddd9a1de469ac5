"""``gcbench compare``'s table at 80 columns (a terminal's width, and rich's width when piped): every
number and every header word printed whole, never cut with an ellipsis; JSON/Markdown stay complete."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from gcbench import compressors
from gcbench.commands.compare import CompareRow, load_gradients, print_table, run_compare, to_markdown


def expected_numbers(row: CompareRow, sparse: bool) -> list[str]:
    """The cells as the table must show them, formatted here independently of compare.py."""
    out = []
    for value, fmt in ((row.bits_per_element, ".3f"), (row.bits_per_nonzero if sparse else None, ".2f"),
                       (row.ratio, ".2f"), (row.rel_l2_error, ".3e"), (row.encode_ms, ".3f"), (row.decode_ms, ".3f")):
        if value is not None:
            out.append(format(value, fmt))
    return out


@pytest.fixture(scope="module")
def real_rows():
    grads, _ = load_gradients(False, 0, 2)
    return run_compare(compressors.names(), grads, repeat=1)


def extreme_rows() -> list[CompareRow]:
    return [
        CompareRow("a-codec-with-a-long-name", "ok", 10, 123456.789, None, 0.00026, 1.2345e-300, 98765.4321, 123456.0),
        CompareRow("x", "failed", error="ValueError: a long message that must wrap rather than push the numbers off the line"),
    ]


def render(rows: list[CompareRow], sparse: bool, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), force_terminal=False, color_system=None)
    print_table(console, rows, sparse)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("sparse", [False, True])
def test_every_number_and_header_is_whole(real_rows, width, sparse):
    for rows in (real_rows, real_rows + extreme_rows()):
        rows = [CompareRow(**{**r.__dict__, "bits_per_nonzero": (r.bits_per_element or 0) * 3 if sparse else None}) for r in rows]
        out = render(rows, sparse, width)
        assert "…" not in out and "..." not in out
        tokens = set(re.split(r"[\s│┃|]+", out))
        for r in rows:
            assert r.codec in tokens, r.codec
            for number in expected_numbers(r, sparse):
                assert number in tokens, (number, out)
        for word in ("bits/", "element", "ratio", "vs", "fp32", "rel.", "L2", "error", "encode", "decode", "ms", "status"):
            assert word in tokens, word
        if sparse:
            assert "non-zero" in tokens
        if width == 80 and rows is real_rows:
            assert max(len(line) for line in out.splitlines()) <= 80  # the real table fits an 80-column terminal


def test_markdown_is_complete(real_rows):
    meta = {"gradient": {"sparse": False, "source": "s", "numel": 1, "tensors": [], "nnz": 1}, "baseline": {"what": "w", "nbytes": 1},
            "bytes": "b", "timing": {"what": "t", "repeat": 1}, "device": "cpu", "torch": "x", "threads": 1, "gcbench": "0"}
    md = to_markdown(meta, real_rows + extreme_rows())
    for r in real_rows + extreme_rows():
        for number in expected_numbers(r, False):
            assert number in md
