"""Claim verdicts at their edges, and specs that must be refused.

A value exactly half a printed unit from the paper's is reproduced; one exactly at the tolerance is
within it; an ``order`` with an absolute tolerance counts a gap equal to it as a tie, and with a
relative tolerance a negative paper value loosens rather than tightens; a range value measured below
its low end is judged against the low end; an infinite denominator makes a ratio undefined, whatever
the tolerance; a measured spread equal to the margin leaves the claim untestable at this scale; a
claim that cannot be tested at this scale keeps that status whatever its guard says, and a failed
guard outweighs an unmeasured one. A one-sided bound holds at the bound itself, and the gate's cell
says *passed* alone only where every gated claim was judged. A spec whose ``ratio_near`` divides by a
paper value of 0, whose ``at_most`` bound is relative, or whose value names an undeclared table is
refused.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from test_repro_claims import make_spec as claims_spec
from test_repro_claims import one as claims_one

from gcbench.reproductions.framework.claims import (
    DIFFERS,
    NOT_AT_SCALE,
    NOT_RUN,
    REPRODUCED,
    WITHIN,
    ClaimResult,
    evaluate_claims,
    gate_verdict,
)
from gcbench.reproductions.framework.spec import Spec, SpecError

SOURCE = {"paper": "P", "table": "T", "row": "r", "column": "c"}
VALUES = [
    {"id": "big", "value": 1041, "table": "1", "source": SOURCE},
    {"id": "ten", "value": 10, "table": "1", "source": SOURCE},
    {"id": "wide", "value": [1.0, 3.0], "table": "1", "source": SOURCE},
    {"id": "zero", "value": 0, "table": "1", "source": SOURCE},
]


def make_spec(claims: list[dict[str, Any]], values: list[dict[str, Any]] | None = None) -> Spec:
    """:func:`test_repro_claims.make_spec` with this file's paper values."""
    return claims_spec(claims, VALUES if values is None else values)


def one(claim: dict[str, Any], measured: dict[str, float | None]) -> ClaimResult:
    """The verdict on ``claim`` at the smoke scale."""
    return claims_one(claim, measured, values=VALUES)


def test_a_value_half_a_printed_unit_off_is_reproduced() -> None:
    """1041.5 against a printed 1041 is equal at the paper's precision."""
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["big"], "tolerance": 0.1}
    assert one(claim, {"q": 1041.5}).status == REPRODUCED


def test_a_value_exactly_at_an_absolute_tolerance_is_within_it() -> None:
    """|12 - 10| = 2 with an absolute tolerance of 2."""
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["ten"], "tolerance": 2.0,
             "tolerance_kind": "absolute"}
    assert one(claim, {"q": 12.0}).status == WITHIN


def test_a_value_below_a_range_is_judged_against_its_low_end() -> None:
    """0.85 is 15 % below the range's low end 1.0: beyond a 10 % tolerance of it."""
    claim = {"id": "c", "check": "near", "quantities": ["q"], "paper": ["wide"], "tolerance": 0.1}
    assert one(claim, {"q": 0.85}).status == DIFFERS
    assert one(claim, {"q": 0.95}).status == WITHIN


def test_an_infinite_denominator_differs_even_under_a_wide_tolerance() -> None:
    """A ratio over an infinite quantity is undefined, not -100 %."""
    claim = {"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "tolerance": 1.0}
    assert one(claim, {"a": 1.0, "b": math.inf}).status == DIFFERS


def test_a_ratio_whose_margin_equals_the_spread_is_not_at_this_scale() -> None:
    """|1.5 / 1 - 1| = 0.5 lies 0.25 from a 0.25 tolerance: exactly the spread, so the run cannot tell."""
    claim = {"id": "c", "check": "ratio_within", "quantities": ["a", "b"], "tolerance": 0.25, "noise": "spread",
             "scale_reason": "timing noise"}
    assert one(claim, {"a": 1.5, "b": 1.0, "spread": 0.25}).status == NOT_AT_SCALE


def test_an_order_reversed_by_exactly_the_spread_is_not_at_this_scale() -> None:
    """100 then 75 is a 25 % reversal: within a 25 % spread, not beyond it."""
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "tolerance": 0.0, "noise": "spread",
             "scale_reason": "timing noise"}
    assert one(claim, {"a": 100.0, "b": 75.0, "spread": 0.25}).status == NOT_AT_SCALE


def test_an_order_gap_equal_to_an_absolute_tolerance_is_a_tie() -> None:
    """2.5 before 2.0 with an absolute tolerance of 0.5 is within tolerance."""
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "tolerance": 0.5, "tolerance_kind": "absolute"}
    assert one(claim, {"a": 2.5, "b": 2.0}).status == WITHIN


def test_a_relative_order_tolerance_loosens_negative_values_too() -> None:
    """-0.995 before -1.0 is 0.5 % out of order: a tie under a 1 % relative tolerance."""
    claim = {"id": "c", "check": "order", "quantities": ["a", "b"], "tolerance": 0.01}
    assert one(claim, {"a": -0.995, "b": -1.0}).status == WITHIN
    assert one(claim, {"a": -0.98, "b": -1.0}).status == DIFFERS


GUARD = {"id": "guard", "kind": "guard", "check": "at_most", "quantities": ["excess"], "tolerance": 0.0,
         "tolerance_kind": "absolute"}
OTHER_GUARD = {"id": "other", "kind": "guard", "check": "at_most", "quantities": ["spill"], "tolerance": 0.0,
               "tolerance_kind": "absolute"}


def test_a_claim_untestable_at_this_scale_stays_so_whatever_its_guard_says() -> None:
    """A claim meaningful only at full scale, with a failing guard, is still not at this scale."""
    claim = {"id": "gain", "check": "order", "quantities": ["u", "o"], "tolerance": 0.0, "requires": ["guard"],
             "meaningful_at": ["full"], "scale_reason": "needs a whole training"}
    spec = make_spec([GUARD, claim])
    out = {r.claim.id: r for r in evaluate_claims(spec, {"u": 1.0, "o": 2.0, "excess": 5.0}, "smoke")}
    assert out["guard"].status == DIFFERS
    assert out["gain"].status == NOT_AT_SCALE


def test_a_failed_guard_outweighs_an_unmeasured_one() -> None:
    """One guard differs, the other was not measured: the claim differs."""
    claim = {"id": "gain", "check": "order", "quantities": ["u", "o"], "tolerance": 0.0,
             "requires": ["other", "guard"]}
    spec = make_spec([GUARD, OTHER_GUARD, claim])
    out = {r.claim.id: r for r in evaluate_claims(spec, {"u": 1.0, "o": 2.0, "excess": 5.0}, "smoke")}
    assert out["other"].status == NOT_RUN
    assert out["gain"].status == DIFFERS


def test_a_ratio_near_over_a_zero_paper_value_is_refused() -> None:
    """The paper's ratio must be defined."""
    claim = {"id": "c", "check": "ratio_near", "quantities": ["a", "b"], "paper": ["ten", "zero"]}
    with pytest.raises(SpecError, match="must not be 0"):
        make_spec([claim])


def test_an_at_most_bound_must_be_absolute() -> None:
    """An ``at_most`` bound is its tolerance, an absolute number."""
    claim = {"id": "c", "check": "at_most", "quantities": ["q"], "tolerance": 0.1}
    with pytest.raises(SpecError, match="tolerance_kind"):
        make_spec([claim])


def test_a_value_of_an_undeclared_table_is_refused() -> None:
    """Every paper value belongs to a table of the spec."""
    values = [{"id": "v", "value": 1.0, "table": "9", "source": SOURCE}]
    with pytest.raises(SpecError, match="not declared in"):
        make_spec([], values)


def test_a_one_sided_bound_holds_at_the_bound_itself() -> None:
    claim = {"id": "c", "check": "at_most", "quantities": ["q"], "tolerance": 0.1, "tolerance_kind": "absolute"}
    assert one(claim, {"q": 0.1}).status == REPRODUCED
    assert one(claim, {"q": math.nextafter(0.1, 1.0)}).status == DIFFERS


def test_the_gate_cell_says_passed_alone_only_when_every_gated_claim_was_judged() -> None:
    every = gate_verdict([("a", True, REPRODUCED), ("b", True, WITHIN), ("c", False, DIFFERS)])
    assert every.cell() == "passed" and every.line() == "CI gate: passed (no gated claim differs)"
    some = gate_verdict([("a", True, REPRODUCED), ("b", True, NOT_RUN)])
    assert some.cell() == "passed (1 of 2 gated claims measured in this run, none differs)"
    failed = gate_verdict([("a", True, DIFFERS), ("b", True, NOT_AT_SCALE)])
    assert failed.cell() == "FAILED: a"
