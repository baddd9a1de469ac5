"""Modelled training-time reduction of 3LC over link bandwidth.

The paper's 16-23x is ResNet-110's total training time on its own cluster and network, which our
source does not describe. What this machine can say is *modelled*: per step, (compute + the 32-bit run's other work + fp32 push + fp32
pull) / (compute + 3LC's codec time + framed push + framed pull), compute and the step time beyond it
(3LC's codec and the server's step; the 32-bit run's identity payloads and server step) measured here, each phase ``alpha + bytes /
beta`` through the server's link (:func:`gcbench.envs.network.server_time`). As the link slows the
reduction tends to the traffic ratio; as it speeds up, to the compute share. :func:`bandwidth_for`
finds the bandwidth at which a target reduction (16x, 23x) is reached.

Compute is one number per model (:func:`model_compute_s`): every setting's step runs the same
forward/backward (same model, batch and data), so the modelled step of every setting prices it alike,
at the median over all those cells' measured steps; a cell's own compute time moves with the
machine's load while it ran, and would make the settings' modelled times differ by that load, not by
3LC. Codec time (the step beyond compute) is priced by the same rule (:func:`codec_share`): load
slows a step's codec work as it slows its forward/backward (one thread on the same CPU, within the
same step), so each setting's codec time is the median over its steps of (step - compute) / compute,
a ratio load cancels from, times the machine's shared compute time (:func:`machine_compute_s`). The
32-bit run's step time beyond compute is priced the same way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.envs.network import Link, server_time
from scipy.optimize import brentq

#: The curve's bandwidths: 10 Mbps to 10 Gbps, 10 points per decade.
BANDWIDTHS_BPS = tuple(10.0 ** (7 + i / 10) for i in range(31))


@dataclass(frozen=True)
class StepCost:
    """One 3LC run's per-step costs (seconds; bytes through the server's link per phase)."""

    compute_s: float  # forward/backward (the slowest worker's): shared by every setting, measured or given
    codec_s: float    # step time beyond compute (3LC's encode/decode, the server's step): codec_share x the machine's compute
    fp32_bytes: float  # one direction (push or pull), every worker, uncompressed
    push_bytes: float  # framed, mean per step
    pull_bytes: float
    baseline_other_s: float = 0.0  # the 32-bit run's step time beyond compute (its server step), priced as codec_s


def beyond_compute_s(result: Mapping[str, Any]) -> float | None:
    """A cell's mean measured step time beyond its forward/backward (None without both series):
    information only, it moves with the machine's load while the cell ran; the modelled step prices
    :func:`codec_share` instead."""
    measured, compute = result.get("measured_step_s") or [], result.get("compute_step_s") or []
    if not measured or len(measured) != len(compute):
        return None
    return sum(m - c for m, c in zip(measured, compute)) / len(measured)


def codec_share(result: Mapping[str, Any]) -> float | None:
    """The median over a cell's steps of its step time beyond the forward/backward as a share of
    that forward/backward, ``(measured - compute) / compute`` (None without both series or with a
    step of no compute). Both parts of a step run on the same thread while the machine is under the
    same load, so load that slows the step scales both and leaves the share; the median, so that a
    step slowed in one part only moves it little."""
    measured, compute = result.get("measured_step_s") or [], result.get("compute_step_s") or []
    if not measured or len(measured) != len(compute) or any(not c > 0 for c in compute):
        return None
    return statistics.median((m - c) / c for m, c in zip(measured, compute))


def median_compute_s(cells: Iterable[Mapping[str, Any]]) -> float | None:
    """The median over every step of ``cells`` of the measured forward/backward seconds (the slowest
    worker's, ``compute_step_s``); None where no cell recorded one. A median, not a mean: a step slowed
    by other work on the machine moves it little."""
    steps = [float(c) for r in cells for c in (r.get("compute_step_s") or [])]
    return statistics.median(steps) if steps else None


def machine_compute_s(results: Mapping[str, Mapping[str, Any]]) -> float | None:
    """This machine's forward/backward seconds per step: :func:`median_compute_s` over all the
    ``train-`` cells (32-bit, every 3LC setting and comparator: one model, batch and data). The
    ``tie-`` cell trains another model (ResNet-110) and has no modelled time, so its compute joins no
    median. Codec shares (:func:`codec_share`) are priced at it, whatever compute time is modelled."""
    return median_compute_s(r for k, r in results.items() if k.startswith("train-"))


def model_compute_s(results: Mapping[str, Mapping[str, Any]], given: float | None = None) -> float | None:
    """The compute seconds per step that every setting's modelled step uses: ``given``
    (``--compute-seconds-per-step``) where set, else :func:`machine_compute_s`."""
    if given is not None:
        return float(given)
    return machine_compute_s(results)


def step_cost(result: Mapping[str, Any], compute_s: float | None = None,
              baseline: Mapping[str, Any] | None = None, machine_s: float | None = None) -> StepCost | None:
    """The per-step costs of one 3LC cell (None without per-step framed bytes and times): bytes its
    means. ``compute_s``: the forward/backward time shared by every setting (:func:`model_compute_s`;
    None: this cell's own median, for a cell priced alone); ``machine_s``: the measured compute time
    the codec shares are priced at (:func:`machine_compute_s`; None: this cell's own median), so
    codec time = :func:`codec_share` x ``machine_s``, this machine's even where ``compute_s`` is given;
    ``baseline``: the 32-bit cell, whose step time beyond compute the 32-bit side pays, priced the
    same way (none: 0)."""
    s, st = result["summary"], result["stages"]
    push, pull = st.get("push", {}).get("framed_per_step"), st.get("pull", {}).get("framed_per_step")
    share = codec_share(result)
    if not push or not pull or share is None:
        return None
    own = median_compute_s([result])
    comp = float(compute_s) if compute_s is not None else own
    ref = float(machine_s) if machine_s is not None else own
    if comp is None or ref is None:
        return None
    other = codec_share(baseline) if baseline is not None else None
    return StepCost(comp, share * ref, s["baseline_fp32_bytes"] / s["steps"] / 2, sum(push) / len(push), sum(pull) / len(pull),
                    (other or 0.0) * ref)


def reduction_at(cost: StepCost, bandwidth_bps: float, latency_s: float) -> float:
    """Modelled time reduction per step at ``bandwidth_bps`` (bits per second) and latency ``latency_s``."""
    link = Link(latency_s, bandwidth_bps / 8.0)
    t32 = cost.compute_s + cost.baseline_other_s + 2 * server_time(cost.fp32_bytes, link)
    t3 = cost.compute_s + cost.codec_s + server_time(cost.push_bytes, link) + server_time(cost.pull_bytes, link)
    return t32 / t3


def bandwidth_for(cost: StepCost, target: float, latency_s: float, lo: float = 1e5, hi: float = 1e12) -> float | None:
    """The bandwidth (bits per second) at which the modelled reduction equals ``target``: the link
    must be this slow or slower. None when even ``lo`` does not reach it (the traffic ratio is below
    the target); ``hi`` when every bandwidth up to ``hi`` does. Brent's method on a log scale
    (:func:`scipy.optimize.brentq`; the reduction falls monotonically with bandwidth when the traffic
    ratio exceeds the compute share)."""
    if reduction_at(cost, lo, latency_s) < target:
        return None
    if reduction_at(cost, hi, latency_s) >= target:
        return hi
    log_bw = brentq(lambda x: reduction_at(cost, math.exp(x), latency_s) - target, math.log(lo), math.log(hi), xtol=1e-12)
    return math.exp(log_bw)


def curve(cost: StepCost, latency_s: float, bandwidths: Sequence[float] = BANDWIDTHS_BPS) -> list[float]:
    """The modelled reduction at each bandwidth."""
    return [reduction_at(cost, b, latency_s) for b in bandwidths]


__all__ = ["BANDWIDTHS_BPS", "StepCost", "bandwidth_for", "beyond_compute_s", "codec_share", "curve", "machine_compute_s", "median_compute_s",
           "model_compute_s", "reduction_at", "step_cost"]
