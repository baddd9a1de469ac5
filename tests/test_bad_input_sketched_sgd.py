"""Bad input to Sketched-SGD (compressors/methods/sketched_sgd.py): a typed error, and every worker's
state as it was before the failed call, so that the next clean step gives what it would have given
had the failed one never been tried."""

from __future__ import annotations

import math
import time

import pytest
import torch

from gcbench.compressors.errors import (
    InvalidParameterError,
    NonFiniteGradientError,
    NumericOverflowError,
    StateError,
    UnsupportedInputError,
)
from gcbench.compressors.methods.sketched_sgd import (
    AccumulatedTopK,
    SketchedSGD,
    SketchedSGDWorker,
    run_sketched_sgd_step,
    select_candidates,
    select_topk,
    sketched_rounds,
)

N = 500


def _workers(n: int = 3, **kw) -> list[SketchedSGDWorker]:
    return [SketchedSGDWorker(rows=5, columns=60, seed=4, **kw) for _ in range(n)]


def _grads(step: int, n: int = 3, size: int = N) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(size, generator=g) for _ in range(n)]


def _states(workers) -> list[dict[str, torch.Tensor]]:
    return [w.state_dict() for w in workers]


def _same_states(a, b) -> bool:
    return all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def _same_step(a, b) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("update", "indices", "candidates"))


class Sums:
    """A transport for :func:`sketched_rounds`: sums in worker order; ``fail`` names a round whose
    all-reduce raises (a lost connection)."""

    def __init__(self, workers: int, fail: str | None = None) -> None:
        self.workers, self.fail = workers, fail

    start = staticmethod(time.perf_counter)

    def stop(self, t0: float, phase: str) -> None:
        pass

    def all_reduce(self, entries):
        out: dict = {}
        for kind, j, fn in entries:
            if kind == self.fail:
                raise ConnectionError("transport down")
            total = fn(0).clone()
            for i in range(1, self.workers):
                total += fn(i)
            out.setdefault(kind, {})[j] = total
        return out


# --- round 1: the new u and v replace the old ones only once encoded ------------------------------


def test_an_accumulation_that_overflows_raises_and_keeps_the_state():
    w, ref = SketchedSGDWorker(rows=5, columns=60, seed=4), SketchedSGDWorker(rows=5, columns=60, seed=4)
    g = torch.ones(N)
    g[0] = 2e38  # never applied below: it stays in v, and a second step doubles it past float32
    for worker in (w, ref):
        worker.round1(g, key="a")
        worker.round2(torch.tensor([1, 2]), key="a")
        worker.apply(torch.tensor([1]), key="a")
    before = w.state_dict()
    with pytest.raises(NumericOverflowError, match="overflows"):
        w.round1(g, key="a")
    assert _same_states([w.state_dict()], [before])
    clean = torch.randn(N, generator=torch.Generator().manual_seed(1))
    assert torch.equal(w.round1(clean, key="a").sections[0], ref.round1(clean, key="a").sections[0])
    assert torch.equal(w.accumulated("a"), ref.accumulated("a"))


def test_finite_gradients_that_overflow_the_sketch_leave_no_poisoned_state():
    ws, ref = _workers(1, compression=2.0), _workers(1, compression=2.0)
    big = torch.full((1000,), 3e38)
    for _ in range(2):
        with pytest.raises(NumericOverflowError):
            run_sketched_sgd_step(ws, [big], k=1)
    clean = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    assert _same_step(run_sketched_sgd_step(ws, [clean], k=5), run_sketched_sgd_step(ref, [clean], k=5))


@pytest.mark.parametrize("lr", [math.nan, math.inf, -1.0, 0.0, "x", True])
def test_a_bad_per_call_lr_is_a_parameter_error(lr):
    ws, ref = _workers(), _workers()
    run_sketched_sgd_step(ws, _grads(0), k=5, P=2)
    run_sketched_sgd_step(ref, _grads(0), k=5, P=2)
    with pytest.raises(InvalidParameterError, match="lr"):
        run_sketched_sgd_step(ws, _grads(1), k=5, P=2, lr=lr)
    assert _same_states(_states(ws), _states(ref))
    assert _same_step(run_sketched_sgd_step(ws, _grads(2), k=5, P=2), run_sketched_sgd_step(ref, _grads(2), k=5, P=2))


def test_an_lr_beyond_float32_is_an_overflow_error():
    ws = _workers(1)
    with pytest.raises(NumericOverflowError, match="lr"):
        run_sketched_sgd_step(ws, _grads(0, 1), k=5, lr=1e300)
    with pytest.raises(StateError):  # nothing was stored for the key
        ws[0].accumulated()
    assert run_sketched_sgd_step(ws, _grads(0, 1), k=5).indices.numel() == 5


# --- a multi-worker step rolls every worker back -------------------------------------------------


@pytest.mark.parametrize("bad", ["nan", "inf", "int"])
def test_a_bad_gradient_on_one_worker_leaves_every_worker_as_it_was(bad):
    ws, ref = _workers(), _workers()
    run_sketched_sgd_step(ws, _grads(0), k=5, P=2)
    run_sketched_sgd_step(ref, _grads(0), k=5, P=2)
    grads = _grads(1)
    grads[2] = {"nan": torch.full((N,), math.nan), "inf": torch.full((N,), math.inf),
                "int": torch.ones(N, dtype=torch.int64)}[bad]
    with pytest.raises(NonFiniteGradientError if bad != "int" else UnsupportedInputError):
        run_sketched_sgd_step(ws, grads, k=5, P=2)
    assert _same_states(_states(ws), _states(ref))
    for step in (2, 3):  # no StateError: every worker is between steps again
        a = run_sketched_sgd_step(ws, _grads(step), k=5, P=2)
        assert _same_step(a, run_sketched_sgd_step(ref, _grads(step), k=5, P=2))


def test_an_empty_tensor_in_a_bucket_is_refused_and_rolled_back():
    ws = [[w, v] for w, v in zip(_workers(2), _workers(2))]
    ref = [[w, v] for w, v in zip(_workers(2), _workers(2))]
    good = _grads(0, 2)
    with pytest.raises(UnsupportedInputError, match="non-empty"):
        sketched_rounds(Sums(2), ws, [[g, torch.empty(0)] for g in good], ["a", "b"], [5, 1], [2, 2])
    assert all(w.state_dict() == {} for row in ws for w in row)
    out = sketched_rounds(Sums(2), ws, [[g, h] for g, h in zip(good, _grads(1, 2))], ["a", "b"], [5, 5], [2, 2])
    want = sketched_rounds(Sums(2), ref, [[g, h] for g, h in zip(good, _grads(1, 2))], ["a", "b"], [5, 5], [2, 2])
    assert all(torch.equal(a.indices, b.indices) and torch.equal(a.values, b.values) for a, b in zip(out, want))


@pytest.mark.parametrize("fail", ["round1", "round2"])
def test_a_failed_transport_leaves_every_worker_as_it_was(fail):
    ws, ref = _workers(2), _workers(2)
    for workers in (ws, ref):
        sketched_rounds(Sums(2), [[w] for w in workers], [[g] for g in _grads(0, 2)], ["a"], [5], [2])
    with pytest.raises(ConnectionError):
        sketched_rounds(Sums(2, fail), [[w] for w in ws], [[g] for g in _grads(1, 2)], ["a"], [5], [2])
    assert _same_states(_states(ws), _states(ref))
    a = sketched_rounds(Sums(2), [[w] for w in ws], [[g] for g in _grads(2, 2)], ["a"], [5], [2])[0]
    b = sketched_rounds(Sums(2), [[w] for w in ref], [[g] for g in _grads(2, 2)], ["a"], [5], [2])[0]
    assert torch.equal(a.indices, b.indices) and torch.equal(a.values, b.values)


def test_sums_beyond_float32_raise_instead_of_an_infinite_update():
    ws = _workers(2)
    g = torch.zeros(N)
    g[7] = 2e38  # finite on each worker, infinite in the sum of the two
    with pytest.raises(NumericOverflowError, match="sum"):
        run_sketched_sgd_step(ws, [g, g], k=1)
    assert all(w.state_dict() == {} for w in ws)


def test_abort_restores_a_step_in_progress_and_is_a_no_op_between_steps():
    w = SketchedSGDWorker(rows=3, columns=50)
    w.abort("a")
    run_sketched_sgd_step([w], _grads(0, 1, 200), k=3)
    before = w.state_dict()
    w.round1(_grads(1, 1, 200)[0], key="")
    w.round2(torch.tensor([0, 5]), key="")
    w.abort("")
    assert _same_states([w.state_dict()], [before])


# --- the true top-k baseline ----------------------------------------------------------------------


def test_accumulated_topk_overflow_raises_and_keeps_the_state():
    acc = AccumulatedTopK(k=1)
    acc.step(torch.full((4,), 3e38))
    before = acc.state_dict()
    with pytest.raises(NumericOverflowError):
        acc.step(torch.full((4,), 3e38))
    after = acc.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in ("u", "v"))
    assert torch.isfinite(acc.step(torch.ones(4))).all()


def test_accumulated_topk_refuses_another_size_and_keeps_its_accumulation():
    acc = AccumulatedTopK(k=1)
    acc.step(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    norm = acc.accumulator_norm()
    with pytest.raises(StateError, match="reset_state"):
        acc.step(torch.ones(6))
    with pytest.raises(StateError):
        acc.step(torch.ones(4, dtype=torch.float64))
    assert acc.accumulator_norm() == norm
    acc.reset_state()
    assert acc.step(torch.ones(6)).shape == (6,)


def test_accumulated_topk_refuses_integer_gradients():
    acc = AccumulatedTopK(k=1)
    with pytest.raises(UnsupportedInputError):
        acc.step(torch.arange(4))
    assert acc.state_dict() == {}


# --- parameters -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(momentum="x"), dict(lr="x"), dict(lr=math.inf), dict(lr=[1.0])])
def test_worker_parameters(kw):
    with pytest.raises(InvalidParameterError):
        SketchedSGDWorker(**kw)


@pytest.mark.parametrize("kw", [dict(P=True), dict(ratio=True), dict(P=2**70), dict(momentum="x")])
def test_sketched_sgd_parameters(kw):
    with pytest.raises(InvalidParameterError):
        SketchedSGD(**kw)


@pytest.mark.parametrize("bad", [math.inf, math.nan, 2.5, "3", True])
def test_counts(bad):
    payload = SketchedSGDWorker(columns=20).round1(torch.randn(100))
    with pytest.raises(InvalidParameterError):
        select_candidates(payload, bad)
    with pytest.raises(InvalidParameterError):
        select_topk(torch.randn(4), torch.arange(4), bad)
    with pytest.raises(InvalidParameterError):
        AccumulatedTopK(k=bad)
    with pytest.raises(InvalidParameterError):
        run_sketched_sgd_step(_workers(1), _grads(0, 1), k=5, P=bad)


def test_integral_counts_of_other_types_still_work():
    import numpy as np

    assert AccumulatedTopK(k=np.int64(3)).k == 3 and AccumulatedTopK(k=3.0).k == 3
    assert select_topk(torch.randn(4), torch.arange(4), np.int32(2))[0].numel() == 2


def test_select_topk_refuses_non_finite_values():
    with pytest.raises(NonFiniteGradientError):
        select_topk(torch.tensor([math.nan, 1.0, 2.0, 3.0]), torch.arange(4), 2)
