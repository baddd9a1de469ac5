"""The element counts the PowerSGD peer benchmarks' docstrings state are the counts of the matrices
they time (computed here from gcbench.bench.inputs.powersgd_matrices, not typed)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def squeezed(text: str) -> str:
    return " ".join(text.split())


def test_peer_docstrings_state_the_computed_counts(monkeypatch):
    from gcbench.bench.inputs import powersgd_matrices

    monkeypatch.syspath_prepend(str(ROOT))
    peers = importlib.import_module("benchmarks.bench_peers")
    quick = ast.parse((ROOT / "benchmarks" / "test_quick_codecs.py").read_text(encoding="utf-8"))
    quick_doc = next(ast.get_docstring(n) for n in quick.body if isinstance(n, ast.FunctionDef) and n.name == "test_powersgd_peer")
    for model, width_div in peers.MODELS.items():
        mats = powersgd_matrices(peers.RANK, width_div, "cpu")
        stated = f"{len(mats)} matrices, {sum(t.numel() for t in mats.values()):,} elements"
        assert stated in squeezed(peers.__doc__), (model, stated)
        if width_div == 4:
            assert stated in squeezed(quick_doc), stated
