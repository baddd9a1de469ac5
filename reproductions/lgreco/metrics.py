"""What the L-GreCo report measures from a method's run: compression ratios, per-step bytes, and
throughput, measured and *modelled* on a cluster profile (synchronous buckets, or overlapped with
the backward pass: :func:`overlapped_steps`).

Each function reads one method's result of a cell (rank 0's traffic log and step times); W&B
tracking, deriving and reporting all use them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from gcbench.envs.adaptive import ACCORDION_PAIR
from gcbench.envs.network import collective_time, comm_time, load_profile, overlapped_step_s
from gcbench.envs.traffic import TrafficLog


def traffic_log(run: Mapping[str, Any]) -> TrafficLog:
    """Rank 0's traffic log of a method's run."""
    return TrafficLog.from_dict(run["traffic"])


def compression_ratio(run: Mapping[str, Any], since: int = 0) -> float:
    """Uncompressed gradient bytes / wire bytes of rank 0 from step ``since`` on
    (:meth:`gcbench.envs.traffic.TrafficLog.compression_ratio`: ``inf`` when nothing was sent, ``nan``
    when nothing was recorded from ``since`` on, which a run of more steps than ``since`` never is)."""
    return traffic_log(run).compression_ratio(since=since)


def per_step_bytes(run: Mapping[str, Any]) -> tuple[dict[int, int], dict[int, int]]:
    """Uncompressed gradient bytes and wire bytes of rank 0, per step."""
    log = traffic_log(run)
    raw: dict[int, int] = {}
    wire: dict[int, int] = {}
    for r in log.raw_records:
        raw[r.step] = raw.get(r.step, 0) + r.nbytes
    for r in log.wire_records:
        wire[r.step] = wire.get(r.step, 0) + r.nbytes
    return raw, wire


def step_ratios(run: Mapping[str, Any]) -> dict[int, float]:
    """Uncompressed / wire bytes of rank 0 per step, for plots and per-step logs: NaN (a gap) for a step
    that sent nothing, where :func:`compression_ratio` of that one step would be ``inf``."""
    raw, wire = per_step_bytes(run)
    return {s: raw[s] / wire[s] if wire.get(s) else math.nan for s in sorted(raw)}


def per_step_ratio(run: Mapping[str, Any]) -> list[float]:
    """:func:`step_ratios` in step order."""
    return list(step_ratios(run).values())


def throughput(run: Mapping[str, Any], cfg: Mapping[str, Any], profile: str | None, *, overlap: bool = False,
               held: bool = False) -> float:
    """Samples/s (images, or sequences of an LM, whose callers multiply by the context for tokens/s): ``batch``
    x workers over the median step after the warm-up (steps from ``warmup + 1`` on; every step for a run no
    longer than that), measured (profile None: the run's ``workers`` and step times) or modelled on
    ``profile`` (its workers; each step as :func:`modelled_steps`, or with ``overlap`` :func:`overlapped_steps`,
    ``held`` as there)."""
    warm = cfg["warmup"] + 1
    steps = run["step_s"][warm:] or run["step_s"]
    if profile is None:
        return cfg["workers"] * cfg["batch"] / statistics.median(steps)
    if len(run["step_s"]) <= warm:  # a run shorter than its warm-up (the steps override): every step counts
        warm = 0
    per = (overlapped_steps(run, profile, held=held) if overlap else modelled_steps(run, profile))[warm:]
    return load_profile(profile).workers * cfg["batch"] / statistics.median(per)


def modelled_steps(run: Mapping[str, Any], profile: str) -> list[float]:
    """Each step's seconds on ``profile``: measured step time minus measured communication plus
    the step's traffic priced by :func:`gcbench.envs.network.comm_time` at the profile's workers."""
    log = traffic_log(run)
    comm_meas: dict[int, float] = {}
    for r in log.time_records:
        if r.phase == "comm":
            comm_meas[r.step] = comm_meas.get(r.step, 0.0) + r.seconds
    modelled = _priced_steps(log, profile)
    return [max(s - comm_meas.get(i, 0.0), 0.0) + modelled[i] for i, s in enumerate(run["step_s"])]


def hook_seconds(log: TrafficLog) -> tuple[dict[int, float], dict[int, float]]:
    """Per step, rank 0's measured seconds in the hook (encode, decode and communication) and in the codec alone
    (encode and decode)."""
    hook: dict[int, float] = {}
    codec: dict[int, float] = {}
    for r in log.time_records:
        if r.phase in ("encode", "decode", "comm"):
            hook[r.step] = hook.get(r.step, 0.0) + r.seconds
        if r.phase in ("encode", "decode"):
            codec[r.step] = codec.get(r.step, 0.0) + r.seconds
    return hook, codec


def compute_steps(run: Mapping[str, Any]) -> list[float]:
    """Each step's measured compute: the measured step minus the hook's measured encode, decode and
    communication seconds (a lower bound of the compute when the run overlapped), the compute the
    overlapped model takes (:func:`overlapped_steps`)."""
    hook, _ = hook_seconds(traffic_log(run))
    return [max(s - hook.get(i, 0.0), 0.0) for i, s in enumerate(run["step_s"])]


def link_steps(run: Mapping[str, Any], profile: str) -> list[float]:
    """Each step's traffic priced on ``profile`` at its workers (:func:`gcbench.envs.network.comm_time`): the
    step's *modelled* link seconds, with nothing of the compute."""
    return _priced_steps(traffic_log(run), profile)


def _priced_steps(log: TrafficLog, profile: str) -> list[float]:
    """:func:`link_steps` of an already parsed traffic log."""
    prof = load_profile(profile)
    return list(comm_time(log, prof, workers=prof.workers).per_step_s)


def median_after_warmup(per_step: list[float], warmup: int) -> float:
    """The median of ``per_step`` over the steps after the warm-up (from ``warmup + 1`` on, as
    :func:`throughput` counts them; every step for a run no longer than that)."""
    return statistics.median(per_step[warmup + 1:] or per_step)


def overlapped_steps(run: Mapping[str, Any], profile: str, *, held: bool = False) -> list[float]:
    """Each step's *modelled* seconds on ``profile`` when buckets communicate while the backward
    pass goes on (:func:`gcbench.envs.network.overlapped_step_s`, L-GreCo Fig. 10).

    Per step (rank 0's records): compute = measured step - the hook's measured encode, comm and
    decode seconds (a lower bound of the compute when the run itself overlapped); bucket ``b`` in
    the order its collectives ran carries its collectives priced on the profile plus the step's
    measured encode+decode seconds split by the bucket's share of the gradient bytes; a policy's
    broadcast (bucket -1) runs before the first bucket. ``held``: whole-model compression, every
    bucket waits for the end of the backward pass (``gcbench_global_hook``).
    """
    log = traffic_log(run)
    prof = load_profile(profile)
    hook, codec = hook_seconds(log)
    bucket_of = {(r.step, r.seq): r.bucket for r in log.wire_records}
    raw: dict[tuple[int, int], int] = {}
    for r in log.raw_records:
        raw[(r.step, r.bucket)] = raw.get((r.step, r.bucket), 0) + r.nbytes
    comm: dict[int, dict[int, float]] = {}  # step -> bucket -> modelled seconds, buckets in run order
    for c in log.collectives():
        per = comm.setdefault(c.step, {})
        b = bucket_of[(c.step, c.seq)]
        per[b] = per.get(b, 0.0) + collective_time(c, prof.link, prof.workers)
    out = []
    for i, s in enumerate(run["step_s"]):
        per = dict(comm.get(i, {}))
        pre = per.pop(-1, 0.0)
        buckets = list(per)
        shares = [float(raw.get((i, b), 0)) for b in buckets]
        total = sum(shares) or 1.0
        times = [per[b] + codec.get(i, 0.0) * sh / total for b, sh in zip(buckets, shares)]
        compute = max(s - hook.get(i, 0.0), 0.0)
        out.append(pre + overlapped_step_s(compute, shares, times, held=held))
    return out


def accordion_critical_share(uniform_ratio: float | None, accordion_ratio: float | None) -> float | None:
    """The share of training at Accordion's low-compression setting (2D, its critical regimes) that a
    uniform setting's and Accordion's compression ratios imply, where bytes grow in proportion to the
    setting (PowerSGD's rank: ``r (m + n)`` per matrix): Accordion's mean setting is ``D x uniform /
    accordion = f 2D + (1 - f) D/2`` (:data:`gcbench.envs.adaptive.ACCORDION_PAIR`). Bytes sent
    uncompressed (1-D parameters, headers) pull both ratios towards each other, so this under-states
    the share where Accordion sends more than the uniform setting and over-states it where it sends
    less. None without both ratios."""
    if not (uniform_ratio and accordion_ratio and math.isfinite(uniform_ratio) and math.isfinite(accordion_ratio)):
        return None
    lo, hi = ACCORDION_PAIR
    return (uniform_ratio / accordion_ratio - lo) / (hi - lo)


def uniform_forced_share(steps: int, warmup: int, every: int, since: int = 0) -> float | None:
    """The share of the ratio window (steps ``since`` to ``steps``) in which every adaptive method (L-GreCo,
    CGX-kmeans, Accordion, L-GreCo + Accordion) still sends the uniform setting because the schedule has
    not yet reached its first decision (step ``warmup + every``): a function of the configuration only (no
    measurement). A window ratio of an adaptive method mixes these steps, at the uniform setting's bytes,
    with the steps after its first decision. None for an empty window."""
    window = steps - since
    if window <= 0:
        return None
    return max(0, min(warmup + every, steps) - since) / window


def overhead(run: Mapping[str, Any], epoch_steps: float | None = None) -> dict[str, float]:
    """L-GreCo's measured overhead in one run (rank 0's decisions: error tables + accumulation, DP +
    broadcast, in seconds).

    * ``run_share`` / ``run_error_share``: the seconds of all the run's decisions (of the error tables and
      accumulation alone) over the run's summed step seconds, which include them: the share this run spent
      at its own decision interval;
    * ``epoch_share`` / ``epoch_error_share`` (only with ``epoch_steps``, the steps of one epoch of the run's
      training data): Table 1's share at one decision per epoch (Sec. 4), one decision's mean seconds (the
      mean over the run's decisions) over themselves plus ``epoch_steps`` of the run's mean step without a
      decision;
    * ``first_over_later`` (only with two decisions or more): the first decision's seconds over the mean of the
      later ones' (the first also builds the ladder's cost tables, which the later ones reuse);
    * ``dp_s_per_decision``, ``tables_s_per_decision``, ``decisions`` and ``train_s`` (the summed step seconds).
    """
    total = sum(run["step_s"])
    # per decision: error tables + accumulation, the DP, the broadcast
    parts = [(d.get("tables_s", 0.0) + d.get("accumulate_s", 0.0), d.get("dp_s", 0.0), d.get("broadcast_s", 0.0))
             for d in run["decisions"]]
    tables = sum(t for t, _, _ in parts)
    dp = sum(x + b for _, x, b in parts)
    n = len(parts)
    nan = float("nan")
    out = {"run_share": (tables + dp) / total if total else nan, "run_error_share": tables / total if total else nan,
           "dp_s_per_decision": sum(x for _, x, _ in parts) / n if n else nan,
           "tables_s_per_decision": tables / n if n else nan, "decisions": float(n), "train_s": total}
    each = [t + x + b for t, x, b in parts]
    if n >= 2 and statistics.fmean(each[1:]) > 0:
        out["first_over_later"] = each[0] / statistics.fmean(each[1:])
    if epoch_steps and n and run["step_s"]:
        step = (total - tables - dp) / len(run["step_s"])
        period = epoch_steps * step + (tables + dp) / n
        out["epoch_share"] = (tables + dp) / n / period
        out["epoch_error_share"] = tables / n / period
    return out


def accordion_forced_share(steps: int, warmup: int, every: int, since: int = 0) -> float | None:
    """The least share of the ratio window (steps ``since`` to ``steps``) at Accordion's low-compression
    setting 2D that the schedule alone forces, whatever Accordion's detector finds, counted as
    :func:`accordion_critical_share` counts it: every method keeps the uniform setting D until its first
    decision (step ``warmup + every``), which weighs as 1/3 of a step at 2D (``D = f 2D + (1 - f) D/2``
    at ``f = 1/3``), and Accordion's first decision is critical in every layer (it has no earlier norms
    to compare, :class:`gcbench.compressors.adaptive.comparators.Accordion`), so the next ``every`` steps
    are at 2D. A function of the configuration only (no measurement). None for an empty window."""
    uniform = uniform_forced_share(steps, warmup, every, since)
    if uniform is None:
        return None
    lo, hi = ACCORDION_PAIR
    first = warmup + every
    critical = max(0, min(first + every, steps) - max(first, since))
    return uniform * (1.0 - lo) / (hi - lo) + critical / (steps - since)
