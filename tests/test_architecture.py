"""The project's layout rules, checked by reading the source with ``ast`` (the checked modules are not imported).

The installed packages and ``benchmarks/`` are held to every rule; ``tests/`` to the size limit and the
private-name rule (static uses; a test that patches a private name through its string,
``monkeypatch.setattr(m, "_x", ...)``, is not read as a use).

* no module imports a private name (``_x``) of another project module, neither as
  ``from m import _x`` nor as ``m._x`` on a project module it imported (``import a.b`` then ``a.b._x`` included);
* no import cycles among the project's modules (every import statement counts: module level,
  inside functions, and under ``TYPE_CHECKING``, since a type-only import still ties two modules);
* no module over :data:`MAX_LINES` lines;
* no file under ``envs/`` names a specific codec (a string literal equal to a registry name):
  codecs declare what the environment needs, so adding one never means editing ``envs/``;
* nothing under ``compressors/adaptive/`` uses ``torch.distributed`` (the pure L-GreCo layer);
* the folders show the architecture: ``compressors/`` holds the contract modules at its top and everything
  else in ``codecs/``, ``methods/``, ``kernels/``, ``wire/``, ``parallel/`` and ``adaptive/``; every registry
  entry is a module under ``codecs/`` and every other exchange method one under ``methods/``; ``gcbench/``
  holds the CLI wiring at its top and its commands, bench harness, workloads and measurement in packages;
* layers import downwards only: ``wire/``, ``parallel/`` and ``kernels/`` never import a codec or a method,
  and codecs never import a method.

Each checker takes a root folder and a ``{folder: package}`` mapping, so the tests at the bottom feed
it small synthetic trees and check that every rule reports what it should.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Repository folder -> the package it installs as (see pyproject.toml's package-dir).
PACKAGES: dict[str, str] = {
    "compressors": "gcbench.compressors",
    "envs": "gcbench.envs",
    "gcbench": "gcbench",
    "reproductions": "gcbench.reproductions",
    "benchmarks": "benchmarks",  # not installed, but held to every rule (it imports gcbench, never the reverse)
}
#: The test suite: held to the size limit and the private-name rule, not to the layout rules.
TEST_SUITE: dict[str, str] = {"tests": "tests"}
MAX_LINES = 700


@dataclass(frozen=True)
class Module:
    """One project module: its dotted name, its file, and whether it is a package's ``__init__``."""

    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    """One import statement's target inside the project."""

    importer: str
    target: str  # the project module imported (or imported from)
    names: tuple[str, ...]  # names taken from it (``from target import a, b``); () for ``import target``
    line: int


def discover(root: Path, packages: Mapping[str, str] = PACKAGES) -> dict[str, Module]:
    """Every ``*.py`` under the mapped folders of ``root``, by dotted module name."""
    out: dict[str, Module] = {}
    for folder, package in packages.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = list(rel.parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join([package, *parts])
            out[name] = Module(name, path, is_package)
    return out


def _parse(module: Module) -> ast.Module:
    return ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))


def _resolve_from(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _longest_known(name: str, modules: Mapping[str, Module]) -> str | None:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def project_imports(module: Module, modules: Mapping[str, Module], tree: ast.Module | None = None) -> list[Import]:
    """The project modules ``module`` imports, anywhere in the file (functions included).

    ``from pkg import sub`` where ``pkg.sub`` is a module counts as importing ``pkg.sub``;
    ``from pkg import name`` counts as importing ``pkg``.
    """
    tree = tree if tree is not None else _parse(module)
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _longest_known(alias.name, modules)
                if target is not None:
                    out.append(Import(module.name, target, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(module, node)
            plain: list[str] = []
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    out.append(Import(module.name, sub, (), node.lineno))
                else:
                    plain.append(alias.name)
            target = _longest_known(base, modules)
            if plain and target is not None:
                out.append(Import(module.name, target, tuple(plain), node.lineno))
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_aliases(module: Module, modules: Mapping[str, Module], tree: ast.Module) -> dict[str, str]:
    """Local (dotted) names bound to project modules: ``import a.b as m``, ``from a import b`` (b a
    module), and ``import a.b`` (``a`` and ``a.b``, each where it is a project module)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
                elif not alias.asname:
                    parts = alias.name.split(".")
                    for i in range(1, len(parts) + 1):
                        prefix = ".".join(parts[:i])
                        if prefix in modules:
                            aliases[prefix] = prefix
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(module, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    return aliases


def private_imports(modules: Mapping[str, Module]) -> list[str]:
    """``path:line: message`` for each use of another project module's private name."""
    problems: list[str] = []
    for mod in modules.values():
        tree = _parse(mod)
        for imp in project_imports(mod, modules, tree):
            if imp.target == mod.name:
                continue
            for name in imp.names:
                if _is_private(name):
                    problems.append(f"{mod.path}:{imp.line}: imports private name {name} from {imp.target}")
        aliases = _module_aliases(mod, modules, tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            target = aliases.get(_dotted(node.value) or "")
            if target is not None and target != mod.name:
                problems.append(f"{mod.path}:{node.lineno}: uses private name {target}.{node.attr}")
    return problems


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def import_graph(modules: Mapping[str, Module]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (self-imports left out)."""
    return {
        name: {imp.target for imp in project_imports(mod, modules) if imp.target != name}
        for name, mod in modules.items()
    }


def import_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def strongconnect(v: str) -> None:  # Tarjan; the project graph is small enough for recursion
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_cycle_in(comp, graph) for comp in components]


def _cycle_in(component: list[str], graph: Mapping[str, Iterable[str]]) -> list[str]:
    """A shortest cycle through the component's first module, by breadth-first search."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]  # v, its parent, ..., start
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return component  # pragma: no cover - a component always holds a cycle


def long_modules(modules: Mapping[str, Module], limit: int = MAX_LINES) -> list[str]:
    """``path: N lines`` for each module over ``limit`` lines."""
    out = []
    for mod in modules.values():
        n = len(mod.path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out.append(f"{mod.path}: {n} lines (limit {limit})")
    return out


def codec_names_in(modules: Mapping[str, Module], prefix: str, codec_names: Iterable[str]) -> list[str]:
    """``path:line: "name"`` for each string literal equal to a codec name in modules under ``prefix``."""
    wanted = set(codec_names)
    out = []
    for mod in modules.values():
        if mod.name != prefix and not mod.name.startswith(prefix + "."):
            continue
        for node in ast.walk(_parse(mod)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted:
                out.append(f"{mod.path}:{node.lineno}: names codec {node.value!r}")
    return out


def distributed_uses(modules: Mapping[str, Module], prefix: str) -> list[str]:
    """``path:line`` for each import or attribute use of ``torch.distributed`` under ``prefix``."""
    out = []
    for mod in modules.values():
        if mod.name != prefix and not mod.name.startswith(prefix + "."):
            continue
        for node in ast.walk(_parse(mod)):
            hit = False
            if isinstance(node, ast.Import):
                hit = any(a.name == "torch.distributed" or a.name.startswith("torch.distributed.") for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                hit = node.module.startswith("torch.distributed") or (
                    node.module == "torch" and any(a.name == "distributed" for a in node.names)
                )
            elif isinstance(node, ast.Attribute):
                hit = node.attr == "distributed" and isinstance(node.value, ast.Name) and node.value.id == "torch"
            if hit:
                out.append(f"{mod.path}:{node.lineno}: uses torch.distributed")
    return out


#: What may sit at the top of each folder (modules without ``.py``, packages with a trailing ``/``).
TOP_LEVEL: dict[str, set[str]] = {
    "gcbench.compressors": {"__init__", "base", "errors", "registry", "families", "error_feedback",
                            "codecs/", "methods/", "kernels/", "wire/", "parallel/", "adaptive/"},
    "gcbench": {"__init__", "cli", "tables", "commands/", "bench/", "workloads/", "measure/", "data/",
                "compressors/", "envs/", "reproductions/"},  # the last three: the top-level folders, mapped in
}
#: Layers of ``compressors/``, lowest first: a module may import its own layer or lower ones only.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("gcbench.compressors.wire", "gcbench.compressors.parallel", "gcbench.compressors.kernels"),
    ("gcbench.compressors.codecs",),
    ("gcbench.compressors.methods",),
)


def top_level_strays(modules: Mapping[str, Module], package: str, allowed: set[str]) -> list[str]:
    """Modules and packages directly under ``package`` that are not in ``allowed``."""
    out = []
    for mod in modules.values():
        if not mod.name.startswith(package + "."):
            continue
        rest = mod.name[len(package) + 1:].split(".")
        if len(rest) == 1:
            entry = rest[0] + "/" if mod.is_package else rest[0]
        elif len(rest) == 2 and rest[1] == "__init__":  # pragma: no cover - discover() names packages without it
            entry = rest[0] + "/"
        else:
            continue
        if entry not in allowed:
            out.append(f"{mod.path}: {entry} does not belong at the top of {package}")
    return out


def _layer_of(name: str, layers: Sequence[Sequence[str]]) -> int | None:
    for i, prefixes in enumerate(layers):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    return None


def upward_imports(graph: Mapping[str, Iterable[str]], layers: Sequence[Sequence[str]] = LAYERS) -> list[str]:
    """``a imports b`` for each import from a lower layer into a higher one."""
    out = []
    for a, targets in graph.items():
        la = _layer_of(a, layers)
        if la is None:
            continue
        for b in sorted(targets):
            lb = _layer_of(b, layers)
            if lb is not None and lb > la:
                out.append(f"{a} imports {b} (a higher layer)")
    return out


def _registry_names() -> list[str]:
    from gcbench import compressors

    return compressors.names()


# --------------------------------------------------------------------------------------------------
# the real tree
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project() -> dict[str, Module]:
    modules = discover(ROOT)
    assert "gcbench.compressors.registry" in modules and "gcbench.envs" in modules  # the walk found the tree
    return modules


def test_no_private_imports(project: dict[str, Module]) -> None:
    problems = private_imports({**project, **discover(ROOT, TEST_SUITE)})
    assert not problems, "private names used across modules:\n" + "\n".join(problems)


def test_no_import_cycles(project: dict[str, Module]) -> None:
    cycles = import_cycles(import_graph(project))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_long_modules(project: dict[str, Module]) -> None:
    problems = long_modules({**project, **discover(ROOT, TEST_SUITE)})
    assert not problems, "modules over the size limit:\n" + "\n".join(problems)


def test_every_checked_folder_is_walked(project: dict[str, Module]) -> None:
    assert "benchmarks.common" in project
    assert "tests.test_architecture" in discover(ROOT, TEST_SUITE)


def test_envs_name_no_codec(project: dict[str, Module]) -> None:
    problems = codec_names_in(project, "gcbench.envs", _registry_names())
    assert not problems, "envs/ names specific codecs:\n" + "\n".join(problems)


def test_adaptive_layer_has_no_torch_distributed(project: dict[str, Module]) -> None:
    problems = distributed_uses(project, "gcbench.compressors.adaptive")
    assert not problems, "compressors/adaptive/ uses torch.distributed:\n" + "\n".join(problems)


def test_folders_show_the_architecture(project: dict[str, Module]) -> None:
    problems = [p for pkg, allowed in TOP_LEVEL.items() for p in top_level_strays(project, pkg, allowed)]
    assert not problems, "modules outside the layout:\n" + "\n".join(problems)


def test_layers_import_downwards(project: dict[str, Module]) -> None:
    problems = upward_imports(import_graph(project))
    assert not problems, "imports against the layering:\n" + "\n".join(problems)


def test_codecs_live_in_codecs_and_methods_in_methods() -> None:
    from gcbench.compressors import families, registry

    for e in registry.ENTRIES:
        assert e.target.startswith("codecs."), f"registry entry {e.name!r} targets {e.target!r}, not a module of codecs/"
    for name, target in families.FAMILIES.items():
        assert target.startswith("methods."), f"method {name!r} targets {target!r}, not a module of methods/"


# --------------------------------------------------------------------------------------------------
# each checker reports a synthetic bad example
# --------------------------------------------------------------------------------------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return discover(tmp_path, {"pkg": "top.pkg", "envs": "top.envs"})


def test_discover_names_modules_and_packages(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/sub/leaf.py": ""})
    assert set(mods) == {"top.pkg", "top.pkg.sub", "top.pkg.sub.leaf"}
    assert mods["top.pkg.sub"].is_package and not mods["top.pkg.sub.leaf"].is_package


def test_private_name_import_is_reported(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "_secret = 1\npublic = 2\n",
        "pkg/b.py": "from .a import public\n\ndef f():\n    from top.pkg.a import _secret\n    return _secret\n",
    })
    problems = private_imports(mods)
    assert len(problems) == 1 and "b.py:4" in problems[0] and "_secret" in problems[0]


def test_private_attribute_of_imported_module_is_reported(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "_secret = 1\n",
        "pkg/b.py": "from . import a\nimport top.pkg.a as alias\nx = a._secret\ny = alias._secret\nz = a.__name__\n",
    })
    problems = private_imports(mods)
    assert sorted(p.split(": ")[0].rsplit(":", 1)[1] for p in problems) == ["3", "4"]


def test_private_attribute_through_a_plain_dotted_import_is_reported(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "_top_secret = 0\n",
        "pkg/a.py": "_secret = 1\npublic = 2\n",
        "pkg/b.py": "import top.pkg.a\nx = top.pkg.a._secret\ny = top.pkg.a.public\nz = top.pkg._top_secret\n",
    })
    problems = private_imports(mods)
    assert sorted(p.split(": ", 1)[1] for p in problems) == [
        "uses private name top.pkg._top_secret", "uses private name top.pkg.a._secret"]
    assert [p.split(": ")[0].rsplit(":", 1)[1] for p in sorted(problems)] == ["2", "4"]


def test_test_modules_private_uses_are_reported_but_patch_strings_are_not(tmp_path: Path) -> None:
    for rel, text in {
        "pkg/__init__.py": "",
        "pkg/a.py": "_secret = 1\n",
        "tests/__init__.py": "",
        "tests/test_a.py": (
            "from top.pkg import a\nfrom top.pkg.a import _secret\n\n"
            "def test_x(monkeypatch):\n    monkeypatch.setattr(a, \"_secret\", 2)\n    assert a._secret == 2\n"
        ),
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    mods = {**discover(tmp_path, {"pkg": "top.pkg"}), **discover(tmp_path, TEST_SUITE)}
    problems = private_imports(mods)
    assert sorted(p.split(": ")[0].rsplit(":", 1)[1] for p in problems) == ["2", "6"]
    assert all("test_a.py" in p for p in problems)


def test_own_private_names_and_dunders_are_fine(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "__version__ = '1'\n_own = 2\nx = _own\n",
        "pkg/a.py": "from . import __version__\n",
    })
    assert private_imports(mods) == []


def test_import_cycle_is_reported_with_its_path(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import x\n",
        "pkg/b.py": "def f():\n    from . import c\n",  # a function-level import closes the cycle
        "pkg/c.py": "import top.pkg.a\n",
        "pkg/d.py": "from .a import x\n",  # imports into the cycle, not part of it
    })
    graph = import_graph(mods)
    assert graph["top.pkg.a"] == {"top.pkg.b"} and graph["top.pkg.b"] == {"top.pkg.c"}
    cycles = import_cycles(graph)
    assert cycles == [["top.pkg.a", "top.pkg.b", "top.pkg.c", "top.pkg.a"]]


def test_type_checking_import_closes_a_cycle(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/report.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .workload import W\n",
        "pkg/workload.py": "def report():\n    from .report import build\n",
    })
    assert import_cycles(import_graph(mods)) == [["top.pkg.report", "top.pkg.workload", "top.pkg.report"]]


def test_acyclic_graph_has_no_cycles(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {"pkg/__init__.py": "from .a import x\n", "pkg/a.py": "from .b import x\n", "pkg/b.py": "x = 1\n"})
    assert import_cycles(import_graph(mods)) == []


def test_relative_imports_resolve_from_packages_and_parents(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "from .sub import leaf\n",
        "pkg/sub/__init__.py": "from .. import other\n",
        "pkg/sub/leaf.py": "from ..other import y\n",
        "pkg/other.py": "y = 1\n",
    })
    graph = import_graph(mods)
    assert graph["top.pkg"] == {"top.pkg.sub.leaf"}
    assert graph["top.pkg.sub"] == {"top.pkg.other"}
    assert graph["top.pkg.sub.leaf"] == {"top.pkg.other"}


def test_long_module_is_reported(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/big.py": "x = 1\n" * 11, "pkg/small.py": "x = 1\n" * 10})
    problems = long_modules(mods, limit=10)
    assert len(problems) == 1 and "big.py: 11 lines" in problems[0]


def test_codec_name_literal_under_envs_is_reported(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "envs/__init__.py": "",
        "envs/proto.py": '"""Mentions powersgd in prose, which is fine."""\nif codec == "powersgd":\n    pass\n',
        "pkg/__init__.py": 'DEFAULT = "powersgd"\n',  # outside envs: allowed
    })
    problems = codec_names_in(mods, "top.envs", ["powersgd", "qsgd"])
    assert len(problems) == 1 and "proto.py:2" in problems[0] and "'powersgd'" in problems[0]


def test_torch_distributed_is_reported_in_every_spelling(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import torch.distributed as dist\n",
        "pkg/b.py": "from torch import distributed\n",
        "pkg/c.py": "import torch\n\ndef f():\n    return torch.distributed.get_rank()\n",
        "pkg/d.py": "from torch.distributed import broadcast\n",
        "pkg/clean.py": "import torch\nx = torch.zeros(1)\n",
    })
    problems = distributed_uses(mods, "top.pkg")
    assert sorted(Path(p.split(":")[0]).name for p in problems) == ["a.py", "b.py", "c.py", "d.py"]


def test_stray_top_level_module_is_reported(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": "", "pkg/helper.py": "", "pkg/codecs/__init__.py": "",
                               "pkg/codecs/x.py": "", "pkg/extra/__init__.py": ""})
    problems = top_level_strays(modules, "top.pkg", {"__init__", "base", "codecs/"})
    assert len(problems) == 2 and any("helper" in p for p in problems) and any("extra/" in p for p in problems)


def test_upward_import_is_reported() -> None:
    layers = (("p.low",), ("p.mid",), ("p.high",))
    graph = {"p.low.a": {"p.mid.b"}, "p.mid.b": {"p.low.a", "p.other"}, "p.high.c": {"p.mid.b", "p.low.a"}}
    assert upward_imports(graph, layers) == ["p.low.a imports p.mid.b (a higher layer)"]


#: Suffixes of the files modules read at run time (C kernels' sources, specs, profiles, data).
RUN_TIME_DATA = (".c", ".h", ".toml", ".json", ".yaml", ".csv", ".txt", ".svm")


def test_every_file_a_module_reads_at_run_time_is_package_data():
    """A data file inside a package folder, or in a plain folder below one (``kernels/c/``,
    ``envs/profiles/``), matches a ``package-data`` pattern of ``pyproject.toml``, so a wheel
    install has it, not only an editable checkout. Committed reports (``results/``, read from a
    checkout by ``gcbench results``) are not package data."""
    import fnmatch
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {pkg: ROOT / folder for pkg, folder in config["package-dir"].items()}
    patterns = config["package-data"]
    missing = []
    for pkg, root in folders.items():
        for path in root.rglob("*"):
            if not path.is_file() or path.suffix not in RUN_TIME_DATA or "results" in path.parts:
                continue
            package_dir = path.parent
            while not (package_dir / "__init__.py").exists() and package_dir != root:
                package_dir = package_dir.parent  # the package that holds a plain subfolder
            name = ".".join([pkg, *package_dir.relative_to(root).parts])
            rel = path.relative_to(package_dir).as_posix()
            if not any(fnmatch.fnmatch(rel, p) for p in patterns.get("*", []) + patterns.get(name, [])
                       if "/" in p or "/" not in rel):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"files outside package-data: {missing[:20]}"
