"""The full scale's BLEU spread must not grow with a failing method: a Sketched-SGD whose translations
collapse (BLEU near 0, far below vanilla) differs from the 'comparable' band, and the same spread rule
leaves a close, working pair untestable. Built end to end from the translation cells, as the run derives
it, and judged at the full scale."""

from __future__ import annotations

import importlib
import math

import pytest
from claim_verdicts import verdicts
from gcbench.reproductions.framework.claims import DIFFERS, NOT_AT_SCALE, REPRODUCED
from gcbench.reproductions.sketched_sgd import load
from gcbench.reproductions.sketched_sgd.workload import derive_translation

CLOSE = ("bleu-sketched20-close", "bleu-sketched40-close")


def _cell(method: str, bleu: float, ci: tuple[float, float]) -> dict:
    kind = {"vanilla": "vanilla", "topk": "true_topk"}.get(method, "sketched")
    sparse = kind != "vanilla"
    return {"model": "transformer", "method": {"name": method, "kind": kind}, "bleu": bleu, "bleu_ci": list(ci),
            "test_loss": 2.0, "parameters": 1000, "compressed_parameters": 900 if sparse else 1000,
            "dense_parameters": 100 if sparse else 0, "k": 1 if sparse else None,
            "traffic": {"last_step_bytes_per_worker": 4000.0}, "diverged_at": None, "losses": [3.0] * 100}


def _measured(bleus: dict[str, tuple[float, tuple[float, float]]]) -> dict:
    out = derive_translation({f"t1-transformer-{m}": _cell(m, b, ci) for m, (b, ci) in bleus.items()})
    out.update({f"t1.transformer.{m}.bleu_mean": b for m, (b, _) in bleus.items()})
    out["t1.transformer.sparse_caught_up"] = 1.0  # the full scale's 20,000 steps: ~22 updates per coordinate
    return out


#: vanilla and top-k as a working run of the full scale might end, +-1 BLEU point of held-out spread
WORKING = {"vanilla": (25.0, (24.0, 26.0)), "topk": (25.4, (24.4, 26.4))}
#: Sketched-SGD broken: both ratios' translations collapse (BLEU about 0.05, intervals wider than it)
COLLAPSED = {**WORKING, "sketched40": (0.04, (0.0, 0.25)), "sketched20": (0.05, (0.0, 0.3))}


def test_a_collapsed_sketched_sgd_differs_from_comparable_at_full():
    spec = load()
    measured = _measured(COLLAPSED)
    # the ratio's spread is the collapsed method's 0.15 BLEU points over vanilla's 25: 0.6%, against a gap of 99.8%
    assert measured["t1.transformer.sketched20.bleu_ratio_noise"] == pytest.approx(math.hypot(0.15, 0.002 * 1.0) / 25.0)
    for cid in CLOSE:
        assert verdicts(spec, cid, measured, scale="full") == [DIFFERS], cid


def test_the_spread_divided_by_a_methods_own_bleu_hid_the_collapse(monkeypatch):
    """Mutation: the spread of each method taken relative to its own BLEU (h / BLEU), the rule the full
    scale's spread had before. The collapsed method's 0.15 / 0.05 = 300% then swamps every comparison,
    and the broken method reads as untestable instead of differing."""
    wl = importlib.import_module("gcbench.reproductions.sketched_sgd.workload")

    def own_relative(method, vanilla):
        rel = [(hi - lo) / 2 / b if b > 0 else math.inf for b, lo, hi in (method, vanilla)]
        return math.hypot(*rel)

    monkeypatch.setattr(wl, "bleu_ratio_noise", own_relative)
    spec = load()
    measured = _measured(COLLAPSED)
    for cid in CLOSE:
        assert verdicts(spec, cid, measured, scale="full") == [NOT_AT_SCALE], cid


def test_the_same_rule_leaves_a_close_working_pair_untestable_and_a_clear_one_judged():
    spec = load()
    # 3.2% above vanilla: 0.9% from the 2.3% edge, within the ratio's spread of about 5.7%
    near_edge = _measured({**WORKING, "sketched40": (25.6, (24.6, 26.6)), "sketched20": (25.8, (24.8, 26.8))})
    assert verdicts(spec, "bleu-sketched20-close", near_edge, scale="full") == [NOT_AT_SCALE]
    # a tight held-out spread (+-0.05 points): 0.4% above vanilla reproduces, 10% below differs
    tight = {"vanilla": (25.0, (24.95, 25.05)), "topk": (25.1, (25.05, 25.15)),
             "sketched40": (22.5, (22.45, 22.55)), "sketched20": (25.1, (25.05, 25.15))}
    measured = _measured(tight)
    assert verdicts(spec, "bleu-sketched20-close", measured, scale="full") == [REPRODUCED]
    assert verdicts(spec, "bleu-sketched40-close", measured, scale="full") == [DIFFERS]
    # below the full scale the label is not at this scale whatever the values
    for cid in CLOSE:
        assert verdicts(spec, cid, _measured(COLLAPSED), scale="claims") == [NOT_AT_SCALE], cid
        assert verdicts(spec, cid, measured, scale="parity") == [NOT_AT_SCALE], cid


def test_a_collapsed_method_beside_working_ones_does_not_widen_the_orders_spread():
    """One collapsed method: its pairs' spread is its half-width over the working method's BLEU, so the
    orders' spread stays that of the working pairs, and its reversal against vanilla differs."""
    spec = load()
    one = _measured({**WORKING, "sketched40": (25.6, (24.6, 26.6)), "sketched20": (0.05, (0.0, 0.3))})
    assert one["t1.transformer.bleu_noise"] == pytest.approx(math.hypot(1.0, 1.0) / 25.4)
    assert verdicts(spec, "bleu-order-transformer", one, scale="full") == [DIFFERS]
