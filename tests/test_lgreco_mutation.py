"""A broken L-GreCo turns a counted claim red.

Every compression claim (lgreco-over-uniform, gain-at-equal-error-qsgd/-topk) passes for a method that
ignores the error budget and always sends the most compressed setting: the DP's budget is what ties
the compression to quality, and only the perplexity-parity claims measure that tie. Here the
method is broken inside the ranks (every error table all zeros, so every choice is within the
budget and the DP takes the cheapest setting everywhere) and ppl-parity-uniform, judged by the
spec's own check, goes from green to red.

The run: the micro-lm preset (2 gloo ranks, a 2-layer d_model 32 LM, PowerSGD rank 4 in [1, 8]) with
80 steps, a decision every 10 after a 2-step warm-up and lr 0.005: long enough that the most
compressed rank costs perplexity, short enough for a unit test; one seed, so the unbroken L-GreCo's
perplexity is within the claim's 1% of the uniform setting's here, which a test fixture may choose
(a reproduction's configuration may not).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from gcbench.envs.launch import launch
from gcbench.reproductions.lgreco import load
from gcbench.reproductions.lgreco.ranks import rank_train

from claim_verdicts import verdicts

STEPS, EVERY, WARMUP, LR = 80, 10, 2, 0.005


def broken_rank_train(ctx: Any, *args: Any) -> dict[str, Any]:
    """:func:`rank_train` with L-GreCo's error tables all zeros (inside this rank's process)."""
    import gcbench.compressors.adaptive.policy as policy

    real = policy.measure_tables

    def zero_errors(*a: Any, **k: Any):
        tables = real(*a, **k)
        return dataclasses.replace(tables, errors=np.zeros_like(tables.errors))

    policy.measure_tables = zero_errors
    return rank_train(ctx, *args)


def _config() -> dict[str, Any]:
    p = load().scales["micro-lm"]
    cfg = {k: p[k] for k in ("model", "tlm", "batch", "momentum", "bucket_cap_mb", "workers", "dataset", "seed")}
    return {**cfg, "steps": STEPS, "every": EVERY, "warmup": WARMUP, "lr": LR,
            "spans": {"lgreco": p["codec_spans"]["powersgd"]["lgreco"]}}


@pytest.mark.slow
def test_an_lgreco_that_ignores_the_error_budget_fails_perplexity_parity():
    spec = load()
    cfg = _config()
    args = ("powersgd", {"rank": 4}, True)
    ok = launch(rank_train, 2, (*args, ["uniform", "lgreco"], cfg), timeout_s=120)[0]
    broken = launch(broken_rank_train, 2, (*args, ["lgreco"], cfg), timeout_s=120)[0]["lgreco"]
    # the mutation took: every layer at the ladder's most compressed rank, every decision within its (zero) budget
    assert broken["applied"] and {v["rank"] for v in broken["applied"][-1]["layer_params"].values()} == {1}
    assert all(d["error"] <= d["budget"] for d in broken["decisions"])
    uniform = ok["uniform"]["eval"]["test_perplexity"]
    good = ok["lgreco"]["eval"]["test_perplexity"]
    bad = broken["eval"]["test_perplexity"]
    assert bad > uniform and bad > good
    # the counted claim: green for the method, red for the broken one (the spec's check, at its scale)
    green, red = verdicts(spec, "ppl-parity-uniform", {"ppl.powersgd.lgreco": good, "ppl.powersgd.uniform": uniform},
                          {"ppl.powersgd.lgreco": bad})
    assert green in ("reproduced", "within tolerance") and red == "differs", (uniform, good, bad)
