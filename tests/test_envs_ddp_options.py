"""The DDP hook under the DDP options users train with: 2 gloo ranks on localhost, several buckets.

A script that plugs the hook into its own training keeps its DDP options: unused parameters
(``find_unused_parameters``), gradients that are views of the buckets (``gradient_as_bucket_view``),
``static_graph``, gradient accumulation under ``no_sync()``, a bfloat16 model, tied and frozen
parameters, and buffers (a batch norm's running statistics). One launch (module fixture) trains a
small model on the digits a few steps under each option, without a hook (DDP's own all_reduce) and
with a codec of each protocol: the lossless identity, QSGD (all_gather, synchronous and with
overlap), PowerSGD with error feedback (its own rounds), Sketched-SGD (two rounds) and top-k with error
feedback. The tests compare ranks, the no-hook reference and the overlap mode, bit for bit.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from gcbench.envs.launch import launch

from gcbench.workloads.training import batch_indices
from gcbench.workloads.models import build_model

pytestmark = pytest.mark.distributed

STEPS = 4
BATCH = 16
CAP_MB = 0.001  # the MLP's layers land in several buckets (as in test_envs_ddp)
LR, MOMENTUM = 0.05, 0.9

# option -> how the run differs: DDP's keyword arguments, micro-batches per step (the first ones under
# no_sync), the parameters' dtype, and an unused head (parameters that never receive a gradient)
OPTIONS: dict[str, dict] = {
    "find_unused_parameters": {"ddp": {"find_unused_parameters": True}, "unused": True},
    "gradient_as_bucket_view": {"ddp": {"gradient_as_bucket_view": True}},
    "static_graph": {"ddp": {"static_graph": True}},
    "no_sync": {"micro": 2},
    "bfloat16": {"dtype": torch.bfloat16},
    "tied_and_frozen": {"tied": True},
    "batch_norm_buffers": {"batch_norm": True},
}
# label -> (registry name, params, error feedback, overlap); None: DDP without a hook
CODECS: dict[str, tuple | None] = {
    "no-hook": None,
    "identity": ("identity", {}, False, False),
    "qsgd": ("qsgd", {}, False, False),
    "qsgd-overlap": ("qsgd", {}, False, True),
    "powersgd-ef": ("powersgd", {"rank": 2}, True, False),
    "sketched": ("sketched-sgd", {}, False, False),
    "topk-ef": ("topk", {"ratio": 0.05}, True, False),
}
LOSSY = [k for k in CODECS if k not in ("no-hook", "identity")]


class WithUnusedHead(torch.nn.Module):
    """The digits MLP and a head the forward pass never uses: its parameters get no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.body = build_model("mlp", seed=0)
        self.unused = torch.nn.Linear(10, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class TiedAndFrozen(torch.nn.Module):
    """Two layers sharing one weight (tied, as an LM's embedding and output) and a frozen layer
    (``requires_grad=False``: DDP leaves it out of its buckets)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(64, 32)
        self.frozen = torch.nn.Linear(32, 32).requires_grad_(False)
        self.a = torch.nn.Linear(32, 32)
        self.b = torch.nn.Linear(32, 32)
        self.b.weight = self.a.weight
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.frozen(torch.relu(self.inp(x))))
        return self.head(torch.relu(self.b(torch.relu(self.a(h)))))


def _with_batch_norm() -> torch.nn.Module:
    """A batch norm between two layers: running statistics that DDP broadcasts from rank 0 before
    every forward pass, on the default group, while the overlap mode's thread uses its own."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def _model(option: dict) -> torch.nn.Module:
    if option.get("tied"):
        return TiedAndFrozen()
    if option.get("batch_norm"):
        return _with_batch_norm()
    model = WithUnusedHead() if option.get("unused") else build_model("mlp", seed=0)
    return model.to(option.get("dtype", torch.float32))


def _rank_runs(ctx):
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.data.digits import load_digits_tensors

    data = load_digits_tensors()
    out = {}
    for oname, option in OPTIONS.items():
        dtype, micro = option.get("dtype", torch.float32), option.get("micro", 1)
        for label, cfg in CODECS.items():
            torch.manual_seed(0)
            model = _model(option)
            initial = {n: p.detach().clone() for n, p in model.named_parameters()}
            ddp = DDP(model, bucket_cap_mb=CAP_MB, **option.get("ddp", {}))
            state = None
            if cfg is not None:
                name, params, ef, overlap = cfg
                state = GCBenchHookState(name, params, error_feedback=ef, model=model, overlap=overlap, progress=ctx.progress)
                ddp.register_comm_hook(state, gcbench_hook)
            opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
            for step in range(STEPS):
                opt.zero_grad(set_to_none=True)
                for m in range(micro):
                    idx = batch_indices(step * micro + m, ctx.rank, ctx.world_size, BATCH, 0)
                    with ddp.no_sync() if m < micro - 1 else contextlib.nullcontext():
                        F.cross_entropy(ddp(data.x[idx].to(dtype)).float(), data.y[idx]).backward()
                opt.step()
            if state is not None:
                state.close()
            out[(oname, label)] = {
                "initial": initial,
                "params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "hook_steps": state.step if state else None,
                "buckets": len(state.bucket_layout) if state else None,
            }
    return out


@pytest.fixture(scope="module")
def runs():
    return launch(_rank_runs, 2, (), timeout_s=60)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("label", list(CODECS))
def test_ranks_stay_identical(runs, option, label):
    assert _equal(runs[0][(option, label)]["params"], runs[1][(option, label)]["params"])


@pytest.mark.parametrize("option", list(OPTIONS))
def test_identity_hook_equals_ddp_without_hook(runs, option):
    # the lossless codec writes each average where DDP's own all_reduce puts it (W = 2: a/2 + b/2 == (a+b)/2)
    assert _equal(runs[0][(option, "identity")]["params"], runs[0][(option, "no-hook")]["params"])


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("label", LOSSY)
def test_lossy_codecs_ran_and_trained(runs, option, label):
    run = runs[0][(option, label)]
    # the hook really replaced DDP's all_reduce (a no-op hook would fail this) and training moved
    assert not _equal(run["params"], runs[0][(option, "no-hook")]["params"])
    assert not _equal(run["params"], run["initial"])
    assert all(torch.isfinite(p.float()).all() for p in run["params"].values())


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("label", [k for k in CODECS if k != "no-hook"])
def test_the_hook_runs_once_per_synchronised_step(runs, option, label):
    # under no_sync DDP skips the hook for the accumulating micro-batches: one call per optimizer step
    run = runs[0][(option, label)]
    assert run["hook_steps"] == STEPS
    assert run["buckets"] >= 2


@pytest.mark.parametrize("option", list(OPTIONS))
def test_overlap_equals_the_synchronous_hook(runs, option):
    assert _equal(runs[0][(option, "qsgd-overlap")]["params"], runs[0][(option, "qsgd")]["params"])


@pytest.mark.parametrize("label", list(CODECS))
def test_unused_parameters_are_left_untouched(runs, label):
    # a zero gradient through every codec decodes to zero: the unused head keeps its initial values
    # (a result written at another tensor's place in the bucket would move them)
    run = runs[0][("find_unused_parameters", label)]
    unused = [n for n in run["params"] if n.startswith("unused.")]
    assert unused
    assert all(torch.equal(run["params"][n], run["initial"][n]) for n in unused)
