"""Traffic accounting: every byte a worker puts on the wire, per step, next to the uncompressed size.

Everything that moves gradients (the DDP hook, the simulated cluster) appends to a
:class:`TrafficLog`. Three kinds of records:

* :class:`WireRecord` - one worker's part in one collective: the operation (``all_reduce``,
  ``all_gather``, ``push`` to a parameter server, ``pull`` from it, ``broadcast``), what it carries
  (``payload``, ``sizes`` - the size exchange before an all_gather -, ``check`` - the digest that
  verifies shared sections -, ``round1`` / ``round2`` - Sketched-SGD's summed sketches and its
  second round of exact values -, ``dense`` / ``factor_p`` / ``factor_q`` for PowerSGD - its
  uncompressed vectors and its two factors -, ``finite-flag`` - the flag that tells every worker
  whether all gradients were finite -, ``choice`` - an adaptive policy's broadcast per-layer
  choice) and ``nbytes``, the size of the message this worker contributes,
  *padding included* (``padding`` says how much of it is padding). ``seq`` numbers the collectives of
  a step in call order; it is the same on every worker, which lets the network model
  (:mod:`gcbench.envs.network`) line the workers' messages of one collective up.
* :class:`RawRecord` - the uncompressed size of the gradients a worker aggregated in a step (the
  gradient tensors' own bytes: fp32 in every gcbench run).
* :class:`TimeRecord` - *measured* seconds of a phase (``encode``, ``decode``, ``comm`` = wall time
  inside collectives, ``compute`` = forward/backward, ``step`` = a parameter server's optimizer
  step) on one worker (or the server) in one step.

What "message size" means per operation (and so what the compression ratio divides by): for an
``all_reduce`` the tensor this worker reduces (the payload's summed sections; headers never travel,
every rank knows them); for an ``all_gather`` the padded byte buffer it contributes (its framed
messages, :mod:`gcbench.envs.framing`: a tensor's full header in its first message on a link, a
short reference afterwards, then the sections and a checksum); for ``push``/``pull`` the framed
messages sent to / received from the server (for ``pull``, the tensors' raw bytes when the server
has no pull codec). How many bytes each link then carries depends on the
collective's algorithm; :func:`gcbench.envs.network.link_bytes` turns message sizes into bytes on
the wire, and :func:`gcbench.envs.network.comm_time` into modelled seconds.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..compressors.errors import InvalidParameterError

#: Collective operations a record may name.
OPS = ("all_reduce", "all_gather", "push", "pull", "broadcast")
#: Phases a time record may name.
PHASES = ("compute", "encode", "decode", "comm", "step")


@dataclass(frozen=True)
class WireRecord:
    """One worker's message in one collective (see the module docstring)."""

    step: int
    worker: int
    seq: int
    op: str
    kind: str
    nbytes: int
    padding: int = 0
    bucket: int = -1

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise InvalidParameterError(f"unknown collective op {self.op!r}; known: {OPS}")
        if self.nbytes < 0 or not 0 <= self.padding <= self.nbytes:
            raise InvalidParameterError(f"bad byte counts nbytes={self.nbytes} padding={self.padding}")


@dataclass(frozen=True)
class RawRecord:
    """Uncompressed bytes (and elements) of the gradients one worker aggregated in one step."""

    step: int
    worker: int
    nbytes: int
    numel: int
    bucket: int = -1


@dataclass(frozen=True)
class TimeRecord:
    """Measured seconds of one phase on one worker in one step."""

    step: int
    worker: int
    phase: str
    seconds: float

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise InvalidParameterError(f"unknown phase {self.phase!r}; known: {PHASES}")


@dataclass(frozen=True)
class CollectiveRecord:
    """The messages of every worker in one collective: what the network model prices."""

    step: int
    seq: int
    op: str
    kinds: tuple[str, ...]
    nbytes: dict[int, int]  # worker -> message bytes

    @property
    def max_nbytes(self) -> int:
        """Largest message of any worker (all_gather buffers are padded to it)."""
        return max(self.nbytes.values(), default=0)


@dataclass
class TrafficLog:
    """Append-only log of wire, raw and time records, with totals and ratios."""

    wire_records: list[WireRecord] = field(default_factory=list)
    raw_records: list[RawRecord] = field(default_factory=list)
    time_records: list[TimeRecord] = field(default_factory=list)

    # -- appending --------------------------------------------------------------------------------

    def wire(
        self, step: int, worker: int, seq: int, op: str, kind: str, nbytes: int, *, padding: int = 0, bucket: int = -1
    ) -> None:
        """Record ``nbytes`` that ``worker`` put into collective ``seq`` of ``step``."""
        self.wire_records.append(WireRecord(step, worker, seq, op, kind, int(nbytes), int(padding), bucket))

    def raw(self, step: int, worker: int, nbytes: int, numel: int, *, bucket: int = -1) -> None:
        """Record the uncompressed size of gradients ``worker`` aggregated in ``step``."""
        self.raw_records.append(RawRecord(step, worker, int(nbytes), int(numel), bucket))

    def time(self, step: int, worker: int, phase: str, seconds: float) -> None:
        """Record measured ``seconds`` of ``phase``."""
        self.time_records.append(TimeRecord(step, worker, phase, float(seconds)))

    def extend(self, other: TrafficLog) -> None:
        """Append every record of ``other`` (e.g. the log of another rank)."""
        self.wire_records += other.wire_records
        self.raw_records += other.raw_records
        self.time_records += other.time_records

    @classmethod
    def merged(cls, logs: Iterable[TrafficLog]) -> TrafficLog:
        """One log holding the records of every log in ``logs`` (one per rank)."""
        out = cls()
        for log in logs:
            out.extend(log)
        return out

    # -- queries ----------------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Steps that have any record, ascending."""
        return sorted({r.step for r in self.wire_records} | {r.step for r in self.raw_records})

    def workers(self) -> list[int]:
        """Workers that have any record, ascending."""
        return sorted({r.worker for r in self.wire_records} | {r.worker for r in self.raw_records})

    def _select(self, records: Iterable[Any], step: int | None, worker: int | None, since: int | None = None) -> Iterator[Any]:
        for r in records:
            if (step is None or r.step == step) and (worker is None or r.worker == worker) and (since is None or r.step >= since):
                yield r

    def message_bytes(
        self, *, step: int | None = None, worker: int | None = None, kind: str | None = None, op: str | None = None,
        since: int | None = None,
    ) -> int:
        """Sum of message bytes (padding included) matching the filters (None = any; ``since``: steps >= it)."""
        return sum(
            r.nbytes
            for r in self._select(self.wire_records, step, worker, since)
            if (kind is None or r.kind == kind) and (op is None or r.op == op)
        )

    def padding_bytes(self, *, step: int | None = None, worker: int | None = None) -> int:
        """Bytes of padding inside the messages matching the filters."""
        return sum(r.padding for r in self._select(self.wire_records, step, worker))

    def raw_bytes(self, *, step: int | None = None, worker: int | None = None, since: int | None = None) -> int:
        """Uncompressed gradient bytes matching the filters (``since``: steps >= it)."""
        return sum(r.nbytes for r in self._select(self.raw_records, step, worker, since))

    def seconds(self, phase: str, *, step: int | None = None, worker: int | None = None) -> float:
        """Measured seconds of ``phase`` matching the filters."""
        return sum(r.seconds for r in self._select(self.time_records, step, worker) if r.phase == phase)

    def compression_ratio(self, *, worker: int | None = None, step: int | None = None, since: int | None = None) -> float:
        """Uncompressed bytes / message bytes (every byte: payloads, sizes, padding, checks, rounds) of the
        records matching the filters (``since``: steps >= it, e.g. the first step after a warm-up).

        ``inf`` when nothing was sent, ``nan`` when nothing was recorded.
        """
        raw = self.raw_bytes(step=step, worker=worker, since=since)
        sent = self.message_bytes(step=step, worker=worker, since=since)
        if sent == 0:
            return float("nan") if raw == 0 else float("inf")
        return raw / sent

    def collectives(self, step: int | None = None) -> list[CollectiveRecord]:
        """The step's collectives, in order, each with every worker's message size.

        Records of one collective share ``(step, seq)``; a worker may have several records in one
        collective, and their bytes add up (the rounds protocol records one per kind, e.g.
        PowerSGD's ``dense`` and ``factor_p`` in one all_reduce).
        """
        groups: dict[tuple[int, int], dict[str, Any]] = {}
        for r in self.wire_records:
            if step is not None and r.step != step:
                continue
            g = groups.setdefault((r.step, r.seq), {"op": r.op, "kinds": [], "nbytes": defaultdict(int)})
            if g["op"] != r.op:
                raise InvalidParameterError(f"step {r.step} collective {r.seq} mixes ops {g['op']!r} and {r.op!r}")
            if r.kind not in g["kinds"]:
                g["kinds"].append(r.kind)
            g["nbytes"][r.worker] += r.nbytes
        return [
            CollectiveRecord(s, q, g["op"], tuple(g["kinds"]), dict(g["nbytes"])) for (s, q), g in sorted(groups.items())
        ]

    def per_step(self) -> list[dict[str, Any]]:
        """One row per (step, worker): raw and message bytes (by kind), padding, measured seconds."""
        keys = sorted({(r.step, r.worker) for r in self.wire_records} | {(r.step, r.worker) for r in self.raw_records})
        rows = []
        for step, worker in keys:
            by_kind: dict[str, int] = defaultdict(int)
            for r in self._select(self.wire_records, step, worker):
                by_kind[r.kind] += r.nbytes
            row: dict[str, Any] = {
                "step": step,
                "worker": worker,
                "raw_bytes": self.raw_bytes(step=step, worker=worker),
                "message_bytes": self.message_bytes(step=step, worker=worker),
                "padding_bytes": self.padding_bytes(step=step, worker=worker),
                "bytes_by_kind": dict(by_kind),
                "collectives": len({r.seq for r in self._select(self.wire_records, step, worker)}),
            }
            for phase in PHASES:
                row[f"measured_{phase}_s"] = self.seconds(phase, step=step, worker=worker)
            rows.append(row)
        return rows

    def summary(self) -> dict[str, Any]:
        """Totals over the log: per-worker mean bytes per step and the compression ratio."""
        steps = self.steps()
        workers = self.workers()
        n = max(len(steps), 1) * max(len(workers), 1)
        by_kind: dict[str, int] = defaultdict(int)
        by_op: dict[str, int] = defaultdict(int)
        for r in self.wire_records:
            by_kind[r.kind] += r.nbytes
            by_op[r.op] += r.nbytes
        return {
            "steps": len(steps),
            "workers": len(workers),
            "raw_bytes": self.raw_bytes(),
            "message_bytes": self.message_bytes(),
            "padding_bytes": self.padding_bytes(),
            "bytes_by_kind": dict(by_kind),
            "bytes_by_op": dict(by_op),
            "raw_bytes_per_worker_step": self.raw_bytes() / n,
            "message_bytes_per_worker_step": self.message_bytes() / n,
            "compression_ratio": self.compression_ratio(),
            "measured_s": {phase: self.seconds(phase) for phase in PHASES},
        }

    # -- serialisation ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain lists of records (JSON-ready)."""
        return {
            "wire": [asdict(r) for r in self.wire_records],
            "raw": [asdict(r) for r in self.raw_records],
            "time": [asdict(r) for r in self.time_records],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrafficLog:
        """Inverse of :meth:`to_dict`."""
        return cls(
            [WireRecord(**r) for r in data.get("wire", [])],
            [RawRecord(**r) for r in data.get("raw", [])],
            [TimeRecord(**r) for r in data.get("time", [])],
        )

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict())
