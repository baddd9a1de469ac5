"""The L-GreCo report's own parts: run description, the Table 4 and Table 1 analogues, the
Transformer LM table, the Fig. 9 plot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gcbench.compressors.adaptive import ladder_for
from gcbench.tables import md_table

from ..framework.claims import fmt_num
from ..framework.report import new_figure, savefig
from ..framework.runner import ReportParts, RunContext
from ..framework.settling import fall_text
from .budget import BUDGET_LABELS
from .lm_scale import last_choice, param_dims
from .metrics import per_step_ratio, traffic_log
from .settings import GLOBAL_TOPK, LABELS, METHOD_IDS, METHODS, LGreCoSettings, table4_labels


def paper_value(spec: Any, value_id: str) -> float | None:
    """The paper's number ``value_id`` of ``spec``, None where the spec has no such value."""
    try:
        return float(spec.value(value_id).value)
    except KeyError:
        return None


def epoch_share_text(n_params: int, model_name: str, steps: int, ours: Mapping[str, float | None],
                     paper: Mapping[str, float | None]) -> str:
    """The Table 1 analogue's sentence on this run beside Transformer-XL's: per codec, the measured share at one
    decision per epoch (``ours``, t1.<codec>.epoch_share) and whether it is above or below Table 1's
    Transformer-XL share (``paper``), as the numbers say."""
    got = []
    for codec, share in ours.items():
        ref = paper.get(codec)
        if share is None:
            got.append(f"{codec} not measured")
        elif ref is None:
            got.append(f"{codec} {100 * share:.2f}%")
        else:
            rel = "above" if share > ref else "below" if share < ref else "equal to"
            got.append(f"{codec} {100 * share:.2f}%, {rel} Transformer-XL's {100 * ref:.2f}%")
    return (f"here a {n_params:,}-parameter {model_name} trains for {steps} steps on a small image set, and its share at "
            "one decision per epoch of its training images is " + ("; ".join(got) or "not measured") + ".")


def build_report(wl: LGreCoSettings, ctx: RunContext, results: Mapping[str, Mapping[str, Any]],
                 measured: Mapping[str, float | None]) -> ReportParts:
    """Header lines, the Table 4 / Table 1 / LM tables and the Fig. 9 plot of an L-GreCo run."""
    cfg = wl.run_config(ctx)
    parts = ReportParts()
    first_run = results[f"train-{ctx.preset['codecs'][0]}"]["uniform"]
    n_params = first_run.get("model_params") or 0
    data = first_run.get("data") or {"name": "digits", "description": "sklearn digits"}
    model_name = wl.model_label(cfg)
    _, fallback_note = wl.dataset_choice(ctx)
    if fallback_note:
        parts.header_lines.append(f"**Data set fallback:** {fallback_note}")
    text_note = wl.text_choice(ctx)[1] if ctx.preset.get("lm") else None
    if text_note:
        parts.header_lines.append(f"**Text fallback:** {text_note}")
    parts.header_lines.append(
        f"Workload: {model_name} ({n_params:,} parameters) on {data['name']} ({data['description']}"
        + (f"; {data['used_train']:,} train images, test accuracy on {data['used_test']:,}, {data['resized']}" if "used_train" in data else "")
        + f"), {cfg['workers']} real gloo ranks "
        f"(DDP + gcbench hook, {cfg['steps']} steps, batch {cfg['batch']}/rank), decisions every {cfg['every']} steps "
        f"after {cfg['warmup']} warm-up steps. The paper: Transformer-XL on WikiText-103 (NVIDIA's recipe, Table 7: "
        "LAMB, batch 256, 40k steps) on 8-16 RTX3090s. "
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
            param = next(iter(wl.codecs[name].get("params", {"?": 0})))
            chosen = ",".join(str(v.get(param)) for k, v in last.items() if k.endswith("weight"))
            chosen = f"{param} {chosen}" if chosen else "uniform"
            if method == GLOBAL_TOPK:
                chosen = f"ratio {run['density']:.4g} over the whole model (L-GreCo's mean over its steps)"
            rows.append([name, LABELS[method], fmt_num(measured[f"{prefix}.{mid}.ratio"]),
                         fmt_num(measured[f"{prefix}.{mid}.tput_measured"]),
                         fmt_num(measured[f"{prefix}.{mid}.tput_single"]), fmt_num(measured[f"{prefix}.{mid}.tput_multi"]),
                         fmt_num(measured.get(f"{prefix}.{mid}.tput_single_overlap")),
                         fmt_num(measured.get(f"{prefix}.{mid}.tput_multi_overlap")),
                         f"{run['eval']['test_accuracy'] * 100:.2f}", chosen,
                         "yes" if run["replicas_identical"] and run["choices_identical"] else "NO"])
    rows.append(["identity", "uncompressed", "1", "", "", "", "", "", f"{measured['acc.uncompressed'] * 100:.2f}", "", ""])
    fall, bound = measured.get("acc.uncompressed.loss_fall"), wl.final_metric_bound()
    settling = ("" if fall is None or bound is None else
                " " + fall_text("The uncompressed training's cross entropy", fall) + "; the final-metric claim tests the "
                f"test accuracies only where it falls by at most its {100 * bound:g}%.")
    parts.sections.append((
        "Table 4 analogue: compression ratio and throughput (images/s)",
        md_table(["codec", "method", "ratio (raw/wire bytes, whole run)", "measured img/s (gloo, this machine, overlapped hook)",
                  "modelled img/s single-node (8 GPUs), buckets one after another",
                  "modelled img/s multi-node (16 GPUs), buckets one after another",
                  "modelled img/s single-node, overlapped", "modelled img/s multi-node, overlapped", "test acc %",
                  "last choice (weights)", "ranks & choices identical"], rows)
        + "\n\nRatio = uncompressed gradient bytes / real bytes on the wire (payloads, sizes, checks, choice broadcasts) over "
          "the whole run, warm-up included. Measured: the hook runs with `overlap=True` (each bucket's collectives on a "
          "communication thread while backward computes the next buckets; bit-identical to the synchronous hook). "
          "Modelled, buckets one after another = measured step time minus measured communication plus the step's "
          "traffic priced on `envs/profiles/lgreco-*.toml`. Modelled, overlapped = the forward pass (1/3 of the "
          "measured compute), then the backward (2/3), each bucket communicating (its traffic priced on the profile plus "
          "its share of the measured encode/decode) once the backward has produced it and the previous bucket is sent "
          "(`gcbench.envs.network.overlapped_step_s`); compute = measured step minus the hook's measured seconds, a lower "
          "bound when the run overlapped. Global TopK (Sec. 5.3, TopK only): one selection over the "
          "whole model's gradient at L-GreCo's mean overall density (the average over its steps, warm-up included, of the density its per-layer choice kept), with error feedback, sent after the last bucket "
          "(`gcbench_global_hook`): its communication cannot start before the backward pass ends, in the measured run "
          "and in the overlapped model alike (Fig. 10)." + settling,
    ))
    orows = []
    for name in ctx.preset["codecs"]:
        lg = results[f"train-{name}"]["lgreco"]
        total = sum(lg["step_s"])
        t_s = sum(d.get("tables_s", 0.0) for d in lg["decisions"])
        a_s = sum(d.get("accumulate_s", 0.0) for d in lg["decisions"])
        dp_s = sum(d.get("dp_s", 0.0) for d in lg["decisions"])
        b_s = sum(d.get("broadcast_s", 0.0) for d in lg["decisions"])
        pct = [("" if measured.get(f"t1.{name}.{k}") is None else f"{measured[f't1.{name}.{k}'] * 100:.2f}%")
               for k in ("run_share", "run_error_share", "epoch_share", "epoch_error_share")]
        orows.append([name, len(lg["decisions"]), f"{total:.3f}", f"{t_s * 1e3:.1f}", f"{a_s * 1e3:.2f}", f"{dp_s * 1e3:.1f}",
                      f"{b_s * 1e3:.2f}", *pct])
    parts.sections.append((
        "Table 1 analogue: L-GreCo overhead (rank 0, measured)",
        md_table(["codec", "decisions", "training s", "error tables ms", "accumulate ms", "DP ms", "broadcast ms",
                  f"share of this run (a decision every {cfg['every']} steps) [all]", "[error computation]",
                  "share at one decision per epoch [all]", "[error computation]"], orows)
        + "\n\nShare of this run: all its decisions' seconds over its summed step seconds (t1.<codec>.run_share). "
          "At one decision per epoch (Table 1's interval, Sec. 4; t1.<codec>.epoch_share, the claims' quantity): one "
          "decision's mean seconds over themselves plus one epoch of the training images at the run's mean step "
          "without a decision. The paper's 0.56% is for Transformer-XL trained for 40k steps (Table 7) with one decision per "
          "epoch of WikiText-103; "
        + epoch_share_text(n_params, model_name, cfg["steps"],
                           {name: measured.get(f"t1.{name}.epoch_share") for name in ctx.preset["codecs"]},
                           {name: paper_value(ctx.spec, f"t1.{name}.txl") for name in ctx.preset["codecs"]}),
    ))
    lm_rows = []
    lm_cells = {name: runs for name, runs in results.items() if name.startswith("lm-")}
    if lm_cells:  # the one-layer d 64 LM (no ``tlm`` shape), PowerSGD: its rank acts on the matrices only
        dims = param_dims({})
        matrices_only = ladder_for(wl.codecs[ctx.preset["lm"]["codec"]]["codec"]).matrices_only
    for name, runs in lm_cells.items():
        for method, run in runs.items():
            mid = ids.get(method, method)
            chosen = last_choice(run, "rank", matrices_only, dims)
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
            f"{text_line[1]}, and far smaller than Transformer-XL.\n\n"
            + md_table(["codec", "method", "ratio (raw/wire)", "measured tokens/s (gloo)", "held-out perplexity",
                        "last choice (rank per matrix)", "ranks & choices identical"], lm_rows),
        ))
    parts.header_lines.append(
        f"Simulated cluster (W = {cfg['workers']}) vs the real gloo run, L-GreCo + {ctx.preset['codecs'][0]}: "
        f"{'identical final parameters (digests)' if measured['sim.equals_real'] == 1.0 else 'DIFFERENT parameters'}."
    )
    plot_dir = ctx.out_dir / "plots"
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    first = ctx.preset["codecs"][0]
    for method in METHODS:
        axes[0].plot(per_step_ratio(results[f"train-{first}"][method]), label=LABELS[method])
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("compression ratio (raw / wire bytes)")
    axes[0].set_title(f"Fig. 9 analogue: {first}, ratio over training")
    axes[0].legend(fontsize=7)
    for k, method in enumerate(("uniform", "lgreco")):
        log = traffic_log(results[f"train-{first}"][method])
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
    parts.labels = {**table4_labels("img/s"),
                    "acc.lgreco": "L-GreCo acc", "acc.uncompressed": "uncompressed acc",
                    "dp.max_error_over_budget": "max error/budget", "dp.one": "1",
                    "gtopk.slowdown": "global TopK throughput deficit vs L-GreCo (measured)",
                    "gtopk.slowdown_single": "global TopK throughput deficit vs L-GreCo (modelled, 8 GPUs, overlapped)",
                    **BUDGET_LABELS}
    parts.units_ours = {k: f"img/s ({model_name})" for k in measured if ".tput_" in k}
    parts.units_ours.update({k: f"(fraction; {model_name})" for k in measured if k.startswith("t1.")})
    parts.extra = {"config": cfg, "data": data, "dataset_fallback": fallback_note, "text_fallback": text_note}
    return parts
