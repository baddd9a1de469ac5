"""``gcbench reproduce PAPER [--table N] [--scale smoke|full]``, as a plain function.

:func:`reproduce_main` runs a paper's reproduction and returns the process exit status:

* ``0`` (:data:`EXIT_OK`): the run finished and no gated claim differs;
* ``1`` (:data:`EXIT_GATE_FAILED`): a claim marked ``gate = true`` in the spec differs (CI fails);
* ``2`` (:data:`EXIT_USAGE`): unknown paper, scale or table, a malformed spec, or a data set that is
  not available (the message says what to do);
* ``3`` (:data:`EXIT_NOT_IMPLEMENTED`): the paper's workload is not written yet; a report listing the
  paper's numbers and claims (all "not run") is still written. Non-zero on purpose: nothing was
  reproduced, and a script must not mistake that for success.

Outputs go to ``<out_dir>/<paper>/<scale>/`` (default ``out_dir``: ``./results``): ``report.md``,
``results.json``, ``plots/*.png``, ``cells/*.json`` (the resume cache), ``wandb/`` (offline runs
unless ``WANDB_MODE`` is set).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from gcbench.commands.options import output_dir_problem
from gcbench.workloads.devices import resolve_device

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_IMPLEMENTED = 3
DEFAULT_OUT_DIR = "results"
#: The most workers a preset override may ask for (the papers' clusters have 10 to 16; every worker of a
#: simulated cluster holds its own model and gradient, and real ranks are processes of this machine).
MAX_WORKERS = 1024
#: The most epochs (or steps, for the papers whose presets count steps) an override may ask for: past the
#: longest run of the four papers (Sketched-SGD's 60,000 iterations), so a mistyped value fails at once.
MAX_EPOCHS = 1_000_000
#: Options that only some papers read, with those papers: for any other paper the option is refused
#: rather than silently ignored.
PAPER_OPTIONS = {"--compute-seconds-per-step": ("3lc",)}


def _tables(table: str | Sequence[str] | None) -> list[str] | None:
    """Normalise ``--table`` values: ``"2,4"``, ``"Table 3"``, ``"fig. 8"``, ``"Figure 8"`` -> keys."""
    if table is None:
        return None
    items = [table] if isinstance(table, str) else list(table)
    out: list[str] = []
    for item in items:
        for t in str(item).split(","):
            t = t.strip().lower().replace(" ", "").replace(".", "").removeprefix("table")
            if t.startswith("figure"):
                t = "fig" + t[len("figure"):]
            if t and t not in out:
                out.append(t)
    return out or None


def _override_problem(workers: int | None, epochs: int | None, lr: float | None) -> str | None:
    """Why a preset override cannot be honoured (None when every given value is usable)."""
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        return f"--workers must be between 1 and {MAX_WORKERS}, got {workers}"
    if epochs is not None and not 1 <= epochs <= MAX_EPOCHS:
        return f"--epochs must be between 1 and {MAX_EPOCHS}, got {epochs}"
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        return f"--lr must be a positive finite number, got {lr}"
    return None


def reproduce_main(
    paper: str,
    table: str | Sequence[str] | None = None,
    scale: str = "smoke",
    out_dir: str | os.PathLike | None = None,
    *,
    resume: bool = True,
    progress: bool = True,
    track: bool = True,
    dataset: str | None = None,
    workers: int | None = None,
    epochs: int | None = None,
    lr: float | None = None,
    data_cache: str | os.PathLike | None = None,
    compute_seconds_per_step: float | None = None,
    device: str | None = None,
) -> int:
    """Run the reproduction of ``paper`` and return the exit status (see the module docstring).

    Args:
        paper: ``sketchml``, ``sketched-sgd``, ``3lc`` or ``lgreco`` (aliases accepted).
        table: one table key or several (``"2"``, ``"2,4"``, ``["3", "fig8"]``); None = every table.
            Keys are the spec's ``[tables]``: :func:`gcbench.reproductions.table_catalogue` gives every
            paper's, and ``gcbench reproduce --help`` lists them.
        scale: a preset of the spec: ``smoke`` (CI, 2 CPU cores, minutes), ``full`` (a bigger machine),
            or another the spec defines (SketchML: ``real``, the TF-IDF reviews data).
        out_dir: where ``<paper>/<scale>/`` is written (default ``./results``).
        resume: reuse finished cells from an earlier, interrupted or identical run (False recomputes).
        progress: show the progress display (rich) on stderr.
        track: log each computed cell to Weights & Biases (offline unless ``WANDB_MODE`` is set).
        dataset: replace the preset's data set (each paper's values: ``gcbench reproduce --help``); for
            SketchML ``synthetic``, ``widedeep-reviews``, ``widedeep-bio`` or ``libsvm:PATH`` (e.g. KDD12;
            also ``$GCBENCH_SKETCHML_DATA``).
        workers, epochs, lr: override the preset (for exploration; the report records them).
        data_cache: folder of data prepared by ``gcbench data`` (default ``$GCBENCH_DATA`` or
            ``~/.cache/gcbench/data``).
        compute_seconds_per_step: seconds of one training step's computation measured elsewhere
            (e.g. on a GPU); it replaces this machine's forward/backward time in 3LC's modelled per-step
            time reduction (time table, curve over bandwidth, the 1 Gbps time claim); codec times,
            per-cell totals and time to accuracy stay measured here. Must be > 0.
        device: where training workloads run: ``cpu``, ``cuda`` or ``cuda:N``; None picks ``cuda`` when
            a CUDA device is available, else ``cpu``. Workloads read it as ``ctx.options["device"]``.
    """
    from gcbench.reproductions import canonical_name, PAPERS
    from gcbench.reproductions.framework.runner import run_reproduction, write_not_implemented
    from gcbench.reproductions.framework.spec import SpecError, load_spec

    try:
        name = canonical_name(paper)
    except KeyError as err:
        print(f"gcbench reproduce: {err.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(f"gcbench.reproductions.{PAPERS[name]}")
    try:
        spec = load_spec(module.SPEC_PATH)
        spec.scale(scale)
    except SpecError as err:
        print(f"gcbench reproduce: {err}", file=sys.stderr)
        return EXIT_USAGE
    problem = _override_problem(workers, epochs, lr)
    given = {"--compute-seconds-per-step": compute_seconds_per_step}
    for option, papers in PAPER_OPTIONS.items():
        if given[option] is not None and name not in papers and problem is None:
            problem = f"{option} applies to {', '.join(papers)} only, not {name}"
    if problem:
        print(f"gcbench reproduce: {problem}", file=sys.stderr)
        return EXIT_USAGE
    problem = output_dir_problem(out_dir, "--out")
    if problem:
        print(f"gcbench reproduce: {problem}", file=sys.stderr)
        return EXIT_USAGE
    tables = _tables(table)
    if table is not None and tables is None:
        print(f"gcbench reproduce: --table {table!r} names no table; tables: {', '.join(spec.tables)}", file=sys.stderr)
        return EXIT_USAGE
    if dataset is not None and not dataset.strip():
        print("gcbench reproduce: --dataset is empty; leave it out to use the preset's data", file=sys.stderr)
        return EXIT_USAGE
    if tables:
        unknown = [t for t in tables if t not in spec.tables]
        if unknown:
            print(f"gcbench reproduce: {name} has no table {', '.join(unknown)}; tables: {', '.join(spec.tables)}", file=sys.stderr)
            return EXIT_USAGE
    out = Path(out_dir if out_dir is not None else DEFAULT_OUT_DIR)
    if not spec.implemented or not hasattr(module, "workload"):
        path = write_not_implemented(spec, scale=scale, out_dir=out)
        print(f"gcbench reproduce: the {name} spec declares no reproduction to run (implemented = false); "
              f"its paper numbers and claims are listed in {path}", file=sys.stderr)
        return EXIT_NOT_IMPLEMENTED
    if compute_seconds_per_step is not None and not (math.isfinite(compute_seconds_per_step) and compute_seconds_per_step > 0):
        print(f"gcbench reproduce: --compute-seconds-per-step must be a positive finite number of seconds, "
              f"got {compute_seconds_per_step}", file=sys.stderr)
        return EXIT_USAGE
    try:
        resolved_device = resolve_device(device)
    except ValueError as err:
        print(f"gcbench reproduce: {err}", file=sys.stderr)
        return EXIT_USAGE
    options: dict[str, Any] = {"device": resolved_device, "dataset": dataset, "workers": workers, "epochs": epochs, "lr": lr, "data_cache": data_cache,
                               "compute_seconds_per_step": compute_seconds_per_step}
    from gcbench.data.errors import DataFormatError, DatasetUnavailableError

    try:
        summary = run_reproduction(spec, module.workload(), scale=scale, tables=tables, out_dir=out, resume=resume,
                                   progress=progress, track=track, options={k: v for k, v in options.items() if v is not None})
    except (DatasetUnavailableError, DataFormatError, FileNotFoundError) as err:
        print(f"gcbench reproduce: {err}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(summary.lines()), flush=True)
    return summary.exit_code


if __name__ == "__main__":  # pragma: no cover - `python -m gcbench.commands.reproduce sketchml [scale]`
    if not 2 <= len(sys.argv) <= 3:
        print("usage: python -m gcbench.commands.reproduce PAPER [SCALE]  (or: gcbench reproduce --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    raise SystemExit(reproduce_main(sys.argv[1], scale=sys.argv[2] if len(sys.argv) > 2 else "smoke"))
