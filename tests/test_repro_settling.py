"""Settling: whether a run's training has settled enough to test a claim about its final metric."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gcbench.reproductions.framework.settling import claims_bound, fall_text, settled, window_fall
from gcbench.reproductions.framework.spec import parse_spec

SOURCE = {"paper": "P", "table": "T", "row": "r", "column": "c"}


def test_window_fall_is_the_fall_of_the_seed_mean_metric_over_the_last_tenth():
    assert window_fall([[3.0] * 100, [3.0] * 100], perplexity=True) == 0.0
    # a loss falling 0.01 nats a step: the last ten steps' mean is 0.1 below the ten before
    falling = [5.0 - 0.01 * i for i in range(100)]
    assert window_fall([falling], perplexity=True) == pytest.approx(math.exp(0.1) - 1)
    assert window_fall([falling]) == pytest.approx(4.155 / 4.055 - 1)  # the loss itself, relative to the last window
    # the seeds' mean curve: one flat and one falling seed fall half as much
    assert window_fall([falling, [4.0] * 100], perplexity=True) == pytest.approx(math.exp(0.05) - 1)
    # only the two last windows count: a fall before them is not drift
    assert window_fall([[9.0] * 50 + [3.0] * 50], perplexity=True) == 0.0
    assert window_fall([[3.0] * 80 + [3.2] * 20], perplexity=True) == pytest.approx(0.0)
    assert window_fall([[3.0] * 90 + [3.2] * 10], perplexity=True) == pytest.approx(math.exp(-0.2) - 1)  # a rise is negative
    assert window_fall([[3.0] * 19]) is None  # under two steps a window
    assert window_fall([[3.0] * 100, [3.0] * 99]) is None and window_fall([]) is None
    assert window_fall([[1.0] * 90 + [0.0] * 10]) is None  # a cross entropy of 0 has no relative fall


def test_window_fall_of_a_perplexity_past_a_float_is_infinite_and_a_non_positive_loss_mean_is_none():
    # a loss recovering from a divergence: exp(999) is past any float, the perplexity's fall is unbounded
    assert window_fall([[1000.0] * 18 + [1.0] * 2], perplexity=True) == math.inf
    assert settled(window_fall([[1000.0] * 18 + [1.0] * 2], perplexity=True), 0.01) == 0.0
    # a non-positive mean of the earlier window has no relative fall either (as of the last window)
    assert window_fall([[1.0] * 16 + [-1.0] * 2 + [2.0] * 2]) is None
    assert window_fall([[1.0] * 16 + [0.0] * 2 + [2.0] * 2]) is None
    assert window_fall([[1.0] * 16 + [-1.0] * 2 + [2.0] * 2], perplexity=True) == pytest.approx(math.exp(-3.0) - 1)


def _spec(*tolerances):
    claim = {"kind": "result", "check": "near", "gate": False, "scale_dependent": True, "tables": ["1"],
             "quantities": ["q"], "paper": ["v"], "testable": "run.settled", "testable_reason": "not settled"}
    return parse_spec({
        "schema": 2, "paper": {"id": "toy", "title": "Toy", "citation": "c", "source": "s"},
        "scales": {"smoke": {}, "full": {}}, "tables": {"1": {"title": "T1"}},
        "values": [{"id": "v", "value": 1.0, "unit": "x", "table": "1", "source": SOURCE}],
        "claims": [{**claim, "id": f"c{i}", "text": f"claim {i}", "tolerance": t} for i, t in enumerate(tolerances)],
    }, Path("toy.toml"))


def test_the_flags_bound_is_the_tolerance_of_the_claims_that_name_it():
    assert claims_bound(_spec(0.01, 0.01), "run.settled") == 0.01
    assert claims_bound(_spec(0.01), "other.flag") is None
    with pytest.raises(ValueError, match="different tolerances"):
        claims_bound(_spec(0.01, 0.03), "run.settled")


def test_settled_is_a_fall_at_most_the_bound():
    assert settled(0.004, 0.01) == 1.0 and settled(0.01, 0.01) == 1.0 and settled(-0.02, 0.01) == 1.0
    assert settled(0.2, 0.01) == 0.0
    assert settled(None, 0.01) is None and settled(0.004, None) is None


def test_fall_text_says_falls_or_rises_with_the_windows():
    assert fall_text("The loss", 0.1346) == "The loss falls 13.5% over the last 10% of the steps (the seeds' mean, against the 10% before)"
    assert fall_text("The loss", -0.0016).startswith("The loss rises 0.2% over the last 10%")
