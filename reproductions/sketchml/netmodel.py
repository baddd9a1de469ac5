"""Modelled communication time of one SketchML iteration, on gcbench's α–β network model.

The workload asks one question per iteration: given the W workers' message sizes (push to the
driver) and the driver's broadcast message, how long would the network take under the paper's
cluster profile? The answer comes from :mod:`gcbench.envs.network` and its profile files
(``envs/profiles/sketchml-cluster1.toml``, ``sketchml-cluster2-10.toml``), with latency α and
bandwidth β of the driver's link:

* push (W -> driver): ``α + Σ_w bytes_w / β`` (incast: every message crosses the driver's link);
* pull (driver -> W, the broadcast of one message of ``b`` bytes): ``α + copies · b / β``. Spark's
  TorrentBroadcast splits the value into blocks that executors fetch from each other once one copy
  is out, so the spec's ``broadcast_copies`` (1) copies cross the driver's link, as the driver's
  critical path prices it (:mod:`.critical_path`); ``copies = W`` is the serial model, one copy per
  executor, kept beside it for comparison and the default of :func:`comm_seconds`.

The training cells record, per iteration, the serial model's seconds (:func:`iteration_time`'s
default) beside the bytes; the derivation and the report price every training run from those bytes
with the spec's copies (:meth:`.settings.SketchMLSettings.priced`), so a report prices the broadcast
one way. These are *modelled* seconds, kept apart from anything measured; reports name the profile.
"""

from __future__ import annotations

from typing import Any, Sequence

from gcbench.envs.network import Profile, StepTime, load_profile, step_time

from .critical_path import SERIAL, DriverModel
from .critical_path import comm_seconds as driver_comm_seconds

MODEL = ("gcbench.envs.network α–β, parameter server: push α + Σ bytes/β, pull α + copies·bytes/β "
         "(Spark's TorrentBroadcast: the spec's broadcast_copies cross the driver's link; W copies is the serial model)")


def profile_info(name: str) -> dict[str, Any]:
    """The profile's description for reports (name, title, bandwidth, latency, sources, model).

    Raises:
        gcbench.envs.errors.ProfileError: no such profile.
    """
    return {**load_profile(name).as_dict(), "model": MODEL}


def comm_seconds(
    profile: str,
    topology: str,
    push_bytes: Sequence[int],
    pull_bytes: int,
    *,
    profile_data: Profile | None = None,
    driver: DriverModel = SERIAL,
) -> tuple[float, float]:
    """Modelled ``(push_seconds, pull_seconds)`` of one iteration.

    Args:
        profile: profile name (``sketchml-cluster1``, ``sketchml-cluster2-10``...).
        topology: ``"parameter_server"`` (SketchML's Spark driver; the only topology it uses).
        push_bytes: each worker's message size.
        pull_bytes: size of the message the driver broadcasts.
        profile_data: the loaded :class:`~gcbench.envs.network.Profile` (saves reading the file per call).
        driver: its broadcast copies price the pull (:func:`.critical_path.comm_seconds`); the default is the
            serial model, one copy per worker.
    """
    if topology != "parameter_server":
        raise ValueError(f"SketchML's workload runs a parameter_server topology, not {topology!r}")
    prof = profile_data if profile_data is not None else load_profile(profile)
    return driver_comm_seconds(push_bytes, pull_bytes, prof.link, driver)


def iteration_time(
    profile: str,
    topology: str,
    push_bytes: Sequence[int],
    pull_bytes: int,
    *,
    slowest_worker_s: float,
    driver_s: float,
    worker_back_s: float,
    profile_data: Profile | None = None,
    driver: DriverModel = SERIAL,
) -> tuple[StepTime, float, float]:
    """One iteration's :func:`gcbench.envs.network.step_time` (the slowest worker's compute and
    encode, the driver's decode and average, the workers' decode and update: measured; push and
    pull: modelled by :func:`comm_seconds` with ``driver``'s broadcast copies, default the serial
    model's, which the training cells record), with the modelled push and pull seconds."""
    push, pull = comm_seconds(profile, topology, push_bytes, pull_bytes, profile_data=profile_data, driver=driver)
    return step_time([slowest_worker_s], push + pull, server_s=driver_s, back_s=[worker_back_s]), push, pull
