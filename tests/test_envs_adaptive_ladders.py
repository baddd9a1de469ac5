"""Adaptive policies: the TopK-sampled ladder sits around the spec's own ratio, and a decision that
is skipped because a layer has no accumulated gradient says so in its ``info``."""

from __future__ import annotations

import pytest
import torch
from gcbench.compressors.adaptive import AccordionPolicy, LGreCoPolicy
from gcbench.compressors.adaptive.ladders import ladder_around, powersgd_ladder
from gcbench.envs.adaptive import make_policy
from gcbench.envs.workers import CodecSpec


@pytest.mark.parametrize("ratio", [0.05, 0.002, 0.01])
def test_topk_sampled_ladder_is_around_the_specs_own_ratio(ratio):
    ladder = ladder_around("topk-sampled", {"ratio": ratio})
    assert ladder.default == ratio and ladder.values[ladder.reference_index] == ratio
    assert ladder.values == ladder_around("topk", {"ratio": ratio}).values


@pytest.mark.parametrize("kind", ["lgreco", "accordion", "lgreco+accordion"])
def test_topk_sampled_works_with_every_adaptive_policy_at_another_ratio(kind):
    policy = make_policy(kind, CodecSpec(name="topk-sampled", params={"ratio": 0.05}), every=10)
    assert policy.ladder.default == 0.05
    assert policy.ladder.params(policy.ladder.reference_index)["ratio"] == 0.05


def _grads(g_b: bool):
    torch.manual_seed(0)
    out = {"a": torch.randn(16, 8), "b": torch.randn(8, 4)}
    if not g_b:
        out["b"] = None
    return out


@pytest.mark.parametrize("make", [
    lambda: LGreCoPolicy(powersgd_ladder(2), every=3, accumulate=2, layers=["a", "b"]),
    lambda: AccordionPolicy(powersgd_ladder(2), 4, 1, every=3, accumulate=2, layers=["a", "b"]),
])
def test_a_decision_skipped_for_a_layer_without_gradient_says_why(make):
    policy = make()
    before = policy.choice.copy()
    for step in range(1, 4):  # steps 1 and 2 accumulate, step 3 decides
        policy.step(step, _grads(False))
    d = policy.decisions[-1]
    assert "b" in d["skipped"] and "1 layer(s)" in d["skipped"]
    assert (policy.choice == before).all()
    for step in range(4, 7):  # with every gradient present the next decision runs
        policy.step(step, _grads(True))
    assert "skipped" not in policy.decisions[-1]


def test_a_decision_with_nothing_accumulated_says_so():
    policy = LGreCoPolicy(powersgd_ladder(2), every=3, accumulate=2, layers=["a", "b"])
    policy.decide()
    assert policy.decisions[-1]["skipped"] == "nothing accumulated"
