"""Hand-written SketchML cell records whose bytes price to chosen modelled seconds.

The derivation and the report price every training run's transfer, and the Fig. 8 sweep's, from the
bytes its cell recorded (``SketchMLSettings.priced``: per iteration ``α`` for the push and ``α`` for
the pull, ``bytes_up/β`` and ``copies·bytes_down/β`` with the spec's ``broadcast_copies``), never from
the modelled seconds the cell wrote. A test that wants an epoch of ``comm`` modelled seconds writes the
bytes that price to it: half of the seconds past the latencies on the push, half on the broadcast.
"""

from __future__ import annotations

from typing import Any

from gcbench.envs.network import load_profile
from gcbench.reproductions.sketchml.workload import workload


def link_bytes(comm_s: float, *, messages: int, workers: int, profile: str | None = None) -> dict[str, float]:
    """``bytes_up`` and ``bytes_down`` of an epoch of ``messages`` messages from ``workers`` workers that the
    training runs' pricing puts at ``comm_s`` modelled seconds under ``profile`` (default the spec's
    ``profile_tables``)."""
    wl = workload()
    link = load_profile(profile or wl.spec.workload["profile_tables"]).link
    left = comm_s - 2 * (messages / workers) * link.latency_s
    if left < 0:
        raise ValueError(f"{comm_s} s is less than the epoch's latencies")
    half = left / 2 * link.bandwidth_Bps
    return {"bytes_up": half, "bytes_down": half / wl.training_driver().copies(workers)}


def sweep_row(ratio: float, epoch_time_s: float, *, workers: int, comm_share: float = 0.1, **extra: Any) -> dict[str, Any]:
    """A Fig. 8 sweep row at batch ratio ``ratio`` whose epoch prices to ``epoch_time_s`` under the spec's
    ``profile_fig8``, ``comm_share`` of it modelled transfer."""
    per_iteration = epoch_time_s * ratio
    b = link_bytes(comm_share * per_iteration, messages=workers, workers=workers,
                   profile=workload().spec.workload["profile_fig8"])
    return {"ratio": ratio, "measured_s_per_iteration": (1 - comm_share) * per_iteration,
            "push_bytes_per_iteration": b["bytes_up"], "down_bytes_per_iteration": b["bytes_down"], **extra}
