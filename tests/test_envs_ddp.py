"""Real torch.distributed runs: 2 gloo ranks on localhost, DDP with gcbench_hook, several buckets.

One launch (module fixture) trains the digits MLP for a few steps with a codec of every family -
linear (identity, fp16, randomk), all_gather (topk, qsgd), PowerSGD with error feedback, two-round
Sketched-SGD - and without any hook (DDP's own all_reduce), with ``bucket_cap_mb`` small enough
for three buckets. The tests then compare ranks, codecs, the no-hook reference and the simulated
cluster (same seed, W = 2), which must agree bit for bit.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from gcbench.envs.errors import WorkerFailedError
from gcbench.envs.launch import launch
from gcbench.envs.simulated import SimulatedCluster, ddp_bucket_layout
from gcbench.envs.traffic import TrafficLog

from gcbench import compressors
from gcbench.workloads.models import build_model
from gcbench.workloads.training import batch_indices

pytestmark = pytest.mark.distributed

STEPS = 4
BATCH = 16
CAP_MB = 0.001  # 1048 bytes: the MLP's three layers land in three buckets (asserted below)
LR, MOMENTUM = 0.05, 0.9


def _require(module: str) -> None:
    # Every module named here exists: a missing one (a move, a rename) fails collection instead of skipping.
    if importlib.util.find_spec(f"gcbench.compressors.{module}") is None:
        raise ImportError(f"gcbench.compressors.{module} is missing")


# label -> (registry name, params, error feedback, module that must exist)
CODECS = {
    "identity": ("identity", {}, False, "codecs.identity"),
    "fp16": ("fp16", {}, False, "codecs.identity"),
    "fp16-ef": ("fp16", {}, True, "codecs.identity"),  # a residual per tensor: not the whole-bucket path
    "randomk": ("randomk", {"ratio": 0.1}, False, "codecs.randomk"),
    "topk": ("topk", {"ratio": 0.05}, False, "codecs.topk"),
    "qsgd": ("qsgd", {}, False, "codecs.qsgd"),
    "powersgd-ef": ("powersgd", {"rank": 2}, True, "codecs.powersgd"),
    "sketched": ("sketched-sgd", {}, False, "methods.sketched_sgd"),
}
for _cfg in CODECS.values():
    _require(_cfg[3])


def _registry_names() -> list[str]:
    """Every registry entry (plus Sketched-SGD), with default parameters. Each is loaded here: a codec
    that fails to import fails collection instead of dropping out of the test."""
    for e in compressors.ENTRIES:
        e.load()
    _require("methods.sketched_sgd")
    return [e.name for e in compressors.ENTRIES] + ["sketched-sgd"]


REGISTRY = _registry_names()


def test_a_codec_that_fails_to_import_fails_collection(monkeypatch):
    broken = compressors.registry.Entry("broken", "no_such_module:Codec", "a codec whose module is gone")
    monkeypatch.setattr(compressors, "ENTRIES", [*compressors.ENTRIES, broken])
    with pytest.raises(ImportError):
        _registry_names()
FAMILY = {"identity": "linear", "fp16": "linear", "fp16-ef": "linear", "randomk": "linear", "topk": "all_gather", "qsgd": "all_gather",
          "powersgd-ef": "powersgd", "sketched": "two-round"}


def _rank_runs(ctx, configs, steps):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    out = {}
    for label, cfg in configs.items():
        model = build_model("mlp", seed=0)
        ddp = DDP(model, bucket_cap_mb=CAP_MB)
        state = None
        if cfg is not None:
            name, params, ef, *rest = cfg
            named = not rest or rest[0]
            state = GCBenchHookState(name, params, error_feedback=ef, model=model if named else None, progress=ctx.progress)
            ddp.register_comm_hook(state, gcbench_hook)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        for step in range(steps):
            idx = batch_indices(step, ctx.rank, ctx.world_size, BATCH, 0)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(data.x[idx]), data.y[idx]).backward()
            opt.step()
        out[label] = {
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "traffic": state.traffic.to_dict() if state else None,
            "layout": dict(state.bucket_layout) if state else None,
            "steps_seen": state.step if state else None,
        }
    return out


@pytest.fixture(scope="module")
def runs():
    configs = {label: (name, params, ef) for label, (name, params, ef, _) in CODECS.items()}
    configs["no-hook"] = None
    # error feedback keyed without the model: keys must survive DDP's bucket rebuild
    configs["topk-ef"] = ("topk", {"ratio": 0.05}, True, True)
    configs["topk-ef-unnamed"] = ("topk", {"ratio": 0.05}, True, False)
    return launch(_rank_runs, 2, (configs, STEPS), timeout_s=30)


def _config(label):
    if label.startswith("registry:"):
        return label.split(":", 1)[1], {}, False
    name, params, ef, _ = CODECS[label]
    return name, params, ef


def _simulate(label: str):
    from gcbench.data.digits import load_digits_tensors

    name, params, ef = _config(label)
    data = load_digits_tensors()
    model = build_model("mlp", seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    sim = SimulatedCluster(model, 2, name, params, error_feedback=ef, bucket_cap_mb=CAP_MB)
    for step in range(STEPS):
        batches = [batch_indices(step, w, 2, BATCH, 0) for w in range(2)]
        opt.zero_grad(set_to_none=True)
        sim.backward(lambda w, b=batches: F.cross_entropy(model(data.x[b[w]]), data.y[b[w]]))
        opt.step()
    return model, sim


def _params_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("label", list(CODECS))
def test_replicas_stay_identical(runs, label):
    assert _params_equal(runs[0][label]["params"], runs[1][label]["params"]), f"{FAMILY[label]} codec {label}: ranks diverged"
    assert runs[0][label]["steps_seen"] == STEPS


def test_identity_hook_equals_ddp_without_hook(runs):
    # lossless codec through the linear path == DDP's own all_reduce (W = 2: a/2 + b/2 == (a+b)/2 exactly)
    assert _params_equal(runs[0]["identity"]["params"], runs[0]["no-hook"]["params"])


@pytest.mark.parametrize("label", [k for k in CODECS if k != "identity"])
def test_lossy_codecs_change_the_result(runs, label):
    # the hook really replaced DDP's all_reduce (a test that a no-op hook would fail)
    assert not _params_equal(runs[0][label]["params"], runs[0]["no-hook"]["params"])


def test_several_buckets_and_ddp_layout(runs):
    layout = runs[0]["identity"]["layout"]
    assert len(layout) == 3, layout  # several buckets, and the collectives did not hang
    model = build_model("mlp", seed=0)
    named = list(model.named_parameters())
    expected = ddp_bucket_layout([p.numel() * p.element_size() for _, p in named], int(CAP_MB * 1024 * 1024))
    assert [layout[b] for b in sorted(layout)] == [[named[i][0] for i in bucket] for bucket in expected]


def test_state_keys_without_the_model_survive_the_bucket_rebuild(runs):
    # DDP reorders and re-buckets parameters after step 0; per-tensor residuals keyed p0..p5 by first
    # appearance still find their tensor (a shape mismatch would raise StateError in the hook)
    assert _params_equal(runs[0]["topk-ef-unnamed"]["params"], runs[0]["topk-ef"]["params"])
    layout = runs[0]["topk-ef-unnamed"]["layout"]
    assert sorted(k for keys in layout.values() for k in keys) == [f"p{i}" for i in range(6)]
    assert layout[0] == ["p5", "p4"]  # reverse registration order after the rebuild


@pytest.mark.parametrize("label", list(CODECS))
def test_simulated_cluster_matches_real_run(runs, label):
    model, sim = _simulate(label)
    sim_params = {n: p.detach() for n, p in model.named_parameters()}
    assert _params_equal(sim_params, runs[0][label]["params"]), f"simulated W=2 differs from gloo for {label}"
    # same traffic, record for record: same collectives, same bytes, same raw sizes
    for rank in (0, 1):
        real = TrafficLog.from_dict(runs[rank][label]["traffic"])
        assert [r for r in sim.traffic.wire_records if r.worker == rank] == real.wire_records
        assert [r for r in sim.traffic.raw_records if r.worker == rank] == real.raw_records


def test_traffic_counts_match_hand_computation(runs):
    model = build_model("mlp", seed=0)
    numel = sum(p.numel() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    for label, bytes_per_el in (("identity", 4), ("fp16", 2)):
        log = TrafficLog.from_dict(runs[0][label]["traffic"])
        for step in range(STEPS):
            assert log.message_bytes(step=step, kind="payload") == numel * bytes_per_el
            assert log.raw_bytes(step=step) == numel * 4
        # shared-section check: 8 bytes, first step only
        assert log.message_bytes(kind="check") == 8 and log.message_bytes(step=0, kind="check") == 8
    log = TrafficLog.from_dict(runs[0]["topk"]["traffic"])
    for step in range(STEPS):
        sizes = [r for r in log.wire_records if r.step == step and r.kind == "sizes"]
        assert sum(r.nbytes for r in sizes) == 8 * n_tensors  # one int64 per tensor
        payload = [r for r in log.wire_records if r.step == step and r.kind == "payload"]
        assert all(r.op == "all_gather" for r in payload)
        # padded to the larger rank: both ranks' messages of one collective are equally long
        other = TrafficLog.from_dict(runs[1]["topk"]["traffic"])
        mine = {r.seq: r.nbytes for r in payload}
        theirs = {r.seq: r.nbytes for r in other.wire_records if r.step == step and r.kind == "payload"}
        assert mine == theirs
    # framed (gcbench.envs.framing): each tensor's header travels in its first message only, so
    # every later step sends the same (topk: fixed-size) messages, fewer bytes than the first
    own = [sum(r.nbytes - r.padding for r in log.wire_records if r.step == s and r.kind == "payload") for s in range(STEPS)]
    assert own[0] > own[1] and len(set(own[1:])) == 1


def _reproducible(name: str) -> bool:
    """Whether two fresh instances of the codec, fed the same generator, write the same bytes
    (SketchML's DataSketches quantile sketches flip clock-seeded coins: not reproducible)."""
    if name == "sketched-sgd":
        return True
    x = torch.randn(3000, generator=torch.Generator().manual_seed(0))
    out = []
    for _ in range(2):
        codec = compressors.get(name)
        out.append(codec.encode(x, key="k", generator=torch.Generator().manual_seed(1)).to_bytes())
    return out[0] == out[1]


@pytest.fixture(scope="module")
def registry_runs():
    """Every registry codec in one launch; if any fails, one launch per codec, so that a broken
    codec fails its own test only (an error is kept and re-raised by that codec's test)."""
    configs = {f"registry:{name}": (name, {}, False) for name in REGISTRY}
    try:
        res = launch(_rank_runs, 2, (configs, STEPS), timeout_s=10)
        return {label: [r[label] for r in res] for label in configs}
    except WorkerFailedError:
        out = {}
        for label, cfg in configs.items():
            try:
                res = launch(_rank_runs, 2, ({label: cfg}, STEPS), timeout_s=10)
                out[label] = [r[label] for r in res]
            except WorkerFailedError as err:
                out[label] = err
        return out


@pytest.mark.parametrize("name", REGISTRY)
def test_every_registered_codec_trains_under_ddp(runs, registry_runs, name):
    """Every codec of the registry (default parameters) in real DDP, 2 gloo ranks, 3 buckets."""
    label = f"registry:{name}"
    res = registry_runs[label]
    if isinstance(res, Exception):
        raise res
    assert _params_equal(res[0]["params"], res[1]["params"])
    log = TrafficLog.merged(TrafficLog.from_dict(res[r]["traffic"]) for r in (0, 1))
    assert log.steps() == list(range(STEPS)) and log.workers() == [0, 1]
    assert log.raw_bytes() == 2 * STEPS * sum(p.numel() * 4 for p in build_model("mlp", seed=0).parameters())
    if name != "identity":
        assert not _params_equal(res[0]["params"], runs[0]["no-hook"]["params"])
    if _reproducible(name):
        model, _ = _simulate(label)
        assert _params_equal({n: p.detach() for n, p in model.named_parameters()}, res[0]["params"])


def test_loaded_layer_parameters_forget_the_buckets_fusability():
    """Without a policy the hook asks each bucket layout's fusability once; a checkpoint whose per-layer
    parameters differ can give the layout's keys other codecs, so loading one forgets the answers."""
    from gcbench.envs.ddp_hook import GCBenchHookState

    state = GCBenchHookState("qsgd", model=torch.nn.Linear(4, 2), compile_ahead=False)
    state._fusable[("weight", "bias")] = True  # noqa: SLF001 - as after a first step
    state.load_state_dict({"step": 3})
    assert state._fusable  # noqa: SLF001 - no per-layer parameters loaded: the answers hold
    state.load_state_dict({"step": 3, "layer_params": {"weight": {"levels": 3}}})
    assert not state._fusable and state.spec.params_for("weight")["levels"] == 3  # noqa: SLF001


def _nan_on_one_rank(ctx, codec):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.compressors.errors import NonFiniteGradientError
    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    model = build_model("mlp", seed=0)
    ddp = DDP(model)
    ddp.register_comm_hook(GCBenchHookState(codec, {}, model=model, progress=ctx.progress), gcbench_hook)
    idx = batch_indices(0, ctx.rank, ctx.world_size, BATCH, 0)
    x = data.x[idx].clone()
    if ctx.rank == 1:
        x[0, 0] = float("nan")
    try:
        F.cross_entropy(ddp(x), data.y[idx]).backward()
    except NonFiniteGradientError as err:
        return "NonFiniteGradientError: " + str(err)
    except Exception as err:  # noqa: BLE001 - the test reports what else came out
        return f"{type(err).__name__}: {err}"
    return "no error"


@pytest.mark.parametrize("codec", ["identity", "fp16"])
def test_nan_in_one_ranks_bucket_raises_on_every_rank(codec):
    """A fused bucket with NaN in rank 1's gradients makes both ranks raise NonFiniteGradientError
    after the all-reduce (the identity checks the sum; fp16's rank 1 sends NaN, raises its own error,
    and rank 0's decode finds the NaN in the sum), where raising before the collective on rank 1
    left rank 0 with gloo's connection-closed error."""
    results = launch(_nan_on_one_rank, 2, (codec,), timeout_s=60)
    assert all(r.startswith("NonFiniteGradientError") for r in results), results
    assert "all-reduced bucket" in results[0] and ("input holds" in results[1]) == (codec == "fp16"), results


def _all_gather_after_a_failed_step(ctx):
    from gcbench.compressors.errors import NonFiniteGradientError
    from gcbench.envs.aggregator import Aggregator
    from gcbench.envs.collectives import TorchCollective
    from gcbench.envs.workers import CodecSpec, WorkerCodecs

    agg = Aggregator([WorkerCodecs(CodecSpec(name="topk", params={"ratio": 0.1}), ctx.rank)], TorchCollective())
    g = torch.randn(300, generator=torch.Generator().manual_seed(ctx.rank))
    bad = g.clone()
    if ctx.rank == 1:
        bad[7] = float("nan")
    try:
        agg.aggregate([[bad]], ["w"], step=0)
        first = "no error"
    except NonFiniteGradientError as err:
        first = str(err)
    return first, agg.aggregate([[g]], ["w"], step=1)[0]


def test_all_gather_rank_with_nan_makes_every_rank_raise_and_the_next_step_works():
    """TopK (all_gather) on 2 gloo ranks: rank 1's NaN makes both ranks raise NonFiniteGradientError
    after the sizes' all_gather; rank 0 had framed its payload (a header the receivers never got), so
    its sender forgets it and the next step, which defines it again, averages as usual."""
    from gcbench import compressors as registry

    results = launch(_all_gather_after_a_failed_step, 2, (), timeout_s=60)
    assert "worker(s) [1]" in results[0][0] and "non-finite" in results[1][0], results
    codec = registry.get("topk", ratio=0.1)
    want = sum(codec.decode(codec.encode(torch.randn(300, generator=torch.Generator().manual_seed(r)))) for r in range(2)) / 2
    assert torch.equal(results[0][1], results[1][1]) and torch.equal(results[0][1], want)


def _all_reduce_after_a_failed_step(ctx):
    from gcbench.compressors.errors import NonFiniteGradientError
    from gcbench.envs.aggregator import Aggregator
    from gcbench.envs.collectives import TorchCollective
    from gcbench.envs.workers import CodecSpec, WorkerCodecs

    agg = Aggregator([WorkerCodecs(CodecSpec(name="fp16"), ctx.rank)], TorchCollective())
    g = [torch.randn(50, generator=torch.Generator().manual_seed(ctx.rank)), torch.ones(7) * ctx.rank]
    agg.aggregate([g], ["a", "b"], step=0)  # the layout of these keys is known from here on
    bad = [t.clone() for t in g]
    if ctx.rank == 1:
        bad[1][3] = float("nan")
    try:
        agg.aggregate([bad], ["a", "b"], step=1)
        failed = "no error"
    except NonFiniteGradientError as err:
        failed = str(err)
    return failed, agg.aggregate([g], ["a", "b"], step=2)


def test_per_tensor_all_reduce_rank_with_nan_makes_every_rank_raise():
    """fp16 summed tensor by tensor (``Aggregator.aggregate``) on 2 gloo ranks: rank 1's NaN, once the
    keys' layout is known, makes rank 1 send NaN and raise, and rank 0 raise from the sum; the next
    step averages as usual on both."""
    results = launch(_all_reduce_after_a_failed_step, 2, (), timeout_s=60)
    assert "all-reduced bucket" in results[0][0] and "non-finite value" in results[1][0], results
    assert all(torch.equal(x, y) for x, y in zip(results[0][1], results[1][1]))
    assert torch.equal(results[0][1][1], torch.full((7,), 0.5))



@pytest.mark.parametrize("codec", ["powersgd", "sketched-sgd"])
def test_nan_in_one_ranks_bucket_raises_on_every_rank_with_rounds(codec):
    """The methods that run their own rounds of all-reduces: rank 1's refusal (NaN in its gradients)
    still takes part in the first collective (PowerSGD's factor of the NaN, Sketched-SGD's table of NaN),
    so both ranks raise NonFiniteGradientError after it; raising before it would leave rank 0 with gloo's
    connection-closed error."""
    results = launch(_nan_on_one_rank, 2, (codec,), timeout_s=60)
    assert all(r.startswith("NonFiniteGradientError") for r in results), results
    assert "input holds" in results[1], results  # the refusing rank's own error, as encode words it


def _default_cap_layout(ctx):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(300, 300) for _ in range(6)])  # 2.2 MB of gradients
    ddp = DDP(model)  # bucket_cap_mb left at DDP's default
    state = GCBenchHookState("identity", model=model, progress=ctx.progress)
    ddp.register_comm_hook(state, gcbench_hook)
    for _ in range(2):  # DDP rebuilds its buckets after the first step
        ddp(torch.randn(4, 300)).sum().backward()
    return dict(state.bucket_layout)


def test_simulated_buckets_follow_ddp_at_its_default_cap():
    """Left at its default, DDP closes its first rebuilt bucket at 1 MiB and the others at 25 MiB;
    the simulated cluster lays its buckets out the same way (one bucket of 2.2 MB would record one
    collective per step where DDP issues two)."""
    (layout,) = launch(_default_cap_layout, 1, timeout_s=30)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(300, 300) for _ in range(6)])
    sim = SimulatedCluster(model, 1, "identity")
    names = [n for n, _ in model.named_parameters()]
    assert [layout[b] for b in sorted(layout)] == [[names[i] for i in idx] for idx in sim.buckets(1)]
    assert len(layout) == 2
