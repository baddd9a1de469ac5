"""The paper-specific parts of the Sketched-SGD report: measured tables, discussion, plots."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..framework.cells import unsanitize_float
from ..framework.claims import DIFFERS, NOT_RUN, evaluate_claims, fmt_num
from ..framework.report import md_table, new_figure, savefig
from ..framework.runner import ReportParts, RunContext
from .settings import SketchedSGDSettings

LABELS = {
    "vanilla": "Vanilla", "topk": "Top-k (true)", "sketched20": "Sketched 20x", "sketched40": "Sketched 40x",
    "local_topk": "Local top-k", "sketched": "Sketched-SGD 20x", "true_topk": "Top-k (true, Sketched-SGD's k)",
}
COLORS = {"vanilla": "tab:gray", "topk": "tab:blue", "sketched20": "tab:red", "sketched40": "tab:orange",
          "local_topk": "tab:blue", "sketched": "tab:red", "true_topk": "tab:green"}
MODEL_NAMES = {"transformer": "transformer", "lstm": "LSTM"}


def _t1(results: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(r["model"], r["method"]["name"]): r for n, r in results.items() if n.startswith("t1-")}


def build_report(wl: SketchedSGDSettings, ctx: RunContext, results: Mapping[str, Any], measured: Mapping[str, Any]) -> ReportParts:
    """Header lines, sections and plots (see :class:`~..framework.runner.ReportParts`)."""
    spec = wl.spec
    w = spec.workload
    parts = ReportParts()
    labels = {}
    for model in ("transformer", "lstm"):
        for m in ("vanilla", "topk", "sketched20", "sketched40"):
            labels[f"t1.{model}.{m}"] = f"{MODEL_NAMES[model]} {LABELS[m]}"
            labels[f"t1.{model}.{m}.compression"] = f"{MODEL_NAMES[model]} {LABELS[m]} bytes ratio"
    for p, lab in (("cifar.local_topk", "local top-k"), ("cifar.sketched", "Sketched-SGD")):
        for s, t in (("wmin", "smallest W"), ("wmid", "middle W"), ("wmax", "largest W")):
            labels[f"{p}.compression_{s}"] = f"{lab} at {t}"
    labels.update({"ddp.real_bytes": "real DDP bytes", "ddp.simulated_bytes": "simulated bytes"})
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
            f"lr {', '.join(f'{k} {v}' for k, v in tr['lr'].items())}) for every method (Sketched-SGD applies the momentum inside "
            "its workers' error accumulation with momentum stopping, as the authors' code, and the optimizer none); "
            "the paper trained 60,000 iterations")
        parts.header_lines.append(
            "k = the paper's fraction of the parameters (100,000 of 90M / 70M): "
            + ", ".join(f"{MODEL_NAMES[m]} k = {fmt_num(measured.get(f't1.{m}.k'))}" for m in tr["models"] if measured.get(f"t1.{m}.k"))
            + f"; Sketched-SGD: {w['rows']} rows, P = {w['P']} (round 2 fetches {w['P']}k exact values), columns calibrated from "
              "measured bytes (below)")
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
        rows = []
        for model in tr["models"]:
            for m in tr["methods"][model]:
                r = t1.get((model, m))
                if r is None:
                    continue
                pv = next((v for v in spec.values if v.id == f"t1.{model}.{m}"), None)
                cal = r.get("calibration") or {}
                van = t1.get((model, "vanilla"))
                ratio = (van["traffic"]["last_step_bytes_per_worker"] / r["traffic"]["last_step_bytes_per_worker"]) if van else None
                bleu = fmt_num(r["bleu"]) + (f" (diverged at step {r['diverged_at']})" if r.get("diverged_at") is not None else "")
                rows.append([MODEL_NAMES[model], LABELS[m], bleu, pv.display() if pv else "–",
                             fmt_num(r["test_loss"]), fmt_num(r["final_loss"]),
                             fmt_num(r["traffic"]["last_step_bytes_per_worker"]), fmt_num(ratio),
                             f"{cal['columns']} x {cal['rows']}" if cal else "–", fmt_num(r.get("k")), fmt_num(r["train_s"])])
        parts.sections.append(("Measured: Table 1 (translation, 4 workers)", md_table(
            ["model", "method", "BLEU (ours)", "BLEU (paper)", "held-out loss", "train loss (last 20 steps)", "bytes / worker / step",
             "vs vanilla", "sketch (c x r)", "k", "train time (s)"], rows)
            + "\n\nTop-k (true) all_reduces the full gradients (it compresses nothing here: the paper uses it as the "
              "quality reference Sketched-SGD approximates) and applies the top-k of the accumulated sum. "
              "\"vs vanilla\" = vanilla's measured bytes per worker and step / the method's (steady state, last step). "
              "Held-out loss: teacher-forced cross entropy per target token on the whole held-out split. A run whose "
              "gradients became NaN/Inf stops before that step's update and is scored as it stands (\"diverged at step N\")."))
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
                         fmt_num(sk["overall_compression"]) if sk else "–",
                         fmt_num(lt["accuracy"]) if lt else "–", fmt_num(sk["accuracy"]) if sk else "–"])
        im = wl.image_preset(ctx)
        cal = (sc.get("calibration") or {}).get("sketched") or {}
        parts.sections.append(("Measured: CIFAR-10 comparison (overall compression against workers)", (
            f"A small ResNet ({sc['parameters']:,} parameters) warmed up by {sc['warm']['steps']} vanilla steps (test accuracy "
            f"{fmt_num(sc['warm']['accuracy'])}), then {im['sweep_steps']} steps per worker count from that model with a global batch "
            f"of {im['global_batch']} split over the W workers; bytes averaged over the last {im['measure_steps']} steps. "
            f"Local top-k: k = {w['images']['local_topk_fraction']:.1%} of the parameters per worker (upload = Sketched-SGD 20x's budget), "
            f"error feedback, parameter server; the server's reply is the smaller real payload of the union (topk, exact) or dense fp32. "
            f"Sketched-SGD: k = {w['images']['sketched_fraction']:.0%}, sketch {cal.get('columns', '?')} x {cal.get('rows', '?')} "
            f"(calibrated to {fmt_num(cal.get('ratio'))}x), both rounds all_reduced. Overall compression = vanilla's (up + down) / "
            "the method's (up + down), per worker and step. (The simulated parameter server's own pull record assumes a dense "
            "fp32 reply; the exact sparse union replaces it here whenever it is smaller.)\n\n")
            + md_table(["workers", "local batch", "local top-k upload x", "union of top-k (% of d)", "local top-k overall x",
                        "Sketched-SGD overall x", "accuracy after sweep (local top-k)", "(Sketched-SGD)"], rows)))
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
    p = plot_scaling(sc, plots_dir / "cifar_compression_vs_workers.png")
    if p:
        parts.plots.append(("CIFAR-10 comparison analogue: overall compression (upload + download) against workers; dashed: 2x", "plots/" + p.name))
    p = plot_image_curves(trains, plots_dir / "images_accuracy.png")
    if p:
        parts.plots.append(("Image accuracy runs from scratch (4 workers)", "plots/" + p.name))
    parts.extra["translation_data"] = tr_data
    parts.extra["image_data"] = im_data
    parts.extra["seeds"] = {"split_batches_init": int(ctx.preset.get("seed", 0)), "sketch_hashes": int(w["sketch_seed"]),
                            "note": "every random choice is seeded; the runs are deterministic on one machine"}
    parts.extra["calibrations"] = {n: r.get("calibration") for n, r in results.items() if r.get("calibration")}
    return parts


def discussion(wl: SketchedSGDSettings, ctx: RunContext, results: Mapping[str, Any], measured: Mapping[str, Any],
               labels: Mapping[str, str]) -> str:
    """The honest account, with this run's numbers."""
    claims = {r.claim.id: r for r in evaluate_claims(wl.spec, measured, ctx.scale, tables=ctx.tables, labels=labels)}
    out = []
    held = [c for c, r in claims.items() if r.status not in (DIFFERS, NOT_RUN)]
    differs = [c for c, r in claims.items() if r.status == DIFFERS]
    if held:
        out.append("Holds in this run: " + ", ".join(f"`{c}`" for c in held) + ".")
    if differs:
        out.append("Differs in this run: " + ", ".join(f"`{c}`" for c in differs) + ".")
    t1 = _t1(results)
    tr = wl.translation_preset(ctx)
    van = t1.get(("transformer", "vanilla"))
    if van:
        k = measured.get("t1.transformer.k")
        d = measured.get("t1.transformer.parameters")
        per_coord = tr["steps"] * (k or 0) / d if d else None
        paper_per_coord = 60000 * 100000 / 90e6
        losses = "; ".join(
            f"{MODEL_NAMES[model]}: " + ", ".join(f"{LABELS[m]} {fmt_num(t1[(model, m)]['test_loss'])}"
                                                 for m in tr["methods"][model] if (model, m) in t1)
            for model in tr["models"])
        best = max((r["bleu"] for r in t1.values()), default=0.0)
        out.append(
            f"**Why BLEU does not reproduce at this scale.** The `{ctx.scale}` run trains {tr['steps']} steps of tiny models; "
            f"the paper trained 60,000 iterations of 70-90M-parameter models on WMT14. No method gets past {fmt_num(best)} BLEU "
            "here: the greedy translations are mostly frequent words and <unk> (examples above), so BLEU (4-gram precision) "
            "cannot rank the methods and the BLEU claims are reported, not gated. The held-out loss does rank them "
            f"({losses}; lower is better): the sparse methods are behind vanilla after {tr['steps']} steps. "
            f"With k = 100,000 / 90M of the parameters per step, the paper's runs update each coordinate about "
            f"{paper_per_coord:.0f} times; ours about {fmt_num(per_coord)} times, so most of what the workers computed is "
            "still waiting in the error accumulators when the run stops. The paper's 0.1-0.6 BLEU differences need its "
            "scale: `--scale full` on a bigger machine, or WMT14 files with dataset='wmt14:TRAIN.en,TRAIN.de,TEST.en,TEST.de'."
        )
    comp = [measured.get(f"t1.{m}.{s}.compression") for m in ("transformer", "lstm") for s in ("sketched20", "sketched40")]
    if any(c is not None for c in comp):
        out.append(
            "**Compression is exact by construction.** The sketch's columns are found by measuring the bytes of both rounds "
            "(the r x c table, then P k exact values) on the model's real size and keeping the largest sketch within vanilla's "
            "bytes / ratio; the training runs then send exactly those bytes every step (the claims `compression-*`)."
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
                "(more workers, smaller local batches, noisier and less overlapping local top-k); with a fixed local batch the "
                "union grows more slowly."
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


# -- plots -------------------------------------------------------------------------------------------


def plot_bleu(t1: Mapping[tuple[str, str], Mapping[str, Any]], path: Any) -> Any:
    """Loss (top) and BLEU (bottom) against steps, one column per model."""
    models = [m for m in ("transformer", "lstm") if any(k[0] == m for k in t1)]
    if not models:
        return None
    fig, axes = new_figure(3, len(models), figsize=(5 * len(models), 8.8), squeeze=False)
    for j, model in enumerate(models):
        for (mm, meth), r in sorted(t1.items()):
            if mm != model:
                continue
            losses = r["losses"]
            win = max(1, len(losses) // 30)
            smooth = [sum(losses[max(0, i - win + 1): i + 1]) / len(losses[max(0, i - win + 1): i + 1]) for i in range(len(losses))]
            axes[0][j].plot(range(1, len(losses) + 1), smooth, color=COLORS[meth], label=LABELS[meth])
            steps = [c["step"] for c in r["curve"]]
            axes[1][j].plot(steps, [unsanitize_float(c["test_loss"]) for c in r["curve"]], marker="o", color=COLORS[meth], label=LABELS[meth])
            axes[2][j].plot(steps, [c["bleu"] for c in r["curve"]], marker="o", color=COLORS[meth], label=LABELS[meth])
        axes[0][j].set_title(MODEL_NAMES[model])
        axes[0][j].set_ylabel("training loss (smoothed)")
        axes[1][j].set_ylabel("held-out loss")
        axes[2][j].set_ylabel("held-out BLEU")
        axes[2][j].set_xlabel("step")
        for i in range(3):
            axes[i][j].grid(alpha=0.3)
            axes[i][j].legend(fontsize=8)
    return savefig(fig, path)


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
