"""The overlapping DDP hook (``overlap=True``) against the synchronous reference, 2 gloo ranks.

One launch trains the digits MLP (three DDP buckets) for a few steps with every codec family, each
twice - overlap off and on - and the tests require bit-identical parameters, identical wire
traffic and policy decisions, and no communication thread left once the states are closed.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time

import pytest
import torch
import torch.nn.functional as F
from gcbench.envs.errors import WorkerFailedError
from gcbench.envs.launch import launch

from gcbench.workloads.models import build_model
from gcbench.workloads.training import batch_indices

pytestmark = pytest.mark.distributed

STEPS = 8  # the L-GreCo run decides at step 6 and uses the new warm starts at step 7
BATCH = 16
CAP_MB = 0.001  # three buckets for the digits MLP (see test_envs_ddp)
LR, MOMENTUM = 0.05, 0.9


def _require(module: str) -> None:
    # Every module named here exists: a missing one (a move, a rename) fails collection instead of skipping.
    if importlib.util.find_spec(f"gcbench.compressors.{module}") is None:
        raise ImportError(f"gcbench.compressors.{module} is missing")


# label -> (codec, params, error feedback, extra state kwargs, module that must exist)
CODECS = {
    "identity (linear, fused)": ("identity", {}, False, {}, "codecs.identity"),
    "fp16 (linear, fused)": ("fp16", {}, False, {}, "codecs.identity"),
    "randomk (linear all_reduce)": ("randomk", {"ratio": 0.1}, False, {}, "codecs.randomk"),
    "topk+ef (all_gather)": ("topk", {"ratio": 0.05}, True, {}, "codecs.topk"),
    "qsgd (all_gather)": ("qsgd", {}, False, {}, "codecs.qsgd"),
    "powersgd+ef (rounds)": ("powersgd", {"rank": 2}, True, {}, "codecs.powersgd"),
    "sketched-sgd (rounds)": ("sketched-sgd", {}, False, {}, "methods.sketched_sgd"),
    # raises out.weight to rank 8 at step 6: its fresh factors once came out different on the
    # communication thread (OpenMP thread count is per thread), caught only by this configuration
    "powersgd+lgreco (policy)": ("powersgd", {"rank": 4}, True, {"policy": "lgreco", "adaptive_every": 4, "adaptive_warmup": 2}, "codecs.powersgd"),
}
for _cfg in CODECS.values():
    _require(_cfg[4])


def _train(ctx, label, cfg, overlap, steps, global_hook=False, device="cpu"):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_global_hook, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    name, params, ef, extra, _ = cfg
    x, y = data.x.to(device), data.y.to(device)
    model = build_model("mlp", seed=0).to(device)
    ddp = DDP(model, bucket_cap_mb=CAP_MB, **({"device_ids": [model_device(model)]} if device != "cpu" else {}))
    state = GCBenchHookState(name, params, error_feedback=ef, model=model, progress=ctx.progress, overlap=overlap, **extra)
    ddp.register_comm_hook(state, gcbench_global_hook if global_hook else gcbench_hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for step in range(steps):
        idx = batch_indices(step, ctx.rank, ctx.world_size, BATCH, 0).to(device)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x[idx]), y[idx]).backward()
        opt.step()
    comm_name = state.comm_thread.name if state.comm_thread is not None else None
    state.close()
    return {
        "params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()},
        "wire": [(r.step, r.seq, r.op, r.kind, r.nbytes) for r in state.traffic.wire_records],
        "layout": dict(state.bucket_layout),
        "decisions": state.decisions,
        "comm_thread": comm_name,
    }


def model_device(model):
    return next(model.parameters()).device.index


def _rank_runs(ctx, configs, steps):
    out = {}
    for label, cfg in configs.items():
        out[label] = {ov: _train(ctx, label, cfg, ov, steps) for ov in (False, True)}
    if "topk+ef (all_gather)" in configs:
        out["global topk"] = {ov: _train(ctx, "global", configs["topk+ef (all_gather)"], ov, steps, True) for ov in (False, True)}
    out["threads"] = [t.name for t in threading.enumerate()]
    return out


@pytest.fixture(scope="module")
def runs():
    return launch(_rank_runs, 2, (CODECS, STEPS), timeout_s=60)


def _equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("label", [*CODECS, "global topk"])
def test_overlap_is_bit_identical_to_the_synchronous_hook(runs, label):
    for rank in (0, 1):
        sync, over = runs[rank][label][False], runs[rank][label][True]
        assert _equal(sync["params"], over["params"]), f"{label}: overlap changed the parameters on rank {rank}"
        assert sync["wire"] == over["wire"], f"{label}: overlap changed the traffic"
        assert sync["decisions"] == over["decisions"]
        assert over["comm_thread"] is not None and sync["comm_thread"] is None
    assert _equal(runs[0][label][True]["params"], runs[1][label][True]["params"])
    assert len(runs[0][label][True]["layout"]) > 1, "the test needs more than one DDP bucket"


def test_the_policy_decides_under_overlap(runs):
    label = "powersgd+lgreco (policy)"
    assert runs[0][label][True]["decisions"], "L-GreCo made no decision"
    assert runs[0][label][True]["decisions"] == runs[1][label][True]["decisions"]


def test_the_fused_path_sends_one_all_reduce_per_bucket(runs):
    """identity takes the fused path: one all_reduce of 4 bytes per element per bucket and step
    (the per-tensor path would send the same bytes; that its results are equal is shown above)."""
    label = "identity (linear, fused)"
    over = runs[0][label][True]
    n_params = sum(p.numel() for p in over["params"].values())
    payload = [r for r in over["wire"] if r[3] == "payload"]
    assert sum(r[4] for r in payload) == 4 * n_params * STEPS
    # one all_reduce per bucket: DDP's first step has one bucket, it rebuilds them after it
    assert len(payload) == 1 + len(over["layout"]) * (STEPS - 1)


def test_no_thread_left_after_close(runs):
    for rank in (0, 1):
        names = [runs[rank][label][True]["comm_thread"] for label in runs[rank] if label != "threads"]
        assert all(n and n.startswith("gcbench-comm") for n in names)
        assert not [t for t in runs[rank]["threads"] if t.startswith("gcbench-comm")], runs[rank]["threads"]


def test_comm_thread_orders_jobs_and_fails_later_ones_after_an_error():
    from gcbench.envs.comm_thread import CommThread, CommThreadError

    comm = CommThread()
    seen: list[int] = []
    futs = [comm.submit(lambda i=i: (time.sleep(0.001 * (5 - i)), seen.append(i), i)[2]) for i in range(5)]
    assert [f.wait() for f in futs] == list(range(5)) and seen == list(range(5))
    bad = comm.submit(lambda: 1 / 0)
    after = comm.submit(lambda: 42)
    with pytest.raises(ZeroDivisionError):
        bad.wait()
    with pytest.raises(CommThreadError, match="earlier communication job failed"):
        after.wait()
    name = comm.name
    comm.close()
    comm.close()
    assert name not in [t.name for t in threading.enumerate()]
    with pytest.raises(CommThreadError):
        comm.submit(lambda: 0)


def _die_mid_bucket(ctx, steps):
    """Rank 1 exits inside its communication thread, between two collectives of step 2."""
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    model = build_model("mlp", seed=0)
    ddp = DDP(model, bucket_cap_mb=CAP_MB)
    calls = [0]

    def progress():
        ctx.progress()
        calls[0] += 1
        if ctx.rank == 1 and calls[0] == 12 and threading.current_thread().name.startswith("gcbench-comm"):
            os._exit(3)

    state = GCBenchHookState("topk", {"ratio": 0.1}, model=model, progress=progress, overlap=True)
    ddp.register_comm_hook(state, gcbench_hook)
    for step in range(steps):
        idx = batch_indices(step, ctx.rank, ctx.world_size, BATCH, 0)
        F.cross_entropy(ddp(data.x[idx]), data.y[idx]).backward()
    state.close()
    return calls[0]


def test_a_rank_dying_mid_bucket_ends_the_run_with_a_clear_error():
    t0 = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        launch(_die_mid_bucket, 2, (6,), timeout_s=20)
    assert info.value.reason == "died" and info.value.ranks == (1,), str(info.value)
    assert time.monotonic() - t0 < 20 + 10


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (NCCL)")
def test_overlap_on_cuda_streams_is_bit_identical():
    ranks = min(2, torch.cuda.device_count())  # NCCL refuses two ranks on one GPU
    for cfg in (CODECS["powersgd+ef (rounds)"], CODECS["fp16 (linear, fused)"], CODECS["topk+ef (all_gather)"],
                CODECS["randomk (linear all_reduce)"]):  # the summed payload decoded into DDP's bucket
        sync = launch(_cuda_run, ranks, (cfg, False), backend="nccl", timeout_s=60)
        over = launch(_cuda_run, ranks, (cfg, True), backend="nccl", timeout_s=60)
        assert _equal(sync[0]["params"], over[0]["params"]), cfg[0]


def _cuda_run(ctx, cfg, overlap):
    torch.cuda.set_device(ctx.rank)
    return _train(ctx, "cuda", cfg, overlap, 3, device=f"cuda:{ctx.rank}")


def _naive_overlap(compute, shares, comms, backward_share=2 / 3, dt=1e-4):
    """Time-stepped simulation: the backward produces gradient bytes at a constant rate after the
    forward; a single link sends one ready bucket at a time in order."""
    fwd = compute * (1 - backward_share)
    total = sum(shares)
    t, i, left = 0.0, 0, None
    while i < len(shares):
        produced = 0.0 if t < fwd else min((t - fwd) / (compute * backward_share), 1.0) * total if backward_share else total
        if left is None and produced + 1e-12 >= sum(shares[: i + 1]):
            left = comms[i]
        if left is not None:
            left -= dt
            if left <= 1e-12:
                i, left = i + 1, None
        t += dt
    return max(t, compute)


@pytest.mark.parametrize("seed", range(5))
def test_overlapped_step_time_agrees_with_a_time_stepped_simulation(seed):
    import random

    from gcbench.envs.network import overlapped_step_s

    rng = random.Random(seed)
    n = rng.randint(1, 5)
    shares = [rng.uniform(0.1, 1.0) for _ in range(n)]
    comms = [rng.uniform(0.0, 0.05) for _ in range(n)]
    compute = rng.uniform(0.01, 0.1)
    got = overlapped_step_s(compute, shares, comms)
    assert got == pytest.approx(_naive_overlap(compute, shares, comms), abs=2e-4 * (n + 1))
    assert compute <= got <= compute + sum(comms) + 1e-12
    # whole-model compression (global TopK) cannot overlap: the synchronous time
    assert overlapped_step_s(compute, shares, comms, held=True) == pytest.approx(compute + sum(comms))


def test_lgreco_overlapped_model_prices_each_bucket_after_its_backward_share():
    from gcbench.envs.network import collective_time, load_profile
    from gcbench.envs.traffic import TrafficLog
    from gcbench.reproductions.lgreco.metrics import modelled_steps, overlapped_steps

    log = TrafficLog()
    for step in range(2):
        log.raw(step, 0, 3_000_000, 750_000, bucket=0)
        log.raw(step, 0, 1_000_000, 250_000, bucket=1)
        log.wire(step, 0, 0, "all_reduce", "payload", 3_000_000, bucket=0)
        log.wire(step, 0, 1, "all_reduce", "payload", 1_000_000, bucket=1)
        log.time(step, 0, "comm", 0.2)
        log.time(step, 0, "encode", 0.05)
    run = {"traffic": log.to_dict(), "step_s": [1.25, 1.25]}
    prof = load_profile("lgreco-single-node")
    c0, c1 = (collective_time(c, prof.link, prof.workers) for c in log.collectives(0))
    compute = 1.25 - 0.25
    # bucket 0 (3/4 of the bytes) is ready at 1/3 + 2/3 * 3/4 of the compute, bucket 1 at the end
    ready0, ready1 = compute * (1 / 3 + 2 / 3 * 0.75), compute
    end0 = ready0 + c0 + 0.05 * 0.75
    expect = max(end0, ready1) + c1 + 0.05 * 0.25
    assert overlapped_steps(run, "lgreco-single-node") == pytest.approx([expect, expect])
    held = overlapped_steps(run, "lgreco-single-node", held=True)
    assert held == pytest.approx([compute + c0 + c1 + 0.05] * 2)
    # the synchronous model subtracts only the measured comm and keeps the encode in the compute
    assert modelled_steps(run, "lgreco-single-node") == pytest.approx([1.25 - 0.2 + c0 + c1] * 2)


def test_gcbench_train_overlap_gives_the_same_parameters():
    from gcbench.commands.train import train_main

    kw = {"codec_params": {"rank": 2}, "error_feedback": True, "bucket_cap_mb": CAP_MB, "print_report": False, "timeout_s": 60}
    sync = train_main("powersgd", 2, 4, None, **kw)
    over = train_main("powersgd", 2, 4, None, overlap=True, **kw)
    assert over["replicas_identical"] and over["params_digest"] == sync["params_digest"]
