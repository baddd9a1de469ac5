"""The SketchML report's message-level and calibration sections, and the words for a run's message size.

The message-level experiment (table ``msg``) runs at the size its preset's ``paper_messages`` sets:
KDD12's (:class:`.paperscale.PaperScaleParams`' defaults) at ``claims`` and ``full``, a far smaller one
at ``smoke``. Everything said of it here reads that size from the run's own parameters.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gcbench.tables import md_table

from ..framework.claims import fmt_num
from ..framework.spec import Spec
from .calibration import Fit, Row
from .critical_path import DriverModel
from .paperscale import METHODS as MSG_METHODS
from .paperscale import PaperScaleParams, iteration_times

#: Display names of the methods (spec ``[workload.methods.*]`` labels).
LABELS = {
    "sketchml": "SketchML", "adam-double": "Adam-double", "adam-float": "Adam-float", "zipml8": "ZipML-8bit",
    "zipml16": "ZipML-16bit", "quan_256": "quan_256", "row_4": "row_4", "col_half": "col_d/2",
}


def short_count(n: float) -> str:
    """A count in a few characters: 54000000 -> "54M", 100000 -> "100k", 1117000 -> "1.117M"."""
    n = float(n)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:g}{suffix}"
    return f"{n:g}"


def at_kdd12_size(prm: Mapping[str, Any]) -> bool:
    """Whether the message-level parameters ``prm`` are KDD12's (features, executors, rows per executor:
    :class:`.paperscale.PaperScaleParams`' defaults, derived from Table 1 in the spec)."""
    kdd = PaperScaleParams()
    return (int(prm["features"]), int(prm["workers"]), int(prm["rows_per_worker"])) == (
        kdd.features, kdd.workers, kdd.rows_per_worker)


def message_size(prm: Mapping[str, Any]) -> str:
    """The run's message size in words: "54M features, 10 executors"."""
    return f"{short_count(prm['features'])} features, {int(prm['workers'])} executors"


def message_size_phrase(prm: Mapping[str, Any] | None) -> str:
    """Where the message-level experiment ran, for a sentence: "at KDD12's message size (54M features, 10
    executors)", or "at a reduced message size (100k features, 4 executors; KDD12's: 54M features, 10
    executors)"; without parameters, what the presets set."""
    kdd = message_size(PaperScaleParams().as_dict())
    if prm is None:
        return f"at the message size its preset sets (KDD12's, {kdd}, at `claims` and `full`)"
    if at_kdd12_size(prm):
        return f"at KDD12's message size ({message_size(prm)})"
    return f"at a reduced message size ({message_size(prm)}; KDD12's: {kdd})"


def paper_messages_title(prm: Mapping[str, Any]) -> str:
    """The section title of the message-level experiment: its name, and the size it ran at where that is not
    KDD12's."""
    title = "Measured: one iteration at the paper's message size (Table 4, Fig. 9(a), Fig. 8(c))"
    return title if at_kdd12_size(prm) else f"{title}, run here at a reduced size: {message_size(prm)}"


def paper_words(spec: Spec) -> dict[str, str]:
    """The paper's numbers the report's prose quotes, read from the spec and formatted as the prose sets
    them: Table 4's epochs (``t4.<method>`` s), Adam-double's speed-up over SketchML there
    (``t4_speedup``), Table 2's LR convergence times (``t2.<method>`` h) and their ratios over SketchML's
    (``t2_adam``, ``t2_zipml``), the epochs those times imply (``epochs.<method>``: time / epoch, with
    ZipML-16bit's epoch for ZipML) and SketchML's over Adam's (``epochs_ratio``), and Fig. 8(b)'s
    uncompressed message (``message_mb``)."""
    t4 = {m: float(spec.value(f"t4.{m}.epoch_time").value) for m in ("sketchml", "zipml16", "adam-double")}
    t2 = {m: float(spec.value(f"t2.lr.{m}.converge_time").value) for m in ("sketchml", "adam", "zipml")}
    epochs = {"sketchml": t2["sketchml"] * 3600 / t4["sketchml"], "adam": t2["adam"] * 3600 / t4["adam-double"],
              "zipml": t2["zipml"] * 3600 / t4["zipml16"]}
    return {**{f"t4.{m}": f"{v:g}" for m, v in t4.items()}, **{f"t2.{m}": f"{v:g}" for m, v in t2.items()},
            **{f"epochs.{m}": f"{v:.0f}" for m, v in epochs.items()},
            "t4_speedup": f"{t4['adam-double'] / t4['sketchml']:.1f}", "t2_adam": f"{t2['adam'] / t2['sketchml']:.2f}",
            "t2_zipml": f"{t2['zipml'] / t2['sketchml']:.2f}", "epochs_ratio": f"{epochs['sketchml'] / epochs['adam']:.2f}",
            "message_mb": f"{float(spec.value('fig8.message_mb.adam').value):g}"}


def paper_messages_section(msg: Mapping[str, Any], measured: Mapping[str, Any], profiles: Mapping[str, str],
                           drivers: Mapping[str, DriverModel], paper: Mapping[str, str]) -> str:
    """The message-level experiment: its parameters, a table per method (nominal bandwidth, the driver's
    critical path), and what explains the claims; ``paper``: :func:`paper_words`."""
    prm = msg["params"]
    wk = msg["workers"]
    n_w, per_epoch = int(prm["workers"]), round(1.0 / float(prm["batch_ratio"]))
    kdd = PaperScaleParams()
    share = (f"one executor's share of a {prm['batch_ratio']:.0%} batch of KDD12's train split" if at_kdd12_size(prm) else
             f"one executor's share of a {prm['batch_ratio']:.0%} batch at a reduced size; KDD12's is {kdd.features:,} features, "
             f"{kdd.workers} executors x {kdd.rows_per_worker:,} rows")
    merged = any(min(d.cores, n_w) > 1 for d in drivers.values())
    lines = [
        f"Synthetic KDD-like shards (named as such: `paperscale.kdd_like_shard`): {prm['features']:,} features, {n_w} "
        f"executors x {prm['rows_per_worker']:,} rows ({share}), "
        f"Poisson({prm['nnz_per_row']}) ids per row from the power law r^-{prm['exponent']} at affinely shuffled ids, logistic labels "
        f"(margin sd {prm['signal']}), seed {prm['seed']}. Gradient: {prm['model'].upper()} (batch mean + ℓ2 {prm['l2']} on the "
        "worker's keys) at the generating weights halved. Per executor: "
        f"{fmt_num(sum(x['nnz'] for x in wk) / len(wk))} non-zeros, {fmt_num(sum(x['keys'] for x in wk) / len(wk))} keys "
        f"(density {fmt_num(100 * measured.get('msg.density', float('nan')))}%); the aggregate the driver broadcasts has "
        f"{msg['methods']['sketchml']['agg_keys']:,} keys (density {fmt_num(100 * measured.get('msg.agg_density', float('nan')))}%). "
        f"Generating the shards took {fmt_num(msg['generate_s'])} s (not part of any iteration).",
        "",
        "*Measured* (this machine, CPU seconds of the one working thread, every piece timed alone): compute = the slowest executor's "
        f"gradient; encode = its encoding; driver = the {n_w} decodes (+ sums) scheduled over the driver's cores, then re-encoding "
        "the aggregate; update = one executor's decode of the broadcast + its Adam step. *Modelled (nominal)*: push = α + Σ bytes / β "
        f"(the {n_w} messages share the driver's link), broadcast = α + copies · bytes / β at the profile's nominal bandwidth. "
        f"Epoch = {per_epoch} iterations (batch ratio {prm['batch_ratio']:.0%}), each costing what the measured one did. Critical path: "
        + "; ".join(f"{profiles[t]}: {d.describe()}" for t, d in drivers.items())
        + " (the serial model, one core and one copy per executor, is the last column)."
        + (" The driver time leaves out the merge of its cores' buffers (min(cores, executors) − 1 adds of "
           f"{prm['features']:,} values each; not measured: the spec's driver_cores comment says how to measure it against a decode), so "
           "the driver and epoch times over several cores are understated." if merged else ""),
        "",
    ]
    rows = []
    for m in MSG_METHODS:
        r = msg["methods"][m]
        t = {tag: iteration_times(msg, m, prof, driver=drivers[tag]) for tag, prof in profiles.items()}
        t1 = next(iter(t.values()))
        rows.append([LABELS[m], fmt_num(sum(r["push_bytes"]) / len(r["push_bytes"]) / 1e6), fmt_num(r["down_bytes"] / 1e6),
                     fmt_num(t1["compute_s"]), fmt_num(t1["encode_s"]), fmt_num(sum(r["decode_s"])), fmt_num(t1["update_s"]),
                     *[x for tag in t for x in (fmt_num(t[tag]["driver_s"]), fmt_num(t[tag]["push_s"] + t[tag]["pull_s"]),
                                                fmt_num(t[tag]["epoch_s"]))],
                     fmt_num(measured.get(f"msg.{next(reversed(list(profiles)))}.{m}.serial_epoch_s"))])
    heads = ["method", "message (MB)", "broadcast (MB)", "compute (s)", "encode (s)", "decodes, sum (s)", "update (s)"]
    for tag, prof in profiles.items():
        heads += [f"driver (s), {prof}", f"push + broadcast (s), {prof}, modelled (nominal)", f"epoch (s), {prof}, modelled (nominal)"]
    heads.append(f"epoch (s), {next(reversed(list(profiles.values())))}, serial model, modelled (nominal)")
    lines.append(md_table(heads, rows))
    lines.append("")
    for tag, prof in profiles.items():
        ts = iteration_times(msg, "sketchml", prof, driver=drivers[tag])
        ta = iteration_times(msg, "adam-double", prof, driver=drivers[tag])
        # what the critical path adds besides coding, gradient and transfer: the executor's Adam step
        step = ts["iteration_s"] - ts["coding_s"] - ts["compute_s"] - ts["modelled_s"]
        lines.append(
            f"- **{prof}, modelled (nominal)**: SketchML's iteration {fmt_num(ts['iteration_s'])} s = {fmt_num(ts['coding_s'])} s "
            f"encode/decode ({ts['coding_s'] / ts['iteration_s']:.0%}) + {fmt_num(ts['compute_s'])} s gradient + "
            f"{fmt_num(step)} s Adam step (one executor's update) + "
            f"{fmt_num(ts['modelled_s'])} s modelled transfer ({ts['modelled_s'] / ts['iteration_s']:.0%}); Adam-double's "
            f"{fmt_num(ta['iteration_s'])} s, of which {fmt_num(ta['modelled_s'])} s modelled transfer "
            f"({ta['modelled_s'] / ta['iteration_s']:.0%}; the paper's regime, at least 90.4%, would need its measured "
            f"{fmt_num(ta['measured_s'])} s under {fmt_num(measured.get(f'msg.{tag}.adam-double.measured_budget_s'))} s). "
            f"Speed-up over Adam-double: **{ta['epoch_s'] / ts['epoch_s']:.2f}x** (paper, Table 4 on Cluster-2: {paper['t4_speedup']}x). "
            f"The model's ceiling of that speed-up, Adam-double's modelled transfer over SketchML's "
            f"(`msg.{tag}.ceiling.adam-double`): {fmt_num(measured.get(f'msg.{tag}.ceiling.adam-double'))}x; a time linear "
            "in bytes exceeds it only where Adam-double's measured seconds exceed SketchML's by more than that ratio."
        )
        ms, ma, bs, ba = ts["measured_s"], ta["measured_s"], ts["link_bytes"], ta["link_bytes"]
        if ms > ma and ba > bs:
            lines.append(
                f"  Break-even bandwidth: SketchML costs {fmt_num(ms - ma)} s more measured time per iteration than Adam-double "
                f"and saves {fmt_num((ba - bs) / 1e6)} MB on the driver's link, so it is faster only on links slower than "
                f"**{8 * (ba - bs) / (ms - ma) / 1e9:.3g} Gbps** (this implementation, this machine)."
            )
    return "\n".join(lines)


def calibration_section(fits: Mapping[str, Fit], rows: Sequence[Row], profile: str,
                        measured: Mapping[str, float | None], tag: str, spec_calibration: Mapping[str, Any]) -> str:
    """The calibrated profile: the fit, its rows, the predictions and their misfit, the reverse fit, and the
    model's ceilings (``cal.<tag>.ceiling.<m>`` of ``measured``)."""
    f, rev = fits["fit"], fits["reverse"]
    lines = [
        f"*Modelled (calibrated)*: an epoch of method m on {profile} is T_m = C + coding_m + bytes_m / β, with bytes_m the bytes on "
        "the driver's link per epoch and coding_m the codec seconds on the critical path per epoch (both ours, measured at the "
        "message size above; coding measured on this machine), and C (per-epoch compute) and β (effective bandwidth) fitted by "
        "least squares (scipy `lsq_linear`, C ≥ 0, 1/β ≥ 0) on the paper's own rows (Table 4, run time per epoch). Two rows fix "
        "two unknowns, so a fit is exact on its own rows unless a bound is active; the **misfit on the held-out rows** "
        "(predicted / paper − 1) tests the model.",
        "",
        md_table(["fit", "rows used (Table 4)", "C (s/epoch)", "β (Gbps)"],
                 [["calibrated", ", ".join(LABELS[m] for m in f.fitted_on), fmt_num(f.C_s), f"{f.beta_gbps:.3g}"],
                  ["reverse (check)", ", ".join(LABELS[m] for m in rev.fitted_on), fmt_num(rev.C_s), f"{rev.beta_gbps:.3g}"]]),
        "",
    ]
    body = []
    for r in rows:
        def cell(fit_: Fit) -> list[str]:
            mark = " (fitted)" if r.method in fit_.fitted_on else ""
            mis = fit_.misfit.get(r.method)
            return [fmt_num(fit_.predicted_s[r.method]) + mark, f"{mis:+.0%}" if mis is not None else "—"]
        body.append([LABELS[r.method], fmt_num(r.link_bytes / 1e9), fmt_num(r.coding_s),
                     fmt_num(r.epoch_s) if r.epoch_s is not None else "—", *cell(f), *cell(rev)])
    lines.append(md_table(["method", "link GB/epoch (ours)", "coding s/epoch (ours)", "paper epoch (s)",
                           "calibrated: predicted (s)", "misfit", "reverse fit: predicted (s)", "misfit"], body))
    lines.append("")
    ceilings = {r.method: measured.get(f"cal.{tag}.ceiling.{r.method}") for r in rows if r.method != "sketchml"}
    lines.append(
        "The model's ceiling: with one C for every method, SketchML's speed-up over a method m is at most "
        "T_m / (C + SketchML's bytes / β), its epoch with its coding at zero, T_m the paper's own row of m; the fit, the paper's row "
        "and the wire format's bytes fix it, not SketchML's measured coding. Here (calibrated fit): "
        + ", ".join(f"over {LABELS[m]} {fmt_num(c)}x" for m, c in ceilings.items())
        + " (`cal.<cluster>.ceiling.<m>`). A speed-up claim whose band starts above its ceiling cannot be reached by any coding "
        "speed, and is not at this scale. The nominal-bandwidth numbers above stay beside these, labelled *modelled (nominal)*."
    )
    holds = measured.get(f"cal.{tag}.model_holds")
    if holds is not None:
        cal = spec_calibration
        lines.append("")
        lines.append(
            "The model's held-out test (`cal.<cluster>.model_holds`): the calibrated fit must predict each of "
            + ", ".join(f"{LABELS[m]} ({f.misfit[m]:+.0%})" for m in cal["test"] if m in f.misfit)
            + f" within ±{float(cal['test_tolerance']):.0%} of the paper's; "
            + ("it does here; the calibrated claims are still information at every scale (their reason is in the "
               "table of claims not at this scale)."
               if holds else "it does not, so every calibrated result claim is *not at this scale*: a model that misprices the "
               "paper's own baseline rows by more than the claims' band cannot tell a ratio inside that band from one outside.")
        )
    return "\n".join(lines)
