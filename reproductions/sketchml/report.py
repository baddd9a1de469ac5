"""The SketchML report's own parts: run description, measured tables, discussion, plots."""

from __future__ import annotations

import math
from typing import Any, Mapping

from gcbench.tables import md_table

from ..framework.claims import DIFFERS, NOT_AT_SCALE, NOT_RUN, ClaimResult, evaluate_claims, fmt_num
from ..framework.report import new_figure, savefig
from ..framework.runner import ReportParts, RunContext
from .netmodel import profile_info
from .paperscale import METHODS as MSG_METHODS
from .critical_path import DriverModel
from .measures import min_trained_loss
from .report_msg import (LABELS, at_kdd12_size, calibration_section, message_size, message_size_phrase,
                         paper_messages_section, paper_messages_title, paper_words, short_count)
from .settings import T3_REPEAT, SketchMLSettings, grid_epochs

COLORS = {"sketchml": "tab:red", "adam-double": "tab:blue", "adam-float": "tab:cyan", "zipml16": "tab:green",
          "zipml8": "tab:olive", "quan_256": "tab:purple", "row_4": "tab:brown", "col_half": "tab:orange"}


#: How a time is labelled: every training-run time is measured compute and coding + communication
#: modelled under a nominal profile (Cluster-2's 10 Gbps for Tables 2-4 and Fig. 9, Cluster-1's 1 Gbps
#: for Fig. 8); the message-level times likewise, or under the calibrated Cluster-2 profile.
MODELLED_C2 = "modelled, nominal Cluster-2"
MODELLED_C1 = "modelled, nominal Cluster-1"
MODELLED_CAL = "modelled, calibrated Cluster-2"


def quantity_labels(msg_params: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Short names of measured quantities for the claims table's "ours" column. ``msg_params``: the
    message-level experiment's parameters (its cell's ``params``), whose size the ``msg.*`` and ``cal.*``
    labels name where it is not KDD12's, and the compression rate's always."""
    out: dict[str, str] = {}
    size = "" if msg_params is None or at_kdd12_size(msg_params) else f"; {message_size(msg_params)}"
    for model in ("lr", "svm", "linear"):
        for col, name in (("sketchml", "SketchML"), ("adam", "Adam"), ("zipml", "ZipML")):
            out[f"t2.{model}.{col}.min_loss"] = name
            out[f"t2.{model}.{col}.converge_time_s"] = f"{name} (s, {MODELLED_C2})"
            out[f"t2.{model}.{col}.epoch_time_s"] = f"{name} (s, {MODELLED_C2})"
            out[f"t2.{model}.{col}.converge_time_c1_s"] = f"{name} (s, {MODELLED_C1})"
            out[f"t2.{model}.{col}.converge_epoch"] = f"{name} (epochs)"
            out[f"t2.{model}.{col}.converge_time_cal_s"] = f"{name} (s, {MODELLED_CAL})"
            out[f"t2.{model}.{col}.excess_loss_frac"] = f"{name}'s excess over Adam / Adam's drop"
        out[f"t2.{model}.sketchml.value_rank_share"] = "pushed values' mean rank error / SketchML's bound"
        out[f"t2.{model}.sketchml.sketch_exact_shortfall"] = "1 - keys the MinMaxSketch answered exactly / its definition's expectation"
    for v, name in (("default", "default"), ("quan_256", "quan_256"), ("row_4", "row_4"), ("col_half", "col_d/2")):
        out[f"t3.{v}.epoch_time_s"] = f"{name} (s, mean{' of both runs' if v == 'default' else ''}, {MODELLED_C2})"
    for m in ("sketchml", "zipml8", "zipml16", "adam-float", "adam-double"):
        out[f"t4.{m}.epoch_time_s"] = f"{LABELS[m]} (s, {MODELLED_C2})"
        out[f"t4.{m}.push_time_s"] = f"{LABELS[m]} push (s, {MODELLED_C2})"
        out[f"t4.{m}.min_loss_budget"] = LABELS[m]
    out["t4.others.min_loss_budget"] = "best of Adam and ZipML"
    for tag, where in (("c1", MODELLED_C1), ("c2", MODELLED_C2)):
        for m in MSG_METHODS:
            out[f"msg.{tag}.{m}.epoch_s"] = f"{LABELS[m]} (s, {where}{size})"
        out[f"msg.{tag}.sketchml.coding_pct"] = f"SketchML encode/decode share, % ({where}{size})"
    for m in MSG_METHODS:
        out[f"cal.c2.{m}.epoch_s"] = f"{LABELS[m]} (s, {MODELLED_CAL}{size})"
    out["msg.compression_rate"] = (f"rate ({short_count(msg_params['features'])} features)" if msg_params is not None
                                   else "rate (table msg's messages)")
    out.update({"fig8.key_bytes.dense": "B/key", "fig8.key_bytes.sparse": "B/key", "fig8.compression_rate": "rate",
                "fig8.epoch_time_s.dense": f"10% (s, {MODELLED_C1})", "fig8.epoch_time_s.sparse": f"1% (s, {MODELLED_C1})"})
    return out


def units_ours(profile_tables: str, profile_fig8: str) -> dict[str, str]:
    """Units of our numbers in the "Paper values and ours" tables where they differ from the paper's: every
    time there is measured + modelled, so its unit says *modelled* and the profile it was priced under
    (``profile_tables`` for Tables 2-4 and Fig. 9(a), ``profile_fig8`` for Fig. 8), and Table 3's default's is the
    mean over both its runs' epochs."""
    c2, c1 = f"modelled, {profile_tables} (nominal)", f"modelled, {profile_fig8} (nominal)"
    out = {}
    for model in ("lr", "svm", "linear"):
        for col in ("sketchml", "adam", "zipml"):
            out[f"t2.{model}.{col}.converge_time_s"] = f"s, {c2}"
            out[f"t2.{model}.{col}.epoch_time_s"] = f"s, mean, {c2}"
    for v in ("default", "quan_256", "row_4", "col_half"):
        how = "mean over both runs' epochs" if v == "default" else "mean"
        out[f"t3.{v}.epoch_time_s"] = f"s, {how}, {c2}"
    for m in ("sketchml", "zipml8", "zipml16", "adam-float", "adam-double"):
        out[f"t4.{m}.epoch_time_s"] = f"s, mean, {c2}"
    for where in ("dense", "sparse"):
        out[f"fig8.epoch_time_s.{where}"] = f"s, {c1}"
    out["msg.c1.sketchml.coding_pct"] = f"% of the iteration, {c1}"
    return out


def tables_not_run(ctx: RunContext) -> str:
    """A header line naming the selected tables this preset runs no cell for ("" where it runs them all): a
    table outside the preset's own ``tables``, and table ``msg`` where the preset sets no ``paper_messages``
    (the messages it prices)."""
    only = ctx.preset.get("tables")
    why = {t: "outside this preset's tables" for t in ctx.tables if only and t not in only}
    if "msg" in ctx.tables and "msg" not in why and "paper_messages" not in ctx.preset:
        why["msg"] = ("this preset sets no `paper_messages`, the message size the message-level experiment prices; "
                      "the presets that set it run it")
    if not why:
        return ""
    return ("**Selected but not run**: " + "; ".join(f"table `{t}` ({w})" for t, w in why.items())
            + ". The claims on these tables read *not run* (or *not at this scale*, where no scale can test them).")


def grid_sentence(preset: Mapping[str, Any], lrs: Mapping[str, float | None]) -> str:
    """How the learning rate was chosen: the preset's grid, its epochs per point, and, for a rate the
    grid chose at one of its ends, that the grid does not bracket it (a rate beyond it was not tried)."""
    grid = [float(g) for g in preset["lr_grid"]]
    text = f"grid [{', '.join(fmt_num(g) for g in grid)}] with Adam-double, {grid_epochs(preset)} epochs a point"
    if len(grid) < 2:
        return text
    ends = []
    for end, v in (("largest", max(grid)), ("smallest", min(grid))):
        models = [m for m, lr in lrs.items() if lr == v]
        if models:
            who = models[0] if len(models) == 1 else ", ".join(models[:-1]) + " and " + models[-1]
            ends.append(f"{who}: {fmt_num(v)}, the grid's {end} point, so the grid does not bracket it")
    return text + ("; " + "; ".join(ends) if ends else "")


def lr_source(options: Mapping[str, Any], preset: Mapping[str, Any], lrs: Mapping[str, float | None]) -> str:
    """Where the run's learning rate came from, as :meth:`.SketchMLSettings.lr_for` picks it: the ``--lr``
    option first, then the preset's ``lr``, then its grid (:func:`grid_sentence`)."""
    if options.get("lr"):
        return "option --lr"
    if "lr_grid" in preset and not preset.get("lr"):
        return grid_sentence(preset, lrs)
    return "preset"


def _run(results: Mapping[str, Any], model: str, method: str) -> Mapping[str, Any] | None:
    return results.get(f"train-{model}-{method}")


def _time_cols(r: Mapping[str, Any]) -> list[str]:
    """Epoch, measured, modelled push and pull seconds per epoch: means over the trained epochs (the paper's
    metric, §4.1: "the average run time per epoch")."""
    s = r["summary"]
    pull = s["mean_modelled_comm_s"] - s["mean_modelled_push_s"]
    return [fmt_num(s["mean_epoch_time_s"]), fmt_num(s["mean_measured_s"]), fmt_num(s["mean_modelled_push_s"]), fmt_num(pull)]


def _copies(n: int) -> str:
    return f"{n} copy" if n == 1 else f"{n} copies"


def build_report(wl: SketchMLSettings, ctx: RunContext, results: Mapping[str, Mapping[str, Any]],
                 measured: Mapping[str, float | None]) -> ReportParts:
    """Everything the SketchML report adds to the framework's generic one."""
    spec, w = wl.spec, wl.spec.workload
    paper = paper_words(spec)
    workers = int(ctx.options.get("workers") or ctx.preset["workers"])
    results = wl.priced(results, workers)  # the training runs' modelled seconds, the broadcast as the critical path's
    msg = results.get("paper-messages")
    parts = ReportParts(labels=quantity_labels(msg["params"] if msg is not None else None),
                        units_ours=units_ours(w["profile_tables"], w["profile_fig8"]))
    ds = ctx.cache.get("dataset_summary") or next((r.get("dataset") for r in results.values() if r.get("dataset")), None)
    dataset_key = wl.dataset_key(ctx)
    # -- header ------------------------------------------------------------------------------------
    skipped = tables_not_run(ctx)
    if skipped:
        parts.header_lines.append(skipped)
    if ds:
        parts.header_lines.append(
            f"Data set: **{ds['name']}** — {ds['description']}; {ds['rows']:,} rows × {ds['features']:,} features, "
            f"{ds['nnz_per_row']:.1f} non-zeros per row, positive rate {ds['positive_rate']:.3f}; "
            f"split {w['train_fraction']:.0%} train / {1 - w['train_fraction']:.0%} test"
        )
    else:
        parts.header_lines.append(f"Data set: `{dataset_key}` (every cell was reused from cache; see results.json of the run that computed them)")
    epochs = int(ctx.options.get("epochs") or ctx.preset["epochs"])
    lrs = {m: wl.lr_for(ctx, m, results) for m in wl.models}
    lr_how = lr_source(ctx.options, ctx.preset, lrs)
    parts.header_lines.append(
        f"Workload (§4.1): ℓ2-regularised LR / SVM / Linear, λ={w['l2']}, Adam (β1={w['beta1']}, β2={w['beta2']}, ε={w['eps']}), "
        f"learning rate {', '.join(f'{m} {fmt_num(v)}' for m, v in lrs.items() if v is not None)} ({lr_how}), "
        f"mini-batch {w['batch_ratio']:.0%} of the training set ({round(1 / w['batch_ratio'])} iterations per epoch), "
        f"{workers} simulated workers + 1 driver ({w['topology']}), {epochs} epochs"
    )
    for key in ("profile_tables", "profile_fig8"):
        p = profile_info(w[key])
        used = "Tables 2–4, Fig. 9" if key == "profile_tables" else "Fig. 8"
        parts.header_lines.append(
            f"Network profile for {used}: **{p['name']}** — {p['title']}; {p['bandwidth_gbps']:g} Gbps, α = {p['latency_us']:g} µs "
            f"(latency: {p['sources'].get('latency_us', 'see envs/profiles')}); modelled with {p['model']}"
        )
    parts.header_lines.append(
        f"Times: *measured* on this machine = CPU seconds of the one working thread (`time.thread_time`: the load of a shared machine does not inflate them; torch on 1 thread; codecs {wl.codec_mode(ctx)}) of the slowest worker's gradient + encode, the driver's "
        "decode + sum + re-encode, and one worker's decode + Adam step; *modelled* = communication from the real "
        "message bytes each cell recorded (push: workers → driver, α + Σ bytes/β; pull: the driver's re-encoded aggregate, "
        "as the released code broadcasts it, priced as the driver's critical path prices Spark's TorrentBroadcast: "
        f"α + copies · bytes/β, {_copies(wl.training_driver().copies(workers))} on the driver's link (the spec's "
        "broadcast_copies); the driver's decodes stay serial, one driver time per iteration). Epoch time = measured + modelled, the mean over the run's trained epochs (the paper's \"average run "
        "time per epoch\", §4.1; Table 3's claims compare these means, with their t interval as their noise). Every time that includes a "
        "modelled part is labelled *modelled* with its profile."
    )
    parts.header_lines.append(
        "Loss = mean test loss (no ℓ2 term), as the released code's validation loss; labels ±1 for all three models "
        "(LR starts at ln 2, SVM at 1, Linear at 1/2). ℓ2 is added by each worker to its own keys before compression "
        "and Adam updates only the keys of the broadcast gradient, as in the released code."
    )
    # -- measured tables ---------------------------------------------------------------------------
    rows = []
    for model in wl.models:
        for col, method in (("sketchml", "sketchml"), ("adam", "adam-double"), ("zipml", "zipml16")):
            r = _run(results, model, method)
            if r is None:
                continue
            ce = measured.get(f"t2.{model}.{col}.converge_epoch")
            rows.append([model.upper() if model != "linear" else "Linear", LABELS[method], fmt_num(measured.get(f"t2.{model}.{col}.min_loss")),
                         "not converged" if ce is None or math.isinf(ce) else str(int(ce)),
                         fmt_num(measured.get(f"t2.{model}.{col}.converge_time_s")), *_time_cols(r)])
    if rows:
        parts.sections.append((
            "Measured: Table 2 and Fig. 9",
            "Converged: the paper's rule (loss varies < 1% over 5 epochs); converged time = cumulative epoch time at that epoch. "
            f"Times per epoch, means over the trained epochs; epoch = measured + modelled ({w['profile_tables']}, nominal).\n\n"
            + md_table(["model", "method", "min test loss", "converged epoch", "converged time (s, modelled)", "epoch (s, modelled)",
                        "measured (s)", "modelled push (s)", "modelled pull (s)"], rows),
        ))
    rows = []
    for variant, method in (("default", "sketchml"), ("quan_256", "quan_256"), ("row_4", "row_4"), ("col_half", "col_half")):
        r = _run(results, "linear", method)
        if r is None:
            continue
        ce = measured.get(f"t3.{variant}.converge_epoch")
        rows.append([LABELS[method], fmt_num(r["summary"]["mean_message_bytes"]), fmt_num(measured.get(f"t3.{variant}.min_loss")),
                     "not converged" if ce is None or math.isinf(ce) else str(int(ce)), *_time_cols(r)])
    again = results.get(T3_REPEAT)
    if rows and again is not None:
        rows.append([f"{LABELS['sketchml']} (again, after the others)", fmt_num(again["summary"]["mean_message_bytes"]),
                     fmt_num(min_trained_loss(again["epochs"])), "—", *_time_cols(again)])
    if rows:
        spread = measured.get("t3.epoch_time_spread")
        parts.sections.append(("Measured: Table 3 (Linear)",
            "Times per epoch, means over the trained epochs; epoch = measured + modelled "
            f"({w['profile_tables']}, nominal).\n\n" + md_table(
            ["variant", "message (B)", "min test loss", "converged epoch", "epoch (s, modelled)", "measured (s)",
             "modelled push (s)", "modelled pull (s)"], rows)
            + ("" if spread is None else
               f"\n\nThe noise of Table 3's claims (t3.epoch_time_spread): {fmt_num(100 * spread)}%: the widest of the four "
               "variants' mean epoch times' 95% t intervals and the gap between the means of the default's two runs; an order "
               "closer than that, or a ratio that close to its tolerance, is not at this scale. The claims take the default's "
               "time as the mean "
               "over the epochs of both its runs "
               f"({fmt_num(measured.get('t3.default.epoch_time_s'))} s).")))
    if measured.get("t4.budget_s") is not None:
        rows = []
        for m in ("sketchml", "zipml8", "zipml16", "adam-float", "adam-double"):
            r = _run(results, "lr", m)
            assert r is not None
            rows.append([LABELS[m], fmt_num(r["summary"]["mean_message_bytes"]), *_time_cols(r),
                         fmt_num(measured.get(f"t4.{m}.min_loss_budget")),
                         "yes" if measured.get(f"t4.{m}.budget_exhausted") else "no (min over the whole run)"])
        parts.sections.append((
            "Measured: Table 4 (LR)",
            f"Budget: {fmt_num(measured['t4.budget_s'])} s = {w['budget_adam_double_epochs']} Adam-double epochs of this run "
            f"(the paper's 2 h / {paper['t4.adam-double']} s per Adam-double epoch); times per epoch, means over the trained epochs; epoch = measured + "
            f"modelled ({w['profile_tables']}, nominal).\n\n"
            + md_table(["method", "message (B)", "epoch (s, modelled)", "measured (s)", "modelled push (s)", "modelled pull (s)",
                        "min loss within budget", "run reached the budget"], rows),
        ))
    if msg is not None:
        parts.sections.append((paper_messages_title(msg["params"]),
                               paper_messages_section(msg, measured, {"c1": w["profile_fig8"], "c2": w["profile_tables"]},
                                                      wl.driver_models(), paper)))
        _, fits, cal_rows = wl.calibrated(msg)
        parts.sections.append(("Modelled (calibrated): Cluster-2 fitted on Table 4's Adam rows",
                               calibration_section(fits, cal_rows, w["profile_tables"], measured,
                                                   wl.calibration["cluster"], wl.calibration)))
        parts.extra["calibration"] = {k: v.as_dict() for k, v in fits.items()}
    sweep = results.get("fig8-sweep")
    fig8_lines = []
    if measured.get("fig8.compression_rate") is not None:
        fig8_lines.append(
            f"LR training with SketchML: mean message {fmt_num(measured['fig8.message_mb.sketchml'] * 1e6)} B against "
            f"{fmt_num(measured['fig8.message_mb.adam'] * 1e6)} B for the same gradients as int32 keys + float64 values "
            f"→ compression rate **{fmt_num(measured['fig8.compression_rate'])}×**; keys {fmt_num(measured.get('fig8.key_bytes.train'))} B/key."
        )
    if sweep is not None:
        rows = [[f"{r['ratio']:.0%}", f"{r['density']:.2%}", fmt_num(r["key_bytes_per_key"]), fmt_num(r["sketchml_message_bytes"]),
                 fmt_num(r["raw_message_bytes"]), fmt_num(r["compression_rate"]), fmt_num(r["epoch_time_s"]),
                 fmt_num(r["epoch_measured_s"]), fmt_num(r["epoch_modelled_s"])] for r in sweep["rows"]]
        fig8_lines.append(
            "Batch-ratio sweep (gradients of an LR model after "
            f"{ctx.preset.get('fig8_warmup_epochs')} Adam epochs; epoch time = (1 / ratio) iterations × "
            f"(measured + modelled per iteration, {w['profile_fig8']}, nominal). The sweep's model stays fixed, so its "
            "measured seconds hold no Adam step (the slowest worker's gradient + encode, the driver's decodes + "
            "re-encode, one worker's decode of the broadcast): its epochs are not the training runs':\n\n"
            + md_table(["batch ratio", "density", "key B/key", "SketchML msg (B)", "uncompressed msg (B)", "rate",
                        "epoch (s, modelled)", "measured (s)", "modelled (s)"], rows)
        )
    if fig8_lines:
        parts.sections.append(("Measured: Fig. 8 numbers", "\n\n".join(fig8_lines)))
    if ds and ds.get("name") == "synthetic":
        prm = ds["params"]
        parts.sections.append((
            "Data set parameters (synthetic)",
            "Generated by `gcbench.data.sparse.synthetic_kdd` (KDD-like: binary features, power-law feature popularity, "
            "logistic labels); it stands in for KDD10/KDD12, which cannot be downloaded here.\n\n"
            + md_table(["parameter", "value"], [[k, v] for k, v in prm.items()]),
        ))
    parts.sections.append(("What reproduces and what does not",
                           discussion(ctx, results, measured, parts.labels, driver=wl.training_driver())))
    # -- plots ---------------------------------------------------------------------------------------
    plots_dir = ctx.out_dir / "plots"
    p = plot_fig10(wl, results, plots_dir / "fig10_loss_vs_time.png")
    if p:
        parts.plots.append((f"Fig. 10 analogue: test loss against time (measured + modelled, {w['profile_tables']}, nominal), "
                            "and against epochs", "plots/" + p.name))
    p = plot_table4(results, measured, plots_dir / "table4_lr_weight_types.png")
    if p:
        parts.plots.append((f"Table 4 analogue: LR loss against time (measured + modelled, {w['profile_tables']}, nominal) "
                            "for the five weight types; dashed line = budget", "plots/" + p.name))
    p = plot_table3(results, plots_dir / "table3_linear_sensitivity.png")
    if p:
        parts.plots.append(("Table 3 / Fig. 13 analogue: Linear regression, SketchML variants", "plots/" + p.name))
    p = plot_fig8(sweep, spec, plots_dir / "fig8d_bytes_per_key.png")
    if p:
        parts.plots.append((f"Fig. 8(d) analogue: bytes per key and epoch time (measured + modelled, {w['profile_fig8']}, "
                            "nominal) against gradient density", "plots/" + p.name))
    parts.extra["dataset"] = ds or {"key": dataset_key}
    parts.extra["profiles"] = {k: profile_info(w[k]) for k in ("profile_tables", "profile_fig8")}
    parts.extra["learning_rates"] = lrs
    parts.extra["seeds"] = {
        "split_shards_batches": int(ctx.preset.get("seed", 0)),
        "dataset": (ds or {}).get("params", {}).get("seed") if ds else None,
        "codecs": {name: int(m.params.get("seed", 0)) for name, m in wl.methods.items()},
        "note": "SketchML's quantile sketch (DataSketches) flips coins from an unseedable engine: its runs vary slightly",
    }
    return parts


def _tie_sentence(result: ClaimResult | None) -> str:
    """What the run's evaluation of an ``order`` claim says of the numbers just shown: its status (with the
    reason where it is *not at this scale*), and how its check reads equal quantities (from ``strict``);
    empty without the claim."""
    if result is None or result.claim.check != "order":
        return ""
    claim = result.claim
    check = ("a strict order: equal epochs would not show that SketchML needs more, so a tie would differ"
             if claim.strict else "an order that counts a tie as within tolerance")
    if result.status == NOT_AT_SCALE:
        where = " at any scale of this package" if claim.meaningful_at == () else ""
        return (f" `{claim.id}` is *not at this scale*{where}: {result.reason}. "
                f"Where a run could test it, its check is {check}.")
    if result.status == NOT_RUN:
        return f" `{claim.id}` was not run here ({result.detail})."
    return f" `{claim.id}`, {check}: **{result.status}** here."


def discussion(ctx: RunContext, results: Mapping[str, Any], measured: Mapping[str, float | None], labels: Mapping[str, str],
               *, driver: DriverModel | None = None) -> str:
    """The honest account, with this run's numbers (``results`` priced by :meth:`.SketchMLSettings.priced`;
    ``driver``: how the training runs are priced, default the spec's :meth:`.SketchMLSettings.training_driver`)."""
    driver = driver if driver is not None else SketchMLSettings(ctx.spec).training_driver()
    paper = paper_words(ctx.spec)
    claims = {r.claim.id: r for r in evaluate_claims(ctx.spec, measured, ctx.scale, tables=ctx.tables, labels=labels)}
    out = []
    judged = {cid: r for cid, r in claims.items() if r.claim.is_result}  # guards and consistency checks have their own sections
    reproduced = [cid for cid, r in judged.items() if r.status not in (DIFFERS, NOT_AT_SCALE, NOT_RUN)]
    differs = [cid for cid, r in judged.items() if r.status == DIFFERS]
    if reproduced:
        out.append("Holds at this scale: " + ", ".join(f"`{c}`" for c in reproduced) + ".")
    if differs:
        out.append("Differs at this scale: " + ", ".join(f"`{c}`" for c in differs) + ".")
    sk, ad = _run(results, "lr", "sketchml"), _run(results, "lr", "adam-double")
    if sk is not None and ad is not None:
        s, a = sk["summary"], ad["summary"]
        share = a["mean_modelled_comm_s"] / a["mean_epoch_time_s"] if a["mean_epoch_time_s"] else float("nan")
        # SketchML's extra measured seconds against the modelled transfer it saves, per epoch
        costs_more = s["mean_measured_s"] - a["mean_measured_s"] > a["mean_modelled_comm_s"] - s["mean_modelled_comm_s"]
        msg = results.get("paper-messages")
        out.append(
            f"**Why end-to-end times differ from the paper.** Per LR epoch here (means), Adam-double spends {fmt_num(a['mean_measured_s'])} s "
            f"measured and {fmt_num(a['mean_modelled_comm_s'])} s modelled communication ({share:.0%} of its epoch; "
            f"{ctx.spec.workload['profile_tables']}, nominal); SketchML spends "
            f"{fmt_num(s['mean_measured_s'])} s measured (quantile sketch, MinMaxSketch and key coding, twice per iteration, on one "
            f"CPU thread) and {fmt_num(s['mean_modelled_comm_s'])} s modelled. In the paper communication dominates (Adam-double "
            f"{paper['t4.adam-double']} s vs SketchML {paper['t4.sketchml']} s per epoch on KDD12: 54M features, ten executors, a shared "
            f"10 Gbps network; LR messages of {paper['message_mb']} MB uncompressed on KDD10, Fig. 8(b)); "
            f"ours are {fmt_num(a['mean_message_bytes'] / 1e3)} kB. Where SketchML's measured coding costs more than the transfer it "
            f"saves{', as here' if costs_more else ' (not so here)'}, every ordering that rests on time (Table 2's converged time, "
            "Fig. 9, Table 3, Table 4's first row and budget) follows this machine's coding speed, not the network; the "
            "message-level experiment (table msg) measures the same balance "
            f"{message_size_phrase(msg['params'] if msg is not None else None)}."
        )
        # bytes on the driver's link per epoch (the push + the broadcast's copies, as the training runs are priced)
        # and the bandwidth at which SketchML's extra coding time is paid back
        copies = driver.copies(int(ctx.options.get("workers") or ctx.preset["workers"]))
        bytes_a = a.get("bytes_up_per_epoch", 0.0) + copies * a.get("bytes_down_per_epoch", 0.0)
        bytes_s = s.get("bytes_up_per_epoch", 0.0) + copies * s.get("bytes_down_per_epoch", 0.0)
        extra = s["mean_measured_s"] - a["mean_measured_s"]
        if bytes_a > bytes_s and extra > 0:
            gbps = 8 * (bytes_a - bytes_s) / extra / 1e9
            out.append(
                f"**Break-even bandwidth.** SketchML saves {fmt_num((bytes_a - bytes_s) / 1e6)} MB on the driver's link per LR "
                f"epoch and costs {fmt_num(extra)} s more CPU time on this machine: it pays off on links slower than about "
                f"**{gbps:.3g} Gbps** on this machine. The paper's links were 1 Gbps (Cluster-1: SketchML "
                f"{'ahead' if gbps > 1 else 'behind'} here) and 10 Gbps (Cluster-2: {'ahead' if gbps > 10 else 'behind'}), with this "
                "implementation on one core per simulated worker."
            )
        elif extra <= 0:
            out.append("**Break-even bandwidth.** SketchML's coding cost no more measured time than Adam-double's in this run, "
                       "so it is ahead on any link.")
    conv = {col: (measured.get(f"t2.lr.{col}.converge_time_s"), measured.get(f"t2.lr.{col}.converge_time_c1_s"))
            for col in ("sketchml", "zipml", "adam")}
    if all(v[0] is not None and v[1] is not None for v in conv.values()):
        def ratio(a: float, b: float) -> str:
            return fmt_num(a / b) + "x" if b and math.isfinite(a) and math.isfinite(b) else "—"

        out.append(
            "**Table 2's convergence times, LR** (modelled: cumulative measured + modelled seconds at the converged epoch; the same runs "
            "priced with Cluster-2's 10 Gbps and with Cluster-1's 1 Gbps links): SketchML "
            f"{fmt_num(conv['sketchml'][0])} / {fmt_num(conv['sketchml'][1])} s, ZipML-16bit {fmt_num(conv['zipml'][0])} / "
            f"{fmt_num(conv['zipml'][1])} s, Adam-double {fmt_num(conv['adam'][0])} / {fmt_num(conv['adam'][1])} s; Adam / SketchML "
            f"{ratio(conv['adam'][0], conv['sketchml'][0])} (10 Gbps), {ratio(conv['adam'][1], conv['sketchml'][1])} (1 Gbps) against the "
            f"paper's {paper['t2_adam']}x; ZipML / SketchML "
            f"{ratio(conv['zipml'][0], conv['sketchml'][0])}, {ratio(conv['zipml'][1], conv['sketchml'][1])} against {paper['t2_zipml']}x."
        )
    epochs = {col: measured.get(f"t2.lr.{col}.converge_epoch") for col in ("sketchml", "adam", "zipml")}
    if all(v is not None for v in epochs.values()):
        out.append(
            f"**Table 2 split: epochs to converge** (measured, no hardware model; §4.4's rule): SketchML {fmt_num(epochs['sketchml'])}, "
            f"Adam-double {fmt_num(epochs['adam'])}, ZipML-16bit {fmt_num(epochs['zipml'])}. The paper's times imply about {paper['epochs.sketchml']}, "
            f"{paper['epochs.adam']} and {paper['epochs.zipml']} epochs ({paper['t2.sketchml']} h / {paper['t4.sketchml']} s, "
            f"{paper['t2.adam']} h / {paper['t4.adam-double']} s, {paper['t2.zipml']} h / {paper['t4.zipml16']} s): SketchML needing "
            f"{paper['epochs_ratio']}x Adam's epochs there, which its {paper['t4_speedup']}x "
            "faster epoch more than pays for. Here the ratio is "
            + (f"{fmt_num(epochs['sketchml'] / epochs['adam'])}x" if epochs["adam"] and math.isfinite(epochs["adam"]) else "—")
            + "."
            + _tie_sentence(claims.get("t2-epochs-lr"))
        )
    cal = ctx.spec.workload["calibration"]["cluster"]
    if measured.get(f"cal.{cal}.C_s") is not None:
        sk_cod = measured.get(f"msg.{cal}.sketchml.epoch_coding_s")
        out.append(
            f"**Calibrated Cluster-2 (modelled).** Fitted on Table 4's Adam rows: C = {fmt_num(measured[f'cal.{cal}.C_s'])} s per epoch, "
            f"β = {measured[f'cal.{cal}.beta_gbps']:.3g} Gbps effective (nominal 10). Held-out rows, predicted / paper − 1: SketchML "
            f"{measured[f'cal.{cal}.sketchml.misfit']:+.0%}, ZipML-8bit {measured[f'cal.{cal}.zipml8.misfit']:+.0%}, ZipML-16bit "
            f"{measured[f'cal.{cal}.zipml16.misfit']:+.0%}. The reverse fit on the ZipML rows (C = {fmt_num(measured[f'cal.{cal}.rev.C_s'])} s, "
            f"β = {measured[f'cal.{cal}.rev.beta_gbps']:.3g} Gbps) predicts Adam-double {measured[f'cal.{cal}.rev.adam-double.misfit']:+.0%} "
            "off: no single (C, β) explains both pairs of the paper's rows with our bytes, i.e. the paper's epochs are not linear in the "
            "bytes its methods send. SketchML's prediction is also dominated by this machine's coding: "
            f"{fmt_num(sk_cod)} s of codec time per epoch on the critical path, against the paper's whole SketchML epoch of "
            f"{paper['t4.sketchml']} s."
        )
    if "fig8.key_bytes.dense" in measured and measured.get("fig8.key_bytes.dense") is not None:
        out.append(
            f"**Bytes per key.** At batch ratio 10% (density {fmt_num((measured.get('fig8.density.dense') or 0) * 100)}%) keys take "
            f"{fmt_num(measured['fig8.key_bytes.dense'])} B/key, at 1% (density {fmt_num((measured.get('fig8.density.sparse') or 0) * 100)}%) "
            f"{fmt_num(measured.get('fig8.key_bytes.sparse'))} B/key. The delta between neighbouring keys of one MinMaxSketch group "
            "averages groups/density; where ids are spread at random, sparser gradients have larger gaps that need 2-byte deltas. "
            "The paper's 1.27 B/key near zero density is KDD10's (§4.2), whose ids App. A.3's remark covers (data sets "
            "\"usually\" put dimensions with strong relationship in consecutive keys), so the claim is tested only on the KDD10 "
            "file (the spec's source_ordered_ids)."
        )
    if measured.get("fig8.compression_rate") is not None:
        # pairs per uncompressed message: 12 B each (int32 key + float64 value)
        pairs = {who: mb * 1e6 / 12 if mb is not None else None
                 for who, mb in (("paper", ctx.spec.value("fig8.message_mb.adam").value),
                                 ("ours", measured.get("fig8.message_mb.adam")))}
        out.append(
            f"**Compression rate.** {fmt_num(measured['fig8.compression_rate'])}× against "
            f"{fmt_num(ctx.spec.value('fig8.compression_rate').value)}× in the paper, a check of the wire "
            "format on the synthetic generator's data only (fig8-compression-format) and information on any other: our messages "
            f"carry {fmt_num(pairs['ours'])} pairs on average against KDD10's {fmt_num(pairs['paper'])}, so SketchML's fixed "
            "per-message cost (the q=256 bucket values and the header) weighs on them, and keys cost more where their deltas "
            "do not all fit one byte."
        )
    for m in ("lr", "svm", "linear"):
        c = claims.get(f"t2-minloss-{m}")
        if c is not None and c.status == DIFFERS:
            out.append(f"**{m.upper()} minimal loss.** {c.detail}: SketchML's underestimated gradients (MinMaxSketch) did not reach "
                       "Adam's loss within this run's epochs.")
    return "\n\n".join(out)


# -- plots -------------------------------------------------------------------------------------------


def _curve(r: Mapping[str, Any], x: str) -> tuple[list[float], list[float]]:
    return [e[x] for e in r["epochs"]], [e["test_loss"] for e in r["epochs"]]


def plot_fig10(wl: SketchMLSettings, results: Mapping[str, Any], path: Any) -> Any:
    """Loss against time (top) and epochs (bottom) for LR / SVM / Linear x SketchML / Adam / ZipML."""
    models = [m for m in wl.models if any(_run(results, m, k) for k in ("sketchml", "adam-double", "zipml16"))]
    if not models:
        return None
    fig, axes = new_figure(2, len(models), figsize=(4.2 * len(models), 6.4), squeeze=False)
    for j, model in enumerate(models):
        for method in ("sketchml", "zipml16", "adam-double"):
            r = _run(results, model, method)
            if r is None:
                continue
            label = {"sketchml": "SketchML", "zipml16": "ZipML (16 bit)", "adam-double": "Adam (double)"}[method]
            axes[0][j].plot(*_curve(r, "cum_time_s"), marker=".", color=COLORS[method], label=label)
            axes[1][j].plot(*_curve(r, "epoch"), marker=".", color=COLORS[method], label=label)
        name = {"lr": "Logistic Regression", "svm": "SVM", "linear": "Linear Regression"}[model]
        axes[0][j].set_title(name)
        axes[0][j].set_xlabel("time (s): measured + modelled")
        axes[1][j].set_xlabel("epoch")
        for i in range(2):
            axes[i][j].set_ylabel("test loss")
            axes[i][j].grid(alpha=0.3)
        axes[0][j].legend(fontsize=8)
    return savefig(fig, path)


def plot_table4(results: Mapping[str, Any], measured: Mapping[str, Any], path: Any) -> Any:
    """LR loss against time for the five weight types, with the budget."""
    methods = [m for m in ("sketchml", "zipml8", "zipml16", "adam-float", "adam-double") if _run(results, "lr", m)]
    if len(methods) < 5:
        return None
    fig, ax = new_figure(1, 2, figsize=(10, 3.8))
    for m in methods:
        r = _run(results, "lr", m)
        ax[0].plot(*_curve(r, "cum_time_s"), marker=".", color=COLORS[m], label=LABELS[m])
        ax[1].bar(LABELS[m], r["summary"]["mean_measured_s"], color=COLORS[m], alpha=0.5)
        ax[1].bar(LABELS[m], r["summary"]["mean_modelled_comm_s"], bottom=r["summary"]["mean_measured_s"], color=COLORS[m])
    if measured.get("t4.budget_s"):
        ax[0].axvline(measured["t4.budget_s"], ls="--", color="gray")
    ax[0].set_xlabel("time (s): measured + modelled")
    ax[0].set_ylabel("test loss")
    ax[0].legend(fontsize=8)
    ax[0].grid(alpha=0.3)
    ax[1].set_ylabel("s per epoch (light: measured, dark: modelled comm)")
    ax[1].tick_params(axis="x", labelrotation=30)
    return savefig(fig, path)


def plot_table3(results: Mapping[str, Any], path: Any) -> Any:
    """Linear regression loss against epochs for the SketchML variants."""
    methods = [m for m in ("sketchml", "quan_256", "row_4", "col_half") if _run(results, "linear", m)]
    if len(methods) < 2:
        return None
    fig, ax = new_figure(1, 1, figsize=(5, 3.6))
    for m in methods:
        r = _run(results, "linear", m)
        ax.plot(*_curve(r, "epoch"), marker=".", color=COLORS[m], label="default" if m == "sketchml" else LABELS[m])
    ax.set_xlabel("epoch")
    ax.set_ylabel("test loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return savefig(fig, path)


def plot_fig8(sweep: Mapping[str, Any] | None, spec: Any, path: Any) -> Any:
    """Bytes per key and epoch time against density, with the paper's points."""
    if not sweep:
        return None
    rows = sorted(sweep["rows"], key=lambda r: r["density"])
    fig, ax = new_figure(1, 2, figsize=(10, 3.6))
    dens = [r["density"] * 100 for r in rows]
    ax[0].plot(dens, [r["key_bytes_per_key"] for r in rows], marker="o", color="tab:red", label="ours (SketchML keys)")
    for r in rows:
        ax[0].annotate(f"{r['ratio']:.0%}", (r["density"] * 100, r["key_bytes_per_key"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax[0].scatter([spec.value("fig8.density.dense").value * 100, spec.value("fig8.density.sparse").value * 100],
                  [spec.value("fig8.key_bytes.dense").value, spec.value("fig8.key_bytes.sparse").value],
                  marker="x", color="black", label="paper (KDD10)", zorder=3)
    ax[0].axhline(4.0, ls=":", color="gray")
    ax[0].set_xlabel("gradient density (%)")
    ax[0].set_ylabel("bytes per key (flag included)")
    ax[0].set_ylim(0, 4.3)
    ax[0].legend(fontsize=8)
    ax[0].grid(alpha=0.3)
    ax[1].plot(dens, [r["epoch_time_s"] for r in rows], marker="o", color="tab:red", label="epoch (measured + modelled)")
    ax[1].plot(dens, [r["epoch_modelled_s"] for r in rows], marker=".", ls="--", color="tab:gray", label="modelled comm only")
    ax[1].set_xlabel("gradient density (%)")
    ax[1].set_ylabel("s per epoch (Cluster-1)")
    ax[1].legend(fontsize=8)
    ax[1].grid(alpha=0.3)
    return savefig(fig, path)
