"""The Sketched-SGD reproduction: cells for Table 1 (BLEU), the CIFAR-10 comparison and a real DDP check.

Cells (each cached on its own, see :mod:`..framework.cells`):

* ``t1-<model>-<method>`` (and ``...-s<seed>`` for a preset's further ``seeds``): one translation
  run (:func:`.translation.train_translation`) with 4 workers; Sketched-SGD cells size their sketch
  and second round by the paper's rule (:meth:`.methods.MethodConfig.size_for`, §5.3) for the
  model's compressed tensor.
* ``selection-<model>-<method>``, one per Sketched-SGD method (the first seed's configuration): its first
  steps (:data:`.selectcheck.SELECTION_CHECK_STEPS`), every worker checked against Algorithm 2's lines
  4-13 (:mod:`.selectcheck`, the guard ``selection-follows-algorithm-2``); a cell of its own, so the
  training cells stay as they are.
* ``cifar-scaling``: a small ResNet warmed up by vanilla SGD, then for every worker count of the
  sweep a few steps of local top-k and of Sketched-SGD from that model, with a fixed global batch;
  per-step bytes up and down (:mod:`.vision`).
* ``cifar-train-<method>``: accuracy runs from scratch with 4 workers (vanilla, local top-k, true
  top-k with Sketched-SGD's k, Sketched-SGD).
* ``ddp-check``: Sketched-SGD through the DDP hook on 2 real gloo ranks, and the same run in the
  simulated cluster: bytes and final parameters compared.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ..framework.cells import Cell
from ..framework.runner import ReportParts, RunContext
from ..framework.settling import window_fall
from ..framework.spec import Spec, load_spec
from .bleunoise import bleu_noise, bleu_ratio_noise, half_width, seed_mean_interval
from .geometry import sketch_geometry, translation_geometry
from .methods import MethodConfig
from .parity import heldout_paths, mean_or_nan, parity_flags, sparse_steps
from .selectcheck import CELL_PREFIX as SELECTION_PREFIX, SELECTION_CHECK_STEPS, SelectionRecorder, derive_selection
from .sketchcheck import HASH_WIDTHS, error_bound
from .settings import SketchedSGDSettings, translation_preset

MIN_UPDATES_PER_COORDINATE = 10.0
"""The least mean number of times a top-k method's updates touch each compressed coordinate (steps x
k / d) for the end-of-training claims (held-out parity with vanilla and with true top-k, no divergence)
to be testable. The paper's Transformer has ~67 (60,000 steps x k = 100,000 / d = 90M, Fig. 1); a run
under about 15% of that (10 of ~67) compares sparse methods whose error accumulators have not yet been
drained (nor caught up with vanilla, which updates every coordinate every step)."""

SPEC_PATH = Path(__file__).with_name("spec.toml")
#: Bump when the workload's code changes what a cell computes (invalidates cached cells).
CODE_VERSION = 4
#: Bump when the measurements a Sketched-SGD translation cell takes beside its training change (those
#: cells only; training is unchanged). 1: the sketch's estimate errors (:mod:`.sketchcheck`); 2: and
#: the statistics of the run's own hashes; 3: and of the measuring sketch's, counted on the hash tables;
#: 4: their time kept out of the training time (``measure_s`` beside ``train_s``).
SKETCH_CHECKS_VERSION = 4
#: Bump when what the selection check's cells (``selection-<model>-<method>``, :mod:`.selectcheck`) compute changes.
#: 3: and line 4's carry across steps (``carry``, :meth:`.selectcheck.SelectionRecorder.carry`).
SELECTION_CHECKS_VERSION = 3
#: Bump when what a Sketched-SGD image training cell times changes (those cells only; training is
#: unchanged). 1: the sketch measurements, which image runs do not record, are not taken (nor timed).
IMAGE_SKETCHED_VERSION = 1
#: Bump when how the image cells (``cifar-scaling``, ``cifar-train-<method>``) count vanilla's bytes, the
#: ratios' reference, changes. 1: counted as the compared method counts its own (:func:`.vision.vanilla_bytes`:
#: raw all_reduce bytes against the all_reduce methods, framed payloads against local top-k).
IMAGE_BYTES_VERSION = 1


def load() -> Spec:
    """The Sketched-SGD spec."""
    return load_spec(SPEC_PATH)


class SketchedSGDWorkload(SketchedSGDSettings):
    """The :class:`~..framework.runner.Workload` of the Sketched-SGD reproduction."""

    # -- planning ----------------------------------------------------------------------------------

    def plan(self, ctx: RunContext, done: Mapping[str, Mapping[str, Any]]) -> list[Cell]:
        """Every cell of the selected tables (none depends on another)."""
        cells: list[Cell] = []
        seed = int(ctx.preset.get("seed", 0))
        threads = ctx.preset.get("threads")
        device = str(ctx.options.get("device") or "cpu")
        # the device is part of a cell's key when it is not the CPU (CPU cells keep their keys)
        on = {} if device == "cpu" else {"device": device}
        if "1" in ctx.tables:
            tr = self.translation_preset(ctx)
            data_keys = {k: tr[k] for k in ("dataset", "min_words", "max_words", "held_out", "vocab_size", "min_count", "max_len")
                         if k in tr}
            seeds = [int(x) for x in tr.get("seeds", [seed])]
            # seed-major order: every method of the first seed before any second seed (a run cut short
            # still compares all methods)
            for i, s in enumerate(seeds):
                for model in tr["models"]:
                    for name in tr["methods"][model]:
                        cfg = {"code_version": CODE_VERSION, "kind": "translation", "data": data_keys, "model": model,
                               "model_params": dict(tr[model]),
                               "method": self.method(name, model, tr.get("uncompressed_biases")).as_config(),
                               "workers": int(tr["workers"]), "batch": int(tr["batch"]), "steps": int(tr["steps"]),
                               "lr": float(tr["lr"][model]), "momentum": float(tr["momentum"]), "seed": s,
                               "data_seed": seeds[0], "eval_every": int(tr["eval_every"]), "eval_pairs": int(tr["eval_pairs"]),
                               "threads": threads, **on}
                        if tr.get("bleu_bootstrap"):
                            cfg["bleu_bootstrap"] = int(tr["bleu_bootstrap"])
                        if cfg["method"]["kind"] == "sketched":
                            cfg["checks"] = SKETCH_CHECKS_VERSION
                        cells.append(Cell(f"t1-{model}-{name}" + (f"-s{s}" if i else ""), cfg))
                        if i == 0 and cfg["method"]["kind"] == "sketched":  # Algorithm 2's lines 4-13, first steps
                            check = {k: v for k, v in cfg.items() if k not in ("checks", "bleu_bootstrap")}
                            cells.append(Cell(f"{SELECTION_PREFIX}{model}-{name}", {
                                **check, "kind": "selection_check", "steps": min(SELECTION_CHECK_STEPS, int(tr["steps"])),
                                "selection_checks": SELECTION_CHECKS_VERSION}))
        if "cifar" in ctx.tables or "ddp" in ctx.tables:
            im = self.image_preset(ctx)
            data_keys = {k: im[k] for k in ("dataset", "train_images", "test_images", "image_side", "seed") if k in im}
            base = {"code_version": CODE_VERSION, "data": data_keys, "model_params": dict(im["model"]), "lr": float(im["lr"]),
                    "momentum": float(im["momentum"]), "seed": seed, "threads": threads, **on}
            ms = self.image_methods()
            if "cifar" in ctx.tables:
                cells.append(Cell("cifar-scaling", {
                    **base, "kind": "scaling", "methods": [ms["local_topk"].as_config(), ms["sketched"].as_config()],
                    "workers": list(im["sweep_workers"]), "global_batch": int(im["global_batch"]),
                    "warm_steps": int(im["warm_steps"]), "warm_workers": int(im["warm_workers"]),
                    "steps": int(im["sweep_steps"]), "measure_steps": int(im["measure_steps"]),
                    "vanilla_bytes": IMAGE_BYTES_VERSION}))
                for name, m in ms.items():
                    if name not in im.get("train_methods", ms):
                        continue
                    cfg = {**base, "kind": "image_train", "method": m.as_config(), "workers": int(im["train_workers"]),
                           "batch": int(im["train_batch"]), "steps": int(im["train_steps"]), "eval_every": int(im["eval_every"]),
                           "vanilla_bytes": IMAGE_BYTES_VERSION}
                    if m.kind == "sketched":
                        cfg["timing"] = IMAGE_SKETCHED_VERSION
                    cells.append(Cell(f"cifar-train-{name}", cfg))
            if "ddp" in ctx.tables and int(im.get("ddp_steps", 0)) > 0:
                cells.append(Cell("ddp-check", {
                    **base, "kind": "ddp", "method": ms["sketched"].as_config(), "workers": int(im["ddp_workers"]),
                    "batch": int(im["train_batch"]), "steps": int(im["ddp_steps"])}))
        return cells

    def steps(self, cell: Cell) -> int | None:
        """Progress-bar steps: evaluations of a training cell, worker counts of the sweep."""
        c = cell.config
        if c["kind"] == "translation":
            return math.ceil(c["steps"] / max(1, c["eval_every"]))
        if c["kind"] == "image_train":
            return math.ceil(c["steps"] / max(1, c["eval_every"]))
        if c["kind"] == "scaling":
            return 1 + len(c["workers"]) * len(c["methods"])
        return None

    # -- computing ---------------------------------------------------------------------------------

    def translation_data(self, ctx: RunContext, keys: Mapping[str, Any], seed: int) -> Any:
        """The tokenised corpus (loaded once per run)."""
        from .translation import load_corpus, prepare_data

        key = repr((sorted(keys.items()), seed))
        if ctx.cache.get("tr_key") != key:
            t0 = time.perf_counter()
            corpus, test = load_corpus(keys["dataset"], keys)
            ctx.cache["tr_data"] = prepare_data(corpus, test, keys, seed)
            ctx.cache["tr_data"].summary["load_s"] = time.perf_counter() - t0
            ctx.cache["tr_key"] = key
        return ctx.cache["tr_data"]

    def image_data(self, ctx: RunContext, keys: Mapping[str, Any]) -> Any:
        """The image data (loaded once per run)."""
        from .vision import load_image_data

        key = repr(sorted(keys.items()))
        if ctx.cache.get("im_key") != key:
            ds = keys.get("dataset")
            explicit = ds if ds and ds != "fashion-mnist" else None
            ctx.cache["im_data"] = load_image_data(explicit, keys)
            ctx.cache["im_key"] = key
        return ctx.cache["im_data"]

    def probe(self) -> Iterator[tuple[str, Any]]:
        """What a few steps of this package's training compute on synthetic data (:mod:`.probe`): the
        workload's stamp on every cell (:mod:`..framework.workload_stamp`)."""
        from .probe import probe

        return probe()

    def compute(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        """Run one cell (torch on the preset's number of threads)."""
        threads = torch.get_num_threads()
        want = cell.config.get("threads")
        if want:
            torch.set_num_threads(int(want))
        try:
            kind = cell.config["kind"]
            if kind == "translation":
                return self._translation(cell, ctx)
            if kind == "selection_check":
                return self._selection_check(cell, ctx)
            if kind == "scaling":
                return self._scaling(cell, ctx)
            if kind == "image_train":
                return self._image_train(cell, ctx)
            return self._ddp(cell, ctx)
        finally:
            torch.set_num_threads(threads)

    def _calibrate(self, m: MethodConfig, d: int, dense: int = 0) -> dict[str, Any] | None:
        """Size a Sketched-SGD method by the paper's rule for a compressed tensor of ``d`` elements:
        ``|S|``, ``P``, ``k``, columns, the sketch's own compression figures and, with ``dense``
        uncompressed floats beside it, the overall ratio by the paper's count (None for other kinds)."""
        return sketch_geometry(m, d, dense)

    def _translation(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        from .translation import train_translation

        c = cell.config
        data = self.translation_data(ctx, c["data"], c.get("data_seed", c["seed"]))
        m = MethodConfig.from_config(c["method"])
        cal, d = translation_geometry(c, m, len(data.src_vocab), len(data.tgt_vocab))
        run = ctx.tracker.start(f"{ctx.scale}-{cell.name}", {
            "paper": "sketched-sgd", "method": m.name, "kind": m.kind, "codec_params": m.as_config(), "model": c["model"],
            "parameters": d, "workers": c["workers"], "topology": "collective", "scale": ctx.scale, "seed": c["seed"],
            "dataset": data.summary.get("name"), "lr": c["lr"], "steps": c["steps"]},
            tags=["sketched-sgd", ctx.scale, c["model"], m.name, "table1"], group=f"sketched-sgd-{ctx.scale}")

        def on_eval(rec: Mapping[str, Any]) -> None:
            run.log({"loss": rec["loss"], "metric/bleu": rec["bleu"], "metric/test_loss": rec["test_loss"],
                     "bytes_sent": rec["bytes_sent"]}, step=rec["step"])
            ctx.progress.advance_epoch()

        def on_step(step: int, rec: Mapping[str, float]) -> None:
            run.log({"accumulator_norm": rec["accumulator_norm"]}, step=step)

        try:
            res = train_translation(data, model_kind=c["model"], model_params=c["model_params"], method=m,
                                    workers=c["workers"], steps=c["steps"], batch=c["batch"], lr=c["lr"],
                                    momentum=c["momentum"], seed=c["seed"], eval_every=c["eval_every"],
                                    eval_pairs=c["eval_pairs"], threads=None, on_eval=on_eval, on_step=on_step,
                                    device=c.get("device", "cpu"), bleu_bootstrap=int(c.get("bleu_bootstrap", 0)))
            run.summary({"bleu": res["bleu"], "compression_ratio": res["traffic"]["compression_ratio"]})
        finally:
            run.finish()
        res["calibration"] = cal
        res["cell_seed"] = c["seed"]
        res["data"] = data.summary
        res["wandb_dir"] = run.dir
        return res

    def _selection_check(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        """The first steps of a Sketched-SGD translation run's configuration, every step checked against
        Algorithm 2's lines 4-13 (:class:`.selectcheck.SelectionRecorder`); the run's losses, to compare
        with the training cell's first steps."""
        from .translation import train_translation

        c = cell.config
        data = self.translation_data(ctx, c["data"], c.get("data_seed", c["seed"]))
        m = MethodConfig.from_config(c["method"])
        translation_geometry(c, m, len(data.src_vocab), len(data.tgt_vocab))
        held: list[SelectionRecorder] = []

        def observe(run: Any) -> Any:
            run.measure = False  # the guards' sketch measurements are the training cell's
            held.append(SelectionRecorder(run))
            return held[0].after_backward

        res = train_translation(data, model_kind=c["model"], model_params=c["model_params"], method=m, workers=c["workers"],
                                steps=c["steps"], batch=c["batch"], lr=c["lr"], momentum=c["momentum"], seed=c["seed"],
                                eval_every=0, eval_pairs=c["eval_pairs"], threads=None, device=c.get("device", "cpu"),
                                observe=observe)
        return {"model": c["model"], "method": m.as_config(), "steps": held[0].steps, "carry": held[0].carry,
                "losses": res["losses"],
                "diverged_at": res["diverged_at"], "train_s": res["train_s"]}

    def _scaling(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        from .vision import run_images, steady

        c = cell.config
        data = self.image_data(ctx, c["data"])
        warm_method = MethodConfig("vanilla", "vanilla")
        run = ctx.tracker.start(f"{ctx.scale}-{cell.name}", {
            "paper": "sketched-sgd", "kind": "scaling", "workers": c["workers"], "global_batch": c["global_batch"],
            "scale": ctx.scale, "seed": c["seed"], "dataset": data.summary.get("name"), "methods": c["methods"]},
            tags=["sketched-sgd", ctx.scale, "cifar", "scaling"], group=f"sketched-sgd-{ctx.scale}")
        try:
            t0 = time.perf_counter()
            warm = run_images(data, model_params=c["model_params"], method=warm_method, workers=c["warm_workers"],
                              steps=c["warm_steps"], batch=c["global_batch"] // c["warm_workers"], lr=c["lr"],
                              momentum=c["momentum"], seed=c["seed"], keep_state=True, threads=None,
                              device=c.get("device", "cpu"))
            init = warm.pop("state")
            ctx.progress.advance_epoch()
            rows = []
            cals = {}
            for mc in c["methods"]:
                m = MethodConfig.from_config(mc)
                cals[m.name] = self._calibrate(m, warm["parameters"])
                for W in c["workers"]:
                    r = run_images(data, model_params=c["model_params"], method=m, workers=W, steps=c["steps"],
                                   batch=max(1, c["global_batch"] // W), lr=c["lr"], momentum=c["momentum"],
                                   seed=c["seed"] + 1, init_state=init, threads=None, device=c.get("device", "cpu"))
                    skip = max(0, c["steps"] - c["measure_steps"])
                    row = {"method": m.name, "workers": W, "local_batch": max(1, c["global_batch"] // W),
                           "overall_compression": steady(r["per_step"], "overall_compression", skip),
                           "upload_compression": steady(r["per_step"], "upload_compression", skip),
                           "up_bytes": steady(r["per_step"], "up", skip), "down_bytes": steady(r["per_step"], "down", skip),
                           "vanilla_bytes": r["vanilla_bytes_each_way"],  # the ratios' reference, counted as this method's
                           "union_fraction": steady(r["per_step"], "union_fraction", skip) if m.kind == "local_topk" else None,
                           "accuracy": r["accuracy"], "per_step": r["per_step"]}
                    rows.append(row)
                    run.log({"workers": W, f"{m.name}/overall_compression": row["overall_compression"],
                             f"{m.name}/union_fraction": row["union_fraction"] or 0.0,
                             f"{m.name}/accuracy": row["accuracy"]}, step=len(rows))
                    ctx.progress.advance_epoch()
            wall = time.perf_counter() - t0
        finally:
            run.finish()
        return {"warm": {"accuracy": warm["accuracy"], "steps": c["warm_steps"], "parameters": warm["parameters"]},
                "vanilla_bytes_each_way": warm["vanilla_bytes_each_way"], "rows": rows, "calibration": cals,
                "parameters": warm["parameters"], "data": data.summary, "wall_s": wall, "wandb_dir": run.dir}

    def _image_train(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        from .vision import run_images, steady

        c = cell.config
        data = self.image_data(ctx, c["data"])
        m = MethodConfig.from_config(c["method"])
        from .models import build_image_model

        d = sum(p.numel() for p in build_image_model(data.side, {"in_channels": data.channels, **c["model_params"]}, 0).parameters())
        cal = self._calibrate(m, d)
        run = ctx.tracker.start(f"{ctx.scale}-{cell.name}", {
            "paper": "sketched-sgd", "method": m.name, "kind": m.kind, "codec_params": m.as_config(), "workers": c["workers"],
            "topology": "parameter_server" if m.kind == "local_topk" else "collective", "scale": ctx.scale, "seed": c["seed"],
            "dataset": data.summary.get("name"), "lr": c["lr"], "steps": c["steps"]},
            tags=["sketched-sgd", ctx.scale, "cifar", m.name], group=f"sketched-sgd-{ctx.scale}")

        def on_eval(rec: Mapping[str, Any]) -> None:
            run.log({"loss": rec["loss"], "metric/accuracy": rec["accuracy"]}, step=rec["step"])
            ctx.progress.advance_epoch()

        def on_step(step: int, rec: Mapping[str, float]) -> None:
            run.log({"accumulator_norm": rec["accumulator_norm"]}, step=step)

        try:
            res = run_images(data, model_params=c["model_params"], method=m, workers=c["workers"], steps=c["steps"],
                             batch=c["batch"], lr=c["lr"], momentum=c["momentum"], seed=c["seed"], eval_every=c["eval_every"],
                             threads=None, on_eval=on_eval, on_step=on_step, device=c.get("device", "cpu"))
            res["overall_compression"] = steady(res["per_step"], "overall_compression")
            run.summary({"accuracy": res["accuracy"], "overall_compression": res["overall_compression"]})
        finally:
            run.finish()
        res["calibration"] = cal
        res["data"] = data.summary
        res["wandb_dir"] = run.dir
        return res

    def _ddp(self, cell: Cell, ctx: RunContext) -> dict[str, Any]:
        from gcbench.envs.launch import launch
        from gcbench.envs.traffic import TrafficLog

        from .models import build_image_model
        from .vision import ddp_rank_main, run_images

        c = cell.config
        data = self.image_data(ctx, c["data"])
        m = MethodConfig.from_config(c["method"])
        d = sum(p.numel() for p in build_image_model(data.side, {"in_channels": data.channels, **c["model_params"]}, 0).parameters())
        cal = self._calibrate(m, d)
        ds = c["data"].get("dataset")
        t0 = time.perf_counter()
        ranks = launch(ddp_rank_main, int(c["workers"]),
                       (ds if ds and ds != "fashion-mnist" else None, dict(c["data"]), dict(c["model_params"]), m.as_config(),
                        int(c["steps"]), int(c["batch"]), float(c["lr"]), float(c["momentum"]), int(c["seed"])),
                       timeout_s=120.0)
        real_s = time.perf_counter() - t0
        real_log = TrafficLog.merged(TrafficLog.from_dict(r["traffic"]) for r in ranks)
        sim = run_images(data, model_params=c["model_params"], method=m, workers=int(c["workers"]), steps=int(c["steps"]),
                         batch=int(c["batch"]), lr=float(c["lr"]), momentum=float(c["momentum"]), seed=int(c["seed"]),
                         threads=1)
        return {
            "workers": c["workers"], "steps": c["steps"], "calibration": cal,
            "real": {"params_digest": [r["params_digest"] for r in ranks], "losses": [r["losses"] for r in ranks],
                     "message_bytes": real_log.message_bytes(), "bytes_by_kind": real_log.summary()["bytes_by_kind"],
                     "accuracy": ranks[0]["accuracy"], "wall_s": real_s},
            "simulated": {"params_digest": sim["params_digest"], "message_bytes": sim["traffic"]["message_bytes"],
                          "bytes_by_kind": sim["traffic"]["bytes_by_kind"], "accuracy": sim["accuracy"]},
            "digests_equal": all(r["params_digest"] == sim["params_digest"] for r in ranks),
            "data": data.summary,
        }

    # -- deriving ----------------------------------------------------------------------------------

    def derive(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
        """The measured quantities the spec's values and claims name.

        ``t1.<model>.updates_per_coordinate`` (steps x k / d_c) counts the steps the model's sparse runs
        trained (:func:`.parity.sparse_steps`: the fewest over their runs, each finished run's own record,
        a diverged run's steps as configured with the run's overrides), not the scale's preset: a run with
        ``--epochs`` is flagged by the steps it ran; ``.sparse_caught_up`` and the flags built on it follow."""
        out: dict[str, float | None] = dict(derive_translation(results))
        out.update(derive_selection(results))
        # the steps the translation cells were configured with: the preset with the run's overrides (--epochs)
        configured = int(translation_preset(ctx.preset, ctx.options)["steps"]) if ctx.preset.get("translation") else None
        for model in {r["model"] for n, r in results.items() if n.startswith("t1-")}:
            # parity is of the final metric: the training cross entropy of every method a parity claim
            # compares has to have settled (framework.settling), each method's seeds together
            runs: dict[str, list[Mapping[str, Any]]] = {}
            for n, r in sorted(results.items()):
                if n.startswith("t1-") and r["model"] == model:
                    runs.setdefault(r["method"]["name"], []).append(r)
            for meth, rs in runs.items():
                out[f"t1.{model}.{meth}.loss_fall"] = window_fall([r["losses"] for r in rs])
            k, d = out.get(f"t1.{model}.k"), out.get(f"t1.{model}.compressed_parameters")
            steps = sparse_steps(runs, configured)
            if steps is not None and k and d:
                # enough sparse updates to have drained the error accumulator (and caught up with vanilla,
                # which updates every coordinate every step): fixed by the configuration, from the steps the
                # sparse runs trained (each finished run's record; a diverged run's configured steps)
                upd = float(steps) * k / d
                out[f"t1.{model}.updates_per_coordinate"] = upd
                out[f"t1.{model}.sparse_caught_up"] = 1.0 if upd >= MIN_UPDATES_PER_COORDINATE else 0.0
                # the no-divergence claim's ``testable``: a run too short to show that training stays
                # finite to the end still shows a divergence, which refutes the claim at any length
                diverged = out.get(f"t1.{model}.sketched_diverged")
                out[f"t1.{model}.divergence_testable"] = (
                    1.0 if diverged is not None and diverged > 0 else out[f"t1.{model}.sparse_caught_up"])
                out.update(parity_flags(ctx.spec, model, runs, out))
            out.update(heldout_paths(ctx.spec, model, runs))
        sc = results.get("cifar-scaling")
        if sc is not None:
            for mname, prefix in (("local_topk", "cifar.local_topk"), ("sketched", "cifar.sketched")):
                rows = sorted((r for r in sc["rows"] if r["method"] == mname), key=lambda r: r["workers"])
                if not rows:
                    continue
                out[f"{prefix}.compression_wmin"] = rows[0]["overall_compression"]
                out[f"{prefix}.compression_wmid"] = rows[len(rows) // 2]["overall_compression"]
                out[f"{prefix}.compression_wmax"] = rows[-1]["overall_compression"]
                out[f"{prefix}.upload_compression_wmax"] = rows[-1]["upload_compression"]
                if mname == "local_topk" and rows[-1].get("union_fraction") is not None:
                    # the sum's download is dense where a sparse one (index + value per non-zero) would
                    # not be smaller: the union holds at least half of the coordinates
                    out[f"{prefix}.union_fraction_wmax"] = rows[-1]["union_fraction"]
                    out[f"{prefix}.dense_download"] = float(rows[-1]["union_fraction"] >= 0.5)
                for r in rows:
                    out[f"{prefix}.compression_w{r['workers']}"] = r["overall_compression"]
        for mname in ("vanilla", "local_topk", "true_topk", "sketched"):
            r = results.get(f"cifar-train-{mname}")
            if r is not None:
                out[f"cifar.{mname}.accuracy"] = r["accuracy"]
        dd = results.get("ddp-check")
        if dd is not None:
            out["ddp.real_bytes"] = float(dd["real"]["message_bytes"])
            out["ddp.simulated_bytes"] = float(dd["simulated"]["message_bytes"])
            out["ddp.digests_equal"] = 1.0 if dd["digests_equal"] else 0.0
            # real ranks whose final parameters differ from the simulated run's (SHA-256 of the parameters)
            out["ddp.ranks_differing"] = float(sum(1 for h in dd["real"]["params_digest"] if h != dd["simulated"]["params_digest"]))
        return out

    # -- reporting ---------------------------------------------------------------------------------

    def report(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]], measured: Mapping[str, float | None]) -> ReportParts:
        """Header lines, measured tables, the honest discussion, and the plots."""
        from .report import build_report

        return build_report(self, ctx, results, measured)


def _second_half(series: list[list[float]]) -> list[float]:
    """The finite values of the second half of each per-step series (one per seed), together."""
    return [x for s in series for x in s[len(s) // 2:] if math.isfinite(x)]


def derive_translation(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """Table 1's measured quantities, per ``<model>.<method>``:

    * ``t1.M.X`` / ``.test_loss``: BLEU and held-out cross entropy of the first seed's run;
    * ``.bleu_mean`` / ``.test_loss_mean`` over the seeds, ``.seeds`` and ``.diverged`` (runs that
      hit a non-finite gradient, counted: a divergence is a result), ``.test_loss_rel``: the mean
      held-out loss over vanilla's mean;
    * ``.acc_norm_growth``: the largest accumulator norm of the last quarter of training over the
      largest of the second quarter (bounded accumulation stays near 1 or below; the first quarter
      is left out: the accumulator fills up there);
    * ``.test_loss_min`` / ``.test_loss_max`` / ``.test_loss_spread`` over the seeds; ``.bleu_lo`` /
      ``.bleu_hi``: the first seed's BLEU 95% bootstrap interval; ``.bleu_mean_half_width``: the 95%
      half-width of the BLEU mean over the seeds, the mean of the seeds' half-widths (every seed's
      interval needed): the seeds translate the same held-out pairs, so their errors over those pairs
      are positively correlated, and the mean of the half-widths is the largest the mean's can be (the
      seeds' errors moving together), the upper bound, as :func:`.bleunoise.bleu_noise` takes for a pair;
    * ``t1.M.bleu_noise``: the spread of BLEU's orders for model ``M`` (:func:`.bleunoise.bleu_noise`, on each
      method's seed mean and ``.bleu_mean_half_width``: the runs the compared value comes from), where
      every run of ``M`` has a bootstrap interval; ``t1.M.X.bleu_ratio_noise``: the spread of method ``X``'s
      BLEU over vanilla's (:func:`.bleunoise.bleu_ratio_noise`), where both have one;
    * Sketched-SGD: ``.P``, ``.columns``, ``.columns_per_k``, ``.sketch_size``, the rule's counts
      (``.sizing_paper_compression``, ``.sizing_upload_compression``, ``.sizing_overall_compression``)
      and, from measured bytes of the last step, on the compressed parameters: ``.upload_compression``
      (vanilla's bytes of ``d_c`` floats over the sketch and candidate values) and ``.compression``
      (the sketch's own ratio: the §5.3 count on ``d_c`` only, not the paper's count, which is of the
      whole model: vanilla's upload and download of ``d_c`` floats over that upload plus a *modelled*
      download of ``k`` fp32 values, the paper's server's reply, which this implementation never
      sends); ``.overall_compression``: the paper's count, over the whole model: the same with the
      uncompressed dense tensor included each way (the same modelled download); ``.dense_budget_share``:
      the 1-D parameters' floats, both ways, over the target's budget ``2 D / target`` (the whole model's ratio
      is ``target / (1 + (target - 1) f)``, ``f`` their share of ``D``, whatever the sketch does; information,
      as ``.overall_compression``); ``.allreduce_compression``: vanilla's measured bytes per worker
      over Sketched-SGD's (both rounds, dense included), what this implementation's all_reduce sends
      and receives; ``.topk_recovery``: the share of the true
      top-k's mass the updates applied (:meth:`.methods.MethodRun.topk_recovery`), second half of
      training, every seed; ``.topk_recovery_first``: the same at the first step (seed mean);
      ``.topk_recovery_other_hash``: the share a sketch of the same size with hashes the run does not
      use would have applied to the same accumulations (:meth:`.methods.MethodRun.other_hash_recovery`),
      second half of training, every seed; ``.sketch_error_share``: the share of coordinates whose
      estimate by that sketch errs by more than the Count Sketch's width ``2 ||x|| / sqrt(c)``
      (:func:`sketch_error_share`); ``.sketch_large_error_share``: the same among the coordinates larger
      than that width (``.sketch_large_coordinates`` of them over the steps and seeds, pooled:
      :func:`sketch_large_error_share`), where an estimate of nothing misses every one;
      ``.sketch_error_ratio``: the larger of the two shares over the definition's bound, which bounds
      each (:func:`.sketchcheck.error_bound`); ``t1.sketch_error_ratio``: the largest ratio over the
      Sketched-SGD methods of either model, each a mean over its seeds' steps (the guard's quantity);
      ``.sketch_hash_deviation``: the largest statistic of the hashes of the run's sketch and of the
      measuring one (:func:`.sketchcheck.hash_statistics`, standard deviations from their means; every
      seed's run has the same hashes, set by the method's sketch seed), and
      ``t1.sketch_hash_ratio``: the largest over the Sketched-SGD methods, over ``HASH_WIDTHS`` (the
      hash guard's quantity).
    """
    out: dict[str, float | None] = {}
    runs: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for name, r in sorted(results.items()):
        if name.startswith("t1-"):
            runs.setdefault((r["model"], r["method"]["name"]), []).append(r)
    van_loss = {m: mean_or_nan([float(r["test_loss"]) for r in rs]) for (m, meth), rs in runs.items() if meth == "vanilla"}
    van_bytes = {m: float(rs[0]["traffic"]["last_step_bytes_per_worker"]) for (m, meth), rs in runs.items() if meth == "vanilla"}
    for (model, method), rs in runs.items():
        first = rs[0]
        base = f"t1.{model}.{method}"
        out[base] = first["bleu"]
        out[f"{base}.test_loss"] = first["test_loss"]
        out[f"{base}.bleu_mean"] = mean_or_nan([float(r["bleu"]) for r in rs])
        losses = [float(r["test_loss"]) for r in rs]
        out[f"{base}.test_loss_mean"] = math.inf if any(math.isnan(x) for x in losses) else mean_or_nan(losses)
        out[f"{base}.seeds"] = float(len(rs))
        finite = [x for x in losses if math.isfinite(x)]
        if finite:
            out[f"{base}.test_loss_min"], out[f"{base}.test_loss_max"] = min(finite), max(finite)
            out[f"{base}.test_loss_spread"] = max(finite) - min(finite)
        ci = first.get("bleu_ci")
        if ci:
            out[f"{base}.bleu_lo"], out[f"{base}.bleu_hi"] = float(ci[0]), float(ci[1])
        halves = [half_width(r.get("bleu"), *(r.get("bleu_ci") or (None, None))) for r in rs]
        if all(h is not None for h in halves):  # every seed has its interval
            out[f"{base}.bleu_mean_half_width"] = mean_or_nan(halves)  # type: ignore[arg-type]
        recs = [r.get("topk_recovery") or [] for r in rs]
        tails = _second_half(recs)
        if tails:  # Sketched-SGD: share of the true top-k's mass applied, second half of training, all seeds
            out[f"{base}.topk_recovery"] = mean_or_nan(tails)
        firsts = [rec[0] for rec in recs if rec and math.isfinite(rec[0])]
        if firsts:  # ... and at the first step, where the accumulation is one step's gradient
            out[f"{base}.topk_recovery_first"] = mean_or_nan(firsts)
        tails = _second_half([r.get("topk_recovery_other_hash") or [] for r in rs])
        if tails:  # ... and what a sketch with hashes the run does not use would have applied
            out[f"{base}.topk_recovery_other_hash"] = mean_or_nan(tails)
        share, large = sketch_error_share(rs), sketch_large_error_share(rs)
        if share is not None and large is not None:  # ... and how far that sketch's estimates of the accumulations lie
            out[f"{base}.sketch_error_share"] = share
            out[f"{base}.sketch_large_error_share"], out[f"{base}.sketch_large_coordinates"] = large
            # the guard: the larger of the two shares, each bounded by the same P(Binomial(r, 1/4) >= ceil(r / 2))
            out[f"{base}.sketch_error_ratio"] = max(share, large[0]) / error_bound(int(first["method"]["rows"]))
        stats = [r.get("sketch_hash_statistics") for r in rs]
        if stats and all(stats):  # ... and how far its sketches' hashes lie from the bound's assumptions
            out[f"{base}.sketch_hash_deviation"] = max(float(s["largest"]) for x in stats for s in x.values())  # type: ignore[union-attr]
        out[f"{base}.diverged"] = float(sum(1 for r in rs if r.get("diverged_at") is not None))
        if model in van_loss and van_loss[model] > 0:
            out[f"{base}.test_loss_rel"] = out[f"{base}.test_loss_mean"] / van_loss[model]  # type: ignore[operator]
        norms = first.get("accumulator_norms") or []
        if len(norms) >= 8:
            q = len(norms) // 4
            out[f"{base}.acc_norm_growth"] = max(norms[3 * q:]) / max(max(norms[q:2 * q]), 1e-30)
        out[f"t1.{model}.parameters"] = float(first["parameters"])
        if first.get("k"):
            # the sparse methods' run: their flat tensor leaves the 1-D parameters out (vanilla's holds all)
            out[f"t1.{model}.k"] = float(first["k"])
            out[f"t1.{model}.compressed_parameters"] = float(first["compressed_parameters"])
        cal = first.get("calibration")
        if first["method"]["kind"] == "sketched" and cal:
            for key in ("P", "columns", "sketch_size"):
                out[f"{base}.{key}"] = float(cal[key])
            out[f"{base}.columns_per_k"] = float(cal["columns"]) / float(cal["k"])
            out[f"{base}.sizing_paper_compression"] = float(cal["paper_compression"])
            out[f"{base}.sizing_upload_compression"] = float(cal["upload_compression"])
            if "overall_compression" in cal:
                out[f"{base}.sizing_overall_compression"] = float(cal["overall_compression"])
            if cal.get("target"):  # the 1-D floats, sent in full both ways, as a share of the target's budget 2 D / target
                share = float(cal.get("dense", 0)) * float(cal["target"]) / (float(cal["d"]) + float(cal.get("dense", 0)))
                out[f"{base}.dense_budget_share"] = share
            if model in van_bytes:
                # measured bytes of the last step: everything a worker sent (sketch, candidate values and
                # the uncompressed dense tensor, all_reduced as fp32 sections: 4 bytes a float, as vanilla's)
                up = float(first["traffic"]["last_step_bytes_per_worker"])
                dense = 4.0 * int(first.get("dense_parameters") or 0)
                van_flat = van_bytes[model] * int(first["compressed_parameters"]) / int(first["parameters"])
                # modelled, not sent: the paper's count takes the download as the server's k applied fp32 values
                down = 4.0 * float(first["k"])
                out[f"{base}.upload_compression"] = van_flat / (up - dense)
                out[f"{base}.compression"] = 2.0 * van_flat / (up - dense + down)
                out[f"{base}.overall_compression"] = 2.0 * van_bytes[model] / (up + down + dense)
                # as sent here: an all_reduce delivers what it reduces, so each worker receives what it sent
                out[f"{base}.allreduce_compression"] = van_bytes[model] / up
    for model in {m for m, _ in runs}:
        intervals = {meth: seed_mean_interval(out.get(f"t1.{model}.{meth}.bleu_mean"),
                                              out.get(f"t1.{model}.{meth}.bleu_mean_half_width"))
                     for m, meth in runs if m == model}
        noise = bleu_noise(list(intervals.values()))
        if noise is not None:
            out[f"t1.{model}.bleu_noise"] = noise
        for meth, interval in intervals.items():
            if meth != "vanilla" and "vanilla" in intervals:
                ratio_noise = bleu_ratio_noise(interval, intervals["vanilla"])
                if ratio_noise is not None:
                    out[f"t1.{model}.{meth}.bleu_ratio_noise"] = ratio_noise
        counts = [out.get(f"t1.{model}.{x}.diverged") for x in ("sketched20", "sketched40")]
        if any(c is not None for c in counts):
            out[f"t1.{model}.sketched_diverged"] = float(sum(c for c in counts if c is not None))
    sketched = [f"t1.{model}.{meth}" for (model, meth), rs in sorted(runs.items()) if rs[0]["method"]["kind"] == "sketched"]
    ratios = [out.get(f"{base}.sketch_error_ratio") for base in sketched]
    if ratios and all(x is not None for x in ratios):  # every Sketched-SGD run measured its sketch
        out["t1.sketch_error_ratio"] = max(ratios)  # type: ignore[type-var]
    deviations = [out.get(f"{base}.sketch_hash_deviation") for base in sketched]
    if deviations and all(x is not None for x in deviations):
        out["t1.sketch_hash_ratio"] = max(deviations) / HASH_WIDTHS  # type: ignore[type-var, operator]
    return out


def sketch_error_share(rs: list[Mapping[str, Any]]) -> float | None:
    """The mean, over every step of every seed's run, of the share of coordinates a sketch of the run's
    size (with hashes the run does not use) estimates beyond the Count Sketch's error width
    (:func:`.sketchcheck.error_share`); steps of a diverged accumulation (NaN) left out. None where a
    run has no such list (a cell without ``sketch_error_share``) or no finite step."""
    lists = [r.get("sketch_error_share") for r in rs]
    if any(x is None for x in lists):
        return None
    shares = [float(x) for xs in lists for x in xs if math.isfinite(float(x))]  # type: ignore[union-attr]
    return mean_or_nan(shares) if shares else None


def sketch_large_error_share(rs: list[Mapping[str, Any]]) -> tuple[float, float] | None:
    """``(share, large)``: over every step of every seed's run, the coordinates of the accumulation larger
    than the Count Sketch's error width (``large``, their number summed) and the share of them that a
    sketch of the run's size (hashes the run does not use) estimates beyond that width, pooled
    (:func:`.sketchcheck.large_errors`); steps of a diverged accumulation left out. The share is 0 where
    no step has a large coordinate (no estimate to miss). None where a run has no such list."""
    lists = [r.get("sketch_large_errors") for r in rs]
    if any(x is None for x in lists):
        return None
    counts = [c for xs in lists for c in xs if c is not None]  # type: ignore[union-attr]
    beyond, large = sum(int(c[0]) for c in counts), sum(int(c[1]) for c in counts)
    return (beyond / large if large else 0.0), float(large)


def workload() -> SketchedSGDWorkload:
    """The workload, built from the spec."""
    return SketchedSGDWorkload(load())
