"""The generic reproduction runner: plan cells, run (or resume) them, derive, judge claims, report.

A paper package supplies a :class:`Workload` (see ``reproductions/sketchml/workload.py``):

* ``check_options(scale, preset, options)`` refuses, before the run writes anything, an option the
  scale cannot use;
* ``plan(ctx, done)`` returns the cells needed given the results so far (called until it asks for
  nothing new, so a later cell may depend on an earlier one, e.g. training runs on the learning rate
  a grid picked);
* ``steps(cell)`` is how many steps the progress display gives a cell (None: no inner bar);
* ``compute(cell, ctx)`` runs one cell and returns a JSON-able result (it may log to W&B through
  ``ctx.tracker`` and advance ``ctx.progress``);
* ``derive(ctx, results)`` turns cell results into the measured quantities claims refer to;
* ``report(ctx, results, measured)`` writes plots and returns the paper-specific report parts;
* ``probe()`` yields ``(label, value)`` items of what a few steps of the package's own training code
  compute on tiny synthetic inputs (:mod:`.workload_stamp`).

Output layout under ``out_dir``: ``<paper>/<scale>/{cells/, results.json, report.md, plots/, wandb/}``.
The cells are stamped with the codecs' digest (:mod:`.codec_stamp`) and the workload's
(:mod:`.workload_stamp`), both taken once at the start of a run: a cell cached by codecs that wrote
other bytes, or by a package whose probe computed other numbers, is computed again, not reused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

from gcbench.outputs import write_file

from .cells import Cell, CellOutcome, CellStore, commit_label, provenance, provenance_text, run_cells
from .codec_stamp import codec_stamp
from .workload_stamp import workload_stamp
from .claims import ClaimResult, evaluate_claims, gate_failures, gate_verdict_of
from .fingerprint import claim_entries
from .progress import RunProgress
from .report import environment, git_info, headline_lines, render_markdown, write_results_json
from .spec import Spec
from .tracking import Tracker


@dataclass
class RunContext:
    """What a workload's functions see about the run."""

    spec: Spec
    scale: str
    preset: Mapping[str, Any]
    tables: list[str]
    out_dir: Path
    tracker: Tracker
    progress: RunProgress
    options: Mapping[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)  # the workload's own (e.g. the loaded data set)


@dataclass
class ReportParts:
    """Paper-specific parts of the report."""

    header_lines: list[str] = field(default_factory=list)
    sections: list[tuple[str, str]] = field(default_factory=list)
    plots: list[tuple[str, str]] = field(default_factory=list)  # (caption, path relative to the report)
    units_ours: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # added to results.json


class Workload(Protocol):
    """What a paper package implements."""

    def check_options(self, scale: str, preset: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        """Refuse, before the run writes anything, an option this scale cannot use (a ``dataset`` whose
        name the paper's loaders do not know); cheap, nothing is loaded.

        Raises:
            DatasetUnavailableError: with a message that names what is accepted.
        """
        ...

    def plan(self, ctx: RunContext, done: Mapping[str, Mapping[str, Any]]) -> Sequence[Cell]: ...

    def steps(self, cell: Cell) -> int | None: ...

    def compute(self, cell: Cell, ctx: RunContext) -> Mapping[str, Any]: ...

    def derive(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]: ...

    def report(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]], measured: Mapping[str, float | None]) -> ReportParts: ...

    def probe(self) -> Iterable[tuple[str, Any]]:
        """What a few steps of the package's own training code compute on tiny synthetic inputs from
        fixed seeds, as ``(label, value)`` items (tensors, numbers, JSON-able values; no measured time):
        the workload's stamp (:mod:`.workload_stamp`)."""
        ...


@dataclass
class RunSummary:
    """What :func:`run_reproduction` returns."""

    exit_code: int
    run_dir: Path
    report_path: Path
    results_path: Path
    claims: list[ClaimResult]
    measured: dict[str, float | None]
    computed_cells: int
    cached_cells: int
    wall_s: float

    scale: str = ""

    @property
    def gate_failures(self) -> list[ClaimResult]:
        """Gated claims that differ."""
        return gate_failures(self.claims)

    def lines(self) -> list[str]:
        """The run's outcome for its user, one line each: where the report is, each headline claim
        (the paper's number, ours, the status) and the CI gate's verdict. ``gcbench reproduce`` prints
        them on standard output once the progress display has closed (the display is on standard error)."""
        return [f"report: {self.report_path}", *("headline " + line for line in headline_lines(self.claims, self.scale)),
                gate_verdict_of(self.claims).line()]


def run_dir_for(out_dir: Path, paper_id: str, scale: str) -> Path:
    """``out_dir/<paper>/<scale>``."""
    return Path(out_dir) / paper_id / scale


def cell_store(run_dir: Path, workload: Workload, *, commit: str | None = None) -> CellStore:
    """The cell cache of the run in ``run_dir`` (``run_dir/cells``), stamped with the codecs' digest
    (:func:`~.codec_stamp.codec_stamp`) and ``workload``'s (:func:`~.workload_stamp.workload_stamp`) as
    this checkout gives them now: the store a run reads and writes, and the one to open to read a
    finished run's cells back."""
    return CellStore(Path(run_dir) / "cells", commit=commit,
                     stamp={"codecs": codec_stamp(), "workload": workload_stamp(workload)})


def run_reproduction(
    spec: Spec,
    workload: Workload,
    *,
    scale: str,
    tables: Sequence[str] | None,
    out_dir: Path,
    resume: bool = True,
    progress: bool = True,
    track: bool = True,
    options: Mapping[str, Any] | None = None,
) -> RunSummary:
    """Run a reproduction end to end and write its results (see the module docstring).

    Returns a :class:`RunSummary` whose ``exit_code`` is 0, or 1 when a gated claim differs.
    """
    t_start = time.perf_counter()
    git_start = git_info()  # the code that computes the cells; the checkout may move during a long run
    preset = spec.scale(scale)
    selected = list(tables) if tables else list(preset.get("tables", spec.tables))  # a preset may run only some tables
    workload.check_options(scale, preset, dict(options or {}))  # before the run folder and the progress display
    run_dir = run_dir_for(out_dir, spec.paper_id, scale)
    run_dir.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(run_dir, enabled=track)
    results: dict[str, Mapping[str, Any]] = {}
    outcomes_all: list[CellOutcome] = []
    with RunProgress(0, enabled=progress) as prog:
        ctx = RunContext(spec, scale, preset, selected, run_dir, tracker, prog, dict(options or {}))
        prog.message(f"{spec.title}: scale {scale}, tables {', '.join(selected)} -> {run_dir}")
        t_stamp = time.perf_counter()
        store = cell_store(run_dir, workload, commit=commit_label(git_start))
        prog.message(f"cells stamped in {time.perf_counter() - t_stamp:.1f} s: codecs `{store.stamp['codecs']}`, "
                     f"workload `{store.stamp['workload']}` (a cell cached under other stamps is computed again)")
        while True:
            todo = [c for c in workload.plan(ctx, results) if c.name not in results]
            if not todo:
                break
            prog.add_cells(len(todo))

            def on_start(cell: Cell, is_cached: bool) -> None:
                prog.start_cell(cell.name, workload.steps(cell), is_cached)

            def on_done(o: CellOutcome) -> None:
                prog.finish_cell(o.cell.name, o.cached, o.elapsed_s)

            outcomes = run_cells(todo, lambda c: workload.compute(c, ctx), store, resume=resume,
                                 on_start=on_start, on_done=on_done)
            for name, o in outcomes.items():
                results[name] = o.result
                outcomes_all.append(o)
        measured = workload.derive(ctx, results)
        parts = workload.report(ctx, results, measured)
        claim_results = evaluate_claims(spec, measured, scale, tables=selected, labels=parts.labels)
        env = environment()
        if env["git"] != git_start:
            env["git_at_report"], env["git"] = env["git"], git_start
            parts.header_lines.append(  # the commit with "+dirty" where it had uncommitted changes: a run whose tree
                # only gained or lost uncommitted changes names one hash twice, with what told them apart
                f"**The checkout changed during the run**: cells computed from `{commit_label(git_start)}`, report written at "
                f"`{commit_label(env['git_at_report'])}`."
            )
        wall = time.perf_counter() - t_start
        made = provenance(outcomes_all)
        cached = sum(o.cached for o in outcomes_all)
        computed = len(outcomes_all) - cached
        results_path = run_dir / "results.json"
        write_results_json(
            results_path,
            {
                "paper": spec.paper_id,
                "title": spec.title,
                "scale": scale,
                "preset": dict(preset),
                "workload": spec.workload,
                "tables": selected,
                "environment": env,
                "tracking": tracker.info(),
                "wall_s": wall,
                "cells": {"computed": computed, "cached": cached, **made, "stamp": store.stamp, "results": results,
                          "rejected": [{"name": n, "reason": r} for n, r in store.rejected]},
                "measured": measured,
                "paper_values": {v.id: {"value": list(v.value) if isinstance(v.value, tuple) else v.value, "unit": v.unit,
                                        "source": v.source.__dict__, "measure": v.measure} for v in spec.values},
                "claims": claim_entries(claim_results, spec),
                "gate_failures": [r.claim.id for r in gate_failures(claim_results)],
                **parts.extra,
            },
        )
        if store.rejected:
            parts.header_lines.append(
                f"**{len(store.rejected)} cached cell(s) failed their integrity check and were recomputed**: "
                + ", ".join(f"`{name}` ({why})" for name, why in store.rejected)
            )
        header = list(parts.header_lines) + [
            f"Cells: {computed} computed, {cached} reused from `{store.root.relative_to(run_dir)}/` "
            f"(codecs' stamp `{store.stamp['codecs']}`, workload's `{store.stamp['workload']}`); "
            + provenance_text(made) + f"; wall time {wall:.0f} s",
            f"W&B: {tracker.info()['mode']}, {tracker.info()['runs']} run(s) in `wandb/`",
        ]
        md = render_markdown(spec, scale=scale, results=claim_results, measured=measured, env=env,
                             header_lines=header, sections=parts.sections, plots=parts.plots,
                             units_ours=parts.units_ours, tables_run=selected)
        report_path = run_dir / "report.md"
        write_file(report_path, md)
        failures = gate_failures(claim_results)
    return RunSummary(1 if failures else 0, run_dir, report_path, results_path, claim_results, dict(measured),
                      computed, cached, wall, scale)


def write_not_implemented(spec: Spec, *, scale: str, out_dir: Path) -> Path:
    """Report for a paper whose workload is not written yet: its numbers and claims, all "not run" (or
    "not at this scale" where the scale cannot test them)."""
    run_dir = run_dir_for(out_dir, spec.paper_id, scale)
    run_dir.mkdir(parents=True, exist_ok=True)
    claim_results = evaluate_claims(spec, {}, scale)
    env = environment()
    md = render_markdown(spec, scale=scale, results=claim_results, measured={}, env=env,
                         header_lines=["**This spec declares no reproduction to run** (implemented = false): the paper's numbers and the claims to check are listed; nothing was run."],
                         implemented=False)
    path = run_dir / "report.md"
    write_file(path, md)
    write_results_json(run_dir / "results.json", {"paper": spec.paper_id, "scale": scale, "implemented": False,
                                                   "environment": env,
                                                   "claims": claim_entries(claim_results, spec)})
    return path
