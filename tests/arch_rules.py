"""The project's layout rules, checked by reading the source with ``ast`` (the checked modules are not imported).

The installed packages and ``benchmarks/`` are held to every rule; ``tests/`` to the size limit and the
private-name rule.

The tests' exception: a test may use a class's or an object's private members (``codec._unpack_tables``,
``sketch._at_least``, ``helper._proc``) to check or drive the internals it tests; library code (the
installed packages and ``benchmarks/``) may not reach into another module's classes that way, and goes
through their public API. The check below reads module attributes only, so this exception needs no
allow-list; private module-level names (``from m import _x``, ``m._x``) stay off-limits to tests too.

* no module uses a private name (``_x``) of another project module: neither ``from m import _x`` nor
  ``m._x`` on a project module it imported (``import a.b`` then ``a.b._x`` included), nor the name as a
  string literal where it reaches that module's attribute: ``setattr``/``getattr``/``delattr``/``hasattr(m,
  "_x")``, ``monkeypatch.setattr``/``delattr(m, "_x")`` or ``("a.b._x")``, ``mock.patch("a.b._x")``,
  ``mock.patch.object(m, "_x")``, ``mock.patch.dict("a.b._x")``. A private name is a module attribute
  (a class's own ``_x``, reached through the class, is not read as one, statically or by string);
* no import cycles among the project's modules (every import statement counts: module level,
  inside functions, and under ``TYPE_CHECKING``, since a type-only import still ties two modules;
  ``importlib.import_module`` and ``__import__`` count where the module's name is a string literal,
  or a relative literal with ``package=__package__``: a name built at run time, such as an f-string,
  is invisible to the check);
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

Each checker takes a root folder and a ``{folder: package}`` mapping, so ``test_architecture.py`` feeds
it small synthetic trees and checks that every rule reports what it should.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Repository folder -> the package it installs as (see pyproject.toml's package-dir).
PACKAGES: dict[str, str] = {
    "compressors": "gcbench.compressors",
    "envs": "gcbench.envs",
    "gcbench": "gcbench",
    "reproductions": "gcbench.reproductions",
    "benchmarks": "benchmarks",  # not installed, but held to every rule (it imports gcbench, never the reverse)
}
#: The test suite: held to the size limit and the private-name rule, not to the layout rules. Its
#: modules import each other by their bare names (pytest puts ``tests/`` on ``sys.path``), so that is
#: how they are named here (the empty package).
TEST_SUITE: dict[str, str] = {"tests": ""}
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
            name = ".".join(p for p in (package, *parts) if p)
            if not name:  # the empty package's own __init__
                continue
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
        elif isinstance(node, ast.Call) and (dynamic := dynamic_import(module, node)) is not None:
            target = _longest_known(dynamic[0], modules)
            if target is not None:
                out.append(Import(module.name, target, (), node.lineno))
    return out


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _callee(node: ast.Call) -> str | None:
    """The called name: ``f`` for ``f(...)`` and ``a.b.f(...)``."""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _argument(node: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(node.args) > position:
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def dynamic_import(module: Module, node: ast.Call) -> tuple[str, str] | None:
    """``(imported, bound)`` for ``import_module("a.b")`` (any spelling of the callee) or
    ``__import__("a.b")`` whose name is a string literal: the module imported, and the one the call
    returns (``a`` for ``__import__`` without a ``fromlist``). A relative name resolves against a literal
    ``package=`` or ``__package__``. None for any other call, and for names built at run time."""
    callee = _callee(node)
    if callee not in ("import_module", "__import__"):
        return None
    name = _literal(_argument(node, 0, "name"))
    if not name:
        return None
    if callee == "__import__":
        level = _argument(node, 4, "level")
        if name.startswith(".") or (level is not None and not (isinstance(level, ast.Constant) and level.value == 0)):
            return None
        fromlist = _argument(node, 3, "fromlist")
        empty = fromlist is None or (isinstance(fromlist, (ast.List, ast.Tuple)) and not fromlist.elts) or (
            isinstance(fromlist, ast.Constant) and not fromlist.value)
        return name, name.split(".")[0] if empty else name
    if name.startswith("."):
        package = _argument(node, 1, "package")
        base = module.package if isinstance(package, ast.Name) and package.id == "__package__" else _literal(package)
        if base is None:
            return None
        dots = len(name) - len(name.lstrip("."))
        parts = base.split(".")
        parts = parts[: len(parts) - (dots - 1)] if dots > 1 else parts
        name = ".".join(parts + ([name[dots:]] if name[dots:] else []))
    return name, name


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
    aliases.update(_dynamic_aliases(module, modules, tree))
    return aliases


def _dynamic_aliases(module: Module, modules: Mapping[str, Module], tree: ast.Module) -> dict[str, str]:
    """Names bound to a project module by ``m = importlib.import_module("a.b")`` (or ``__import__``),
    where the file binds ``m`` to nothing else (a name reused for other values is left out)."""
    bound: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and (dynamic := dynamic_import(module, node.value)) is not None):
            bound.setdefault(node.targets[0].id, []).append(dynamic[1])
    stores: dict[str, int] = {}
    for node in ast.walk(tree):
        name = (node.id if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
                else node.arg if isinstance(node, ast.arg) else None)
        if name is not None:
            stores[name] = stores.get(name, 0) + 1
    return {n: targets[0] for n, targets in bound.items()
            if len(set(targets)) == 1 and targets[0] in modules and stores.get(n, 0) == len(targets)}


#: Calls that reach ``obj``'s attribute named by a string: ``f(obj, "name", ...)``; ``patch.object`` is
#: matched as ``object`` called on ``patch``.
_OBJECT_AND_NAME = {"setattr", "getattr", "delattr", "hasattr"}
#: Calls whose first argument may be a dotted string ``"a.b.name"`` naming a module attribute:
#: ``monkeypatch.setattr``/``delattr("a.b.name")``, ``mock.patch("a.b.name")``, ``patch.dict("a.b.name")``.
_DOTTED_TARGET = {"setattr", "delattr", "patch"}


def _string_uses(
    call: ast.Call, aliases: Mapping[str, str], modules: Mapping[str, Module]
) -> Iterable[tuple[str, str]]:
    """``(module, attribute)`` for each project module's attribute a call names by a string literal."""
    callee = _callee(call)
    on_patch = isinstance(call.func, ast.Attribute) and _dotted(call.func.value) in ("patch", "mock.patch",
                                                                                      "unittest.mock.patch")
    first = _literal(call.args[0]) if call.args else None
    if first is not None and "." in first and (callee in _DOTTED_TARGET or (on_patch and callee == "dict")):
        target = _longest_known(first, modules)
        if target is not None and target != first:
            yield target, first[len(target) + 1:].split(".")[0]
    elif len(call.args) >= 2 and (callee in _OBJECT_AND_NAME or (on_patch and callee == "object")):
        name = _literal(call.args[1])
        target = aliases.get(_dotted(call.args[0]) or "")
        if name is not None and target is not None:
            yield target, name


def private_imports(modules: Mapping[str, Module]) -> list[str]:
    """``path:line: message`` for each use of another project module's private name, static or named
    by a string literal (see the module docstring)."""
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
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for target, name in _string_uses(node, aliases, modules):
                if _is_private(name) and target != mod.name:
                    problems.append(f"{mod.path}:{node.lineno}: uses private name {target}.{name} (named by a string)")
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
    "gcbench.compressors": {"__init__", "base", "numerics", "errors", "registry", "families", "error_feedback",
                            "codecs/", "methods/", "kernels/", "wire/", "parallel/", "adaptive/"},
    "gcbench": {"__init__", "cli", "tables", "progress", "outputs", "commands/", "bench/", "workloads/", "measure/", "data/",
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
