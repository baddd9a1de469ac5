"""Whole-model compression in real DDP (:func:`gcbench.envs.ddp_hook.gcbench_global_hook`): global
TopK (L-GreCo Sec. 5.3) on 2 gloo ranks, checked against a naive global top-k of each rank's local
gradients computed here, and the identity codec against DDP without a hook."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from gcbench.envs.launch import launch

from gcbench.workloads.models import build_model
from gcbench.workloads.training import batch_indices

pytestmark = pytest.mark.distributed

STEPS = 3
BATCH = 16
CAP_MB = 0.001  # three DDP buckets for the digits MLP from step 1 on
RATIO = 0.05


def _rank(ctx, configs):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_global_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    out = {}
    for label, cfg in configs.items():
        model = build_model("mlp", seed=0)
        ddp = DDP(model, bucket_cap_mb=CAP_MB)
        state = None
        if cfg is not None:
            ef = len(cfg) > 2 and cfg[2]
            state = GCBenchHookState(cfg[0], cfg[1], error_feedback=ef, model=model, progress=ctx.progress)
            ddp.register_comm_hook(state, gcbench_global_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        local, synced = [], []
        for step in range(STEPS):
            idx = batch_indices(step, ctx.rank, ctx.world_size, BATCH, 0)
            plain = copy.deepcopy(model)  # this rank's own gradient, without DDP
            F.cross_entropy(plain(data.x[idx]), data.y[idx]).backward()
            local.append({n: p.grad.clone() for n, p in plain.named_parameters()})
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(data.x[idx]), data.y[idx]).backward()
            synced.append({n: p.grad.clone() for n, p in model.named_parameters()})
            opt.step()
        out[label] = {
            "local": local,
            "synced": synced,
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "buckets": len(state.bucket_layout) if state else None,
            "steps_seen": state.step if state else None,
            "wire": sum(r.nbytes for r in state.traffic.wire_records) if state else None,
        }
    return out


@pytest.fixture(scope="module")
def runs():
    configs = {"no-hook": None, "identity": ("identity", {}), "topk": ("topk", {"ratio": RATIO}),
               "topk-ef": ("topk", {"ratio": RATIO}, True)}
    return launch(_rank, 2, (configs,), timeout_s=30)


def _naive_global_topk(grads: dict[str, torch.Tensor], ratio: float) -> dict[str, torch.Tensor]:
    """Keep the round(ratio * n) largest |g| over all layers together, zero the rest."""
    names = list(grads)
    flat = torch.cat([grads[n].reshape(-1) for n in names])
    k = max(1, round(ratio * flat.numel()))
    keep = torch.zeros_like(flat)
    idx = flat.abs().argsort(descending=True)[:k]
    keep[idx] = flat[idx]
    out, offset = {}, 0
    for n in names:
        m = grads[n].numel()
        out[n] = keep[offset : offset + m].view_as(grads[n])
        offset += m
    return out


def test_identity_equals_ddp_without_hook(runs):
    for rank in runs:
        ref, got = rank["no-hook"]["params"], rank["identity"]["params"]
        assert ref.keys() == got.keys()
        for n in ref:
            torch.testing.assert_close(got[n], ref[n], rtol=1e-6, atol=1e-7)
    assert runs[0]["identity"]["buckets"] == 3  # the whole model was gathered from several buckets
    assert runs[0]["identity"]["steps_seen"] == STEPS


def test_global_topk_equals_naive_selection_over_all_layers(runs):
    for step in range(STEPS):
        naive = [_naive_global_topk(r["topk"]["local"][step], RATIO) for r in runs]
        for n in naive[0]:
            expected = (naive[0][n] + naive[1][n]) / 2
            for r in runs:
                torch.testing.assert_close(r["topk"]["synced"][step][n], expected, rtol=1e-5, atol=1e-7)


def test_global_topk_with_error_feedback_equals_naive(runs):
    # the residual is one vector over the whole model: entry i must be the same parameter entry at
    # every step although DDP rebuilds its buckets after step 0 (one bucket, then three)
    residual = [None, None]
    for step in range(STEPS):
        kept = []
        for w, r in enumerate(runs):
            local = r["topk-ef"]["local"][step]
            corrected = {n: g + (residual[w][n] if residual[w] else 0) for n, g in local.items()}
            k = _naive_global_topk(corrected, RATIO)
            residual[w] = {n: corrected[n] - k[n] for n in corrected}
            kept.append(k)
        for n in kept[0]:
            expected = (kept[0][n] + kept[1][n]) / 2
            for r in runs:
                torch.testing.assert_close(r["topk-ef"]["synced"][step][n], expected, rtol=1e-5, atol=1e-6)


def test_global_topk_is_not_layerwise(runs):
    """The hook's averaged gradient holds the union of the two ranks' selections. Per-layer TopK would
    keep k = max(1, round(RATIO * n)) entries of each layer on each rank: between k and 2k nonzeros
    per layer. Global TopK keeps K = round(RATIO * N) entries of the whole model on each rank: between
    K and 2K over the model, shared unevenly by the layers."""
    for step in range(STEPS):
        synced = runs[0]["topk"]["synced"][step]
        count = {n: int((g != 0).sum()) for n, g in synced.items()}
        layer_k = {n: max(1, round(RATIO * g.numel())) for n, g in synced.items()}
        model_k = round(RATIO * sum(g.numel() for g in synced.values()))
        assert model_k <= sum(count.values()) <= 2 * model_k, (step, count, model_k)
        outside = [n for n in count if not layer_k[n] <= count[n] <= 2 * layer_k[n]]
        assert outside, f"step {step}: every layer kept its per-layer share {count} (per-layer k {layer_k})"


def test_replicas_identical(runs):
    a, b = runs[0]["topk"]["params"], runs[1]["topk"]["params"]
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert 0 < runs[0]["topk"]["wire"] < runs[0]["identity"]["wire"]


def test_policy_refused():
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_global_hook

    model = build_model("mlp", seed=0)
    state = GCBenchHookState("topk", {"ratio": RATIO}, model=model, policy="lgreco")

    class _Bucket:  # the hook refuses before reading the bucket
        pass

    with pytest.raises(ValueError, match="per-layer policy"):
        gcbench_global_hook(state, _Bucket())


def _after_a_failed_job(ctx):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_global_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = build_model("mlp", seed=0)
    ddp = DDP(model, bucket_cap_mb=CAP_MB)
    state = GCBenchHookState("identity", {}, model=model, overlap=True, progress=ctx.progress)
    ddp.register_comm_hook(state, gcbench_global_hook)
    state.aggregator  # noqa: B018 - binds the communication thread
    state._comm.submit(lambda: 1 / 0)  # noqa: SLF001 - a job that fails: the thread refuses the later ones
    state._comm.drain()  # noqa: SLF001
    x = torch.randn(4, 64)
    try:
        F.cross_entropy(ddp(x), torch.zeros(4, dtype=torch.long)).backward()
    except Exception as err:  # noqa: BLE001 - DDP hands the future's error over in its own wrapping
        return str(err)
    return "no error"


def test_overlapped_global_hook_fails_its_held_futures_after_a_failed_job():
    """With overlap the aggregation is a job of the communication thread, which refuses jobs after a
    failed one without running them; the futures DDP holds for the model's buckets then carry that
    refusal, so backward raises instead of waiting for ever."""
    (message,) = launch(_after_a_failed_job, 1, timeout_s=10)
    assert "earlier communication job failed" in message, message
