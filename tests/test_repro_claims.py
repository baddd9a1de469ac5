"""Claim evaluation: each kind, each status, gating."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gcbench.reproductions.framework.claims import (
    DIFFERS,
    NOT_AT_SCALE,
    NOT_RUN,
    REPRODUCED,
    WITHIN,
    evaluate_claim,
    evaluate_claims,
    falsifying_measurement,
    fmt_num,
    gate_failures,
    printed_half_unit,
)
from gcbench.reproductions.framework.spec import parse_spec

SOURCE = {"paper": "P", "table": "T", "row": "r", "column": "c"}


def make_spec(claims, values=None):
    values = values or [
        {"id": "rate", "value": 7.24, "table": "1", "source": SOURCE},
        {"id": "keys", "value": [1.25, 1.27], "table": "1", "source": SOURCE},
        {"id": "big", "value": 1041, "table": "1", "source": SOURCE},
    ]
    raw = {
        "schema": 2,
        "paper": {"id": "p", "title": "P", "citation": "c", "source": "s"},
        "scales": {"smoke": {}, "full": {}},
        "tables": {"1": {"title": "T1"}, "2": {"title": "T2"}},
        "values": values,
        "claims": [
            {"kind": "result", "tolerance": 0.1, "gate": False, "scale_dependent": False, "tables": ["1"], "text": c["id"], "paper": [], **c}
            for c in claims
        ],
    }
    return parse_spec(raw, Path("mem.toml"))


def one(claim, measured, scale="smoke", **kw):
    spec = make_spec([claim], **kw)
    return evaluate_claim(spec.claims[0], measured, spec, scale)


def test_printed_half_unit():
    assert printed_half_unit(7.24) == pytest.approx(0.005)
    assert printed_half_unit(1041.0) == 0.5
    assert printed_half_unit(0.6885) == pytest.approx(0.00005)


@pytest.mark.parametrize(
    "ours, status",
    [(7.243, REPRODUCED), (7.236, REPRODUCED), (7.30, WITHIN), (6.6, WITHIN), (6.4, DIFFERS), (8.1, DIFFERS)],
)
def test_near_scalar(ours, status):
    r = one({"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1}, {"q": ours})
    assert r.status == status, r.detail


@pytest.mark.parametrize("ours, status", [(1.25, REPRODUCED), (1.262, REPRODUCED), (1.30, WITHIN), (1.40, DIFFERS), (1.10, DIFFERS)])
def test_near_range(ours, status):
    r = one({"id": "c", "check": "near", "quantities": ["q"], "paper": ["keys"], "tolerance": 0.1}, {"q": ours})
    assert r.status == status, r.detail


def test_near_absolute_tolerance():
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["big"], "tolerance": 20, "tolerance_kind": "absolute"}
    assert one(claim, {"q": 1060.0}).status == WITHIN
    assert one(claim, {"q": 1062.0}).status == DIFFERS
    assert one(claim, {"q": 1041.4}).status == REPRODUCED


def test_near_names_the_share_of_the_paper_value_except_of_a_zero():
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["big"], "tolerance": 20, "tolerance_kind": "absolute"}
    assert "(0.2% of 1,041)" in one(claim, {"q": 1043.0}).detail
    zero = [{"id": "big", "value": 0, "table": "1", "source": SOURCE}]
    r = one({**claim, "tolerance": 1}, {"q": -30.5}, values=zero)  # a difference in points from an unchanged 0
    assert r.status == DIFFERS and r.detail == "|ours − paper| = 30.5; allowed 1" and "inf" not in r.detail


@pytest.mark.parametrize("num, den, status", [(0.6885, 0.6885, REPRODUCED), (0.695, 0.6885, REPRODUCED), (0.70, 0.6885, DIFFERS),
                                              (0.682, 0.6885, REPRODUCED), (0.68, 0.6885, DIFFERS), (0.6, 0.6885, DIFFERS)])
def test_ratio_within(num, den, status):
    r = one({"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "tolerance": 0.01}, {"a": num, "b": den})
    assert r.status == status, r.detail


def test_ratio_with_infinite_or_zero_denominator_differs():
    claim = {"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "tolerance": 0.01}
    assert one(claim, {"a": 1.0, "b": 0.0}).status == DIFFERS
    assert one(claim, {"a": 1.0, "b": math.inf}).status == DIFFERS


@pytest.mark.parametrize(
    "vals, status",
    [((1, 2, 3), REPRODUCED), ((1, 3, 2.99), WITHIN), ((1, 3, 2), DIFFERS), ((2, 2, 2), WITHIN), ((1, 2, math.inf), REPRODUCED),
     ((math.inf, math.inf), DIFFERS)],
)
def test_order(vals, status):
    qs = [f"q{i}" for i in range(len(vals))]
    r = one({"id": "c", "check": "order", "quantities": qs, "tolerance": 0.01}, dict(zip(qs, map(float, vals))))
    assert r.status == status, r.detail
    assert r.detail.startswith("measured order:")


@pytest.mark.parametrize("vals, status", [((1, 2, 3), REPRODUCED), ((1, 3, 3), DIFFERS), ((2, 2, 2), DIFFERS), ((1, 3, 2), DIFFERS)])
def test_strict_order_counts_ties_as_differs(vals, status):
    qs = [f"q{i}" for i in range(len(vals))]
    r = one({"id": "c", "check": "order", "quantities": qs, "tolerance": 0.0, "strict": True}, dict(zip(qs, map(float, vals))))
    assert r.status == status, r.detail


@pytest.mark.parametrize("vals, noise, status", [
    ((100.0, 100.5), 0.05, NOT_AT_SCALE),  # 0.5% apart, spread 5%: the run cannot tell
    ((100.5, 100.0), 0.05, NOT_AT_SCALE),  # reversed within the spread: not "differs" either
    ((100.0, 120.0), 0.05, REPRODUCED),  # 17% apart: beyond the spread
    ((120.0, 100.0), 0.05, DIFFERS),
    ((100.0, 104.0, 200.0), 0.05, NOT_AT_SCALE),  # the closest adjacent pair decides
    ((100.0, 100.5), None, NOT_RUN),  # no spread measured: no verdict
    ((100.0, 100.5), math.nan, NOT_RUN),
    ((100.0, 300.0), math.inf, NOT_AT_SCALE),  # a spread the run could not bound holds any order
    # a reversal beyond the spread refutes the order even where another pair is too close to tell:
    ((0.507, 0.497, 0.480), 0.0488, DIFFERS),  # first and last reversed by 5.3%, each adjacent pair closer
    ((100.0, 101.0, 50.0), 0.05, DIFFERS),  # the last far below the first two, which tie
    ((0.4383, 0.4978, 0.465), 0.1052, NOT_AT_SCALE),  # the one reversal (6.6%) within the spread
])
def test_an_order_within_its_measured_noise_is_not_at_this_scale(vals, noise, status):
    qs = [f"q{i}" for i in range(len(vals))]
    claim = {"id": "c", "check": "order", "quantities": qs, "tolerance": 0.0, "noise": "spread",
             "scale_reason": "timing noise of a shared machine"}
    r = one(claim, {**dict(zip(qs, vals)), "spread": noise})
    assert r.status == status, r.detail
    assert r.measured["spread"] == noise or (noise != noise and r.measured["spread"] != r.measured["spread"])
    if status == NOT_AT_SCALE and noise == 0.05:
        assert r.detail.startswith("timing noise of a shared machine") and "within this run's spread of 5.00%" in r.detail
    if status == DIFFERS and len(vals) == 3:
        assert "beyond this run's spread" in r.detail and "q2 is below q" in r.detail


@pytest.mark.parametrize("a, noise, status", [
    (103.5, 0.01, REPRODUCED),  # 3.5% off, 1.5 points inside a 5% tolerance: beyond a 1% spread
    (107.0, 0.01, DIFFERS),  # 7% off: 2 points outside
    (96.49, 0.0488, NOT_AT_SCALE),  # -3.51% with a 4.88% spread: could be beyond 5%
    (104.5, 0.01, NOT_AT_SCALE),  # 0.5 points inside, within the spread
    (105.5, 0.01, NOT_AT_SCALE),  # 0.5 points outside: not "differs" either
    (100.0, math.inf, NOT_AT_SCALE),  # a spread the run could not bound
    (103.5, None, NOT_RUN),
    (103.5, math.nan, NOT_RUN),
])
def test_a_ratio_within_its_measured_noise_of_the_tolerance_is_not_at_this_scale(a, noise, status):
    claim = {"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "tolerance": 0.05, "noise": "spread",
             "scale_reason": "timing noise of a shared machine"}
    r = one(claim, {"a": a, "b": 100.0, "spread": noise})
    assert r.status == status, r.detail
    if status == NOT_AT_SCALE and noise == 0.0488:
        assert r.detail.startswith("timing noise of a shared machine") and "within this run's spread of 4.88%" in r.detail
    # without its noise the claim is the plain check
    plain = one({k: v for k, v in claim.items() if k not in ("noise", "scale_reason")}, {"a": a, "b": 100.0})
    assert plain.status == (REPRODUCED if abs(a / 100.0 - 1) <= 0.05 else DIFFERS)


@pytest.mark.parametrize("extra, msg", [
    ({"check": "near", "quantities": ["q"], "paper": ["rate"], "noise": "s", "scale_reason": "x"}, "'ratio_within' check only"),
    ({"check": "ratio_within", "quantities": ["a", "b"], "noise": "s", "scale_reason": "x", "tolerance_kind": "absolute"},
     "needs a relative tolerance"),
    ({"check": "order", "quantities": ["a", "b"], "noise": "s"}, "must say in 'scale_reason'"),
    ({"check": "order", "quantities": ["a", "b"], "noise": "s", "scale_reason": "x", "gate": True}, "cannot have 'noise'"),
    ({"check": "order", "quantities": ["a", "b"], "scale_reason": "x"}, "needs 'meaningful_at'"),
])
def test_noise_is_checked_in_the_spec(extra, msg):
    from gcbench.reproductions.framework.spec import SpecError

    with pytest.raises(SpecError, match=msg):
        make_spec([{"id": "c", "tolerance": 0.0, **extra}])


@pytest.mark.parametrize("ours, flag, status", [
    (7.24, 1.0, REPRODUCED),  # the run can test the claim: the check decides
    (9.0, 1.0, DIFFERS),
    (9.0, 0.0, NOT_AT_SCALE),  # it cannot: never "differs"
    (7.24, 0.0, NOT_AT_SCALE),  # nor "reproduced"
    (7.24, None, NOT_RUN),  # no flag measured: no verdict
    (7.24, math.nan, NOT_RUN),
])
def test_a_claim_the_run_flags_untestable_is_not_at_this_scale(ours, flag, status):
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1, "testable": "ok",
             "scale_reason": "the fit priced communication at zero"}
    r = one(claim, {"q": ours, "ok": flag})
    assert r.status == status, r.detail
    assert "ok" in r.measured
    if status == NOT_AT_SCALE:
        assert r.detail.startswith("the fit priced communication at zero (ok = 0; the check would say ")


def test_a_testable_flag_is_read_only_at_a_scale_that_can_test_the_claim():
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1, "testable": "ok",
             "scale_reason": "r", "testable_reason": "t", "meaningful_at": ["full"]}
    assert one(claim, {"q": 9.0, "ok": 1.0}, scale="full").status == DIFFERS
    assert one(claim, {"q": 9.0, "ok": 0.0}, scale="full").status == NOT_AT_SCALE
    assert one(claim, {"q": 9.0, "ok": 1.0}, scale="smoke").status == NOT_AT_SCALE
    assert one(claim, {"q": 9.0}, scale="smoke").status == NOT_AT_SCALE  # no flag where the scale cannot test it anyway
    assert one(claim, {"q": 9.0}, scale="full").status == NOT_RUN
    # a run that measured that it cannot test the claim says so, whether or not it measured the quantity
    assert one(claim, {"q": None, "ok": 0.0}, scale="full").status == NOT_AT_SCALE
    assert one(claim, {"q": None, "ok": 1.0}, scale="full").status == NOT_RUN
    assert one(claim, {"q": None}, scale="full").status == NOT_RUN


def test_a_testable_flag_other_than_0_or_1_is_an_error():
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1, "testable": "ok",
             "scale_reason": "r"}
    with pytest.raises(ValueError, match="must be 0 or 1, got 0.5"):
        one(claim, {"q": 7.24, "ok": 0.5})


def test_each_reason_is_given_where_it_applies():
    """A claim meaningful at some scales and flagged by a measured quantity at those: outside them its
    ``scale_reason``, inside them, where the flag is 0, its ``testable_reason`` (the other scales'
    reason, shown there, would describe another run)."""
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1, "testable": "ok",
             "scale_reason": "smoke's model is a pipeline check", "testable_reason": "the windows drift",
             "meaningful_at": ["full"]}
    inside = one(claim, {"q": 9.0, "ok": 0.0}, scale="full")
    outside = one(claim, {"q": 9.0, "ok": 0.0}, scale="smoke")
    assert inside.status == outside.status == NOT_AT_SCALE
    assert inside.reason == "the windows drift" and inside.detail.startswith("the windows drift (ok = 0;")
    assert "pipeline" not in inside.detail and inside.as_dict()["reason"] == "the windows drift"
    assert outside.reason == "smoke's model is a pipeline check" and "drift" not in outside.detail
    # a claim without meaningful_at may give its flag's reason in scale_reason alone
    plain = one({**claim, "meaningful_at": None, "testable_reason": ""}, {"q": 9.0, "ok": 0.0})
    assert plain.reason == "smoke's model is a pipeline check"


@pytest.mark.parametrize("extra, msg", [
    ({"testable": "ok"}, "must say in 'testable_reason'"),
    ({"testable": "ok", "scale_reason": "x", "meaningful_at": ["full"]}, "must say in 'testable_reason'"),
    ({"testable_reason": "x"}, "needs 'testable'"),
    ({"testable": "ok", "testable_reason": 3}, "must be a string"),
    ({"testable": "ok", "scale_reason": "x", "gate": True}, "cannot have 'testable'"),
    ({"testable": 1, "scale_reason": "x"}, "must be a quantity name"),
])
def test_testable_is_checked_in_the_spec(extra, msg):
    from gcbench.reproductions.framework.spec import SpecError

    with pytest.raises(SpecError, match=msg):
        make_spec([{"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1, **extra}])


def test_strict_is_for_order_checks_only():
    from gcbench.reproductions.framework.spec import SpecError

    with pytest.raises(SpecError, match="'order' check only"):
        make_spec([{"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "strict": True}])


def test_missing_quantity_is_not_run():
    r = one({"id": "c", "check": "order", "quantities": ["a", "b"]}, {"a": 1.0})
    assert r.status == NOT_RUN and "b" in r.detail
    r = one({"id": "c", "check": "order", "quantities": ["a", "b"]}, {"a": 1.0, "b": None})
    assert r.status == NOT_RUN


def test_claim_restricted_to_other_scales_is_not_run():
    r = one({"id": "c", "check": "order", "quantities": ["a", "b"], "scales": ["full"]}, {"a": 1.0, "b": 2.0})
    assert r.status == NOT_RUN and "full" in r.detail
    r = one({"id": "c", "check": "order", "quantities": ["a", "b"], "scales": ["full"]}, {"a": 1.0, "b": 2.0}, scale="full")
    assert r.status == REPRODUCED


def test_claim_below_its_meaningful_scale_is_not_at_this_scale():
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "meaningful_at": ["full"],
             "scale_reason": "final accuracy needs a whole training run"}
    r = one(claim, {"a": 2.0, "b": 1.0})
    assert r.status == NOT_AT_SCALE and not r.gate_failed
    assert "final accuracy needs a whole training run" in r.detail and "would say differs" in r.detail
    assert "a 2" in r.ours  # measured numbers stay visible, as information
    assert one(claim, {"a": 2.0, "b": 1.0}, scale="full").status == DIFFERS
    # the scale cannot test the claim whether or not it measured it: the reason is given either way
    unmeasured = one(claim, {"a": 1.0})
    assert unmeasured.status == NOT_AT_SCALE and not unmeasured.gate_failed
    assert "final accuracy needs a whole training run" in unmeasured.detail
    assert "not measured at this scale" in unmeasured.detail and "b" in unmeasured.detail
    assert one(claim, {"a": 1.0}, scale="full").status == NOT_RUN  # at a scale that can test it: not run
    assert r.as_dict()["meaningful_at"] == ["full"]


def test_a_gated_claim_outside_its_meaningful_scales_never_fails_the_gate():
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "gate": True, "meaningful_at": ["smoke"],
             "scale_reason": "the bigger preset changes the data set the paper's number is about"}
    assert one(claim, {"a": 2.0, "b": 1.0}).gate_failed
    r = one(claim, {"a": 2.0, "b": 1.0}, scale="full")
    assert r.status == NOT_AT_SCALE and not r.gate_failed


@pytest.mark.parametrize("extra, msg", [
    ({"gate": True, "meaningful_at": ["full"], "scale_reason": "x"}, "must be meaningful at the 'smoke' scale CI runs"),
    ({"gate": True, "scales": ["full"]}, "must be evaluated at the 'smoke' scale CI runs"),
    ({"meaningful_at": ["full"]}, "scale_reason"),
    ({"meaningful_at": ["huge"], "scale_reason": "x"}, "not declared"),
    ({"scale_reason": "x"}, "needs 'meaningful_at'"),
])
def test_meaningful_at_is_validated(extra, msg):
    from gcbench.reproductions.framework.spec import SpecError

    with pytest.raises(SpecError, match=msg):
        make_spec([{"id": "c", "check": "order", "quantities": ["a", "b"], **extra}])


def test_unselected_table_and_gate_failures():
    spec = make_spec([
        {"id": "g1", "check": "order", "quantities": ["a", "b"], "gate": True},
        {"id": "g2", "check": "order", "quantities": ["b", "a"], "gate": True, "tables": ["2"]},
        {"id": "n1", "check": "order", "quantities": ["b", "a"]},
    ])
    measured = {"a": 2.0, "b": 1.0}
    res = {r.claim.id: r for r in evaluate_claims(spec, measured, "smoke", tables=["1"])}
    assert res["g1"].status == DIFFERS and res["g1"].gate_failed
    assert res["g2"].status == NOT_RUN and "not selected" in res["g2"].detail
    assert res["n1"].status == REPRODUCED and not res["n1"].gate_failed
    assert [r.claim.id for r in gate_failures(res.values())] == ["g1"]
    # every table selected: g2 holds, g1 still fails
    res = {r.claim.id: r for r in evaluate_claims(spec, measured, "smoke")}
    assert res["g2"].status == REPRODUCED
    assert [r.claim.id for r in gate_failures(res.values())] == ["g1"]


def test_paper_and_ours_columns_and_json():
    r = one({"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"]}, {"q": 6.6})
    assert r.paper == "c 7.24"
    assert "6.6" in r.ours
    d = r.as_dict()
    assert d["status"] == WITHIN and d["tolerance"] == "±10%" and d["measured"] == {"q": 6.6}


def test_fmt_num():
    assert fmt_num(None) == "—"
    assert fmt_num(math.inf) == "∞"
    # stored cells hold non-finite numbers as strings (strict JSON)
    assert fmt_num("nan") == "nan" and fmt_num("inf") == "∞" and fmt_num("-inf") == "-∞"
    assert fmt_num(1041.2) == "1,041"
    assert fmt_num(0.68851) == "0.6885"


def test_ratio_near_compares_the_measured_ratio_with_the_papers():
    values = [
        {"id": "sk", "value": 100, "table": "1", "source": SOURCE},
        {"id": "adam", "value": 1041, "table": "1", "source": SOURCE},
    ]
    claim = {"id": "c", "check": "ratio_near", "quantities": ["t_adam", "t_sk"], "paper": ["adam", "sk"], "tolerance": 0.25}
    # Paper: 1041 / 100 = 10.41x; printed precision allows 10.41 * (0.5/1041 + 0.5/100) ~ 0.057.
    assert one(claim, {"t_adam": 10.43, "t_sk": 1.0}, values=values).status == REPRODUCED
    assert one(claim, {"t_adam": 8.0, "t_sk": 1.0}, values=values).status == WITHIN
    assert one(claim, {"t_adam": 30.0, "t_sk": 3.0}, values=values).status == WITHIN
    assert one(claim, {"t_adam": 7.5, "t_sk": 1.0}, values=values).status == DIFFERS
    assert one(claim, {"t_adam": 14.0, "t_sk": 1.0}, values=values).status == DIFFERS
    assert one(claim, {"t_adam": 1.0, "t_sk": 0.0}, values=values).status == DIFFERS


@pytest.mark.parametrize(
    "claim",
    [
        {"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1},
        {"id": "c", "check": "near", "quantities": ["q"], "paper": ["keys"], "tolerance": 0.3},
        {"id": "c", "check": "near", "quantities": ["q"], "paper": ["big"], "tolerance": 20, "tolerance_kind": "absolute"},
        {"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "tolerance": 0.05},
        {"id": "c", "check": "ratio_near", "quantities": ["a", "b"], "paper": ["big", "rate"], "tolerance": 0.5},
        {"id": "c", "check": "order", "quantities": ["a", "b", "c"], "tolerance": 0.5},
        {"id": "c", "check": "order", "quantities": ["a", "b"], "tolerance": 3, "tolerance_kind": "absolute"},
    ],
)
def test_falsifying_measurement_makes_every_check_differ(claim):
    spec = make_spec([claim])
    assert evaluate_claim(spec.claims[0], falsifying_measurement(spec.claims[0], spec), spec, "smoke").status == DIFFERS


# --- the framework's precedence rules, each shown on the input that once got them wrong -----------------


def test_a_declared_tolerance_narrower_than_the_printed_precision_bounds_reproduced():
    """"About 20%" stored as 0.2 is half a unit (0.05) wide; a tolerance of 0.02 is the claim's band."""
    values = [{"id": "about", "value": 0.2, "table": "1", "source": SOURCE}]
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["about"], "tolerance": 0.02,
             "tolerance_kind": "absolute"}
    assert one(claim, {"q": 0.249}, values=values).status == DIFFERS
    assert one(claim, {"q": 0.215}, values=values).status == REPRODUCED  # within both
    # without a tolerance, the printed precision is the only band (a count printed as 0)
    exact = {**claim, "tolerance": 0.0}
    assert one(exact, {"q": 0.24}, values=values).status == REPRODUCED
    assert one(exact, {"q": 0.26}, values=values).status == DIFFERS


def test_ratio_near_reproduced_stays_inside_the_tolerance():
    values = [{"id": "a", "value": 3, "table": "1", "source": SOURCE}, {"id": "b", "value": 1, "table": "1", "source": SOURCE}]
    claim = {"id": "c", "check": "ratio_near", "quantities": ["x", "y"], "paper": ["a", "b"], "tolerance": 0.01}
    assert one(claim, {"x": 4.4, "y": 1.0}, values=values).status == DIFFERS
    assert one(claim, {"x": 3.02, "y": 1.0}, values=values).status == REPRODUCED


def test_an_order_with_noise_and_an_infinite_value_is_decided():
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "tolerance": 0.0, "noise": "n", "scale_reason": "r"}
    assert one(claim, {"a": math.inf, "b": 1.0, "n": 0.05}).status == DIFFERS
    assert one(claim, {"a": 1.0, "b": math.inf, "n": 0.05}).status == REPRODUCED


def test_noise_does_not_make_an_order_stricter_than_its_tolerance():
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "tolerance": 0.02, "noise": "n", "scale_reason": "r"}
    assert one({k: v for k, v in claim.items() if k not in ("noise", "scale_reason")}, {"a": 1.01, "b": 1.0}).status == WITHIN
    assert one(claim, {"a": 1.01, "b": 1.0, "n": 0.005}).status == WITHIN
    assert one(claim, {"a": 1.05, "b": 1.0, "n": 0.005}).status == DIFFERS


def test_a_strict_tie_measured_without_spread_differs():
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "tolerance": 0.0, "strict": True, "noise": "n",
             "scale_reason": "r"}
    assert one(claim, {"a": 6.0, "b": 6.0, "n": 0.0}).status == DIFFERS
    assert one(claim, {"a": 6.0, "b": 6.0, "n": 0.01}).status == NOT_AT_SCALE


def test_a_gated_check_that_differs_is_not_rescued_by_a_guard_that_was_not_run():
    guard = {"id": "g", "kind": "guard", "check": "at_most", "quantities": ["g"], "tolerance": 1.0, "gate": True,
             "tolerance_kind": "absolute"}
    result = {"id": "r", "check": "at_most", "quantities": ["q"], "tolerance": 0.1, "gate": True, "requires": ["g"],
              "tolerance_kind": "absolute"}
    spec = make_spec([guard, result])
    got = {r.claim.id: r.status for r in evaluate_claims(spec, {"q": 1.2}, "smoke")}
    assert got == {"g": NOT_RUN, "r": DIFFERS}
    assert [r.claim.id for r in gate_failures(evaluate_claims(spec, {"q": 1.2}, "smoke"))] == ["r"]
    # its own check holding, the guard not run: not run
    assert {r.claim.id: r.status for r in evaluate_claims(spec, {"q": 0.05}, "smoke")}["r"] == NOT_RUN


def test_a_claim_meaningful_at_no_scale_is_not_at_this_scale_even_where_its_table_did_not_run():
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "meaningful_at": [], "scale_reason": "r",
             "tables": ["2"]}
    spec = make_spec([claim])
    assert evaluate_claims(spec, {}, "smoke", tables=["1"])[0].status == NOT_AT_SCALE


def test_an_order_tolerates_each_pair_once_with_or_without_noise():
    """Steps each within the tolerance that add up past it differ, with or without a measured spread."""
    claim = {"id": "c", "check": "order", "quantities": ["a", "b", "c", "d"], "tolerance": 0.1}
    drift = {"a": 1.0, "b": 0.95, "c": 0.9, "d": 0.86}
    assert one(claim, drift).status == DIFFERS
    noisy = {**claim, "noise": "n", "scale_reason": "r"}
    assert one(noisy, {**drift, "n": 0.05}).status == DIFFERS
    assert one(noisy, {**drift, "n": 0.0}).status == DIFFERS
    close = {"a": 1.0, "b": 0.97, "c": 0.95, "d": 0.93}
    assert one(claim, close).status == WITHIN
    assert one(noisy, {**close, "n": 0.0}).status == WITHIN


def test_a_claim_outside_its_scales_is_not_run_whatever_its_testable_flag():
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["rate"], "tolerance": 0.1, "testable": "ok",
             "testable_reason": "t", "scales": ["full"]}
    assert one(claim, {"ok": 0.0}, scale="smoke").status == NOT_RUN
    assert one(claim, {"ok": 0.0}, scale="full").status == NOT_AT_SCALE


def test_a_gated_claim_with_a_nan_quantity_differs_even_where_another_was_not_measured():
    """A NaN is the method's own failure: it turns the gate red whatever else the run left unmeasured."""
    claim = {"id": "c", "check": "order", "quantities": ["a", "b", "c"], "gate": True}
    r = one(claim, {"a": math.nan, "b": None, "c": 1.0})
    assert r.status == DIFFERS and r.gate_failed
    assert r.detail == "measured NaN: a; not measured in this run: b"
    assert one(claim, {"a": math.nan, "b": 2.0, "c": 3.0}).detail == "measured NaN: a"
    assert one(claim, {"a": None, "b": 2.0, "c": 3.0}).status == NOT_RUN  # nothing failed, something is missing
    assert one({**claim, "gate": False}, {"a": math.nan, "b": None, "c": 1.0}).status == NOT_RUN  # only a gate turns red


def test_an_absolute_ratio_within_checks_and_shows_the_difference():
    """With an absolute tolerance the check is |q0 - q1| <= tolerance; the detail shows that difference,
    and two zeros (no ratio) are equal."""
    claim = {"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "tolerance": 0.5, "tolerance_kind": "absolute"}
    r = one(claim, {"a": 10.0, "b": 10.4})
    assert r.status == REPRODUCED and r.detail == "|a − b| = 0.4; allowed 0.5"
    assert one(claim, {"a": 10.0, "b": 10.6}).status == DIFFERS
    assert one(claim, {"a": 0.0, "b": 0.0}).status == REPRODUCED
    assert one(claim, {"a": math.inf, "b": 1.0}).status == DIFFERS
    assert one(claim, {"a": math.inf, "b": math.inf}).detail == "difference undefined (two infinite values)"
    relative = one({**claim, "tolerance_kind": "relative"}, {"a": math.inf, "b": 1.0})
    assert relative.status == DIFFERS and relative.detail == "ratio undefined (zero denominator or infinite value)"
