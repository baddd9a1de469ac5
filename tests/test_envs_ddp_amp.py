"""The DDP hook with a loss scaler (``torch.amp.GradScaler``): 2 gloo ranks, several buckets.

Mixed-precision training scales the loss, and a scale too large for a step makes that step's
gradients overflow; the scaler then skips the optimizer step and lowers the scale. With
``non_finite="nan"`` the hook hands such a step NaN on every rank instead of raising: here rank 1's
first layer gets an Inf gradient at one step (its bucket is DDP's last), the scaler skips that step on
both ranks, and training goes on, the ranks identical. The bucket that held the Inf sends a 4-byte
flag and no payload, and its tensors' codec state (error feedback) does not move. Two simulated
workers with the same option give the ranks' parameters and bytes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gcbench.envs.launch import launch

from gcbench.workloads.training import batch_indices
from gcbench.workloads.models import build_model

pytestmark = pytest.mark.distributed

STEPS = 5
BAD_STEP = 2
BATCH = 16
CAP_MB = 0.001  # the MLP's layers land in several buckets (as in test_envs_ddp)
# label -> (registry name, params, the hook's other options)
CODECS = {
    "fp16": ("fp16", {}, {}),
    "qsgd": ("qsgd", {}, {}),
    "topk-ef": ("topk", {"ratio": 0.05}, {"error_feedback": True}),
    "topk-ef-overlap": ("topk", {"ratio": 0.05}, {"error_feedback": True, "overlap": True}),
    "powersgd-ef": ("powersgd", {"rank": 2}, {"error_feedback": True}),
    "sketched": ("sketched-sgd", {}, {}),
    # shared random coordinates summed tensor by tensor: the skipped step draws on no rank
    "randomk": ("randomk", {"ratio": 0.1}, {}),
    # error feedback inside the registry entry
    "3lc": ("3lc", {}, {}),
    # L-GreCo deciding every step from step 1: the skipped step's gradients are not observed
    "powersgd-lgreco": ("powersgd", {}, {"policy": "lgreco", "adaptive_every": 1, "adaptive_warmup": 1}),
    # the whole model as one tensor (gcbench_global_hook): one flag a step, its key GLOBAL_KEY
    "topk-ef-global": ("topk", {"ratio": 0.05}, {"error_feedback": True, "whole_model": True}),
}
EF = [k for k, (_, _, options) in CODECS.items() if options.get("error_feedback")] + ["3lc"]


def _train(ctx, label: str, non_finite: str, where: str = "first", device: str = "cpu", autocast: torch.dtype | None = None):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_global_hook, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    x_all, y_all = data.x.to(device), data.y.to(device)
    model = build_model("mlp", seed=0).to(device)
    names = [name for name, _ in model.named_parameters()]
    first = names[0] if where == "first" else names[-2]  # the first layer's weight or the last's
    step_now = [0]

    def poison(g: torch.Tensor) -> torch.Tensor:  # rank 1's layer overflows at BAD_STEP
        if ctx.rank == 1 and step_now[0] == BAD_STEP:
            g = g.clone()
            g.view(-1)[3] = float("inf")
        return g

    dict(model.named_parameters())[first].register_hook(poison)
    ddp = DDP(model, bucket_cap_mb=CAP_MB, device_ids=None)
    name, params, options = CODECS[label]
    options = dict(options)
    whole = options.pop("whole_model", False)
    state = GCBenchHookState(name, params, model=model, non_finite=non_finite, progress=ctx.progress, **options)
    ddp.register_comm_hook(state, gcbench_global_hook if whole else gcbench_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(torch.device(device).type, init_scale=2.0**10)
    history, scales, codec_state = [], [], []
    for step in range(STEPS):
        step_now[0] = step
        idx = batch_indices(step, ctx.rank, ctx.world_size, BATCH, 0)
        opt.zero_grad(set_to_none=True)
        try:
            with torch.autocast(torch.device(device).type, dtype=autocast, enabled=autocast is not None):
                loss = F.cross_entropy(ddp(x_all[idx]), y_all[idx])
            scaler.scale(loss).backward()
        except Exception as err:  # noqa: BLE001 - the test reports what came out
            state.close()
            return {"error": f"{type(err).__name__}: {err}"}
        scaler.step(opt)
        scaler.update()
        state.wait()
        history.append({n: p.detach().clone() for n, p in model.named_parameters()})
        scales.append(scaler.get_scale())
        codec_state.append(_tensors_of(state.codecs.state_dict(), first if where == "first" and not whole else ""))
    saved = state.state_dict()
    again = GCBenchHookState(name, params, model=model, non_finite=non_finite, **options)
    again.load_state_dict(saved)
    state.close()
    again.close()
    wire = [(r.step, r.kind, r.nbytes, r.bucket) for r in state.traffic.wire_records]
    return {"history": history, "scales": scales, "non_finite_steps": list(state.non_finite_steps),
            "restored_non_finite_steps": list(again.non_finite_steps),
            "first": first, "codec_state": codec_state, "wire": wire, "layout": dict(state.bucket_layout)}


def _tensors_of(tree, key: str, path: str = "") -> dict[str, torch.Tensor]:
    """Copies of the tensors in a nested state dict whose path names ``key``."""
    if isinstance(tree, torch.Tensor):
        return {path: tree.clone()} if key in path else {}
    out = {}
    for k, v in (tree.items() if isinstance(tree, dict) else []):
        out.update(_tensors_of(v, key, f"{path}/{k}"))
    return out


def _runs(ctx, non_finite, where, device="cpu", autocast=None, labels=None):
    return {label: _train(ctx, label, non_finite, where, device, autocast) for label in (labels or CODECS)}


@pytest.fixture(scope="module")
def runs():
    """Rank 1's first layer overflows: its bucket is DDP's last, the step's other buckets were
    aggregated before it."""
    return launch(_runs, 2, ("nan", "first"), timeout_s=60)


@pytest.fixture(scope="module")
def runs_early():
    """Rank 1's last layer overflows: its bucket is DDP's first, and every rank knows the step's
    result is NaN before the other buckets arrive."""
    return launch(_runs, 2, ("nan", "last"), timeout_s=60)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("which", ["runs", "runs_early"])
@pytest.mark.parametrize("label", list(CODECS))
def test_the_scaler_skips_the_overflowing_step_on_every_rank(request, which, label):
    runs = request.getfixturevalue(which)
    for rank in (0, 1):
        run = runs[rank][label]
        assert "error" not in run, run.get("error")
        assert run["non_finite_steps"] == [BAD_STEP]
        assert run["restored_non_finite_steps"] == [BAD_STEP]  # the list travels with the hook's checkpoint
        h = run["history"]
        assert _equal(h[BAD_STEP], h[BAD_STEP - 1])  # skipped: the parameters did not move
        assert not _equal(h[BAD_STEP + 1], h[BAD_STEP])  # and training went on
        assert run["scales"][BAD_STEP] == run["scales"][BAD_STEP - 1] / 2
        assert all(torch.isfinite(p).all() for p in h[-1].values())
    assert _equal(runs[0][label]["history"][-1], runs[1][label]["history"][-1])


@pytest.mark.parametrize("label", list(CODECS))
def test_the_non_finite_bucket_sends_a_flag_and_no_payload(runs, label):
    run = runs[0][label]
    whole = CODECS[label][2].get("whole_model")  # one tensor, recorded as bucket 0
    first_bucket = 0 if whole else next(b for b, keys in run["layout"].items() if run["first"] in keys)
    bad = [(kind, n) for step, kind, n, b in run["wire"] if step == BAD_STEP and b == first_bucket]
    assert bad == [("finite-flag", 4)]
    # every other step's buckets send their flag and then their payloads
    good = [kind for step, kind, _, b in run["wire"] if step == BAD_STEP + 1 and b == first_bucket]
    assert good[0] == "finite-flag" and len(good) > 1


@pytest.mark.parametrize("label", EF)
def test_error_feedback_of_the_non_finite_bucket_does_not_move(runs, label):
    states = runs[0][label]["codec_state"]
    assert states[BAD_STEP - 1], "no error-feedback state found for the first layer"
    assert _equal(states[BAD_STEP], states[BAD_STEP - 1])
    assert not _equal(states[BAD_STEP + 1], states[BAD_STEP])


@pytest.mark.parametrize("label", list(CODECS))
def test_after_a_non_finite_first_bucket_the_step_sends_nothing_more(runs_early, label):
    run = runs_early[0][label]
    # (a policy's broadcast of its choice comes before the step's first bucket: bucket -1)
    assert [(kind, n) for step, kind, n, b in run["wire"] if step == BAD_STEP and b >= 0] == [("finite-flag", 4)]


@pytest.mark.parametrize("label", EF)
def test_no_error_feedback_moves_after_a_non_finite_first_bucket(runs_early, label):
    states = runs_early[0][label]["codec_state"]  # every layer's
    assert len(states[BAD_STEP - 1]) >= 2
    assert _equal(states[BAD_STEP], states[BAD_STEP - 1])


def _simulate(label: str, where: str):
    """The training of ``label`` that ``runs`` (``where="first"``) or ``runs_early`` (``"last"``) ran
    on 2 ranks, with 2 simulated workers in this process: ``(final parameters, worker 0's wire
    records, skipped steps)``."""
    from gcbench.data.digits import load_digits_tensors
    from gcbench.envs.simulated import SimulatedCluster

    name, params, options = CODECS[label]
    data = load_digits_tensors()
    model = build_model("mlp", seed=0)
    names = [n for n, _ in model.named_parameters()]
    first = names[0] if where == "first" else names[-2]
    now = {"step": 0, "worker": 0}

    def poison(g: torch.Tensor) -> torch.Tensor:
        if now["worker"] == 1 and now["step"] == BAD_STEP:
            g = g.clone()
            g.view(-1)[3] = float("inf")
        return g

    dict(model.named_parameters())[first].register_hook(poison)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    sim = SimulatedCluster(model, 2, name, params, error_feedback=options.get("error_feedback", False),
                           bucket_cap_mb=CAP_MB, non_finite="nan")
    for step in range(STEPS):
        now["step"] = step
        opt.zero_grad(set_to_none=True)

        def closure(w: int, step: int = step) -> torch.Tensor:
            now["worker"] = w
            idx = batch_indices(step, w, 2, BATCH, 0)
            return scaler.scale(F.cross_entropy(model(data.x[idx]), data.y[idx]))

        sim.backward(closure)
        scaler.step(opt)
        scaler.update()
    wire = [(r.step, r.kind, r.nbytes, r.bucket) for r in sim.traffic.wire_records if r.worker == 0]
    return {n: p.detach().clone() for n, p in model.named_parameters()}, wire, list(sim.non_finite_steps)


@pytest.mark.parametrize("which", ["runs", "runs_early"])
@pytest.mark.parametrize("label", ["fp16", "qsgd", "topk-ef", "powersgd-ef", "sketched"])
def test_the_simulated_cluster_skips_the_same_step_with_the_same_bytes(request, which, label):
    params, wire, skipped = _simulate(label, "first" if which == "runs" else "last")
    real = request.getfixturevalue(which)[0][label]
    assert skipped == real["non_finite_steps"] == [BAD_STEP]
    assert _equal(params, real["history"][-1])
    assert wire == real["wire"]


def test_without_the_option_the_overflow_raises_on_every_rank():
    results = launch(_train, 2, ("qsgd", "raise"), timeout_s=60)
    assert all("NonFiniteGradientError" in r.get("error", "") for r in results), results


def test_an_unknown_mode_is_refused():
    from gcbench.envs.ddp_hook import GCBenchHookState

    with pytest.raises(ValueError, match="non_finite"):
        GCBenchHookState("qsgd", non_finite="skip")


@pytest.mark.cuda
def test_two_ranks_sharing_a_gpu_skip_the_overflowing_step_under_autocast():
    """float16 autocast on CUDA, 2 gloo ranks on one GPU, top-k with error feedback and overlap
    (per-bucket streams) and QSGD: the scaler skips the overflowing step on both ranks."""
    labels = ["topk-ef-overlap", "qsgd"]
    results = launch(_runs, 2, ("nan", "first", "cuda:0", torch.float16, labels), timeout_s=120)
    for label in labels:
        for rank in (0, 1):
            run = results[rank][label]
            assert "error" not in run, run.get("error")
            assert run["non_finite_steps"] == [BAD_STEP]
            assert _equal(run["history"][BAD_STEP], run["history"][BAD_STEP - 1])
            assert run["scales"][BAD_STEP] == run["scales"][BAD_STEP - 1] / 2
        assert _equal(results[0][label]["history"][-1], results[1][label]["history"][-1])
