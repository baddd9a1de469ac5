"""The 3LC report's reading of a run: the "What reproduces and what does not" section, generated from
the run's numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gcbench.envs.network import load_profile, server_time

from ..framework.claims import fmt_num
from .settings import LENGTH_GAIN, SETTLED_FLAG, ThreeLCSettings, paper_band, s_key
from .timecurve import machine_compute_s, model_compute_s, step_cost

if TYPE_CHECKING:  # pragma: no cover
    from ..framework.runner import RunContext

#: The claim whose ``meaningful_at`` names the scales that test the paper's accuracy.
ACCURACY_CLAIM = "accuracy-all-s"
#: The profile of the time-1gbps claim.
TIME_PROFILE = "threelc-1gbps"


def direction_sentence(stage_data: Mapping[str, Mapping[str, Any]]) -> str:
    """Which direction's zero-run gain is the larger over the whole run, per s (the push / pull column),
    with one reading of it offered as a hypothesis."""
    push_more = [k for k, d in stage_data.items() if d["direction_gain"]["push"] > d["direction_gain"]["pull"]]
    pull_more = [k for k, d in stage_data.items() if k not in push_more]
    if not pull_more:
        which = "at every s"
    elif not push_more:
        return ("Over the whole run the pulled model changes gain more from zero-run encoding than the pushed gradients at "
                "every s (the push / pull column).")
    else:
        which = f"at s = {', '.join(push_more)} (the pulled model changes gain more at s = {', '.join(pull_more)})"
    return (f"Over the whole run the pushed gradients gain more from zero-run encoding than the pulled model changes {which} "
            "(the push / pull column; the per-window table shows each direction over time). One reading, not tested here: "
            "the server's momentum averages gradients over steps, so its changes are less dominated by a few large values "
            "and fewer of them round to 0.")


def discussion(wl: ThreeLCSettings, ctx: RunContext, res: Mapping[str, Mapping[str, Any]],
               measured: Mapping[str, float | None], stage_data: Mapping[str, Mapping[str, Any]]) -> str:
    """The honest reading of this run's numbers (generated from them). ``res``: every training cell by
    method name; ``ctx``: the run (its scale decides whether the accuracy claims are tested at it, its
    options whether compute was given)."""
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
            + (f"Over this run, below the paper's '2× or more' at s = {', '.join(below)}" if below
               else "Over this run the paper's '2× or more' holds at every s")
            + " (the zero-run claims judge it at the scales that can test it; the per-window tables show how the run's ratio moved). "
            + direction_sentence(stage_data)
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
    excess = {s_key(sp): measured.get(f"train.excess_loss.s{s_key(sp)}") for sp in wl.sparsities}
    if excess.get("1.00") is not None:
        lines.append(
            "- **Does 3LC train.** Final held-out loss above the 32-bit run's, as a share of 32-bit's fall from the shared "
            "initial loss (0: as far as 32-bit, 1: no progress): "
            + ", ".join(f"{fmt_num(v)} at s={k}" for k, v in excess.items() if v is not None)
            + ". The gate (trains-s1.00) asks at most 0.5 at s = 1.00: a loose check that the method trains at all, "
            "not the paper's accuracy claim."
        )
    d1 = measured.get("acc.delta_pp.s1.00")
    if d1 is not None:
        lines.append(accuracy_line(wl, ctx, res, d1, measured.get("acc.delta_pp.worst3lc"), measured))
    st = measured.get("acc.delta_pp.stoch3-ef")
    if st is not None:
        lines.append(
            f"- **Stochastic 3-value + error accumulation** ends {fmt_num(st)} points from 32-bit (3LC s=1.00: {fmt_num(d1)}). The "
            "paper reports that this combination did not converge (§3.1 in the notes): the stochastic rounding noise enters the "
            "error memory and is re-sent, on top of the variance stochastic rounding already adds."
        )
    tr = measured.get("time.reduction_modelled.threelc-1gbps.best")
    if tr is not None:
        lines.append(time_line(wl, ctx, res, measured, tr))
    if measured.get("stage.mismatches"):
        lines.append(f"- **Warning:** {fmt_num(measured.get('stage.mismatches'))} stage-size mismatches between the real encoders "
                     "and the bookkeeping (see the stage table): the per-stage numbers are suspect.")
    return "\n".join(lines) if lines else "Nothing was run."


def accuracy_scales(wl: ThreeLCSettings) -> tuple[str, ...]:
    """The scales at which the accuracy claims are tested (:data:`ACCURACY_CLAIM`'s ``meaningful_at``)."""
    claim = next((c for c in wl.spec.claims if c.id == ACCURACY_CLAIM), None)
    return tuple(claim.meaningful_at or ()) if claim is not None else ()


def accuracy_line(wl: ThreeLCSettings, ctx: RunContext, res: Mapping[str, Mapping[str, Any]], d1: float,
                  worst: float | None, measured: Mapping[str, float | None] | None = None) -> str:
    """The accuracy reading: at a scale that tests the accuracy claims, whether its schedule settled (the
    ``long-32bit`` cell); below them, the short-run caveat."""
    base = res.get("32bit")
    scales = accuracy_scales(wl)
    text = (f"- **Accuracy.** After {base['summary']['steps'] if base else '?'} steps 3LC s=1.00 ends {fmt_num(d1)} points "
            f"from 32-bit (the setting farthest from it: {fmt_num(worst)} points). ")
    if ctx.scale in scales:
        return text + settled_text(ctx, measured or {})
    where = " and ".join(f"`{s}`" for s in scales) or "no scale of this package"
    return text + ("The paper trains ResNet-110 to convergence; error accumulation delays small gradient components by a "
                   "few steps, which costs most early in training, so a run this short overstates the gap, more so for "
                   f"larger s (more values deferred). Not gated: {where} {'is' if len(scales) == 1 else 'are'} the test of this claim.")


def settled_text(ctx: RunContext, measured: Mapping[str, float | None]) -> str:
    """Whether the scale's schedule ends where longer training would (:data:`.settings.SETTLED_FLAG`)."""
    f = ctx.preset.get("length_check")
    gain, flag = measured.get(LENGTH_GAIN), measured.get(SETTLED_FLAG)
    if f is None or gain is None:
        return (f"The `{ctx.scale}` scale is one of those that test the paper's 'almost unchanged' accuracy, but this run "
                "did not train the 32-bit run over a longer schedule, so whether its schedule ends where longer training "
                "would is not known: the accuracy claims are not run.")
    said = (f"The 32-bit run trained over the same schedule stretched to {int(f)}× the steps ends {fmt_num(abs(gain))} points "
            f"{'above' if gain >= 0 else 'below'} this run's 32-bit accuracy; ")
    if flag is None:
        return said + "that longer run diverged, so it cannot say whether this schedule settled: the accuracy claims are not run."
    if flag == 1.0:
        return said + ("within the accuracy claims' tolerance, so this schedule ends where longer training would and the run "
                       "tests the paper's 'almost unchanged' accuracy (the accuracy claims; not gated).")
    return said + ("more than the accuracy claims' tolerance: longer training still gains, the gap at this length is one of "
                   "how fast the methods progress as much as of where they end, and the accuracy claims are *not at this scale*.")


def free_communication(res: Mapping[str, Mapping[str, Any]], method: str, given: float | None,
                       profile: str = TIME_PROFILE) -> tuple[float, float] | None:
    """``(share, bound)`` on ``profile`` of the modelled 32-bit step that the time claim prices
    (:func:`.timecurve.step_cost` of ``method``'s cell: shared compute, the 32-bit run's step time beyond
    compute, fp32 push and pull): communication's share of it, and how many times as fast the step
    would be with no communication at all, ``t32 / (compute + the 32-bit run's other step time)``, the
    bound of any codec's modelled reduction here. None without the 32-bit cell or per-step times."""
    base, cell = res.get("32bit"), res.get(method)
    if base is None or cell is None:
        return None
    cells = {f"train-{m}": r for m, r in res.items()}
    cost = step_cost(cell, model_compute_s(cells, given), base, machine_compute_s(cells))
    if cost is None:
        return None
    comm = 2 * server_time(cost.fp32_bytes, load_profile(profile).link)
    rest = cost.compute_s + cost.baseline_other_s
    return comm / (rest + comm), (rest + comm) / rest


def time_line(wl: ThreeLCSettings, ctx: RunContext, res: Mapping[str, Mapping[str, Any]],
              measured: Mapping[str, float | None], tr: float) -> str:
    """The modelled time reading: the best setting against the paper's 16-23x, the bound free
    communication would give, and what computed the step (given compute, or the run's device)."""
    given = ctx.options.get("compute_seconds_per_step")
    per_s = {s_key(sp): measured.get(f"time.reduction_modelled.{TIME_PROFILE}.s{s_key(sp)}") for sp in wl.sparsities}
    best = next((k for k, v in per_s.items() if v == tr), None)
    frac = ""
    bound = free_communication(res, f"3lc-s{best}", given) if best else None
    if bound is not None:
        share, most = bound
        frac = (f" Uncompressed, modelled communication is {share * 100:.0f}% of the modelled 32-bit step at 1 Gbps here "
                "(the step the time claim prices: the shared compute, the 32-bit run's other step time, fp32 push and pull), "
                f"so even free communication would make a step at most {fmt_num(most)}× as fast.")
    cfg = wl.run_config(ctx)
    cell = res.get(f"3lc-s{best}") or next(iter(res.values()), None)
    size = f" ({cell['summary']['params']:,} parameters in {cell['summary']['tensors']} tensors)" if cell else ""
    device = next((str(r["device"]) for r in res.values() if r.get("device")), "cpu")
    how = "as given" if given is not None else "the median of all training cells' steps"
    if given is not None:
        who = f"compute is the given {given:g} s per step (`--compute-seconds-per-step`) for ResNet-{cfg.depth}{size}"
    else:
        who = f"{'a CPU' if device == 'cpu' else f'the `{device}` device'} computes ResNet-{cfg.depth}{size}"
    return (
        f"- **Time (modelled).** Per step, the best 3LC setting{f' (s={best})' if best else ''} is *modelled* {fmt_num(tr)}× as fast "
        f"as 32-bit at 1 Gbps ({fmt_num(measured.get('time.reduction_modelled.threelc-10gbps.best'))}× at 10 Gbps; every setting: "
        + ", ".join(f"{fmt_num(v)}× at s={k}" for k, v in per_s.items() if v is not None)
        + f"; compute one time for every setting ({how}), "
        "codec time each setting's share of compute priced at this machine's compute, communication modelled: the "
        f"time-1gbps claim's quantity), against the paper's {paper_band(wl.spec, 'time.reduction')[2]}.{frac} "
        "A 16× shorter step needs everything but communication to be at most a sixteenth of the uncompressed step "
        "(the paper's model is ResNet-110, 1.7M parameters; our source does not give its network's speed); here "
        f"{who}, and 3LC's encode and decode (every tensor in every message, both directions, measured in this run) "
        + ("cost more than the bytes they save." if tr < 1 else "take back part of what its smaller messages save.")
    )
