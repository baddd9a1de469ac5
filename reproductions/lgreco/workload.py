"""The L-GreCo reproduction: Table 4, Table 1 and Fig. 9 analogues on a small real model.

Cells (each cached on its own, see :mod:`..framework.cells`):

* ``train-<codec>``: one launch of ``workers`` real gloo ranks (DDP + :func:`gcbench.envs.ddp_hook.gcbench_hook`)
  training the digits model once per method - ``uniform`` (the codec's default everywhere),
  ``lgreco`` (Algorithm 1, budget = the uniform setting's summed error), ``accordion`` ({D/2, 2D},
  eta = 0.5), ``cgx`` (CGX's k-means assignment over the ladder), ``lgreco+accordion`` (Accordion's
  choice sets the budget) - with the policy inside the hook (decisions every ``every`` steps after
  ``warmup``, on rank 0, broadcast as an int64 tensor). Per method: real bytes on the wire (rank 0),
  step wall times, the decisions (tables/DP seconds, budget, chosen error) and the final accuracy.
* ``train-uncompressed``: the same with the identity codec (the final-metric baseline).
* ``sim-check``: the L-GreCo PowerSGD run on the simulated cluster (W = 2), compared with the real
  run's parameters (digest) - the simulator is what larger-W experiments would use.
* ``lm-<codec>``: the tiny Transformer LM (:mod:`.lm`) on real English text (``pydoc`` by default,
  WikiText-103 for users who have it), when the preset has ``lm``.

Models (preset ``model``): ``mlp``/``cnn`` (the sklearn digits models of :mod:`gcbench.models`) or
``resnet18`` (:mod:`.resnet`, preset ``width``) on an image data set (preset ``dataset``:
``fashion-mnist[:DIR]``, ``cifar10:PATH``, ``cifar100:PATH``, ``imagefolder:PATH`` or ``digits``;
``fallback`` replaces a missing Fashion-MNIST and the report says so). The ``dataset`` option
replaces the image data set, or the LM's text when it names one (``wikitext103:FOLDER``, ``pydoc``).

Throughput: measured = images/s of the real gloo run on this machine; modelled = images per step
(``batch`` x the profile's workers) over (measured step time - measured communication + the step's
traffic priced on the profile, :func:`gcbench.envs.network.comm_time`). On a 17k-parameter MLP the
compute dominates, so the modelled speed-ups are small: the paper's are for a 257M-parameter model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gcbench.compressors.adaptive import cgx_kmeans_choice, measure_tables
from gcbench.compressors.adaptive.policy import ScheduledPolicy
from gcbench.envs.adaptive import make_policy
from gcbench.envs.workers import CodecSpec

from ..framework.cells import Cell
from ..framework.runner import ReportParts, RunContext
from ..framework.spec import Spec, load_spec

SPEC_PATH = Path(__file__).with_name("spec.toml")
#: Bump when the workload's code changes what a cell computes (invalidates cached cells).
CODE_VERSION = 7
METHODS = ("uniform", "lgreco", "accordion", "cgx", "lgreco+accordion")
#: Extra method of the TopK cells (after ``lgreco``, whose mean overall density it uses): the whole
#: model compressed at once by :func:`gcbench.envs.ddp_hook.gcbench_global_hook` (Sec. 5.5).
GLOBAL_TOPK = "global-topk"
LABELS = {"uniform": "Uniform", "lgreco": "L-GreCo", "accordion": "Accordion", "cgx": "CGX-kmeans",
          "lgreco+accordion": "L-GreCo + Accordion", "uncompressed": "uncompressed",
          GLOBAL_TOPK: "global TopK (L-GreCo's mean density)"}
#: Quantity ids of each method.
METHOD_IDS = {"uniform": "uniform", "lgreco": "lgreco", "accordion": "accordion", "cgx": "cgx",
              "lgreco+accordion": "lgreco_accordion", GLOBAL_TOPK: "global_topk"}
#: Models of the image cells: the digits models of gcbench.models and the ResNet-18 of .resnet.
IMAGE_MODELS = ("mlp", "cnn", "resnet18")
#: Preset keys of the ResNet-18 cells (beyond the common ones).
RESNET_KEYS = ("dataset", "width", "image_size", "eval_samples", "train_samples", "weight_decay")


def load() -> Spec:
    """The L-GreCo spec."""
    return load_spec(SPEC_PATH)


class CGXPolicy(ScheduledPolicy):
    """CGX's k-means layer assignment (6 clusters on layer size x L2 error) as a per-layer policy.

    Same schedule, accumulation and broadcast as :class:`gcbench.compressors.adaptive.LGreCoPolicy`;
    the choice is :func:`gcbench.compressors.adaptive.cgx_kmeans_choice` on the measured tables.
    """

    def __init__(self, ladder: Any, *, k: int = 6, **kwargs: Any) -> None:
        super().__init__(ladder, **kwargs)
        self.k = k
        self.cost_cache: dict = {}

    def _choose(self, grads: dict[str, torch.Tensor]) -> tuple[np.ndarray, dict[str, Any]]:
        tables = measure_tables(self.ladder, grads, cost_cache=self.cost_cache)
        a = cgx_kmeans_choice(tables.errors, tables.costs, list(tables.numel), self.ladder.reference_index, k=self.k)
        return np.asarray(a.choice, dtype=np.int64), {"tables_s": tables.seconds, "dp_s": 0.0}


def build_policy(method: str, spec: CodecSpec, *, every: int, warmup: int, layers: Sequence[str]) -> Any:
    """The per-layer policy of ``method`` (None for uniform)."""
    if method == "uniform":
        return None
    if method == "cgx":
        base = make_policy("lgreco", spec, every=every, warmup=warmup, layers=layers)
        return CGXPolicy(base.ladder, every=every, warmup=warmup, accumulate=base.accumulate, layers=layers,
                         src=0, rank=None, device=None)
    return make_policy(method, spec, every=every, warmup=warmup, layers=layers)


def _decision_rows(policy: Any) -> list[dict[str, Any]]:
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


class ImageData:
    """Training and evaluation tensors of an image cell, and what the report says about them."""

    def __init__(self, x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
                 classes: int, summary: dict[str, Any]) -> None:
        self.x_train, self.y_train, self.x_test, self.y_test = x_train, y_train, x_test, y_test
        self.classes, self.summary = classes, summary

    @property
    def n_train(self) -> int:
        """Training examples."""
        return int(self.x_train.shape[0])

    @property
    def channels(self) -> int:
        """Input channels (images) or 1 (flat digits)."""
        return int(self.x_train.shape[1]) if self.x_train.dim() == 4 else 1


def load_image_data(cfg: Mapping[str, Any]) -> ImageData:
    """The data of an image cell: the digits as ``gcbench train`` splits them (``mlp``/``cnn``), or
    ``cfg["dataset"]`` through :func:`gcbench.images.load_images` for ``resnet18`` (average-pooled to
    ``image_size`` when that divides the side, normalised with the training statistics; at most
    ``train_samples`` training and ``eval_samples`` test images).

    Raises:
        DatasetUnavailableError, DataFormatError: see :func:`gcbench.images.load_images`.
    """
    if cfg["model"] != "resnet18":
        from gcbench.datasets import load_digits_tensors
        from gcbench.train import N_TRAIN

        d = load_digits_tensors()
        return ImageData(d.x[:N_TRAIN], d.y[:N_TRAIN], d.x[N_TRAIN:], d.y[N_TRAIN:], 10,
                         {"name": "digits", "description": "sklearn digits (1,797 8x8 images; first 1,500 train, 297 test)"})
    from gcbench.images import load_images, to_float

    ds = load_images(cfg["dataset"], image_side=int(cfg.get("image_size") or 32))
    side = int(ds.x_train.shape[-1])
    want = int(cfg.get("image_size") or side)
    size = want if side % want == 0 else side
    n_tr = min(int(cfg.get("train_samples") or ds.x_train.shape[0]), int(ds.x_train.shape[0]))
    n_te = min(int(cfg.get("eval_samples") or ds.x_test.shape[0]), int(ds.x_test.shape[0]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the statistics' reductions depend on the thread count: ranks and the simulator must agree
    try:
        x_tr, mean, std = to_float(ds.x_train[:n_tr], size)
        x_te, _, _ = to_float(ds.x_test[:n_te], size, mean=mean, std=std)
    finally:
        torch.set_num_threads(threads)
    summary = {**ds.summary(), "used_train": n_tr, "used_test": n_te, "image_size": size,
               "resized": f"{side}x{side} -> {size}x{size} (average pooling)" if size != side else f"{side}x{side} (native)"}
    return ImageData(x_tr, ds.y_train[:n_tr].clone(), x_te, ds.y_test[:n_te].clone(), len(ds.classes), summary)


def build_image_model(cfg: Mapping[str, Any], data: ImageData) -> torch.nn.Module:
    """The cell's model, initialised from ``cfg["seed"]`` (the same weights for every method)."""
    if cfg["model"] == "resnet18":
        from .resnet import build_resnet18

        return build_resnet18(int(cfg["width"]), data.channels, data.classes, seed=cfg["seed"])
    from gcbench.models import build_model

    return build_model(cfg["model"], seed=cfg["seed"])


def evaluate_images(model: torch.nn.Module, data: ImageData, chunk: int = 512) -> dict[str, float]:
    """Training loss (over the first ``len(x_test)`` training images) and test accuracy, in evaluation
    mode (batch norm uses its running statistics)."""
    was = model.training
    model.eval()
    n = min(data.n_train, int(data.x_test.shape[0]))
    loss = 0.0
    correct = 0
    with torch.no_grad():
        for i in range(0, n, chunk):  # chunks bound memory (not a loop over examples)
            loss += float(F.cross_entropy(model(data.x_train[i : min(i + chunk, n)]), data.y_train[i : min(i + chunk, n)], reduction="sum"))
        for i in range(0, int(data.x_test.shape[0]), chunk):
            correct += int((model(data.x_test[i : i + chunk]).argmax(1) == data.y_test[i : i + chunk]).sum())
    model.train(was)
    return {"train_loss": loss / max(n, 1), "test_accuracy": correct / max(int(data.x_test.shape[0]), 1)}


def overall_density(model: torch.nn.Module, spec: CodecSpec) -> float:
    """Fraction of the model's gradient entries TopK keeps under ``spec`` (per-layer ``ratio``
    overrides in ``spec.layer_params``, else the codec's ``ratio``), weighted by layer size."""
    kept = total = 0.0
    for name, p in model.named_parameters():
        ratio = float({**spec.params, **spec.layer_params.get(name, {})}["ratio"])
        kept += ratio * p.numel()
        total += p.numel()
    return kept / total


def _rank_train(ctx: Any, codec: str, params: Mapping[str, Any], ef: bool, methods: Sequence[str],
                cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One rank: train the cell's model once per method with DDP + the gcbench hook."""
    import time

    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_global_hook, gcbench_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.train import _evaluate, batch_indices, params_digest

    lm = cfg["model"] == "tlm"
    if lm:
        from .lm import build_lm, lm_batch, lm_loss, lm_perplexity, load_text

        text = load_text(cfg.get("dataset"))
        info: dict[str, Any] = {"data": {"name": text.name, "description": text.description}}
    else:
        data = load_image_data(cfg)
        x, y = data.x_train, data.y_train
        info = {"data": data.summary}
    out: dict[str, Any] = {}
    lgreco_density: float | None = None
    for method in methods:
        model = build_lm(cfg["seed"], vocab=text.vocab) if lm else build_image_model(cfg, data)
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
            policy = build_policy(method, spec, every=cfg["every"], warmup=cfg["warmup"], layers=layers)
        state = GCBenchHookState(spec, model=model, progress=ctx.progress, policy=policy)
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
        if densities:
            lgreco_density = sum(densities) / len(densities)
        out[method] = {
            **extra,
            "traffic": state.traffic.to_dict() if ctx.rank == 0 else None,
            "step_s": step_s,
            "losses": losses,
            "decisions": _decision_rows(policy) if policy is not None else [],
            "applied": state.decisions,
            # the report reads rank 0's evaluation; a ResNet's is costly, so only rank 0 evaluates it
            "eval": ({"test_perplexity": lm_perplexity(model, text)} if lm
                     else _evaluate(model, torch.device("cpu")) if cfg["model"] != "resnet18"
                     else evaluate_images(model, data) if ctx.rank == 0 else None),
            "digest": params_digest(model),
            **info,
        }
    return out


class LGreCoWorkload:
    """The :class:`~..framework.runner.Workload` of the L-GreCo reproduction."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.codecs = {k: dict(v) for k, v in spec.workload["codecs"].items()}

    def _cfg(self, ctx: RunContext) -> dict[str, Any]:
        p = ctx.preset
        cfg = {k: p[k] for k in ("model", "steps", "every", "warmup", "batch", "lr", "momentum", "bucket_cap_mb", "seed")}
        cfg["workers"] = int(ctx.options.get("workers") or p["workers"])
        if ctx.options.get("epochs"):
            cfg["steps"] = int(ctx.options["epochs"])
        if ctx.options.get("lr"):
            cfg["lr"] = float(ctx.options["lr"])
        if cfg["model"] not in IMAGE_MODELS:
            raise ValueError(f"{self.spec.path}: model must be one of {IMAGE_MODELS}, got {cfg['model']!r}")
        dataset, _ = self.dataset_choice(ctx)
        if cfg["model"] == "resnet18":
            cfg.update({k: p[k] for k in RESNET_KEYS if k in p})
            cfg["dataset"] = dataset
        return cfg

    def dataset_choice(self, ctx: RunContext) -> tuple[str, str | None]:
        """``(image data set, why it is not the preset's)``; a missing Fashion-MNIST is replaced by the
        preset's ``fallback`` (the report says so). The digits MLP/CNN take only ``digits``.

        Raises:
            DatasetUnavailableError: an image data set other than digits for a digits model.
        """
        from gcbench.data import DatasetUnavailableError

        from .lm import is_text_dataset

        p = ctx.preset
        override = ctx.options.get("dataset")
        if override and not is_text_dataset(str(override)):
            want, fallback = str(override), None
        else:
            want, fallback = str(p.get("dataset", "digits")), p.get("fallback")
        if p["model"] != "resnet18":
            if want.partition(":")[0].strip().lower() != "digits":
                raise DatasetUnavailableError(
                    f"the {p['model']} model of scale {ctx.scale!r} takes the sklearn digits only; image data set {want!r} "
                    "needs a ResNet-18 scale (--scale resnet, --scale full)"
                )
            return "digits", None
        if want.split(":")[0] == "fashion-mnist" and fallback:
            from gcbench.images import FASHION_HOWTO, find_fashion_mnist

            if find_fashion_mnist(want.partition(":")[2] or None) is None:
                return str(fallback), f"Fashion-MNIST was not found, so this run used `{fallback}` instead. {FASHION_HOWTO}"
        return want, None

    def text_choice(self, ctx: RunContext) -> tuple[str, str | None]:
        """``(the LM's text, why it is not the preset's)``: the ``dataset`` option when it names a text
        data set; else the ``lm`` table's ``dataset`` (default ``pydoc``), where a WikiText-103 that is
        not found (:func:`.lm.find_wikitext`) is replaced by the table's ``fallback``. A WikiText found
        here is named by its folder, so the ranks read the same files."""
        from .lm import TEXT_DATASETS, WIKITEXT_HOWTO, find_wikitext, is_text_dataset

        lm = ctx.preset["lm"]
        override = ctx.options.get("dataset")
        if override and is_text_dataset(str(override)):
            want, fallback = str(override), None
        else:
            want, fallback = str(lm.get("dataset", "pydoc")), lm.get("fallback")
        name, _, arg = want.partition(":")
        if name.strip().lower() in TEXT_DATASETS:
            found = find_wikitext(arg or None)
            if found is not None:
                return f"{name}:{found}", None
            if fallback:
                return str(fallback), f"WikiText-103 was not found, so the LM used `{fallback}` instead. {WIKITEXT_HOWTO}"
        return want, None

    def _lm_cfg(self, ctx: RunContext, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """The LM cells' config: the preset's ``lm`` over the common one, the text of :meth:`text_choice`."""
        lm = ctx.preset["lm"]
        common = {k: v for k, v in cfg.items() if k not in RESNET_KEYS}
        lcfg = {**common, **{k: v for k, v in lm.items() if k not in ("codec", "methods", "fallback")}, "model": "tlm"}
        lcfg["dataset"] = self.text_choice(ctx)[0]
        return lcfg

    def _check_data(self, ctx: RunContext, cfg: Mapping[str, Any]) -> None:
        """Read the run's user-supplied data once here, so that a missing or malformed file stops the
        run with its message (exit status 2) instead of failing inside the ranks."""
        from .lm import load_text

        if cfg["model"] == "resnet18":
            key = repr(("images", cfg["dataset"], cfg.get("image_size"), cfg.get("train_samples"), cfg.get("eval_samples")))
            if key not in ctx.cache:
                load_image_data(cfg)
                ctx.cache[key] = True
        if ctx.preset.get("lm"):
            text = self.text_choice(ctx)[0]
            if text != "pydoc" and repr(("text", text)) not in ctx.cache:
                load_text(text)
                ctx.cache[repr(("text", text))] = True

    def plan(self, ctx: RunContext, done: Mapping[str, Mapping[str, Any]]) -> list[Cell]:
        cfg = self._cfg(ctx)
        self._check_data(ctx, cfg)
        cells = [Cell("train-uncompressed", {"v": CODE_VERSION, "codec": "identity", "params": {}, "ef": False,
                                             "methods": ["uniform"], **cfg})]
        for name in ctx.preset["codecs"]:
            c = self.codecs[name]
            methods = list(METHODS) + ([GLOBAL_TOPK] if c["codec"] == "topk" else [])
            cells.append(Cell(f"train-{name}", {"v": CODE_VERSION, "codec": c["codec"], "params": c.get("params", {}),
                                                "ef": bool(c.get("error_feedback", False)), "methods": methods, **cfg}))
        lm = ctx.preset.get("lm")
        if lm:
            c = self.codecs[lm["codec"]]
            lcfg = self._lm_cfg(ctx, cfg)
            cells.append(Cell(f"lm-{lm['codec']}", {"v": CODE_VERSION, "codec": c["codec"], "params": c.get("params", {}),
                                                   "ef": bool(c.get("error_feedback", False)),
                                                   "methods": list(lm["methods"]), **lcfg}))
        first = ctx.preset["codecs"][0]
        c = self.codecs[first]
        cells.append(Cell("sim-check", {"v": CODE_VERSION, "codec": c["codec"], "params": c.get("params", {}),
                                        "ef": bool(c.get("error_feedback", False)), "of": f"train-{first}", **cfg}))
        return cells

    def steps(self, cell: Cell) -> int | None:
        return None

    @staticmethod
    def model_label(cfg: Mapping[str, Any]) -> str:
        """``"digits MLP"``, ``"digits CNN"`` or ``"ResNet-18 (width 64)"``."""
        if cfg["model"] == "resnet18":
            return f"ResNet-18 (width {cfg['width']})"
        return f"digits {cfg['model'].upper()}"

    def compute(self, cell: Cell, ctx: RunContext) -> Mapping[str, Any]:
        c = dict(cell.config)
        if cell.name == "sim-check":
            return self._simulate(c)
        from gcbench.envs.launch import launch

        ranks = launch(_rank_train, c["workers"], (c["codec"], c["params"], c["ef"], c["methods"], c), timeout_s=120)
        result: dict[str, Any] = {}
        for method in c["methods"]:
            r0 = ranks[0][method]
            result[method] = {
                **{k: v for k, v in r0.items() if k != "digest"},
                "replicas_identical": all(r[method]["digest"] == r0["digest"] for r in ranks),
                "choices_identical": all(r[method]["applied"] == r0["applied"] for r in ranks),
                "digest": r0["digest"],
            }
            self._track(ctx, cell, method, result[method])
        return result

    def _track(self, ctx: RunContext, cell: Cell, method: str, run: Mapping[str, Any]) -> None:
        """One W&B run per method of a cell, logged from rank 0's records after training: per step the
        loss, bytes sent, compression ratio, measured step seconds and the step modelled on the
        single-node profile; summary: final metric and whole-run ratio."""
        c = cell.config
        tracked = ctx.tracker.start(f"{ctx.scale}-{cell.name}-{method}", {
            "paper": "lgreco", "method": method, "codec": c["codec"], "codec_params": dict(c["params"]),
            "error_feedback": c["ef"], "model": c["model"], "workers": c["workers"], "topology": "ddp-gloo",
            "profile": "lgreco-single-node (modelled)", "scale": ctx.scale, "seed": c["seed"],
            "dataset": (run.get("data") or {}).get("name"), "steps": c["steps"], "every": c["every"], "warmup": c["warmup"]},
            tags=["lgreco", ctx.scale, c["codec"], method], group=f"lgreco-{ctx.scale}")
        try:
            if tracked.active:
                raw, wire = self._per_step_bytes(run)
                modelled = self._modelled_steps(run, "lgreco-single-node")
                for i, loss in enumerate(run["losses"]):
                    tracked.log({"loss": loss, "bytes_sent": wire.get(i, 0),
                                 "compression_ratio": raw[i] / wire[i] if wire.get(i) else None,
                                 "time/measured_step_s": run["step_s"][i], "time/modelled_step_s": modelled[i]}, step=i)
                ev = run.get("eval") or {}
                tracked.summary({**{f"metric/{k}": v for k, v in ev.items()}, "compression_ratio": self._ratio(run)})
        finally:
            tracked.finish()

    @staticmethod
    def _simulate(c: Mapping[str, Any]) -> dict[str, Any]:
        from gcbench.envs.simulated import SimulatedCluster

        from gcbench.train import batch_indices, params_digest

        data = load_image_data(c)
        x, y = data.x_train, data.y_train
        model = build_image_model(c, data)
        spec = CodecSpec(name=c["codec"], params=dict(c["params"]), error_feedback=c["ef"])
        layers = [n for n, _ in model.named_parameters()]
        policy = build_policy("lgreco", spec, every=c["every"], warmup=c["warmup"], layers=layers)
        policy._rank = 0
        sim = SimulatedCluster(model, c["workers"], spec, bucket_cap_mb=c["bucket_cap_mb"], policy=policy)
        opt = torch.optim.SGD(model.parameters(), lr=c["lr"], momentum=c["momentum"], weight_decay=float(c.get("weight_decay") or 0.0))
        for step in range(c["steps"]):
            b = [batch_indices(step, w, c["workers"], c["batch"], c["seed"], data.n_train) for w in range(c["workers"])]
            opt.zero_grad(set_to_none=True)
            sim.backward(lambda w, b=b: F.cross_entropy(model(x[b[w]]), y[b[w]]))
            opt.step()
        return {"digest": params_digest(model), "applied": sim.decisions}

    # -- derived numbers ---------------------------------------------------------------------------

    @staticmethod
    def _log(run: Mapping[str, Any]):
        from gcbench.envs.traffic import TrafficLog

        return TrafficLog.from_dict(run["traffic"])

    def _ratio(self, run: Mapping[str, Any], since: int = 0) -> float:
        log = self._log(run)
        raw = sum(r.nbytes for r in log.raw_records if r.step >= since)
        wire = sum(r.nbytes for r in log.wire_records if r.step >= since)
        return raw / wire if wire else math.inf

    def _per_step_bytes(self, run: Mapping[str, Any]) -> tuple[dict[int, int], dict[int, int]]:
        """Uncompressed gradient bytes and wire bytes of rank 0, per step."""
        log = self._log(run)
        raw: dict[int, int] = {}
        wire: dict[int, int] = {}
        for r in log.raw_records:
            raw[r.step] = raw.get(r.step, 0) + r.nbytes
        for r in log.wire_records:
            wire[r.step] = wire.get(r.step, 0) + r.nbytes
        return raw, wire

    def _per_step_ratio(self, run: Mapping[str, Any]) -> list[float]:
        raw, wire = self._per_step_bytes(run)
        return [raw[s] / wire[s] if wire.get(s) else math.nan for s in sorted(raw)]

    def _throughput(self, run: Mapping[str, Any], cfg: Mapping[str, Any], profile: str | None) -> float:
        """Images/s: measured (profile None) or modelled on ``profile``."""
        from gcbench.envs.network import load_profile

        warm = cfg["warmup"] + 1
        steps = run["step_s"][warm:] or run["step_s"]
        if profile is None:
            return cfg["workers"] * cfg["batch"] / statistics.median(steps)
        if len(run["step_s"]) <= warm:  # a run shorter than its warm-up (the steps override): every step counts
            warm = 0
        per = self._modelled_steps(run, profile)[warm:]
        return load_profile(profile).workers * cfg["batch"] / statistics.median(per)

    def _modelled_steps(self, run: Mapping[str, Any], profile: str) -> list[float]:
        """Each step's seconds on ``profile``: measured step time minus measured communication plus
        the step's traffic priced by :func:`gcbench.envs.network.comm_time` at the profile's workers."""
        from gcbench.envs.network import comm_time, load_profile

        log = self._log(run)
        prof = load_profile(profile)
        comm_meas: dict[int, float] = {}
        for r in log.time_records:
            if r.phase == "comm":
                comm_meas[r.step] = comm_meas.get(r.step, 0.0) + r.seconds
        modelled = comm_time(log, prof, workers=prof.workers).per_step_s
        return [max(s - comm_meas.get(i, 0.0), 0.0) + modelled[i] for i, s in enumerate(run["step_s"])]

    def derive(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
        cfg = self._cfg(ctx)
        m: dict[str, float | None] = {}
        base = results["train-uncompressed"]["uniform"]
        m["acc.uncompressed"] = base["eval"]["test_accuracy"]
        ids = METHOD_IDS
        excess = []
        for name in ctx.preset["codecs"]:
            runs = results[f"train-{name}"]
            for method, mid in ids.items():
                if method not in runs:
                    continue
                run = runs[method]
                prefix = "t4" if name == ctx.preset["codecs"][0] else f"t4.{name}"
                m[f"{prefix}.{mid}.ratio"] = self._ratio(run)
                m[f"{prefix}.{mid}.tput_measured"] = self._throughput(run, cfg, None)
                m[f"{prefix}.{mid}.tput_single"] = self._throughput(run, cfg, "lgreco-single-node")
                m[f"{prefix}.{mid}.tput_multi"] = self._throughput(run, cfg, "lgreco-multi-node")
                m[f"acc.{name}.{mid}"] = run["eval"]["test_accuracy"]
                if method in ("lgreco", "lgreco+accordion"):
                    for d in run["decisions"]:
                        if "budget" in d and d["budget"] > 0:
                            excess.append(d["error"] / d["budget"])
            if GLOBAL_TOPK in runs:  # Sec. 5.5: global TopK at L-GreCo's mean density, measured images/s
                m["gtopk.slowdown"] = 1.0 - m[f"{prefix}.global_topk.tput_measured"] / m[f"{prefix}.lgreco.tput_measured"]
                m["gtopk.density"] = runs[GLOBAL_TOPK]["density"]
            lg = runs["lgreco"]
            total = sum(lg["step_s"])
            tables = sum(d.get("tables_s", 0.0) + d.get("accumulate_s", 0.0) for d in lg["decisions"])
            dp = sum(d.get("dp_s", 0.0) + d.get("broadcast_s", 0.0) for d in lg["decisions"])
            key = "t1.powersgd.txl" if name == "powersgd" else f"t1.{name}.ours"
            m[key] = (tables + dp) / total if total else None
            m[f"t1.{name}.error_share"] = tables / total if total else None
        for name, runs in results.items():
            if not name.startswith("lm-"):
                continue
            lcfg = self._lm_cfg(ctx, cfg)
            for method, run in runs.items():
                mid = ids.get(method, method)
                m[f"lm.{mid}.ratio"] = self._ratio(run)
                m[f"lm.{mid}.perplexity"] = run["eval"]["test_perplexity"]
                m[f"lm.{mid}.tokens_per_s"] = self._throughput(run, lcfg, None) * 32  # CONTEXT tokens per sample
        first = ctx.preset["codecs"][0]
        m["acc.lgreco"] = m[f"acc.{first}.lgreco"]
        m["dp.max_error_over_budget"] = max(excess) if excess else None
        m["dp.one"] = 1.0
        sim = results["sim-check"]
        m["sim.equals_real"] = float(sim["digest"] == results[f"train-{first}"]["lgreco"]["digest"])
        return m

    # -- report ------------------------------------------------------------------------------------

    def report(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]],
               measured: Mapping[str, float | None]) -> ReportParts:
        from ..framework.claims import fmt_num
        from ..framework.report import md_table, new_figure, savefig

        cfg = self._cfg(ctx)
        parts = ReportParts()
        first_run = results[f"train-{ctx.preset['codecs'][0]}"]["uniform"]
        n_params = first_run.get("model_params") or 0
        data = first_run.get("data") or {"name": "digits", "description": "sklearn digits"}
        model_name = self.model_label(cfg)
        _, fallback_note = self.dataset_choice(ctx)
        if fallback_note:
            parts.header_lines.append(f"**Data set fallback:** {fallback_note}")
        text_note = self.text_choice(ctx)[1] if ctx.preset.get("lm") else None
        if text_note:
            parts.header_lines.append(f"**Text fallback:** {text_note}")
        parts.header_lines.append(
            f"Workload: {model_name} ({n_params:,} parameters) on {data['name']} ({data['description']}"
            + (f"; {data['used_train']:,} train images, test accuracy on {data['used_test']:,}, {data['resized']}" if "used_train" in data else "")
            + f"), {cfg['workers']} real gloo ranks "
            f"(DDP + gcbench hook, {cfg['steps']} steps, batch {cfg['batch']}/rank), decisions every {cfg['every']} steps "
            f"after {cfg['warmup']} warm-up steps. The paper: Transformer-XL (257M) on WikiText-103 on 8-16 RTX3090s. "
            "Ratios and overheads are scale-dependent. A tiny Transformer LM on real text runs beside it "
            "(section below) when the preset has `lm`."
        )
        rows = []
        ids = METHOD_IDS
        for name in ctx.preset["codecs"]:
            runs = results[f"train-{name}"]
            prefix = "t4" if name == ctx.preset["codecs"][0] else f"t4.{name}"
            for method, mid in ids.items():
                if method not in runs:
                    continue
                run = runs[method]
                last = run["applied"][-1]["layer_params"] if run["applied"] else {}
                param = next(iter(self.codecs[name].get("params", {"?": 0})))
                chosen = ",".join(str(v.get(param)) for k, v in last.items() if k.endswith("weight"))
                chosen = f"{param} {chosen}" if chosen else "uniform"
                if method == GLOBAL_TOPK:
                    chosen = f"ratio {run['density']:.4g} over the whole model (L-GreCo's mean over its steps)"
                rows.append([name, LABELS[method], fmt_num(measured[f"{prefix}.{mid}.ratio"]),
                             fmt_num(measured[f"{prefix}.{mid}.tput_measured"]),
                             fmt_num(measured[f"{prefix}.{mid}.tput_single"]), fmt_num(measured[f"{prefix}.{mid}.tput_multi"]),
                             f"{run['eval']['test_accuracy'] * 100:.2f}", chosen,
                             "yes" if run["replicas_identical"] and run["choices_identical"] else "NO"])
        rows.append(["identity", "uncompressed", "1", "", "", "", f"{measured['acc.uncompressed'] * 100:.2f}", "", ""])
        parts.sections.append((
            "Table 4 analogue: compression ratio and throughput (images/s)",
            md_table(["codec", "method", "ratio (raw/wire bytes, whole run)", "measured img/s (gloo, this machine)",
                      "modelled img/s single-node (8 GPUs)", "modelled img/s multi-node (16 GPUs)", "test acc %",
                      "last choice (weights)", "ranks & choices identical"], rows)
            + "\n\nRatio = uncompressed gradient bytes / real bytes on the wire (payloads, sizes, checks, choice broadcasts) over "
              "the whole run, warm-up included. Modelled = measured step time minus measured communication plus the step's "
              "traffic priced on `envs/profiles/lgreco-*.toml`. Global TopK (Sec. 5.5, TopK only): one selection over the "
              "whole model's gradient at L-GreCo's mean overall density (the average over its steps, warm-up included, of the density its per-layer choice kept), with error feedback, sent after the last bucket "
              "(`gcbench_global_hook`); every method here is synchronous per bucket, so the overlap the paper credits "
              "layer-wise compression with (Fig. 10) does not exist on this machine.",
        ))
        orows = []
        for name in ctx.preset["codecs"]:
            lg = results[f"train-{name}"]["lgreco"]
            total = sum(lg["step_s"])
            t_s = sum(d.get("tables_s", 0.0) for d in lg["decisions"])
            a_s = sum(d.get("accumulate_s", 0.0) for d in lg["decisions"])
            dp_s = sum(d.get("dp_s", 0.0) for d in lg["decisions"])
            b_s = sum(d.get("broadcast_s", 0.0) for d in lg["decisions"])
            orows.append([name, len(lg["decisions"]), f"{total:.3f}", f"{t_s * 1e3:.1f}", f"{a_s * 1e3:.2f}", f"{dp_s * 1e3:.1f}",
                          f"{b_s * 1e3:.2f}", f"{(t_s + a_s + dp_s + b_s) / total * 100:.2f}%", f"{(t_s + a_s) / total * 100:.2f}%"])
        parts.sections.append((
            "Table 1 analogue: L-GreCo overhead (rank 0, measured)",
            md_table(["codec", "decisions", "training s", "error tables ms", "accumulate ms", "DP ms", "broadcast ms",
                      "overhead % [all]", "[error computation]"], orows)
            + "\n\nThe paper's 0.56% is for a 257M-parameter model trained for hours with one decision per epoch; "
              f"here a {n_params:,}-parameter {model_name} trains for a few hundred steps with a decision every few dozen steps, "
              "so the share is far larger.",
        ))
        lm_rows = []
        for name, runs in results.items():
            if not name.startswith("lm-"):
                continue
            for method, run in runs.items():
                mid = ids.get(method, method)
                last = run["applied"][-1]["layer_params"] if run["applied"] else {}
                chosen = ", ".join(f"{k.removesuffix('.weight')}:{v.get('rank')}" for k, v in last.items()
                                   if k.endswith("weight") and "norm" not in k) or "uniform"
                lm_rows.append([name[3:], LABELS.get(method, method), fmt_num(measured[f"lm.{mid}.ratio"]),
                                fmt_num(measured[f"lm.{mid}.tokens_per_s"]), f"{measured[f'lm.{mid}.perplexity']:.1f}", chosen,
                                "yes" if run["replicas_identical"] and run["choices_identical"] else "NO"])
        if lm_rows:
            lmc = ctx.preset["lm"]
            lm_data = next(iter(next(r for n, r in results.items() if n.startswith("lm-")).values())).get("data") or {}
            if lm_data.get("name", "pydoc") == "pydoc":
                text_line = ("on the English prose of Python's documentation (stdlib `pydoc_data`, ~80k words; 10% held out)",
                             "Not WikiText-103 (not given: `--dataset wikitext103:FOLDER`)")
            else:
                text_line = (f"on {lm_data['description']}", "WikiText-103 as the paper, with a 1,000-token vocabulary")
            parts.sections.append((
                "Transformer LM on real English text (Table 4's model family, tiny)",
                f"One-layer causal Transformer (d 64, vocabulary 1,000) {text_line[0]}, {cfg['workers']} gloo ranks, {lmc['steps']} steps of "
                f"{lmc['batch']} x 32 tokens per rank, Adam lr {lmc['lr']}, decisions every {lmc['every']} steps after {lmc['warmup']}. "
                f"{text_line[1]}, and far from Transformer-XL's 257M parameters.\n\n"
                + md_table(["codec", "method", "ratio (raw/wire)", "measured tokens/s (gloo)", "held-out perplexity",
                            "last choice (rank per weight)", "ranks & choices identical"], lm_rows),
            ))
        parts.header_lines.append(
            f"Simulated cluster (W = {cfg['workers']}) vs the real gloo run, L-GreCo + {ctx.preset['codecs'][0]}: "
            f"{'identical parameters and choices' if measured['sim.equals_real'] == 1.0 else 'DIFFERENT'}."
        )
        plot_dir = ctx.out_dir / "plots"
        fig, axes = new_figure(1, 2, figsize=(11, 4))
        first = ctx.preset["codecs"][0]
        for method in METHODS:
            axes[0].plot(self._per_step_ratio(results[f"train-{first}"][method]), label=LABELS[method])
        axes[0].set_xlabel("step")
        axes[0].set_ylabel("compression ratio (raw / wire bytes)")
        axes[0].set_title(f"Fig. 9 analogue: {first}, ratio over training")
        axes[0].legend(fontsize=7)
        for k, method in enumerate(("uniform", "lgreco")):
            log = self._log(results[f"train-{first}"][method])
            last = max(r.step for r in log.wire_records)
            per_bucket: dict[int, int] = {}
            for r in log.wire_records:
                if r.step == last and r.bucket >= 0:
                    per_bucket[r.bucket] = per_bucket.get(r.bucket, 0) + r.nbytes
            bs = sorted(per_bucket)
            axes[1].bar([b + 0.4 * k for b in bs], [per_bucket[b] for b in bs], width=0.4, label=LABELS[method])
        axes[1].set_xlabel("bucket")
        axes[1].set_ylabel("bytes sent (last step)")
        axes[1].set_title("bytes per bucket")
        axes[1].legend(fontsize=7)
        path = savefig(fig, plot_dir / "fig9_ratio_over_training.png")
        parts.plots.append(("Fig. 9 analogue: compression ratio over training; bytes per bucket", str(path.relative_to(ctx.out_dir))))
        parts.labels = {"t4.uniform.ratio": "uniform", "t4.lgreco.ratio": "L-GreCo", "t4.accordion.ratio": "Accordion",
                        "t4.cgx.ratio": "CGX", "t4.lgreco_accordion.ratio": "L-GreCo+Accordion",
                        "acc.lgreco": "L-GreCo acc", "acc.uncompressed": "uncompressed acc",
                        "dp.max_error_over_budget": "max error/budget", "dp.one": "1",
                        "gtopk.slowdown": "global TopK throughput deficit vs L-GreCo"}
        parts.units_ours = {k: f"img/s ({model_name})" for k in measured if ".tput_" in k}
        parts.units_ours.update({"t1.powersgd.txl": f"(fraction; {model_name})"})
        parts.extra = {"config": cfg, "data": data, "dataset_fallback": fallback_note, "text_fallback": text_note}
        return parts


def workload() -> LGreCoWorkload:
    """The workload object the runner uses."""
    return LGreCoWorkload(load())
