"""Timed rounds for ``gcbench bench`` and the asv suite's ratios: :func:`interleaved` (each function once
per round, round after round, so that a load change hits baselines and codec alike), the ready buffer a
timed decode writes into (:func:`ready_buffer`) and :func:`stage_timings`.

Per-stage times of one codec's encode for ``gcbench bench``'s ``stage`` rows are read from the
``torch.profiler`` labels the codec puts on its stages (SketchML: ``sketchml/quantile_sketch``,
``sketchml/bucketize``, ``sketchml/group``, ``sketchml/minmax_insert``,
``sketchml/delta_binary_encode``).

Each round runs the baselines (clone, copy) and then one encode under the profiler, so stage
times are interleaved with the baselines like every other row. A stage's time is the wall time
its labelled block took in that encode (summed when a label occurs several times, as the
quantile sketch does once per sign); the profiler's own overhead is included (a few
microseconds per op, small against stages of milliseconds), so the sum of the stages is close to,
not equal to, an unprofiled encode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from ..measure.timing import Timing, measure


def ready_buffer(codec: Any, payload: Any, decoded: torch.Tensor | None = None) -> torch.Tensor | None:
    """A dense buffer of the decoded tensor's shape and dtype (``decoded``: ``codec.decode(payload)``,
    decoded here when not given), its pages touched, for the timed ``decode(payload, out=buf)``; None
    when the payload decodes to sparse COO or the codec's decode takes no ``out`` (then the allocating
    decode is what is timed)."""
    if decoded is None:
        decoded = codec.decode(payload)
    if decoded.layout != torch.strided or getattr(payload, "sparse", False):
        return None
    buf = decoded.clone()  # a copy touches every page, as the copy_ baseline's destination is touched
    try:
        codec.decode(payload, out=buf)
    except TypeError:  # a decode without ``out`` (a wrapper that does not forward it)
        return None
    return buf


def interleaved(
    fns: Mapping[str, Callable[[], Any]], *, repeat: int, warmup: int, device: torch.device | str
) -> dict[str, Timing]:
    """Time each function once per round, ``repeat`` rounds after ``warmup`` untimed rounds.

    Interleaving keeps baselines and codec calls under the same load (a shared machine's speed
    drifts within seconds). Each call is one :func:`gcbench.measure.timing.measure` (CUDA synchronised).
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            samples[name].extend(measure(fn, repeat=1, warmup=0, device=device).samples)
    return {name: Timing(tuple(s), warmup, str(torch.device(device))) for name, s in samples.items()}


def stage_timings(
    encode: Callable[[], Any],
    baselines: Mapping[str, Callable[[], Any]],
    *,
    prefix: str,
    repeat: int,
    warmup: int,
    device: torch.device | str,
) -> dict[str, dict[str, Timing]]:
    """``{stage label without prefix: {"clone", "copy", "encode": Timing}}`` over ``repeat`` rounds.

    Args:
        encode: one encode of the codec (its stages carry ``record_function`` labels).
        baselines: ``{"clone": fn, "copy": fn}``, timed in every round before the encode.
        prefix: the codec's label prefix, e.g. ``"sketchml/"``.
        repeat, warmup: timed and untimed rounds.
        device: where the calls run (CUDA is synchronised by :func:`measure`; stage times are the
            profiler's CPU-side times).
    """
    for _ in range(warmup):
        encode()
    base: dict[str, list[float]] = {k: [] for k in baselines}
    stages: dict[str, list[float]] = {}
    for r in range(repeat):
        for k, fn in baselines.items():
            base[k].extend(measure(fn, repeat=1, warmup=0, device=device).samples)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            encode()
        took: dict[str, float] = {}
        for e in prof.events():
            if e.name.startswith(prefix):
                took[e.name[len(prefix):]] = took.get(e.name[len(prefix):], 0.0) + e.cpu_time_total / 1e6
        for label, s in took.items():
            stages.setdefault(label, [0.0] * r).append(s)  # a stage missing in a round counts 0 there
        for label, s in stages.items():
            if len(s) < r + 1:
                s.append(0.0)
    dev = str(torch.device(device))
    timed = {k: Timing(tuple(v), warmup, dev) for k, v in base.items()}
    return {label: {**timed, "encode": Timing(tuple(s), warmup, dev)} for label, s in stages.items()}
