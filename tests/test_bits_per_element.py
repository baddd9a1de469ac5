"""Bits per element: one helper, used by every table and benchmark that reports it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from gcbench.measure.size import bits_per_element

ROOT = Path(__file__).resolve().parents[1]
#: Where sizes per element are reported (the reproductions also turn bytes per second into bits per second).
SIZE_REPORTERS = ("gcbench", "envs", "compressors", "benchmarks")


def test_bits_per_element():
    assert bits_per_element(4, 1) == 32.0
    assert bits_per_element(1000, 8000) == 1.0
    assert bits_per_element(3, 7) == 8.0 * 3 / 7
    with pytest.raises(ZeroDivisionError):
        bits_per_element(1, 0)


def test_compare_reports_the_payload_bits():
    from gcbench.commands.compare import run_compare

    g = {"w": torch.randn(64, 32)}
    row = run_compare(["fp16"], g, repeat=1)[0]
    assert row.status == "ok" and row.bits_per_element == pytest.approx(8.0 * row.nbytes / 2048)
    assert row.bits_per_element == bits_per_element(row.nbytes, 2048)


def _eight_times_over(node: ast.AST) -> bool:
    """``8 * a / b`` (or ``8.0 * ...``) written out."""
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.BinOp)
            and isinstance(node.left.op, ast.Mult) and isinstance(node.left.left, ast.Constant)
            and node.left.left.value in (8, 8.0))


def test_no_module_divides_eight_times_bytes_by_hand():
    offenders = []
    for folder in SIZE_REPORTERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            # the library's helper, and the asv suite's own measure (it must not come from the commit it
            # measures; test_benchmarks_measure_as_the_library_does keeps the two equal)
            if path in (ROOT / "gcbench" / "measure" / "size.py", ROOT / "benchmarks" / "common.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if _eight_times_over(node):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_benchmarks_measure_as_the_library_does():
    """The asv suite keeps its own bits-per-element and relative error (it runs against older commits);
    they must give the library's numbers."""
    from benchmarks import common
    from gcbench.measure.error import relative_error

    for nbytes, count in ((4, 1), (1000, 8000), (3, 7), (123457, 1 << 20)):
        assert common.bits_per_element(nbytes, count) == bits_per_element(nbytes, count)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(1000, generator=gen), torch.randn(1000, generator=gen)
    sparse = torch.sparse_coo_tensor(torch.tensor([[1, 5]]), torch.tensor([1.0, -2.0]), (8,), check_invariants=True)
    for a, b in ((x, y), (x, x), (torch.zeros(3), torch.zeros(3)), (torch.zeros(3), torch.ones(3)), (sparse, sparse * 0.5)):
        assert common.relative_error(a, b) == relative_error(a, b)
