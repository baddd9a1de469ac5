"""The runner and report: paper values come from the spec, ours from the cells; JSON, Markdown, PNG, exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcbench.reproductions.framework.cells import Cell
from gcbench.reproductions.framework.report import new_figure, savefig
from gcbench.reproductions.framework.runner import ReportParts, run_reproduction
from gcbench.reproductions.framework.spec import load_spec

SPEC = """
schema = 2
[paper]
id = "toy"
title = "Toy paper"
citation = "Nobody 2001"
source = "seeds/toy.txt"
[scales.smoke]
n = 3
[scales.full]
n = 5
[tables.1]
title = "Table 1: speeds"
[tables.2]
title = "Table 2: a depending table"
[[values]]
id = "speed.fast"
value = 123.25
unit = "op/s"
table = "1"
source = { paper = "Toy", table = "Table 1", row = "fast", column = "speed" }
[[values]]
id = "speed.slow"
value = 4.5
unit = "op/s"
table = "1"
source = { paper = "Toy", table = "Table 1", row = "slow", column = "speed" }
[[values]]
id = "grid.best"
value = 2
table = "2"
source = { paper = "Toy", table = "Table 2", row = "best", column = "x" }
[[claims]]
id = "fast-near"
text = "fast is about 123"
kind = "result"
check = "near"
quantities = ["speed.fast"]
paper = ["speed.fast"]
tolerance = 0.05
gate = GATE
scale_dependent = false
tables = ["1"]
[[claims]]
id = "order"
text = "slow < fast"
kind = "result"
check = "order"
quantities = ["speed.slow", "speed.fast"]
paper = ["speed.slow", "speed.fast"]
tolerance = 0.0
gate = false
scale_dependent = true
tables = ["1"]
"""


class ToyWorkload:
    """Two cells whose results are chosen by the test; a second round depends on the first."""

    def __init__(self, fast: float, code: str = "toy code 1"):
        self.fast = fast
        self.code = code  # what the probe says the package's code computes
        self.calls: list[str] = []

    def check_options(self, scale, preset, options):
        pass

    def plan(self, ctx, done):
        cells = [Cell("fast", {"v": self.fast, "n": ctx.preset["n"]}), Cell("slow", {"v": 9876.5})]
        if "fast" in done:  # a cell planned only once another finished (like an lr grid)
            cells.append(Cell("after", {"from": done["fast"]["value"]}))
        return cells

    def steps(self, cell):
        return 2

    def probe(self):
        yield "code", self.code

    def compute(self, cell, ctx):
        self.calls.append(cell.name)
        run = ctx.tracker.start(cell.name, {"cell": cell.name, "scale": ctx.scale}, tags=["toy"])
        for step in range(2):
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            ctx.progress.advance_epoch()
        run.finish()
        return {"value": cell.config.get("v", 0.0)}

    def derive(self, ctx, results):
        return {"speed.fast": results["fast"]["value"], "speed.slow": results["slow"]["value"]}

    def report(self, ctx, results, measured):
        fig, ax = new_figure(1, 1)
        ax.plot([0, 1], [measured["speed.slow"], measured["speed.fast"]])
        p = savefig(fig, ctx.out_dir / "plots" / "toy.png")
        return ReportParts(header_lines=["Data set: toy"], sections=[("Notes", "hand-written notes")],
                           plots=[("toy plot", "plots/" + p.name)], extra={"toy": True})


@pytest.fixture
def spec_file(tmp_path):
    def make(gate: bool) -> Path:
        p = tmp_path / f"spec_{gate}.toml"
        p.write_text(SPEC.replace("GATE", "true" if gate else "false"))
        return p

    return make


def run(spec_path, wl, out, **kw):
    return run_reproduction(load_spec(spec_path), wl, scale="smoke", tables=None, out_dir=out, progress=False, **kw)


def test_report_contents(tmp_path, spec_file, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    wl = ToyWorkload(fast=120.0)
    s = run(spec_file(True), wl, tmp_path / "out")
    assert s.exit_code == 0 and wl.calls == ["fast", "slow", "after"]
    md = s.report_path.read_text()
    # paper values come from the spec file, ours from the cells
    assert "123.25 op/s" in md and "4.5 op/s" in md
    assert "120 op/s" in md and "9,876 op/s" in md  # (the 'slow' cell's value, formatted)
    row = next(line for line in md.splitlines() if line.startswith("| **fast-near**"))
    assert "speed 123.25" in row and "120" in row and "±5%" in row and "within tolerance" in row
    row = next(line for line in md.splitlines() if line.startswith("| **order**"))
    assert "differs" in row and "scale-dependent" in row
    assert "hand-written notes" in md and "![toy plot](plots/toy.png)" in md and "Data set: toy" in md
    assert "CI gate: passed" in md
    assert "Table 2: a depending table" in md and "not run" in md  # grid.best was never measured
    png = (s.run_dir / "plots" / "toy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads(s.results_path.read_text())
    assert res["measured"] == {"speed.fast": 120.0, "speed.slow": 9876.5}
    assert res["paper_values"]["speed.fast"]["value"] == 123.25
    assert res["paper_values"]["speed.fast"]["source"]["row"] == "fast"
    assert {c["id"]: c["status"] for c in res["claims"]} == {"fast-near": "within tolerance", "order": "differs"}
    env = res["environment"]
    assert env["packages"]["torch"] and env["machine"]["cpu_count"] and "commit" in env["git"]
    assert res["preset"] == {"n": 3} and res["toy"] is True
    assert res["cells"]["computed"] == 3 and res["tracking"]["runs"] == 3
    assert len(list((s.run_dir / "wandb").glob("offline-run-*"))) == 3


def test_gated_claim_fails_the_run_and_resume_skips_cells(tmp_path, spec_file, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "out"
    s = run(spec_file(True), ToyWorkload(fast=100.0), out)  # 100 vs 123.25: outside 5%
    assert s.exit_code == 1 and [r.claim.id for r in s.gate_failures] == ["fast-near"]
    assert "CI gate: FAILED" in s.report_path.read_text()
    assert json.loads(s.results_path.read_text())["gate_failures"] == ["fast-near"]
    # the same claim not gated: exit 0
    wl = ToyWorkload(fast=100.0)
    s = run(spec_file(False), wl, out)
    assert s.exit_code == 0
    assert "**CI gate: none** (no claim of this paper gates CI)." in s.report_path.read_text()  # not "passed"
    assert wl.calls == []  # every cell came from the cache of the first run
    assert s.cached_cells == 3 and s.computed_cells == 0
    assert not (s.run_dir / "wandb").exists() or not list((s.run_dir / "wandb").glob("offline-run-*"))


def test_table_selection_marks_other_claims_not_run(tmp_path, spec_file, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    s = run_reproduction(load_spec(spec_file(True)), ToyWorkload(fast=100.0), scale="smoke", tables=["2"],
                         out_dir=tmp_path, progress=False)
    assert s.exit_code == 0  # the failing gated claim belongs to table 1, not run
    assert {r.claim.id: r.status for r in s.claims} == {"fast-near": "not run", "order": "not run"}


def test_results_name_the_commit_the_cells_ran_on(tmp_path, spec_file, monkeypatch):
    # a long run outlives commits in its checkout: the results name the start commit, and the report says it moved
    from gcbench.reproductions.framework import report, runner

    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setattr(runner, "git_info", lambda: {"commit": "a" * 40, "dirty": False})
    monkeypatch.setattr(report, "git_info", lambda: {"commit": "b" * 40, "dirty": False})
    s = run(spec_file(True), ToyWorkload(fast=120.0), tmp_path / "out")
    env = json.loads(s.results_path.read_text())["environment"]
    assert env["git"]["commit"] == "a" * 40 and env["git_at_report"]["commit"] == "b" * 40
    md = s.report_path.read_text()
    assert "The checkout changed during the run" in md and "a" * 40 in md
    monkeypatch.setattr(report, "git_info", lambda: {"commit": "a" * 40, "dirty": False})
    s = run(spec_file(True), ToyWorkload(fast=120.0), tmp_path / "again")
    assert "git_at_report" not in json.loads(s.results_path.read_text())["environment"]
    assert "The checkout changed" not in s.report_path.read_text()
    # only uncommitted changes appeared: one hash, told apart by its "+dirty"
    monkeypatch.setattr(report, "git_info", lambda: {"commit": "a" * 40, "dirty": True})
    s = run(spec_file(True), ToyWorkload(fast=120.0), tmp_path / "dirtied")
    assert f"cells computed from `{'a' * 40}`, report written at `{'a' * 40}+dirty`" in s.report_path.read_text()


def test_a_report_from_reused_cells_states_their_compute_time_and_commit(tmp_path, spec_file, monkeypatch):
    # a report re-derived from earlier cells is written in a moment, maybe at another commit: the cells say how
    # long their numbers took and where they were computed
    from gcbench.reproductions.framework import report, runner

    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "git_info", lambda: {"commit": "a" * 40, "dirty": False})
    s = run(spec_file(True), ToyWorkload(fast=120.0), out)
    first = json.loads(s.results_path.read_text())["cells"]
    assert (first["computed"], first["cached"], first["commits"], first["unrecorded"]) == (3, 0, {"a" * 40: 3}, 0)
    files = {p.name.split("-")[0]: json.loads(p.read_text()) for p in (s.run_dir / "cells").glob("*.json")}
    assert {f["commit"] for f in files.values()} == {"a" * 40}
    assert first["compute_s"] == pytest.approx(sum(f["elapsed_s"] for f in files.values()))
    # the recorded seconds are what the report adds up, not this run's: make them large enough to see
    for name, f in files.items():
        f["elapsed_s"] = {"fast": 100.0, "slow": 20.0, "after": 3.5}[name]
        next((s.run_dir / "cells").glob(f"{name}-*.json")).write_text(json.dumps(f))
    monkeypatch.setattr(runner, "git_info", lambda: {"commit": "b" * 40, "dirty": True})
    monkeypatch.setattr(report, "git_info", lambda: {"commit": "b" * 40, "dirty": True})
    wl = ToyWorkload(fast=120.0)
    s2 = run(spec_file(True), wl, out)
    assert wl.calls == []
    again = json.loads(s2.results_path.read_text())["cells"]
    assert (again["computed"], again["cached"], again["compute_s"], again["commits"]) == (0, 3, 123.5, {"a" * 40: 3})
    assert s2.wall_s < 123.5
    line = next(x for x in s2.report_path.read_text().splitlines() if x.startswith("- Cells:"))
    assert "0 computed, 3 reused" in line and "cells' compute time 123.5 s, at `aaaaaaaaaaaa`" in line
    # a new cell computed now is recorded at this checkout, marked as having uncommitted changes
    wl = ToyWorkload(fast=121.0)
    s3 = run(spec_file(True), wl, out)
    assert wl.calls == ["fast", "after"]  # "after" is planned from fast's value
    mixed = json.loads(s3.results_path.read_text())["cells"]
    assert mixed["commits"] == {"a" * 40: 1, "b" * 40 + "+dirty": 2}
    line = next(x for x in s3.report_path.read_text().splitlines() if x.startswith("- Cells:"))
    assert "`aaaaaaaaaaaa` (1 cell), `bbbbbbbbbbbb` (uncommitted changes) (2 cells)" in line


def test_a_tampered_cell_is_recomputed_and_the_report_says_so(tmp_path, spec_file, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "out"
    s = run(spec_file(True), ToyWorkload(fast=120.0), out)
    assert s.exit_code == 0
    cell_file = next((s.run_dir / "cells").glob("fast-*.json"))
    data = json.loads(cell_file.read_text())
    data["result"]["value"] = 123.25  # a forged result that would make the claim "reproduced"
    cell_file.write_text(json.dumps(data))
    wl = ToyWorkload(fast=120.0)
    s2 = run(spec_file(True), wl, out)
    assert wl.calls == ["fast"]  # the forged cell is recomputed, the others reused
    assert s2.measured["speed.fast"] == 120.0
    md = s2.report_path.read_text()
    assert "1 cached cell(s) failed their integrity check and were recomputed" in md and "`fast`" in md
    res = json.loads(s2.results_path.read_text())
    assert res["cells"]["rejected"] == [{"name": "fast", "reason": "content does not match its digest"}]


def test_report_opens_with_headlines_and_separates_consistency_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    text = SPEC.replace("GATE", "false").replace('kind = "result"\ncheck = "order"', 'kind = "consistency"\ncheck = "order"')
    text = text.replace('kind = "result"\ncheck = "near"', 'kind = "result"\nheadline = true\ncheck = "near"')
    p = tmp_path / "spec.toml"
    p.write_text(text)
    s = run(p, ToyWorkload(fast=120.0), tmp_path / "out")
    md = s.report_path.read_text()
    head, rest = md.split("## Results (measured claims)")
    assert "## Headline results" in head and "**fast-near**" in head and "`smoke`" in head
    results_part, consistency = rest.split("## Consistency checks")
    assert "**fast-near**" in results_part and "**order**" not in results_part
    assert "**order**" in consistency
    assert "Statuses of the measured claims: reproduced: 0, within tolerance: 1, differs: 0" in md


def test_guards_have_their_own_section_and_are_not_counted_as_results(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    text = SPEC.replace("GATE", "true").replace('kind = "result"\ncheck = "near"', 'kind = "guard"\ncheck = "near"')
    p = tmp_path / "spec.toml"
    p.write_text(text)
    s = run(p, ToyWorkload(fast=120.0), tmp_path / "out")
    md = s.report_path.read_text()
    results_part, guards = md.split("## Results (measured claims)")[1].split("## Guards of the method")
    assert "**fast-near**" not in results_part and "**fast-near**" in guards
    assert "Statuses of the measured claims: reproduced: 0, within tolerance: 0, differs: 1" in results_part
    assert "Statuses of the guards: reproduced: 0, within tolerance: 1, differs: 0" in guards
    assert s.exit_code == 0 and "CI gate: passed" in md  # a gated guard still gates CI
    s = run(p, ToyWorkload(fast=50.0), tmp_path / "out2")
    assert s.exit_code == 1 and [r.claim.id for r in s.gate_failures] == ["fast-near"]


def test_results_section_counts_not_at_this_scale_apart_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    text = SPEC.replace("GATE", "false").replace(
        "scale_dependent = true\n",
        'scale_dependent = true\nheadline = true\nmeaningful_at = ["full"]\nscale_reason = "the order needs the full grid"\n')
    p = tmp_path / "spec.toml"
    p.write_text(text)
    s = run(p, ToyWorkload(fast=120.0), tmp_path / "out")
    md = s.report_path.read_text()
    headlines, rest = md.split("## Results (measured claims)")
    assert "**not at this scale**: the order needs the full grid" in headlines
    results_part = rest.split("## Paper values and ours")[0]
    table, apart = results_part.split("### Not at this scale")
    assert "**fast-near**" in table and "**order**" not in table
    assert "**order**" in apart and "the order needs the full grid" in apart and "`full`" in apart
    # the reason has its column: the detail column says what the check would have said, not the reason again
    assert apart.count("the order needs the full grid") == 1
    assert "| meaningful at scale(s) full; at this scale the check would say " in apart
    assert "differs: 0, not run: 0; not at this scale (counted apart): 1." in md
    assert next(c for c in json.loads(s.results_path.read_text())["claims"] if c["id"] == "order")["status"] == "not at this scale"


@pytest.mark.parametrize(("claims", "line", "cell"), [
    ([("a", True, "differs"), ("b", True, "reproduced"), ("c", False, "differs")],
     "CI gate: FAILED (a)", "FAILED: a"),
    ([("a", True, "reproduced"), ("b", True, "within tolerance")],
     "CI gate: passed (no gated claim differs)", "passed"),
    ([("a", True, "reproduced"), ("b", True, "not run"), ("c", True, "not at this scale")],
     "CI gate: passed (1 of 3 gated claims measured in this run, none differs)",
     "passed (1 of 3 gated claims measured in this run, none differs)"),
    ([("a", True, "not run"), ("b", False, "reproduced")],
     "CI gate: not judged (the gated claim was not measured in this run)",
     "not judged (the gated claim was not measured in this run)"),
    ([("a", False, "differs")], "CI gate: none (no gated claim)", "none (no gated claim)"),
])
def test_gate_verdict_says_what_the_run_judged(claims, line, cell):
    """A gated claim the run did not measure neither passes nor fails the gate, and the wording says so."""
    from gcbench.reproductions.framework.claims import gate_verdict

    v = gate_verdict(claims)
    assert (v.line(), v.cell()) == (line, cell)


def test_a_not_at_this_scale_result_keeps_its_reason_and_what_the_check_would_say_apart():
    """The detail is the reason, then in parentheses what the check would have said; the table's detail
    column shows only the latter (the reason has its own column), and the whole detail where a result
    has nothing apart."""
    from types import SimpleNamespace

    from gcbench.reproductions.framework.claims import ClaimResult, not_at_scale
    from gcbench.reproductions.framework.report import out_of_scale_table

    claim = SimpleNamespace(id="c", text="t", meaningful_at=None)
    checked = ClaimResult(claim, "differs", "p", "o", "a (x) < b (x)", {"q": 1.0})
    said = "flag = 0; the check would say differs: a (x) < b (x)"
    r = not_at_scale(checked, "the reason", said, {"q": 1.0, "flag": 0.0})
    assert (r.status, r.reason, r.said) == ("not at this scale", "the reason", said)
    assert r.detail == f"the reason ({said})" and r.measured == {"q": 1.0, "flag": 0.0}
    assert not_at_scale(checked, "why", "x").measured == {"q": 1.0}
    table = out_of_scale_table([r, ClaimResult(claim, "not at this scale", "p", "o", "whole detail", {}, "why")])
    assert table.count("the reason") == 1 and f"| {said} |" in table and "| whole detail |" in table


def test_cells_of_codecs_that_wrote_other_bytes_are_computed_again(tmp_path, spec_file, monkeypatch):
    from gcbench.reproductions.framework import runner

    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "out"
    s = run(spec_file(True), ToyWorkload(fast=120.0), out)
    stamp = json.loads(s.results_path.read_text())["cells"]["stamp"]
    # the real probes, recorded and named on the Cells line
    assert stamp == {"codecs": runner.codec_stamp(), "workload": runner.workload_stamp(ToyWorkload(fast=120.0))}
    line = next(x for x in s.report_path.read_text().splitlines() if x.startswith("- Cells:"))
    assert f"codecs' stamp `{stamp['codecs']}`, workload's `{stamp['workload']}`" in line
    wl = ToyWorkload(fast=120.0)
    run(spec_file(True), wl, out)
    assert wl.calls == []  # the same codecs and workload code: every cell reused
    monkeypatch.setattr(runner, "codec_stamp", lambda: "0" * 16)  # a codec whose bytes changed since
    wl = ToyWorkload(fast=120.0)
    s3 = run(spec_file(True), wl, out)
    assert wl.calls == ["fast", "slow", "after"] and s3.cached_cells == 0
    assert json.loads(s3.results_path.read_text())["cells"]["rejected"] == []  # new cells, not suspicious ones


def test_cells_of_workload_code_that_computes_otherwise_are_computed_again(tmp_path, spec_file, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "out"
    run(spec_file(True), ToyWorkload(fast=120.0), out)
    wl = ToyWorkload(fast=120.0, code="toy code 2")  # same configs, a model or trainer that computes otherwise
    s = run(spec_file(True), wl, out)
    assert wl.calls == ["fast", "slow", "after"] and s.cached_cells == 0
    wl = ToyWorkload(fast=120.0, code="toy code 2")
    assert run(spec_file(True), wl, out).cached_cells == 3 and wl.calls == []


