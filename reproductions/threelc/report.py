"""The 3LC report's own parts: run description, the per-stage traffic table, the method table,
the discussion, and the plots."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gcbench.envs.network import load_profile

from ..framework.claims import fmt_num
from ..framework.report import md_table, new_figure, savefig

from .settings import ThreeLCSettings, s_key, stage_bytes, traffic_preset

if TYPE_CHECKING:  # pragma: no cover
    from ..framework.runner import ReportParts, RunContext

BASE_COLOR = "black"
COMPARATOR_COLORS = {"8bit": "tab:green", "stoch3-ef": "tab:purple", "1bit-ef": "tab:olive", "sparse-5": "tab:blue",
                     "sparse-25": "tab:cyan", "local-2": "tab:brown"}
THREELC_COLORS = ["#fcae91", "#fb6a4a", "#de2d26", "#a50f15"]


def _mb(x: float) -> str:
    return f"{x / 1e6:.3f}"


def quantity_labels(wl: ThreeLCSettings, measured: Mapping[str, float | None] | None = None) -> dict[str, str]:
    """Short names of measured quantities for the claims table's "ours" column; a steady-state
    reduction whose branch is not settled (``traffic.settled.s<s>`` = 0) is labelled *provisional*."""
    out = {"quartic.saving": "saving", "quartic.bits": "bits/value", "acc.delta_pp.worst3lc": "worst Δ (points)",
           "time.reduction.threelc-1gbps.best": "best 3LC (x)",
           "time.reduction_modelled.threelc-1gbps.best": "best 3LC, modelled (x)",
           "comm.reduction.threelc-1gbps.best": "best 3LC comm time (x)"}
    for s in wl.sparsities:
        k = f"{s:.2f}"
        out[f"zero_run.gain.s{k}"] = f"s={k} (x)"
        out[f"traffic.reduction.s{k}"] = f"s={k} (x)"
        settled = (measured or {}).get(f"traffic.settled.s{k}")
        out[f"traffic.reduction_settled.s{k}"] = f"s={k} steady state (x)" + (
            "" if settled is None else ", settled" if settled else ", NOT SETTLED: provisional")
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
    tc = wl.traffic_config(ctx)
    if tc is not None:
        t_any = next((results[k] for k in results if k.startswith("traffic-")), None)
        size = f"{t_any['summary']['params']:,} parameters in {t_any['summary']['tensors']} tensors; " if t_any else ""
        warm = results.get("warmup")
        mem = next((r["branched_from"].get("memories") for k, r in results.items() if k.startswith("traffic-") and "branched_from" in r), None)
        mem_text = ("error-accumulation memories: the warm-up codec's" if mem == "warm"
                    else "error-accumulation memories empty at the branch")
        start = (f"branched from one shared {warm['summary']['steps']}-step warm-up (`{warm['method']['label']}`, checkpoint "
                 f"`{warm['checkpoint']['file']}`, SHA-256 {warm['checkpoint']['sha256'][:12]}…; {mem_text})") if warm else "from the same initial weights"
        parts.header_lines.append(
            f"Traffic cells (the per-stage table and the communication table): ResNet-{tc.depth} at width {tc.width}: {size}"
            f"{tc.workers} workers × {tc.batch_per_worker} images + 1 parameter server, {tc.steps} steps per 3LC setting {start}, "
            f"same data; their accuracy is not reported ({tc.steps} steps of ResNet-{tc.depth} are not a training run)."
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
        "forward/backward + encode, the server's decode + average + optimizer step + encode, the slowest worker's decode) plus "
        "*modelled* communication under each profile; never a wall-clock of a real cluster."
    )

    # -- per-stage traffic ---------------------------------------------------------------------------
    stage_rows = []
    stage_data: dict[str, dict[str, Any]] = {}
    tres = {m: results.get(f"traffic-{m}") or results.get(f"train-{m}") for m in wl.order if wl.methods[m].is_3lc}
    tres = {m: r for m, r in tres.items() if r is not None}
    tcfg = wl.traffic_config(ctx)
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
        stage_data[k] = {**st, "sent": sent, "fp32_run": r["summary"]["baseline_fp32_bytes"],
                         "params": r["summary"]["params"], "tensors": r["summary"]["tensors"], "steps": r["summary"]["steps"]}
        stage_rows.append([
            k, _mb(st["fp32"]),
            f"{_mb(st['2bit'])} ({st['fp32'] / st['2bit']:.1f}×)",
            f"{_mb(st['quartic'])} ({st['fp32'] / st['quartic']:.1f}×; −{(1 - st['quartic'] / st['2bit']) * 100:.1f}% vs 2-bit)",
            f"{_mb(st['zero_run'])} ({st['quartic'] / st['zero_run']:.2f}× on quartic)",
            " / ".join(f"{side['bytes']['quartic'] / side['bytes']['zero_run']:.2f}×" for side in (r["stages"]["push"], r["stages"]["pull"])),
            f"{st['scale'] / 1e3:.1f}", f"{st['header'] / 1e3:.1f} ({st['header'] / st['payload'] * 100:.0f}%)",
            _mb(st["payload"]), f"{fmt_num(measured.get(f'traffic.reduction_self_describing.s{k}'))}×",
            _mb(sent), f"**{fmt_num(r['summary']['traffic_reduction'])}×**",
            f"{st['fp32'] / (st['zero_run'] + st['scale']):.1f}×",
            f"{sum(zf) / len(zf) * 100:.1f}%" if zf else "—", f"{checks} ({mism})",
        ])
    if stage_rows:
        d_any = next(iter(stage_data.values()))
        where = (f"ResNet-{tcfg.depth} traffic cells ({d_any['params']:,} parameters in {d_any['tensors']} tensors, {d_any['steps']} steps; "
                 "see the workload line)" if tcfg is not None else "the training cells")
        parts.sections.append((
            "Traffic per stage (3LC, whole training, push + pull)",
            f"From {where}. *Sent* = the TrafficLog's bytes: what the transport sent, every payload framed by `gcbench.envs.framing` "
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
        parts.sections.append(("Communication and modelled time (3LC traffic cells)", comm_section(wl, ctx, tres, measured, profiles)))

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
        header = ["method", "sent (MB)", "reduction", "final acc (%)", "Δ vs 32-bit (points)", "final train loss", "measured (s)"]
        for p in profiles:
            header += [f"comm {p} (s)", f"total {p} (s)", "speed-up", f"time to acc. {p} (s)"]
        target = ""
        if base is not None:
            target = (f"Time to accuracy: first evaluation at ≥ {(base['summary']['final_test_acc'] - float(w['tta_margin'])) * 100:.1f}% "
                      f"(the 32-bit run's final accuracy minus {float(w['tta_margin']) * 100:g} points), cumulative measured + modelled seconds. ")
        parts.sections.append((
            "Every method: traffic, accuracy, time",
            target + "Speed-up = 32-bit total time / the method's, same number of steps. Final accuracy = last evaluation.\n\n"
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
    if stage_data:
        parts.plots.append(("3LC traffic reduction after each stage (whole training, push + pull; the paper's 39–107× shaded)",
                            str(plot_stages(stage_data, plot_dir / "traffic_stages.png").relative_to(ctx.out_dir))))
    if res:
        parts.plots.append(("Test accuracy and training loss against steps, every method",
                            str(plot_curves(wl, res, plot_dir / "accuracy_loss.png").relative_to(ctx.out_dir))))
        parts.plots.append(("Test accuracy against time (measured compute + modelled communication) on each profile",
                            str(plot_time(wl, res, profiles, plot_dir / "time_to_accuracy.png").relative_to(ctx.out_dir))))
        parts.plots.append(("Traffic reduction against final test accuracy, every method",
                            str(plot_tradeoff(wl, res, plot_dir / "traffic_vs_accuracy.png").relative_to(ctx.out_dir))))
    parts.extra["dataset"] = ds
    parts.extra["dataset_fallback"] = fallback_note
    parts.extra["stage_bytes"] = stage_data
    return parts


def comm_section(wl: ThreeLCWorkload, ctx: RunContext, tres: Mapping[str, Mapping[str, Any]],
                 measured: Mapping[str, float | None], profiles: list[str]) -> str:
    """Settling of the framed reduction over the run, communication-time reduction (the
    hardware-independent number) and compute + modelled communication (labelled)."""
    from .settings import s_key

    given = ctx.options.get("compute_seconds_per_step")
    rows = []
    for m, r in tres.items():
        k = s_key(wl.methods[m].params["sparsity"])
        st = r["stages"]
        if "framed_per_step" not in st["push"]:
            continue
        per = [a + b for a, b in zip(st["push"]["framed_per_step"], st["pull"]["framed_per_step"])]
        fp32_step = r["summary"]["baseline_fp32_bytes"] / r["summary"]["steps"]
        q = max(len(per) // 4, 1)
        quarters = [fp32_step * len(per[i : i + q]) / sum(per[i : i + q]) for i in range(0, len(per) - len(per) % q, q)]
        comp = r.get("compute_step_s") or [0.0]
        meas = r.get("measured_step_s") or [0.0]
        verdict = measured.get(f"traffic.settled.s{k}")
        verdict_text = "—" if verdict is None else "settled" if verdict else "**not settled** (claim provisional)"
        row = [k, " → ".join(f"{x:.0f}×" for x in quarters), verdict_text, fmt_num(measured.get(f"traffic.settle.s{k}")),
               f"**{fmt_num(measured.get(f'traffic.reduction_settled.s{k}'))}×**",
               fmt_num(sum(comp) / len(comp)), fmt_num((sum(meas) - sum(comp)) / len(meas))]
        for p in profiles:
            row += [f"{fmt_num(measured.get(f'comm.reduction.{p}.s{k}'))}×", f"{fmt_num(measured.get(f'time.reduction_modelled.{p}.s{k}'))}×"]
        rows.append(row)
    if not rows:
        return "No framed traffic was recorded."
    settled = wl.settled_from(ctx, traffic_cell=wl.traffic_config(ctx) is not None)
    tp = traffic_preset(ctx.preset) if wl.traffic_config(ctx) is not None else ctx.preset
    window = (tp or {}).get("settle_window")
    header = ["s", "framed reduction per quarter of the steps",
              f"settle verdict ({window}-step windows from step {settled} within {float((tp or {}).get('settle_tolerance', 0.15)) * 100:g}% of the last)"
              if window else "settle verdict", "settle (|last/previous quarter − 1|)",
              f"steady-state reduction (steps ≥ {settled})", "compute s/step (measured here)",
              "3LC codec + server step s/step (measured here)"]
    for p in profiles:
        header += [f"comm-time reduction {p}", f"total-time reduction {p} (*modelled*)"]
    comp_text = (f"compute = **{given:g} s per step, as given** (`--compute-seconds-per-step`)" if given is not None
                 else "compute = the slowest worker's forward/backward measured on this machine (1 thread)")
    return (
        f"Steady state: the steps from {settled} on of each cell (`settled_from`; where the traffic cells branch from a shared "
        "warm-up, the branch's own steps, counted from the branch); the traffic claims, the communication-time and modelled time reductions "
        "count those steps: a long training's first steps from initialisation are a vanishing share of its traffic. The settle verdict "
        "is measured on each cell's own windows: a setting whose windows still move is **not settled** and its traffic claim is "
        "provisional (its label in the claims table says so). "
        "Communication-time reduction = modelled seconds of fp32 push + pull / of the framed 3LC push + pull (α + bytes / β per "
        "phase through the server's link): it depends on the traffic and α only, not on the compute hardware. Total-time "
        f"reduction is *modelled*: (compute + fp32 communication) / (compute + 3LC's codec time + framed communication), {comp_text}; "
        "3LC's codec time (encode, decode, the server's step) is this machine's CPU time. Settle: the framed reduction per quarter of the "
        "steps shows how far the gradient statistics still move at the end of the run.\n\n" + md_table(header, rows)
    )


def resnet_size(depth: int, width: int, in_channels: int) -> tuple[int, int]:
    """``(parameters, tensors)`` of a :class:`~.model.CifarResNet` (built on the meta device: no memory)."""
    import torch

    from .model import CifarResNet

    with torch.device("meta"):
        m = CifarResNet(depth, width, in_channels)
    ps = list(m.parameters())
    return sum(p.numel() for p in ps), len(ps)


def discussion(wl: ThreeLCSettings, ctx: RunContext, res: Mapping[str, Mapping[str, Any]],
               measured: Mapping[str, float | None], stage_data: Mapping[str, Mapping[str, Any]]) -> str:
    """The honest reading of this run's numbers (generated from them)."""
    lines = []
    if stage_data:
        qs = measured.get("quartic.saving")
        gains = {k: measured.get(f"zero_run.gain.s{k}") for k in stage_data}
        below = [k for k, g in gains.items() if g is not None and g < 2.0]
        lines.append(
            f"- **Lossless stages.** Quartic encoding is {fmt_num(qs * 100 if qs is not None else None)}% smaller than 2-bit packing "
            f"({fmt_num(measured.get('quartic.bits'))} bits per value): exact arithmetic (⌈n/5⌉ against ⌈n/4⌉ bytes; tensors of a "
            "few values save less), the paper's 'about 20%'. Zero-run encoding gains "
            + ", ".join(f"{fmt_num(g)}× at s={k}" for k, g in gains.items())
            + " on top of quartic: it grows with s because a larger M sends more values to 0 (the *zeros* column). "
            + (f"Below the paper's '2× or more' at s = {', '.join(below)}. " if below else "The paper's '2× or more' holds at every s here. ")
            + "The pushed gradients compress better than the pulled model changes (the push / pull column): the server's "
            "momentum averages gradients over steps, so its changes are less dominated by a few large values and fewer of them "
            "round to 0 (on i.i.d. Gaussian noise, s = 1 gives 1.78×)."
        )
        k0 = next(iter(stage_data))
        d0 = stage_data[k0]
        hdr_share = d0["header"] / d0["payload"]
        params, tensors = d0["params"], d0["tensors"]
        lines.append(
            "- **Total reduction.** From the bytes actually sent (framed: the header once per link and tensor, then a reference): "
            + ", ".join(f"{fmt_num(measured.get(f'traffic.reduction.s{k}'))}× (s={k})" for k in stage_data)
            + "; counting only 3LC's streams (zero-run data + scales): "
            + ", ".join(f"{fmt_num(measured.get(f'traffic.reduction_streams.s{k}'))}×" for k in stage_data)
            + "; with gcbench's self-describing payload header in every message: "
            + ", ".join(f"{fmt_num(measured.get(f'traffic.reduction_self_describing.s{k}'))}×" for k in stage_data)
            + f". This model has {tensors} tensors for {params:,} parameters, so at s={k0} the self-describing header would be "
            f"{hdr_share * 100:.0f}% of what 3LC sends."
        )
        # an estimate at the paper's model size, labelled as such (not needed when ResNet-110 ran)
        try:
            if params > 1_000_000:
                raise LookupError("measured at ResNet-110 size")
            p110, t110 = resnet_size(110, 16, 3)
            msgs = d0["tensors"]
            hdr_per = (d0["header"] + d0["scale"]) / msgs
            est = []
            for k, d in stage_data.items():
                bits = 8.0 * d["zero_run"] / d["values"]
                est.append(f"{32.0 / (bits + 8.0 * hdr_per * t110 / p110):.0f}× (s={k})")
            lines.append(
                f"- *Estimate, not a measurement:* with this run's zero-run bits per value and its {hdr_per:.0f} bytes of self-describing header + "
                f"scale per tensor and message (no framing), ResNet-110 ({p110:,} parameters in {t110} tensors) would see " + ", ".join(est)
                + ". Whether ResNet-110's error-corrected gradients are as sparse after quantization as this small model's is not known here."
            )
        except LookupError:
            pass
        except Exception as err:  # noqa: BLE001 - the estimate is optional  # pragma: no cover
            lines.append(f"- (The ResNet-110 estimate could not be computed: {type(err).__name__}: {err}.)")
    d1 = measured.get("acc.delta_pp.s1.00")
    worst = measured.get("acc.delta_pp.worst3lc")
    if d1 is not None:
        base = res.get("32bit")
        lines.append(
            f"- **Accuracy.** After {base['summary']['steps'] if base else '?'} steps 3LC s=1.00 ends {fmt_num(d1)} points from 32-bit "
            f"(worst setting {fmt_num(worst)} points). The paper trains ResNet-110 to convergence; error accumulation delays small "
            "gradient components by a few steps, which costs most early in training, so a run this short overstates the gap, "
            "more so for larger s (more values deferred). Not gated: the `full` and `paper` scales are the test of this claim."
        )
    st = measured.get("acc.delta_pp.stoch3-ef")
    if st is not None:
        lines.append(
            f"- **Stochastic 3-value + error accumulation** ends {fmt_num(st)} points from 32-bit (3LC s=1.00: {fmt_num(d1)}). The "
            "paper reports that this combination did not converge (§3.1 in the notes): the stochastic rounding noise enters the "
            "error memory and is re-sent, on top of the variance stochastic rounding already adds."
        )
    tr = measured.get("time.reduction.threelc-1gbps.best")
    if tr is not None:
        base = res.get("32bit")
        frac = ""
        if base is not None:
            b = base["summary"]
            c = b["modelled_comm_s"].get("threelc-1gbps", 0.0)
            frac = f" Uncompressed, communication is {c / b['total_time_s']['threelc-1gbps'] * 100:.0f}% of a step at 1 Gbps here."
        lines.append(
            f"- **Time.** The best 3LC setting is {fmt_num(tr)}× as fast as 32-bit at 1 Gbps "
            f"({fmt_num(measured.get('time.reduction.threelc-10gbps.best'))}× at 10 Gbps), against the paper's 16–23×.{frac} "
            "The paper's gain needs communication to dominate (ResNet-110's 1.7M parameters on GPUs over 1 Gbps); here a CPU computes a "
            "small model and 3LC's encode/decode (dozens of small tensors per message, both directions, error feedback's decode) "
            "costs more than the bytes it saves."
        )
    if measured.get("stage.mismatches"):
        lines.append(f"- **Warning:** {fmt_num(measured.get('stage.mismatches'))} stage-size mismatches between the real encoders "
                     "and the bookkeeping (see the stage table): the per-stage numbers are suspect.")
    return "\n".join(lines) if lines else "Nothing was run."


# -- plots ---------------------------------------------------------------------------------------------


def _plain_log_axis(axis: Any) -> None:
    """Plain numbers on a log axis (``0.5``, ``2``, ``40``), no labels on minor ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def plot_stages(stage_data: Mapping[str, Mapping[str, Any]], path):
    """Reduction against 32-bit after each stage, one group of bars per s."""
    fig, ax = new_figure(figsize=(7.5, 4.2))
    stages = [("2-bit packed", lambda d: d["fp32"] / d["2bit"]), ("quartic", lambda d: d["fp32"] / d["quartic"]),
              ("zero-run (+scale)", lambda d: d["fp32"] / (d["zero_run"] + d["scale"])),
              ("sent (TrafficLog)", lambda d: d["fp32"] / d["sent"])]
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
    ax.axhspan(39, 107, color="tab:orange", alpha=0.15, label="paper: 39–107×")
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
        ax.set_xlabel(f"time (s): measured compute + modelled comm, {p}")
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
    ax.axvspan(39, 107, color="tab:orange", alpha=0.12, label="paper's 3LC: 39–107×")
    ax.set_xscale("log")
    _plain_log_axis(ax.xaxis)
    ax.set_xlabel("traffic reduction vs 32-bit (×, log; bytes sent, push + pull)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title("traffic against accuracy")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return savefig(fig, path)
