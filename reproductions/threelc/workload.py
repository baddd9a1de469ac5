"""The 3LC reproduction: one training cell per method, their derived numbers, the report.

Cells (each cached on its own, see :mod:`..framework.cells`): ``train-<method>`` for the 32-bit
baseline, 3LC at every sparsity multiplier of ``[workload] sparsity_multipliers`` and the
comparators (:mod:`.train`), each trained from the same initial weights with empty error memories
over the scale's whole schedule (only the preset's ``methods`` where it lists some). The ``traffic``
table needs the 32-bit and 3LC cells (the 32-bit run is the reference of the training check,
``train.excess_loss.s<s>``); ``accuracy`` and ``time`` need every cell. A scale with a
``[scales.<name>.proxy_tie]`` sub-table adds one ``tie-<method>`` cell: that method on the
sub-table's model (ResNet-110) over the first ``steps`` steps of the same schedule, which ties the
proxy's traffic to the paper's model. A scale with ``length_check = f`` adds, where the accuracy
table is selected, one ``long-32bit`` cell: the 32-bit run over the same schedule stretched to ``f``
times its steps (:meth:`.settings.ThreeLCSettings.length_config`), which tells whether the scale's
schedule ends where longer training would. A device other than the CPU is part of every cell's key.

Derived numbers (3LC, push + pull, whole run):

* per-stage bytes: 32-bit ``4n``, 2-bit packing, quartic, zero-run; ``quartic.saving = 1 - quartic /
  2-bit``; ``zero_run.gain.s<s> = quartic / zero-run``;
* ``traffic.reduction.s<s>`` = fp32 bytes of an uncompressed run of the same steps (push and pull)
  / the bytes the run's :class:`~gcbench.envs.traffic.TrafficLog` recorded: the transport's messages,
  framed by :mod:`gcbench.envs.framing` (header once per link and tensor, then references), first
  full headers included; ``traffic.reduction_self_describing.s<s>`` (the same payloads as
  ``Payload.to_bytes()``, header in every message) and ``traffic.reduction_streams.s<s>`` (zero-run
  data + scales only) beside it;
* ``traffic.drifting.s<s>``: 1 when the framed reduction per ``drift_window``-step window moves more
  than ``drift_tolerance`` between windows (:mod:`.drift`), else 0 (information beside the traffic
  claims: a drifting series's whole-run ratio depends on the run's length);
* ``tie.*``: the tie cell's framed reduction over its steps, the proxy's over the same steps (each
  fp32 bytes of those steps / the framed push + pull payloads of those steps, statistics on neither side), their
  ratio, ``tie.trained`` (1 where the tie's held-out loss ended below its start and below ln 10, a
  uniform guess's) and, only where it trained, ``traffic.reduction_est110.s<s>`` = the proxy's
  whole-run reduction x that ratio (an estimate, labelled so);
* ``time.reduction_modelled.<profile>.s<s>`` and ``time.bw<target>x.s<s>``: the modelled time
  reduction and the bandwidth at which 16x / 23x would be reached (:mod:`.timecurve`), every setting's
  step priced with one compute time (:func:`.timecurve.model_compute_s`) and its own codec share of
  compute (:func:`.timecurve.codec_share`) times this machine's one compute time;
* accuracy: final test accuracy; ``acc.delta_pp`` = minus the 32-bit run's, in points;
  ``acc.length_gain_pp`` = the ``long-32bit`` cell's final accuracy minus the 32-bit run's, in points,
  and ``acc.schedule_settled`` = 1 where that gain is at most the accuracy claims' tolerance (the claims
  that name it as their ``testable``: one number, :func:`..framework.settling.claims_bound`), else 0
  (none where the longer run diverged). Two whole schedules are compared, not the last steps of one: a
  schedule that decays to a rate of 0 stops moving at its end whether or not it trained long enough;
* ``train.excess_loss.s<s>``: whether 3LC trains (:func:`excess_loss`): the 3LC run's final held-out
  loss above the 32-bit run's, as a share of the 32-bit run's fall from their shared initial loss
  (0: as far as 32-bit, 1: no progress, ``inf`` where the 32-bit run's loss did not fall or a loss
  is not finite);
* time: each cell's measured step time (per step the slowest worker's forward/backward and encode,
  the server's step, the slowest worker's decode, summed over the steps; it moves with the
  machine's load while the cell ran) + modelled communication per profile, information only; the reduction of total training
  time against 32-bit, and time to accuracy (first evaluation at the 32-bit run's final accuracy
  minus ``tta_margin``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from gcbench.envs.network import load_profile
from gcbench.measure.size import bits_per_element

from ..framework.cells import Cell
from ..framework.runner import ReportParts, RunContext
from ..framework.settling import claims_bound, settled
from ..framework.spec import Spec, load_spec
from .drift import drift_verdict, sent_per_step
from .settings import LENGTH_GAIN, LONG_CELL, SETTLED_FLAG, TIE_CLASSES, ThreeLCSettings, paper_band, s_key, stage_bytes
from .timecurve import bandwidth_for, machine_compute_s, model_compute_s, reduction_at, step_cost
from .train import MethodSpec, PreparedData, TrainConfig, train

SPEC_PATH = Path(__file__).with_name("spec.toml")
#: Bump when the workload's code changes what a cell computes (invalidates cached cells).
CODE_VERSION = 9  # 6: the batch-norm statistics the server fetches are counted as traffic; 7: the stage checks
# rebuild their inputs after the step, outside the timed encode; 8: 3LC's error feedback takes its fused path in
# training; 9: 3LC's decode below the compile threshold on the CPU is one C pass, and so is the scan before its
# error-feedback pass (the same values and bytes)
TRAFFIC_TABLE = "traffic"
ACCURACY_TABLE = "accuracy"
#: Seed of the fixed training subset (``train_subset``): the same images for every cell and run.
SUBSET_SEED = 20_190_401


def load() -> Spec:
    """The 3LC spec."""
    return load_spec(SPEC_PATH)


#: The time targets of the paper's abstract (the spec's ``time.reduction`` range), the bandwidths the
#: report solves for.
TIME_TARGETS = paper_band(load(), "time.reduction")[:2]


class ThreeLCWorkload(ThreeLCSettings):
    """The :class:`~..framework.runner.Workload` of the 3LC reproduction."""

    # -- planning ----------------------------------------------------------------------------------

    def needed_methods(self, tables: list[str]) -> list[str]:
        """Methods the selected tables need, in report order."""
        if any(t != TRAFFIC_TABLE for t in tables):
            return list(self.order)
        return [m for m in self.order if self.methods[m].is_3lc or self.methods[m].kind == "baseline"]

    def plan(self, ctx: RunContext, done: Mapping[str, Mapping[str, Any]]) -> list[Cell]:
        """One ``train-<method>`` cell per method the selected tables need, plus the ``tie-`` cell
        where the scale has a ``proxy_tie`` sub-table and the traffic table is selected."""
        dataset, _ = self.dataset_choice(ctx)
        cfg = self.run_config(ctx)
        base: dict[str, Any] = {
            "code_version": CODE_VERSION, "dataset": dataset, "image_size": int(ctx.preset["image_size"]),
            "eval_samples": int(ctx.preset["eval_samples"]), "augment": bool(ctx.preset.get("augment", False)),
            "topology": self.spec.workload["topology"], "train": _jsonable(cfg),
        }
        base["train_subset"] = ctx.preset.get("train_subset")
        device = device_of(ctx)
        if device != "cpu":  # CPU and GPU results never share a cell
            base["device"] = device
        needed = self.needed_methods(ctx.tables)
        if ctx.preset.get("methods"):  # a scale that trains only some of the methods
            keep = set(ctx.preset["methods"])
            needed = [m for m in needed if m in keep]
        cells = [Cell(f"train-{m}", {**base, "kind": "train", "method": self.method_config(m)}) for m in needed]
        longer = self.length_config(ctx)
        if longer is not None and ACCURACY_TABLE in ctx.tables and "32bit" in needed:
            cells.append(Cell(LONG_CELL, {**base, "kind": "train", "method": self.method_config("32bit"), "train": _jsonable(longer)}))
        tie = self.tie_config(ctx)
        if tie is not None and TRAFFIC_TABLE in ctx.tables:
            m, tcfg, limit = tie
            cells.append(Cell(f"tie-{m}", {**base, "kind": "tie", "method": self.method_config(m), "eval_limit": limit,
                                           "train": _jsonable(tcfg)}))
        return cells

    def method_config(self, m: str) -> dict[str, Any]:
        """Method ``m`` as part of a cell's config (its prose note left out: it does not change results)."""
        return {k: v for k, v in self.methods[m].as_config().items() if k != "note"}

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

    def probe(self) -> Iterator[tuple[str, Any]]:
        """What a few steps of this package's training compute on synthetic data (:mod:`.probe`): the
        workload's stamp on every cell (:mod:`..framework.workload_stamp`)."""
        from .probe import probe

        return probe()

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
            device = c.get("device", "cpu")
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
            try:
                result = train(data, cfg, method, on_eval=lambda rec: ctx.progress.advance_epoch(),
                               device=None if device == "cpu" else device)
                result["device"] = device
                # the fp32 side counts what the every-step 32-bit run sends up to each evaluation: its
                # gradients and model changes, and one fetch of the batch-norm statistics before each
                # evaluation after the first, as summary.traffic_reduction does
                per_fetch = result["summary"]["baseline_stats_bytes"] / max(len(result["evals"]) - 1, 1)
                for i, e in enumerate(result["evals"]):
                    row = {"test/accuracy": e["test_acc"], "test/loss": e["test_loss"], "train/loss": e["train_loss"],
                           "bytes_sent": e["bytes"], "time/measured_s": e["measured_s"]}
                    for p, v in e["time_s"].items():
                        row[f"time/{p}_s"] = v
                    for p, v in e["modelled_comm_s"].items():
                        row[f"time/modelled_comm_{p}_s"] = v
                    if e["bytes"]:
                        fp32 = 2 * 4 * result["summary"]["params"] * cfg.workers * e["step"] + i * per_fetch
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
        compute = model_compute_s(results, ctx.options.get("compute_seconds_per_step"))  # one for every setting
        machine = machine_compute_s(results)  # what every setting's codec share is priced at
        for m, r in res.items():
            if r is not None:
                s = r["summary"]
                out[f"traffic.reduction.{m}"] = s["traffic_reduction"]
                out[f"acc.final.{m}"] = s["final_test_acc"]
                for p in profiles:
                    out[f"time.total.{p}.{m}"] = s["total_time_s"][p]
            if self.methods[m].is_3lc and r is not None:
                key = s_key(self.methods[m].params["sparsity"])
                st = stage_bytes(r)
                ts = r["summary"]
                out[f"traffic.reduction.s{key}"] = ts["traffic_reduction"]
                out[f"traffic.reduction_streams.s{key}"] = st["fp32"] / (st["zero_run"] + st["scale"])
                out[f"traffic.reduction_self_describing.s{key}"] = ts["baseline_fp32_bytes"] / st["payload"]
                out[f"zero_run.gain.s{key}"] = st["quartic"] / st["zero_run"] if st["zero_run"] else math.inf
                for k in stage_tot:
                    stage_tot[k] += st[k]
                mismatches += sum(v["mismatch_count"] for v in r["stages"].values())
                out.update(time_quantities(r, key, profiles, compute, baseline=results.get("train-32bit"), machine_s=machine))
                verdict = self.drift_of(ctx, r)
                if verdict is not None and verdict["drifting"] is not None:
                    out[f"traffic.drifting.s{key}"] = float(verdict["drifting"])
        for p in profiles:
            vals = {sp: out.get(f"time.reduction_modelled.{p}.s{s_key(sp)}") for sp in self.sparsities}
            if all(v is not None for v in vals.values()):
                best = max(vals, key=lambda sp: vals[sp])  # type: ignore[arg-type,return-value]
                out[f"time.reduction_modelled.{p}.best"] = vals[best]
                if p == profiles[0]:
                    for target in TIME_TARGETS:
                        out[f"time.bw{target:g}x.best"] = out.get(f"time.bw{target:g}x.s{s_key(best)}")
        out.update(self.tie_quantities(ctx, results))
        if stage_tot["values"]:
            out["quartic.saving"] = 1.0 - stage_tot["quartic"] / stage_tot["2bit"]
            out["quartic.bits"] = bits_per_element(stage_tot["quartic"], stage_tot["values"])
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
            for sp in self.sparsities:
                r = res.get(f"3lc-s{s_key(sp)}")
                if r is not None:
                    out[f"train.excess_loss.s{s_key(sp)}"] = excess_loss(r, base)
            deltas = []
            for sp in self.sparsities:
                d = out.get(f"acc.delta_pp.3lc-s{s_key(sp)}")
                if d is not None:
                    out[f"acc.delta_pp.s{s_key(sp)}"] = d
                    deltas.append(d)
            if len(deltas) == len(self.sparsities):
                # the setting farthest from 32-bit either way (signed): the claim is |delta| <= 1 for every s
                out["acc.delta_pp.worst3lc"] = max(deltas, key=abs)
            for p in profiles:
                reds = [out.get(f"time.reduction.{p}.3lc-s{s_key(sp)}") for sp in self.sparsities]
                if all(v is not None for v in reds):
                    out[f"time.reduction.{p}.best"] = max(reds)  # type: ignore[type-var]
            long = results.get(LONG_CELL)
            if long is not None:
                ls = long["summary"]
                out[LENGTH_GAIN] = 100.0 * (ls["final_test_acc"] - b["final_test_acc"])
                # a diverged longer run says nothing of where the scale's schedule ends: no flag
                out[SETTLED_FLAG] = None if ls.get("diverged") else settled(out[LENGTH_GAIN], claims_bound(self.spec, SETTLED_FLAG))
            if "acc.delta_pp.stoch3-ef" in out:
                out["stoch3ef.converged"] = float(out["acc.delta_pp.stoch3-ef"] >= -float(w["converged_within_pp"]))  # type: ignore[operator]
        return out

    def drift_of(self, ctx: RunContext, result: Mapping[str, Any]) -> dict[str, Any] | None:
        """The drift verdict of one 3LC cell (:func:`.drift.drift_verdict`) over the scale's
        ``drift_window``-step windows with its ``drift_tolerance``; None when the scale sets no window
        or the cell has no per-step framed bytes."""
        p = ctx.preset
        if "drift_window" not in p or "framed_per_step" not in result["stages"].get("push", {}):
            return None
        s = result["summary"]
        return drift_verdict(s["baseline_fp32_bytes"] / s["steps"], sent_per_step(result), int(p["drift_window"]),
                             float(p.get("drift_tolerance", 0.15)))

    def tie_quantities(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
        """The ``tie-`` cell against the proxy's cell of the same method over the same steps."""
        tie = self.tie_config(ctx)
        if tie is None:
            return {}
        m = tie[0]
        big, proxy = results.get(f"tie-{m}"), results.get(f"train-{m}")
        if big is None or proxy is None:
            return {}
        key = s_key(self.methods[m].params["sparsity"])
        n = int(big["summary"]["steps"])
        sent_proxy, sent_big = sent_per_step(proxy)[:n], sent_per_step(big)[:n]
        if len(sent_proxy) < n or len(sent_big) < n:
            return {}
        # both sides alike: fp32 bytes of the same n steps / the framed push + pull of those steps
        # (the batch-norm statistics, fetched at evaluations the two cells do not share, left out of both)
        red_big = big["summary"]["baseline_fp32_bytes"] / big["summary"]["steps"] * n / sum(sent_big)
        red_proxy = proxy["summary"]["baseline_fp32_bytes"] / proxy["summary"]["steps"] * n / sum(sent_proxy)
        out = {"tie.reduction.big": red_big, "tie.reduction.proxy": red_proxy, "tie.ratio": red_big / red_proxy}
        # the tie stands for a training ResNet-110 only where its held-out loss fell, below its start and
        # below a uniform guess's ln(10) (every data set here has 10 classes)
        first, last = big["evals"][0]["test_loss"], big["evals"][-1]["test_loss"]
        out["tie.trained"] = float(last < min(first, math.log(TIE_CLASSES)))
        if out["tie.trained"]:
            whole = results[f"train-{m}"]["summary"]["traffic_reduction"]
            out[f"traffic.reduction_est110.s{key}"] = whole * red_big / red_proxy
        return out

    # -- reporting ---------------------------------------------------------------------------------

    def report(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]], measured: Mapping[str, float | None]) -> ReportParts:
        """Header lines, measured tables, the discussion, and the plots."""
        from .report import build_report

        return build_report(self, ctx, results, measured)


def time_quantities(result: Mapping[str, Any], key: str, profiles: Sequence[str],
                    compute_s: float | None = None, baseline: Mapping[str, Any] | None = None,
                    machine_s: float | None = None) -> dict[str, float]:
    """Modelled time of one 3LC cell from its framed bytes per step and its measured times
    (:mod:`.timecurve`): the reduction on each profile, and the bandwidth (bits per second) at which
    each of :data:`TIME_TARGETS` would be reached on the first profile's latency (``inf`` never:
    the traffic ratio is below the target). ``compute_s``: seconds of forward/backward per step,
    the same for every setting (:func:`.timecurve.model_compute_s`; None: this cell's own median);
    ``baseline``: the 32-bit cell (its step time beyond compute); ``machine_s``: the measured compute
    time every codec share is priced at (:func:`.timecurve.machine_compute_s`; None: this cell's own)."""
    cost = step_cost(result, compute_s, baseline, machine_s)
    if cost is None:
        return {}
    out: dict[str, float] = {}
    for p in profiles:
        link = load_profile(p).link
        out[f"time.reduction_modelled.{p}.s{key}"] = reduction_at(cost, link.bandwidth_Bps * 8, link.latency_s)
    latency = load_profile(profiles[0]).link.latency_s
    for target in TIME_TARGETS:
        bw = bandwidth_for(cost, target, latency)
        out[f"time.bw{target:g}x.s{key}"] = math.inf if bw is None else bw
    return out


def excess_loss(result: Mapping[str, Any], baseline: Mapping[str, Any]) -> float:
    """``(L - L32) / (L0 - L32)``: ``result``'s final held-out loss ``L`` above the baseline's final
    ``L32``, as a share of the baseline's fall from its first evaluation ``L0`` (both runs start from
    the same initial weights and are evaluated on the same test images). 0: the run got as far as the
    baseline; 1: no further than the initial weights; ``inf`` where the baseline's loss did not fall
    (no progress to compare with) or a loss is not finite (a diverged run)."""
    start, ref = baseline["evals"][0]["test_loss"], baseline["evals"][-1]["test_loss"]
    end = result["evals"][-1]["test_loss"]
    if not all(math.isfinite(x) for x in (start, ref, end)) or start <= ref:
        return math.inf
    return (end - ref) / (start - ref)


def time_to_accuracy(result: Mapping[str, Any], baseline_final_acc: float, margin: float, profile: str) -> float:
    """Seconds (measured + modelled on ``profile``) until the first evaluation at ``baseline - margin``
    accuracy; ``inf`` when never reached."""
    target = baseline_final_acc - margin
    for e in result["evals"]:
        if e["test_acc"] >= target:
            return float(e["time_s"][profile])
    return math.inf


def device_of(ctx: RunContext) -> str:
    """The run's device as a cell-key string (``"cpu"``, ``"cuda"``, ``"cuda:1"``)."""
    return str(ctx.options.get("device") or "cpu")


def _jsonable(cfg: TrainConfig) -> dict[str, Any]:
    """A :class:`TrainConfig` as part of a cell's config."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.__dict__.items()}


def workload() -> ThreeLCWorkload:
    """The workload, built from the spec."""
    return ThreeLCWorkload(load())


__all__ = ["SPEC_PATH", "TIME_TARGETS", "ThreeLCWorkload", "device_of", "excess_loss", "load", "time_quantities", "time_to_accuracy", "workload"]
