"""A committed report re-checked by the fingerprints of its claims' definitions (``gcbench results --check``).

A run records beside each claim a fingerprint of its definition (:mod:`~gcbench.reproductions.framework.fingerprint`);
the results table compares it with the current spec's. Here every change of a claim's definition that
leaves the recorded status as it was (a tolerance widened, a guard no longer required, another kind, the
gate dropped), a claim removed from the spec and one added to it make the check fail; rewording a claim
does not; a report written before runs recorded fingerprints falls back to the status comparison.
(The fixtures are those of ``test_results_table.py``.)
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from test_results_table import REPO, SOURCE, commit_report, results_json
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.reproductions.framework.claims import evaluate_claims
from gcbench.reproductions.framework.fingerprint import KEY, claim_entries, claim_fingerprint, spec_fingerprints
from gcbench.reproductions.framework.published import committed_dir, load_committed
from gcbench.reproductions.framework.results_table import (
    BEGIN,
    END,
    NOT_IN_RUN,
    OUTDATED,
    PaperReports,
    definition_changes,
    outdated,
    outdated_reports,
    rows,
    summary,
)
from gcbench.reproductions.framework.spec import load_spec, parse_spec

RESULT = {"kind": "result", "check": "near", "tolerance": 0.1, "tolerance_kind": "relative", "gate": False,
          "scale_dependent": True, "tables": ["1"], "quantities": ["q"], "paper": ["v"]}


def toy_raw() -> dict:
    """A spec of one guard, a headline claim that requires it, and a gated claim (7.0 against 7.24:
    within a 10% tolerance, within a 90% one too)."""
    return {
        "schema": 2,
        "paper": {"id": "toy", "title": "Toy", "citation": "c", "source": "s"},
        "scales": {"smoke": {}, "full": {}, "claims": {}},
        "tables": {"1": {"title": "T1"}},
        "values": [{"id": "v", "value": 7.24, "unit": "x", "table": "1", "source": SOURCE}],
        "claims": [
            {**RESULT, "id": "g", "kind": "guard", "text": "the method does what it defines"},
            {**RESULT, "id": "h-one", "text": "speed is about 7.24x", "headline": True, "requires": ["g"],
             "note": "the first wording"},
            {**RESULT, "id": "plain", "text": "not a headline", "gate": True, "scale_dependent": False},
        ],
    }


def toy_spec(change=None):
    raw = toy_raw()
    if change is not None:
        change(raw)
    return parse_spec(raw, Path("toy.toml"))


def claim(raw: dict, cid: str) -> dict:
    return next(c for c in raw["claims"] if c["id"] == cid)


def run_report(spec, measured=None) -> dict:
    """The results.json a run of ``spec`` at scale ``claims`` writes (its claims with their fingerprints)."""
    measured = measured or {"q": 7.0}
    results = evaluate_claims(spec, measured, "claims", tables=["1"])
    return results_json("claims", claim_entries(results, spec), measured=measured, tables=["1"], preset={})


def papers_for(tmp_path: Path, spec, report: dict) -> list[PaperReports]:
    commit_report(tmp_path, "toy", "claims", report)
    return [PaperReports("toy", "toy", spec, load_committed(tmp_path, "toy"))]


def counts_of(papers) -> dict:
    return {(c["scale"], c["claims"]): c["counts"] for c in summary(papers)["counts"]}


def test_the_fingerprint_covers_the_definition_and_not_the_prose():
    base = toy_spec()
    fp = spec_fingerprints(base)
    assert set(fp) == {"g", "h-one", "plain"} and all(len(v) == 16 for v in fp.values())
    assert fp == spec_fingerprints(toy_spec())  # deterministic

    def reworded(raw):
        claim(raw, "h-one").update(text="speed is near 7.24x", note="another wording")
        raw["values"][0]["source"] = {**SOURCE, "column": "speed-up"}

    assert spec_fingerprints(toy_spec(reworded)) == fp

    def reason(words):
        return lambda raw: claim(raw, "h-one").update(meaningful_at=["claims"], scale_reason=words)

    assert spec_fingerprints(toy_spec(reason("one reason"))) == spec_fingerprints(toy_spec(reason("another")))
    # a headline decides only which rows RESULTS.md lists, from the spec as it is
    assert spec_fingerprints(toy_spec(lambda raw: claim(raw, "h-one").update(headline=False)))["h-one"] == fp["h-one"]
    changes = {
        "paper value": lambda raw: raw["values"][0].update(value=7.25),
        "unit": lambda raw: raw["values"][0].update(unit="s"),
        "tolerance kind": lambda raw: claim(raw, "h-one").update(tolerance_kind="absolute"),
        "scales": lambda raw: claim(raw, "h-one").update(scales=["claims"]),
        "meaningful_at": lambda raw: claim(raw, "h-one").update(meaningful_at=["claims"], scale_reason="r"),
        "strict": lambda raw: claim(raw, "h-one").update(strict=True, check="order", quantities=["q", "q"],
                                                         paper=[]),
    }
    for what, change in changes.items():
        assert spec_fingerprints(toy_spec(change))["h-one"] != fp["h-one"], what
    # a guard's changed definition changes the fingerprint of every claim that requires it
    now = spec_fingerprints(toy_spec(lambda raw: claim(raw, "g").update(tolerance=0.5)))
    assert now["g"] != fp["g"] and now["h-one"] != fp["h-one"] and now["plain"] == fp["plain"]


def test_a_run_records_each_claims_fingerprint():
    spec = toy_spec()
    report = run_report(spec)
    assert {c["id"]: c[KEY] for c in report["claims"]} == spec_fingerprints(spec)
    assert definition_changes(spec, report) is not None and not definition_changes(spec, report)


def widen_tolerance(raw):
    claim(raw, "plain")["tolerance"] = 0.9


def drop_requires(raw):
    del claim(raw, "h-one")["requires"]


def result_to_guard(raw):
    claim(raw, "plain")["kind"] = "guard"


def drop_gate(raw):
    claim(raw, "plain")["gate"] = False


def remove_claim(raw):
    raw["claims"] = [c for c in raw["claims"] if c["id"] != "plain"]


def add_claim(raw):
    raw["claims"].append({**RESULT, "id": "extra", "text": "a claim added after the run"})


@pytest.mark.parametrize("change, cid, said", [
    (widen_tolerance, "plain", "whose definition changed since the run: plain"),
    (drop_requires, "h-one", "whose definition changed since the run: h-one"),
    (result_to_guard, "plain", "whose definition changed since the run: plain"),
    (drop_gate, "plain", "whose definition changed since the run: plain"),
    (remove_claim, "plain", "removed from the spec: plain"),
    (add_claim, "extra", "added to the spec: extra"),
])
def test_each_change_of_a_claims_definition_fails_the_check(tmp_path, change, cid, said):
    report = run_report(toy_spec())
    spec = toy_spec(change)
    # the recorded statuses are what the changed definition gives too: only the fingerprints tell
    assert outdated(spec, report) == {}
    papers = papers_for(tmp_path, spec, report)
    lines = outdated_reports(papers)
    assert len(lines) == 1 and said in lines[0]
    assert "gcbench reproduce toy --scale claims && gcbench results --publish toy --scale claims" in lines[0]
    got = {r.claim: r for r in rows(papers)}
    if cid == "h-one":
        assert got["h-one"].status == OUTDATED and "definition changed since the run" in got["h-one"].detail
    else:
        assert got["h-one"].status == "within tolerance"


def test_a_reworded_claim_does_not_fail_the_check(tmp_path):
    report = run_report(toy_spec())

    def reworded(raw):
        claim(raw, "h-one").update(text="speed is near 7.24x", note="another wording")
        claim(raw, "plain")["note"] = "a note added"

    papers = papers_for(tmp_path, toy_spec(reworded), report)
    assert outdated_reports(papers) == []
    assert [(r.claim, r.status) for r in rows(papers)] == [("h-one", "within tolerance")]


def test_the_status_counts_take_each_claims_kind_from_the_spec_as_it_is_now(tmp_path):
    report = run_report(toy_spec())
    same = papers_for(tmp_path / "same", toy_spec(), report)
    assert counts_of(same)[("claims", "all measured")]["within tolerance"] == 2  # h-one and plain, not the guard
    guard = papers_for(tmp_path / "guard", toy_spec(result_to_guard), report)
    assert counts_of(guard)[("claims", "all measured")]["within tolerance"] == 1  # plain is a guard now
    assert counts_of(guard)[("claims", "all measured")][OUTDATED] == 0
    removed = papers_for(tmp_path / "removed", toy_spec(remove_claim), report)
    assert sum(counts_of(removed)[("claims", "all measured")].values()) == 1  # plain is not counted
    added = papers_for(tmp_path / "added", toy_spec(add_claim), report)
    measured = counts_of(added)[("claims", "all measured")]
    assert measured[NOT_IN_RUN] == 1 and measured["within tolerance"] == 2
    widened = papers_for(tmp_path / "widened", toy_spec(widen_tolerance), report)
    assert counts_of(widened)[("claims", "all measured")][OUTDATED] == 1


def test_a_claim_added_at_a_scale_or_table_the_run_would_not_evaluate_is_not_asked_for(tmp_path):
    report = run_report(toy_spec())

    def elsewhere(raw):
        raw["tables"]["2"] = {"title": "T2"}
        raw["claims"] += [{**RESULT, "id": "smoke-only", "text": "t", "scales": ["smoke"]},
                          {**RESULT, "id": "table-two", "text": "t", "tables": ["2"]}]

    assert definition_changes(toy_spec(elsewhere), report).added == ()
    assert outdated_reports(papers_for(tmp_path, toy_spec(elsewhere), report)) == []


def test_a_report_without_fingerprints_falls_back_to_the_status_comparison(tmp_path):
    report = run_report(toy_spec())
    for c in report["claims"]:
        del c[KEY]
    for change in (widen_tolerance, drop_requires, result_to_guard, drop_gate, remove_claim, add_claim):
        spec = toy_spec(change)
        assert definition_changes(spec, report) is None
        assert outdated_reports(papers_for(tmp_path / change.__name__, spec, report)) == [], change.__name__
    narrowed = toy_spec(lambda raw: claim(raw, "plain").update(tolerance=0.01))  # 7.0 now differs
    papers = papers_for(tmp_path / "narrowed", narrowed, report)
    lines = outdated_reports(papers)
    assert len(lines) == 1 and "plain (within tolerance -> differs)" in lines[0]


def test_a_claim_without_a_fingerprint_in_a_report_that_has_them_counts_as_changed():
    spec = toy_spec()
    report = run_report(spec)
    del report["claims"][1][KEY]
    assert definition_changes(spec, report).redefined == ("h-one",)


def test_results_check_goes_red_on_a_committed_report_whose_fingerprints_differ(tmp_path):
    # A real committed report, given the current spec's fingerprints: --check passes; one recorded
    # fingerprint altered, or a claim the spec does not hold, and it fails, naming the claim.
    data = json.loads((REPO / "reproductions/sketchml/results/claims/results.json").read_text())
    now = spec_fingerprints(load_spec(REPO / "reproductions/sketchml/spec.toml"))
    for c in data["claims"]:
        c[KEY] = now.get(c["id"], "0" * 16)
    data["claims"] = [c for c in data["claims"] if c["id"] in now]
    (tmp_path / "README.md").write_text(f"{BEGIN}\n{END}\n")
    runner = CliRunner()

    def check(report: dict):
        folder = committed_dir(tmp_path, "sketchml", "claims")
        if folder.exists():
            (folder / "results.json").write_text(json.dumps(report))
        else:
            commit_report(tmp_path, "sketchml", "claims", report)
        assert runner.invoke(app, ["results", "--root", str(tmp_path)]).exit_code == 0
        return runner.invoke(app, ["results", "--root", str(tmp_path), "--check"])

    assert check(data).exit_code == 0
    changed = copy.deepcopy(data)
    changed["claims"][0][KEY] = "f" * 16
    res = check(changed)
    assert res.exit_code == 1 and f"definition changed since the run: {data['claims'][0]['id']}" in res.output
    assert "gcbench reproduce sketchml --scale claims" in res.output
    removed = copy.deepcopy(data)
    removed["claims"].append({**data["claims"][0], "id": "gone-from-the-spec"})
    res = check(removed)
    assert res.exit_code == 1 and "removed from the spec: gone-from-the-spec" in res.output


def test_a_claim_whose_paper_value_the_spec_lacks_still_has_a_fingerprint():
    # parse_spec never lets that through; a claim built by hand may, and a digest is still made
    from dataclasses import replace

    spec = toy_spec()
    h_one = next(c for c in spec.claims if c.id == "h-one")
    assert claim_fingerprint(h_one, spec) == spec_fingerprints(spec)["h-one"]
    assert claim_fingerprint(replace(h_one, paper=("missing",)), spec) != spec_fingerprints(spec)["h-one"]
