"""The aggregation protocols and the simulated cluster, checked against naive references (no processes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gcbench.compressors.codecs.identity import Cast
from gcbench.envs.aggregator import Aggregator
from gcbench.envs.collectives import LocalCollective
from gcbench.envs.errors import CollectiveMismatchError, UnsupportedTopologyError
from gcbench.envs.simulated import SimulatedCluster, ddp_bucket_layout
from gcbench.envs.workers import CodecSpec, WorkerCodecs, inner_codec, protocol_of

from gcbench.workloads.models import build_model
from gcbench.workloads.training import batch_indices


def _grads(W, shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) for s in shapes] for _ in range(W)]


def _aggregator(W, name, params=None, **kw):
    spec = CodecSpec(name=name, params=params or {}, **kw)
    return Aggregator([WorkerCodecs(spec, r) for r in range(W)], LocalCollective(W))


SHAPES = [(20, 12), (12,), (5, 3, 2)]
KEYS = ["w1", "b1", "w2"]


def test_fp16_all_reduce_sums_the_casts():
    W = 3
    grads = _grads(W, SHAPES)
    out = _aggregator(W, "fp16").aggregate(grads, KEYS, step=0)
    for j in range(len(KEYS)):
        total = grads[0][j].half()
        for w in range(1, W):
            total = total + grads[w][j].half()  # fp16 sums, rank order: what all_reduce of fp16 does
        assert torch.equal(out[j], total.float() / W)


def test_randomk_all_reduce_is_the_mean_on_shared_coordinates():
    W, ratio = 3, 0.25
    grads = _grads(W, SHAPES)
    agg = _aggregator(W, "randomk", {"ratio": ratio})
    out = agg.aggregate(grads, KEYS, step=0)
    for j, shape in enumerate(SHAPES):
        n = int(np.prod(shape))
        nz = out[j].reshape(-1) != 0
        k = int(nz.sum())
        assert 0 < k <= max(1, round(ratio * n)) + 1
        naive = (grads[0][j] + grads[1][j] + grads[2][j]) / W  # same coordinates on every worker
        assert torch.equal(out[j].reshape(-1)[nz], naive.reshape(-1)[nz])
    # only the summed values travelled: k fp32 values per tensor, and one 8-byte digest check
    assert agg.traffic.message_bytes(kind="check") == 8 * W


def test_different_seeds_are_caught_before_summing():
    # a worker whose generator went astray would pick other coordinates: its shared section (the
    # per-call seed) differs, and the digest check stops the sum before anything is corrupted
    W = 2
    workers = [WorkerCodecs(CodecSpec(name="randomk", params={"ratio": 0.5}), r) for r in range(W)]
    workers[1]._generators[("w1", "cpu")] = torch.Generator().manual_seed(12345)
    agg = Aggregator(workers, LocalCollective(W))
    with pytest.raises(CollectiveMismatchError, match="ranks \\[1\\]"):
        agg.aggregate(_grads(W, [(30,)]), ["w1"], step=0)


def test_topk_all_gather_is_the_mean_of_naive_topks():
    W, ratio = 3, 0.1
    grads = _grads(W, SHAPES, seed=3)
    agg = _aggregator(W, "topk", {"ratio": ratio})
    out = agg.aggregate(grads, KEYS, step=0)
    for j, shape in enumerate(SHAPES):
        n = int(np.prod(shape))
        k = min(n, max(1, round(ratio * n)))  # TopK's k (compressors/codecs/topk.py num_selected)
        acc = None
        for w in range(W):
            x = grads[w][j].reshape(-1).numpy()
            keep = np.argsort(-np.abs(x), kind="stable")[:k]
            dense = np.zeros_like(x)
            dense[keep] = x[keep]
            t = torch.from_numpy(dense)
            acc = t if acc is None else acc + t
        assert torch.equal(out[j].reshape(-1), acc / W)
    # bytes: sizes (8 per tensor) and the padded payload buffer, per worker
    assert agg.traffic.message_bytes(kind="sizes", worker=0) == 8 * len(KEYS)
    rec = [r for r in agg.traffic.wire_records if r.kind == "payload"]
    assert len({r.nbytes for r in rec}) == 1 and all(r.op == "all_gather" for r in rec)


def _orthonormal(p):
    # naive modified Gram-Schmidt in float64 (columns are independent here)
    q = p.astype(np.float64).copy()
    for i in range(q.shape[1]):
        for k in range(i):
            q[:, i] -= (q[:, k] @ q[:, i]) * q[:, k]
        q[:, i] /= np.linalg.norm(q[:, i])
    return q


def _warm_q(worker, key):
    """The PowerSGD warm-start Q the worker's codec keeps for ``key``."""
    return inner_codec(worker.codec_for(key)).get_warm_start(key)


def test_powersgd_protocol_matches_a_naive_implementation():
    W, rank = 3, 2
    shapes = [(16, 10), (10,)]
    keys = ["w", "b"]
    agg = _aggregator(W, "powersgd", {"rank": rank}, error_feedback=True)
    agg.aggregate(_grads(W, shapes, seed=1), keys, step=0)
    q0 = _warm_q(agg.workers[0], "w").numpy().astype(np.float64)
    assert all(torch.equal(_warm_q(w, "w"), _warm_q(agg.workers[0], "w")) for w in agg.workers)
    e = [w.codec_for("w").memory["w"].numpy().astype(np.float64) for w in agg.workers]
    grads = _grads(W, shapes, seed=2)
    out = agg.aggregate(grads, keys, step=1)
    m = [grads[i][0].numpy().astype(np.float64) + e[i] for i in range(W)]
    p = _orthonormal(sum(mi @ q0 for mi in m))
    q = sum(mi.T @ p for mi in m) / W
    approx = p @ q.T
    np.testing.assert_allclose(out[0].numpy(), approx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_warm_q(agg.workers[1], "w").numpy(), q, rtol=1e-4, atol=1e-5)
    # the bias is sent as it is: its mean, exactly
    assert torch.equal(out[1], (grads[0][1] + grads[1][1] + grads[2][1]) / W)
    # error feedback keeps every worker's residual: sum_i e_i = sum_i M_i - W * update
    e_new = sum(w.codec_for("w").memory["w"].numpy().astype(np.float64) for w in agg.workers)
    np.testing.assert_allclose(e_new, sum(m) - W * approx, rtol=1e-4, atol=1e-4)
    # traffic: P (16 x 2) with the bias (10) in round 1, Q (10 x 2) in round 2, fp32
    kinds = {(r.kind, r.step): r.nbytes for r in agg.traffic.wire_records if r.worker == 0}
    assert kinds[("factor_p", 1)] == 16 * rank * 4 and kinds[("dense", 1)] == 10 * 4 and kinds[("factor_q", 1)] == 10 * rank * 4


def test_powersgd_error_feedback_reuses_its_buffers_with_the_same_bytes_and_survives_a_failed_round(monkeypatch):
    """From the third step, M_i = g_i + e_i goes into the buffer of the residual replaced a step
    before and the new residual into M_i's: two buffers per key take turns. The updates and
    residuals are those of new memory every step, bit for bit; an all-reduce that raises leaves
    every residual as it was, and the next step goes on from it."""
    from gcbench.compressors.error_feedback import ErrorFeedback

    W, shapes, keys = 2, [(24, 16), (16,)], ["w", "b"]
    ours = _aggregator(W, "powersgd", {"rank": 2}, error_feedback=True)
    fresh = _aggregator(W, "powersgd", {"rank": 2}, error_feedback=True)
    ptrs = []
    for step in range(5):
        grads = _grads(W, shapes, seed=30 + step)
        out = ours.aggregate(grads, keys, step=step)
        with monkeypatch.context() as m:  # the reference: no spare is ever handed out
            m.setattr(ErrorFeedback, "take_spare", lambda self, *a: None)
            ref = fresh.aggregate(grads, keys, step=step)
        assert all(torch.equal(a, b) for a, b in zip(out, ref)), step
        for w_ours, w_ref in zip(ours.workers, fresh.workers):
            assert torch.equal(w_ours.codec_for("w").memory["w"], w_ref.codec_for("w").memory["w"]), step
        ptrs.append(ours.workers[0].codec_for("w").memory["w"].data_ptr())
    assert ptrs[2] == ptrs[4] and ptrs[3] != ptrs[4], ptrs  # two buffers in turn, no new memory
    kept = [w.codec_for("w").memory["w"].clone() for w in ours.workers]
    calls = {"n": 0}
    real = ours.collective.all_reduce

    def fails_second_round(tensors, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("link down")
        return real(tensors, **kw)

    monkeypatch.setattr(ours.collective, "all_reduce", fails_second_round)
    with pytest.raises(RuntimeError, match="link down"):
        ours.aggregate(_grads(W, shapes, seed=99), keys, step=5)
    assert all(torch.equal(w.codec_for("w").memory["w"], k) for w, k in zip(ours.workers, kept))
    monkeypatch.setattr(ours.collective, "all_reduce", real)
    grads = _grads(W, shapes, seed=40)
    out = ours.aggregate(grads, keys, step=6)
    ref = fresh.aggregate(grads, keys, step=6)  # fresh's residuals are those ours kept
    assert all(torch.equal(a, b) for a, b in zip(out, ref))


@pytest.mark.parametrize("name,params", [("qsgd", {}), ("topk", {"ratio": 0.1}), ("powersgd", {"rank": 2}), ("randomk", {"ratio": 0.1})])
def test_results_written_into_the_gradients_are_the_same_results(name, params):
    """``into_grads``: the all_gather protocol decodes the first rank's payload, the per-tensor
    all_reduce protocol the sum, straight into the first local worker's gradient (DDP's bucket in the
    hook), whose memory then holds the result; every protocol returns the bits it returns without
    it, over steps with error feedback."""
    W, shapes, keys = 2, [(24, 16), (16,), (8, 3, 3)], ["w", "b", "c"]
    plain = _aggregator(W, name, params, error_feedback=True)
    into = _aggregator(W, name, params, error_feedback=True)
    for step in range(3):
        grads = _grads(W, shapes, seed=50 + step)
        mine = [[g.clone() for g in row] for row in grads]
        ref = plain.aggregate(grads, keys, step=step)
        out = into.aggregate(mine, keys, step=step, into_grads=True)
        assert all(torch.equal(a, b) for a, b in zip(out, ref)), (name, step)
        if protocol_of(into.workers[0].codec_for("w")) in ("all_gather", "all_reduce"):
            assert all(o.data_ptr() == g.data_ptr() for o, g in zip(out, mine[0]))
        assert all(torch.equal(a, b) for a, b in zip(mine[1], grads[1]))  # only the first worker's are written


def test_sketched_two_rounds_match_the_reference_step():
    from gcbench.compressors.methods.sketched_sgd import SketchedSGDWorker, run_sketched_sgd_step

    W = 3
    agg = _aggregator(W, "sketched-sgd", {"ratio": 0.05, "P": 2})
    ref = [SketchedSGDWorker(rows=5, columns=0, compression=20.0, seed=0) for _ in range(W)]
    for step in range(3):
        grads = _grads(W, [(40, 30), (7,)], seed=10 + step)
        out = agg.aggregate(grads, ["a", "b"], step=step)
        for j, key in enumerate(["a", "b"]):
            k = agg.workers[0].codec_for(key).k_for(grads[0][j].numel())
            r = run_sketched_sgd_step(ref, [grads[w][j] for w in range(W)], k, 2, key=key)
            assert torch.equal(out[j], r.update / W)
    kinds = {r.kind for r in agg.traffic.wire_records}
    assert kinds == {"round1", "round2"}


@pytest.mark.parametrize("name,params", [("topk", {"ratio": 0.05}), ("fp16", {})])
def test_parameter_server_without_pull_codec_equals_collectives(name, params):
    from gcbench.data.digits import load_digits_tensors

    W = 3
    d = load_digits_tensors()
    results = {}
    for topology in ("collective", "parameter_server"):
        model = build_model("mlp", seed=0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sim = SimulatedCluster(model, W, name, params, topology=topology)
        for step in range(3):
            b = [batch_indices(step, w, W, 8, 0) for w in range(W)]
            opt.zero_grad()
            sim.backward(lambda w, m=model, b=b: F.cross_entropy(m(d.x[b[w]]), d.y[b[w]]))
            opt.step()
        results[topology] = ([p.detach().clone() for p in model.parameters()], sim)
    (pa, _), (pb, ps) = results["collective"], results["parameter_server"]
    assert all(torch.equal(a, b) for a, b in zip(pa, pb))
    # push carries serialized payloads, pull the fp32 average; both directions counted per worker
    numel = sum(p.numel() for p in pa)
    for step in range(3):
        for w in range(W):
            assert ps.traffic.message_bytes(step=step, worker=w, op="pull") == numel * 4
            assert ps.traffic.message_bytes(step=step, worker=w, op="push") > 0


def test_parameter_server_pull_codec_compresses_the_way_back():
    W = 2
    grads = _grads(W, SHAPES)
    plain = Aggregator([WorkerCodecs(CodecSpec(name="identity"), r) for r in range(W)], LocalCollective(W))
    avg = plain.parameter_server(grads, KEYS, step=0)
    pulled = Aggregator([WorkerCodecs(CodecSpec(name="identity"), r) for r in range(W)], LocalCollective(W))
    out = pulled.parameter_server(grads, KEYS, step=0, pull=WorkerCodecs(CodecSpec(name="fp16"), -1))
    for a, o in zip(avg, out):
        assert torch.equal(o, Cast().roundtrip(a))
    numel = sum(int(np.prod(s)) for s in SHAPES)
    assert plain.traffic.message_bytes(op="pull", worker=0) == numel * 4
    assert numel * 2 < pulled.traffic.message_bytes(op="pull", worker=0) < numel * 4


def test_parameter_server_sends_what_the_server_step_returns():
    W = 3
    grads = _grads(W, SHAPES)
    plain = _aggregator(W, "identity").parameter_server(grads, KEYS, step=0)
    seen = []

    def server_step(avg, keys):  # e.g. an optimizer step on the server: it sends the change
        seen.append((list(keys), [a.clone() for a in avg]))
        return [-0.5 * a for a in avg]

    agg = _aggregator(W, "identity")
    out = agg.parameter_server(grads, KEYS, step=0, server_step=server_step)
    assert seen[0][0] == KEYS and all(torch.equal(a, p) for a, p in zip(seen[0][1], plain))
    assert all(torch.equal(o, -0.5 * p) for o, p in zip(out, plain))
    numel = sum(int(np.prod(s)) for s in SHAPES)
    assert [r.nbytes for r in agg.traffic.wire_records if r.op == "pull"] == [numel * 4] * W
    assert agg.traffic.seconds("step", worker=-1) > 0  # the server's step is measured as its own
    # with a pull codec, the returned tensors are what gets encoded (one payload, W receivers)
    fp16 = _aggregator(W, "identity")
    out16 = fp16.parameter_server(grads, KEYS, step=0, server_step=server_step, pull=WorkerCodecs(CodecSpec(name="fp16"), -1))
    assert all(torch.equal(o, Cast().roundtrip(-0.5 * p)) for o, p in zip(out16, plain))
    with pytest.raises(UnsupportedTopologyError):
        _aggregator(W, "identity").parameter_server(grads, KEYS, step=0, server_step=lambda avg, keys: avg[:1])


def test_every_codec_declares_a_protocol_the_environment_runs():
    from gcbench.compressors import families
    from gcbench.envs.protocols import PROTOCOLS
    from gcbench.envs.workers import protocol_of

    seen = set()
    for name in families.names():
        codec = CodecSpec(name=name).build("w")
        proto = protocol_of(codec)
        seen.add(proto)
        assert proto in PROTOCOLS, name
        if proto == "rounds":
            assert callable(getattr(type(inner_codec(codec)), "run_rounds", None)), name
        else:  # a codec that says nothing gets all_reduce exactly when its payloads can be summed
            assert proto == ("all_reduce" if inner_codec(codec).linear else "all_gather"), name
    assert seen == set(PROTOCOLS)


def test_parameter_server_refuses_own_protocols_and_real_groups():
    agg = _aggregator(2, "powersgd", {"rank": 1})
    with pytest.raises(UnsupportedTopologyError):
        agg.parameter_server(_grads(2, [(8, 8)]), ["w"], step=0)


def test_bucket_layout_is_ddps():
    # sizes in bytes, registration order; DDP fills buckets in reverse order up to the cap
    assert ddp_bucket_layout([40, 2560, 256, 32768, 40], 1000) == [[4, 3], [2, 1], [0]]
    assert ddp_bucket_layout([10, 10, 10], 10**6) == [[2, 1, 0]]
    # a smaller first cap closes only the first bucket sooner (DDP's default 1 MiB first bucket)
    assert ddp_bucket_layout([300, 300, 300, 300], 10**6, first_cap_bytes=500) == [[3, 2], [1, 0]]
    assert ddp_bucket_layout([300, 300, 300, 300], 600, first_cap_bytes=300) == [[3], [2, 1], [0]]


def test_default_first_bucket_cap_is_torchs():
    import torch.distributed as dist

    from gcbench.envs.simulated import DEFAULT_FIRST_BUCKET_BYTES

    assert DEFAULT_FIRST_BUCKET_BYTES == dist._DEFAULT_FIRST_BUCKET_BYTES  # noqa: SLF001 - torch's constant


def test_simulated_training_with_many_workers_learns():
    W = 8
    model = build_model("mlp", seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sim = SimulatedCluster(model, W, "fp16")
    from gcbench.data.digits import load_digits_tensors

    d = load_digits_tensors()
    losses = []
    for step in range(40):
        b = [batch_indices(step, w, W, 16, 0) for w in range(W)]
        opt.zero_grad()
        losses.append(np.mean(sim.backward(lambda w, m=model, b=b: F.cross_entropy(m(d.x[b[w]]), d.y[b[w]]))))
        opt.step()
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    assert sim.traffic.workers() == list(range(W))
    assert sim.traffic.compression_ratio() == pytest.approx(2.0, rel=1e-3)


def test_state_dict_round_trip_continues_identically():
    W = 2
    grads = [_grads(W, [(30,)], seed=s) for s in range(4)]
    a = _aggregator(W, "fp16", error_feedback=True)
    for s in range(2):
        a.aggregate(grads[s], ["w"], step=s)
    saved = [w.state_dict() for w in a.workers]
    b = _aggregator(W, "fp16", error_feedback=True)
    for w, st in zip(b.workers, saved):
        w.load_state_dict(st)
    for s in range(2, 4):
        assert torch.equal(a.aggregate(grads[s], ["w"], step=s)[0], b.aggregate(grads[s], ["w"], step=s)[0])


def test_exchange_decode_grad_equals_to_grad_of_a_fresh_decode():
    """The protocols' decode into a buffer of their own: the same values as
    ``to_grad(decode(payload), like)``, a result that never aliases the payload (the protocols scale
    and accumulate into it in place), and the caller's ``into`` used only when it is not the payload."""
    from gcbench import compressors
    from gcbench.envs.exchange import Exchange

    g = torch.randn(37, 29, generator=torch.Generator().manual_seed(2))
    for name, x in (("qsgd", g), ("identity", g), ("fp16", g), ("topk", g), ("topk", g.to_sparse())):
        codec = compressors.get(name)
        p = codec.encode(x)
        want = Exchange.to_grad(codec.decode(p), g)
        got = Exchange.decode_grad(codec, p, g, device="cpu")
        assert torch.equal(got, want) and got.shape == g.shape and got.dtype == g.dtype, name
        shared = {s.untyped_storage().data_ptr() for s in p.sections}
        assert got.untyped_storage().data_ptr() not in shared, name
        buf = torch.full_like(g, float("nan"))
        into = Exchange.decode_grad(codec, p, g, device="cpu", into=buf)
        assert torch.equal(into, want) and (into is buf) == (not p.sparse), name
    flat = torch.randn(100)
    p = compressors.get("identity").encode(flat)  # the payload is the buffer itself: not written into
    assert torch.equal(Exchange.decode_grad(compressors.get("identity"), p, flat, device="cpu", into=flat), flat)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 6, 8, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_mean_has_the_bits_of_the_division(world: int, dtype: torch.dtype) -> None:
    """``Exchange.mean_`` skips one worker's division and multiplies by a power of two's reciprocal:
    the bits of ``div_`` on every value, subnormal results, extremes and signed zeros included."""
    from gcbench.envs.exchange import Clock, Exchange, Recorder
    from gcbench.envs.traffic import TrafficLog

    coll = LocalCollective(world)
    ex = Exchange([], coll, Recorder(TrafficLog(), coll.local_ranks), Clock(torch.device("cpu"), 0), step=0, bucket=0)
    info = torch.finfo(dtype)
    special = torch.tensor([0.0, -0.0, info.tiny, -info.tiny, info.tiny * 3, info.max, -info.max, info.eps, 1.0, 3.0],
                           dtype=torch.float64)
    x = torch.cat([special, torch.randn(10_000, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (10_000,))])
    x = x.clamp(-info.max, info.max).to(dtype)
    want = x.clone().div_(world)
    got = ex.mean_(x.clone())
    assert torch.equal(got.view(torch.int16 if dtype.itemsize == 2 else torch.int64 if dtype.itemsize == 8 else torch.int32),
                       want.view(torch.int16 if dtype.itemsize == 2 else torch.int64 if dtype.itemsize == 8 else torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_passthrough_bucket_is_summed_as_it_is_and_its_sum_checked_once(dtype, monkeypatch) -> None:
    """A passthrough codec's fused bucket (no encode pass): the average has the generic path's bits,
    the same traffic, one finiteness scan of the sum in all, and NaN, Inf or an overflowing sum in
    any worker's bucket raise NonFiniteGradientError (remove the check and this test fails)."""
    from gcbench.compressors.errors import NonFiniteGradientError
    from gcbench.envs.protocols import all_reduce as ar

    scans = []
    monkeypatch.setattr(ar, "all_finite", lambda t: scans.append(t.numel()) or bool(torch.isfinite(t).all()))
    gen = torch.Generator().manual_seed(4)
    grads = [torch.randn(1000, generator=gen).to(dtype) for _ in range(4)]

    def agg() -> Aggregator:
        return Aggregator([WorkerCodecs(CodecSpec(name="identity"), r) for r in range(4)], LocalCollective(4))

    want_agg = agg()
    want = want_agg.aggregate([[g.clone()] for g in grads], ["w"], step=0)[0]
    got_agg = agg()
    assert got_agg.fusable(["w"]) and inner_codec(got_agg.workers[0].codec_for("w")).passthrough
    flats = [g.clone() for g in grads]
    got = got_agg.aggregate_fused(flats, ["w"], step=0)
    assert got is flats[0] and torch.equal(got, want) and scans == [1000]
    assert [r.nbytes for r in got_agg.traffic.wire_records] == [r.nbytes for r in want_agg.traffic.wire_records]
    top = torch.finfo(dtype).max
    for bad, value in ((2, float("nan")), (3, float("inf")), (0, -float("inf")), (None, top)):
        flats = [g.clone() for g in grads]
        for i, f in enumerate(flats):
            if bad is None:
                f[7] = value  # every bucket finite, their sum beyond the dtype's range
            elif i == bad:
                f[7] = value
        with pytest.raises(NonFiniteGradientError, match="all-reduced bucket holds non-finite"):
            agg().aggregate_fused(flats, ["w"], step=0)


def test_fused_cast_bucket_raises_non_finite_errors_after_the_sum() -> None:
    """fp16's fused bucket: a worker with NaN sends NaN and raises its own error after the collective;
    a sum beyond float16's range raises NonFiniteGradientError (not a corrupt-payload error)."""
    from gcbench.compressors.errors import NonFiniteGradientError

    def agg() -> Aggregator:
        return Aggregator([WorkerCodecs(CodecSpec(name="fp16"), r) for r in range(2)], LocalCollective(2))

    a, b = torch.randn(1000), torch.randn(1000)
    b[5] = float("nan")
    with pytest.raises(NonFiniteGradientError, match="non-finite value"):
        agg().aggregate_fused([a.clone(), b], ["w"], step=0)
    big = torch.full((1000,), 60000.0)  # finite in float16; two of them sum beyond it
    with pytest.raises(NonFiniteGradientError, match="all-reduced bucket"):
        agg().aggregate_fused([big.clone(), big.clone()], ["w"], step=0)
    fine = agg().aggregate_fused([a.clone(), a.clone()], ["w"], step=0)
    assert torch.equal(fine, agg().aggregate([[a.clone()], [a.clone()]], ["w"], step=0)[0])


def test_all_gather_worker_with_nan_makes_every_worker_raise_and_the_next_step_works() -> None:
    """TopK (all_gather): a worker whose gradients hold NaN announces failed sizes; every worker raises
    NonFiniteGradientError after the sizes' all_gather, nothing else is sent, and the next step
    (whose headers must be defined again) aggregates as a fresh run does."""
    from gcbench.compressors.errors import NonFiniteGradientError

    def agg() -> Aggregator:
        return Aggregator([WorkerCodecs(CodecSpec(name="topk", params={"ratio": 0.1}), r) for r in range(2)],
                          LocalCollective(2))

    a, b = torch.randn(300), torch.randn(300)
    bad = b.clone()
    bad[7] = float("nan")
    used = agg()
    with pytest.raises(NonFiniteGradientError):
        used.aggregate([[a.clone()], [bad]], ["w"], step=0)
    assert [r.kind for r in used.traffic.wire_records] == ["sizes", "sizes"]  # no payload went out
    got = used.aggregate([[a.clone()], [b.clone()]], ["w"], step=1)[0]
    fresh = agg()
    want = fresh.aggregate([[a.clone()], [b.clone()]], ["w"], step=1)[0]
    assert torch.equal(got, want)


def test_per_tensor_all_reduce_worker_with_nan_sends_nan_once_the_layout_is_known() -> None:
    """``Aggregator.aggregate`` (summed tensor by tensor; fp16, deterministic): after a step that sent
    them, a worker whose gradients hold NaN sends NaN flats of the same layout (so its peers' sums
    show it) and raises; for keys never sent, or after their parameters changed, it raises before
    the collective."""
    from gcbench.compressors.errors import NonFiniteGradientError

    agg = Aggregator([WorkerCodecs(CodecSpec(name="fp16"), r) for r in range(2)], LocalCollective(2))
    g = [[torch.randn(50), torch.randn(7)] for _ in range(2)]
    bad = [[t.clone() for t in row] for row in g]
    bad[1][1][3] = float("nan")

    def payload_records(step: int) -> list[int]:
        return [r.nbytes for r in agg.traffic.wire_records if r.step == step and r.kind == "payload"]

    with pytest.raises(NonFiniteGradientError):
        agg.aggregate(bad, ["a", "b"], step=0)  # keys never sent: no layout, nothing goes out
    assert payload_records(0) == []
    agg.aggregate(g, ["a", "b"], step=1)
    with pytest.raises(NonFiniteGradientError, match="non-finite value"):
        agg.aggregate(bad, ["a", "b"], step=2)
    assert payload_records(2) == payload_records(1) and payload_records(1)
    agg.invalidate(["b"])  # new parameters: the layout is unknown again
    with pytest.raises(NonFiniteGradientError):
        agg.aggregate(bad, ["a", "b"], step=3)
    assert payload_records(3) == []


def test_a_failed_step_makes_the_next_one_check_shared_draws_again() -> None:
    """RandomK shares its random draws across workers: after a step where worker 1's NaN stopped its
    encode (worker 0 drew for every tensor, worker 1 not for the failed one), the next step checks
    the shared sections again and raises CollectiveMismatchError instead of summing values taken at
    different coordinates."""
    from gcbench.compressors.errors import NonFiniteGradientError

    agg = Aggregator([WorkerCodecs(CodecSpec(name="randomk", params={"ratio": 0.5}), r) for r in range(2)],
                     LocalCollective(2))
    g = [[torch.randn(40), torch.randn(9)] for _ in range(2)]
    bad = [[t.clone() for t in row] for row in g]
    bad[1][1][3] = float("nan")
    agg.aggregate(g, ["a", "b"], step=0)
    with pytest.raises(NonFiniteGradientError):
        agg.aggregate(bad, ["a", "b"], step=1)
    with pytest.raises(CollectiveMismatchError):
        agg.aggregate(g, ["a", "b"], step=2)
