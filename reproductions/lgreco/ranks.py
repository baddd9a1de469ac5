"""What each rank of an L-GreCo training cell runs: DDP with the gcbench hook and, per method, the
per-layer policy (L-GreCo, Accordion, CGX's k-means, or none), timed step by step; and the same
training of an image cell on the simulated cluster, in one process (the ``sim-check`` cell)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gcbench.compressors.adaptive import LGreCoPolicy, cgx_kmeans_choice, measure_tables
from gcbench.envs.adaptive import make_policy
from gcbench.envs.workers import CodecSpec

from .budget import CheckedLGreCoPolicy
from .settings import GLOBAL_TOPK
from .vision import ImageData, build_image_model, evaluate_digits, evaluate_images, load_image_data


class CGXPolicy(LGreCoPolicy):
    """CGX's k-means layer assignment (6 clusters on layer size x L2 error) as a per-layer policy.

    :class:`gcbench.compressors.adaptive.LGreCoPolicy`'s schedule, accumulation and broadcast; the
    choice is :func:`gcbench.compressors.adaptive.cgx_kmeans_choice` on the measured tables instead
    of L-GreCo's dynamic program.
    """

    def __init__(self, ladder: Any, *, k: int = 6, **kwargs: Any) -> None:
        super().__init__(ladder, **kwargs)
        self.k = k
        self.cost_cache: dict = {}

    def _choose(self, grads: dict[str, torch.Tensor]) -> tuple[np.ndarray, dict[str, Any]]:
        tables = measure_tables(self.ladder, grads, cost_cache=self.cost_cache)
        a = cgx_kmeans_choice(tables.errors, tables.costs, list(tables.numel), self.ladder.reference_index, k=self.k)
        return np.asarray(a.choice, dtype=np.int64), {"tables_s": tables.seconds, "dp_s": 0.0}


def build_policy(method: str, spec: CodecSpec, *, every: int, warmup: int, layers: Sequence[str],
                 rank: int | None = None, span: Sequence[float] | None = None) -> Any:
    """The per-layer policy of ``method`` (None for uniform); ``rank``: this rank (None: bound later by
    the DDP hook or the simulated cluster, which decides as rank 0); ``span``: the ladder's range
    factors (:func:`gcbench.envs.adaptive.make_policy`; None: Sec. 5.1's). L-GreCo's policy keeps its
    decisions' gradients for the budget's independent measurement (:class:`.budget.CheckedLGreCoPolicy`)."""
    if method == "uniform":
        return None
    if method == "lgreco":
        base = make_policy("lgreco", spec, every=every, warmup=warmup, layers=layers, rank=rank, span=span)
        return CheckedLGreCoPolicy.like(base, layers=layers, rank=rank)
    if method == "cgx":
        base = make_policy("lgreco", spec, every=every, warmup=warmup, layers=layers, span=span)
        return CGXPolicy(base.ladder, every=every, warmup=warmup, accumulate=base.accumulate, layers=layers,
                         src=0, rank=rank, device=None)
    return make_policy(method, spec, every=every, warmup=warmup, layers=layers, rank=rank, span=span)


def decision_rows(policy: Any) -> list[dict[str, Any]]:
    """The policy's decisions as JSON-ready rows (arrays as lists, numpy scalars as Python numbers)."""
    rows = []
    for d in getattr(policy, "decisions", []):
        row = {}
        for k, v in d.items():
            if isinstance(v, np.ndarray):
                row[k] = v.tolist()
            elif isinstance(v, (np.floating, np.integer, np.bool_)):
                row[k] = v.item()
            elif isinstance(v, (int, float, bool, str)) or v is None:
                row[k] = v
            elif isinstance(v, list):
                row[k] = [float(x) for x in v]
        rows.append(row)
    return rows


def overall_density(model: torch.nn.Module, spec: CodecSpec) -> float:
    """Fraction of the model's gradient entries TopK keeps under ``spec`` (per-layer ``ratio``
    overrides in ``spec.layer_params``, else the codec's ``ratio``), weighted by layer size."""
    kept = total = 0.0
    for name, p in model.named_parameters():
        ratio = float({**spec.params, **spec.layer_params.get(name, {})}["ratio"])
        kept += ratio * p.numel()
        total += p.numel()
    return kept / total


def rank_train(ctx: Any, codec: str, params: Mapping[str, Any], ef: bool, methods: Sequence[str],
                cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One rank: train the cell's model once per method with DDP + the gcbench hook."""
    import time

    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_global_hook, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.workloads.training import batch_indices, params_digest

    lm = cfg["model"] == "tlm"
    if lm:
        from .lm import build_lm, lm_batch, lm_loss, lm_perplexity, load_text

        arch = dict(cfg.get("tlm") or {})  # the claims scale's model shape (default: the one-layer d 64 model)
        text = load_text(cfg.get("dataset"), **({"vocab": arch.pop("vocab")} if "vocab" in arch else {}))
        info: dict[str, Any] = {"data": {"name": text.name, "description": text.description,
                                         "train_tokens": int(text.train.numel())}}
        device = torch.device(cfg.get("device") or "cpu")
    else:
        data = load_image_data(cfg)
        x, y = data.x_train, data.y_train
        info = {"data": data.summary}
    out: dict[str, Any] = {}
    lgreco_density: float | None = None
    for method in methods:
        model = build_lm(cfg["seed"], vocab=text.vocab, **arch) if lm else build_image_model(cfg, data)
        info["model_params"] = sum(p.numel() for p in model.parameters())
        layers = [n for n, p in model.named_parameters() if p.requires_grad]
        extra: dict[str, Any] = {}
        if method == "uncompressed":
            spec = CodecSpec(name="identity")
            policy = None
        elif method == GLOBAL_TOPK:
            if lgreco_density is None:
                raise ValueError(f"{GLOBAL_TOPK} runs after lgreco: it uses L-GreCo's mean overall density")
            spec = CodecSpec(name=codec, params={**params, "ratio": lgreco_density}, error_feedback=ef)
            policy = None
            extra["density"] = lgreco_density
        else:
            spec = CodecSpec(name=codec, params=dict(params), error_feedback=ef)
            policy = build_policy(method, spec, every=cfg["every"], warmup=cfg["warmup"], layers=layers,
                                  span=(cfg.get("spans") or {}).get(method))
        # overlap: each bucket's communication runs while backward computes the next ones, the way
        # the paper's hooks run (Fig. 10); bit-identical to the synchronous hook
        state = GCBenchHookState(spec, model=model, progress=ctx.progress, policy=policy, overlap=bool(cfg.get("overlap", True)))
        if lm and device.type != "cpu":  # the LM honours the run's device; on the CPU nothing moves
            model.to(device)
            ddp = DDP(model, bucket_cap_mb=cfg["bucket_cap_mb"], device_ids=[device.index or 0] if device.type == "cuda" else None)
        else:
            ddp = DDP(model, bucket_cap_mb=cfg["bucket_cap_mb"])
        ddp.register_comm_hook(state, gcbench_global_hook if method == GLOBAL_TOPK else gcbench_hook)
        if lm:
            opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
        else:
            opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                                  weight_decay=float(cfg.get("weight_decay") or 0.0))
        step_s: list[float] = []
        losses: list[float] = []
        densities: list[float] = []  # lgreco: the overall TopK density in effect at each step
        for step in range(cfg["steps"]):
            ctx.progress()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            if lm:
                xb, yb = lm_batch(text, step, ctx.rank, ctx.world_size, cfg["batch"], cfg["seed"])
                if device.type != "cpu":
                    xb, yb = xb.to(device), yb.to(device)
                loss = lm_loss(ddp, xb, yb)
            else:
                idx = batch_indices(step, ctx.rank, ctx.world_size, cfg["batch"], cfg["seed"], data.n_train)
                loss = F.cross_entropy(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
            step_s.append(time.perf_counter() - t0)
            losses.append(float(loss.detach()))
            if method == "lgreco" and GLOBAL_TOPK in methods:
                densities.append(overall_density(model, state.spec))
        state.close()
        if isinstance(policy, CheckedLGreCoPolicy):  # after the training: no step's time includes it
            policy.check()
        if densities:
            lgreco_density = sum(densities) / len(densities)
        out[method] = {
            **extra,
            "traffic": state.traffic.to_dict() if ctx.rank == 0 else None,
            "step_s": step_s,
            "losses": losses,
            "decisions": decision_rows(policy) if policy is not None else [],
            "applied": state.decisions,
            # the report reads rank 0's evaluation; a ResNet's is costly, so only rank 0 evaluates it
            "eval": ({"test_perplexity": lm_perplexity(model, text)} if lm
                     else evaluate_digits(model, data) if cfg["model"] != "resnet18"
                     else evaluate_images(model, data) if ctx.rank == 0 else None),
            "digest": params_digest(model),
            "overlap": state.overlap,
            **info,
        }
    return out


def simulate(
    model: torch.nn.Module, spec: CodecSpec, method: str, optimizer_for: Callable[[torch.nn.Module], torch.optim.Optimizer],
    step_loss: Callable[[int], Callable[[int], torch.Tensor]], *, workers: int, steps: int, every: int, warmup: int,
    bucket_cap_mb: float, layers: Sequence[str],
) -> list[Any]:
    """``steps`` steps of ``model`` on the simulated cluster (``workers`` workers in this process, DDP's
    buckets of ``bucket_cap_mb``, ``method``'s policy over ``layers`` deciding as rank 0), the optimizer
    built by ``optimizer_for(model)``; ``step_loss(step)``, called before the step's gradients are
    cleared, gives the step's loss of worker ``w``. Returns the settings applied at each decision."""
    from gcbench.envs.simulated import SimulatedCluster

    policy = build_policy(method, spec, every=every, warmup=warmup, layers=layers, rank=0)
    sim = SimulatedCluster(model, workers, spec, bucket_cap_mb=bucket_cap_mb, policy=policy)
    opt = optimizer_for(model)
    for step in range(steps):
        loss = step_loss(step)
        opt.zero_grad(set_to_none=True)
        sim.backward(loss)
        opt.step()
    return sim.decisions


def simulated_train(cfg: Mapping[str, Any], data: ImageData, method: str = "lgreco") -> dict[str, Any]:
    """An image cell's training of ``method`` on the simulated cluster (:func:`simulate`: ``cfg["workers"]``
    workers, the cell's buckets, SGD): the final parameters' digest and the settings applied, which the
    real ranks' (:func:`rank_train`) must equal bit for bit."""
    from gcbench.workloads.training import batch_indices, params_digest

    x, y = data.x_train, data.y_train
    model = build_image_model(cfg, data)
    spec = CodecSpec(name=cfg["codec"], params=dict(cfg["params"]), error_feedback=cfg["ef"])

    def step_loss(step: int) -> Callable[[int], torch.Tensor]:
        b = [batch_indices(step, w, cfg["workers"], cfg["batch"], cfg["seed"], data.n_train) for w in range(cfg["workers"])]
        return lambda w: F.cross_entropy(model(x[b[w]]), y[b[w]])

    def sgd(m: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(m.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                               weight_decay=float(cfg.get("weight_decay") or 0.0))

    applied = simulate(model, spec, method, sgd, step_loss, workers=cfg["workers"], steps=cfg["steps"], every=cfg["every"],
                       warmup=cfg["warmup"], bucket_cap_mb=cfg["bucket_cap_mb"], layers=[n for n, _ in model.named_parameters()])
    return {"digest": params_digest(model), "applied": applied}
