"""L-GreCo as a DDP hook option: 2 gloo ranks, several buckets, PowerSGD (+EF), QSGD and TopK (+EF).

One launch (module fixture) trains the digits MLP with each codec uniform and with ``policy="lgreco"``
(a decision every 3 steps, 3 DDP buckets). Checks: ranks stay identical, every rank applies the same
choices, the first decision departs from the uniform default, the bytes on the wire after it drop
below the uniform run's, and the simulated cluster (W = 2) equals the real run bit for bit, traffic
record for record. Unit tests check the live ``layer_params`` switch (PowerSGD warm start dropped,
error-feedback residual kept) against hand-built expectations.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gcbench.envs.adaptive import make_policy, set_layer_params
from gcbench.envs.aggregator import Aggregator
from gcbench.envs.collectives import LocalCollective
from gcbench.envs.launch import launch
from gcbench.envs.simulated import SimulatedCluster
from gcbench.envs.traffic import TrafficLog
from gcbench.envs.workers import CodecSpec, WorkerCodecs

from gcbench.workloads.models import build_model
from gcbench.workloads.training import batch_indices

pytestmark = pytest.mark.distributed

STEPS = 8
EVERY = 3  # decisions at steps 3 and 6
BATCH = 16
CAP_MB = 0.001  # three buckets for the MLP
LR, MOMENTUM = 0.05, 0.9

CODECS = {
    "powersgd": ("powersgd", {"rank": 4}, True),
    "qsgd": ("qsgd", {"levels": 7}, False),
    "topk": ("topk", {"ratio": 0.05}, True),
}


def _configs():
    out = {}
    for label, (name, params, ef) in CODECS.items():
        out[f"{label}-uniform"] = (name, params, ef, None)
        out[f"{label}-lgreco"] = (name, params, ef, "lgreco")
    out["powersgd-priority"] = ("powersgd", {"rank": 4}, True, ("lgreco", {"objective": "priority"}))
    # the time objective (Sec. 4) through the hook's options: calibration steps 1-4, one decision at step 6
    out["powersgd-time"] = ("powersgd", {"rank": 4}, True,
                            {"policy": "lgreco", "adaptive_objective": "time", "adaptive_warmup": 3, "time_calibration": 4})
    return out


def _hook_kwargs(policy):
    """Extra hook options of a config (a dict policy carries them)."""
    kw = {"adaptive_every": EVERY}
    if isinstance(policy, dict):
        kw.update({k: v for k, v in policy.items() if k != "policy"})
    return kw


def _policy(policy, name, params, ef, model):
    """A string is passed to the hook as is; ``(kind, kwargs)`` is built here (the hook takes objects)."""
    if isinstance(policy, dict):
        return policy["policy"]
    if policy is None or isinstance(policy, str):
        return policy
    kind, kwargs = policy
    layers = [n for n, _ in model.named_parameters()]
    return make_policy(kind, CodecSpec(name=name, params=params, error_feedback=ef), every=EVERY, layers=layers, **kwargs)


def _rank_runs(ctx, configs, steps):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    out = {}
    for label, (name, params, ef, policy) in configs.items():
        model = build_model("mlp", seed=0)
        ddp = DDP(model, bucket_cap_mb=CAP_MB)
        state = GCBenchHookState(
            name, params, error_feedback=ef, model=model, progress=ctx.progress,
            policy=_policy(policy, name, params, ef, model), **_hook_kwargs(policy),
        )
        ddp.register_comm_hook(state, gcbench_hook)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        for step in range(steps):
            idx = batch_indices(step, ctx.rank, ctx.world_size, BATCH, 0)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(data.x[idx]), data.y[idx]).backward()
            opt.step()
        out[label] = {
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "traffic": state.traffic.to_dict(),
            "decisions": state.decisions,
            "layer_params": {k: dict(v) for k, v in state.spec.layer_params.items()},
            "buckets": len(state.bucket_layout),
            "time_fits": state.time_model.fits if state.time_model is not None else None,
            "coefficients": getattr(state.policy, "bucket_coefficients", None),
        }
        if policy is not None:  # the checkpoint round trip restores the per-layer choice
            fresh = GCBenchHookState(name, params, error_feedback=ef, model=model, policy=_policy(policy, name, params, ef, model),
                                     **_hook_kwargs(policy))
            fresh.load_state_dict(state.state_dict())
            out[label]["restored"] = (
                fresh.spec.layer_params == state.spec.layer_params and list(fresh.policy.choice) == list(state.policy.choice)
                and fresh.step == steps
            )
    return out


@pytest.fixture(scope="module")
def runs():
    return launch(_rank_runs, 2, (_configs(), STEPS), timeout_s=60)


def _simulate(name, params, ef, policy):
    model = build_model("mlp", seed=0)
    return _simulate_model(model, name, params, ef, _policy(policy, name, params, ef, model))


def _simulate_model(model, name, params, ef, policy):
    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    sim = SimulatedCluster(
        model, 2, name, params, error_feedback=ef, bucket_cap_mb=CAP_MB, policy=policy, adaptive_every=EVERY
    )
    for step in range(STEPS):
        batches = [batch_indices(step, w, 2, BATCH, 0) for w in range(2)]
        opt.zero_grad(set_to_none=True)
        sim.backward(lambda w, b=batches: F.cross_entropy(model(data.x[b[w]]), data.y[b[w]]))
        opt.step()
    return model, sim


def _equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _payload_bytes(traffic, since):
    log = TrafficLog.from_dict(traffic)
    return sum(r.nbytes for r in log.wire_records if r.step >= since and r.kind != "choice")


@pytest.mark.parametrize("label", list(CODECS))
def test_lgreco_ranks_identical_and_choices_shared(runs, label):
    r0, r1 = runs[0][f"{label}-lgreco"], runs[1][f"{label}-lgreco"]
    assert r0["buckets"] == 3
    assert _equal(r0["params"], r1["params"]), "ranks diverged"
    assert [d["step"] for d in r0["decisions"]] == [EVERY, 2 * EVERY]
    assert r0["decisions"] == r1["decisions"]  # rank 1 applied rank 0's broadcast choice
    assert r0["layer_params"] == r1["layer_params"] == r0["decisions"][-1]["layer_params"]
    assert r0["restored"] and r1["restored"]


@pytest.mark.parametrize("label", list(CODECS))
def test_first_decision_departs_from_uniform_and_saves_bytes(runs, label):
    _, params, _ = CODECS[label]
    first = runs[0][f"{label}-lgreco"]["decisions"][0]["layer_params"]
    param = next(iter(params))
    chosen = {k: v[param] for k, v in first.items() if k.endswith("weight")}
    assert len(set(chosen.values())) > 1 or set(chosen.values()) != {params[param]}, chosen
    # before the first decision both runs send the same bytes; after it L-GreCo sends fewer
    uni, lg = runs[0][f"{label}-uniform"]["traffic"], runs[0][f"{label}-lgreco"]["traffic"]
    assert _payload_bytes(uni, 0) - _payload_bytes(uni, EVERY) == _payload_bytes(lg, 0) - _payload_bytes(lg, EVERY)
    assert _payload_bytes(lg, EVERY) < _payload_bytes(uni, EVERY)
    # the decision changed the result: the uniform and adaptive runs differ
    assert not _equal(runs[0][f"{label}-uniform"]["params"], runs[0][f"{label}-lgreco"]["params"])


@pytest.mark.parametrize("label", list(CODECS))
def test_simulated_lgreco_equals_real_run(runs, label):
    model, sim = _simulate(*CODECS[label], "lgreco")
    assert _equal({n: p.detach() for n, p in model.named_parameters()}, runs[0][f"{label}-lgreco"]["params"])
    assert sim.decisions == runs[0][f"{label}-lgreco"]["decisions"]
    for rank in (0, 1):
        real = TrafficLog.from_dict(runs[rank][f"{label}-lgreco"]["traffic"])
        assert [r for r in sim.traffic.wire_records if r.worker == rank] == real.wire_records
    assert sum(r.nbytes for r in real.wire_records if r.kind == "choice") == 2 * 8 * 6  # 2 decisions x 6 layers


def _warm_q(worker, key):
    """The PowerSGD warm-start Q the worker's codec keeps for ``key``."""
    return worker.codec_for(key).codec.get_warm_start(key)


def test_layer_switch_drops_warm_start_and_keeps_residual():
    spec = CodecSpec(name="powersgd", params={"rank": 4}, error_feedback=True)
    workers = [WorkerCodecs(spec, rank=r) for r in range(2)]
    agg = Aggregator(workers, LocalCollective(2))
    g = torch.Generator().manual_seed(0)
    grads = [[torch.randn(16, 12, generator=g), torch.randn(20, 10, generator=g)] for _ in range(2)]
    agg.aggregate(grads, ["a", "b"], step=0)
    assert _warm_q(workers[0], "a").shape == (12, 4)
    res_a = workers[1].codec_for("a").memory["a"].clone()
    res_b = workers[1].codec_for("b").memory["b"].clone()
    changed = set_layer_params(spec, workers, {"a": {"rank": 2}, "b": {"rank": 4}})
    assert changed == ["a"]
    for w in workers:
        assert _warm_q(w, "a") is None and w.built_codec({"rank": 4}).codec.get_warm_start("a") is None
        assert _warm_q(w, "b").shape == (10, 4)
    assert workers[1].codec_for("a").codec.rank == 2
    assert torch.equal(workers[1].codec_for("a").memory["a"], res_a)  # moved to the rank-2 codec
    assert torch.equal(workers[1].codec_for("b").memory["b"], res_b)
    out = agg.aggregate(grads, ["a", "b"], step=1)  # a fresh rank-2 Q, no shape error
    assert _warm_q(workers[0], "a").shape == (12, 2) and out[0].shape == (16, 12)
    # the update of "a" is (rank-2 approximation of grad + residual), mean over workers: rank <= 2
    assert torch.linalg.matrix_rank(out[0]) <= 2


def test_make_policy_reads_the_codec_default():
    qs = make_policy("lgreco", CodecSpec(name="qsgd", params={"levels": 7}), every=5)
    assert qs.ladder.axis_values[qs.ladder.reference_index] == 4 and qs.ladder.default == 7
    ps = make_policy("accordion", CodecSpec(name="powersgd", params={"rank": 4, "seed": 3}), every=5)
    assert ps.ladder.values == (2, 3, 4, 5, 6, 7, 8) and ps.ladder.base == {"seed": 3}
    assert (ps.accordion.low, ps.accordion.high) == (8, 2)  # the paper's {D/2, 2D}
    tk = make_policy("lgreco+accordion", CodecSpec(name="topk", params={"ratio": 0.01}), every=5)
    assert (tk.accordion.low, tk.accordion.high) == pytest.approx((0.02, 0.005))
    tlc = make_policy("accordion", CodecSpec(name="3lc"), every=5)
    assert (tlc.accordion.low, tlc.accordion.high) == pytest.approx((1.0, 1.9))  # larger s = more zeros
    with pytest.raises(ValueError):
        make_policy("nope", CodecSpec(name="powersgd"), every=5)
    with pytest.raises(ValueError):  # 5 levels is no whole number of bits: not a ladder default
        make_policy("lgreco", CodecSpec(name="qsgd", params={"levels": 5}), every=5)


def test_bucket_priority_objective_in_the_hook_equals_the_simulator(runs):
    # Appendix A: bytes x (bucket + 1): the policy sees the hook's bucket layout (3 buckets here)
    r0, r1 = runs[0]["powersgd-priority"], runs[1]["powersgd-priority"]
    assert _equal(r0["params"], r1["params"]) and r0["decisions"] == r1["decisions"] and r0["restored"]
    model, sim = _simulate(*CODECS["powersgd"], ("lgreco", {"objective": "priority"}))
    assert sim.decisions == r0["decisions"]
    assert _equal({n: p.detach() for n, p in model.named_parameters()}, r0["params"])
    assert set(sim.policy.layer_bucket.values()) == {0, 1, 2}


def test_train_main_exposes_the_policy():
    from gcbench.commands.train import train_main

    kw = {"codec_params": {"rank": 4}, "error_feedback": True, "print_report": False, "bucket_cap_mb": CAP_MB}
    rep = train_main("powersgd", 2, 7, None, simulate=True, adaptive="lgreco", adaptive_every=3, **kw)
    assert rep["adaptive"]["policy"] == "lgreco" and [d["step"] for d in rep["adaptive"]["decisions"]] == [3, 6]
    uni = train_main("powersgd", 2, 7, None, simulate=True, **kw)
    assert "adaptive" not in uni and rep["params_digest"] != uni["params_digest"]
    with pytest.raises(ValueError):
        train_main("powersgd", 2, 7, None, simulate=True, adaptive="nope", **kw)


def _bucket_bytes(traffic, step):
    log = TrafficLog.from_dict(traffic)
    out = {}
    for r in log.wire_records:
        if r.step == step and r.bucket >= 0:
            out[r.bucket] = out.get(r.bucket, 0) + r.nbytes
    return out


def test_time_objective_in_the_hook_calibrates_fits_and_decides(runs):
    r0, r1 = runs[0]["powersgd-time"], runs[1]["powersgd-time"]
    assert _equal(r0["params"], r1["params"]) and r0["decisions"] == r1["decisions"] and r0["restored"]
    assert [d["step"] for d in r0["decisions"]] == [2 * EVERY]  # warm-up 3: the only decision at step 6
    # calibration (steps 1-4): every rank applied the same probe settings, so bucket sizes vary from step to step
    probes = [_bucket_bytes(r0["traffic"], s) for s in range(1, 5)]
    assert len({tuple(sorted(p.items())) for p in probes}) > 1
    assert probes == [_bucket_bytes(r1["traffic"], s) for s in range(1, 5)]
    # step 5: the reference setting is back: the same bucket sizes as the uniform run
    assert _bucket_bytes(r0["traffic"], 5) == _bucket_bytes(runs[0]["powersgd-uniform"]["traffic"], 5)
    (fit,) = r0["time_fits"]
    assert fit["step"] == 6 and fit["samples"] == 5 and len(fit["coefficients"]) == r0["buckets"] == 3
    assert all(c > 0 for c in fit["coefficients"]) and r0["coefficients"] == fit["coefficients"]


def test_sync_time_model_recovers_per_bucket_coefficients():
    from gcbench.envs.adaptive import SyncTimeModel

    tm = SyncTimeModel(7, calibrate=4, start=1, seed=3)
    assert [tm.calibrating(s) for s in range(7)] == [False, True, True, True, True, False, False] and tm.end == 5
    assert tm.probe(2, 6) == tm.probe(2, 6) and tm.probe(2, 6) != tm.probe(3, 6)  # seeded by step, same on every rank
    assert all(0 <= j < 7 for j in tm.probe(4, 50))
    rng = np.random.default_rng(0)
    true = np.array([2e-9, 5e-9, 1e-9])
    for step in range(12):
        nbytes = rng.integers(1_000, 100_000, 3)
        for b in range(3):  # the step's time: the buckets' bytes priced by their coefficients, + a constant
            tm.record(step, b, int(nbytes[b]), float(true[b] * nbytes[b]) + (1e-4 if b == 0 else 0.0))
        tm.end_step(step)
    assert [s for s, _, _ in tm.samples] == list(range(1, 12))  # step 0 (DDP's single bucket) is never a sample
    fit = tm.fit(12)
    assert not fit["fallback"] and fit["r2"] > 0.999
    np.testing.assert_allclose(fit["coefficients"], true, rtol=1e-6)
    assert fit["intercept"] == pytest.approx(1e-4, rel=1e-5)
    few = SyncTimeModel(7)
    few.record(1, 0, 10, 0.1)
    few.end_step(1)
    assert few.fit(2, buckets=3) == {"step": 2, "samples": 1, "intercept": 0.0, "r2": None, "fallback": True,
                                     "coefficients": [1.0, 1.0, 1.0]}
    free = SyncTimeModel(7, floor=0.1)  # bucket 1's bytes cost nothing: raised to 10% of the largest price
    for step in range(1, 8):
        free.record(step, 0, 1000 * step, 1e-6 * step)
        free.record(step, 1, 500 * (step % 3 + 1), 0.0)
        free.end_step(step)
    c = free.fit(8)["coefficients"]
    assert c[0] == pytest.approx(1e-9, rel=1e-6) and c[1] == pytest.approx(1e-10, rel=1e-6)


def test_time_objective_options_are_validated():
    from gcbench.envs.ddp_hook import GCBenchHookState

    model = build_model("mlp", seed=0)
    kw = {"error_feedback": True, "model": model}
    st = GCBenchHookState("powersgd", {"rank": 4}, policy="lgreco", adaptive_objective="time", adaptive_every=5,
                          adaptive_warmup=2, time_calibration=6, **kw)
    assert st.policy.objective == "time" and st.time_model.end == 7
    with pytest.raises(ValueError, match="before the first decision"):
        GCBenchHookState("powersgd", {"rank": 4}, policy="lgreco", adaptive_objective="time", adaptive_every=5,
                         adaptive_warmup=0, time_calibration=6, **kw)
    with pytest.raises(ValueError, match="L-GreCo policy"):
        GCBenchHookState("powersgd", {"rank": 4}, policy="accordion", adaptive_objective="time", **kw)
    with pytest.raises(ValueError, match="adaptive_objective"):
        GCBenchHookState("powersgd", {"rank": 4}, policy="lgreco", adaptive_objective="speed", **kw)
    pr = GCBenchHookState("powersgd", {"rank": 4}, policy="lgreco", adaptive_objective="priority", **kw)
    assert pr.policy.objective == "priority" and pr.time_model is None
