"""The paper-specific parts of the Sketched-SGD report: measured tables, discussion, plots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gcbench.tables import md_table

from ..framework.cells import unsanitize_float
from ..framework.claims import DIFFERS, NOT_AT_SCALE, REPRODUCED, WITHIN, evaluate_claims, fmt_num
from ..framework.report import new_figure, savefig
from ..framework.runner import ReportParts, RunContext
from ..framework.settling import SETTLED_SHARE
from .settings import SketchedSGDSettings
from .selectcheck import selection_text
from .sketchcheck import HASH_WIDTHS, hash_false_alarm

LABELS = {
    "vanilla": "Vanilla", "topk": "Top-k (true)", "sketched20": "Sketched 20x", "sketched40": "Sketched 40x",
    "local_topk": "Local top-k", "sketched": "Sketched-SGD 20x", "true_topk": "Top-k (true, Sketched-SGD's k)",
}
COLORS = {"vanilla": "tab:gray", "topk": "tab:blue", "sketched20": "tab:red", "sketched40": "tab:orange",
          "local_topk": "tab:blue", "sketched": "tab:red", "true_topk": "tab:green"}
MODEL_NAMES = {"transformer": "transformer", "lstm": "LSTM"}
#: The rule's geometry at the paper's d and k, per model (methods' module docstring gives the thresholds).
GEOMETRY = ("transformer, k = d_c // 900: P = 44 / 22, columns / k = 9.0 / 4.4 at 20x / 40x for d_c above ~82,000; "
            "LSTM, k = d_c // 700: P = 34 / 17, columns / k = 7.0 / 3.4 for d_c above ~49,000")


def _t1(results: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The first seed's run per (model, method) (cells ``t1-M-X``; further seeds are ``t1-M-X-sN``)."""
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for n in sorted(results):
        if n.startswith("t1-"):
            out.setdefault((results[n]["model"], results[n]["method"]["name"]), results[n])
    return out


def budget_shares(t1: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[str]:
    """Per sized Sketched-SGD run, from its recorded sizing: the sketch's geometry (P, columns and
    columns / k; the paper's at 90M parameters: P = 44 / 22, columns / k = 9.0 / 4.4 at 20x / 40x),
    the sketch's own ratio and the paper's count with the 1-D parameters sent uncompressed."""
    out = []
    for (model, meth), r in sorted(t1.items()):
        cal = r.get("calibration") or {}
        if not cal.get("target"):
            continue
        dense = int(cal.get("dense", 0))
        overall = cal.get("overall_compression", cal["paper_compression"])
        out.append(f"{MODEL_NAMES.get(model, model)} {LABELS.get(meth, meth)} ({int(cal['d']) + dense:,} parameters, {dense:,} of "
                   f"them 1-D): P = {cal['P']}, {cal['columns']:,} columns x {cal['rows']} rows = {cal['columns'] / cal['k']:.2f} k "
                   f"for k = {cal['k']:,}; the sketch's own count {fmt_num(cal['paper_compression'])}x, overall "
                   f"{fmt_num(overall)}x")
    return out


def _t1_seeds(results: Mapping[str, Any]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """Every seed's run per (model, method)."""
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for n in sorted(results):
        if n.startswith("t1-"):
            out.setdefault((results[n]["model"], results[n]["method"]["name"]), []).append(results[n])
    return out


def quantity_labels() -> dict[str, str]:
    """The report's display names of the measured quantities the claims show."""
    labels = {}
    for model in ("transformer", "lstm"):
        for m in ("vanilla", "topk", "sketched20", "sketched40"):
            labels[f"t1.{model}.{m}"] = f"{MODEL_NAMES[model]} {LABELS[m]}"
            labels[f"t1.{model}.{m}.compression"] = (f"{MODEL_NAMES[model]} {LABELS[m]} sketch's own ratio, the §5.3 count on the "
                                                     "compressed parameters only, not the paper's (measured upload + modelled "
                                                     "download of k values)")
            labels[f"t1.{model}.{m}.overall_compression"] = (f"{MODEL_NAMES[model]} {LABELS[m]} paper's §5.3 count over the whole "
                                                             "model (measured upload + modelled download of k values, 1-D "
                                                             "parameters both ways)")
            labels[f"t1.{model}.{m}.allreduce_compression"] = (f"{MODEL_NAMES[model]} {LABELS[m]} ratio of the bytes "
                                                               "really sent (all_reduce, measured)")
            labels[f"t1.{model}.{m}.sizing_paper_compression"] = f"{MODEL_NAMES[model]} {LABELS[m]} sizing rule's count"
            labels[f"t1.{model}.{m}.upload_compression"] = f"{MODEL_NAMES[model]} {LABELS[m]} measured upload-only ratio"
            labels[f"t1.{model}.{m}.sizing_upload_compression"] = f"{MODEL_NAMES[model]} {LABELS[m]} sizing rule's upload-only ratio"
            labels[f"t1.{model}.{m}.test_loss_mean"] = f"{MODEL_NAMES[model]} {LABELS[m]} held-out loss (seed mean)"
            labels[f"t1.{model}.{m}.test_loss_rel"] = f"{MODEL_NAMES[model]} {LABELS[m]} held-out loss / vanilla's"
            labels[f"t1.{model}.{m}.bleu_mean"] = f"{MODEL_NAMES[model]} {LABELS[m]} BLEU (seed mean)"
            labels[f"t1.{model}.{m}.diverged"] = f"{MODEL_NAMES[model]} {LABELS[m]} diverged runs"
    for p, lab in (("cifar.local_topk", "local top-k"), ("cifar.sketched", "Sketched-SGD")):
        for s, t in (("wmin", "smallest W"), ("wmid", "middle W"), ("wmax", "largest W")):
            labels[f"{p}.compression_{s}"] = f"{lab} at {t}"
        labels[f"{p}.upload_compression_wmax"] = f"{lab} upload only at largest W"
    labels.update({"ddp.real_bytes": "real DDP bytes", "ddp.simulated_bytes": "simulated bytes",
                   "t1.selection_violations": "checked steps breaking one of Algorithm 2's lines 5-13, every Sketched-SGD method",
                   "t1.sketch_error_ratio": "largest share of estimates beyond 2‖x‖/√c, over the Count Sketch's bound",
                   "t1.sketch_hash_ratio": ("largest hash statistic of the runs' sketches and the measuring ones, in standard deviations, "
                                            f"over {fmt_num(HASH_WIDTHS)}")})
    return labels


def build_report(wl: SketchedSGDSettings, ctx: RunContext, results: Mapping[str, Any], measured: Mapping[str, Any]) -> ReportParts:
    """Header lines, sections and plots (see :class:`~..framework.runner.ReportParts`)."""
    spec = wl.spec
    w = spec.workload
    parts = ReportParts()
    labels = quantity_labels()
    parts.labels = labels
    parts.units_ours = {"t1.transformer.k": "coordinates", "t1.lstm.k": "coordinates"}
    t1 = _t1(results)
    # -- header ------------------------------------------------------------------------------------
    tr_data = next((r["data"] for r in t1.values()), None)
    if tr_data:
        parts.header_lines.append(
            f"Translation data: {tr_data['description']}; {tr_data['train_pairs']:,} training pairs, {tr_data['split']}; "
            f"word vocabularies {tr_data['src_vocab']:,} (English) / {tr_data['tgt_vocab']:,} (German), built from the training "
            f"split; {tr_data['target_unk_rate']:.1%} of training target tokens are <unk>")
    tr = wl.translation_preset(ctx)
    if t1:
        sizes = ", ".join(f"{MODEL_NAMES[m]} {fmt_num(measured.get(f't1.{m}.parameters'))} parameters "
                          f"(paper {fmt_num(w['paper_parameters'][m] / 1e6)}M)" for m in tr["models"] if measured.get(f"t1.{m}.parameters"))
        parts.header_lines.append(
            f"Models: {sizes}; {tr['workers']} workers x {tr['batch']} pairs, {tr['steps']} steps of SGD (momentum {tr['momentum']}, "
            f"lr {', '.join(f'{k} {v}' for k, v in tr['lr'].items())}) for every method (Sketched-SGD and top-k apply the momentum "
            "inside the error accumulation with momentum stopping, as the authors' code, and the optimizer none on the compressed "
            f"tensor); the paper trained {w['paper_iterations']:,} iterations. Seeds: " + ", ".join(str(x) for x in tr.get("seeds", [ctx.preset.get("seed", 0)])))
        parts.header_lines.append(
            f"k = the paper's proportion of the compressed parameters d_c ({_paper_k(w)}): "
            + ", ".join(f"{MODEL_NAMES[m]} k = {fmt_num(measured.get(f't1.{m}.k'))}" for m in tr["models"] if measured.get(f"t1.{m}.k"))
            + f"; Sketched-SGD sized by the paper's rule (§5.3) on the compressed parameters: 2d / (|S| + Pk + k) with |S| ~ Pk "
              f"and {w['rows']} rows, P derived from the budget (the rule's geometry at the paper's d and k: {GEOMETRY}; the source prints no P "
              "or column count); "
            + ("1-D parameters (biases, norm gains) sent uncompressed for top-k and Sketched-SGD in the translation runs (§5.1; "
               "the image runs compress every parameter)" if w.get("uncompressed_biases", True) else "every parameter compressed"))
        from gcbench.data.text import bleu_signature

        parts.header_lines.append("BLEU: sacrebleu corpus BLEU of greedy translations of the held-out split, lowercased word tokens "
                                  f"(gcbench.data.text.corpus_bleu; `{bleu_signature()}`); not comparable with the paper's WMT14 "
                                  "newstest BLEU")
    sc = results.get("cifar-scaling")
    im_data = (sc or {}).get("data") or next((r.get("data") for n, r in results.items() if n.startswith("cifar-train-")), None)
    if im_data:
        fb = f" — **fallback**: {im_data['fallback_from']}" if im_data.get("fallback_from") else ""
        parts.header_lines.append(
            f"Images: {im_data['description']}; {im_data['train_used']:,} train / {im_data['test_used']:,} test images used at "
            f"{im_data['side_used']}x{im_data['side_used']}{fb}. The paper used CIFAR-10 (pass dataset='cifar10:PATH' to use it)")
    parts.header_lines.append("Bytes: real payloads counted by gcbench's TrafficLog (both Sketched-SGD rounds); no time is modelled")
    # -- Table 1 measured ----------------------------------------------------------------------------
    if t1:
        seeds = _t1_seeds(results)
        rows, srows = [], []
        for model in tr["models"]:
            for m in tr["methods"][model]:
                r = t1.get((model, m))
                if r is None:
                    continue
                base = f"t1.{model}.{m}"
                pv = next((v for v in spec.values if v.id == base), None)
                cal = r.get("calibration") or {}
                dv = measured.get(f"{base}.diverged") or 0
                lo, hi = measured.get(f"{base}.test_loss_min"), measured.get(f"{base}.test_loss_max")
                spread = f"{fmt_num(lo)}–{fmt_num(hi)}" if lo is not None else "–"
                blo, bhi = measured.get(f"{base}.bleu_lo"), measured.get(f"{base}.bleu_hi")
                ci = f" [{fmt_num(blo)}, {fmt_num(bhi)}]" if blo is not None else ""
                geom = f"P = {cal['P']}, {cal['columns']:,} x {cal['rows']} = {cal['columns'] / cal['k']:.2f} k" if cal else "–"
                rows.append([MODEL_NAMES[model], LABELS[m], fmt_num(measured.get(f"{base}.seeds")),
                             fmt_num(measured.get(f"{base}.test_loss_mean")), spread, fmt_num(measured.get(f"{base}.test_loss_rel")),
                             fmt_num(measured.get(f"{base}.bleu_mean")), fmt_num(r["bleu"]) + ci, pv.display() if pv else "–",
                             f"{int(dv)}", fmt_num(measured.get(f"{base}.acc_norm_growth")),
                             fmt_num(r["traffic"]["last_step_bytes_per_worker"]),
                             fmt_num(measured.get(f"{base}.compression")), fmt_num(measured.get(f"{base}.overall_compression")),
                             fmt_num(measured.get(f"{base}.allreduce_compression")),
                             fmt_num(measured.get(f"{base}.upload_compression")), geom,
                             fmt_num(measured.get(f"{base}.topk_recovery")),
                             fmt_num(r.get("k")), fmt_num(r.get("dense_parameters")) if r.get("dense_parameters") else "0"])
                for x in seeds.get((model, m), []):
                    bleu = fmt_num(x["bleu"]) + (f" (diverged at step {x['diverged_at']})" if x.get("diverged_at") is not None else "")
                    srows.append([MODEL_NAMES[model], LABELS[m], x["cell_seed"] if "cell_seed" in x else "–", fmt_num(x["test_loss"]),
                                  bleu, fmt_num(x["final_loss"]), fmt_num(x["train_s"]), fmt_num(x.get("measure_s"))])
        parts.sections.append(("Measured: Table 1 (translation, 4 workers)", md_table(
            ["model", "method", "seeds", "held-out loss (mean)", "seed range", "/ vanilla", "BLEU (mean)", "BLEU first seed [95% CI]",
             "BLEU (paper)", "diverged", "‖v‖ growth", "bytes / worker / step", "sketch's own ratio (not the paper's count)",
             "paper's count, whole model (download modelled)", "all_reduce, measured", "upload only", "geometry", "top-k mass recovered", "k",
             "uncompressed 1-D"], rows)
            + "\n\nTop-k (true) all_reduces the full gradients (it compresses nothing here: the paper uses it as the "
              "quality reference Sketched-SGD approximates) and applies the top-k of the accumulated sum, momentum inside the "
              "accumulation and zeroing at the applied coordinates (the authors' code). "
              "Paper's count, whole model (download modelled) = 2 x vanilla's measured bytes / (Sketched-SGD's measured bytes, "
              "the sketch, the candidate values and the uncompressed 1-D parameters, + a modelled download of k fp32 values and "
              "the 1-D parameters), as §5.3 counts it (total bytes of both rounds): the download of the k applied values is the "
              "paper's server's, which this implementation never sends; sketch's own ratio = the same count on the compressed "
              "parameters only, the 1-D parameters left out of both sides (what the sketch is sized for; not the paper's count); "
              "all_reduce, measured = vanilla's measured bytes per "
              "worker over Sketched-SGD's, both rounds and the 1-D parameters, as this implementation's all_reduce sends them "
              "(each worker receives the summed sketch and the P k candidate values, not the paper's k values); upload only = vanilla's "
              "bytes / Sketched-SGD's upload bytes, compressed parameters. Seed range: lowest and highest held-out loss over the "
              "seeds. BLEU [95% CI]: percentile bootstrap over the held-out pairs (sacrebleu corpus BLEU of each resample). "
              "Top-k mass recovered: per step, the squared mass of the summed accumulation at the k applied coordinates over its "
              "mass at the true top-k (1 = the sketch found the true top-k), mean over the second half of training and every "
              "seed. ‖v‖ growth: the largest accumulator norm ‖Σv_i‖/W in the last "
              "quarter of training over the largest in the second quarter (first seed). "
              "Held-out loss: teacher-forced cross entropy per target token on the whole held-out split. A run whose "
              "gradients became NaN/Inf stops before that step's update and is scored as it stands (\"diverged at step N\")."))
        parts.sections.append(("Measured: every seed", md_table(
            ["model", "method", "seed", "held-out loss", "BLEU", "train loss (last 20 steps)", "train time (s)",
             "sketch measurements (s)"], srows)
            + "\n\nTrain time: the training steps (every worker's gradient, the method's aggregation, the optimizer), "
              "evaluations left out. Sketch measurements: what a Sketched-SGD run measures beside training and leaves out of "
              "its train time (the top-k mass recovered, the second sketch the guards read, the hash statistics); — where a "
              "run takes none (the other methods) or its cell recorded no separate time for them (then its train time "
              "includes them)."))
        ex = []
        for model in tr["models"]:
            for m in ("vanilla", "sketched40"):
                r = t1.get((model, m))
                if r:
                    for e in r["examples"][:3]:
                        ex.append([MODEL_NAMES[model], LABELS[m], e["source"], e["ours"], e["reference"]])
        if ex:
            parts.sections.append(("Example translations (held-out)", md_table(["model", "method", "source", "ours", "reference"], ex)))
    # -- CIFAR -------------------------------------------------------------------------------------
    if sc:
        by = {}
        for r in sc["rows"]:
            by.setdefault(r["workers"], {})[r["method"]] = r
        rows = []
        for W in sorted(by):
            lt, sk = by[W].get("local_topk"), by[W].get("sketched")
            rows.append([W, lt["local_batch"] if lt else sk["local_batch"],
                         fmt_num(lt["upload_compression"]) if lt else "–", fmt_num(lt["union_fraction"] * 100) + "%" if lt else "–",
                         fmt_num(lt["overall_compression"]) if lt else "–",
                         fmt_num(sk["upload_compression"]) if sk else "–",
                         fmt_num(sk["overall_compression"]) if sk else "–",
                         fmt_num(lt["accuracy"]) if lt else "–", fmt_num(sk["accuracy"]) if sk else "–"])
        im = wl.image_preset(ctx)
        cal = (sc.get("calibration") or {}).get("sketched") or {}
        parts.sections.append(("Measured: CIFAR-10 comparison (overall compression against workers)", (
            f"A small ResNet ({sc['parameters']:,} parameters) warmed up by {sc['warm']['steps']} vanilla steps (test accuracy "
            f"{fmt_num(sc['warm']['accuracy'])}), then {im['sweep_steps']} steps per worker count from that model with a global batch "
            f"of {im['global_batch']} split over the W workers; bytes averaged over the last {im['measure_steps']} steps. "
            f"Local top-k: k = {w['images']['local_topk_fraction']:.1%} of the parameters per worker (an index and a value each: "
            "the upload of Sketched-SGD 20x, whose measured upload-only ratio is in the table beside local top-k's), "
            f"error feedback, parameter server; the server's reply is the smaller real payload of the union (topk, exact) or dense fp32. "
            f"Sketched-SGD: k = {w['images']['sketched_fraction']:.0%}, sketch {cal.get('columns', '?')} x {cal.get('rows', '?')}, "
            f"P = {cal.get('P', '?')} (sized by the paper's rule for {fmt_num(cal.get('target'))}x, its count; upload only "
            f"{fmt_num(cal.get('upload_compression'))}x), both rounds all_reduced. Overall compression = vanilla's (up + down) / "
            "the method's (up + down), per worker and step. (The simulated parameter server's own pull record assumes a dense "
            "fp32 reply; the exact sparse union replaces it here whenever it is smaller.)\n\n")
            + md_table(["workers", "local batch", "local top-k upload x", "union of top-k (% of d)", "local top-k overall x",
                        "Sketched-SGD upload x", "Sketched-SGD overall x", "accuracy after sweep (local top-k)", "(Sketched-SGD)"], rows)))
    trains = {m: results.get(f"cifar-train-{m}") for m in ("vanilla", "local_topk", "true_topk", "sketched")}
    if any(trains.values()):
        rows = [[LABELS[m], r["workers"], len(r["per_step"]), fmt_num(r["accuracy"]), fmt_num(r.get("overall_compression")),
                 fmt_num(r["train_s"])] for m, r in trains.items() if r]
        parts.sections.append(("Measured: image accuracy runs (from scratch)", md_table(
            ["method", "workers", "steps", "test accuracy", "overall compression x", "train time (s)"], rows)))
    dd = results.get("ddp-check")
    if dd:
        rows = [["real DDP (gloo, 2 processes)", fmt_num(dd["real"]["message_bytes"]), str(dd["real"]["bytes_by_kind"]),
                 dd["real"]["params_digest"][0][:16], fmt_num(dd["real"]["accuracy"])],
                ["simulated cluster (1 process)", fmt_num(dd["simulated"]["message_bytes"]), str(dd["simulated"]["bytes_by_kind"]),
                 dd["simulated"]["params_digest"][:16], fmt_num(dd["simulated"]["accuracy"])]]
        parts.sections.append(("Real DDP check", (
            f"Sketched-SGD 20x on the images, {dd['workers']} ranks, {dd['steps']} steps, through gcbench's DDP comm hook "
            f"(round 1: sketch tables all_reduced; round 2: the candidates' exact values all_reduced). Final parameters "
            f"{'**identical**' if dd['digests_equal'] else '**differ**'} (SHA-256 of the parameters) on every rank and in the "
            f"simulation; real run wall time {fmt_num(dd['real']['wall_s'])} s (process start included).\n\n")
            + md_table(["run", "bytes sent (all ranks)", "by kind", "parameters digest", "test accuracy"], rows)))
    parts.sections.append(("What reproduces and what does not", discussion(wl, ctx, results, measured, labels)))
    # -- plots --------------------------------------------------------------------------------------
    plots_dir = ctx.out_dir / "plots"
    p = plot_bleu(t1, plots_dir / "table1_bleu_curves.png")
    if p:
        parts.plots.append(("Table 1 / Fig. 1 analogue: training loss, held-out loss and held-out BLEU against steps, 4 workers", "plots/" + p.name))
    p = plot_accumulator(t1, trains, plots_dir / "accumulator_norm.png")
    if p:
        parts.plots.append(("Error accumulator norm ‖Σv_i‖/W per step, every error-accumulating method (first seed): "
                            "bounded = healthy, growing = on the way to divergence", "plots/" + p.name))
    p = plot_recovery(_t1_seeds(results), plots_dir / "topk_recovery.png")
    if p:
        parts.plots.append(("Share of the true top-k's squared mass that Sketched-SGD's update applied, per step (every seed): "
                            "1 where the sketch's P k candidates held the true top-k of the workers' summed accumulation; "
                            "dashed: a sketch of the same size with hashes the run does not use, on the same accumulations "
                            "(first seed; measured only). Steps on a log scale",
                            "plots/" + p.name))
    p = plot_scaling(sc, plots_dir / "cifar_compression_vs_workers.png")
    if p:
        parts.plots.append(("CIFAR-10 comparison analogue: overall compression (upload + download) against workers; dashed: 2x", "plots/" + p.name))
    p = plot_image_curves(trains, plots_dir / "images_accuracy.png")
    if p:
        parts.plots.append(("Image accuracy runs from scratch (4 workers)", "plots/" + p.name))
    parts.extra["translation_data"] = tr_data
    parts.extra["image_data"] = im_data
    tr_seeds = [int(x) for x in tr.get("seeds", [ctx.preset.get("seed", 0)])]
    # the held-out split follows the first seed; each seed's cell draws its own initial weights and batches
    parts.extra["seeds"] = {"translation_split": tr_seeds[0], "translation_init_batches": tr_seeds,
                            "images": int(ctx.preset.get("seed", 0)), "sketch_hashes": int(w["sketch_seed"]),
                            "note": "every random choice is seeded; the runs are deterministic on one machine"}
    parts.extra["calibrations"] = {n: r.get("calibration") for n, r in results.items() if r.get("calibration")}
    return parts


def discussion(wl: SketchedSGDSettings, ctx: RunContext, results: Mapping[str, Any], measured: Mapping[str, Any],
               labels: Mapping[str, str]) -> str:
    """The honest account, with this run's numbers."""
    claims = {r.claim.id: r for r in evaluate_claims(wl.spec, measured, ctx.scale, tables=ctx.tables, labels=labels)}
    out, w = [], wl.spec.workload
    held = [c for c, r in claims.items() if r.status in (REPRODUCED, WITHIN) and r.claim.is_result]
    guards = [c for c, r in claims.items() if r.status in (REPRODUCED, WITHIN) and r.claim.is_guard]
    checks = [c for c, r in claims.items()
              if r.status in (REPRODUCED, WITHIN) and not r.claim.is_result and not r.claim.is_guard]
    differs = [c for c, r in claims.items() if r.status == DIFFERS]
    out_of_scale = [c for c, r in claims.items() if r.status == NOT_AT_SCALE]
    if held:
        out.append("Holds in this run: " + ", ".join(f"`{c}`" for c in held) + ".")
    if differs:
        out.append("Differs in this run: " + ", ".join(f"`{c}`" for c in differs) + ".")
    if out_of_scale:
        out.append("Not at this scale (the reason is in the claims table): " + ", ".join(f"`{c}`" for c in out_of_scale) + ".")
    if guards:
        out.append("Guards of the method that hold: " + ", ".join(f"`{c}`" for c in guards) + ".")
    if checks:
        out.append("Consistency checks that pass (true by construction): " + ", ".join(f"`{c}`" for c in checks) + ".")
    t1 = _t1(results)
    tr = wl.translation_preset(ctx)
    van = t1.get(("transformer", "vanilla"))
    if van:
        # the count the claims' flags read (steps x k / d_c, on the compressed parameters)
        per_coord = measured.get("t1.transformer.updates_per_coordinate")
        paper_per_coord = w["paper_iterations"] * w["paper_k"] / w["paper_parameters"]["transformer"]
        bands = {c.tolerance for c in wl.spec.claims if c.id.startswith("heldout-parity-")}
        band = f"{100 * bands.pop():g}% " if len(bands) == 1 else ""
        losses = "; ".join(
            f"{MODEL_NAMES[model]}: " + ", ".join(f"{LABELS[m]} {fmt_num(t1[(model, m)]['test_loss'])}"
                                                 for m in tr["methods"][model] if (model, m) in t1)
            for model in tr["models"])
        seeds = _t1_seeds(results)
        best = max((x["bleu"] for runs in seeds.values() for x in runs), default=0.0)  # every seed's run
        parity = []
        for model in tr["models"]:
            for m in tr["methods"][model]:
                rel = measured.get(f"t1.{model}.{m}.test_loss_rel")
                if m != "vanilla" and rel is not None:
                    parity.append(f"{MODEL_NAMES[model]} {LABELS[m]} {fmt_num(rel)}x vanilla's held-out loss, BLEU "
                                  f"{fmt_num(measured.get(f't1.{model}.{m}.bleu_mean'))} vs "
                                  f"{fmt_num(measured.get(f't1.{model}.vanilla.bleu_mean'))} "
                                  f"({_count(len(seeds.get((model, m), [])), 'seed')})")
        diverged = [f"{MODEL_NAMES[mo]} {LABELS[m]} ({int(measured.get(f't1.{mo}.{m}.diverged') or 0)} of "
                    f"{len(seeds.get((mo, m), []))})" for (mo, m) in seeds if measured.get(f"t1.{mo}.{m}.diverged")]
        out.append(
            f"**Held-out loss and BLEU against vanilla.** The `{ctx.scale}` run trains {tr['steps']} steps of tiny models "
            f"(no run of any method or seed gets past {fmt_num(best)} BLEU); the paper trained {w['paper_iterations']:,} iterations of "
            f"{_paper_sizes(w)}-parameter models on WMT14. "
            "The headline is therefore the held-out cross entropy relative to vanilla and to true top-k (mean over seeds, seed "
            "range in the table; claims `heldout-parity-*`), with BLEU and its bootstrap interval reported beside it: " + ("; ".join(parity) or "—") + f". Held-out loss of the first "
            f"seed: {losses}. "
            + ("This run has one seed: each held-out verdict rests on a single run, with no estimate of the spread between "
               f"seeds, so a gap near the claims' {band}band could fall on its other side with another seed. "
               if seeds and max(len(x) for x in seeds.values()) == 1 else "")
            + ("Diverged (a non-finite gradient stopped the run): " + ", ".join(diverged) + ". " if diverged else
               "No run diverged. ")
            + f"With k = {w['paper_k']:,} / {_paper_sizes(w, ('transformer',))} of the parameters per step the paper's "
            "transformer runs update each coordinate about "
            f"{paper_per_coord:.0f} times; ours about {fmt_num(per_coord)} times."
            + "".join(f" {MODEL_NAMES[model]}: the training cross entropy over the last {100 * SETTLED_SHARE:.0f}% of the steps (the seeds' mean, against the "
                      f"{100 * SETTLED_SHARE:.0f}% before): "
                      + ", ".join(f"{LABELS[m]} {'falls' if f >= 0 else 'rises'} {100 * abs(f):.1f}%" for m, f in falls)
                      + ". A parity claim tests the final metric only where the training cross entropy of both methods it "
                      "compares falls by at most its tolerance."
                      for model in tr["models"]
                      if (falls := [(m, fall) for m in tr["methods"][model]
                                    if (fall := measured.get(f"t1.{model}.{m}.loss_fall")) is not None]))
            + "".join(f" {MODEL_NAMES[model]}: each compared method's held-out loss over its reference's (seed means) halfway "
                      "through the run and at its end, information that no claim reads (the parity flags read the training "
                      "cross entropy, as set before the runs): " + "; ".join(gaps) + "."
                      for model in tr["models"] if (gaps := heldout_gaps(measured, model)))
        )
    budget = budget_shares(t1)
    if budget:
        out.append(
            "**The sketch's geometry.** The rule (§5.3) sizes P and the sketch from the compressed parameters' budget with k at "
            f"the paper's proportion, which gives the rule's geometry at the paper's d and k ({GEOMETRY}; the source prints no P "
            "or column count): "
            + "; ".join(budget) + ". The uncompressed 1-D parameters (§5.1) travel both ways in full beside the sketch, so the "
            f"ratio with them is below the sketch's own; in the paper's {_paper_sizes(w)}-parameter models their share is "
            "negligible. This sizing was chosen after runs, not before them: the rule on the whole model (the 1-D parameters "
            "inside the budget) diverged at 40x first, and the verdicts of the claims that train Sketched-SGD rest on the "
            "choice (the spec's `[workload]` comment gives the account)."
        )
    def shares(quantity: str) -> str:
        """``Sketched 20x v, Sketched 40x v`` for the transformer's measured ``quantity`` ("" if neither)."""
        return ", ".join(f"{LABELS[m]} {fmt_num(v)}" for m in ("sketched20", "sketched40")
                         if (v := measured.get(f"t1.transformer.{m}.{quantity}")) is not None)

    rec, first, other = shares("topk_recovery"), shares("topk_recovery_first"), shares("topk_recovery_other_hash")
    if rec:
        out.append(
            "**How close the update is to true top-k.** Per step, the share of the true top-k's squared mass (of the workers' "
            "summed accumulation) that Sketched-SGD's k applied coordinates hold: "
            + rec
            + " (second half of training, every seed)"
            + ("; at the first step, where the accumulation is one step's summed gradient: " + first if first else "")
            + ". The round-2 values are exact, so what is lost is coordinates whose sketch estimates did not rank among "
            "the P k candidates. A Count Sketch's estimate of a coordinate errs by about the norm of the other coordinates "
            "over the square root of its columns, and the error accumulation of the coordinates not yet applied grows that "
            "norm (a coordinate is applied about once per d_c / k steps); the plots show the share per step beside the "
            "accumulator's norm."
            + (" The run keeps one set of hashes for all its steps (as the authors' code, whose `SketchedSum` builds its "
               "sketches once and zeroes them every step), so the coordinates it leaves in the accumulation are those its "
               "own hashes underestimate. A sketch of the same size whose hashes the run does not use (hash seed + 1), given "
               "the same accumulations, would have applied "
               + other
               + " of the true top-k's mass (second half of training, every seed; measured only, it does not train): "
               "where that is well above the run's own share, the accumulation has grown where the run's hashes do not "
               "look, a property of a fixed sketch fed its own residue rather than of the sketch's size."
               if other else "")
        )
    errs = [f"{MODEL_NAMES[mo]} {LABELS[m]} {fmt_num(v)}, and {fmt_num(big)} of its {int(n):,} large coordinates ({fmt_num(r)} of the bound)"
            for mo in ("transformer", "lstm") for m in ("sketched20", "sketched40")
            if (v := measured.get(f"t1.{mo}.{m}.sketch_error_share")) is not None
            and (big := measured.get(f"t1.{mo}.{m}.sketch_large_error_share")) is not None
            and (n := measured.get(f"t1.{mo}.{m}.sketch_large_coordinates")) is not None
            and (r := measured.get(f"t1.{mo}.{m}.sketch_error_ratio")) is not None]
    if errs:
        out.append(
            "**The sketch's estimates.** At every step a copy of the run's Count Sketch (hashes the run does not use) "
            "estimates the workers' summed accumulation x; the share of coordinates it estimates more than 2‖x‖/√c away "
            "(c the configured columns), mean over the steps and seeds, and the same share among the coordinates larger "
            "than 2‖x‖/√c (pooled over the steps and seeds; an estimate of nothing misses every one of them): "
            + "; ".join(errs) + ". The Count Sketch's definition bounds either share by P(Binomial(r, 1/4) ≥ ⌈r/2⌉) for "
            "any vector (Chebyshev's inequality per row, the median of r rows; per coordinate, so over any set of "
            "coordinates chosen from x), the guard `sketch-estimates-within-bound`, which reads the larger share."
        )
    devs = [f"{MODEL_NAMES[mo]} {LABELS[m]} {fmt_num(v)}" for mo in ("transformer", "lstm") for m in ("sketched20", "sketched40")
            if (v := measured.get(f"t1.{mo}.{m}.sketch_hash_deviation")) is not None]
    if devs:
        rows = int(wl.spec.workload["rows"])
        out.append(
            "**The sketch's hashes.** That bound assumes independent rows and signs that vary, which the share alone "
            "cannot see broken (an accumulation's coordinates take both signs). The hashes of each run's sketch and of "
            "the measuring one are checked once, on the hash tables they accumulate with (every seed's run has the same "
            "hashes, set by the method's sketch seed): every row's sign sum and, for every pair of rows, the coordinates "
            "whose buckets agree and those whose signs agree, each in standard deviations from what independent "
            "pairwise-independent hashes give; the largest: " + "; ".join(devs) + ". Rows sharing one hash, or signs "
            f"all equal, lie √d or more away; the guard `sketch-hashes-independent` allows {fmt_num(HASH_WIDTHS)} "
            f"(a working family puts any of one sketch's statistics beyond it with probability at most "
            f"{fmt_num(100 * hash_false_alarm(rows))}% for {rows} rows, by Chebyshev's inequality)."
        )
    selection = selection_text(measured, labels)
    if selection:
        out.append(selection)
    comp = [measured.get(f"t1.{m}.{s}.compression") for m in ("transformer", "lstm") for s in ("sketched20", "sketched40")]
    if any(c is not None for c in comp):
        out.append(
            "**Compression is set, not found.** P and the sketch are sized from the target by the paper's count "
            "(2d / (|S| + Pk + k), §5.3) on the compressed parameters, so the sketch's own ratio checks the sizing and the "
            "wire format against the rule (consistency claims `sketch-ratio-*`), not a result of training. The paper counts "
            "the whole model's bytes, both rounds (information, compared by no claim: the paper-values rows "
            "`t1.compression.*`): the uncompressed 1-D parameters, sent in full both ways, take "
            + (", ".join(f"{MODEL_NAMES[mo]} {LABELS[s]} {100 * b:.0f}%" for mo in ("transformer", "lstm")
                         for s in ("sketched20", "sketched40") if (b := measured.get(f"t1.{mo}.{s}.dense_budget_share")) is not None)
               or "—")
            + " of the target's budget 2D/target (`t1.<model>.<method>.dense_budget_share`), which holds the whole model's "
            f"ratio below the target whatever the sketch does; at the paper's {_paper_sizes(w)} parameters the share is "
            "negligible. The paper's count includes the download of the "
            "k applied values from a server; this implementation all_reduces both rounds, so that download is modelled (k fp32 "
            "values, never sent), and each worker really receives the summed sketch and the P k candidate values. The ratio "
            "of the bytes really sent (vanilla's measured bytes per worker over Sketched-SGD's, both rounds, 1-D parameters "
            "included; measured, not compared with the paper): "
            + (", ".join(f"{MODEL_NAMES[mo]} {LABELS[s]} {fmt_num(v)}x against {fmt_num(c)}x by the paper's count over the "
                         f"whole model" for mo in ("transformer", "lstm") for s in ("sketched20", "sketched40")
                         if (v := measured.get(f"t1.{mo}.{s}.allreduce_compression")) is not None
                         and (c := measured.get(f"t1.{mo}.{s}.overall_compression")) is not None) or "—")
            + ". Upload only (not the paper's count) is about half of the sketch's own ratio: sized for 20x, a sketch sends "
            "about 10x less than vanilla upload only."
        )
    sc = results.get("cifar-scaling")
    if sc:
        lt = sorted((r for r in sc["rows"] if r["method"] == "local_topk"), key=lambda r: r["workers"])
        sk = sorted((r for r in sc["rows"] if r["method"] == "sketched"), key=lambda r: r["workers"])
        if lt and sk:
            out.append(
                f"**Local top-k against workers.** Every worker uploads {fmt_num(lt[0]['upload_compression'])}x less than vanilla, "
                f"but the server's sum holds the union of the workers' top-k: {lt[0]['union_fraction']:.1%} of the coordinates "
                f"with {lt[0]['workers']} workers, {lt[-1]['union_fraction']:.1%} with {lt[-1]['workers']}. The reply grows with it, "
                f"and the overall compression falls from {fmt_num(lt[0]['overall_compression'])}x to "
                f"{fmt_num(lt[-1]['overall_compression'])}x; once the union covers half the coordinates the sparse reply (index + value) "
                "costs as much as a dense one, and with a dense reply up + down is more than half of vanilla's: at most 2x. "
                f"Sketched-SGD's messages do not depend on W: {fmt_num(sk[0]['overall_compression'])}x with {sk[0]['workers']} "
                f"workers, {fmt_num(sk[-1]['overall_compression'])}x with {sk[-1]['workers']}. The sweep uses a fixed global batch "
                "(more workers, smaller local batches, noisier and less overlapping local top-k); no sweep at a fixed local batch "
                "was run (there the union is expected, not measured, to grow more slowly)."
            )
    tt, sk_run, lt_run = (results.get(f"cifar-train-{m}") for m in ("true_topk", "sketched", "local_topk"))
    if tt and sk_run:
        cal = sk_run.get("calibration") or {}
        out.append(
            f"**Image accuracy.** After {len(sk_run['per_step'])} steps with {sk_run['workers']} workers: vanilla "
            f"{fmt_num((results.get('cifar-train-vanilla') or {}).get('accuracy'))}, local top-k {fmt_num((lt_run or {}).get('accuracy'))}, "
            f"true top-k with Sketched-SGD's k {fmt_num(tt['accuracy'])}, Sketched-SGD 20x {fmt_num(sk_run['accuracy'])}. "
            f"The gap between the last two is the sketch: at 20x this {sk_run['parameters']:,}-parameter model's sketch has "
            f"{cal.get('columns', '?')} columns for k = {cal.get('k', '?')} coordinates to find: fewer buckets than heavy "
            "coordinates, so collisions decide many of the candidates and many applied coordinates are not the true top-k. "
            "Whether the paper's runs avoided this depends on their k and sketch shape, which the slides do not give. Local "
            f"top-k applies the union of the workers' top-k (more coordinates per step) at "
            f"{fmt_num((lt_run or {}).get('overall_compression'))}x overall compression against Sketched-SGD's "
            f"{fmt_num(sk_run.get('overall_compression'))}x. With a fixed global batch, Sketched-SGD's "
            "update depends only on the sum of the workers' accumulators (the sketch is linear), so in the sweep its accuracy "
            "is the same for every W."
        )
    dd = results.get("ddp-check")
    if dd:
        out.append(
            f"**Real DDP.** Sketched-SGD ran in {dd['workers']} gloo processes through the DDP comm hook and sent "
            f"{fmt_num(dd['real']['message_bytes'])} bytes, the simulated cluster counted {fmt_num(dd['simulated']['message_bytes'])}; "
            f"final parameters {'identical' if dd['digests_equal'] else 'DIFFERENT'}. Larger W runs in the simulated cluster "
            "(the same aggregation code in one process)."
        )
    return "\n\n".join(out)


def _paper_sizes(w: Mapping[str, Any], models: Sequence[str] = ("lstm", "transformer")) -> str:
    """The paper's model sizes from the spec's ``[workload]``: ``"70-90M"``, ``"90M"``."""
    sizes = sorted({fmt_num(w["paper_parameters"][m] / 1e6) for m in models}, key=float)
    return "-".join(sizes) + "M"


def _paper_k(w: Mapping[str, Any]) -> str:
    """``"100,000 of 90M / 70M: k = d_c // 900 / 700"``, from the spec's ``[workload]``."""
    ms = ("transformer", "lstm")
    return (f"{w['paper_k']:,} of " + " / ".join(f"{fmt_num(w['paper_parameters'][m] / 1e6)}M" for m in ms)
            + ": k = d_c // " + " / ".join(str(w["d_per_k"][m]) for m in ms))


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def heldout_gaps(measured: Mapping[str, float | None], model: str) -> list[str]:
    """``"<a> / <b> <half> at step <n> -> <end> at the end"`` for every pair of ``model`` whose held-out path
    was derived (:func:`.parity.heldout_paths`), in the order derived."""
    out = []
    prefix, suffix = f"t1.{model}.", ".heldout_rel_half"
    for key, half in measured.items():
        if key.startswith(prefix) and key.endswith(suffix) and half is not None:
            pair = key[: -len(suffix)]
            a, b = pair[len(prefix):].split("_vs_")
            out.append(f"{LABELS.get(a, a)} / {LABELS.get(b, b)} {fmt_num(half)} at step "
                       f"{fmt_num(measured.get(pair + '.heldout_half_step'))} → {fmt_num(measured.get(pair + '.heldout_rel_end'))} at the end")
    return out


# -- plots -------------------------------------------------------------------------------------------


def plot_bleu(t1: Mapping[tuple[str, str], Mapping[str, Any]], path: Any) -> Any:
    """Loss (top) and BLEU (bottom) against steps, one column per model."""
    models = [m for m in ("transformer", "lstm") if any(k[0] == m for k in t1)]
    if not models:
        return None
    fig, axes = new_figure(3, len(models), figsize=(5 * len(models), 8.8), squeeze=False)
    for j, model in enumerate(models):
        pair_counts: set[int] = set()  # the BLEU evaluations' pair counts, every method of the model
        for (mm, meth), r in sorted(t1.items()):
            if mm != model:
                continue
            losses = r["losses"]
            win = max(1, len(losses) // 30)
            smooth = [sum(losses[max(0, i - win + 1): i + 1]) / len(losses[max(0, i - win + 1): i + 1]) for i in range(len(losses))]
            axes[0][j].plot(range(1, len(losses) + 1), smooth, color=COLORS[meth], label=LABELS[meth])
            steps = [c["step"] for c in r["curve"]]
            axes[1][j].plot(steps, [unsanitize_float(c["test_loss"]) for c in r["curve"]], marker="o", color=COLORS[meth], label=LABELS[meth])
            # BLEU of different pair counts is not one curve (corpus BLEU of short sentences moves with the
            # number of pairs): the evaluations on the first eval_pairs are joined, the final one on the whole
            # held-out split stands apart, hollow
            by_pairs: dict[Any, list[Mapping[str, Any]]] = {}
            for c in r["curve"]:
                by_pairs.setdefault(c.get("bleu_pairs"), []).append(c)
            pair_counts.update(n for n in by_pairs if n)
            for g, pts in enumerate(sorted(by_pairs.values(), key=len, reverse=True)):
                axes[2][j].plot([c["step"] for c in pts], [c["bleu"] for c in pts], marker="o" if g == 0 else "D",
                                color=COLORS[meth], markerfacecolor=None if g == 0 else "none",
                                label=LABELS[meth] if g == 0 else None)
        axes[0][j].set_title(MODEL_NAMES[model])
        axes[0][j].set_ylabel("training loss (smoothed)")
        axes[1][j].set_ylabel("held-out loss")
        axes[2][j].set_ylabel("held-out BLEU" + (f" ({' / '.join(str(n) for n in sorted(pair_counts))} pairs;\nhollow: the final, whole split)"
                                                 if len(pair_counts) > 1 else ""))
        axes[2][j].set_xlabel("step")
        for i in range(3):
            axes[i][j].grid(alpha=0.3)
            axes[i][j].legend(fontsize=8)
    return savefig(fig, path)


def plot_accumulator(t1: Mapping[tuple[str, str], Mapping[str, Any]], trains: Mapping[str, Any], path: Any) -> Any:
    """``||sum_i v_i|| / W`` against steps: one panel per translation model, one for the images."""
    panels: list[tuple[str, dict[str, list[float]]]] = []
    for model in ("transformer", "lstm"):
        curves = {meth: list(r.get("accumulator_norms") or []) for (mm, meth), r in sorted(t1.items()) if mm == model}
        curves = {k: v for k, v in curves.items() if v}
        if curves:
            panels.append((MODEL_NAMES[model], curves))
    im = {m: [x["accumulator_norm"] for x in r["per_step"] if "accumulator_norm" in x] for m, r in trains.items() if r}
    im = {k: v for k, v in im.items() if v}
    if im:
        panels.append(("images", im))
    if not panels:
        return None
    fig, axes = _step_panels(len(panels))
    for ax, (title, curves) in zip(axes, panels):
        for meth, ys in curves.items():
            ax.plot(range(1, len(ys) + 1), ys, color=COLORS.get(meth), label=LABELS.get(meth, meth), lw=0.9)
        ax.set_yscale("log")
        _label_step_panel(ax, title, "‖Σ v_i‖ / W", grid_which="both")
    return savefig(fig, path)


def plot_recovery(seeds: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]], path: Any) -> Any:
    """Sketched-SGD's per-step top-k mass recovery against steps: one panel per translation model,
    every seed of each ratio (the first seed solid)."""
    runs_of = {key: [list(r["topk_recovery"]) for r in runs if r.get("topk_recovery")] for key, runs in seeds.items()}
    other_of = {key: list(runs[0].get("topk_recovery_other_hash") or []) for key, runs in seeds.items() if runs}
    panels = [(model, {meth: runs for (mm, meth), runs in sorted(runs_of.items()) if mm == model and runs})
              for model in ("transformer", "lstm")]
    panels = [(model, curves) for model, curves in panels if curves]
    if not panels:
        return None
    fig, axes = _step_panels(len(panels))
    for ax, (model, curves) in zip(axes, panels):
        for meth, runs in curves.items():
            for g, ys in enumerate(runs):
                ax.plot(range(1, len(ys) + 1), ys, color=COLORS.get(meth), lw=0.9, ls="-" if g == 0 else ":",
                        label=LABELS.get(meth, meth) if g == 0 else None)
            ys = other_of.get((model, meth)) or []
            if ys:
                ax.plot(range(1, len(ys) + 1), ys, color=COLORS.get(meth), lw=0.9, ls="--", alpha=0.6,
                        label=f"{LABELS.get(meth, meth)}, other hashes")
        ax.set_xscale("log")  # the share falls within the first tens of steps
        ax.set_ylim(0, 1.05)
        _label_step_panel(ax, MODEL_NAMES[model], "top-k mass recovered")
    return savefig(fig, path)


def _step_panels(count: int) -> tuple[Any, list[Any]]:
    """A figure of ``count`` panels side by side (one per model, or the images), each against steps."""
    fig, axes = new_figure(1, count, figsize=(5 * count, 3.6), squeeze=False)
    return fig, list(axes[0])


def _label_step_panel(ax: Any, title: str, ylabel: str, grid_which: str = "major") -> None:
    """Title, the step axis, ``ylabel``, a light grid and the legend of one of :func:`_step_panels`'s panels."""
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which=grid_which)
    ax.legend(fontsize=8)


def plot_scaling(sc: Mapping[str, Any] | None, path: Any) -> Any:
    """Overall compression (left) and union of the local top-k (right) against workers."""
    if not sc:
        return None
    fig, ax = new_figure(1, 2, figsize=(10, 3.8))
    for m in ("local_topk", "sketched"):
        rows = sorted((r for r in sc["rows"] if r["method"] == m), key=lambda r: r["workers"])
        if not rows:
            continue
        ax[0].plot([r["workers"] for r in rows], [r["overall_compression"] for r in rows], marker="o", color=COLORS[m], label=LABELS[m])
        if m == "local_topk":
            ax[0].plot([r["workers"] for r in rows], [r["upload_compression"] for r in rows], ls=":", color=COLORS[m],
                       label="local top-k, upload only")
            ax[1].plot([r["workers"] for r in rows], [100 * r["union_fraction"] for r in rows], marker="o", color=COLORS[m])
    ax[0].axhline(2.0, ls="--", color="black", lw=0.8, label="2x")
    ax[0].set_xscale("log", base=2)
    ax[0].set_yscale("log")
    ax[0].set_xlabel("workers W")
    ax[0].set_ylabel("overall compression (x)")
    ax[0].legend(fontsize=8)
    ax[0].grid(alpha=0.3, which="both")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("workers W")
    ax[1].set_ylabel("union of the workers' top-k (% of d)")
    ax[1].grid(alpha=0.3)
    return savefig(fig, path)


def plot_image_curves(trains: Mapping[str, Any], path: Any) -> Any:
    """Test accuracy against steps for the image runs."""
    runs = {m: r for m, r in trains.items() if r}
    if not runs:
        return None
    fig, ax = new_figure(1, 1, figsize=(5, 3.6))
    for m, r in runs.items():
        ax.plot([c["step"] for c in r["curve"]], [c["accuracy"] for c in r["curve"]], marker="o", color=COLORS[m],
                label=f"{LABELS[m]} ({fmt_num(r.get('overall_compression'))}x)")
    ax.set_xlabel("step")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return savefig(fig, path)
