"""The L-GreCo reproduction: Table 4, Table 1 and Fig. 9 analogues on a small real model.

Cells (each cached on its own, see :mod:`..framework.cells`):

* ``train-<codec>``: one launch of ``workers`` real gloo ranks (DDP + :func:`gcbench.envs.ddp_hook.gcbench_hook`)
  training the scale's image model (preset ``model``, below) once per method - ``uniform`` (the codec's
  default everywhere), ``lgreco`` (Algorithm 1, budget = the uniform setting's summed error), ``accordion``
  ({D/2, 2D}, eta = 0.5), ``cgx`` (CGX's k-means assignment over the ladder), ``lgreco+accordion``
  (Accordion's choice sets the budget), and for TopK ``global-topk`` (Sec. 5.3) - with the policy inside
  the hook (decisions every ``every`` steps after ``warmup``, on rank 0, broadcast as an int64 tensor).
  Per method: real bytes on the wire (rank 0), step wall times, the decisions (tables/DP seconds, budget,
  chosen error) and the final accuracy.
* ``train-uncompressed``: the same with the identity codec (the final-metric baseline).
* ``sim-check``: the L-GreCo run of the scale's first codec on the simulated cluster (W = the scale's
  ``workers``), compared with the real run's final parameters (digest; ``sim.equals_real``) - the
  simulator is what larger-W experiments would use.
* a language-model scale (preset ``model = "tlm"``: the ``claims`` and ``table4`` scales) plans its own cells:
  :mod:`.lm_scale`.
* ``lm-<codec>``: the tiny Transformer LM (:mod:`.lm`) on real English text (``pydoc`` by default,
  WikiText-103 for users who have it), when the preset has ``lm``.

Models (preset ``model``): ``mlp``/``cnn`` (the sklearn digits models of :mod:`gcbench.workloads.models`) or
``resnet18`` (:mod:`.resnet`, preset ``width``) on an image data set (preset ``dataset``:
``fashion-mnist[:DIR]``, ``cifar10:PATH``, ``cifar100:PATH``, ``imagefolder:PATH`` or ``digits``;
``fallback`` replaces a missing Fashion-MNIST and the report says so). The ``dataset`` option
replaces the image data set, or the LM's text when it names one (``wikitext103:FOLDER``, ``pydoc``).

Throughput: measured = images/s of the real gloo run on this machine; modelled = images per step
(``batch`` x the profile's workers) over (measured step time - measured communication + the step's
traffic priced on the profile, :func:`gcbench.envs.network.comm_time`). On a 17k-parameter MLP the
compute dominates, so the modelled speed-ups are small: the paper's are for Transformer-XL and ResNet-50
on GPU clusters.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..framework.cells import Cell
from ..framework.runner import ReportParts, RunContext
from ..framework.settling import window_fall
from ..framework.spec import Spec, load_spec
from .budget import budget_quantities
from .metrics import compression_ratio, modelled_steps, overhead, per_step_bytes, step_ratios, throughput
from .ranks import rank_train, simulated_train
from .settings import CODE_VERSION, GLOBAL_TOPK, METHOD_IDS, METHODS, LGreCoSettings
from .vision import load_image_data

SPEC_PATH = Path(__file__).with_name("spec.toml")


def load() -> Spec:
    """The L-GreCo spec."""
    return load_spec(SPEC_PATH)


def image_epoch_steps(cfg: Mapping[str, Any], run: Mapping[str, Any]) -> float | None:
    """Steps in one epoch of an image run's training images (the images used over the images of one step of
    every rank), None where the run did not record how many it used."""
    from gcbench.data.digits import N_TRAIN

    data = run.get("data") or {}
    n = data.get("used_train") or (N_TRAIN if data.get("name") == "digits" else None)
    return n / (cfg["workers"] * cfg["batch"]) if n else None


class LGreCoWorkload(LGreCoSettings):
    """The :class:`~..framework.runner.Workload` of the L-GreCo reproduction."""

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
        if ctx.preset["model"] == "tlm":  # a language-model scale (claims, table4): its own cells
            from . import lm_scale

            return lm_scale.plan(self, ctx)
        cfg = self.run_config(ctx)
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
            lcfg = self.lm_config(ctx, cfg)
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

    def probe(self) -> Iterator[tuple[str, Any]]:
        """What a few steps of this package's training compute on synthetic data (:mod:`.probe`): the
        workload's stamp on every cell (:mod:`..framework.workload_stamp`)."""
        from .probe import probe

        return probe()

    def compute(self, cell: Cell, ctx: RunContext) -> Mapping[str, Any]:
        c = dict(cell.config)
        if cell.name == "sim-check":
            return simulated_train(c, load_image_data(c))
        from gcbench.envs.launch import launch

        ranks = launch(rank_train, c["workers"], (c["codec"], c["params"], c["ef"], c["methods"], c), timeout_s=120)
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
                _, wire = per_step_bytes(run)
                ratios = step_ratios(run)
                modelled = modelled_steps(run, "lgreco-single-node")
                for i, loss in enumerate(run["losses"]):
                    ratio = ratios.get(i, math.nan)
                    tracked.log({"loss": loss, "bytes_sent": wire.get(i, 0),
                                 "compression_ratio": None if math.isnan(ratio) else ratio,
                                 "time/measured_step_s": run["step_s"][i], "time/modelled_step_s": modelled[i]}, step=i)
                ev = run.get("eval") or {}
                tracked.summary({**{f"metric/{k}": v for k, v in ev.items()}, "compression_ratio": compression_ratio(run)})
        finally:
            tracked.finish()

    # -- derived numbers ---------------------------------------------------------------------------

    def derive(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
        if ctx.preset["model"] == "tlm":
            from . import lm_scale

            return lm_scale.derive(self, ctx, results)
        cfg = self.run_config(ctx)
        m: dict[str, float | None] = {}
        base = results["train-uncompressed"]["uniform"]
        m["acc.uncompressed"] = base["eval"]["test_accuracy"]
        # how far the baseline's training cross entropy still falls over the run's last tenth: the final-metric
        # claim's testable
        m["acc.uncompressed.loss_fall"] = window_fall([base["losses"]])
        ids = METHOD_IDS
        excess = []
        for name in ctx.preset["codecs"]:
            runs = results[f"train-{name}"]
            for method, mid in ids.items():
                if method not in runs:
                    continue
                run = runs[method]
                prefix = "t4" if name == ctx.preset["codecs"][0] else f"t4.{name}"
                m[f"{prefix}.{mid}.ratio"] = compression_ratio(run)
                # the same ratio under its seed's id: claims that pair the runs of one seed name it so
                m[f"{prefix}.{mid}.ratio.s{cfg['seed']}"] = m[f"{prefix}.{mid}.ratio"]
                m[f"{prefix}.{mid}.tput_measured"] = throughput(run, cfg, None)
                m[f"{prefix}.{mid}.tput_single"] = throughput(run, cfg, "lgreco-single-node")
                m[f"{prefix}.{mid}.tput_multi"] = throughput(run, cfg, "lgreco-multi-node")
                held = method == GLOBAL_TOPK  # one selection after the whole backward pass: nothing overlaps
                m[f"{prefix}.{mid}.tput_single_overlap"] = throughput(run, cfg, "lgreco-single-node", overlap=True, held=held)
                m[f"{prefix}.{mid}.tput_multi_overlap"] = throughput(run, cfg, "lgreco-multi-node", overlap=True, held=held)
                m[f"acc.{name}.{mid}"] = run["eval"]["test_accuracy"]
                if method in ("lgreco", "lgreco+accordion"):
                    for d in run["decisions"]:
                        if "budget" in d and d["budget"] > 0:
                            excess.append(d["error"] / d["budget"])
            if GLOBAL_TOPK in runs:  # Sec. 5.3: global TopK at L-GreCo's mean density, measured images/s
                m["gtopk.slowdown"] = 1.0 - m[f"{prefix}.global_topk.tput_measured"] / m[f"{prefix}.lgreco.tput_measured"]
                m["gtopk.density"] = runs[GLOBAL_TOPK]["density"]
                m["gtopk.slowdown_single"] = (1.0 - m[f"{prefix}.global_topk.tput_single_overlap"]
                                              / m[f"{prefix}.lgreco.tput_single_overlap"])
            lg = runs["lgreco"]
            # the chosen plans' error re-measured apart from the DP's tables, against the uniform setting's (.budget)
            m.update(budget_quantities(name, [lg]))
            # Table 1's share at one decision per epoch of the training images (epoch_share), beside the share
            # the run spent at its own decision interval (run_share)
            o = overhead(lg, image_epoch_steps(cfg, lg))
            for key in ("epoch_share", "epoch_error_share", "run_share", "run_error_share"):
                m[f"t1.{name}.{key}"] = o.get(key)
        for name, runs in results.items():
            if not name.startswith("lm-"):
                continue
            lcfg = self.lm_config(ctx, cfg)
            if "lgreco" in runs:
                m.update(budget_quantities("lm", [runs["lgreco"]]))
            for method, run in runs.items():
                mid = ids.get(method, method)
                m[f"lm.{mid}.ratio"] = compression_ratio(run)
                m[f"lm.{mid}.perplexity"] = run["eval"]["test_perplexity"]
                m[f"lm.{mid}.tokens_per_s"] = throughput(run, lcfg, None) * 32  # CONTEXT tokens per sample
        first = ctx.preset["codecs"][0]
        m["acc.lgreco"] = m[f"acc.{first}.lgreco"]
        m["dp.max_error_over_budget"] = max(excess) if excess else None
        m["dp.one"] = 1.0
        sim = results["sim-check"]
        m["sim.equals_real"] = float(sim["digest"] == results[f"train-{first}"]["lgreco"]["digest"])
        # the image ratios count the whole run, warm-up included
        m.update(self.accordion_quantities(m, cfg["steps"], cfg["warmup"], cfg["every"], 0))
        m.update(self.image_settled_flags(m))
        return m

    # -- report ------------------------------------------------------------------------------------

    def report(self, ctx: RunContext, results: Mapping[str, Mapping[str, Any]],
               measured: Mapping[str, float | None]) -> ReportParts:
        """Header lines, measured tables and the plot (:func:`.report.build_report`)."""
        if ctx.preset["model"] == "tlm":
            from . import lm_scale

            return lm_scale.report(self, ctx, results, measured)
        from .report import build_report

        return build_report(self, ctx, results, measured)


def workload() -> LGreCoWorkload:
    """The workload object the runner uses."""
    return LGreCoWorkload(load())
