"""The SketchML reproduction: cells for Tables 2-4, Fig. 8 and Fig. 9, their derived numbers, the report.

Cells (each cached on its own, see :mod:`..framework.cells`):

* ``train-<model>-<method>``: one training run (:func:`.train.train`) of ``epochs`` epochs;
  Table 2 and Fig. 9 use LR/SVM/Linear x {SketchML, Adam-double ("Adam"), ZipML-16bit ("ZipML")},
  Table 3 Linear x {SketchML, quan_256, row_4, col_d/2}, Table 4 LR x the five weight types. Runs
  shared by several tables are computed once.
* ``grid-<model>-lr<lr>``: the learning-rate grid with Adam-double (scales with ``lr_grid``); the
  paper tunes the rate on Adam and reuses it for every method.
* ``paper-messages`` (table ``msg``, presets with ``paper_messages``): one iteration at the message
  size of the preset's ``paper_messages`` (KDD12's, 54M features and ten executors, at ``claims`` and
  ``full``; a far smaller one at ``smoke``), encode/decode measured and transfer modelled for the five
  weight types of Table 4 (:mod:`.paperscale`).
* ``fig8-sweep``: LR gradients at a model warmed up by a few Adam epochs, for batch ratios from 1%
  to 10%: density, SketchML bytes per key, message sizes, and the epoch time they imply on Cluster-1
  (measured: the slowest worker's gradient + encode, the driver's decodes + re-encode and one worker's
  decode of the broadcast; the sweep takes no Adam step, so its epochs hold no update, unlike the
  training runs').

Codec mode: a preset's ``codec_mode`` (``"eager"``, the default, or ``"compiled"``) is the
:mod:`gcbench.compressors.kernels.core` mode every cell runs its codecs in, and part of each cell's config.
The ``claims``, ``full`` and ``real`` presets measure compiled: the ZipML baselines' stochastic rounding
hashes its uniforms (:mod:`gcbench.compressors.kernels.dither`), one pass compiled against a dozen
eager integer passes per value (numpy's uint32 path on the CPU), so eager would time the baselines far
slower than their implementation can run and flatter SketchML (which has no compiled kernel).
Compilation happens in each codec's warm-up, before any timing. ``smoke`` (CI's) runs eager: a timed
claim whose numbers hold ZipML's measured coding is judged only where communication dominates
Adam-double's epoch (its ``comm_dominated``-based flag) or not at smoke (its ``meaningful_at``), and at
smoke's size communication does not dominate, so eager ZipML decides no verdict; timed claims without
ZipML (Table 3's, ``fig8-epoch-batch``) can get one.

Derived numbers follow the paper's definitions: minimal test loss over the trained epochs
(:func:`.measures.min_trained_loss`: the untrained model at epoch 0 is only the reference a drop is measured
from); converged = the first epoch at
which the last ``convergence_window`` (5) epoch losses vary by less than 1%, with, as information,
whether that band is at most ``convergence_resolve_share`` of each method's loss drop
(:func:`.measures.rule_resolves`: the flag of the claims on epochs to converge, and one of the two
conditions of the converged-time claims' flags, ``t2.lr.converge_time_testable`` and, with the calibrated
epoch's flag, ``t2.lr.converge_time_cal_testable.<method>``);
per-epoch time orders and speed-ups compare the paper's communication-bound epochs only where
communication is at least the share of Adam-double's epoch that the paper's own times imply
(:func:`.measures.paper_comm_share`: 1 - 100 / 1041 s, 90.4%; the ``*.comm_dominated`` flags);
Table 4's budget = 2 h scaled to this run as 6.9 Adam-double epochs (2 h / 1041 s). A run's epoch time is the
mean over its trained epochs, the paper's metric ("the average run time per epoch", §4.1); Table 3's claims
take it over every epoch of every run of a setting (:func:`.measures.table3_epoch_time`: the default's two),
with the Student t interval of that mean as their noise (:func:`.measures.table3_spread`).
Every epoch's time stays in the cells, and the plots show every epoch.

Modelled seconds: the training cells and the Fig. 8 sweep record their measured seconds and the bytes
on the driver's link; :meth:`derive` and the report price the transfer from those bytes
(:meth:`.settings.SketchMLSettings.priced`) with the driver's critical path's broadcast (the spec's
``broadcast_copies``) and its serial decode. The modelled seconds the cells record are the serial
model's (``W`` broadcast copies), kept for comparison.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..framework.cells import Cell
from ..framework.runner import ReportParts, RunContext
from ..framework.spec import Spec, load_spec
from .measures import (
    source_ordered_ids,
    synthetic_data,
    cumulative_times,
    excess_losses,
    min_loss_within,
    min_trained_loss,
    paper_comm_share,
    sketchml_own_share,
    comm_share,
    rule_resolves,
    calibrated_converge_flags,
    table3_epoch_time,
    table3_spread,
    converged_epoch,
)
from .messages import MessageCodec, MethodSpec, warm_up
from gcbench.compressors.kernels import core as fused
from gcbench.envs.network import load_profile

from .netmodel import iteration_time
from .paperscale import PaperScaleParams, derive_quantities, run_paper_messages
from .settings import MSG_PROFILES, T3_REPEAT, SketchMLSettings, grid_epochs, grid_name
from .train import Split, TrainConfig, run_iteration, train, train_test_split, worker_shards
from .valuecheck import CHECKS_VERSION

SPEC_PATH = Path(__file__).with_name("spec.toml")
#: Bump when the workload's code changes what a cell computes (invalidates cached cells).
CODE_VERSION = 6  # 5: QSGD / TernGrad / ZipML uniforms from compressors.kernels.dither (DITHER_VERSION 2); 6: warm-up of up to 1M keys

#: Table 2 / Fig. 9 column -> method.
T2_METHODS = {"sketchml": "sketchml", "adam": "adam-double", "zipml": "zipml16"}
T3_VARIANTS = {"default": "sketchml", "quan_256": "quan_256", "row_4": "row_4", "col_half": "col_half"}
T4_METHODS = ("sketchml", "zipml8", "zipml16", "adam-float", "adam-double")


def load() -> Spec:
    """The SketchML spec."""
    return load_spec(SPEC_PATH)


class SketchMLWorkload(SketchMLSettings):
    """The :class:`~..framework.runner.Workload` of the SketchML reproduction."""

    # -- planning ----------------------------------------------------------------------------------

    @staticmethod
    def tables_of(ctx: RunContext) -> list[str]:
        """The selected tables, narrowed to the preset's ``tables`` when it names some (the claims preset)."""
        only = ctx.preset.get("tables")
        return [t for t in ctx.tables if t in only] if only else list(ctx.tables)

    def models_of(self, ctx: RunContext) -> list[str]:
        """The GLMs this preset trains (its ``models``, default all three)."""
        return [m for m in self.models if m in ctx.preset.get("models", self.models)]

    def needed_runs(self, tables: Sequence[str], models: Sequence[str] | None = None) -> list[tuple[str, str]]:
        """``(model, method)`` training runs the selected tables need, without duplicates."""
        runs: list[tuple[str, str]] = []
        models = list(models) if models is not None else self.models

        def add(model: str, method: str) -> None:
            if (model, method) not in runs:
                runs.append((model, method))

        for t in tables:
            if t in ("2", "fig9"):
                for model in models:
                    for method in T2_METHODS.values():
                        add(model, method)
            elif t == "3":
                for method in T3_VARIANTS.values():
                    add("linear", method)
            elif t == "4":
                for method in T4_METHODS:
                    add("lr", method)
            elif t == "fig8":
                add("lr", "sketchml")
        return runs

    @staticmethod
    def _workers(ctx: RunContext) -> int:
        return int(ctx.options.get("workers") or ctx.preset["workers"])

    def _base_config(self, ctx: RunContext) -> dict[str, Any]:
        w = self.spec.workload
        return {
            "code_version": CODE_VERSION,
            "dataset": self.dataset_key(ctx),
            "train_fraction": w["train_fraction"],
            "workers": int(ctx.options.get("workers") or ctx.preset["workers"]),
            "seed": int(ctx.preset.get("seed", 0)),
            "l2": w["l2"],
            "batch_ratio": w["batch_ratio"],
            "beta1": w["beta1"],
            "beta2": w["beta2"],
            "eps": w["eps"],
            "topology": w["topology"],
            "warm_up": True,  # codecs warmed up before timing (cells computed without it are stale)
            "codec_mode": self.codec_mode(ctx),
        }

    def _train_cell(self, ctx: RunContext, name: str, model: str, method: str, epochs: int, lr: float,
                    profile: str) -> Cell:
        cfg = self._base_config(ctx)
        cfg.update({"kind": "train", "model": model, "method": self.methods[method].as_config(), "epochs": epochs,
                    "lr": lr, "profile": profile})
        if self.methods[method].codec == "sketchml":  # what its checks record (.valuecheck); other cells keep their keys
            cfg["checks"] = CHECKS_VERSION
        return Cell(name, cfg)

    def plan(self, ctx: RunContext, done: Mapping[str, Mapping[str, Any]]) -> list[Cell]:
        """Cells the selected tables need, given what is done (grid first when the preset has one)."""
        w = self.spec.workload
        epochs = int(ctx.options.get("epochs") or ctx.preset["epochs"])
        tables = self.tables_of(ctx)
        runs = self.needed_runs(tables, self.models_of(ctx))
        models = sorted({m for m, _ in runs} | ({"lr"} if "fig8" in tables else set()), key=self.models.index)
        cells: list[Cell] = []
        lrs: dict[str, float] = {}
        for model in models:
            lr = self.lr_for(ctx, model, done)
            if lr is None:  # grid cells first
                for g in ctx.preset["lr_grid"]:
                    cells.append(self._train_cell(ctx, grid_name(model, g), model, "adam-double",
                                                  grid_epochs(ctx.preset), float(g), w["profile_tables"]))
            else:
                lrs[model] = lr
        for model, method in runs:
            if model in lrs:
                cells.append(self._train_cell(ctx, f"train-{model}-{method}", model, method, epochs, lrs[model],
                                              w["profile_tables"]))
        if "3" in tables and "linear" in lrs:
            repeat = self._train_cell(ctx, T3_REPEAT, "linear", T3_VARIANTS["default"], epochs, lrs["linear"],
                                      w["profile_tables"])
            cells.append(Cell(repeat.name, {**repeat.config, "repeat": 1}))
        if "msg" in tables and "paper_messages" in ctx.preset:
            prm = PaperScaleParams.from_mapping(ctx.preset["paper_messages"])
            cells.append(Cell("paper-messages", {"code_version": CODE_VERSION, "kind": "paper-messages", "params": prm.as_dict(),
                                                 "codec_mode": self.codec_mode(ctx),
                                                 "methods": {m: self.methods[m].as_config() for m in T4_METHODS}}))
        if "fig8" in tables and "lr" in lrs:
            cfg = self._base_config(ctx)
            cfg.update({"kind": "fig8-sweep", "model": "lr", "lr": lrs["lr"], "profile": w["profile_fig8"],
                        "ratios": list(ctx.preset["fig8_ratios"]), "warmup_epochs": int(ctx.preset["fig8_warmup_epochs"]),
                        "iterations": int(ctx.preset["fig8_iterations"]),
                        "link_bytes": 1,  # rows record their bytes on the driver's link, priced by derive (older cells are stale)
                        "methods": [self.methods["sketchml"].as_config(), self.methods["adam-double"].as_config()]})
            cells.append(Cell("fig8-sweep", cfg))
        return cells

    def steps(self, cell: Cell) -> int | None:
        """Progress-bar steps of a cell (epochs + the untrained evaluation; ratios for the sweep)."""
        if cell.config["kind"] == "train":
            return int(cell.config["epochs"]) + 1
        if cell.config["kind"] == "paper-messages":
            return int(cell.config["params"]["workers"]) + len(T4_METHODS)
        return len(cell.config["ratios"]) + int(cell.config["warmup_epochs"]) + 1

    # -- computing ---------------------------------------------------------------------------------

    def split(self, ctx: RunContext, dataset: Any, train_fraction: float, seed: int) -> Split:
        """The train/test split of the run's data set (loaded once per run)."""
        from gcbench.data.prepare import load_dataset

        key = repr((dataset, train_fraction, seed))
        if ctx.cache.get("split_key") != key:
            t0 = time.perf_counter()
            ds = load_dataset(dict(dataset) if isinstance(dataset, Mapping) else dataset, ctx.options.get("data_cache"))
            ctx.cache["dataset_summary"] = ds.summary()
            ctx.cache["dataset_load_s"] = time.perf_counter() - t0
            ctx.cache["split"] = train_test_split(ds.X, ds.y, train_fraction, seed)
            ctx.cache["split_key"] = key
        return ctx.cache["split"]

    def probe(self) -> Iterator[tuple[str, Any]]:
        """What a few steps of this package's training compute on synthetic data (:mod:`.probe`): the
        workload's stamp on every cell (:mod:`..framework.workload_stamp`)."""
        from .probe import probe

        return probe()

    def compute(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        """Run one cell with torch on one thread (the simulated workers run one after another), its
        codecs in the cell's ``codec_mode``."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with fused.forced(cell.config.get("codec_mode", "eager")):
                if cell.config["kind"] == "train":
                    return self._compute_train(cell, ctx)
                if cell.config["kind"] == "paper-messages":
                    return self._compute_paper_messages(cell, ctx)
                return self._compute_sweep(cell, ctx)
        finally:
            torch.set_num_threads(threads)

    def _train_config(self, c: Mapping[str, Any], method: MethodSpec, epochs: int | None = None) -> TrainConfig:
        return TrainConfig(model=c["model"], method=method, workers=c["workers"], epochs=epochs if epochs is not None else c["epochs"],
                           lr=c["lr"], l2=c["l2"], batch_ratio=c["batch_ratio"], beta1=c["beta1"], beta2=c["beta2"],
                           eps=c["eps"], seed=c["seed"], profile=c["profile"], topology=c["topology"])

    def _tracking_config(self, ctx: RunContext, c: Mapping[str, Any], method: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "paper": "sketchml", "method": method["name"], "codec": method["codec"], "codec_params": method["params"],
            "value_dtype": method["value_dtype"], "model": c["model"], "workers": c["workers"], "topology": c["topology"],
            "profile": c["profile"], "scale": ctx.scale, "seed": c["seed"], "dataset": c["dataset"], "lr": c["lr"],
            "l2": c["l2"], "batch_ratio": c["batch_ratio"], "epochs": c.get("epochs"),
        }

    def _compute_train(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        c = cell.config
        split = self.split(ctx, c["dataset"], c["train_fraction"], c["seed"])
        method = MethodSpec(c["method"]["name"], c["method"]["codec"], c["method"]["params"], c["method"]["value_dtype"])
        cfg = self._train_config(c, method)
        run = ctx.tracker.start(f"{ctx.scale}-{cell.name}", self._tracking_config(ctx, c, c["method"]),
                                tags=["sketchml", ctx.scale, c["model"], method.name, c["profile"], c["topology"]],
                                group=f"sketchml-{ctx.scale}")

        def on_epoch(rec: Any) -> None:
            ratio = rec.bytes_raw / rec.bytes_up if rec.bytes_up else None
            run.log({"loss": rec.test_loss, "metric/accuracy": rec.test_accuracy, "bytes_sent": rec.bytes_up,
                     "compression_ratio": ratio, "time/measured_s": rec.measured_s,
                     "time/modelled_comm_s": rec.modelled_comm_s, "time/epoch_s": rec.epoch_time_s,
                     "time/cumulative_s": rec.cum_time_s,
                     "key_bytes_per_key": rec.key_bytes / rec.keys if rec.keys and rec.key_bytes >= 0 else None,
                     "density": rec.density}, step=rec.epoch)
            ctx.progress.advance_epoch()

        try:
            result = train(split, cfg, on_epoch=on_epoch, profile_data=load_profile(cfg.profile))
            run.summary({k: v for k, v in result["summary"].items() if isinstance(v, (int, float))})
        finally:
            run.finish()
        result["wandb_dir"] = run.dir
        result["dataset"] = ctx.cache.get("dataset_summary")
        return result

    def _compute_paper_messages(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        """One KDD12-size iteration for the five weight types (:mod:`.paperscale`)."""
        c = cell.config
        methods = {name: MethodSpec(**{k: m[k] for k in ("name", "codec", "params", "value_dtype")}) for name, m in c["methods"].items()}
        run = ctx.tracker.start(f"{ctx.scale}-{cell.name}", {"paper": "sketchml", "scale": ctx.scale, **c["params"]},
                                tags=["sketchml", ctx.scale, "paper-messages"], group=f"sketchml-{ctx.scale}")
        try:
            result = run_paper_messages(PaperScaleParams(**c["params"]), methods, on_step=ctx.progress.advance_epoch)
            w = self.spec.workload
            q = derive_quantities(result, {tag: w[key] for tag, key in MSG_PROFILES.items()}, self.driver_models())
            run.summary({k: v for k, v in q.items() if math.isfinite(v)})
        finally:
            run.finish()
        result["wandb_dir"] = run.dir
        return result

    def _compute_sweep(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        """Fig. 8(d): gradients at a warmed-up LR model for each batch ratio. Its measured seconds per
        iteration are the slowest worker's gradient + encode, the driver's decodes + re-encode and one
        worker's decode of the broadcast: the model stays fixed, so no Adam step is taken or timed, and
        its epoch times are not the training runs' (whose measured seconds hold the step)."""
        c = cell.config
        split = self.split(ctx, c["dataset"], c["train_fraction"], c["seed"])
        adam = MethodSpec(**{k: c["methods"][1][k] for k in ("name", "codec", "params", "value_dtype")})
        sk = MethodSpec(**{k: c["methods"][0][k] for k in ("name", "codec", "params", "value_dtype")})
        run = ctx.tracker.start(f"{ctx.scale}-{cell.name}", self._tracking_config(ctx, c, c["methods"][0]),
                                tags=["sketchml", ctx.scale, "lr", "fig8", c["profile"], c["topology"]],
                                group=f"sketchml-{ctx.scale}")
        weights: list = []
        warm_cfg = self._train_config({**c, "profile": c["profile"]}, adam, epochs=c["warmup_epochs"])
        train(split, warm_cfg, weights_out=weights, on_epoch=lambda r: ctx.progress.advance_epoch())
        w = weights[0]
        X, y = split.X_train, split.y_train
        D = X.shape[1]
        shards = worker_shards(X.shape[0], c["workers"], c["seed"])
        sk_codec, raw_codec = MessageCodec(sk, D), MessageCodec(adam, D)
        warm_up(sk_codec)  # first-call costs would otherwise land in the first ratio's iterations
        warm_up(raw_codec)
        prof = load_profile(c["profile"])
        rng = np.random.default_rng(c["seed"] + 7)
        rows_out = []
        try:
            for ratio in c["ratios"]:
                keys = key_bytes = sk_bytes = raw_bytes = msgs = down_bytes = 0
                dens = []
                measured = modelled = 0.0
                for _ in range(c["iterations"]):
                    rows = [np.sort(rng.choice(s, size=max(1, int(round(ratio * len(s)))), replace=False)) for s in shards]
                    res = run_iteration("lr", X, y, rows, w, c["l2"], sk_codec, raw_codec)
                    push = [m.nbytes for m in res.push]
                    for m in res.push:
                        keys += m.n_keys
                        key_bytes += m.key_nbytes
                        sk_bytes += m.nbytes
                        msgs += 1
                        dens.append(m.n_keys / D)
                    raw_bytes += res.raw_bytes
                    down_bytes += res.down.nbytes
                    it_time, _, _ = iteration_time(
                        c["profile"], c["topology"], push, res.down.nbytes, slowest_worker_s=res.slowest_worker_s,
                        driver_s=res.driver_s, worker_back_s=res.worker_decode_s, profile_data=prof,
                    )
                    measured += it_time.measured_s
                    modelled += it_time.modelled_comm_s
                per_epoch = 1.0 / ratio  # iterations per epoch at this batch ratio
                row = {
                    "ratio": ratio,
                    "density": float(np.mean(dens)),
                    "key_bytes_per_key": key_bytes / keys if keys else None,
                    "sketchml_message_bytes": sk_bytes / msgs,
                    "raw_message_bytes": raw_bytes / msgs,
                    "compression_rate": raw_bytes / sk_bytes if sk_bytes else None,
                    "measured_s_per_iteration": measured / c["iterations"],
                    # the bytes on the driver's link, which derive prices (SketchMLSettings.priced); the modelled
                    # seconds below are the serial model's (W broadcast copies), kept as the cell's record
                    "push_bytes_per_iteration": sk_bytes / c["iterations"],
                    "down_bytes_per_iteration": down_bytes / c["iterations"],
                    "modelled_s_per_iteration": modelled / c["iterations"],
                    "epoch_time_s": per_epoch * (measured + modelled) / c["iterations"],
                    "epoch_measured_s": per_epoch * measured / c["iterations"],
                    "epoch_modelled_s": per_epoch * modelled / c["iterations"],
                }
                rows_out.append(row)
                run.log({k: v for k, v in row.items() if v is not None}, step=len(rows_out))
                ctx.progress.advance_epoch()
        finally:
            run.finish()
        return {"rows": rows_out, "wandb_dir": run.dir, "dataset": ctx.cache.get("dataset_summary")}

    # -- deriving ----------------------------------------------------------------------------------

    def table4_comm_share(self) -> float:
        """:func:`.measures.paper_comm_share` of Table 4's SketchML and Adam-double epochs (the spec's values)."""
        return paper_comm_share(self.spec.value("t4.sketchml.epoch_time").value,
                                self.spec.value("t4.adam-double.epoch_time").value)

    def message_quantities(self, msg: Mapping[str, Any]) -> dict[str, float]:
        """The ``msg.*`` and ``cal.*`` quantities of the ``paper-messages`` cell: each profile's iteration
        on the driver's critical path (:func:`.paperscale.derive_quantities`), the calibrated model, and
        whether each profile's modelled Adam-double iteration is communication-bound as Table 4's is
        (``msg.<tag>.comm_dominated``, the msg claims' testable), with the measured seconds per iteration that
        share leaves Adam-double (``msg.<tag>.adam-double.measured_budget_s``: its modelled transfer, fixed by
        the bytes and the profile's bandwidth, x (1 - share) / share); and whether the calibrated model's
        ceiling reaches each calibrated speed-up claim's band (:meth:`ceiling_flags`)."""
        w = self.spec.workload
        out = derive_quantities(msg, {tag: w[key] for tag, key in MSG_PROFILES.items()}, self.driver_models())
        out.update(self.calibrated(msg)[0])
        bound = self.table4_comm_share()
        for tag in MSG_PROFILES:
            modelled = out[f"msg.{tag}.adam-double.modelled_s"]
            share = modelled / out[f"msg.{tag}.adam-double.iteration_s"]
            out[f"msg.{tag}.adam-double.comm_share"] = share
            out[f"msg.{tag}.adam-double.measured_budget_s"] = modelled * (1.0 - bound) / bound
            out[f"msg.{tag}.comm_dominated"] = float(share >= bound)
        out.update(self.ceiling_flags(out))
        return out

    def ceiling_flags(self, q: Mapping[str, float]) -> dict[str, float | None]:
        """The calibrated claims' ``testable`` flags (spec ``workload.calibration``):

        * ``cal.<tag>.model_holds`` (computed with the fit, :func:`.paperscale.calibrated_quantities`): 1 where
          the fit predicts each of its test rows (``calibration.test``: rows held out of the fit that are not
          SketchML's, so that the method under test never decides whether it can be tested) within
          ``calibration.test_tolerance`` of the paper's;
        * ``cal.<tag>.<m>.ceiling_reaches``: 1 where the model's ceiling of SketchML's speed-up over ``m``
          (``cal.<tag>.ceiling.<m>``: the paper's row of ``m`` over SketchML's epoch with its coding at zero,
          which the fit, the paper and the wire format fix, not SketchML's measured coding) reaches the lower
          edge of the band of the claim on that speed-up (the paper's ratio x (1 - tolerance)); each
          ``ratio_near`` claim on ``[cal.<tag>.<m>.epoch_s, cal.<tag>.sketchml.epoch_s]`` defines it;
        * ``cal.<tag>.<m>.testable``: both (the flag of the speed-up claims and of the claims built on them);
          ``model_holds`` alone is the flag of a calibrated claim that no ceiling bounds (an order)."""
        tag = self.calibration["cluster"]
        pre = f"cal.{tag}."
        out: dict[str, float | None] = {}
        holds = q.get(f"{pre}model_holds")
        for c in self.spec.claims:
            quantities = list(c.quantities)
            if c.check != "ratio_near" or len(quantities) != 2 or quantities[1] != f"{pre}sketchml.epoch_s":
                continue
            if not (quantities[0].startswith(pre) and quantities[0].endswith(".epoch_s")):
                continue
            m = quantities[0][len(pre):-len(".epoch_s")]
            num, den = (float(self.spec.value(v).value) for v in c.paper)  # type: ignore[arg-type]
            ceiling = q.get(f"{pre}ceiling.{m}")
            reaches = None if ceiling is None else float(ceiling >= num / den * (1.0 - c.tolerance))
            out[f"{pre}{m}.ceiling_reaches"] = reaches
            out[f"{pre}{m}.testable"] = None if reaches is None or holds is None else min(reaches, holds)
        return out

    def derive(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
        """The measured quantities the spec's values and claims name."""
        w = self.spec.workload
        out: dict[str, float | None] = {}
        # every training run's modelled seconds priced from its recorded bytes, the broadcast as the critical path
        # prices it (SketchMLSettings.priced); the cells keep the serial model's
        workers, driver = self._workers(ctx), self.training_driver()
        results = self.priced(results, workers)

        def run(model: str, method: str) -> Mapping[str, Any] | None:
            return results.get(f"train-{model}-{method}")

        def losses(r: Mapping[str, Any]) -> list[float]:
            return [e["test_loss"] for e in r["epochs"]]

        window, tol = int(w["convergence_window"]), float(w["convergence_tolerance"])
        msg = results.get("paper-messages")
        t4_bound = self.table4_comm_share()
        if msg is not None:
            out.update(self.message_quantities(msg))
        c1 = load_profile(w["profile_fig8"])
        resolve_share = float(w["convergence_resolve_share"])
        for model in self.models:
            resolves = []
            for col, method in T2_METHODS.items():
                r = run(model, method)
                if r is None:
                    continue
                ls = losses(r)
                resolves.append(rule_resolves(ls, tol, resolve_share))
                ce = converged_epoch(ls, window, tol)
                out[f"t2.{model}.{col}.min_loss"] = min_trained_loss(r["epochs"])
                out[f"t2.{model}.{col}.converge_epoch"] = float(ce) if ce is not None else math.inf
                out[f"t2.{model}.{col}.converge_time_s"] = r["epochs"][ce]["cum_time_s"] if ce is not None else math.inf
                out[f"t2.{model}.{col}.epoch_time_s"] = r["summary"]["mean_epoch_time_s"]
                # the same run priced under Cluster-1 (1 Gbps): communication is linear in the recorded bytes
                cum1 = cumulative_times(r["epochs"], c1, workers, driver)
                out[f"t2.{model}.{col}.converge_time_c1_s"] = cum1[ce] if ce is not None else math.inf
                cal = out.get(f"cal.{self.calibration['cluster']}.{method}.epoch_s") if model == "lr" else None
                if cal is not None:  # epochs to converge x the calibrated KDD12-size epoch (LR: Table 4's model)
                    out[f"t2.{model}.{col}.converge_time_cal_s"] = ce * cal if ce is not None else math.inf
            if resolves:  # t2-epochs-lr's testable flag: the rule's band is small against every method's loss drop
                out[f"t2.{model}.rule_resolves"] = 1.0 if all(resolves) else 0.0
                if model == "lr":  # calibrated converged times: the calibrated epoch's flag and the epochs' both
                    out.update(calibrated_converge_flags(out, self.calibration["cluster"]))
            adam = run(model, T2_METHODS["adam"])
            if model == "lr" and adam is not None:  # Fig. 9(a)'s epoch order: the same regime test as Table 4's
                bound = paper_comm_share(self.spec.value("fig9.lr.sketchml.epoch_time").value,
                                         self.spec.value("fig9.lr.adam.epoch_time").value)
                comm = comm_share(adam["epochs"])
                # the same run priced under Cluster-1: its measured seconds over the re-priced total
                trained = [e for e in adam["epochs"] if e["epoch"] > 0]
                total1 = cumulative_times(adam["epochs"], c1, workers, driver)[-1]
                comm1 = 1.0 - sum(e["measured_s"] for e in trained) / total1 if total1 > 0 else 0.0
                out["t2.lr.adam.comm_share"], out["t2.lr.adam.comm_share_c1"] = comm, comm1
                out["t2.lr.comm_dominated"] = float(comm >= bound)
                # information: SketchML's measured seconds (compute + encode/decode) over Adam's epoch; the paper's
                # SketchML epoch, coding included, is 100 of Adam-double's 1041 s. Not a flag: that share is part of
                # the converged-time speed-up the claims judge, so a slower SketchML must read *differs*
                sk = run(model, T2_METHODS["sketchml"])
                adam_epoch = sum(e["epoch_time_s"] for e in trained) / len(trained) if trained else None
                adam_epoch1 = total1 / len(trained) if trained else None
                own, own1 = ((sketchml_own_share(sk["epochs"], adam_epoch), sketchml_own_share(sk["epochs"], adam_epoch1))
                             if sk else (None, None))
                out["t2.lr.sketchml.own_share"], out["t2.lr.sketchml.own_share_c1"] = own, own1
                if resolves:  # converged times: epochs to converge x epoch times, both factors in the paper's regime:
                    # epochs the rule tells apart (t2-epochs-lr's flag) and communication-bound epochs (Adam's share)
                    resolved = all(resolves)
                    out["t2.lr.converge_time_testable"] = float(comm >= bound and resolved)
                    out["t2.lr.converge_time_c1_testable"] = float(comm1 >= bound and resolved)
            out.update(excess_losses(model, {col: run(model, m) for col, m in T2_METHODS.items()},
                                     int(w.get("start_loss_epoch", 0))))
            pushed = run(model, T2_METHODS["sketchml"])
            if pushed is not None:  # the pushed values' mean rank error over what SketchML allows (.valuecheck)
                out[f"t2.{model}.sketchml.value_rank_share"] = pushed["summary"].get("value_rank_error_share")
                # keys the MinMaxSketch answered exactly, short of what its definition gives (.valuecheck)
                ratio = pushed["summary"].get("sketch_exact_ratio")
                out[f"t2.{model}.sketchml.sketch_exact_shortfall"] = 1.0 - ratio if ratio is not None else None
        t3 = {variant: r for variant, method in T3_VARIANTS.items() if (r := run("linear", method)) is not None}
        again = results.get(T3_REPEAT)
        for variant, r in t3.items():
            # a setting's time is the mean over every epoch it trained: the default's two runs together
            out[f"t3.{variant}.epoch_time_s"] = table3_epoch_time([r, again] if variant == "default" and again else [r])
            out[f"t3.{variant}.min_loss"] = min_trained_loss(r["epochs"])
            ce = converged_epoch(losses(r), window, tol)
            out[f"t3.{variant}.converge_epoch"] = float(ce) if ce is not None else math.inf
        if again is not None and "default" in t3:
            out["t3.default.first_epoch_time_s"] = table3_epoch_time([t3["default"]])
            out["t3.default.repeat_epoch_time_s"] = table3_epoch_time([again])
        spread = table3_spread(t3, again)
        if spread is not None:
            out["t3.epoch_time_spread"] = spread
        base = run("lr", "adam-double")
        if base is not None and all(run("lr", m) is not None for m in T4_METHODS):
            budget = float(w["budget_adam_double_epochs"]) * base["summary"]["mean_epoch_time_s"]
            out["t4.budget_s"] = budget
            for m in T4_METHODS:
                r = run("lr", m)
                assert r is not None
                out[f"t4.{m}.epoch_time_s"] = r["summary"]["mean_epoch_time_s"]
                out[f"t4.{m}.push_time_s"] = r["summary"]["mean_modelled_push_s"]
                out[f"t4.{m}.measured_s"] = r["summary"]["mean_measured_s"]
                # the trained epochs that end within the budget (None where none does)
                out[f"t4.{m}.min_loss_budget"] = min_loss_within(r["epochs"], budget)
                out[f"t4.{m}.budget_exhausted"] = float(r["epochs"][-1]["cum_time_s"] >= budget)
            # Table 4's claim is the minimum only: SketchML's loss against the best of the others
            others = [x for m in T4_METHODS if m != "sketchml" and (x := out[f"t4.{m}.min_loss_budget"]) is not None]
            out["t4.others.min_loss_budget"] = min(others) if others else None
            out["t4.adam-double.comm_share"] = comm_share(base["epochs"])
            out["t4.comm_dominated"] = float(out["t4.adam-double.comm_share"] >= t4_bound)
            # t4-budget-best's flag: the paper's regime, and every compared run reaching the budget (a run cut
            # off before it ends has no loss "within the budget" to compare)
            out["t4.budget_testable"] = float(out["t4.comm_dominated"] == 1.0
                                              and all(out[f"t4.{m}.budget_exhausted"] == 1.0 for m in T4_METHODS))
        sk = run("lr", "sketchml")
        if sk is not None and "fig8" in ctx.tables:
            s = sk["summary"]
            out["fig8.message_mb.adam"] = s["mean_raw_message_bytes"] / 1e6
            out["fig8.message_mb.sketchml"] = s["mean_message_bytes"] / 1e6
            out["fig8.compression_rate"] = s["mean_raw_message_bytes"] / s["mean_message_bytes"]
            out["fig8.key_bytes.train"] = s["key_bytes_per_key"]
            out["fig8.density.train"] = s.get("mean_density")
            # the rate is the format's arithmetic at the density and message size the generator was tuned for
            out["fig8.synthetic_data"] = synthetic_data(sk.get("dataset"))
        sweep = results.get("fig8-sweep")
        if sweep is not None:
            rows = sorted(sweep["rows"], key=lambda r: r["ratio"])
            dense, sparse = rows[-1], rows[0]
            out["fig8.key_bytes.dense"] = dense["key_bytes_per_key"]
            out["fig8.key_bytes.sparse"] = sparse["key_bytes_per_key"]
            out["fig8.density.dense"] = dense["density"]
            out["fig8.density.sparse"] = sparse["density"]
            out["fig8.epoch_time_s.dense"] = dense["epoch_time_s"]
            out["fig8.epoch_time_s.sparse"] = sparse["epoch_time_s"]
            # keys' spacing is the data's (fig8-key-bytes-sparse's testable): only ids the source ordered are KDD's
            out["fig8.source_ids"] = source_ordered_ids(sweep.get("dataset"), w.get("source_ordered_ids", ()))
        return out

    # -- reporting ---------------------------------------------------------------------------------

    def report(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]], measured: Mapping[str, float | None]) -> ReportParts:
        """Header lines, measured tables, the honest discussion, and the plots."""
        from .report import build_report

        return build_report(self, ctx, results, measured)


def workload() -> SketchMLWorkload:
    """The workload, built from the spec."""
    return SketchMLWorkload(load())
