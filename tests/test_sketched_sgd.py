"""Sketched-SGD's two-round protocol (compressors/methods/sketched_sgd.py).

The protocol is checked against an independent NumPy implementation of what it must compute when
the sketch finds the candidates: true global top-k SGD with momentum, error accumulation and
momentum stopping (the authors' ``trueTopk`` reference). Gradients are small integers and
lr/momentum powers of two, so float32 arithmetic is exact and the books can be checked with ``==``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcbench.compressors import (
    InvalidParameterError,
    NonFiniteGradientError,
    StateError,
)
from gcbench.compressors.codecs.countsketch.codec import CountSketchCodec
from gcbench.compressors.codecs.identity import Identity
from gcbench.compressors.methods.sketched_sgd import (
    SketchedSGDWorker,
    run_sketched_sgd_step,
    select_candidates,
    select_topk,
    with_sections,
)

W, D, K, PK = 4, 10_000, 20, 4


def _workers(**kw) -> list[SketchedSGDWorker]:
    params = dict(rows=5, columns=1000, seed=3)
    params.update(kw)
    return [SketchedSGDWorker(**params) for _ in range(W)]


def _grads(step: int, *, medium: int = 40) -> list[torch.Tensor]:
    """Noise in {-1, 1} on 10% of the coordinates of every worker, plus ``medium`` coordinates whose
    worker-sum has distinct magnitudes in [30, 70) on a 1/64 grid (split evenly over the workers,
    so every share and sum is exact in float32). The top-K of the sum is a ranking the sketch's
    estimates (error ~1-3) blur and the exact second round restores."""
    g = torch.Generator().manual_seed(1000 + step)
    grads = [
        (torch.randint(0, 2, (D,), generator=g).float() * 2 - 1) * (torch.rand(D, generator=g) < 0.1) for _ in range(W)
    ]
    where = torch.randperm(D, generator=g)[:medium]
    sign = torch.randint(0, 2, (medium,), generator=g).float() * 2 - 1
    total = (30 * 64 + torch.randperm(40 * 64, generator=g)[:medium]).float() / 64 * sign
    for w in range(W):
        grads[w][where] = total / W
    return grads


class NaiveTrueTopK:
    """NumPy float64: u = rho u + g; v += lr u; apply the top-k of sum_w v; zero v, u there."""

    def __init__(self, rho: float, lr: float) -> None:
        self.rho, self.lr = rho, lr
        self.u = np.zeros((W, D))
        self.v = np.zeros((W, D))

    def step(self, grads: list[torch.Tensor], k: int) -> tuple[np.ndarray, np.ndarray]:
        for w in range(W):
            self.u[w] = self.rho * self.u[w] + grads[w].double().numpy()
            self.v[w] += self.lr * self.u[w]
        total = self.v.sum(0)
        order = np.argsort(-np.abs(total), kind="stable")
        mags = np.abs(total[order])
        assert mags[k - 1] > mags[k], "the test's top-k must be unambiguous"
        top = np.sort(order[:k])
        values = total[top]
        self.v_before = self.v.astype(np.float32)  # exact: the values are on a coarse dyadic grid
        self.v[:, top] = 0
        self.u[:, top] = 0
        return top, values


def test_two_rounds_apply_the_true_global_topk_and_keep_exact_books():
    workers = _workers()
    grads = _grads(0)
    before = sum(g.double() for g in grads)  # lr = 1, v starts at 0
    res = run_sketched_sgd_step(workers, grads, K, PK)
    true_top = torch.topk(before.abs(), K).indices.sort().values
    assert torch.equal(res.indices, true_top)
    assert torch.equal(res.values.double(), before[true_top])
    assert bool(torch.isin(true_top, res.candidates).all()) and res.candidates.numel() == PK * K
    # line 13 bookkeeping: sum_w v_w (after apply) + update == sum_w v_w (before) == sum of inputs
    after = sum(w.accumulated().double() for w in workers)
    assert torch.equal(after + res.update.double(), before)
    assert bool((res.update[true_top] != 0).all()) and int(torch.count_nonzero(res.update)) == K


@pytest.mark.parametrize("rho, lr", [(0.0, 1.0), (0.5, 0.5)])
def test_several_steps_equal_naive_true_topk_sgd_with_momentum(rho, lr):
    workers = _workers(momentum=rho, lr=lr)
    naive = NaiveTrueTopK(rho, lr)
    total_applied = np.zeros(D)
    missed_without_round2 = 0
    for step in range(4):
        grads = _grads(step)
        top, values = naive.step(grads, K)
        # the estimates alone (the top K of the summed sketch of the same v's) miss some: round 2 matters
        codec = workers[0].codec
        est_only = select_candidates(codec.combine([codec.encode(torch.from_numpy(v)) for v in naive.v_before]), K)
        missed_without_round2 += len(set(top.tolist()) - set(est_only.tolist()))
        res = run_sketched_sgd_step(workers, grads, K, PK)
        assert res.indices.tolist() == top.tolist(), f"step {step}"
        np.testing.assert_array_equal(res.values.double().numpy(), values)
        for w in range(W):
            np.testing.assert_array_equal(workers[w].accumulated().double().numpy(), naive.v[w])
        total_applied += res.update.double().numpy()
    assert missed_without_round2 > 0
    if rho == 0:  # without momentum the inputs are lr * g: everything applied or still in v
        inputs = sum(lr * sum(g.double() for g in _grads(s)) for s in range(4)).numpy()
        v_now = sum(w.accumulated().double() for w in workers).numpy()
        np.testing.assert_array_equal(total_applied + v_now, inputs)


def test_candidates_from_an_all_reduced_table_equal_combine():
    workers = _workers()
    grads = _grads(1)
    payloads = [w.round1(g) for w, g in zip(workers, grads)]
    table = torch.stack([p.sections[0] for p in payloads]).sum(0)  # what all_reduce leaves everywhere
    a = select_candidates(with_sections(payloads[0], (table,)), PK * K)
    b = select_candidates(workers[0].codec.combine(payloads), PK * K)
    assert torch.equal(a, b) and torch.equal(a, a.sort().values)
    vals = [w.round2(a) for w in workers]
    summed = torch.stack([p.sections[0] for p in vals]).sum(0)
    i1, v1 = select_topk(summed, a, K)
    i2, v2 = select_topk(Identity().combine(vals), a, K)
    assert torch.equal(i1, i2) and torch.equal(v1, v2)


def test_round_payloads_are_real_bytes():
    workers = _workers()
    res = run_sketched_sgd_step(workers, _grads(2), K, PK)
    codec = CountSketchCodec(rows=5, columns=1000, seed=3)
    sketch_bytes = codec.encode(torch.zeros(D)).nbytes
    assert res.round1_nbytes == [sketch_bytes] * W
    assert sketch_bytes >= 5 * 1000 * 4
    values_bytes = Identity().encode(torch.zeros(PK * K)).nbytes
    assert res.round2_nbytes == [values_bytes] * W
    assert values_bytes >= PK * K * 4
    # the payloads survive the wire
    p = workers[0].round1(_grads(3)[0])
    assert len(p.to_bytes()) == p.nbytes


def test_select_topk_against_a_sort():
    g = torch.Generator().manual_seed(5)
    cand = torch.randperm(1000, generator=g)[:50].sort().values
    vals = torch.randn(50, generator=g)
    idx, out = select_topk(vals, cand, 7)
    order = np.argsort(-np.abs(vals.numpy()))[:7]
    assert idx.tolist() == sorted(cand[order].tolist())
    assert torch.equal(out, vals[torch.searchsorted(cand, idx)])
    with pytest.raises(InvalidParameterError):
        select_topk(vals[:-1], cand, 7)


def test_protocol_order_and_state_errors():
    w = SketchedSGDWorker(rows=3, columns=50)
    g = torch.randn(200)
    with pytest.raises(StateError):
        w.round2(torch.tensor([1, 2]))
    w.round1(g, key="a")
    with pytest.raises(StateError):
        w.round1(g, key="a")
    with pytest.raises(StateError):
        w.apply(torch.tensor([1]), key="a")
    with pytest.raises(InvalidParameterError):
        w.round2(torch.tensor([200]), key="a")
    w.round2(torch.tensor([1, 2, 3]), key="a")
    with pytest.raises(InvalidParameterError):
        w.apply(torch.tensor([4]), key="a")  # not a candidate
    w.apply(torch.tensor([2]), key="a")
    state = w.state_dict()
    bad = g.clone()
    bad[7] = float("nan")
    with pytest.raises(NonFiniteGradientError):
        w.round1(bad, key="a")
    assert all(torch.equal(state[k], v) for k, v in w.state_dict().items())
    with pytest.raises(StateError):
        w.round1(torch.randn(201), key="a")
    fresh = SketchedSGDWorker(rows=3, columns=50)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.accumulated("a"), w.accumulated("a"))
    with pytest.raises(InvalidParameterError):
        run_sketched_sgd_step([w, SketchedSGDWorker(rows=3, columns=50, seed=1)], [g, g], 2, 2, key="b")
    with pytest.raises(InvalidParameterError):
        SketchedSGDWorker(momentum=1.0)


def test_aggregator_runs_momentum_inside_the_accumulation():
    # the reproduction moves the optimizer's momentum into the workers (authors' code: u <- rho u + g,
    # v <- v + u, momentum stopping), so the aggregation family must hand it to each worker
    from gcbench.compressors.errors import InvalidParameterError
    from gcbench.compressors.methods.sketched_sgd import SketchedSGD

    agg = SketchedSGD(ratio=0.1, momentum=0.9)
    assert agg.worker.momentum == 0.9 and agg.worker.momentum_stopping and agg.params["momentum"] == 0.9
    assert SketchedSGD(ratio=0.1).worker.momentum == 0.0
    with pytest.raises(InvalidParameterError):
        SketchedSGD(ratio=0.1, momentum=1.0)


def test_a_later_step_builds_no_hash_tables(monkeypatch):
    """Line 8 reads the summed sketch with the worker's codec, whose cache holds the tables its round 1
    built: a step after the first builds none (a new codec per step rebuilt them, seconds per tensor at
    ten million coordinates)."""
    from gcbench.compressors.codecs.countsketch import hashes

    workers = _workers()
    run_sketched_sgd_step(workers, _grads(0), K, PK)
    built: list[int] = []
    real = hashes.HashTables.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(hashes.HashTables, "__init__", counting)
    before = run_sketched_sgd_step(workers, _grads(1), K, PK)
    assert built == [] and before.indices.numel() == K
    # a payload read without the worker's codec (or with a codec of other parameters) builds its own
    p = workers[0].round1(_grads(2)[0])
    a = select_candidates(p, PK * K)
    assert len(built) == 1
    assert torch.equal(a, select_candidates(p, PK * K, codec=workers[0].codec)) and len(built) == 1
