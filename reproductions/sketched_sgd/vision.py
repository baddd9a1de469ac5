"""The CIFAR-10 comparison: overall compression of local top-k and of Sketched-SGD as workers grow.

The slides ("Empirical Results", second figure): "Comparison between SKETCHED-SGD and local top-k
SGD on CIFAR10. The best overall compression that local top-k can achieve for many workers is 2x."
The mechanism: with local top-k every worker uploads its own ``k`` coordinates, but the sum the
parameter server sends back holds the *union* of the workers' supports, which grows with ``W``
towards the whole vector; once the download is (nearly) dense, upload + download cannot be less
than half of vanilla's (``d`` up + ``d`` down). A sketch's size does not depend on ``W``.

What is counted (per worker and step, bytes of real payloads):

* vanilla: the ``d``-element fp32 gradient up and the same down, counted as the method it is compared
  with counts its own bytes (:func:`vanilla_bytes`): against local top-k's framed payloads the
  ``identity`` payload (header and checksum included), against an all_reduce (Sketched-SGD, true top-k)
  the all_reduced tensor's raw ``4 d`` bytes, as the cluster records vanilla's own all_reduce;
* local top-k (parameter server, :class:`~.methods.MethodRun` ``local_topk``): up = the worker's
  ``topk`` payload as the cluster's :class:`TrafficLog` records it; down = the server's sum of the
  workers' top-k, as the smaller of two real payloads: ``topk`` with ``k`` = the number of
  non-zeros of the sum (indices + values, i.e. the union exactly; checked lossless) or
  ``identity`` (dense fp32);
* Sketched-SGD (collective, as DDP runs it): both rounds are all_reduces, whose every worker sends
  and receives the same amount (``2 (W-1)/W`` times the message, as vanilla's all_reduce): the
  ratio of message bytes is the ratio of bytes on the wire, up and down.

Overall compression = vanilla's (up + down) / the method's (up + down).

Images: Fashion-MNIST (Debian ``dataset-fashion-mnist``, :mod:`gcbench.data.images`) when installed,
else scikit-learn's digits (named in the report); CIFAR-10 (binary version) when the user passes it.
Model: a small ResNet (:class:`~.models.SmallResNet`) as one flat parameter.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from gcbench.compressors import get
from gcbench.compressors.errors import NonFiniteGradientError

from gcbench.workloads.training import batch_indices, params_digest

from .methods import MethodConfig, MethodRun
from .models import FlatParams, build_image_model


@dataclass
class ImageData:
    """Float images (normalised) and labels, train and test."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    side: int
    channels: int
    summary: dict[str, Any]


def load_image_data(dataset: str | None, preset: Mapping[str, Any]) -> ImageData:
    """The preset's image data set (``dataset`` overrides it), subsampled and pooled as the preset says.

    The default ``fashion-mnist`` falls back to ``digits`` when it is not installed, and the summary
    says so (``fallback_from``).
    """
    from gcbench.data.errors import DatasetUnavailableError
    from gcbench.data.images import FASHION_HOWTO, load_images, to_float

    name = dataset or preset.get("dataset", "fashion-mnist")
    fallback = None
    try:
        ds = load_images(name)
    except DatasetUnavailableError:
        if dataset is not None or not name.startswith("fashion"):
            raise
        ds, fallback = load_images("digits"), f"{name} (not installed: {FASHION_HOWTO})"
    n_train = min(int(preset.get("train_images", ds.x_train.shape[0])), ds.x_train.shape[0])
    n_test = min(int(preset.get("test_images", ds.x_test.shape[0])), ds.x_test.shape[0])
    gen = torch.Generator().manual_seed(int(preset.get("seed", 0)))
    tr = torch.randperm(ds.x_train.shape[0], generator=gen)[:n_train].sort().values
    te = torch.randperm(ds.x_test.shape[0], generator=gen)[:n_test].sort().values
    side = ds.x_train.shape[-1]
    size = preset.get("image_side")
    size = int(size) if size and side % int(size) == 0 and int(size) < side else None
    x_tr, mean, std = to_float(ds.x_train[tr], size)
    x_te, _, _ = to_float(ds.x_test[te], size, mean=mean, std=std)
    summary = {**ds.summary(), "train_used": n_train, "test_used": n_test, "side_used": int(x_tr.shape[-1])}
    if fallback:
        summary["fallback_from"] = fallback
    return ImageData(x_tr, ds.y_train[tr].clone(), x_te, ds.y_test[te].clone(), int(x_tr.shape[-1]), int(x_tr.shape[1]), summary)


def accuracy(model: torch.nn.Module, data: ImageData) -> float:
    """Test accuracy."""
    with torch.no_grad():
        return float((model(data.x_test).argmax(1) == data.y_test).float().mean())


def _model(data: ImageData, params: Mapping[str, Any], seed: int, device: str = "cpu") -> FlatParams:
    return FlatParams(build_image_model(data.side, {"in_channels": data.channels, **dict(params)}, seed).to(device))


def on_device(data: ImageData, device: str) -> ImageData:
    """``data`` with its tensors on ``device`` (itself on the CPU)."""
    if torch.device(device).type == "cpu":
        return data
    return dataclasses.replace(data, x_train=data.x_train.to(device), y_train=data.y_train.to(device),
                               x_test=data.x_test.to(device), y_test=data.y_test.to(device))


def vanilla_payload_bytes(d: int) -> int:
    """Bytes of the ``identity`` payload of a ``d``-element fp32 vector (vanilla's message, each way)."""
    return get("identity").encode(torch.zeros(d)).nbytes


def vanilla_bytes(d: int, method: MethodConfig) -> int:
    """Vanilla's bytes each way for a ``d``-element fp32 gradient, counted as ``method`` counts its own, so a
    ratio compares the same bytes on both sides: for local top-k, whose worker pushes and server reply are
    framed payloads (header and checksum included), vanilla's ``identity`` payload
    (:func:`vanilla_payload_bytes`); for the all_reduce methods (vanilla, true top-k, Sketched-SGD's two
    rounds), whose bytes the cluster records as the all_reduced tensors' raw bytes with no payload
    header, ``4 d``."""
    return vanilla_payload_bytes(d) if method.kind == "local_topk" else 4 * int(d)


def server_pull_bytes(summed: torch.Tensor) -> tuple[int, int]:
    """``(bytes, nnz)`` of the parameter server's reply: the smaller of the exact sparse payload
    (``topk`` with ``k`` = non-zeros, decoded back exactly) and the dense ``identity`` payload."""
    flat = summed.detach().reshape(-1)
    d = flat.numel()
    nnz = int(torch.count_nonzero(flat))
    dense = get("identity").encode(flat).nbytes
    if nnz == 0:
        return min(dense, get("topk", ratio=1.0 / d).encode(torch.zeros(d)).nbytes), 0
    codec = get("topk", ratio=nnz / d)
    payload = codec.encode(flat)
    if not torch.equal(codec.decode(payload).reshape(-1), flat):  # the union, exactly
        raise RuntimeError("the sparse reply does not reproduce the server's sum")
    return min(payload.nbytes, dense), nnz


def run_images(
    data: ImageData,
    *,
    model_params: Mapping[str, Any],
    method: MethodConfig,
    workers: int,
    steps: int,
    batch: int,
    lr: float,
    momentum: float,
    seed: int,
    init_state: torch.Tensor | None = None,
    eval_every: int = 0,
    threads: int | None = 1,
    keep_state: bool = False,
    on_eval: Callable[[dict[str, Any]], None] | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train ``steps`` steps with ``method`` on ``workers`` workers; bytes per step, accuracy.

    ``device``: where the model, the images and the workers' codecs live (``cpu``, ``cuda``, ``cuda:N``).

    ``per_step[i]["accumulator_norm"]`` holds ``||sum_i v_i|| / W`` after step ``i`` for the
    error-accumulating methods (:meth:`~.methods.MethodRun.accumulator_norm`), and ``on_step(step,
    {"accumulator_norm": ...})`` sees each one (W&B), as in the translation runs.

    ``init_state`` (a flat parameter vector) starts from a trained model (the scaling sweep starts
    every ``W`` from the same warmed-up model); ``keep_state`` returns the final one as ``"state"``
    (a tensor: pop it before storing the result as JSON).

    Divergence is a result: when a gradient holds NaN/Inf (the codecs refuse it) training stops
    before that step's update, the model as it stands is scored and ``diverged_at`` holds the step.
    """
    data = on_device(data, device)
    model = _model(data, model_params, seed, device)
    if init_state is not None:
        with torch.no_grad():
            model.flat.copy_(init_state.to(model.flat.device))
    d = model.flat.numel()
    # the image runs record none of the sketch measurements (translation's guards read them): not taken
    run = MethodRun(method, model, workers, threads=threads, momentum=momentum, measure=False)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=method.optimizer_momentum(momentum))
    vanilla = vanilla_bytes(d, method)
    n = data.x_train.shape[0]
    per_step: list[dict[str, Any]] = []
    curve: list[dict[str, Any]] = []
    t_train = 0.0
    diverged_at: int | None = None
    for step in range(steps):
        t0 = time.perf_counter()
        idx = [batch_indices(step, w, workers, batch, seed, n) for w in range(workers)]
        opt.zero_grad(set_to_none=True)
        try:
            losses = run.backward(lambda w, idx=idx: F.cross_entropy(model(data.x_train[idx[w]]), data.y_train[idx[w]]))
        except NonFiniteGradientError:
            diverged_at = step
            curve.append({"step": step, "accuracy": accuracy(model, data), "loss": math.nan, "train_s": t_train, "diverged": True})
            if on_eval is not None:
                on_eval(curve[-1])
            break
        t_train += time.perf_counter() - t0
        rec: dict[str, Any] = {"step": step, "loss": sum(losses) / len(losses)}
        log = run.traffic
        if method.kind == "local_topk":
            up = log.message_bytes(step=step, op="push") / workers
            down, nnz = server_pull_bytes(model.flat.grad)
            rec.update({"up": up, "down": down, "union_nnz": nnz, "union_fraction": nnz / d})
        else:  # all_reduce: what a worker sends, it also receives
            msg = log.message_bytes(step=step) / workers
            rec.update({"up": msg, "down": msg})
        rec["overall_compression"] = 2 * vanilla / (rec["up"] + rec["down"])
        rec["upload_compression"] = vanilla / rec["up"]
        norm = run.accumulator_norm()
        if norm is not None:
            rec["accumulator_norm"] = norm
            if on_step is not None:
                on_step(step + 1, {"accumulator_norm": norm})
        per_step.append(rec)
        opt.step()
        if (eval_every and (step + 1) % eval_every == 0) or step + 1 == steps:
            c = {"step": step + 1, "accuracy": accuracy(model, data), "loss": rec["loss"], "train_s": t_train}
            curve.append(c)
            if on_eval is not None:
                on_eval(c)
    out = {
        "method": method.as_config(),
        "workers": workers,
        "parameters": d,
        "vanilla_bytes_each_way": vanilla,
        "per_step": per_step,
        "curve": curve,
        "accuracy": curve[-1]["accuracy"],
        "diverged_at": diverged_at,
        "train_s": t_train,
        "params_digest": params_digest(model),
        "traffic": run.traffic.summary(),
    }
    if keep_state:
        out["state"] = model.flat.detach().clone()
    return out


def steady(per_step: Sequence[Mapping[str, Any]], key: str, skip: int = 1) -> float:
    """Mean of ``key`` over the steps after the first ``skip`` (step 0 carries one-off checks and an
    empty error-feedback memory)."""
    vals = [r[key] for r in per_step[skip:]] or [r[key] for r in per_step]
    return sum(vals) / len(vals)


# ---------------------------------------------------------------------------------------------------
# real DDP: 2 gloo ranks
# ---------------------------------------------------------------------------------------------------


def ddp_rank_main(ctx: Any, dataset: str | None, preset: dict, model_params: dict, method: dict, steps: int,
                  batch: int, lr: float, momentum: float, seed: int) -> dict[str, Any]:
    """One rank of a real DDP run (``gcbench.envs.launch.launch``): Sketched-SGD through the DDP hook."""
    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook
    from gcbench.envs.workers import CodecSpec
    from torch.nn.parallel import DistributedDataParallel as DDP

    data = load_image_data(dataset, preset)
    m = MethodConfig.from_config(method)
    model = _model(data, model_params, seed)
    spec = CodecSpec(name="sketched-sgd", params=m.sketched_params(momentum)) if m.kind == "sketched" else CodecSpec(name="identity")
    state = GCBenchHookState(spec, model=model, progress=ctx.progress)
    ddp = DDP(model)
    ddp.register_comm_hook(state, gcbench_hook)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=m.optimizer_momentum(momentum))
    n = data.x_train.shape[0]
    losses = []
    for step in range(steps):
        ctx.progress()
        idx = batch_indices(step, ctx.rank, ctx.world_size, batch, seed, n)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(data.x_train[idx]), data.y_train[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {"rank": ctx.rank, "losses": losses, "params_digest": params_digest(model), "traffic": state.traffic.to_dict(),
            "accuracy": accuracy(model, data)}
