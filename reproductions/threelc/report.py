"""The 3LC report's own parts: run description, the per-stage traffic table, the method table,
the discussion, and the plots."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gcbench.envs.network import load_profile
from gcbench.tables import md_table

from ..framework.claims import fmt_num
from ..framework.report import new_figure, savefig

from .discussion import discussion
from .drift import direction_window_reductions, sent_per_step, window_reductions
from .settings import TIE_CLASSES, ThreeLCSettings, paper_band, s_key, stage_bytes
from .timecurve import (BANDWIDTHS_BPS, beyond_compute_s, codec_share, curve, machine_compute_s, median_compute_s, model_compute_s,
                        step_cost)

if TYPE_CHECKING:  # pragma: no cover
    from ..framework.runner import ReportParts, RunContext

BASE_COLOR = "black"
COMPARATOR_COLORS = {"8bit": "tab:green", "stoch3-ef": "tab:purple", "1bit-ef": "tab:olive", "sparse-5": "tab:blue",
                     "sparse-25": "tab:cyan", "local-2": "tab:brown"}
THREELC_COLORS = ["#fcae91", "#fb6a4a", "#de2d26", "#a50f15"]


def _mb(x: float) -> str:
    return f"{x / 1e6:.3f}"


def quantity_labels(wl: ThreeLCSettings, measured: Mapping[str, float | None] | None = None) -> dict[str, str]:
    """Short names of measured quantities for the claims table's "ours" column (the value follows the
    name); a whole-run reduction says whether its per-window series drifts (``traffic.drifting.s<s>``)."""
    out = {"quartic.saving": "saving", "quartic.bits": "bits/value", "acc.delta_pp.worst3lc": "farthest setting's Δ (points)",
           "time.reduction_modelled.threelc-1gbps.best": "best 3LC, modelled per step (x)"}
    for s in wl.sparsities:
        k = f"{s:.2f}"
        out[f"zero_run.gain.s{k}"] = f"s={k} (x)"
        drifting = (measured or {}).get(f"traffic.drifting.s{k}")
        window = "" if drifting is None else " (per-window series drifts)" if drifting else " (per-window series steady)"
        out[f"traffic.reduction.s{k}"] = f"s={k}{window} whole run, framed (x)"
        out[f"train.excess_loss.s{k}"] = f"s={k} excess held-out loss (share of 32-bit's fall)"
        out[f"acc.delta_pp.s{k}"] = f"s={k} Δ (points)"
        out[f"traffic.reduction_self_describing.s{k}"] = f"s={k} self-describing (x)"
    for m in wl.order:
        out[f"acc.final.{m}"] = wl.methods[m].label
    return out


def color_of(wl: ThreeLCSettings, m: str) -> str:
    """Plot colour: black for 32-bit, reds for 3LC (darker = larger s), one colour per comparator."""
    meth = wl.methods[m]
    if meth.kind == "baseline":
        return BASE_COLOR
    if meth.is_3lc:
        i = wl.sparsities.index(float(meth.params["sparsity"]))
        return THREELC_COLORS[min(i, len(THREELC_COLORS) - 1)]
    return COMPARATOR_COLORS.get(m, "tab:gray")


def _smooth(xs: list[float], k: int) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= k:
            acc -= xs[i - k]
        out.append(acc / min(i + 1, k))
    return out


def build_report(wl: ThreeLCSettings, ctx: RunContext, results: Mapping[str, Mapping[str, Any]],
                 measured: Mapping[str, float | None]) -> ReportParts:
    """Everything the 3LC report adds to the framework's generic one."""
    from ..framework.runner import ReportParts

    w = wl.spec.workload
    parts = ReportParts(labels=quantity_labels(wl, measured), units_ours={"acc.delta_pp.s1.00": "points"})
    res = {m: results[f"train-{m}"] for m in wl.order if f"train-{m}" in results}
    cfg = wl.run_config(ctx)
    profiles = list(w["profiles"])
    dataset, fallback_note = wl.dataset_choice(ctx)
    ds = ctx.cache.get("dataset_summary") or next((r.get("dataset") for r in res.values() if r.get("dataset")), None)
    any_r = next(iter(res.values()), None)
    # -- header ------------------------------------------------------------------------------------
    if fallback_note:
        parts.header_lines.append(f"**Data set fallback:** {fallback_note}")
    if ds:
        parts.header_lines.append(
            f"Data set: **{ds['name']}** — {ds['description']}; images {ds['resized']}, normalised per channel; "
            f"test accuracy on the first {ds['eval_samples']:,} test images"
            + (f"; **training on a fixed subset of {ds['train_images']:,} of the {ds['train_images_available']:,} training images**"
               if ds.get("train_images") and ds["train_images"] < ds.get("train_images_available", 0) else "")
        )
    else:
        parts.header_lines.append(f"Data set: `{dataset}` (every cell was reused from cache; see results.json of the run that computed them)")
    if any_r is not None:
        s = any_r["summary"]
        parts.header_lines.append(
            f"Workload: ResNet-{cfg.depth} (He et al. §4.2, option-A shortcuts) at width {cfg.width}: {s['params']:,} parameters in "
            f"{s['tensors']} tensors; {cfg.workers} simulated workers × {cfg.batch_per_worker} images + 1 parameter server, "
            f"{cfg.steps} steps; momentum SGD (lr {cfg.lr:g}, {cfg.schedule} schedule, warm-up {cfg.warmup_steps}, momentum "
            f"{cfg.momentum:g}, weight decay {cfg.weight_decay:g}). Scale `{ctx.scale}`: {ctx.preset.get('description', '')}"
        )
    tie = wl.tie_config(ctx)
    if tie is not None:
        m, tcfg, limit = tie
        t_r = results.get(f"tie-{m}")
        size = f" ({t_r['summary']['params']:,} parameters in {t_r['summary']['tensors']} tensors)" if t_r else ""
        parts.header_lines.append(
            f"Proxy tie: one ResNet-{tcfg.depth}{size} run of `{wl.methods[m].label}` over the first {tcfg.steps} of the "
            f"{tcfg.schedule_steps} steps of the same schedule (same initial-weight seed, data, batches and learning rates), "
            f"evaluated on {limit} test images at its start and end; its traffic against the ResNet-{cfg.depth} run's over the same steps."
        )
    for p in profiles:
        prof = load_profile(p)
        parts.header_lines.append(
            f"Network profile **{prof.name}**: {prof.title}; {prof.link.bandwidth_Bps * 8 / 1e9:g} Gbps, α = {prof.link.latency_s * 1e6:g} µs "
            f"(all assumptions: {prof.sources.get('bandwidth_gbps', '')}); push and pull each α + Σ bytes / β through the server's link"
        )
    parts.header_lines.append(
        "Traffic: every byte comes from gcbench's TrafficLog (the framed messages the workers push and the server pulls back: "
        "each tensor's static header once per link, then a reference, the sections and a CRC-32); reduction = fp32 bytes of an uncompressed run of the same steps "
        "(4 bytes per parameter, push + pull, every worker) / bytes sent. The server holds the model and the momentum-SGD "
        "optimizer: workers push gradients, the server pulls back the *model change* (our reading of the parameter-server design: "
        "the notes do not say what 3LC's pull carries). Times: *measured* on this machine (torch, 1 thread: the slowest worker's "
        "forward/backward + encode, the server's decode + average + optimizer step + encode, the slowest worker's decode; "
        "unframing in each receiver's decode, framing in no encode) plus "
        "*modelled* communication under each profile; never a wall-clock of a real cluster."
    )

    # -- per-stage traffic ---------------------------------------------------------------------------
    stage_rows = []
    stage_data: dict[str, dict[str, Any]] = {}
    tres = {m: results[f"train-{m}"] for m in wl.order if wl.methods[m].is_3lc and f"train-{m}" in results}
    for m in wl.order:
        if m not in tres:
            continue
        r = tres[m]
        st = stage_bytes(r)
        k = s_key(wl.methods[m].params["sparsity"])
        sent = r["summary"]["total_bytes"]
        zf = [side["zero_fraction"] for side in r["stages"].values() if side["zero_fraction"] is not None]
        checks = sum(side["checks"] for side in r["stages"].values())
        mism = sum(side["mismatch_count"] for side in r["stages"].values())
        gains = {side: r["stages"][side]["bytes"]["quartic"] / r["stages"][side]["bytes"]["zero_run"] for side in ("push", "pull")}
        stage_data[k] = {**st, "sent": sent, "stats": r["summary"]["stats_bytes"], "direction_gain": gains,
                         "reduction": r["summary"]["traffic_reduction"], "fp32_run": r["summary"]["baseline_fp32_bytes"],
                         "params": r["summary"]["params"], "tensors": r["summary"]["tensors"], "steps": r["summary"]["steps"]}
        stage_rows.append([
            k, _mb(st["fp32"]),
            f"{_mb(st['2bit'])} ({st['fp32'] / st['2bit']:.1f}×)",
            f"{_mb(st['quartic'])} ({st['fp32'] / st['quartic']:.1f}×; −{(1 - st['quartic'] / st['2bit']) * 100:.1f}% vs 2-bit)",
            f"{_mb(st['zero_run'])} ({st['quartic'] / st['zero_run']:.2f}× on quartic)",
            " / ".join(f"{gains[side]:.2f}×" for side in ("push", "pull")),
            f"{st['scale'] / 1e3:.1f}", f"{st['header'] / 1e3:.1f} ({st['header'] / st['payload'] * 100:.0f}%)",
            _mb(st["payload"]), f"{fmt_num(measured.get(f'traffic.reduction_self_describing.s{k}'))}×",
            _mb(sent), f"**{fmt_num(r['summary']['traffic_reduction'])}×**",
            f"{st['fp32'] / (st['zero_run'] + st['scale']):.1f}×",
            f"{sum(zf) / len(zf) * 100:.1f}%" if zf else "—", f"{checks} ({mism})",
        ])
    if stage_rows:
        where = "the training cells (each s from the same initial weights, empty memories, the whole schedule)"
        parts.sections.append((
            "Traffic per stage (3LC, whole training, push + pull)",
            f"From {where}. *Sent* = the TrafficLog's bytes: what the transport sent, every payload framed by `gcbench.envs.framing` "
            "and the batch-norm statistics the server fetches before each evaluation (the reduction's fp32 side counts them too) "
            "(the static header — codec, parameters, dtype, shape — sent once per sender, receiver and tensor, first messages "
            "included; later messages a reference, the section lengths, the data and a CRC-32) and parsed back at its receiver; "
            "the claims use it. *Self-describing* = the same payloads as `Payload.to_bytes()` (full header in every message), for comparison. "
            "Sizes in MB summed over every payload the workers pushed and the server pulled back. 2-bit = the trits packed "
            "2 bits each (`pack_bits`), quartic = 5 trits per byte, zero-run = the payload's data section; the scale `M` is "
            "4 bytes per tensor and message; header = gcbench's self-describing payload header + CRC-32 (codec id, shape, "
            "parameters: the framing sends it once). Reduction (streams) counts zero-run data + scales only. Zeros = "
            "share of quantized values that are 0, on the checked steps (push and pull averaged). Push = the workers' error-corrected "
            "gradients, pull = the server's error-corrected model changes. Checks: payloads re-encoded stage by stage by the real "
            "encoders (`stage_sizes`, `ThreeLC.encode`) and compared with the bookkeeping (mismatches in parentheses).\n\n"
            + md_table(["s", "32-bit", "2-bit packed", "quartic", "zero-run", "zero-run gain push / pull", "+ scale M (kB)", "+ header (kB, share)",
                        "self-describing (MB)", "reduction (self-describing)", "sent, framed (MB, TrafficLog)", "reduction (sent)",
                        "reduction (streams)", "zeros", "checks (mismatches)"], stage_rows)
        ))
        parts.sections.append(("Traffic per window and drift", series_section(wl, ctx, tres, results, measured)))
        parts.sections.append(("Modelled training time over link bandwidth", time_section(wl, ctx, tres, measured, profiles,
                                                                                            results.get("train-32bit"), results)))

    # -- every method ------------------------------------------------------------------------------
    base = res.get("32bit")
    rows = []
    for m in wl.order:
        if m not in res:
            continue
        r, meth = res[m], wl.methods[m]
        s = r["summary"]
        row = [meth.label, _mb(s["total_bytes"]), f"{fmt_num(s['traffic_reduction'])}×", f"{s['final_test_acc'] * 100:.2f}",
               fmt_num(measured.get(f"acc.delta_pp.{m}")), f"{s['final_train_loss']:.3f}", fmt_num(s["measured_s"])]
        for p in profiles:
            tta = measured.get(f"tta.{p}.{m}")
            row += [fmt_num(s["modelled_comm_s"][p]), fmt_num(s["total_time_s"][p]),
                    f"{fmt_num(measured.get(f'time.reduction.{p}.{m}'))}×",
                    "not reached" if tta is None or math.isinf(tta) else fmt_num(tta)]
        rows.append(row)
    if rows:
        header = ["method", "sent (MB)", "reduction", "final acc (%)", "Δ vs 32-bit (points)", "final train loss", "measured step time (s)"]
        for p in profiles:
            header += [f"modelled comm {p} (s)", f"measured + modelled total {p} (s)", f"speed-up {p}", f"time to acc. {p} (s)"]
        target = ""
        if base is not None:
            target = (f"Time to accuracy: first evaluation at ≥ {(base['summary']['final_test_acc'] - float(w['tta_margin'])) * 100:.1f}% "
                      f"(the 32-bit run's final accuracy minus {float(w['tta_margin']) * 100:g} points), cumulative measured + modelled seconds. ")
        parts.sections.append((
            "Every method: traffic, accuracy, time",
            target + "Speed-up = 32-bit total time / the method's on that profile, same number of steps. Final accuracy = last evaluation. "
            "*Measured step time* = per step, the slowest worker's forward/backward and encode, the server's step and the slowest "
            "worker's decode, summed over the steps (a simulated parallel step, not the cell's wall clock, which adds the "
            "evaluations and every worker's turn); *modelled comm* = the profile's α + bytes / β for every message; total = "
            "the two added. The measured part moves with the machine's load while that cell "
            "ran (its forward/backward as much as its codec), so the totals, speed-ups and times to accuracy here compare "
            "cells run at different loads: information only. The comparison load cannot decide is the modelled step of "
            "\"Modelled training time over link bandwidth\" (one shared compute time, codec time as a share of it).\n\n"
            + md_table(header, rows)
        ))
    notes = []
    for m in wl.order:
        meth = wl.methods[m]
        how = [f"`{meth.codec}`" + (" " + ", ".join(f"{k}={v}" for k, v in meth.params.items()) if meth.params else "")]
        if meth.error_feedback or meth.codec in ("3lc", "ef-signsgd"):
            how.append("error feedback")
        how.append(f"pull: {'the same codec' if meth.pull == 'same' else 'fp32'}")
        if meth.local_steps > 1:
            how.append(f"{meth.local_steps} local steps")
        if meth.note:
            notes.append(f"- **{meth.label}** ({'; '.join(how)}): {meth.note}")
    parts.sections.append(("Methods and how they map to the paper's", "\n".join(notes)))
    parts.sections.append(("What reproduces and what does not", discussion(wl, ctx, res, measured, stage_data)))

    # -- plots -------------------------------------------------------------------------------------
    plot_dir = ctx.out_dir / "plots"
    traffic_band, time_band = paper_band(wl.spec, "traffic.reduction"), paper_band(wl.spec, "time.reduction")
    if stage_data:
        parts.plots.append((f"3LC traffic reduction after each stage (whole training, push + pull; the paper's {traffic_band[2]} shaded)",
                            str(plot_stages(stage_data, plot_dir / "traffic_stages.png", traffic_band).relative_to(ctx.out_dir))))
    if tres:
        parts.plots.append(("3LC framed traffic reduction per window of steps, each s (whole schedule)",
                            str(plot_windows(wl, ctx, tres, plot_dir / "traffic_windows.png").relative_to(ctx.out_dir))))
        lat = load_profile(profiles[0]).link.latency_s
        parts.plots.append((f"Modelled training-time reduction against link bandwidth (latency of {profiles[0]}; the paper's {time_band[2]} shaded)",
                            str(plot_bandwidth(wl, ctx, tres, lat, plot_dir / "time_vs_bandwidth.png",
                                                           results.get("train-32bit"), results).relative_to(ctx.out_dir))))
    if res:
        parts.plots.append(("Test accuracy and training loss against steps, every method",
                            str(plot_curves(wl, res, plot_dir / "accuracy_loss.png").relative_to(ctx.out_dir))))
        parts.plots.append(("Test accuracy against time (each cell's measured step time — the slowest worker and the server, "
                            "summed over steps, which moves with the machine's load — + modelled communication) on each profile",
                            str(plot_time(wl, res, profiles, plot_dir / "time_to_accuracy.png").relative_to(ctx.out_dir))))
        parts.plots.append(("Traffic reduction against final test accuracy, every method",
                            str(plot_tradeoff(wl, res, plot_dir / "traffic_vs_accuracy.png").relative_to(ctx.out_dir))))
    parts.extra["dataset"] = ds
    parts.extra["dataset_fallback"] = fallback_note
    parts.extra["stage_bytes"] = stage_data
    return parts


def series_window(window: int | None, steps: int) -> int:
    """The steps of one window of a cell's per-window series: the scale's ``drift_window`` where it sets
    one, else a quarter of the cell's steps."""
    return window or max(steps // 4, 1)


def series_section(wl: ThreeLCSettings, ctx: RunContext, tres: Mapping[str, Mapping[str, Any]],
                   results: Mapping[str, Mapping[str, Any]], measured: Mapping[str, float | None]) -> str:
    """Per-window framed reduction and the drift verdict of each s; the three byte counts side by
    side; the ResNet-110 tie."""
    window = int(ctx.preset.get("drift_window", 0)) or None
    tol = float(ctx.preset.get("drift_tolerance", 0.15))
    rows = []
    for m, r in tres.items():
        k = s_key(wl.methods[m].params["sparsity"])
        if "framed_per_step" not in r["stages"]["push"]:
            continue
        sent = sent_per_step(r)
        w = series_window(window, len(sent))
        series = window_reductions(r["summary"]["baseline_fp32_bytes"] / r["summary"]["steps"], sent, w)
        d = measured.get(f"traffic.drifting.s{k}")
        rows.append([k, " → ".join(f"{x:.0f}×" for x in series), "—" if d is None else "**drifts**" if d else "steady",
                     f"**{fmt_num(measured.get(f'traffic.reduction.s{k}'))}×**",
                     f"{fmt_num(measured.get(f'traffic.reduction_self_describing.s{k}'))}×",
                     f"{fmt_num(measured.get(f'traffic.reduction_streams.s{k}'))}×"])
    if not rows:
        return "No framed traffic was recorded."
    text = (f"Framed reduction per {window or 'quarter-of-the-run'}-step window of each run (fp32 bytes of the window / framed bytes "
            f"sent in it). Drift test: a series **drifts** when a window moves more than {tol * 100:g}% from the one before; then the "
            "whole-run ratio depends on the run's length and schedule (another schedule would send another ratio): information "
            "beside the verdicts, not a condition of them. The claims compare the "
            "whole run's **framed** bytes (what the transport sends); self-describing (header in every message) and stream-only "
            "(zero-run data + scales) beside it.\n\n"
            + md_table(["s", "framed reduction per window", "drift test", "whole run, framed (claims)", "self-describing", "streams only"], rows))
    text += "\n\n" + direction_table(wl, ctx, tres, window)
    tie = wl.tie_config(ctx)
    if tie is not None and measured.get("tie.ratio") is not None:
        m, tcfg = tie[0], tie[1]
        n, w = tcfg.steps, min(window or tcfg.steps, tcfg.steps)

        def per(r: Mapping[str, Any]) -> list[float]:
            return window_reductions(r["summary"]["baseline_fp32_bytes"] / r["summary"]["steps"], sent_per_step(r)[:n], w)
        big, proxy = per(results[f"tie-{m}"]), per(results[f"train-{m}"])
        k = s_key(wl.methods[m].params["sparsity"])
        text += (
            f"\n\n**Tie to the paper's model.** Over the first {tcfg.steps} steps of the same schedule, `{wl.methods[m].label}` on "
            f"ResNet-{tcfg.depth} sent {fmt_num(measured.get('tie.reduction.big'))}× less than fp32, ResNet-{wl.run_config(ctx).depth} "
            f"{fmt_num(measured.get('tie.reduction.proxy'))}× (ratio {fmt_num(measured.get('tie.ratio'))}); per window: ResNet-{tcfg.depth} "
            + " → ".join(f"{x:.0f}×" for x in big) + f", ResNet-{wl.run_config(ctx).depth} " + " → ".join(f"{x:.0f}×" for x in proxy)
        )
        evals = results[f"tie-{m}"]["evals"]
        if measured.get("tie.trained"):
            text += (f". *Estimate, not a measurement:* the proxy's whole-run reduction at s = {k} times that ratio, "
                     f"{fmt_num(measured.get(f'traffic.reduction_est110.s{k}'))}×, is what ResNet-{tcfg.depth} would send over "
                     "the whole schedule if the ratio held after the tie's steps.")
        else:
            text += (f". **The ResNet-{tcfg.depth} run did not train** over its steps: held-out loss "
                     f"{evals[0]['test_loss']:.4g} at the start, {evals[-1]['test_loss']:.4g} at the end (a uniform guess: "
                     f"{math.log(TIE_CLASSES):.4g}), accuracy {evals[-1]['test_acc'] * 100:.1f}%. Its gradients are not a "
                     f"training ResNet-{tcfg.depth}'s, so the ratio does not tie the proxy to the paper's model and no "
                     "estimate is made from it.")
    return text


def direction_table(wl: ThreeLCSettings, ctx: RunContext, tres: Mapping[str, Mapping[str, Any]], window: int | None) -> str:
    """Per window: the learning rate over it (the run's schedule, :meth:`.train.TrainConfig.lr_at`)
    and each s's framed reduction per direction, push / pull (:func:`.drift.direction_window_reductions`)."""
    cfg = wl.run_config(ctx)
    per = {}
    for m, r in tres.items():
        if "framed_per_step" in r["stages"]["push"]:
            w = series_window(window, len(r["stages"]["push"]["framed_per_step"]))
            per[s_key(wl.methods[m].params["sparsity"])] = (w, direction_window_reductions(r, w))
    if not per:
        return ""
    w, first = next(iter(per.values()))
    rows = []
    for i in range(len(first["push"])):
        a, b = i * w, (i + 1) * w - 1
        row = [f"{a}–{b}", f"{cfg.lr_at(a):.3g} → {cfg.lr_at(b):.3g}"]
        row += [f"{d['push'][i]:.1f}× / {d['pull'][i]:.1f}×" if i < len(d["push"]) else "—" for _, d in per.values()]
        rows.append(row)
    return (
        f"Per direction (push: the workers' error-corrected gradients; pull: the server's error-corrected model changes; each "
        f"against half the fp32 bytes) and the learning rate over each window ({cfg.schedule} schedule, warm-up "
        f"{cfg.warmup_steps} steps, {cfg.schedule_steps} steps in all; first → last step of the window). The pull carries the "
        "server's model change, the learning rate times its momentum-SGD update, added to the server's error memory of earlier "
        "changes; the push carries gradients and the workers' memories of them, which the learning rate does not scale. Our "
        "reading: as the rate falls, each new change shrinks against the memory it joins, and fewer values round to 0; so where "
        "the pull's reduction falls with the rate and the push's does not, the whole-run ratio depends on the schedule's shape "
        "(the `claims` scale decays by cosine to 0, the `paper` scale steps down ×0.1 at 50% and 75% of its steps; see spec.toml).\n\n"
        + md_table(["window (steps)", "learning rate"] + [f"s={k} push / pull" for k in per], rows)
    )


def time_section(wl: ThreeLCSettings, ctx: RunContext, tres: Mapping[str, Mapping[str, Any]],
                 measured: Mapping[str, float | None], profiles: list[str], baseline: Mapping[str, Any] | None,
                 results: Mapping[str, Mapping[str, Any]]) -> str:
    """The modelled time reduction per s on each profile and where 16x and 23x would be reached
    (``baseline``: the 32-bit cell, whose step time beyond compute the 32-bit side pays; ``results``:
    every cell, whose ``train-`` cells give the one compute time of every setting)."""
    given = ctx.options.get("compute_seconds_per_step")
    shared = model_compute_s(results, given)
    machine = machine_compute_s(results)
    rows = []
    for m, r in tres.items():
        k = s_key(wl.methods[m].params["sparsity"])
        cost = step_cost(r, shared, baseline, machine)
        if cost is None:
            continue
        row = [k, fmt_num(median_compute_s([r])), fmt_num(beyond_compute_s(r)), fmt_num(codec_share(r)), fmt_num(cost.codec_s)]
        row += [f"{fmt_num(measured.get(f'time.reduction_modelled.{p}.s{k}'))}×" for p in profiles]
        for t in ("16", "23"):
            bw = measured.get(f"time.bw{t}x.s{k}")
            row.append("never (traffic ratio below it)" if bw is None or math.isinf(bw) else f"≤ {bw / 1e6:.3g} Mbps")
        rows.append(row)
    if not rows:
        return "No per-step times were recorded."
    share_b = codec_share(baseline) if baseline is not None else None
    other_text = (f"{fmt_num(share_b)} of compute, {fmt_num(share_b * machine)} s per step" if share_b is not None and machine is not None
                  else "not recorded, 0")
    n_cells = sum(1 for k, r in results.items() if k.startswith("train-") and r.get("compute_step_s"))
    machine_text = (f"**{fmt_num(machine)} s per step: the median of all settings' steps** (the slowest worker's forward/backward, "
                    f"measured on this machine, 1 thread, over every step of the {n_cells} training cells: each runs the same model, "
                    "batch and data, so a cell's own compute differs from it only by noise and the machine's load while that cell ran, "
                    "and is shown as information)")
    device = next((str(r["device"]) for r in results.values() if r.get("device")), "cpu")
    compute_of = (f"the given compute ({given:g} s per step) and this machine's codec" if given is not None
                  else f"this machine's compute and codec (device `{device}`)")
    comp_text = (f"compute = **{given:g} s per step, as given** (`--compute-seconds-per-step`), every setting; this machine's compute = {machine_text}"
                 if given is not None else f"compute = {machine_text} for every setting")
    header = ["s", "this cell's compute s/step (median; information)", "this cell's step beyond compute s/step (mean; information)",
              "codec share of compute (median over steps)", "codec + server step s/step (priced: share × this machine's compute)"]
    header += [f"reduction {p} (*modelled*)" for p in profiles] + ["16× reached at", "23× reached at"]
    return (
        "*Modelled*, not measured on a cluster: per step (compute + the 32-bit run's other step time + fp32 push + fp32 pull) / "
        "(compute + 3LC's codec time + framed push + framed pull), each phase α + bytes / β through the server's link, α of "
        f"each profile (the 16×/23× bandwidths: α of `{profiles[0]}`); {comp_text}. 3LC's codec time (encode, decode, the server's step) is priced by the same rule: "
        "load slows a step's codec work as it slows its forward/backward (the same thread, the same step), so each setting's "
        "codec time is the median over its steps of (step − compute) / compute, from which load cancels, times this machine's "
        f"one compute time; the 32-bit run's other step time (its fp32 payloads and the server's step) likewise: {other_text}. "
        "Each cell's own seconds are shown as information: they moved with the load while that cell ran. "
        f"Profiles: {', '.join(f'`{p}`' for p in profiles)} (their numbers are assumptions, in the header). Calibration: none, "
        "so no misfit: our source gives no measured time of the paper's runs to fit the model to. "
        "The reduction tends to the traffic ratio as the link slows "
        f"and to the compute share as it speeds up: the paper's {paper_band(wl.spec, 'time.reduction')[2]} (ResNet-110's total training time) "
        f"is reached only on links at or below the bandwidths shown, with {compute_of}; the claim is *not at this scale*.\n\n"
        + md_table(header, rows)
    )


# -- plots ---------------------------------------------------------------------------------------------


def _plain_log_axis(axis: Any) -> None:
    """Plain numbers on a log axis (``0.5``, ``2``, ``40``), no labels on minor ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def plot_windows(wl: ThreeLCSettings, ctx: RunContext, tres: Mapping[str, Mapping[str, Any]], path):
    """Framed reduction per window of steps, one line per s."""
    fig, ax = new_figure(figsize=(7.5, 4.2))
    for m, r in tres.items():
        sent = sent_per_step(r)
        w = series_window(int(ctx.preset.get("drift_window", 0)) or None, len(sent))
        series = window_reductions(r["summary"]["baseline_fp32_bytes"] / r["summary"]["steps"], sent, w)
        ax.plot([(i + 0.5) * w for i in range(len(series))], series, marker="o", color=color_of(wl, m), label=wl.methods[m].label)
    lo, hi, band = paper_band(wl.spec, "traffic.reduction")
    ax.axhspan(lo, hi, color="tab:orange", alpha=0.12, label=f"paper: {band}")
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("step (window centre)")
    ax.set_ylabel("framed reduction vs fp32 (×, log)")
    ax.set_title("3LC traffic reduction per window of steps")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return savefig(fig, path)


def plot_bandwidth(wl: ThreeLCSettings, ctx: RunContext, tres: Mapping[str, Mapping[str, Any]], latency_s: float, path,
                   baseline: Mapping[str, Any] | None, results: Mapping[str, Mapping[str, Any]]):
    """Modelled training-time reduction against link bandwidth, one line per s (:mod:`.timecurve`;
    compute: :func:`.timecurve.model_compute_s` over every cell in ``results``)."""
    fig, ax = new_figure(figsize=(7.5, 4.2))
    shared = model_compute_s(results, ctx.options.get("compute_seconds_per_step"))
    machine = machine_compute_s(results)
    mbps = [b / 1e6 for b in BANDWIDTHS_BPS]
    for m, r in tres.items():
        cost = step_cost(r, shared, baseline, machine)
        if cost is not None:
            ax.plot(mbps, curve(cost, latency_s), color=color_of(wl, m), label=wl.methods[m].label)
    lo, hi, band = paper_band(wl.spec, "time.reduction")
    ax.axhspan(lo, hi, color="tab:orange", alpha=0.15, label=f"paper: {band}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_axis(ax.xaxis)
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("link bandwidth (Mbps, log)")
    ax.set_ylabel("training-time reduction (×, modelled)")
    ax.set_title("modelled time reduction: " + ("given compute, this machine's codec" if ctx.options.get("compute_seconds_per_step") is not None
                                                 else "this machine's compute and codec"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return savefig(fig, path)


def plot_stages(stage_data: Mapping[str, Mapping[str, Any]], path, paper: tuple[float, float, str]):
    """Reduction against 32-bit after each stage, one group of bars per s."""
    fig, ax = new_figure(figsize=(7.5, 4.2))
    stages = [("2-bit packed", lambda d: d["fp32"] / d["2bit"]), ("quartic", lambda d: d["fp32"] / d["quartic"]),
              ("zero-run (+scale)", lambda d: d["fp32"] / (d["zero_run"] + d["scale"])),
              ("sent (TrafficLog)", lambda d: d["reduction"])]
    colors = ["#bdbdbd", "#969696", "#de2d26", "#3182bd"]
    n = len(stages)
    width = 0.8 / n
    ks = list(stage_data)
    for i, (name, f) in enumerate(stages):
        vals = [f(stage_data[k]) for k in ks]
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(ks))]
        bars = ax.bar(xs, vals, width, label=name, color=colors[i])
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax.axhspan(paper[0], paper[1], color="tab:orange", alpha=0.15, label=f"paper: {paper[2]}")
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_xticks(range(len(ks)))
    ax.set_xticklabels([f"s = {k}" for k in ks])
    ax.set_ylabel("reduction vs 32-bit (×, log)")
    ax.set_title("3LC: traffic reduction after each stage")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return savefig(fig, path)


def plot_curves(wl: ThreeLCSettings, res: Mapping[str, Mapping[str, Any]], path):
    """Test accuracy and (smoothed) training loss against steps."""
    fig, (a1, a2) = new_figure(1, 2, figsize=(12, 4.5))
    for m, r in res.items():
        meth = wl.methods[m]
        style = "-" if meth.is_3lc or meth.kind == "baseline" else "--"
        lw = 2.2 if meth.kind == "baseline" else 1.4
        ev = r["evals"]
        a1.plot([e["step"] for e in ev], [e["test_acc"] * 100 for e in ev], style, color=color_of(wl, m), lw=lw, label=meth.label, marker=".")
        loss = r["train_loss"]
        a2.plot(range(1, len(loss) + 1), _smooth(loss, max(1, len(loss) // 20)), style, color=color_of(wl, m), lw=lw, label=meth.label)
    a1.set_xlabel("step")
    a1.set_ylabel("test accuracy (%)")
    a1.set_title("test accuracy")
    a1.grid(True, alpha=0.3)
    a2.set_xlabel("step")
    a2.set_ylabel("training loss (workers' mean, moving average)")
    a2.set_title("training loss")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=7, ncol=2)
    return savefig(fig, path)


def plot_time(wl: ThreeLCSettings, res: Mapping[str, Mapping[str, Any]], profiles: list[str], path):
    """Test accuracy against measured + modelled time, one panel per profile."""
    fig, axes = new_figure(1, len(profiles), figsize=(6 * len(profiles), 4.5), squeeze=False)
    for ax, p in zip(axes[0], profiles):
        for m, r in res.items():
            meth = wl.methods[m]
            style = "-" if meth.is_3lc or meth.kind == "baseline" else "--"
            ev = [e for e in r["evals"] if e["step"] > 0]  # step 0 sits at time 0, off a log axis
            ax.plot([e["time_s"][p] for e in ev], [e["test_acc"] * 100 for e in ev], style, marker=".",
                    color=color_of(wl, m), lw=2.2 if meth.kind == "baseline" else 1.4, label=meth.label)
        ax.set_xscale("log")
        _plain_log_axis(ax.xaxis)
        ax.set_xlabel(f"time (s): measured step time (slowest worker + server) + modelled comm, {p}")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"time to accuracy — {p}")
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8, bbox_to_anchor=(0.5, -0.08))
    return savefig(fig, path)


def meth_is_up(wl: ThreeLCSettings, m: str) -> bool:
    """Label above the point for 3LC and the baseline, below for comparators (fewer overlaps)."""
    return wl.methods[m].is_3lc or wl.methods[m].kind == "baseline"


def plot_tradeoff(wl: ThreeLCSettings, res: Mapping[str, Mapping[str, Any]], path):
    """Traffic reduction (log) against final accuracy."""
    fig, ax = new_figure(figsize=(7, 4.5))
    for m, r in res.items():
        s = r["summary"]
        ax.scatter([s["traffic_reduction"]], [s["final_test_acc"] * 100], color=color_of(wl, m), s=40, zorder=3)
        ax.annotate(wl.methods[m].label, (s["traffic_reduction"], s["final_test_acc"] * 100), fontsize=7,
                    xytext=(5, 3 if meth_is_up(wl, m) else -9), textcoords="offset points")
    lo, hi, band = paper_band(wl.spec, "traffic.reduction")
    ax.axvspan(lo, hi, color="tab:orange", alpha=0.12, label=f"paper's 3LC: {band}")
    ax.set_xscale("log")
    _plain_log_axis(ax.xaxis)
    ax.set_xlabel("traffic reduction vs 32-bit (×, log; bytes sent, push + pull)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title("traffic against accuracy")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return savefig(fig, path)
