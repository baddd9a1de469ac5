"""The execution layer never names a codec, not even inside a longer string, nor imports a codec module.

The whole-project rules (no private imports, no cycles, module sizes, no ``torch.distributed`` in
``compressors/adaptive``) live in ``test_architecture.py``; this file holds the stricter envs-only scan.

Adding a codec must mean one module and one registry line: ``envs/`` reads what a codec declares
(``protocol``, ``linear``, ``summed_sections``, ``run_rounds``), never its name or its module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from gcbench.compressors import families, registry

ROOT = Path(__file__).resolve().parents[1]
ENVS = sorted((ROOT / "envs").rglob("*.py"))
ADAPTIVE = sorted((ROOT / "compressors" / "adaptive").rglob("*.py"))
NAMES = set(families.names())
#: Modules of ``gcbench.compressors`` that hold one codec or method (what envs must not import).
CODEC_MODULES = {e.target.partition(":")[0] for e in registry.ENTRIES} | {
    t.partition(":")[0] for t in families.FAMILIES.values()
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _codec_names_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words = set(re.split(r"[^a-z0-9-]+", node.value.lower()))
            hits += sorted(words & NAMES)
    return hits


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import, relative modules resolved against the package path."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT).with_suffix("")
    package = ["gcbench", *rel.parts[:-1]] if rel.parts[0] != "gcbench" else list(rel.parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.append((module, [a.name for a in node.names]))
    return out


def test_the_scan_sees_what_it_looks_for():
    # the checks below would pass vacuously if they found no files or no names
    assert len(ENVS) > 5 and len(ADAPTIVE) > 3
    assert {"powersgd", "qsgd", "3lc", "topk", "sketchml", "countsketch", "sketched-sgd"} <= NAMES
    assert {"codecs.powersgd", "methods.sketched_sgd", "codecs.threelc.codec"} <= CODEC_MODULES
    assert all(m.startswith(("codecs.", "methods.")) for m in CODEC_MODULES)


@pytest.mark.parametrize("path", ENVS, ids=lambda p: str(p.relative_to(ROOT)))
def test_envs_names_no_codec(path):
    assert _codec_names_in(path) == []
    codec_imports = []
    for module, names in _imports(path):
        if module.startswith("gcbench.compressors"):
            sub = module.split(".")[2:]
            codec_imports += [module] if sub and sub[0] in ("codecs", "methods") else []
            codec_imports += [f"{module}.{n}" for n in names if not sub and n in ("codecs", "methods")]
    assert codec_imports == []


def test_a_string_naming_a_codec_is_caught(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""docstrings may say "powersgd"."""\nif name == "powersgd":\n    pass\nLABEL = "topk-sampled+ef"\n')
    assert sorted(_codec_names_in(bad)) == ["powersgd", "topk-sampled"]
