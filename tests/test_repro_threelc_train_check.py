"""The 3LC training check (trains-s1.00: :func:`excess_loss`), the time row of "Paper values and
ours", and the claims table's labels, without training."""

from __future__ import annotations

import math

import pytest
from gcbench.reproductions.framework.claims import DIFFERS, REPRODUCED, evaluate_claim
from gcbench.reproductions.framework.spec import load_spec
from gcbench.reproductions.threelc import SPEC_PATH
from gcbench.reproductions.threelc.report import quantity_labels
from gcbench.reproductions.threelc.workload import excess_loss, workload


def run(*losses: float) -> dict:
    return {"evals": [{"test_loss": x} for x in losses]}


def test_excess_loss_is_the_share_of_32bit_fall_not_made():
    base = run(2.3, 1.8, 1.3)
    assert excess_loss(run(2.3, 1.3), base) == pytest.approx(0.0)
    assert excess_loss(run(2.3, 1.8), base) == pytest.approx(0.5)
    assert excess_loss(run(2.3, 2.3), base) == pytest.approx(1.0)  # no progress
    assert excess_loss(run(2.3, 2.4), base) > 1.0  # worse than the initial weights
    assert excess_loss(run(2.3, 1.2), base) < 0.0  # ahead of 32-bit
    assert excess_loss(run(2.3, math.nan), base) == math.inf  # diverged
    assert excess_loss(run(2.3, 1.3), run(2.3, 2.3)) == math.inf  # 32-bit did not train: nothing to compare with
    assert excess_loss(run(2.3, 1.3), run(2.3, 2.5)) == math.inf


def test_trains_claim_is_a_gated_one_sided_bound_at_one_half():
    spec = load_spec(SPEC_PATH)
    claim = next(c for c in spec.claims if c.id == "trains-s1.00")
    assert claim.gate and claim.kind == "guard" and claim.check == "at_most" and not claim.scale_dependent
    assert claim.quantities == ("train.excess_loss.s1.00",) and claim.tolerance == 0.5
    # the smoke gate run selects the traffic table only: the claim and its 32-bit reference are in it
    assert "traffic" in claim.tables and "32bit" in workload().needed_methods(["traffic"])
    q = claim.quantities[0]
    assert evaluate_claim(claim, {q: 0.05}, spec, "smoke").status == REPRODUCED
    for broken in (0.51, 1.0, math.inf):
        assert evaluate_claim(claim, {q: broken}, spec, "smoke").status == DIFFERS


def test_time_row_quotes_the_time_claims_modelled_quantity():
    spec = load_spec(SPEC_PATH)
    claim = next(c for c in spec.claims if c.id == "time-1gbps")
    row = spec.value("time.reduction")
    assert row.measure == claim.quantities[0] == "time.reduction_modelled.threelc-1gbps.best"
    assert "modelled" in row.note


def test_reduction_label_puts_the_drift_flag_before_the_value():
    wl = workload()
    labels = quantity_labels(wl, {"traffic.drifting.s1.00": 1.0, "traffic.drifting.s1.50": 0.0})
    assert labels["traffic.reduction.s1.00"] == "s=1.00 (per-window series drifts) whole run, framed (x)"
    assert labels["traffic.reduction.s1.50"] == "s=1.50 (per-window series steady) whole run, framed (x)"
    assert labels["traffic.reduction.s1.75"] == "s=1.75 whole run, framed (x)"
    assert labels["time.reduction_modelled.threelc-1gbps.best"].startswith("best 3LC, modelled")
