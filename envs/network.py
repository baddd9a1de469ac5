"""The alpha-beta network model: measured bytes -> *modelled* communication time on a cluster profile.

A message of ``n`` bytes over a link with latency ``alpha`` (seconds) and bandwidth ``beta``
(bytes/s) takes ``alpha + n / beta`` (Hockney, "The communication challenge for MPP", Parallel
Computing 1994). Collectives, with ``W`` workers and ``n`` the bytes *each worker contributes*
(:class:`gcbench.envs.traffic.WireRecord.nbytes`):

=====================  ==========================================  ===============================
collective             modelled time                               bytes each worker sends
=====================  ==========================================  ===============================
ring all_reduce        ``2(W-1) alpha + 2 (W-1)/W * n / beta``     ``2 (W-1)/W * n``
ring all_gather        ``(W-1) alpha + (W-1) * n / beta``          ``(W-1) * n``
PS push (W -> 1)       ``alpha + sum_w n_w / beta``                ``n_w`` (the server receives all)
PS pull (1 -> W)       ``alpha + sum_w n_w / beta``                ``0`` (the server sends ``n_w``)
=====================  ==========================================  ===============================

Ring all_reduce = reduce-scatter + all_gather, ``W-1`` steps each moving ``n/W`` bytes per link
(Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005, Sec. 4; Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009). Ring all_gather: ``W-1`` steps each moving one worker's ``n`` bytes
(Thakur et al. write ``(p-1) alpha + (p-1)/p * N beta`` with ``N = W n`` the gathered total). The
parameter server (SketchML's Spark driver, 3LC's servers) has one link that every push and pull
crosses, so it serialises ``W`` messages each way (the usual incast bound). Messages of one
collective may differ in size (unpadded pushes); all_reduce/all_gather use the largest.

The model ignores computation in reductions, contention with other jobs (SketchML's Cluster-2 is
shared: its nominal bandwidth makes modelled times a lower bound), hierarchical topologies and
overlap of communication with computation, except in :func:`overlapped_step_s`: the step of an
overlapping DDP hook, where a bucket's communication runs while the backward pass computes the
buckets after it (L-GreCo, Fig. 10). Reports keep these *modelled* seconds apart from the
*measured* encode/decode/compute seconds and name the profile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..compressors.errors import InvalidParameterError
from .errors import ProfileError
from .traffic import CollectiveRecord, TrafficLog

PROFILE_DIR = Path(__file__).with_name("profiles")
#: How a system moves gradients: ``"collective"`` (every worker takes part in all_reduce /
#: all_gather collectives, priced per recorded collective) or ``"parameter_server"`` (workers push
#: to and pull from one server). The simulated cluster runs both; profiles name their paper's.
TOPOLOGIES = ("collective", "parameter_server")


@dataclass(frozen=True)
class Link:
    """A link: ``latency_s`` (alpha) and ``bandwidth_Bps`` (beta, bytes per second)."""

    latency_s: float
    bandwidth_Bps: float

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ProfileError(f"latency must be a finite number >= 0, got {self.latency_s}")
        if not (self.bandwidth_Bps > 0 and math.isfinite(self.bandwidth_Bps)):
            raise ProfileError(f"bandwidth must be a finite number > 0, got {self.bandwidth_Bps}")

    @classmethod
    def from_gbps(cls, gbps: float, latency_us: float) -> Link:
        """A link of ``gbps`` gigabits (1e9 bits) per second and ``latency_us`` microseconds."""
        return cls(latency_us * 1e-6, gbps * 1e9 / 8)


@dataclass(frozen=True)
class Profile:
    """A cluster profile (a TOML file in ``envs/profiles/``).

    Attributes:
        name: file stem, e.g. ``"sketchml-cluster1"``.
        title: one line for reports.
        workers: the cluster's worker count in the paper.
        topology: how the paper's system moved gradients (one of :data:`TOPOLOGIES`).
        link: the bottleneck link.
        sources: where each number comes from (paper and section, or "assumption: ...").
        extra: any other fields of the file (ranges, notes, ``shared``).
    """

    name: str
    title: str
    workers: int
    topology: str
    link: Link
    sources: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description (for reports)."""
        return {
            "name": self.name,
            "title": self.title,
            "workers": self.workers,
            "topology": self.topology,
            "bandwidth_gbps": self.link.bandwidth_Bps * 8 / 1e9,
            "latency_us": self.link.latency_s * 1e6,
            "sources": dict(self.sources),
        }


def list_profiles() -> list[str]:
    """Names of the bundled profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a bundled profile by name, or any profile file by path.

    Raises:
        ProfileError: no such profile, or a missing/invalid field.
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise ProfileError(f"no profile {str(name_or_path)!r}; bundled: {', '.join(list_profiles())}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ProfileError(f"{path}: {err}") from None
    try:
        workers = int(data["workers"])
        topology = str(data["topology"])
        link = Link.from_gbps(float(data["bandwidth_gbps"]), float(data["latency_us"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ProfileError(f"{path}: missing or invalid field ({err})") from None
    if workers < 1:
        raise ProfileError(f"{path}: workers must be >= 1")
    if topology not in TOPOLOGIES:
        raise ProfileError(f"{path}: topology {topology!r} is not one of {TOPOLOGIES}")
    sources = data.get("sources", {})
    for needed in ("workers", "bandwidth_gbps", "latency_us"):
        if needed not in sources:
            raise ProfileError(f"{path}: [sources] must say where {needed!r} comes from")
    known = {"name", "title", "workers", "topology", "bandwidth_gbps", "latency_us", "sources"}
    return Profile(
        name=str(data.get("name", path.stem)),
        title=str(data.get("title", path.stem)),
        workers=workers,
        topology=topology,
        link=link,
        sources=dict(sources),
        extra={k: v for k, v in data.items() if k not in known},
    )


# -- formulas ---------------------------------------------------------------------------------------


def ring_all_reduce_time(nbytes: float, workers: int, link: Link) -> float:
    """``2(W-1) alpha + 2 (W-1)/W * n / beta`` (0 for one worker)."""
    if workers <= 1:
        return 0.0
    w = workers
    return 2 * (w - 1) * link.latency_s + 2 * (w - 1) / w * nbytes / link.bandwidth_Bps


def all_gather_time(nbytes: float, workers: int, link: Link) -> float:
    """``(W-1) alpha + (W-1) * n / beta`` with ``n`` each worker's contribution (0 for one worker)."""
    if workers <= 1:
        return 0.0
    return (workers - 1) * link.latency_s + (workers - 1) * nbytes / link.bandwidth_Bps


def server_time(total_nbytes: float, link: Link) -> float:
    """One parameter-server phase (push or pull): ``alpha + (sum of messages) / beta``."""
    return link.latency_s + total_nbytes / link.bandwidth_Bps


def link_bytes(op: str, nbytes: float, workers: int) -> float:
    """Bytes one worker sends on its link for a message of ``nbytes`` in collective ``op``."""
    if workers <= 1:
        return 0.0
    if op == "all_reduce":
        return 2 * (workers - 1) / workers * nbytes
    if op == "all_gather":
        return (workers - 1) * nbytes
    if op == "push":
        return float(nbytes)
    if op in ("pull", "broadcast"):
        return 0.0
    raise InvalidParameterError(f"unknown op {op!r}")


def collective_time(c: CollectiveRecord, link: Link, workers: int | None = None) -> float:
    """Modelled seconds of one recorded collective.

    ``workers=None`` prices the collective with the workers that took part; another count
    extrapolates, assuming each worker's message is the largest one recorded (per-worker payload
    sizes do not depend on the worker count for gcbench's codecs; all_gather padding may).
    """
    recorded = len(c.nbytes)
    w = recorded if workers is None else workers
    if c.op == "all_reduce":
        return ring_all_reduce_time(c.max_nbytes, w, link)
    if c.op == "all_gather":
        return all_gather_time(c.max_nbytes, w, link)
    if c.op in ("push", "pull", "broadcast"):
        total = sum(c.nbytes.values()) if workers is None else c.max_nbytes * w
        return server_time(total, link)
    raise InvalidParameterError(f"unknown op {c.op!r}")


@dataclass(frozen=True)
class ModelledTime:
    """Modelled communication seconds of a run on a profile (never a measurement)."""

    profile: str
    workers: int
    per_step_s: tuple[float, ...]
    by_op_s: Mapping[str, float]
    kind: str = "modelled"

    @property
    def total_s(self) -> float:
        return sum(self.per_step_s)

    @property
    def mean_step_s(self) -> float:
        return self.total_s / len(self.per_step_s) if self.per_step_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "profile": self.profile,
            "workers": self.workers,
            "total_s": self.total_s,
            "mean_step_s": self.mean_step_s,
            "per_step_s": list(self.per_step_s),
            "by_op_s": dict(self.by_op_s),
        }


def comm_time(log: TrafficLog, profile: Profile | str, *, workers: int | None = None) -> ModelledTime:
    """Model the communication time of every step in ``log`` on ``profile``'s link.

    Args:
        log: merged traffic of all workers (or one rank's: then pass ``workers``).
        profile: a :class:`Profile` or a bundled profile name.
        workers: price collectives for this many workers (default: as recorded).
    """
    prof = load_profile(profile) if isinstance(profile, str) else profile
    steps = sorted({r.step for r in log.wire_records})
    per_step = []
    by_op: dict[str, float] = {}
    recorded_w = len(log.workers())
    for s in steps:
        total = 0.0
        for c in log.collectives(s):
            t = collective_time(c, prof.link, workers)
            by_op[c.op] = by_op.get(c.op, 0.0) + t
            total += t
        per_step.append(total)
    return ModelledTime(prof.name, workers if workers is not None else recorded_w, tuple(per_step), by_op)


# -- step time ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTime:
    """One synchronous training step: *measured* seconds on its critical path plus *modelled*
    communication seconds (never mixed up: both are kept)."""

    measured_s: float
    modelled_comm_s: float

    @property
    def total_s(self) -> float:
        """Measured critical path + modelled communication."""
        return self.measured_s + self.modelled_comm_s


#: Phases before the exchange (each worker), at the server (worker ``-1``), and after it (each worker).
FRONT_PHASES = ("compute", "encode")
SERVER_PHASES = ("decode", "step", "encode")
BACK_PHASES = ("decode", "step")


def step_time(front_s: Sequence[float], comm_s: float, *, server_s: float = 0.0, back_s: Sequence[float] = ()) -> StepTime:
    """The step-time definition every report uses: the slowest worker's work before the exchange
    (``front_s``: forward/backward + encode, one entry per worker), the server's work (parameter
    server: decode, average, optimizer step, pull encode), the slowest worker's work after it
    (``back_s``: decode + applying the update), all measured, plus the modelled ``comm_s``.
    Workers wait for each other at the exchange, so the slowest one sets the pace."""
    measured = max(front_s, default=0.0) + server_s + max(back_s, default=0.0)
    return StepTime(float(measured), float(comm_s))


def log_step_times(
    log: TrafficLog, profile: Profile | str | None, *, steps: int | None = None, workers: int | None = None
) -> list[StepTime]:
    """:func:`step_time` of every step ``0 .. steps - 1`` (default: up to the log's last step) from
    the log's time records (:data:`FRONT_PHASES`, :data:`SERVER_PHASES`, :data:`BACK_PHASES`) and
    its collectives priced on ``profile`` (``workers``: as in :func:`collective_time`; no profile:
    no communication time)."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    n = steps if steps is not None else max((r.step for r in log.time_records), default=-1) + 1
    acc: dict[tuple[int, int, str], float] = {}
    ranks: set[int] = set()
    for r in log.time_records:
        acc[(r.step, r.worker, r.phase)] = acc.get((r.step, r.worker, r.phase), 0.0) + r.seconds
        if r.worker >= 0:
            ranks.add(r.worker)
    comm = [0.0] * n
    for c in log.collectives() if prof is not None else ():
        if 0 <= c.step < n:
            comm[c.step] += collective_time(c, prof.link, workers)
    out = []
    for t in range(n):
        front = [sum(acc.get((t, w, ph), 0.0) for ph in FRONT_PHASES) for w in sorted(ranks)]
        back = [sum(acc.get((t, w, ph), 0.0) for ph in BACK_PHASES) for w in sorted(ranks)]
        server = sum(acc.get((t, -1, ph), 0.0) for ph in SERVER_PHASES)
        out.append(step_time(front, comm[t], server_s=server, back_s=back))
    return out


#: Share of a step's forward+backward compute spent in the backward pass: about two thirds, as
#: the backward computes two matrix products (input and weight gradients) per forward one.
BACKWARD_SHARE = 2.0 / 3.0


def overlapped_step_s(
    compute_s: float,
    bucket_shares: Sequence[float],
    bucket_comm_s: Sequence[float],
    *,
    backward_share: float = BACKWARD_SHARE,
    held: bool = False,
) -> float:
    """*Modelled* seconds of one step when each bucket's communication overlaps later backward work.

    The forward pass takes ``(1 - backward_share) * compute_s``, then the backward; bucket ``i``
    (in the order DDP hands buckets over) is ready once the backward has produced the first
    ``sum(bucket_shares[:i + 1]) / sum(bucket_shares)`` of the gradients (shares: e.g. each
    bucket's bytes) and communicates when it is ready and the previous bucket is done (one queue:
    gcbench's communication thread, one NCCL stream); the step ends when both the backward pass and
    the last bucket's communication have. ``held``: every bucket waits for the end of the backward
    pass (whole-model compression, e.g. global TopK), which is the synchronous
    ``compute_s + sum(bucket_comm_s)``.
    """
    if len(bucket_shares) != len(bucket_comm_s):
        raise InvalidParameterError(f"{len(bucket_shares)} bucket shares for {len(bucket_comm_s)} bucket times")
    if not 0.0 <= backward_share <= 1.0:
        raise InvalidParameterError(f"backward_share must be in [0, 1], got {backward_share}")
    forward = compute_s * (1.0 - backward_share)
    backward = compute_s * backward_share
    total = float(sum(bucket_shares)) or 1.0
    t = 0.0
    done = 0.0
    for share, comm in zip(bucket_shares, bucket_comm_s):
        done += share
        ready = forward + backward * (1.0 if held else min(done / total, 1.0))
        t = max(t, ready) + comm
    return max(t, compute_s)


def parameter_server_comm(push_bytes: Sequence[int], pull_bytes: int, link: Link) -> tuple[float, float]:
    """Modelled ``(push, pull)`` seconds of one parameter-server step: every worker pushes its
    message (``alpha + sum / beta``) and the server sends one ``pull_bytes`` message to each of
    the ``len(push_bytes)`` workers (``alpha + W pull / beta``)."""
    return server_time(float(sum(push_bytes)), link), server_time(float(len(push_bytes) * pull_bytes), link)
