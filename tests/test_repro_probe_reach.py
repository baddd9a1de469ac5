"""Each paper's probe (the workload's stamp, ``reproductions/<paper>/probe.py``) reaches every function of
its package that the package's cells call, but for those its ``UNPROBED`` names with the reason.

The cells of a small scale (3LC, Sketched-SGD, L-GreCo: ``micro``; SketchML: ``smoke`` for one epoch)
are computed under a profiler that records every function of the package called in this process;
the probe is run under the same profiler; every function the cells called must be one the probe
called or one ``UNPROBED`` declares. A function added to a cell's path without a probe that reaches
it (or a declaration that it still needs the package's ``CODE_VERSION``) fails here."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from gcbench.reproductions.framework.progress import RunProgress
from gcbench.reproductions.framework.runner import RunContext
from gcbench.reproductions.framework.tracking import Tracker

from dictd_fixtures import sentence_dict

#: A function's code flag for an optimized (function) scope: module and class bodies lack it.
CO_OPTIMIZED = 0x1


def import_package(pkg: str) -> Any:
    """``gcbench.reproductions.<pkg>`` with every module of it imported: what their bodies run at import
    happens here, outside the traced runs, whichever test imported them first."""
    mod = importlib.import_module(f"gcbench.reproductions.{pkg}")
    for info in pkgutil.iter_modules(mod.__path__):
        importlib.import_module(f"{mod.__name__}.{info.name}")
    return mod


def clear_caches(root: Path) -> None:
    """Empty the memo of every ``functools`` cached function of the modules under ``root``: a call that the
    memo answers runs no Python frame, so an earlier test's call would hide it from :func:`reached`."""
    folder = str(root)
    for module in list(sys.modules.values()):
        if not (getattr(module, "__file__", None) or "").startswith(folder):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def reached(fn: Callable[[], Any], root: Path) -> set[str]:
    """``module.py:qualname`` of every function under ``root`` called (in this thread) while ``fn`` runs,
    ``probe.py`` aside (memoized functions' caches emptied first: :func:`clear_caches`)."""
    seen: set[str] = set()
    folder = str(root)
    clear_caches(root)

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_flags & CO_OPTIMIZED and code.co_filename.startswith(folder):
            name = Path(code.co_filename).name
            if name != "probe.py":
                seen.add(f"{name}:{code.co_qualname}")

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(before)
    return seen


def declared(name: str, unprobed: dict[str, str]) -> bool:
    """Whether ``module.py:qualname`` falls under an ``UNPROBED`` entry: the whole module, or the qualname
    and what it defines inside (``<locals>``, methods)."""
    module, qualname = name.split(":", 1)
    for key in unprobed:
        mod, _, prefix = key.partition(":")
        if mod == module and (not prefix or qualname == prefix or qualname.startswith(prefix + ".")):
            return True
    return False


def cells_reach(pkg: str, scale: str, options: dict[str, Any], out: Path) -> set[str]:
    """What computing every cell of ``pkg``'s ``scale`` (planned as the runner plans them) reaches."""
    mod = import_package(pkg)
    spec, wl = mod.load(), mod.workload()
    preset = spec.scale(scale)
    tables = list(preset.get("tables", spec.tables))
    root = Path(mod.__file__).parent
    seen: set[str] = set()
    with RunProgress(0, enabled=False) as prog:
        ctx = RunContext(spec, scale, preset, tables, out, Tracker(out, enabled=False), prog, {"device": "cpu", **options})
        results: dict[str, Any] = {}
        while True:
            todo = [c for c in wl.plan(ctx, results) if c.name not in results]
            if not todo:
                break
            for cell in todo:
                got: dict[str, Any] = {}
                seen |= reached(lambda cell=cell: got.setdefault("r", wl.compute(cell, ctx)), root)
                results[cell.name] = got["r"]
    return seen


def probe_reach(pkg: str) -> tuple[set[str], dict[str, str]]:
    """What ``pkg``'s probe reaches, and its ``UNPROBED``."""
    mod = import_package(pkg)
    probe = importlib.import_module(f"gcbench.reproductions.{pkg}.probe")
    return reached(lambda: list(mod.workload().probe()), Path(mod.__file__).parent), probe.UNPROBED


RUNS = {
    "threelc": ("micro", {}),
    "lgreco": ("micro", {}),
    "sketched_sgd": ("micro", {"dataset": "dictd"}),
    "sketchml": ("smoke", {"epochs": 1}),
}


@pytest.mark.distributed  # L-GreCo's cells launch gloo ranks
@pytest.mark.parametrize("pkg", list(RUNS))
def test_the_probe_reaches_every_function_the_cells_call(pkg, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    scale, options = RUNS[pkg]
    if options.get("dataset") == "dictd":
        options = {**options, "dataset": f"dictd:{sentence_dict(tmp_path / 'dict')}"}
    cells = cells_reach(pkg, scale, options, tmp_path / "out")
    probed, unprobed = probe_reach(pkg)
    missing = sorted(n for n in cells - probed if not declared(n, unprobed))
    assert not missing, f"the cells call functions the probe does not reach and UNPROBED does not name: {missing}"
    # the check can fail: without the probe, what the cells call is not all declared
    assert [n for n in cells if not declared(n, unprobed)]


def test_declarations_match_modules_and_functions_as_written():
    assert declared("workload.py:X.compute", {"workload.py": ""})
    assert declared("vision.py:load_image_data", {"vision.py:load_image_data": ""})
    assert declared("vision.py:load_image_data.<locals>.f", {"vision.py:load_image_data": ""})
    assert not declared("vision.py:load_image_data_fast", {"vision.py:load_image_data": ""})
    assert not declared("train.py:train", {"workload.py": "", "vision.py:train": ""})
