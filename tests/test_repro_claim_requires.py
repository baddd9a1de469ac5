"""A claim's ``requires``: the guards its statement includes decide with its own check.

"At equal error budget L-GreCo compresses more than uniform" is two statements: the order of the two
ratios (the claim's own check) and the equal error (a guard measured apart from the method). The
claim's verdict stands only where the guard holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gcbench.reproductions.framework.claims import (
    DIFFERS,
    NOT_AT_SCALE,
    NOT_RUN,
    REPRODUCED,
    WITHIN,
    evaluate_claims,
)
from gcbench.reproductions.framework.spec import SpecError, load_spec
from test_repro_claims import make_spec

ROOT = Path(__file__).resolve().parents[1]

GUARD = {"id": "within-budget", "kind": "guard", "check": "at_most", "quantities": ["excess"], "tolerance": 1e-4,
         "tolerance_kind": "absolute", "testable": "exact", "scale_reason": "error tables by power iteration"}
GAIN = {"id": "gain", "check": "order", "quantities": ["uniform", "ours"], "tolerance": 0.0, "strict": True,
        "requires": ["within-budget"]}


def committed_statuses(package: str, scale: str, change: dict[str, float]) -> tuple[dict[str, str], dict[str, str]]:
    """Each claim's status on a committed run's own measured quantities, as run and with ``change`` applied."""
    spec = load_spec(ROOT / "reproductions" / package / "spec.toml")
    data = json.loads((ROOT / "reproductions" / package / "results" / scale / "results.json").read_text())
    measured = dict(data["measured"])
    return tuple({r.claim.id: r.status for r in evaluate_claims(spec, m, scale)}  # type: ignore[return-value]
                 for m in (measured, {**measured, **change}))


def statuses(measured: dict, claims=(GUARD, GAIN), scale: str = "smoke", tables=None) -> dict[str, object]:
    spec = make_spec(list(claims))
    return {r.claim.id: r for r in evaluate_claims(spec, measured, scale, tables=tables)}


@pytest.mark.parametrize("excess, exact, gain_status", [
    (-0.001, 1.0, REPRODUCED),  # the guard holds: the order decides
    (0.01, 1.0, DIFFERS),  # the plan exceeds the budget: the claim's "at equal error" does not hold
    (-0.001, 0.0, NOT_AT_SCALE),  # the guard cannot be tested: neither can the claim
    (0.01, 0.0, NOT_AT_SCALE),
    (None, 1.0, NOT_RUN),  # the guard was not measured
])
def test_a_claim_stands_only_where_the_guard_it_requires_holds(excess, exact, gain_status):
    out = statuses({"uniform": 14.1, "ours": 23.5, "excess": excess, "exact": exact})
    gain = out["gain"]
    assert gain.status == gain_status, gain.detail
    if gain_status == DIFFERS:
        assert "its precondition within-budget differs" in gain.detail
    if gain_status == NOT_AT_SCALE:
        assert gain.reason.startswith("its precondition within-budget cannot be tested here: error tables")
        assert "the check alone would say reproduced" in gain.detail
    if gain_status == REPRODUCED:
        assert gain.detail.endswith("precondition within-budget holds")
    assert "excess" in gain.measured and "uniform" in gain.measured


def test_the_claims_own_check_still_decides_where_the_guard_holds():
    out = statuses({"uniform": 23.5, "ours": 14.1, "excess": -0.001, "exact": 1.0})
    assert out["gain"].status == DIFFERS and "precondition within-budget holds" in out["gain"].detail
    tie = statuses({"uniform": 14.1, "ours": 14.1, "excess": 0.0, "exact": 1.0})
    assert tie["gain"].status == DIFFERS  # strict: a tie is no gain, whatever the guard says


def test_a_claim_that_is_itself_not_run_keeps_its_own_status():
    out = statuses({"uniform": None, "ours": 23.5, "excess": 0.01, "exact": 1.0})
    assert out["gain"].status == NOT_RUN and "precondition" not in out["gain"].detail


def test_within_tolerance_survives_a_holding_guard():
    loose = {**GAIN, "strict": False, "tolerance": 0.1}
    out = statuses({"uniform": 20.0, "ours": 19.5, "excess": -0.001, "exact": 1.0}, claims=(GUARD, loose))
    assert out["gain"].status == WITHIN


@pytest.mark.parametrize("claims, msg", [
    ((GUARD, {**GAIN, "requires": ["nope"]}), "not a claim of this spec"),
    ((GUARD, {**GAIN, "requires": ["gain"]}), "cannot require itself"),
    (({**GUARD, "kind": "result"}, GAIN), "only a 'guard'"),
    (({**GUARD, "testable": "", "scale_reason": "", "requires": ["other"]},
      {**GUARD, "id": "other", "testable": "", "scale_reason": ""}, GAIN), "one level only"),
    ((GUARD, {**GAIN, "gate": True}), "requires only gated guards"),
    (({**GUARD, "scales": ["full"]}, GAIN), "evaluated wherever the claim is"),
    ((GUARD, {**GAIN, "requires": "within-budget"}), "must be a list of strings"),
])
def test_requires_is_checked_in_the_spec(claims, msg):
    with pytest.raises(SpecError, match=msg):
        make_spec(list(claims))


def test_lgreco_at_equal_error_claims_require_their_budget_guards():
    spec = load_spec(ROOT / "reproductions" / "lgreco" / "spec.toml")
    requires = {c.id: c.requires for c in spec.claims if c.requires}
    assert requires == {
        "lgreco-over-uniform": ("lgreco-within-budget",),
        "lgreco-over-uniform-lm": ("lgreco-within-budget-lm",),
        "gain-at-equal-error-qsgd": ("lgreco-within-budget-qsgd",),
        "gain-at-equal-error-topk": ("lgreco-within-budget-topk",),
        "lgreco-over-cgx": ("lgreco-within-budget",),
    }
    for cid in requires:
        if cid != "lgreco-over-cgx":  # L-GreCo against CGX's assignment: L-GreCo's plan must keep its budget
            assert next(c for c in spec.claims if c.id == cid).text.startswith(("At equal error budget", "The same"))


def test_lgreco_headline_differs_where_the_plan_exceeds_the_error_budget():
    """The committed claims run's own numbers, with the re-measured error of L-GreCo's plans above the
    uniform setting's: the order of the ratios alone still holds, the headline does not."""
    honest, broken = committed_statuses("lgreco", "claims", {"budget.powersgd.excess": 0.05})
    assert honest["lgreco-over-uniform"] == REPRODUCED
    assert broken["lgreco-within-budget"] == DIFFERS
    assert broken["lgreco-over-uniform"] == DIFFERS


@pytest.mark.parametrize("package, guards, claims", [
    ("sketched_sgd", ("sketch-estimates-within-bound", "sketch-hashes-independent", "selection-follows-algorithm-2"),
     ("heldout-parity-sketched20", "heldout-parity-sketched40", "heldout-parity-sketched20-vs-topk",
      "heldout-parity-sketched40-vs-topk", "sketched-no-divergence", "bleu-sketched20-close", "bleu-sketched40-close",
      "bleu-lstm-sketched40-close", "bleu-order-transformer", "bleu-order-lstm")),
    ("sketchml", ("t2-values-lr", "t2-sketch-exact-lr"),
     ("t2-minloss-lr", "t2-converge-lr", "t2-epochs-lr", "t2-converge-speedup-adam", "t2-converge-speedup-zipml",
      "t2-converge-speedup-adam-cal", "t2-converge-speedup-zipml-cal", "t2-converge-speedup-adam-cluster1")),
    ("sketchml", ("t2-values-svm", "t2-sketch-exact-svm"), ("t2-minloss-svm",)),
    ("sketchml", ("t2-values-linear", "t2-sketch-exact-linear"), ("t2-minloss-linear",)),
])
def test_results_of_a_sketched_method_require_the_guards_of_its_sketch(package, guards, claims):
    """A result measured with Sketched-SGD's Count Sketch or SketchML's sketches is the paper's method's
    only where the guards that read those sketches hold; every result claim that names the method requires them."""
    spec = load_spec(ROOT / "reproductions" / package / "spec.toml")
    by_id = {c.id: c for c in spec.claims}
    for cid in claims:
        assert by_id[cid].requires == guards, cid
    model = guards[0].rsplit("-", 1)[-1]
    method = "sketched" if package == "sketched_sgd" else f"t2.{model}.sketchml"
    guard_tables = set(by_id[guards[0]].tables)
    for c in spec.claims:  # every result of the guards' table that measures the method (other tables can run alone)
        if c.kind == "result" and guard_tables.issuperset(c.tables[:1]) \
                and any(q.startswith(method) or ".sketched" in q for q in c.quantities) \
                and (package == "sketched_sgd" or c.quantities[0].startswith(f"t2.{model}.")):
            assert c.requires == guards, f"{c.id} measures the sketched method without requiring {guards}"


def test_a_broken_sketch_turns_the_committed_parity_verdict_to_differs():
    """The committed parity run's own numbers, with the sketch's estimate errors 3x the definition's bound."""
    honest, broken = committed_statuses("sketched_sgd", "parity", {"t1.sketch_error_ratio": 3.0})
    assert honest["heldout-parity-sketched20"] == WITHIN
    assert broken["sketch-estimates-within-bound"] == DIFFERS
    assert broken["heldout-parity-sketched20"] == DIFFERS
    assert broken["heldout-parity-topk"] == honest["heldout-parity-topk"]  # no sketch in it


def test_a_broken_selection_turns_the_committed_parity_verdict_to_differs():
    """The committed parity run's own numbers, with one checked step whose selection is not Algorithm 2's."""
    honest, broken = committed_statuses("sketched_sgd", "parity", {"t1.selection_violations": 1.0})
    assert honest["selection-follows-algorithm-2"] == REPRODUCED
    assert broken["selection-follows-algorithm-2"] == DIFFERS
    assert broken["heldout-parity-sketched20"] == DIFFERS
    assert broken["heldout-parity-topk"] == honest["heldout-parity-topk"]  # no sketch in it
