"""L-GreCo's error budget measured apart from the DP (reproductions/lgreco/budget.py): the re-measured errors
equal the tables' where both are exact, and a broken method (error tables all zeros, or a DP that ignores the
budget) turns the lgreco-within-budget claims red while the DP's own dp-within-budget stays green."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from gcbench.envs.workers import CodecSpec
from gcbench.reproductions.lgreco import load
from gcbench.reproductions.lgreco.budget import CHOSEN, POWER, UNIFORM, CheckedLGreCoPolicy, budget_excess, layer_errors
from gcbench.reproductions.lgreco.ranks import build_policy, decision_rows

from claim_verdicts import verdicts

SHAPES = {"conv.weight": (16, 8, 3, 3), "conv.bias": (16,), "fc.weight": (40, 72), "out.weight": (10, 40), "out.bias": (10,)}
CODECS = {"powersgd": {"rank": 4}, "qsgd": {"levels": 7}, "topk": {"ratio": 0.01}}
CLAIM = {"powersgd": "lgreco-within-budget", "qsgd": "lgreco-within-budget-qsgd", "topk": "lgreco-within-budget-topk"}


def _decide(codec: str) -> CheckedLGreCoPolicy:
    """One L-GreCo decision on three steps of gradients whose layers differ in scale, then the check."""
    gen = torch.Generator().manual_seed(0)
    policy = build_policy("lgreco", CodecSpec(name=codec, params=CODECS[codec]), every=2, warmup=0, layers=list(SHAPES), rank=0)
    assert isinstance(policy, CheckedLGreCoPolicy)
    for step in range(3):
        policy.step(step, {k: torch.randn(s, generator=gen) * (1 + 3 * i) for i, (k, s) in enumerate(SHAPES.items())})
    policy.check()
    return policy


def _zero_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    import gcbench.compressors.adaptive.policy as policy

    real = policy.measure_tables

    def zero_errors(*a, **k):
        tables = real(*a, **k)
        return dataclasses.replace(tables, errors=np.zeros_like(tables.errors))

    monkeypatch.setattr(policy, "measure_tables", zero_errors)


def _ignore_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import gcbench.compressors.adaptive.policy as policy

    real = policy.lgreco
    monkeypatch.setattr(policy, "lgreco", lambda e, c, ref, **k: real(e, c, ref, **{**k, "alpha": 1e12}))


@pytest.mark.parametrize("codec", list(CODECS))
def test_the_re_measured_errors_equal_the_tables_where_both_are_exact(codec):
    policy = _decide(codec)
    [d] = decision_rows(policy)
    # the tables' summed errors of the chosen plan and of the uniform setting (the budget), float32 against float64
    assert d[CHOSEN] == pytest.approx(d["error"], rel=1e-6) and d[UNIFORM] == pytest.approx(d["budget"], rel=1e-6)
    assert d[POWER] == 0 and not policy.kept  # the gradients are let go after the check
    excess, exact = budget_excess([{"decisions": [d]}])
    assert exact == 1.0 and excess <= 1e-4 and excess == pytest.approx(d[CHOSEN] / d[UNIFORM] - 1)
    assert d["bytes"] < d["reference_bytes"]  # a real gain, within the budget
    assert verdicts(load(), CLAIM[codec], {f"budget.{codec}.excess": excess, f"budget.{codec}.tables_exact": exact},
                    scale="micro") == ["reproduced"]


def test_each_codecs_metric_is_the_papers():
    ladder = build_policy("lgreco", CodecSpec(name="powersgd", params={"rank": 4}), every=2, warmup=0, layers=["w"]).ladder
    m = torch.randn(30, 20, dtype=torch.float64)
    s = torch.linalg.svdvals(m)
    j = ladder.values.index(3)
    assert layer_errors(ladder, m, [j])[j] == pytest.approx(float(torch.sqrt((s[3:] ** 2).sum())), rel=1e-10)
    assert layer_errors(ladder, torch.randn(7), [j]) == {j: 0.0}  # a vector is sent uncompressed
    topk = build_policy("lgreco", CodecSpec(name="topk", params={"ratio": 0.01}), every=2, warmup=0, layers=["w"]).ladder
    x = torch.arange(1.0, 1001.0)  # 1% of 1,000: the 10 largest are kept
    j = topk.values.index(0.01)
    assert layer_errors(topk, x, [j])[j] == pytest.approx(float(torch.linalg.vector_norm(x[:990])))


@pytest.mark.parametrize("break_it", [_zero_tables, _ignore_budget], ids=["zeroed-tables", "dp-ignores-budget"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_a_broken_lgreco_passes_the_dps_own_check_and_fails_the_budget_claim(codec, break_it, monkeypatch):
    break_it(monkeypatch)
    [d] = decision_rows(_decide(codec))
    assert d["error"] <= d["budget"] and d["bytes"] < d["reference_bytes"]  # the DP's tables say all is well
    excess, exact = budget_excess([{"decisions": [d]}])
    assert excess > 0.01, excess
    spec = load()
    q = {f"budget.{codec}.excess": excess, f"budget.{codec}.tables_exact": exact}
    assert verdicts(spec, CLAIM[codec], q, scale="micro") == ["differs"]
    if d["budget"] > 0:  # the DP's own consistency claim, read from its tables, holds for the broken method
        assert verdicts(spec, "dp-within-budget", {"dp.max_error_over_budget": d["error"] / d["budget"], "dp.one": 1.0},
                        scale="micro") == ["reproduced"]


def test_budget_excess_reads_the_worst_decision_and_the_power_iteration_flag():
    row = {CHOSEN: 9.0, UNIFORM: 10.0, POWER: 0}
    assert budget_excess([{"decisions": [row]}, {"decisions": [{**row, CHOSEN: 10.5}]}]) == (pytest.approx(0.05), 1.0)
    assert budget_excess([{"decisions": [row, {**row, POWER: 2}]}])[1] == 0.0
    assert budget_excess([{"decisions": [{CHOSEN: 0.0, UNIFORM: 0.0}]}]) == (0.0, 1.0)
    assert budget_excess([{"decisions": [{CHOSEN: 1.0, UNIFORM: 0.0}]}])[0] == math.inf
    assert budget_excess([{"decisions": [{"budget": 1.0}]}, {"decisions": []}]) == (None, None)
    spec = load()
    q = {"budget.powersgd.excess": 0.0, "budget.powersgd.tables_exact": 1.0}
    assert verdicts(spec, "lgreco-within-budget", q, {"budget.powersgd.excess": 2e-4},
                    {"budget.powersgd.excess": 2e-4, "budget.powersgd.tables_exact": 0.0}) == [
        "reproduced", "differs", "not at this scale"]


def test_only_lgreco_is_checked_and_the_choice_is_the_parents():
    spec = CodecSpec(name="powersgd", params={"rank": 4})
    assert not isinstance(build_policy("lgreco+accordion", spec, every=2, warmup=0, layers=["w"]), CheckedLGreCoPolicy)
    from gcbench.envs.adaptive import make_policy

    gen = torch.Generator().manual_seed(1)
    grads = [{k: torch.randn(s, generator=gen) * (1 + 3 * i) for i, (k, s) in enumerate(SHAPES.items())} for _ in range(3)]
    plain = make_policy("lgreco", spec, every=2, warmup=0, layers=list(SHAPES), rank=0)
    checked = build_policy("lgreco", spec, every=2, warmup=0, layers=list(SHAPES), rank=0)
    for step, g in enumerate(grads):
        plain.step(step, g)
        checked.step(step, g)
    assert np.array_equal(plain.decisions[0]["choice"], checked.decisions[0]["choice"])
    with pytest.raises(ValueError):
        CheckedLGreCoPolicy(checked.ladder, accordion=object())
