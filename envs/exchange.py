"""What a protocol works with during one aggregation: the workers' codecs, the collective, the
traffic it records, and the measured seconds of each phase.

An :class:`Exchange` is built by :class:`gcbench.envs.aggregator.Aggregator` for each call and
handed to the protocol (:mod:`gcbench.envs.protocols`); protocols reach everything through it, and
it is the ``ctx`` a codec's own ``run_rounds`` receives (``codec``, ``generator``, ``all_reduce``,
``world_size``, ``start``/``stop``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..compressors import Payload
from ..measure.timing import synchronize
from .collectives import Collective
from .errors import CollectiveMismatchError
from .framing import FramedLinks
from .traffic import TrafficLog
from .workers import WorkerCodecs, inner_codec

#: ``(kind, bytes per local worker, padding per local worker or None)``: one part of a recorded collective.
Part = tuple[str, Sequence[int], "Sequence[int] | None"]


class Clock:
    """Accumulates measured seconds per (local worker, phase) for one aggregate call."""

    def __init__(self, device: torch.device, n_local: int) -> None:
        self.device = device
        self.seconds = [dict.fromkeys(("encode", "decode", "comm"), 0.0) for _ in range(n_local)]

    def start(self) -> float:
        """Wait for the device and return the time."""
        synchronize(self.device)
        return time.perf_counter()

    def elapsed(self, t0: float) -> float:
        """Wait for the device and return the seconds since ``t0`` (work no local worker does, such
        as a simulated parameter server's, which its protocol records itself)."""
        synchronize(self.device)
        return time.perf_counter() - t0

    def stop(self, t0: float, phase: str, worker: int | None = None) -> None:
        """Add the seconds since ``t0`` to ``phase`` of ``worker`` (None: every local worker: work
        each worker would do itself, like decoding what all received, or waiting in a collective)."""
        dt = self.elapsed(t0)
        targets = range(len(self.seconds)) if worker is None else [worker]
        for w in targets:
            self.seconds[w][phase] += dt


class Recorder:
    """Appends one wire record per local worker and part for each collective, numbering the
    collectives of a step in call order (``seq``, the same on every worker)."""

    def __init__(self, traffic: TrafficLog, local_ranks: Sequence[int]) -> None:
        self.traffic = traffic
        self.local_ranks = tuple(local_ranks)
        self._seq_step: int | None = None
        self._seq = 0

    def record(self, step: int, bucket: int, op: str, parts: Sequence[Part]) -> int:
        """Record one collective of ``step``; returns its ``seq``."""
        if self._seq_step != step:
            self._seq_step, self._seq = step, 0
        seq = self._seq
        self._seq += 1
        for kind, nbytes, padding in parts:
            for i, rank in enumerate(self.local_ranks):
                pad = padding[i] if padding is not None else 0
                self.traffic.wire(step, rank, seq, op, kind, nbytes[i], padding=pad, bucket=bucket)
        return seq


class Exchange:
    """One aggregation call: ``workers[i]`` are the codecs of local worker ``i`` of ``collective``.

    Attributes:
        step, bucket: what the wire records carry.
        clock: measured seconds of this call.
        verify_shared: the aggregator's mode (``"first"``, ``"always"``, ``"never"``).
        verified: keys whose shared sections were checked (the aggregator's set, updated in place
            through :meth:`mark_verified`).
        links: the framing endpoints (:mod:`gcbench.envs.framing`; the aggregator's, so header
            registries persist across calls) through which protocols send payloads.
        layouts: the summed flats' ``(dtype, numel)`` per tuple of keys, from the last call that
            sent them (the aggregator's, dropped with the keys' verification): what a worker whose
            encode failed sends in their place (:mod:`gcbench.envs.protocols.all_reduce`).
        outputs: buffers by key that the caller lets a protocol write the key's result into once
            its own encodes are done (the DDP hook's gradient views in its bucket); a protocol that
            has no use for them leaves them alone.
    """

    def __init__(
        self,
        workers: Sequence[WorkerCodecs],
        collective: Collective,
        recorder: Recorder,
        clock: Clock,
        *,
        step: int,
        bucket: int,
        verify_shared: str = "first",
        verified: set[str] | None = None,
        links: FramedLinks | None = None,
        layouts: dict[tuple[str, ...], list[tuple[torch.dtype, int]]] | None = None,
        outputs: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.workers = list(workers)
        self.collective = collective
        self.recorder = recorder
        self.clock = clock
        self.step = step
        self.bucket = bucket
        self.verify_shared = verify_shared
        self.verified = verified if verified is not None else set()
        self.links = links if links is not None else FramedLinks()
        self.layouts = layouts if layouts is not None else {}
        self.outputs = dict(outputs) if outputs is not None else {}

    @property
    def world_size(self) -> int:
        """Workers in the collective (all of them, not only the local ones)."""
        return self.collective.world_size

    @property
    def n_local(self) -> int:
        """Local workers."""
        return len(self.workers)

    # -- what a codec's run_rounds uses ------------------------------------------------------------

    def codec(self, i: int, key: str) -> Any:
        """Local worker ``i``'s codec for ``key``."""
        return self.workers[i].codec_for(key)

    def generator(self, i: int, key: str, device: torch.device) -> torch.Generator:
        """Local worker ``i``'s generator for ``key`` on ``device``."""
        w = self.workers[i]
        return w.generator_for(key, device, w.codec_for(key))

    def start(self) -> float:
        """See :meth:`Clock.start`."""
        return self.clock.start()

    def stop(self, t0: float, phase: str, worker: int | None = None) -> None:
        """See :meth:`Clock.stop`."""
        self.clock.stop(t0, phase, worker)

    def elapsed(self, t0: float) -> float:
        """See :meth:`Clock.elapsed`."""
        return self.clock.elapsed(t0)

    def record(self, op: str, parts: Sequence[Part]) -> int:
        """Record one collective of this call (see :class:`Recorder`)."""
        return self.recorder.record(self.step, self.bucket, op, parts)

    def mean_(self, total: torch.Tensor) -> torch.Tensor:
        """``total`` (a sum over all workers) divided in place by :attr:`world_size`; returned.

        One worker: nothing to divide. A power of two: a multiplication by its reciprocal, which is
        exact, so the result has the bits of the division (both are the correctly rounded value of
        the same real number) at less than half its cost (a 0.27M-float bucket: 17.6 against
        42.4 us, one thread). Any other count: ``div_``."""
        n = self.world_size
        if n == 1:
            return total
        if n & (n - 1) == 0:
            return total.mul_(1.0 / n)
        return total.div_(n)

    def check_due(self, keys: Sequence[str]) -> bool:
        """Whether this call checks ``keys``' shared sections across workers: every call with
        ``verify_shared="always"``, with ``"first"`` until they have agreed once."""
        return self.verify_shared == "always" or (self.verify_shared == "first" and not set(keys) <= self.verified)

    def unverify(self, keys: Sequence[str]) -> None:
        """Forget that ``keys``' shared sections were checked: the next call checks them again."""
        self.verified.difference_update(keys)

    def mark_verified(self, keys: Sequence[str]) -> None:
        """Remember that ``keys``' shared sections agreed across workers."""
        self.verified.update(keys)

    def all_reduce(self, entries: Sequence[tuple[str, int, Callable[[int], torch.Tensor]]]) -> dict[str, dict[int, torch.Tensor]]:
        """All-reduce ``(kind, j, tensor_of_worker)`` entries: one flat tensor per dtype.

        The flat tensor's bytes are recorded per kind (all in one collective); returns
        ``{kind: {j: 1-D sum}}`` (every kind of ``entries`` present).
        """
        out: dict[str, dict[int, torch.Tensor]] = {kind: {} for kind, _, _ in entries}
        by_dtype: dict[str, list[tuple[str, int, Callable[[int], torch.Tensor]]]] = {}
        for e in entries:
            by_dtype.setdefault(str(e[2](0).dtype), []).append(e)
        for dt in sorted(by_dtype):
            members = by_dtype[dt]
            per_worker = [[fn(i) for _, _, fn in members] for i in range(self.n_local)]
            flats = [torch.cat(row) for row in per_worker]
            t0 = self.start()
            reduced = self.collective.all_reduce(flats)[0]
            self.stop(t0, "comm")
            kinds: dict[str, int] = {}
            for (kind, _, _), t in zip(members, per_worker[0]):
                kinds[kind] = kinds.get(kind, 0) + t.numel() * t.element_size()
            self.record("all_reduce", [(k, [b] * self.n_local, None) for k, b in kinds.items()])
            offset = 0
            for (kind, j, _), t in zip(members, per_worker[0]):
                out[kind][j] = reduced[offset : offset + t.numel()]
                offset += t.numel()
        return out

    # -- what the payload protocols use ------------------------------------------------------------

    def encode_all(self, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str]) -> list[list[Payload]]:
        """Every local worker's payload of every tensor (its own codec and generator)."""
        payloads = []
        for i, w in enumerate(self.workers):
            t0 = self.start()
            row = []
            for g, key in zip(grads[i], keys):
                codec = w.codec_for(key)
                row.append(codec.encode(g, key=key, generator=w.generator_for(key, g.device, codec)))
            self.stop(t0, "encode", i)
            payloads.append(row)
        return payloads

    @staticmethod
    def to_grad(decoded: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """``decoded`` as a dense tensor shaped and typed like the gradient ``like``."""
        if decoded.layout == torch.sparse_coo:
            decoded = decoded.to_dense()
        if decoded.shape != like.shape:
            raise CollectiveMismatchError(f"decoded shape {tuple(decoded.shape)} differs from the gradient's {tuple(like.shape)}")
        return decoded.to(like.dtype)

    @staticmethod
    def decode_grad(
        codec: Any, payload: Payload, like: torch.Tensor, *, device: torch.device | str | None,
        max_numel: int | None = None, into: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``to_grad(codec.decode(payload), like)``, the same values; when the payload decodes to a
        dense tensor of ``like``'s shape and dtype on ``like``'s device, the decode writes straight
        into ``into`` (a buffer of the caller's to overwrite, e.g. DDP's bucket, unless it shares
        memory with the payload) or into one new tensor shaped like ``like``: one fresh buffer
        instead of the decode's and a later result's (a fresh buffer costs its page faults).
        Without ``into`` the result shares no memory with the payload, so the caller may scale or
        accumulate into it in place.
        """
        dev = like.device if device is None else torch.device(device)
        dense = (
            not payload.sparse and tuple(payload.shape) == tuple(like.shape) and payload.dtype == like.dtype
            and like.layout == torch.strided and dev == like.device
        )
        if dense and into is not None:
            if into.is_contiguous() and not payload.shares_memory_with(into):
                return codec.decode(payload, device=device, max_numel=max_numel, out=into)
        elif dense:
            out = torch.empty(like.shape, dtype=like.dtype, device=like.device)
            return codec.decode(payload, device=device, max_numel=max_numel, out=out)
        got = Exchange.to_grad(codec.decode(payload, device=device, max_numel=max_numel), like)
        if into is None and payload.shares_memory_with(got):
            got = got.clone()  # a decode that returned the payload's own section (identity)
        return got

    def summed_sections(self, codec: Any, payload: Payload) -> list[int]:
        """Indexes of ``payload``'s sections that a linear ``codec`` sums across workers."""
        s = inner_codec(codec).summed_sections
        return list(range(len(payload.sections))) if s is None else [i for i in s if i < len(payload.sections)]
