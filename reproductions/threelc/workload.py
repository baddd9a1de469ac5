"""The 3LC reproduction: one training cell per method, their derived numbers, the report.

Cells (each cached on its own, see :mod:`..framework.cells`): ``train-<method>`` for the 32-bit
baseline, 3LC at every sparsity multiplier of ``[workload] sparsity_multipliers`` and the
comparators (:mod:`.train`). The ``traffic`` table needs the 3LC cells only; ``accuracy`` and
``time`` need every cell.

At a scale with a ``[scales.<name>.traffic]`` sub-table (``claims``) the traffic table comes from
separate ``traffic-<3LC method>`` cells: the same training loop at the sub-table's model and step
count (ResNet-110), each evaluated on ``eval_samples`` test images only at its start and end; the
accuracy and time tables still come from the ``train-<method>`` cells (only the preset's ``methods``
where it lists some). With ``shared_warmup = W`` in the sub-table, one ``warmup`` cell first trains
``W`` steps with ``warmup_method`` and checkpoints them, and every traffic cell branches from that
checkpoint (:mod:`.branch`), its error-accumulation memories ``branch_memories`` = ``"empty"`` or
``"warm"`` (the warm-up codec's); ``traffic.settled.s<s>`` is the branch's settle verdict (1 or 0) over
``settle_window``-step windows.

Derived numbers:

* per-stage bytes (3LC, push + pull, whole training): 32-bit ``4n``, 2-bit packing, quartic,
  zero-run; ``quartic.saving = 1 - quartic / 2-bit``; ``zero_run.gain.s<s> = quartic / zero-run``;
* ``traffic.reduction.<...>`` = fp32 bytes of an uncompressed run of the same steps (push and pull)
  / the bytes the run's :class:`~gcbench.envs.traffic.TrafficLog` recorded: the transport's
  messages, framed by :mod:`gcbench.envs.framing` (header once per link and tensor, then
  references; every message parsed at its receiver), first full headers included;
* ``traffic.reduction_self_describing.s<s>``: the same fp32 bytes / the same payloads as
  ``Payload.to_bytes()`` (full header in every message), for comparison;
  ``traffic.settle.s<s>`` = |reduction over the last quarter of the steps / over the quarter
  before - 1| (per step): how far the statistics still move;
  ``traffic.reduction_settled.s<s>``: the reduction over the steps from the scale's
  ``settled_from`` on (the steady state; :mod:`.settle` measures where it starts): what a long
  training sends per step, its first steps from initialisation being a vanishing share;
* ``comm.reduction.<profile>.s<s>`` = modelled communication seconds of the fp32 run / of the framed
  3LC run (``alpha + bytes / beta`` per push and pull phase): hardware-independent apart from alpha;
  ``time.reduction_modelled.<profile>.s<s>``: (compute + fp32 comm) / (compute + 3LC's codec time
  measured here + framed comm) per step, compute = ``compute_seconds_per_step`` when the user gives
  one (measured on their GPU), else the forward/backward measured here;
* accuracy: final test accuracy; ``acc.delta_pp`` = minus the 32-bit run's, in points;
* time: measured compute + modelled communication per profile; the reduction of total training
  time against 32-bit, and time to accuracy (first evaluation at the 32-bit run's final accuracy
  minus ``tta_margin``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from gcbench.envs.network import load_profile, server_time

from ..framework.cells import Cell, CellStore
from ..framework.runner import ReportParts, RunContext
from ..framework.spec import Spec, load_spec
from .branch import CHECKPOINT_DIR, branch_sent, checkpoint_path, load_state, save_state, settle_verdict
from .settings import ThreeLCSettings, s_key, stage_bytes, traffic_preset
from .train import MethodSpec, PreparedData, TrainConfig, TrainState, train

SPEC_PATH = Path(__file__).with_name("spec.toml")
#: Bump when the workload's code changes what a cell computes (invalidates cached cells).
CODE_VERSION = 4  # 4: ZipML / TernGrad uniforms from compressors.kernels.dither (DITHER_VERSION 2)
#: The shared warm-up cell of the claims scale's traffic cells (its method: the preset's ``warmup_method``).
WARMUP_CELL = "warmup"
TRAFFIC_TABLE = "traffic"
#: Seed of the fixed training subset (``train_subset``): the same images for every cell and run.
SUBSET_SEED = 20_190_401


def load() -> Spec:
    """The 3LC spec."""
    return load_spec(SPEC_PATH)


class ThreeLCWorkload(ThreeLCSettings):
    """The :class:`~..framework.runner.Workload` of the 3LC reproduction."""

    # -- planning ----------------------------------------------------------------------------------

    def needed_methods(self, tables: list[str]) -> list[str]:
        """Methods the selected tables need, in report order."""
        if any(t != TRAFFIC_TABLE for t in tables):
            return list(self.order)
        return [m for m in self.order if self.methods[m].is_3lc]

    def plan(self, ctx: RunContext, done: Mapping[str, Mapping[str, Any]]) -> list[Cell]:
        """One ``train-<method>`` cell per method the selected tables need."""
        dataset, _ = self.dataset_choice(ctx)
        cfg = self.run_config(ctx)
        base = {
            "code_version": CODE_VERSION, "dataset": dataset, "image_size": int(ctx.preset["image_size"]),
            "eval_samples": int(ctx.preset["eval_samples"]), "augment": bool(ctx.preset.get("augment", False)),
            "topology": self.spec.workload["topology"], "train": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.__dict__.items()},
        }
        base["train_subset"] = ctx.preset.get("train_subset")
        cells = []
        tp = traffic_preset(ctx.preset)
        needed = self.needed_methods(ctx.tables)
        if ctx.preset.get("methods"):  # a scale that trains only some of the methods (claims: the ones the issue names)
            keep = set(ctx.preset["methods"])
            needed = [m for m in needed if m in keep]
        if tp is not None and TRAFFIC_TABLE in ctx.tables:
            tcfg = self.config_from(tp, ctx)
            tbase = {**base, "eval_limit": int(tp["eval_samples"]),
                     "train": {k: (list(v) if isinstance(v, tuple) else v) for k, v in tcfg.__dict__.items()}}
            start = None
            warm_steps = int(tp.get("shared_warmup", 0))
            if warm_steps > 0:  # one warm-up (``warmup_method``) that every 3LC setting branches from (.branch)
                wcfg = dataclasses.replace(tcfg, steps=warm_steps, eval_every=warm_steps)
                warm_method = str(tp["warmup_method"])
                if warm_method not in self.methods or self.methods[warm_method].local_steps != 1:
                    raise ValueError(f"{self.spec.path}: warmup_method {warm_method!r} is not an every-step method of [workload.methods]")
                warm = Cell(WARMUP_CELL, {**tbase, "kind": "warmup", "method": self.method_config(warm_method),
                                          "train": {k: (list(v) if isinstance(v, tuple) else v) for k, v in wcfg.__dict__.items()}})
                cells.append(warm)
                memories = str(tp.get("branch_memories", "empty"))
                if memories not in ("empty", "warm"):
                    raise ValueError(f"{self.spec.path}: branch_memories must be 'empty' or 'warm', got {memories!r}")
                start = {"name": warm.name, "config": warm.config, "memories": memories}
            for m in self.order:
                if self.methods[m].is_3lc:
                    cells.append(Cell(f"traffic-{m}", {**tbase, "kind": "traffic", "method": self.method_config(m),
                                                       **({"start": start} if start else {})}))
            if all(t == TRAFFIC_TABLE for t in ctx.tables):
                return cells
        for m in needed:
            cells.append(Cell(f"train-{m}", {**base, "kind": "train", "method": self.method_config(m)}))
        return cells

    def method_config(self, m: str) -> dict[str, Any]:
        """Method ``m`` as part of a cell's config (its prose note left out: it does not change results)."""
        return {k: v for k, v in self.methods[m].as_config().items() if k != "note"}

    def warm_state(self, start: Mapping[str, Any], ctx: RunContext) -> TrainState:
        """The checkpoint of the warm-up cell described by ``start`` (a branch's ``start`` config).

        Read from the file the warm-up cell wrote when its SHA-256 matches the cached cell's record;
        otherwise (file missing or altered, cell not cached) the warm-up is computed again and both
        the file and the cell are rewritten."""
        warm = Cell(str(start["name"]), start["config"])
        memo = ctx.cache.setdefault("warm_states", {})
        if warm.key in memo:
            return memo[warm.key]
        store = CellStore(ctx.out_dir / "cells")
        cached = store.load(warm)
        path = checkpoint_path(ctx.out_dir, warm.key)
        state = load_state(path, (cached or {}).get("checkpoint", {}).get("sha256"))
        if state is None:
            t0 = time.perf_counter()
            result = self.compute(warm, ctx)
            store.save(warm, result, elapsed_s=time.perf_counter() - t0)
            state = load_state(path, result["checkpoint"]["sha256"])
            if state is None:  # pragma: no cover - the file was just written
                raise RuntimeError(f"the warm-up checkpoint {path} could not be read back")
        memo[warm.key] = state
        return state

    def steps(self, cell: Cell) -> int | None:
        """Progress-bar steps of a cell: its evaluations."""
        t = cell.config["train"]
        return int(t["steps"]) // int(t["eval_every"]) + 1

    # -- computing ---------------------------------------------------------------------------------

    def data(self, ctx: RunContext, dataset: str, image_size: int, eval_samples: int, augment: bool,
             train_subset: int | None = None) -> PreparedData:
        """The prepared images of this run (loaded once per run and cached in ``ctx``).

        A side smaller than ``image_size`` is zero-padded to it (Fashion-MNIST 28x28 -> 32x32, the
        CIFAR-10 input size); a side that ``image_size`` divides is average-pooled to it.
        ``train_subset``: keep that many training images (a fixed seeded choice, the same for every cell).
        """
        from gcbench.data.images import load_images, to_float

        key = repr((dataset, image_size, eval_samples, augment, train_subset))
        if ctx.cache.get("data_key") != key:
            t0 = time.perf_counter()
            ds = load_images(dataset)
            side = int(ds.x_train.shape[-1])
            x_train, x_test, y_train = ds.x_train, ds.x_test, ds.y_train
            if image_size > side:
                lo = (image_size - side) // 2
                pad = (lo, image_size - side - lo, lo, image_size - side - lo)
                x_train, x_test = F.pad(x_train, pad), F.pad(x_test, pad)
                resized = f"{side}x{side} -> {image_size}x{image_size} (zero padding)"
                size = image_size
            else:
                size = image_size if side % image_size == 0 else side
                resized = f"{side}x{side} -> {size}x{size} (average pooling)" if size != side else f"{side}x{side} (native)"
            n_all = int(x_train.shape[0])
            if train_subset is not None and int(train_subset) < n_all:
                keep = torch.randperm(n_all, generator=torch.Generator().manual_seed(SUBSET_SEED))[: int(train_subset)]
                x_train, y_train = x_train[keep], y_train[keep]
            x_tr, mean, std = to_float(x_train, size)
            n_eval = min(eval_samples, int(x_test.shape[0]))
            x_te, _, _ = to_float(x_test[:n_eval], size, mean=mean, std=std)
            summary = {**ds.summary(), "image_size": size, "eval_samples": n_eval, "resized": resized,
                       "train_images": int(x_tr.shape[0]), "train_images_available": n_all,
                       "normalisation": {"mean": mean.tolist(), "std": std.tolist()}, "load_s": time.perf_counter() - t0}
            ctx.cache["data"] = PreparedData(x_tr, y_train.clone(), x_te, ds.y_test[:n_eval].clone(), summary,
                                             augment=augment)
            ctx.cache["data_key"] = key
            ctx.cache["dataset_summary"] = summary
        return ctx.cache["data"]

    def compute(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        """Run one training cell with torch on one thread (the simulated workers run one after another)."""
        c = cell.config
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            data = self.data(ctx, c["dataset"], c["image_size"], c["eval_samples"], c["augment"], c.get("train_subset"))
            if c.get("eval_limit"):  # traffic cells: a short evaluation at the start and the end
                n = int(c["eval_limit"])
                data = dataclasses.replace(data, x_test=data.x_test[:n], y_test=data.y_test[:n])
            tc = dict(c["train"])
            tc["profiles"] = tuple(tc["profiles"])
            cfg = TrainConfig(**tc)
            m = c["method"]
            method = MethodSpec(**{**m, "params": dict(m["params"]), "note": self.methods[m["name"]].note if m["name"] in self.methods else ""})
            run = ctx.tracker.start(
                f"{ctx.scale}-{cell.name}",
                {"paper": "3lc", "method": method.name, "label": method.label, "codec": method.codec,
                 "codec_params": dict(method.params), "error_feedback": method.error_feedback, "pull": method.pull,
                 "local_steps": method.local_steps, "workers": cfg.workers, "topology": c["topology"],
                 "profiles": list(cfg.profiles), "scale": ctx.scale, "seed": cfg.seed, "dataset": c["dataset"],
                 "model": f"resnet{cfg.depth}-w{cfg.width}", "image_size": c["image_size"], "steps": cfg.steps,
                 "batch_per_worker": cfg.batch_per_worker, "lr": cfg.lr},
                tags=["3lc", ctx.scale, method.name, method.kind, c["topology"], c["dataset"].split(":")[0]],
                group=f"3lc-{ctx.scale}",
            )
            start = self.warm_state(c["start"], ctx) if c.get("start") else None
            try:
                result = train(data, cfg, method, on_eval=lambda rec: ctx.progress.advance_epoch(), start=start,
                               keep_state=c["kind"] == "warmup", warm_memories=c.get("start", {}).get("memories") == "warm")
                if c["kind"] == "warmup":
                    state = result.pop("state")
                    path = checkpoint_path(ctx.out_dir, cell.key)
                    result["checkpoint"] = {"file": f"{CHECKPOINT_DIR}/{path.name}", "sha256": save_state(state, path),
                                            "step": state.step}
                if start is not None:
                    result["branched_from"] = {"cell": c["start"]["name"], "step": start.step, "memories": c["start"]["memories"]}
                for e in result["evals"]:
                    row = {"test/accuracy": e["test_acc"], "test/loss": e["test_loss"], "train/loss": e["train_loss"],
                           "bytes_sent": e["bytes"], "time/measured_s": e["measured_s"]}
                    for p, v in e["time_s"].items():
                        row[f"time/{p}_s"] = v
                    for p, v in e["modelled_comm_s"].items():
                        row[f"time/modelled_comm_{p}_s"] = v
                    if e["bytes"]:
                        fp32 = 2 * 4 * result["summary"]["params"] * cfg.workers * e["step"]
                        row["compression_ratio"] = fp32 / e["bytes"]
                    run.log(row, step=e["step"])
                run.summary({k: v for k, v in result["summary"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
            finally:
                run.finish()
            result["wandb_dir"] = run.dir
            result["dataset"] = data.summary
            return result
        finally:
            torch.set_num_threads(threads)

    # -- deriving ----------------------------------------------------------------------------------

    def derive(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
        """The measured quantities the spec's values and claims name (see the module docstring)."""
        w = self.spec.workload
        out: dict[str, float | None] = {}
        profiles = list(w["profiles"])
        res = {m: results.get(f"train-{m}") for m in self.order}
        base = res.get("32bit")
        stage_tot = {"2bit": 0, "quartic": 0, "values": 0}
        mismatches = 0
        for m, r in res.items():
            if r is not None:
                s = r["summary"]
                out[f"traffic.reduction.{m}"] = s["traffic_reduction"]
                out[f"acc.final.{m}"] = s["final_test_acc"]
                for p in profiles:
                    out[f"time.total.{p}.{m}"] = s["total_time_s"][p]
            if self.methods[m].is_3lc and (r is not None or f"traffic-{m}" in results):
                key = s_key(self.methods[m].params["sparsity"])
                tr = results.get(f"traffic-{m}") or r  # the traffic cell where the scale has one
                assert tr is not None
                st = stage_bytes(tr)
                ts = tr["summary"]
                out[f"traffic.reduction.s{key}"] = ts["traffic_reduction"]
                out[f"traffic.reduction_streams.s{key}"] = st["fp32"] / (st["zero_run"] + st["scale"])
                out[f"traffic.reduction_self_describing.s{key}"] = ts["baseline_fp32_bytes"] / st["payload"]
                out[f"zero_run.gain.s{key}"] = st["quartic"] / st["zero_run"] if st["zero_run"] else math.inf
                for k in stage_tot:
                    stage_tot[k] += st[k]
                mismatches += sum(v["mismatch_count"] for v in tr["stages"].values())
                is_traffic = f"traffic-{m}" in results
                out.update(framed_quantities(tr, key, profiles, ctx.options.get("compute_seconds_per_step"),
                                             settled_from=self.settled_from(ctx, traffic_cell=is_traffic)))
                verdict = self.settle_of(ctx, tr, traffic_cell=is_traffic)
                if verdict is not None:
                    out[f"traffic.settled.s{key}"] = float(verdict["settled"])
        for p in profiles:
            for q in ("time.reduction_modelled", "comm.reduction"):
                vals = [out[f"{q}.{p}.s{s_key(sp)}"] for sp in self.sparsities if f"{q}.{p}.s{s_key(sp)}" in out]
                if len(vals) == len(self.sparsities):
                    out[f"{q}.{p}.best"] = max(vals)
        if stage_tot["values"]:
            out["quartic.saving"] = 1.0 - stage_tot["quartic"] / stage_tot["2bit"]
            out["quartic.bits"] = 8.0 * stage_tot["quartic"] / stage_tot["values"]
            out["stage.mismatches"] = float(mismatches)
        if base is not None:
            b = base["summary"]
            for m, r in res.items():
                if r is None:
                    continue
                s = r["summary"]
                out[f"acc.delta_pp.{m}"] = 100.0 * (s["final_test_acc"] - b["final_test_acc"])
                for p in profiles:
                    out[f"time.reduction.{p}.{m}"] = b["total_time_s"][p] / s["total_time_s"][p]
                    out[f"tta.{p}.{m}"] = time_to_accuracy(r, b["final_test_acc"], float(w["tta_margin"]), p)
            deltas = []
            for sp in self.sparsities:
                d = out.get(f"acc.delta_pp.3lc-s{s_key(sp)}")
                if d is not None:
                    out[f"acc.delta_pp.s{s_key(sp)}"] = d
                    deltas.append(d)
            if len(deltas) == len(self.sparsities):
                out["acc.delta_pp.worst3lc"] = min(deltas)
            for p in profiles:
                reds = [out.get(f"time.reduction.{p}.3lc-s{s_key(sp)}") for sp in self.sparsities]
                if all(v is not None for v in reds):
                    out[f"time.reduction.{p}.best"] = max(reds)  # type: ignore[type-var]
            if "acc.delta_pp.stoch3-ef" in out:
                out["stoch3ef.converged"] = float(out["acc.delta_pp.stoch3-ef"] >= -float(w["converged_within_pp"]))  # type: ignore[operator]
        return out

    def settle_of(self, ctx: RunContext, result: Mapping[str, Any], *, traffic_cell: bool) -> dict[str, Any] | None:
        """The settle verdict of one 3LC cell (:func:`.branch.settle_verdict`) with its scale's
        ``settle_window`` and ``settle_tolerance``; None when the scale sets no window or the cell
        has no per-step framed bytes."""
        p = (traffic_preset(ctx.preset) if traffic_cell else ctx.preset) or {}
        if "settle_window" not in p or "framed_per_step" not in result["stages"].get("push", {}):
            return None
        s = result["summary"]
        return settle_verdict(s["baseline_fp32_bytes"] / s["steps"], branch_sent(result), int(p["settle_window"]),
                              self.settled_from(ctx, traffic_cell=traffic_cell), float(p.get("settle_tolerance", 0.15)))

    # -- reporting ---------------------------------------------------------------------------------

    def report(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]], measured: Mapping[str, float | None]) -> ReportParts:
        """Header lines, measured tables, the discussion, and the plots."""
        from .report import build_report

        return build_report(self, ctx, results, measured)


def framed_quantities(result: Mapping[str, Any], key: str, profiles: Sequence[str],
                      compute_s: float | None = None, settled_from: int = 0) -> dict[str, float]:
    """Settling, steady-state reduction, modelled communication and modelled time of one 3LC cell
    from its framed bytes per step (see the module docstring). ``compute_s``: seconds of
    forward/backward per step (None: measured here). ``settled_from``: the first step of the steady
    state (the scale's ``settled_from``, measured by :mod:`.settle`); the steady-state reduction,
    the communication-time and the modelled time reductions count steps from there on."""
    s = result["summary"]
    stages = result["stages"]
    if "framed_per_step" not in stages["push"]:
        return {}
    fp32 = s["baseline_fp32_bytes"]
    out: dict[str, float] = {}
    push_all, pull_all = stages["push"]["framed_per_step"], stages["pull"]["framed_per_step"]
    q = len(push_all) // 4
    if q >= 1:
        last = sum(push_all[-q:]) + sum(pull_all[-q:])
        prev = sum(push_all[-2 * q : -q]) + sum(pull_all[-2 * q : -q])
        out[f"traffic.settle.s{key}"] = abs(prev / last - 1.0) if last else math.inf  # ratio of reductions
    k0 = min(max(int(settled_from), 0), len(push_all) - 1)
    push, pull = push_all[k0:], pull_all[k0:]
    steps = len(push)
    per_step_fp32 = fp32 / s["steps"] / 2  # one direction, every worker
    sent = sum(push) + sum(pull)
    out[f"traffic.reduction_settled.s{key}"] = 2 * per_step_fp32 * steps / sent if sent else math.inf
    measured = (result.get("measured_step_s") or [])[k0:]
    compute = (result.get("compute_step_s") or [])[k0:]
    for p in profiles:
        link = load_profile(p).link
        comm32 = steps * 2 * server_time(per_step_fp32, link)
        comm = sum(server_time(a, link) + server_time(b, link) for a, b in zip(push, pull))
        out[f"comm.reduction.{p}.s{key}"] = comm32 / comm
        if measured and compute and len(measured) == len(compute):
            codec = sum(m - c for m, c in zip(measured, compute)) / len(measured)  # this machine's 3LC codec + step
            c_step = float(compute_s) if compute_s is not None else sum(compute) / len(compute)
            out[f"time.reduction_modelled.{p}.s{key}"] = (steps * c_step + comm32) / (steps * (c_step + codec) + comm)
    return out


def time_to_accuracy(result: Mapping[str, Any], baseline_final_acc: float, margin: float, profile: str) -> float:
    """Seconds (measured + modelled on ``profile``) until the first evaluation at ``baseline - margin``
    accuracy; ``inf`` when never reached."""
    target = baseline_final_acc - margin
    for e in result["evals"]:
        if e["test_acc"] >= target:
            return float(e["time_s"][profile])
    return math.inf


def workload() -> ThreeLCWorkload:
    """The workload, built from the spec."""
    return ThreeLCWorkload(load())


__all__ = ["SPEC_PATH", "ThreeLCWorkload", "framed_quantities", "load", "time_to_accuracy", "workload"]
