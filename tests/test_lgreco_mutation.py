"""A broken L-GreCo turns a counted claim red, on real gloo ranks.

Every compression claim (lgreco-over-uniform, gain-at-equal-error-qsgd/-topk) passes for a method that
ignores the error budget and always sends the most compressed setting, and the DP's own dp-within-budget,
read from its error tables, passes for a DP fed wrong tables. lgreco-within-budget measures the applied
plan's error apart from the tables (reproductions/lgreco/budget.py). Here the method is broken inside the
ranks in two ways: (a) every error table all zeros, so every choice is within the (zero) budget and the
DP takes the cheapest setting everywhere; (b) the DP run with a budget a trillion times the uniform
setting's, so it ignores the budget. Both compress more than the uniform setting, and (b) keeps
dp-within-budget green; lgreco-within-budget, judged by the spec's own check on the cells' decision
rows (the reproduction's derivation), goes from green to red.

The runs: the ungated PowerSGD claim on the micro-lm preset (2 gloo ranks, a 2-layer d_model 32 LM,
PowerSGD rank 4 in [1, 8]), 8 steps with one decision at step 5; the gated QSGD and TopK claims on the
micro scale's own cells, computed by the workload with the ranks' function swapped for a broken one.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import numpy as np
import pytest
from gcbench.envs.launch import launch
from gcbench.reproductions.lgreco import load
from gcbench.reproductions.lgreco.budget import budget_quantities
from gcbench.reproductions.lgreco.ranks import rank_train

from claim_verdicts import verdicts


def zeroed_tables_rank_train(ctx: Any, *args: Any) -> dict[str, Any]:
    """:func:`rank_train` with L-GreCo's error tables all zeros (inside this rank's process)."""
    import gcbench.compressors.adaptive.policy as policy

    real = policy.measure_tables

    def zero_errors(*a: Any, **k: Any):
        tables = real(*a, **k)
        return dataclasses.replace(tables, errors=np.zeros_like(tables.errors))

    policy.measure_tables = zero_errors
    return rank_train(ctx, *args)


def budget_ignored_rank_train(ctx: Any, *args: Any) -> dict[str, Any]:
    """:func:`rank_train` with L-GreCo's DP run at a budget 1e12 times the uniform setting's error."""
    import gcbench.compressors.adaptive.policy as policy

    real = policy.lgreco
    policy.lgreco = lambda e, c, ref, **k: real(e, c, ref, **{**k, "alpha": 1e12})
    return rank_train(ctx, *args)


def method_and_mutants(args: tuple[Any, ...]) -> dict[str, dict[str, Any]]:
    """Rank 0's L-GreCo run on 2 gloo ranks for the method (``ok``) and both broken DPs (``zeroed``,
    ``ignored``), each from ``rank_train``'s ``args``."""
    return {name: launch(fn, 2, args, timeout_s=120)[0]["lgreco"]
            for name, fn in (("ok", rank_train), ("zeroed", zeroed_tables_rank_train), ("ignored", budget_ignored_rank_train))}


def _config() -> dict[str, Any]:
    p = load().scales["micro-lm"]
    cfg = {k: p[k] for k in ("model", "tlm", "steps", "every", "warmup", "batch", "lr", "momentum", "bucket_cap_mb",
                             "workers", "dataset", "seed")}
    return {**cfg, "spans": {"lgreco": p["codec_spans"]["powersgd"]["lgreco"]}}


def _claim_quantities(run: dict[str, Any]) -> dict[str, float | None]:
    ratio = max(d["error"] / d["budget"] for d in run["decisions"]) if run["decisions"][0]["budget"] > 0 else None
    return {**budget_quantities("powersgd", [run]), "dp.max_error_over_budget": ratio, "dp.one": 1.0}


@pytest.mark.slow
def test_an_lgreco_that_ignores_the_error_budget_fails_the_budget_claim():
    spec = load()
    cfg = _config()
    args = ("powersgd", {"rank": 4}, True, ["lgreco"], cfg)
    runs = method_and_mutants(args)
    for name, run in runs.items():
        assert [d["step"] for d in run["applied"]] == [5], name
        assert all(d["bytes"] <= d["reference_bytes"] for d in run["decisions"]), name  # no one sends more than uniform
    for name in ("zeroed", "ignored"):  # the mutation took: every layer that compresses at the ladder's lowest rank
        assert {v["rank"] for v in runs[name]["applied"][-1]["layer_params"].values()} == {1}, name
        assert runs[name]["decisions"][0]["bytes"] < runs["ok"]["decisions"][0]["bytes"], name
    q = {name: _claim_quantities(run) for name, run in runs.items()}
    assert verdicts(spec, "lgreco-within-budget", q["ok"], scale="micro-lm") == ["reproduced"]
    assert verdicts(spec, "lgreco-within-budget", q["zeroed"], scale="micro-lm") == ["differs"]
    assert verdicts(spec, "lgreco-within-budget", q["ignored"], scale="micro-lm") == ["differs"]
    # the DP's own check, read from its tables, cannot tell the budget-ignoring DP from the method
    assert verdicts(spec, "dp-within-budget", q["ignored"], scale="micro-lm") == ["reproduced"]


def _gate_goes_red(codec: str, tmp_path, monkeypatch) -> None:
    """The gated ``lgreco-within-budget-<codec>``: green for the method, red for both broken DPs. Each run
    is the workload's own: the micro scale's cell ``train-<codec>`` from :meth:`LGreCoWorkload.plan`,
    computed by :meth:`LGreCoWorkload.compute` (its gloo ranks, its config) with the ranks' function
    swapped for a broken one, and judged by the spec's check on the quantities the workload derives
    from the cell (:func:`budget_quantities`, as :meth:`LGreCoWorkload.derive` calls it)."""
    from gcbench.reproductions.framework.runner import RunContext
    from gcbench.reproductions.framework.tracking import Tracker

    workload_module = importlib.import_module("gcbench.reproductions.lgreco.workload")  # the package exports a function of this name
    wl = workload_module.workload()
    spec = wl.spec
    claim_id = f"lgreco-within-budget-{codec}"
    assert next(c for c in spec.claims if c.id == claim_id).gate
    ctx = RunContext(spec, "micro", spec.scales["micro"], list(spec.tables), tmp_path,
                     Tracker(tmp_path, enabled=False), None, {})
    cell = next(c for c in wl.plan(ctx, {}) if c.name == f"train-{codec}")
    runs = {}
    for name, fn in (("ok", rank_train), ("zeroed", zeroed_tables_rank_train), ("ignored", budget_ignored_rank_train)):
        with monkeypatch.context() as m:
            m.setattr(workload_module, "rank_train", fn)
            runs[name] = wl.compute(cell, ctx)["lgreco"]
    for name in ("zeroed", "ignored"):  # the mutation took: the broken DP sends less than the method's plan
        assert runs[name]["decisions"][0]["bytes"] < runs["ok"]["decisions"][0]["bytes"], name
    q = {name: budget_quantities(codec, [run]) for name, run in runs.items()}
    assert verdicts(spec, claim_id, q["ok"], scale="micro") == ["reproduced"]
    assert verdicts(spec, claim_id, q["zeroed"], scale="micro") == ["differs"]
    assert verdicts(spec, claim_id, q["ignored"], scale="micro") == ["differs"]


@pytest.mark.slow
def test_gate_mutation_lgreco_lgreco_within_budget_qsgd(tmp_path, monkeypatch):
    _gate_goes_red("qsgd", tmp_path, monkeypatch)


@pytest.mark.slow
def test_gate_mutation_lgreco_lgreco_within_budget_topk(tmp_path, monkeypatch):
    _gate_goes_red("topk", tmp_path, monkeypatch)
