"""``gcbench results``: the table of headline claims from committed reports, README's generated block, publishing.

The generator is fed fixture specs and reports in temporary folders; the last tests check that the
committed RESULTS.md and README.md block are what the committed reports generate (a stale table fails).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.reproductions.framework.fingerprint import spec_fingerprints
from gcbench.reproductions.framework.published import (
    PublishError,
    ResultsError,
    check_run,
    committed_dir,
    load_committed,
    publish,
)
from gcbench.reproductions.framework.results_table import (
    BEGIN,
    END,
    NO_COMMITTED_RUN,
    NOT_AT_SCALE,
    NOT_IN_RUN,
    OUTDATED,
    BlockError,
    PaperReports,
    current_block,
    main_scale,
    outdated,
    outdated_reports,
    preset_changes,
    recheck,
    readme_rows,
    render_readme_block,
    render_results_md,
    replace_block,
    rows,
    summary,
)
from gcbench.reproductions.framework.spec import parse_spec
from gcbench.commands.results import generated, publish_main, results_main

REPO = Path(__file__).resolve().parents[1]
SOURCE = {"paper": "P", "table": "T", "row": "r", "column": "speed"}


def make_spec(scales=("smoke", "full", "claims"), tolerance=0.1):
    claim = {"kind": "result", "check": "near", "tolerance": tolerance, "gate": False, "scale_dependent": True, "tables": ["1"]}
    raw = {
        "schema": 2,
        "paper": {"id": "toy", "title": "Toy", "citation": "c", "source": "s"},
        "scales": {s: {} for s in scales},
        "tables": {"1": {"title": "T1"}},
        "values": [{"id": "v", "value": 7.24, "unit": "x", "table": "1", "source": SOURCE}],
        "claims": [
            {**claim, "id": "h-one", "text": "speed is about 7.24x", "headline": True, "quantities": ["q"], "paper": ["v"]},
            {**claim, "id": "h-new", "text": "a claim added after the run", "headline": True, "quantities": ["q"], "paper": ["v"]},
            {**claim, "id": "plain", "text": "not a headline", "quantities": ["q"], "paper": ["v"]},
        ],
    }
    return parse_spec(raw, Path("toy.toml"))


def results_json(scale, claims, *, commit="0123456789abcdef0123456789abcdef01234567", paper="toy", **extra):
    return {
        "paper": paper, "scale": scale, "wall_s": 2712.53,
        "environment": {"git": {"commit": commit, "dirty": False}, "timestamp": "2026-11-20T10:11:12+00:00",
                        "machine": {"cpu_model": "AMD EPYC 9654", "cpu_count": 2, "cuda": None}},
        "claims": claims, "gate_failures": [], **extra,
    }


def claim_json(cid, status, ours="speed 7.2412345678901", **kw):
    return {"id": cid, "text": f"text of {cid}", "kind": "result", "status": status, "paper": "speed 7.24 x",
            "ours": ours, "detail": kw.pop("detail", "d"), "measured": {"q": 7.2412345678901234}, **kw}


def commit_report(root: Path, package: str, scale: str, data: dict) -> Path:
    folder = committed_dir(root, package, scale)
    folder.mkdir(parents=True)
    (folder / "report.md").write_text("# report\n")
    (folder / "results.json").write_text(json.dumps(data))
    return folder


def test_rows_come_from_the_committed_reports_of_the_main_scale_then_others(tmp_path):
    commit_report(tmp_path, "toy", "claims", results_json("claims", [claim_json("h-one", "within tolerance"),
                                                                      claim_json("plain", "differs")]))
    commit_report(tmp_path, "toy", "real", results_json("real", [
        claim_json("h-one", "not at this scale", ours="speed 1,041", detail="needs the paper's cluster (meaningful at full)"),
        claim_json("h-new", "not run", ours="—")]))
    papers = [PaperReports("toy", "toy", make_spec(), load_committed(tmp_path, "toy"))]
    got = rows(papers)
    assert [(r.claim, r.scale, r.status) for r in got] == [
        ("h-one", "claims", "within tolerance"), ("h-new", "claims", NOT_IN_RUN), ("h-one", "real", "not at this scale")]
    first = got[0]
    assert first.ours == "speed 7.2412345678901"  # the report's text, whole
    assert first.measured == {"q": 7.2412345678901234}  # and the measured value at full precision
    assert first.paper_value == "speed 7.24 x"
    assert (first.date, first.commit, first.report) == ("2026-11-20", "0123456789abcdef0123456789abcdef01234567",
                                                      "reproductions/toy/results/claims/report.md")
    md = render_results_md(papers)
    assert "speed 7.2412345678901" in md and "[report](reproductions/toy/results/claims/report.md)" in md
    assert "`0123456789ab`" in md and "2026-11-20" in md and "AMD EPYC 9654 (2 CPUs)" in md and "2712.5 s" in md
    assert "- **toy h-one** (`real`): needs the paper's cluster" in md
    counts = {(c["scale"], c["claims"]): c["counts"] for c in summary(papers)["counts"]}
    assert counts[("claims", "headline")]["within tolerance"] == 1 and counts[("claims", "headline")][NOT_IN_RUN] == 1
    assert counts[("claims", "all measured")]["differs"] == 1
    assert counts[("real", "headline")]["not at this scale"] == 1 and counts[("real", "headline")]["differs"] == 0
    assert "plain" not in {r["claim"] for r in summary(papers)["rows"]}


def test_the_runs_table_says_how_long_the_cells_took_and_where_they_were_computed(tmp_path):
    # a report re-derived from reused cells took seconds; its numbers took what its cells recorded
    reused = {"computed": 0, "cached": 8, "compute_s": 394.04, "unrecorded": 0, "commits": {"f" * 40: 8}, "results": {}}
    commit_report(tmp_path, "toy", "claims", results_json("claims", [claim_json("h-one", "reproduced")], cells=reused))
    commit_report(tmp_path, "toy", "real", results_json("real", [claim_json("h-one", "reproduced")],
                                                       cells={"computed": 3, "cached": 0, "results": {}}))
    papers = [PaperReports("toy", "toy", make_spec(), load_committed(tmp_path, "toy"))]
    md = render_results_md(papers)
    row = next(line for line in md.splitlines() if line.startswith("| toy | `claims` |") and "2712.5 s" in line)
    assert "| 0 computed, 8 reused; cells' compute time 394.0 s, at `ffffffffffff` |" in row
    row = next(line for line in md.splitlines() if line.startswith("| toy | `real` |") and "2712.5 s" in line)
    assert "| 3 computed, 0 reused |" in row  # a report from before cells recorded their time: the counts
    run = next(r for r in summary(papers)["runs"] if r["scale"] == "claims")
    assert run["cells"] == {k: v for k, v in reused.items() if k != "results"}


def test_a_paper_without_a_committed_run_gets_its_rows_and_the_command(tmp_path):
    papers = [PaperReports("toy", "toy", make_spec(scales=("smoke", "full")), load_committed(tmp_path, "toy"))]
    assert main_scale(papers[0].spec) == "full"
    got = rows(papers)
    assert [(r.claim, r.status, r.ours) for r in got] == [("h-one", NO_COMMITTED_RUN, "—"), ("h-new", NO_COMMITTED_RUN, "—")]
    assert got[0].paper_value == "speed 7.24 x"  # the spec's number, nothing invented for ours
    assert got[0].command == "gcbench reproduce toy --scale full && gcbench results --publish toy --scale full"
    md = render_results_md(papers)
    assert got[0].command in md and md.count(NO_COMMITTED_RUN) >= 3


def test_readme_shows_a_claim_where_a_scale_tested_it(tmp_path):
    """README: a *not at this scale* row is dropped where another scale of the paper tested the claim;
    kept where no scale did; RESULTS.md keeps both."""
    commit_report(tmp_path, "toy", "claims", results_json("claims", [claim_json("h-one", NOT_AT_SCALE),
                                                                      claim_json("h-new", NOT_AT_SCALE)]))
    commit_report(tmp_path, "toy", "real", results_json("real", [claim_json("h-one", "differs"),
                                                                  claim_json("h-new", NOT_AT_SCALE)]))
    papers = [PaperReports("toy", "toy", make_spec(), load_committed(tmp_path, "toy"))]
    assert sorted((r.claim, r.scale, r.status) for r in rows(papers)) == [
        ("h-new", "claims", NOT_AT_SCALE), ("h-new", "real", NOT_AT_SCALE),
        ("h-one", "claims", NOT_AT_SCALE), ("h-one", "real", "differs")]
    assert sorted((r.claim, r.scale, r.status) for r in readme_rows(papers)) == [
        ("h-new", "claims", NOT_AT_SCALE), ("h-new", "real", NOT_AT_SCALE), ("h-one", "real", "differs")]
    block = render_readme_block(papers)
    assert block.count("**h-one**") == 1 and block.count("**h-new**") == 2
    assert render_results_md(papers).count("**h-one**") >= 2


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_generator_is_pure(tmp_path, monkeypatch):
    """The same papers give the same text; the papers are left as they were and nothing is written."""
    import builtins
    import copy
    import io
    import os

    reports = tmp_path / "reports"
    commit_report(reports, "toy", "claims", results_json("claims", [claim_json("h-one", "reproduced"),
                                                                     claim_json("plain", "differs")]))
    commit_report(reports, "toy", "real", results_json("real", [claim_json("h-one", NOT_AT_SCALE, detail="needs more"),
                                                                 claim_json("h-new", "not run", ours="—")]))
    papers = [PaperReports("toy", "toy", make_spec(), load_committed(reports, "toy"))]
    before = copy.deepcopy(papers)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    files = _files(tmp_path)
    first = (render_results_md(papers), render_readme_block(papers), json.dumps(summary(papers)))

    writes: list[str] = []

    def refuse(what):
        def call(*args, **kwargs):
            writes.append(f"{what}{args[:2]}")
            raise AssertionError(f"the generator wrote: {what}{args[:2]}")

        return call

    def reading_only(real):
        def call(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+"):
                return refuse("open")(file, mode)
            return real(file, mode, *args, **kwargs)

        return call

    def os_open_reading_only(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC):
            return refuse("os.open")(path, flags)
        return real_os_open(path, flags, *args, **kwargs)

    real_os_open = os.open
    monkeypatch.setattr(builtins, "open", reading_only(builtins.open))
    monkeypatch.setattr(io, "open", reading_only(io.open))
    monkeypatch.setattr(os, "open", os_open_reading_only)
    for attr in ("write_text", "write_bytes", "touch", "mkdir", "unlink", "rename", "replace"):
        monkeypatch.setattr(Path, attr, refuse(f"Path.{attr}"))
    for attr in ("replace", "rename", "remove", "unlink", "mkdir", "makedirs"):
        monkeypatch.setattr(os, attr, refuse(f"os.{attr}"))
    monkeypatch.chdir(cwd)

    again = (render_results_md(papers), render_readme_block(papers), json.dumps(summary(papers)))
    monkeypatch.undo()
    assert again == first
    assert writes == []
    assert papers == before, "the generator changed the papers it was given"
    assert _files(tmp_path) == files and not any(cwd.iterdir())


def test_an_unreadable_committed_report_is_an_error(tmp_path):
    folder = commit_report(tmp_path, "toy", "claims", results_json("claims", []))
    (folder / "results.json").write_text("{not json")
    with pytest.raises(ResultsError, match="unreadable"):
        load_committed(tmp_path, "toy")
    (folder / "results.json").write_text(json.dumps(results_json("full", [])))
    with pytest.raises(ResultsError, match="kept in folder 'claims'"):
        load_committed(tmp_path, "toy")
    (folder / "report.md").unlink()
    with pytest.raises(ResultsError, match="without report.md"):
        load_committed(tmp_path, "toy")


@pytest.mark.parametrize("damage, msg", [
    (lambda d: d.update(tables=-1), "'tables'"),
    (lambda d: d.update(tables=[1, 2]), "'tables'"),
    (lambda d: d.update(measured=[1]), "'measured'"),
    (lambda d: d.update(preset="x"), "'preset'"),
    (lambda d: d["environment"].update(git="x"), "'git'"),
    (lambda d: d["environment"].update(timestamp=5), "'timestamp'"),
    (lambda d: d["claims"][0].update(measured=-1), "claims[0]"),
    (lambda d: d["claims"][0].update(detail=3), "claims[0]"),
    (lambda d: d["claims"][0].update(fingerprint=3), "'fingerprint'"),
])
def test_a_committed_report_of_the_wrong_shape_is_an_error_not_a_traceback(tmp_path, damage, msg):
    data = results_json("claims", [claim_json("h-one", "reproduced")])
    damage(data)
    commit_report(tmp_path, "sketchml", "claims", data)
    (tmp_path / "README.md").write_text(f"{BEGIN}\n{END}\n")
    with pytest.raises(ResultsError, match=re.escape(msg)):
        load_committed(tmp_path, "sketchml")
    res = CliRunner().invoke(app, ["results", "--root", str(tmp_path)])
    assert res.exit_code == 2 and msg in res.output and "Traceback" not in res.output


def test_check_writes_nothing_so_it_refuses_json(tmp_path):
    res = CliRunner().invoke(app, ["results", "--check", "--json", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--json does not go with it" in res.output and not (tmp_path / "x.json").exists()


def test_publish_checks_the_tables_can_be_written_before_it_copies(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text(f"{BEGIN}\n")  # its end marker is missing
    finished_run(tmp_path / "results")
    res = CliRunner().invoke(app, ["results", "--publish", "3lc", "--from", str(tmp_path / "results"), "--root", str(repo)])
    assert res.exit_code == 2 and "nothing was copied" in res.output
    assert not committed_dir(repo, "threelc", "claims").exists() and not (repo / "RESULTS.md").exists()


def test_an_interrupted_publish_leaves_no_committed_scale(tmp_path):
    (committed_dir(tmp_path, "toy", ".claims.publishing")).mkdir(parents=True)
    assert load_committed(tmp_path, "toy") == {}


# --- README's generated block -------------------------------------------------------------------------


def test_replace_block_rewrites_only_between_the_markers():
    text = f"intro\n{BEGIN}\nold table\n{END}\nrest\n"
    new = replace_block(text, f"{BEGIN}\nnew\n{END}")
    assert new == f"intro\n{BEGIN}\nnew\n{END}\nrest\n"
    assert current_block(new) == f"{BEGIN}\nnew\n{END}"


@pytest.mark.parametrize("text, msg", [
    ("no markers\n", "exactly one"),
    (f"{BEGIN}\n{END}\n{BEGIN}\n", "exactly one"),
    (f"{END}\nx\n{BEGIN}\n", "comes before"),
])
def test_replace_block_rejects_bad_markers(text, msg):
    with pytest.raises(BlockError, match=msg):
        replace_block(text, "x")


def test_results_command_writes_and_checks(tmp_path):
    (tmp_path / "README.md").write_text(f"# title\n\n{BEGIN}\n{END}\n\nmore\n")
    runner = CliRunner()
    res = runner.invoke(app, ["results", "--root", str(tmp_path), "--check"])
    assert res.exit_code == 1 and "stale" in res.output
    res = runner.invoke(app, ["results", "--root", str(tmp_path), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# title\n\n" + BEGIN) and readme.endswith(END + "\n\nmore\n") and NO_COMMITTED_RUN in readme
    assert (tmp_path / "RESULTS.md").read_text().startswith("# Results")
    assert {r["paper"] for r in json.loads((tmp_path / "r.json").read_text())["rows"]} == {"sketchml", "sketched-sgd", "3lc", "lgreco"}
    assert runner.invoke(app, ["results", "--root", str(tmp_path), "--check"]).exit_code == 0
    (tmp_path / "README.md").write_text("no markers\n")
    res = runner.invoke(app, ["results", "--root", str(tmp_path)])
    assert res.exit_code == 2 and "exactly one" in res.output
    assert runner.invoke(app, ["results", "--scale", "claims"]).exit_code == 2


# --- a committed report re-checked against the spec as it is now ------------------------------------


def test_a_claim_whose_definition_changed_since_the_run_is_not_shown_with_its_old_verdict(tmp_path):
    # Recorded under a 10% tolerance: 7.0 against 7.24 is within it. The spec now asks for 1%.
    report = results_json("claims", [claim_json("h-one", "within tolerance", ours="speed 7"),
                                     claim_json("plain", "within tolerance", ours="speed 7")],
                          measured={"q": 7.0}, tables=["1"])
    commit_report(tmp_path, "toy", "claims", report)
    same = [PaperReports("toy", "toy", make_spec(), load_committed(tmp_path, "toy"))]
    assert recheck(same[0].spec, report) == {"h-one": "within tolerance", "h-new": "within tolerance", "plain": "within tolerance"}
    assert outdated(same[0].spec, report) == {} and outdated_reports(same) == []
    assert [r.status for r in rows(same)] == ["within tolerance", NOT_IN_RUN]

    changed = [PaperReports("toy", "toy", make_spec(tolerance=0.01), load_committed(tmp_path, "toy"))]
    assert outdated(changed[0].spec, report) == {"h-one": ("within tolerance", "differs"),
                                                 "plain": ("within tolerance", "differs")}
    first = rows(changed)[0]
    assert (first.claim, first.status, first.ours) == ("h-one", OUTDATED, "speed 7")
    assert "says within tolerance" in first.detail and "gives differs" in first.detail
    assert first.command == "gcbench reproduce toy --scale claims && gcbench results --publish toy --scale claims"
    md = render_results_md(changed)
    assert "### Claims changed since their committed run" in md and "h-one (within tolerance -> differs)" in md
    assert f"**{OUTDATED}**: `{first.command}`" in md
    counts = {(c["scale"], c["claims"]): c["counts"] for c in summary(changed)["counts"]}
    assert counts[("claims", "all measured")][OUTDATED] == 2 and counts[("claims", "all measured")]["within tolerance"] == 0


def test_a_report_run_with_another_configuration_shows_every_claim_as_changed(tmp_path):
    spec = make_spec()  # scale "claims" has no settings
    report = results_json("claims", [claim_json("h-one", "within tolerance", ours="speed 7"),
                                     claim_json("plain", "within tolerance", ours="speed 7")],
                          measured={"q": 7.0}, tables=["1"], preset={})
    assert preset_changes(spec, report) == []
    commit_report(tmp_path, "toy", "claims", {**report, "preset": {"steps": 100, "dataset": {"rows": 10}}})
    papers = [PaperReports("toy", "toy", spec, load_committed(tmp_path, "toy"))]
    data = papers[0].reports["claims"]
    assert preset_changes(spec, data) == ["dataset", "steps"]
    assert outdated(spec, data) == {}  # the claims alone would still give what the report says
    first = rows(papers)[0]
    assert first.status == OUTDATED and "configuration of scale claims changed since the run (dataset, steps)" in first.detail
    assert "says within tolerance for another configuration" in first.detail
    assert "(dataset, steps)" in outdated_reports(papers)[0]
    counts = {(c["scale"], c["claims"]): c["counts"] for c in summary(papers)["counts"]}
    assert counts[("claims", "all measured")][OUTDATED] == 2


def test_a_reworded_preset_description_is_not_a_configuration_change(tmp_path):
    # the description is the preset's one line of help text: rewording it changes no run, while a
    # setting beside it still marks the report as run with another configuration
    spec = make_spec()
    report = results_json("claims", [claim_json("h-one", "within tolerance", ours="speed 7")],
                          measured={"q": 7.0}, tables=["1"], preset={"description": "an older wording"})
    assert preset_changes(spec, report) == []
    assert preset_changes(spec, {**report, "preset": {"description": "an older wording", "steps": 100}}) == ["steps"]


def test_a_report_run_with_another_workload_shows_every_claim_as_changed(tmp_path):
    # the spec's [workload] (here empty) against the one the report recorded; a report that recorded
    # none (written before reports held it) is not compared
    spec = make_spec()
    report = results_json("claims", [claim_json("h-one", "within tolerance", ours="speed 7")],
                          measured={"q": 7.0}, tables=["1"], preset={})
    assert preset_changes(spec, report) == [] and preset_changes(spec, {**report, "workload": {}}) == []
    commit_report(tmp_path, "toy", "claims", {**report, "workload": {"images": {"local_topk_fraction": 0.025}}})
    papers = [PaperReports("toy", "toy", spec, load_committed(tmp_path, "toy"))]
    assert preset_changes(spec, papers[0].reports["claims"]) == ["workload.images"]
    first = rows(papers)[0]
    assert first.status == OUTDATED and "(workload.images)" in first.detail


def test_a_report_without_measured_quantities_is_not_rechecked():
    assert recheck(make_spec(), results_json("claims", [claim_json("h-one", "reproduced")])) is None
    assert outdated(make_spec(), results_json("claims", [claim_json("h-one", "reproduced")])) == {}


def test_results_check_goes_red_on_a_committed_report_whose_claims_changed(tmp_path):
    # A real committed report with one recorded verdict altered, as a report written under another
    # definition of that claim would hold it: --check must fail and name the claim and the command.
    # (whichever verdict the committed report holds: a tested claim's status swapped for another)
    data = json.loads((REPO / "reproductions/sketchml/results/claims/results.json").read_text())
    claim = next(c for c in data["claims"] if c["status"] in ("differs", "reproduced", "within tolerance"))
    recorded = claim["status"]
    claim["status"] = "differs" if recorded != "differs" else "reproduced"
    commit_report(tmp_path, "sketchml", "claims", data)
    (tmp_path / "README.md").write_text(f"{BEGIN}\n{END}\n")
    runner = CliRunner()
    assert runner.invoke(app, ["results", "--root", str(tmp_path)]).exit_code == 0
    res = runner.invoke(app, ["results", "--root", str(tmp_path), "--check"])
    assert res.exit_code == 1
    assert f"{claim['id']} ({claim['status']} -> {recorded})" in res.output
    assert "gcbench reproduce sketchml --scale claims" in res.output
    claim["status"] = recorded  # as recorded: nothing changed, the check passes
    (committed_dir(tmp_path, "sketchml", "claims") / "results.json").write_text(json.dumps(data))
    assert runner.invoke(app, ["results", "--root", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["results", "--root", str(tmp_path), "--check"]).exit_code == 0


# --- publishing a run ---------------------------------------------------------------------------------


def finished_run(out: Path, paper="3lc", scale="claims", claims=None) -> Path:
    run = out / paper / scale
    (run / "plots").mkdir(parents=True)
    (run / "cells").mkdir()
    (run / "wandb").mkdir()
    (run / "report.md").write_text("# 3LC\n\n![traffic](plots/traffic.png)\n")
    (run / "plots" / "traffic.png").write_bytes(b"\x89PNG fake")
    (run / "cells" / "c.json").write_text("{}")
    (run / "cells" / "c.png").write_bytes(b"\x89PNG")
    (run / "wandb" / "w.png").write_bytes(b"\x89PNG")
    data = results_json(scale, claims if claims is not None else [claim_json("traffic-s1.00", "reproduced")], paper=paper)
    (run / "results.json").write_text(json.dumps(data))
    return run


def test_publish_copies_report_results_and_plots_only(tmp_path):
    run = finished_run(tmp_path / "results")
    target = tmp_path / "repo" / "reproductions" / "threelc" / "results" / "claims"
    target.mkdir(parents=True)
    (target / "stale.png").write_bytes(b"old")
    done = publish(run, target, "3lc", "claims")
    assert sorted(done.files) == ["plots/traffic.png", "report.md", "results.json"]
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == sorted(done.files)
    assert not done.large and done.total_bytes == sum((target / f).stat().st_size for f in done.files)


def test_a_large_results_file_is_published_without_its_per_step_lists(tmp_path, monkeypatch):
    """Over LARGE_BYTES, lists of more than SERIES_ITEMS items under cells.results are left out (and
    said so); the measured values, the claims and short lists stay; a small file is copied as it is."""
    from gcbench.reproductions.framework import published

    run = finished_run(tmp_path / "results")
    data = json.loads((run / "results.json").read_text())
    long, short = list(range(published.SERIES_ITEMS + 1)), list(range(published.SERIES_ITEMS))
    data["measured"] = {"ratio": 2.5, "series": long}
    data["cells"] = {"computed": 1, "results": {"train-a": {"uniform": {"traffic": {"wire": long}, "losses": long,
                                                                        "applied": short, "eval": {"ppl": 9.5},
                                                                        "data": {}}}}}
    (run / "results.json").write_text(json.dumps(data))
    target = tmp_path / "target"
    publish(run, target, "3lc", "claims")
    assert json.loads((target / "results.json").read_text()) == data  # under the limit: whole
    monkeypatch.setattr(published, "LARGE_BYTES", 100)
    publish(run, target, "3lc", "claims")
    got = json.loads((target / "results.json").read_text())
    # an empty dict it did not empty itself stays
    assert got["cells"]["results"] == {"train-a": {"uniform": {"applied": short, "eval": {"ppl": 9.5}, "data": {}}}}
    assert "(*.*.losses, *.*.traffic.wire)" in got["cells"]["trimmed"]
    assert got["measured"] == data["measured"] and got["claims"] == data["claims"]
    assert json.loads((run / "results.json").read_text()) == data  # the run's own file is untouched


def test_a_published_results_file_writes_the_run_folder_from_a_mark_and_the_program_by_name(tmp_path, monkeypatch):
    """The machine's paths do not travel into the repository: an absolute path inside the run's --out
    folder (as typed, or resolved) is written from OUT_MARK, the program by its name, a path inside
    the home folder (a data set's source) from ~ in both files; a relative path and a path elsewhere
    stay; the run's own files are untouched."""
    from gcbench.reproductions.framework.published import OUT_MARK

    home = tmp_path / "home" / "me"
    monkeypatch.setenv("HOME", str(home))
    out = tmp_path / "runs" / "x"
    run = finished_run(out)
    data = json.loads((run / "results.json").read_text())
    data["environment"]["argv"] = ["/home/me/proj/.venv/bin/gcbench", "reproduce", "3lc", "--out", str(out),
                                   "--cache", str(out.resolve() / "cache"), "--config", "rel/x.json", "/etc/other"]
    data["tracking"] = {"mode": "offline", "dir": str(run / "wandb"), "runs": 1}
    data["dataset"] = {"description": f"images from {home}/.cache/data", "sources": [f"{home}/a", f"/mnt{home}/b"]}
    (run / "results.json").write_text(json.dumps(data))
    report = (run / "report.md").read_text() + f"- Data set: images from {home}/.cache/data\n"
    (run / "report.md").write_text(report)
    publish(run, tmp_path / "target", "3lc", "claims")
    got = json.loads((tmp_path / "target" / "results.json").read_text())
    assert got["environment"]["argv"] == ["gcbench", "reproduce", "3lc", "--out", OUT_MARK, "--cache",
                                          f"{OUT_MARK}/cache", "--config", "rel/x.json", "/etc/other"]
    assert got["tracking"]["dir"] == f"{OUT_MARK}/3lc/claims/wandb"
    assert got["dataset"] == {"description": "images from ~/.cache/data", "sources": ["~/a", f"/mnt{home}/b"]}
    assert {k: v for k, v in got.items() if k not in ("environment", "tracking", "dataset")} == \
        {k: v for k, v in data.items() if k not in ("environment", "tracking", "dataset")}
    assert (tmp_path / "target" / "report.md").read_text() == report.replace(str(home), "~")
    assert json.loads((run / "results.json").read_text()) == data and (run / "report.md").read_text() == report


@pytest.mark.parametrize("breakage, msg", [
    (lambda run: (run / "report.md").unlink(), "report.md: missing"),
    (lambda run: (run / "results.json").unlink(), "results.json: missing"),
    (lambda run: (run / "results.json").write_text("{oops"), "unreadable"),
    (lambda run: (run / "results.json").write_text("[]"), "not a JSON object"),
    (lambda run: (run / "results.json").write_text(json.dumps({"paper": "3lc", "scale": "claims"})), "field 'claims'"),
    (lambda run: (run / "results.json").write_text(json.dumps(results_json("claims", [], paper="sketchml"))), "not '3lc'"),
    (lambda run: (run / "results.json").write_text(json.dumps(results_json("claims", [], paper="3lc", implemented=False))),
     "not implemented"),
    (lambda run: (run / "plots" / "traffic.png").unlink(), "image 'plots/traffic.png' is missing"),
    (lambda run: (run / "report.md").write_text("![x](../../elsewhere.png)\n"), "outside the run folder"),
    (lambda run: (run / "report.md").write_text("![x](cells/c.png)\n"), "not a PNG plot that is published"),
    (lambda run: (run / "report.md").write_text("![x](.)\n"), "not a PNG plot that is published"),
])
def test_publish_refuses_a_broken_run(tmp_path, breakage, msg):
    run = finished_run(tmp_path / "results")
    breakage(run)
    target = tmp_path / "target"
    with pytest.raises(PublishError, match=msg):
        check_run(run, "3lc", "claims")
    with pytest.raises(PublishError):
        publish(run, target, "3lc", "claims")
    assert not target.exists()


def test_publish_command_copies_then_writes_the_tables(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text(f"{BEGIN}\n{END}\n")
    finished_run(tmp_path / "results")
    runner = CliRunner()
    args = ["results", "--publish", "3lc", "--from", str(tmp_path / "results"), "--root", str(repo)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (committed_dir(repo, "threelc", "claims") / "plots" / "traffic.png").is_file()
    results_md = (repo / "RESULTS.md").read_text()
    line = next(l for l in results_md.splitlines() if "**traffic-s1.00**" in l)
    assert "**reproduced**" in line and "[report](reproductions/threelc/results/claims/report.md)" in line
    assert "**traffic-s1.00**" in (repo / "README.md").read_text()
    # a run that is not there, an unknown paper, an unknown scale: exit 2 with one line
    for bad, msg in ((["--scale", "full"], "no such run folder"), (["--scale", "huge"], "no scale 'huge'")):
        res = runner.invoke(app, args + bad)
        assert res.exit_code == 2 and msg in res.output
    res = runner.invoke(app, ["results", "--publish", "alexnet", "--root", str(repo)])
    assert res.exit_code == 2 and "unknown paper" in res.output
    assert publish_main("3lc", "claims", tmp_path / "nowhere", repo) == 2


# --- the committed table is what the committed reports generate --------------------------------------


def test_committed_results_md_and_readme_block_are_up_to_date():
    for path, text in generated(REPO).items():
        assert path.is_file(), f"{path.name} is missing: run `gcbench results`"
        on_disk = path.read_text(encoding="utf-8")
        if path.name == "README.md":
            assert current_block(on_disk) == current_block(text), "README.md's results table is stale: run `gcbench results`"
        else:
            assert on_disk == text, f"{path.name} is stale: run `gcbench results`"


def test_results_main_check_on_the_repository(capsys):
    assert results_main(REPO, check=True) == 0, capsys.readouterr().err


def test_help_describes_the_command():
    runner = CliRunner()
    assert "results" in runner.invoke(app, ["--help"]).output
    res = runner.invoke(app, ["results", "--help"], terminal_width=200)
    assert res.exit_code == 0
    for word in ("RESULTS.md", "--publish", "--scale", "--from", "--root", "--json", "--check", "--readme",
                 "no committed run", "not at this scale", "Exit status"):
        assert word in res.output, word


class OneCellWorkload:
    """The smallest workload: one cell measuring ``q``, one plot."""

    def check_options(self, scale, preset, options):
        pass

    def plan(self, ctx, done):
        from gcbench.reproductions.framework.cells import Cell

        return [Cell("one", {"q": 7.2412345678901234})]

    def steps(self, cell):
        return None

    def probe(self):
        return [("code", "one cell")]

    def compute(self, cell, ctx):
        return {"q": cell.config["q"]}

    def derive(self, ctx, results):
        return {"q": results["one"]["q"]}

    def report(self, ctx, results, measured):
        from gcbench.reproductions.framework.report import new_figure, savefig
        from gcbench.reproductions.framework.runner import ReportParts

        fig, ax = new_figure(1, 1)
        ax.plot([0, 1], [0, measured["q"]])
        savefig(fig, ctx.out_dir / "plots" / "q.png")
        return ReportParts(plots=[("q", "plots/q.png")])


def test_a_real_run_publishes_and_lands_in_the_table(tmp_path):
    from gcbench.reproductions.framework.runner import run_reproduction

    spec = make_spec()
    summary_ = run_reproduction(spec, OneCellWorkload(), scale="claims", tables=None, out_dir=tmp_path / "results",
                                progress=False, track=False)
    done = publish(summary_.run_dir, committed_dir(tmp_path, "toy", "claims"), "toy", "claims")
    assert sorted(done.files) == ["plots/q.png", "report.md", "results.json"]
    papers = [PaperReports("toy", "toy", spec, load_committed(tmp_path, "toy"))]
    first = rows(papers)[0]
    assert (first.claim, first.status, first.ours, first.measured) == ("h-one", "reproduced", "q 7.241", {"q": 7.2412345678901234})
    written = json.loads(summary_.results_path.read_text())
    env = written["environment"]
    assert (first.commit, first.date) == (env["git"]["commit"], env["timestamp"][:10])
    assert {c["id"]: c["fingerprint"] for c in written["claims"]} == spec_fingerprints(spec)  # each claim's definition
