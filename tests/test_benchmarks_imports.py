"""The asv suite runs against older commits (``asv continuous``): asv imports every module of
benchmarks/ to discover the benchmarks and fails the whole suite on one import error. So the suite's
modules import at module level only what benchmarks/common.py's docstring allows; every other gcbench
name is imported inside ``setup`` or a benchmark body, where a missing one skips that case."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for p in (ROOT / "benchmarks").glob("*.py"))
#: Third-party packages a module of the suite may import at module level (pinned, and older than the suite).
THIRD_PARTY = {"torch", "numpy", "pytest"}
#: The gcbench modules a module of the suite may import at module level: the codec API.
GCBENCH = {"gcbench", "gcbench.compressors"}


def _guarded(node: ast.Try) -> bool:
    """True for ``try: import ... except ImportError`` (or a parent of it)."""
    names = set()
    for handler in node.handlers:
        t = handler.type
        for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
            names.add(getattr(e, "id", None))
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception"})


def module_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every unguarded import run when ``path`` is imported (not the ones in
    functions, classes' methods or ``if __name__ == "__main__":``); ``from gcbench import x`` gives
    ``gcbench.x``, relative imports ``.name``."""
    out: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.extend((node.lineno, a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    out.append((node.lineno, "." + (node.module or "")))
                elif node.module == "gcbench":
                    out.extend((node.lineno, f"gcbench.{a.name}") for a in node.names)
                else:
                    out.append((node.lineno, node.module or ""))
            elif isinstance(node, ast.Try):
                if not _guarded(node):
                    visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "__name__" not in test:
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.ClassDef):
                visit([n for n in node.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))])
            elif isinstance(node, (ast.With, ast.For, ast.While)):
                visit(node.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return out


def allowed(module: str) -> bool:
    if module.startswith("."):
        return True  # the suite's own modules, checked in turn
    top = module.split(".")[0]
    if top == "gcbench":
        return module in GCBENCH
    return top in sys.stdlib_module_names or top == "__future__" or top in THIRD_PARTY


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_level_imports_follow_the_suite_s_policy(path):
    bad = [f"{path.name}:{line}: {mod}" for line, mod in module_level_imports(path) if not allowed(mod)]
    assert not bad, ("import these inside setup (or a benchmark body) and skip the case when they are missing "
                     "(benchmarks/common.py): " + ", ".join(bad))


def test_the_policy_check_sees_a_module_level_gcbench_import(tmp_path):
    f = tmp_path / "bench_x.py"
    f.write_text("import os\nfrom gcbench.compressors.kernels.workspace import fresh\nfrom gcbench import compressors\n"
                 "try:\n    from gcbench.bench import rounds\nexcept ImportError:\n    rounds = None\n"
                 "class A:\n    from gcbench.bench import peers\n    def setup(self):\n        from gcbench.bench import inputs\n")
    found = [m for _, m in module_level_imports(f) if not allowed(m)]
    assert found == ["gcbench.compressors.kernels.workspace", "gcbench.bench"]


def test_baselines_import_without_workspace_and_skip_only_the_fresh_copy(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    for name in [m for m in sys.modules if m == "benchmarks.bench_baselines"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "gcbench.compressors.kernels.workspace", None)  # a commit without it
    mod = importlib.import_module("benchmarks.bench_baselines")
    monkeypatch.delitem(sys.modules, "benchmarks.bench_baselines")
    obj = mod.Baselines()
    obj.setup(1_000_000, "cpu")
    obj.time_copy_(1_000_000, "cpu")
    with pytest.raises(NotImplementedError, match="workspace"):
        obj.time_fresh_copy(1_000_000, "cpu")
