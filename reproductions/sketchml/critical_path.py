"""The driver's critical path of one SketchML iteration, as a Spark cluster runs it.

The message-level experiment (:mod:`.paperscale`) measures every piece of work one thread at a time:
each executor's gradient and encode, the driver's decode of each of the ``W`` messages, the
aggregate's re-encode, one executor's decode of the broadcast and its Adam step. How those pieces
overlap on the paper's cluster is a model, with these assumptions (each also stated in the spec's
``[workload]`` comments):

* executors work in parallel, one task each: the slowest executor's compute + encode counts;
* the push crosses the driver's one link (incast): ``α + Σ_w bytes_w / β``;
* the driver decodes the ``W`` messages in parallel over its ``driver_cores`` cores (§4.1: 4 cores
  per machine on Cluster-1, 24 on Cluster-2): the measured decode seconds, in arrival order, each
  go to the core that frees first (:func:`makespan`); one core then re-encodes the aggregate.
  Every core sums into its own ``D``-length buffer, and the merge of those buffers
  (``min(cores, W) - 1`` ``D``-length adds, or ``ceil(log2(min(cores, W)))`` rounds as a tree) is
  left out: neither measured nor modelled. It is not small against a decode: an add streams all
  ``D`` entries, a decode at 10% density scatters ~0.1 ``D`` pairs, so the two are of the same
  order (measure it as the CPU seconds of ``numpy.add(a, b, out=a)`` on two ``D``-length float64
  arrays, against a message's measured decode seconds). :func:`driver_seconds` is therefore short
  of the driver's time by that merge, the same for every method, and so are the epochs priced
  with it; with one core (the serial model) there is no merge;
* the broadcast: Spark's TorrentBroadcast sends the value in blocks that executors fetch from each
  other once one copy is out, so ``broadcast_copies`` (1) copies cross the driver's link:
  ``α + copies · bytes / β``;
* every executor decodes the broadcast and steps in parallel: one executor's seconds count.

With ``driver_cores = 1`` and ``broadcast_copies = W`` this is the serial model
(:func:`.netmodel.iteration_time`: every decode in turn, ``W`` broadcast copies).

The training runs price their transfer with the same broadcast: each cell records, per epoch, its
measured seconds and the bytes it pushed and broadcast, and :func:`epoch_comm_seconds` turns those
into modelled seconds with the spec's ``broadcast_copies`` (:func:`.measures.priced_epochs`); their
driver's decode stays serial, since a training cell records one driver time per iteration.
Measured seconds stay measured, modelled ones modelled (:class:`gcbench.envs.network.StepTime`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from gcbench.envs.network import Link, StepTime, server_time, step_time


@dataclass(frozen=True)
class DriverModel:
    """How the driver overlaps its work (see the module docstring).

    Attributes:
        cores: cores that decode the executors' messages at once (>= 1).
        broadcast_copies: copies of the broadcast on the driver's link (None: one per executor,
            the serial model's).
    """

    cores: int = 1
    broadcast_copies: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.cores, int) and self.cores >= 1):
            raise ValueError(f"driver cores must be an integer >= 1, got {self.cores!r}")
        if self.broadcast_copies is not None and not (isinstance(self.broadcast_copies, int) and self.broadcast_copies >= 1):
            raise ValueError(f"broadcast copies must be an integer >= 1 or None, got {self.broadcast_copies!r}")

    def copies(self, workers: int) -> int:
        """Broadcast copies on the driver's link for ``workers`` executors."""
        return workers if self.broadcast_copies is None else self.broadcast_copies

    def describe(self) -> str:
        """One line for reports."""
        copies = "one per executor" if self.broadcast_copies is None else str(self.broadcast_copies)
        return f"driver decodes over {self.cores} core(s), broadcast copies on the driver link: {copies}"


#: The serial model: one decode after another, one broadcast copy per executor.
SERIAL = DriverModel(1, None)


def makespan(durations: Sequence[float], cores: int) -> float:
    """Seconds until ``durations`` (jobs in arrival order) are done on ``cores`` identical cores,
    each job going to the core that frees first (list scheduling). One core: the sum."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if cores == 1:
        return float(sum(durations))
    free = [0.0] * min(cores, max(len(durations), 1))
    for d in durations:
        t = heapq.heappop(free)
        heapq.heappush(free, t + float(d))
    return max(free)


def driver_seconds(decode_s: Sequence[float], reencode_s: float, model: DriverModel) -> float:
    """The driver's measured work on the critical path: the decodes' makespan, then the re-encode. The
    merge of the cores' buffers is left out (see the module docstring), so with ``cores > 1`` this is
    short of the driver's time by ``min(cores, len(decode_s)) - 1`` ``D``-length adds (or their tree)."""
    return makespan(decode_s, model.cores) + float(reencode_s)


def comm_seconds(push_bytes: Sequence[int], down_bytes: int, link: Link, model: DriverModel) -> tuple[float, float]:
    """Modelled ``(push, pull)`` seconds: the incast push and ``copies`` broadcast copies."""
    push = server_time(float(sum(push_bytes)), link)
    pull = server_time(float(model.copies(len(push_bytes)) * down_bytes), link)
    return push, pull


def epoch_comm_seconds(iterations: float, bytes_up: float, bytes_down: float, workers: int, link: Link,
                       model: DriverModel) -> tuple[float, float]:
    """Modelled ``(push, pull)`` seconds of ``iterations`` iterations that pushed ``bytes_up`` and broadcast
    ``bytes_down`` bytes in all (``workers`` executors): :func:`comm_seconds` summed, which is linear in the
    bytes, ``iterations·α + bytes_up/β`` and ``iterations·α + copies·bytes_down/β``."""
    push = iterations * link.latency_s + float(bytes_up) / link.bandwidth_Bps
    pull = iterations * link.latency_s + model.copies(workers) * float(bytes_down) / link.bandwidth_Bps
    return push, pull


def link_bytes(push_bytes: Sequence[int], down_bytes: int, model: DriverModel) -> int:
    """Bytes crossing the driver's link in one iteration under ``model``."""
    return int(sum(push_bytes)) + model.copies(len(push_bytes)) * int(down_bytes)


def iteration(
    worker_s: Sequence[float],
    decode_s: Sequence[float],
    reencode_s: float,
    back_s: float,
    push_bytes: Sequence[int],
    down_bytes: int,
    link: Link,
    model: DriverModel,
) -> tuple[StepTime, float, float, float]:
    """One iteration on the critical path: ``(step, push_s, pull_s, driver_s)``.

    Args:
        worker_s: each executor's measured compute + encode seconds.
        decode_s: the driver's measured decode (+ sum) seconds of each executor's message.
        reencode_s: the driver's measured re-encode of the aggregate.
        back_s: one executor's measured decode of the broadcast + update.
        push_bytes: each executor's message size; ``down_bytes``: the broadcast's.
        link: the driver's link (latency, bandwidth).
        model: how the driver overlaps its work.
    """
    driver = driver_seconds(decode_s, reencode_s, model)
    push, pull = comm_seconds(push_bytes, down_bytes, link, model)
    return step_time(list(worker_s), push + pull, server_s=driver, back_s=[back_s]), push, pull, driver
