"""The project's layout rules (:mod:`arch_rules`, which reads the source with ``ast``), run on the real
tree, and each rule's checker run on small synthetic trees to show that it reports what it should."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from arch_rules import (
    ROOT,
    TEST_SUITE,
    TOP_LEVEL,
    Module,
    codec_names_in,
    discover,
    distributed_uses,
    import_cycles,
    import_graph,
    long_modules,
    private_imports,
    top_level_strays,
    upward_imports,
)


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
    assert "test_architecture" in discover(ROOT, TEST_SUITE)


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


def test_test_modules_private_uses_are_reported_patch_strings_included(tmp_path: Path) -> None:
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
    assert sorted(p.split(": ")[0].rsplit(":", 1)[1] for p in problems) == ["2", "5", "6"]
    assert all("test_a.py" in p for p in problems)


def test_a_test_modules_private_name_imported_by_its_bare_name_is_reported(tmp_path: Path) -> None:
    """Test modules import each other by bare names (``tests/`` is on ``sys.path``): a helper's private
    name is reported there too, its public names are not."""
    for rel, text in {
        "tests/test_helpers.py": "def _make():\n    return 1\n\n\ndef make():\n    return 2\n",
        "tests/test_b.py": "from test_helpers import _make, make\nimport test_helpers\n\nx = test_helpers._make()\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    problems = private_imports(discover(tmp_path, TEST_SUITE))
    assert sorted(p.split(": ", 1)[1] for p in problems) == [
        "imports private name _make from test_helpers", "uses private name test_helpers._make"]


def _lines(problems: list[str]) -> list[int]:
    return sorted(int(p.split(": ")[0].rsplit(":", 1)[1]) for p in problems)


#: One line per way of naming another module's private attribute by a string (each must be reported).
STRING_USES = """\
import importlib
from unittest import mock
from unittest.mock import patch
import top.pkg.a
from top.pkg import a
from . import a as rel
setattr(a, "_secret", 2)
getattr(a, "_secret")
delattr(rel, "_secret")
hasattr(top.pkg.a, "_secret")
monkeypatch.setattr(a, "_secret", 2)
monkeypatch.setattr("top.pkg.a._secret", 2)
monkeypatch.delattr("top.pkg.a._secret")
mp.delattr(a, "_secret", raising=False)
mock.patch("top.pkg.a._secret")
patch("top.pkg.a._secret.attr")
mock.patch.object(a, "_secret")
patch.dict("top.pkg.a._table", {})
dyn = importlib.import_module("top.pkg.a")
dyn._secret
"""


def test_private_names_named_by_strings_are_reported(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "_secret = 1\n_table = {}\npublic = 2\n\nclass Codec:\n    def _hook(self):\n        pass\n",
        "pkg/b.py": STRING_USES,
    })
    problems = private_imports(mods)
    assert _lines(problems) == list(range(7, 19)) + [20]
    assert all("uses private name top.pkg.a._" in p for p in problems)
    assert sum("(named by a string)" in p for p in problems) == 12  # the last line is a static use


def test_strings_that_name_no_other_modules_private_attribute_are_fine(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "_secret = 1\npublic = 2\n\nclass Codec:\n    def _hook(self):\n        pass\n",
        "pkg/b.py": (
            "import importlib\nimport os\nfrom unittest import mock\nfrom top.pkg import a\n_own = 1\n"
            "import top.pkg.b as me\n"
            "setattr(a, \"public\", 3)\n"  # public
            "monkeypatch.setattr(\"top.pkg.a.public\", 3)\n"
            "monkeypatch.setattr(a.Codec, \"_hook\", None)\n"  # a class's own name, as statically
            "getattr(os, \"_exit\")\n"  # not a project module
            "mock.patch(\"os._exit\")\n"
            "setattr(me, \"_own\", 2)\n"  # this module's own
            "monkeypatch.setattr(\"top.pkg.b._own\", 2)\n"
            "getattr(a, name)\n"  # not a literal
            "def f():\n    wl = importlib.import_module(\"top.pkg.a\")\n    return wl.public\n"
            "def g(wl):\n    return wl._secret\n"  # wl is also a parameter: not read as the module
        ),
    })
    assert private_imports(mods) == []


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


def test_literal_dynamic_imports_close_a_cycle(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import x\n",
        "pkg/b.py": "import importlib\n\ndef load():\n    return importlib.import_module(\"top.pkg.c\")\n",
        "pkg/c.py": "def f():\n    return __import__(\"top.pkg.d\", fromlist=[\"y\"])\n",
        "pkg/d.py": "from importlib import import_module\nm = import_module(\".a\", package=__package__)\n",
        # a name built at run time is not seen
        "pkg/e.py": "import importlib\nname = \"a\"\nm = importlib.import_module(f\"top.pkg.{name}\")\n",
    })
    graph = import_graph(mods)
    assert graph["top.pkg.b"] == {"top.pkg.c"} and graph["top.pkg.c"] == {"top.pkg.d"}
    assert graph["top.pkg.d"] == {"top.pkg.a"} and graph["top.pkg.e"] == set()
    assert import_cycles(graph) == [["top.pkg.a", "top.pkg.b", "top.pkg.c", "top.pkg.d", "top.pkg.a"]]


def test_dynamic_imports_resolve_like_the_import_system(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "import importlib\nm = importlib.import_module(\"..a\", \"top.pkg.sub\")\n",
        "pkg/sub/leaf.py": "import importlib\nm = importlib.import_module(\"..a\", __package__)\n",
        "pkg/a.py": "_secret = 1\n",
        "pkg/b.py": "top = __import__(\"top.pkg.a\")\nx = top._y\n",  # binds the top package, not a
        "pkg/c.py": "m = importlib.import_module(\".a\")\n",  # relative without a package: unseen
    })
    graph = import_graph(mods)
    assert graph["top.pkg.sub"] == {"top.pkg.a"} and graph["top.pkg.sub.leaf"] == {"top.pkg.a"}
    assert graph["top.pkg.b"] == {"top.pkg.a"} and graph["top.pkg.c"] == set()
    assert private_imports(mods) == []  # top._y: top.pkg.a is not what ``top`` names


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
