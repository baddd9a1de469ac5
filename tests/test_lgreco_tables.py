"""L-GreCo's error/cost tables on real codecs, global top-k, and the per-layer policies.

Costs are checked against an independent ``len(codec.encode(g).to_bytes())``; TopK errors and
global top-k against numpy written here; PowerSGD's SVD-tail errors against ``numpy.linalg.svd``;
the policy's schedule, its DP input (the accumulated gradients) and the broadcast over two real
gloo ranks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gcbench.compressors.adaptive import (
    Accordion,
    AccordionPolicy,
    LayerwisePolicy,
    LGreCoPolicy,
    global_topk,
    lgreco,
    measure_overhead,
    measure_tables,
    power_iteration_errors,
    powersgd_ladder,
    qsgd_ladder,
    sketchml_ladder,
    svd_tail_errors,
    threelc_ladder,
    topk_ladder,
)
from gcbench.compressors.adaptive.ladders import Ladder
from gcbench.compressors.adaptive.tables import accumulate
from gcbench.compressors.errors import InvalidParameterError


def _grads(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low = torch.randn(24, 3, generator=g) @ torch.randn(3, 16, generator=g)  # nearly rank 3
    return {
        "w1": low + 0.01 * torch.randn(24, 16, generator=g),
        "b1": torch.randn(24, generator=g),
        "w2": torch.randn(10, 24, generator=g),
        "conv": torch.randn(8, 2, 3, 3, generator=g),
    }


def _raw_codec(ladder: Ladder, j: int):
    """The candidate codec built independently of Ladder.build (class + merged params)."""
    from gcbench.compressors.registry import entry

    e = entry(ladder.codec)
    return e.load()(**{**e.defaults, **ladder.base, ladder.param: ladder.values[j]})


@pytest.mark.parametrize(
    "ladder",
    [powersgd_ladder(2), qsgd_ladder(4), topk_ladder(0.05), threelc_ladder(), sketchml_ladder(16, steps=2)],
    ids=lambda l: l.codec,
)
def test_costs_are_real_serialized_bytes(ladder):
    grads = _grads()
    t = measure_tables(ladder, grads, error_method="codec")
    assert t.costs.shape == (4, len(ladder)) and t.keys == list(grads)
    for li, g in enumerate(grads.values()):
        for j in range(len(ladder)):
            codec = _raw_codec(ladder, j)
            assert t.costs[li, j] == len(codec.encode(g).to_bytes())
    assert (t.raw_bytes == [g.numel() * 4 for g in grads.values()]).all()


@pytest.mark.parametrize("method", ["sorted", "codec"])
def test_topk_errors_match_numpy(method):
    grads = _grads(1)
    lad = topk_ladder(0.05)
    t = measure_tables(lad, grads, error_method=method)
    assert t.methods == [method] * 4
    for li, g in enumerate(grads.values()):
        a = np.abs(g.numpy().reshape(-1).astype(np.float64))
        n = a.size
        for j, ratio in enumerate(lad.values):
            k = min(n, max(1, round(ratio * n)))
            tail = np.sort(a)[: n - k]  # everything but the k largest magnitudes
            assert t.errors[li, j] == pytest.approx(np.sqrt((tail**2).sum()), rel=1e-5, abs=1e-6)


def test_matrices_only_says_which_ladders_leave_vectors_whole():
    """The flag is the codecs' own behaviour: a vector's payload has the same length and decodes to
    the vector itself at the ladder's two ends exactly where the ladder says its parameter acts on
    matrices only (the header still names the parameter)."""
    vec = torch.randn(300, generator=torch.Generator().manual_seed(4))
    for lad in (powersgd_ladder(4), qsgd_ladder(4), topk_ladder(0.05), threelc_ladder(), sketchml_ladder(256)):
        codecs = [lad.build(j) for j in (0, len(lad) - 1)]
        payloads = [c.encode(vec) for c in codecs]
        whole = [torch.equal(c.decode(p), vec) for c, p in zip(codecs, payloads)]
        same_size = len(payloads[0].to_bytes()) == len(payloads[1].to_bytes())
        assert (all(whole) and same_size) is lad.matrices_only, lad.codec
    assert powersgd_ladder(4).matrices_only


def test_fixed_size_ladders_really_are_data_independent_and_cached():
    g = torch.Generator().manual_seed(9)
    shapes = [(24, 16), (24,), (8, 2, 3, 3)]
    for lad in (powersgd_ladder(2), qsgd_ladder(4), topk_ladder(0.05)):
        assert lad.fixed_size
        a = {str(i): torch.randn(s, generator=g) for i, s in enumerate(shapes)}
        b = {str(i): torch.randn(s, generator=g).pow(3) * (i + 1) for i, s in enumerate(shapes)}
        assert np.array_equal(
            measure_tables(lad, a, error_method="codec").costs, measure_tables(lad, b, error_method="codec").costs
        )
    assert not threelc_ladder().fixed_size and not sketchml_ladder().fixed_size
    assert not topk_ladder(0.05, method="sampled").fixed_size
    # the cache is filled by real encodes once, then reused (a planted value comes back)
    lad = topk_ladder(0.05)
    cache: dict = {}
    grads = _grads(5)
    first = measure_tables(lad, grads, cost_cache=cache)
    assert len(cache) == 4 * len(lad)
    key = ("topk", (), lad.values[0], (24, 16), torch.float32, "cpu")
    assert cache[key] == first.costs[0, 0]
    cache[key] = 123456789
    second = measure_tables(lad, grads, cost_cache=cache)
    assert second.costs[0, 0] == 123456789 and np.array_equal(second.errors, first.errors)
    cache3: dict = {}
    measure_tables(threelc_ladder(), grads, cost_cache=cache3)
    assert cache3 == {}  # data-dependent sizes are never cached


def test_errors_are_measured_without_error_feedback():
    # 3LC's registry entry wraps error feedback; the table must use the raw codec: measuring twice
    # gives the same errors (a residual would change the second measurement)
    lad = threelc_ladder()
    grads = _grads(2)
    a = measure_tables(lad, grads).errors
    b = measure_tables(lad, grads).errors
    assert np.array_equal(a, b)
    g = grads["w2"]
    from gcbench.compressors.codecs.threelc.codec import ThreeLC

    c = ThreeLC(sparsity=lad.values[4])
    assert a[2, 4] == pytest.approx(float(torch.linalg.vector_norm(c.roundtrip(g) - g)), rel=1e-6)


def test_cost_grads_price_another_tensor():
    lad = threelc_ladder()
    grads = _grads(3)
    sparse_step = {k: torch.where(v.abs() > 1.5, v, torch.zeros_like(v)) for k, v in grads.items()}
    t = measure_tables(lad, grads, cost_grads=sparse_step)
    t0 = measure_tables(lad, grads)
    assert np.array_equal(t.errors, t0.errors)
    assert (t.costs <= t0.costs).all() and (t.costs < t0.costs).any()  # zero runs shrink
    with pytest.raises(InvalidParameterError):
        measure_tables(lad, grads, cost_grads={"w1": grads["w1"]})


def test_powersgd_svd_tail_matches_numpy_and_power_iteration_is_close():
    m = _grads()["w1"]
    ranks = [1, 2, 3, 4, 16, 30]
    s = np.linalg.svd(m.double().numpy(), compute_uv=False)
    want = [np.sqrt((s[r:] ** 2).sum()) for r in ranks]
    got = svd_tail_errors(m, ranks)
    assert np.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert got[-1] == 0 and got[-2] == 0  # rank >= min(n, m)
    pw = power_iteration_errors(m, ranks, iters=5, generator=torch.Generator().manual_seed(0))
    assert (pw >= got - 1e-4).all()  # SVD is optimal
    assert np.allclose(pw[:4], got[:4], rtol=0.05, atol=1e-3)  # 5 steps: close to optimal (App. B.2)


def test_powersgd_tables_follow_the_codec_for_uncompressed_layers():
    lad = powersgd_ladder(4)
    grads = _grads()
    for method in ("svd", "power", "auto"):
        t = measure_tables(lad, grads, error_method=method)
        assert (t.errors[1] == 0).all()  # the bias vector travels uncompressed
        # codec payloads are what the table prices; a rank where PowerSGD sends raw has error 0
        for li, g in enumerate(grads.values()):
            for j in range(len(lad)):
                p = _raw_codec(lad, j).encode(g)
                assert t.costs[li, j] == p.nbytes
                if int(p.sections[0][2]) == 0:
                    assert t.errors[li, j] == 0
        assert t.errors[0, lad.index_of(3)] < 0.1 * t.errors[0, lad.index_of(2)]  # near rank 3
    assert measure_tables(lad, grads).methods == ["svd", "raw", "svd", "svd"]  # default "auto" (B.3)
    with pytest.raises(InvalidParameterError):
        measure_tables(qsgd_ladder(4), grads, error_method="svd")


def test_global_topk_matches_numpy_and_real_bytes():
    from gcbench.compressors.codecs.topk import TopK

    grads = _grads(4)
    for v in grads.values():  # every layer's first element is selected: layer boundaries matter
        v.view(-1)[0] = 100.0
    density = 0.07
    r = global_topk(grads, density)
    flat = np.concatenate([g.numpy().reshape(-1) for g in grads.values()])
    k = round(density * flat.size)
    owner = np.concatenate([np.full(g.numel(), i) for i, g in enumerate(grads.values())])
    top = np.argsort(-np.abs(flat), kind="stable")[:k]
    counts = np.bincount(owner[top], minlength=len(grads))
    assert r.counts.tolist() == counts.tolist() and r.counts.sum() == k
    for i, g in enumerate(grads.values()):
        codec = TopK(ratio=float(r.ratios[i]))
        assert r.bytes[i] == len(codec.encode(g).to_bytes())
        if counts[i] > 0:
            sel = np.zeros(g.numel(), dtype=bool)
            sel[top[owner[top] == i] - np.searchsorted(owner, i)] = True
            resid = g.numpy().reshape(-1)[~sel].astype(np.float64)
            assert r.errors[i] == pytest.approx(np.sqrt((resid**2).sum()), rel=1e-5)
    assert r.layer_params()["w1"] == {"ratio": float(r.ratios[0])}


def test_measured_overhead_for_table_1():
    grads = _grads()
    o, _tables, result = measure_overhead(powersgd_ladder(4), grads, step_time_s=0.05, every=100)
    assert o.tables_s > 0 and o.dp_s > 0
    assert 0 < o.fraction < 1 and o.error_fraction + o.dp_fraction == pytest.approx(o.fraction)
    assert result.cost <= result.reference_cost


# -- policies ---------------------------------------------------------------------------------------------


def _step_grads(step: int, rank: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    base = _grads(0)
    return {k: v + 0.3 * torch.randn(v.shape, generator=g) for k, v in base.items()}


def test_lgreco_policy_schedule_accumulation_and_decision():
    lad = powersgd_ladder(4)
    pol = LGreCoPolicy(lad, every=5, warmup=2, accumulate=3, rank=0)
    assert isinstance(pol, LayerwisePolicy)
    acc_steps = [s for s in range(20) if pol.accumulating(s)]
    due = [s for s in range(20) if pol.due(s)]
    assert acc_steps == [4, 5, 6, 9, 10, 11, 14, 15, 16, 19] and due == [7, 12, 17]
    decided = {}
    for s in range(13):
        out = pol.step(s, _step_grads(s))
        if out is not None:
            decided[s] = out
        assert pol.layer_params() == {k: lad.params(int(j)) for k, j in zip(pol.keys, pol.choice)}
    assert sorted(decided) == [7, 12]
    # the decision at 12 used the sum of steps 9, 10, 11 (no error feedback, no scaling)
    want = accumulate([_step_grads(s) for s in (9, 10, 11)])
    t = measure_tables(lad, want)
    r = lgreco(t.errors, t.costs, lad.reference_index)
    assert pol.choice.tolist() == r.choice.tolist()
    assert np.array_equal(pol.last_tables.errors, t.errors)
    assert decided[12] == {k: lad.params(int(j)) for k, j in zip(_grads(), r.choice)}
    assert pol.codec_for("w1").rank == lad.values[int(r.choice[0])]
    info = pol.decisions[-1]
    assert info["buffered_steps"] == 3 and info["bytes"] <= info["reference_bytes"]
    assert pol.overhead(step_time_s=0.01).fraction > 0


def test_policy_objectives_and_accordion_combination():
    lad = powersgd_ladder(8)
    grads = {k: v for k, v in _grads().items() if v.dim() > 1}
    with pytest.raises(InvalidParameterError):
        LGreCoPolicy(lad, objective="time")
    pol = LGreCoPolicy(lad, every=2, accumulate=1, objective="time", bucket_coefficients=[1.0, 50.0], rank=0)
    pol.set_buckets({0: ["w1", "w2"], 1: ["conv"]})
    pol.step(1, grads)
    pol.step(2, grads)
    t = pol.last_tables
    plain = lgreco(t.errors, t.costs, lad.reference_index)
    timed = lgreco(t.errors, t.costs * np.array([1.0, 1.0, 50.0])[:, None], lad.reference_index)
    assert pol.choice.tolist() == timed.choice.tolist()
    assert pol.last_result.cost == pytest.approx(timed.cost)
    assert plain.cost <= int(t.costs[np.arange(3), timed.choice].sum())  # bytes-optimal is the plain one
    # L-GreCo + Accordion: Accordion's per-layer choice is the reference that sets the budget
    combo = LGreCoPolicy(lad, every=2, accumulate=1, accordion=Accordion(low=6, high=4), rank=0)
    combo.step(1, grads)
    combo.step(2, grads)
    r = combo.last_result
    assert r.reference.tolist() == [lad.index_of(6)] * 3  # first period: critical -> low compression
    assert r.budget == pytest.approx(t.errors[:, lad.index_of(6)].sum()) and r.budget > 0
    with pytest.raises(InvalidParameterError):
        LGreCoPolicy(lad, accordion=Accordion(low=64, high=4))  # 64 is not on the ladder


def test_accordion_policy():
    lad = powersgd_ladder(8)
    pol = AccordionPolicy(lad, low=16, high=4, every=2, accumulate=1, rank=0)
    g = {"w": torch.ones(6, 6)}
    pol.step(1, g)
    assert pol.step(2, g) == {"w": {"rank": 16}}  # first period: critical
    pol.step(3, g)
    assert pol.step(4, g) == {"w": {"rank": 4}}  # unchanged norm: not critical
    pol.step(5, {"w": 3 * torch.ones(6, 6)})
    assert pol.step(6, g) == {"w": {"rank": 16}}  # norm tripled: critical


def _two_rank_policy(ctx):
    from gcbench.envs.adaptive import choice_broadcast
    from gcbench.envs.aggregator import Aggregator
    from gcbench.envs.collectives import TorchCollective
    from gcbench.envs.workers import CodecSpec, WorkerCodecs

    torch.manual_seed(0)
    pol = LGreCoPolicy(powersgd_ladder(4), every=4, accumulate=2, rank=ctx.rank)
    agg = Aggregator([WorkerCodecs(CodecSpec(name="powersgd"), rank=ctx.rank)], TorchCollective())
    decisions = []
    for s in range(9):
        out = pol.step(s, _step_grads(s, rank=ctx.rank), broadcast=choice_broadcast(agg, s))  # ranks see different gradients
        if out is not None:
            decisions.append((s, pol.choice.tolist()))
    return decisions, pol.layer_params()


@pytest.mark.distributed
def test_choice_is_broadcast_from_rank_0_over_gloo():
    from gcbench.envs.launch import launch

    (d0, p0), (d1, p1) = launch(_two_rank_policy, 2, timeout_s=60)
    assert [s for s, _ in d0] == [4, 8]
    assert d0 == d1 and p0 == p1
    # what rank 0 decided from its own accumulated gradients (steps 6, 7 for the decision at 8)
    lad = powersgd_ladder(4)
    t = measure_tables(lad, accumulate([_step_grads(s, rank=0) for s in (6, 7)]))
    assert d0[-1][1] == lgreco(t.errors, t.costs, lad.reference_index).choice.tolist()
