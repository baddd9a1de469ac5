"""Averaging one bucket of gradients across workers: the code the DDP hook and the simulator share.

The same :class:`Aggregator` averages compressed gradients whether the workers are processes talking
through ``torch.distributed`` (:class:`~gcbench.envs.collectives.TorchCollective`, used by
:mod:`gcbench.envs.ddp_hook`) or logical workers inside one process
(:class:`~gcbench.envs.collectives.LocalCollective`, used by :mod:`gcbench.envs.simulated`). Each
tensor travels by the protocol its codec declares (:mod:`gcbench.envs.protocols`); the aggregator
groups a bucket's tensors by protocol, runs each group over an
:class:`~gcbench.envs.exchange.Exchange`, and appends raw, wire and time records to its
:class:`~gcbench.envs.traffic.TrafficLog` (append-only: callers add records through
:meth:`Aggregator.record`, never edit them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from ..compressors.errors import InvalidParameterError
from ..compressors.numerics import all_finite
from .collectives import Collective
from .errors import UnsupportedTopologyError
from .exchange import Clock, Exchange, Part, Recorder
from .framing import FramedLinks
from .protocols import PROTOCOLS
from .protocols import all_reduce
from .protocols import parameter_server as ps
from .traffic import TrafficLog
from .workers import WorkerCodecs, inner_codec, protocol_of

VERIFY_MODES = ("first", "always", "never")
#: What a step whose gradients hold NaN or Inf on some worker does (the DDP hook's and the simulated
#: cluster's ``non_finite``): ``"raise"`` NonFiniteGradientError, or ``"nan"``: every worker's result
#: for that bucket and the step's later ones is NaN after a flag's exchange (:meth:`Aggregator.all_finite`).
NON_FINITE_MODES = ("raise", "nan")


class Aggregator:
    """Averages one bucket of gradients across all workers through ``collective``.

    Args:
        workers: one :class:`WorkerCodecs` per local worker of ``collective``.
        collective: the transport.
        traffic: where wire, raw and time records go (one is created when None).
        verify_shared: ``"first"``, ``"always"`` or ``"never"``: when linear codecs' shared
            sections are checked across workers (:mod:`gcbench.envs.protocols.all_reduce`).
    """

    def __init__(
        self,
        workers: Sequence[WorkerCodecs],
        collective: Collective,
        traffic: TrafficLog | None = None,
        *,
        verify_shared: str = "first",
    ) -> None:
        if len(workers) != len(collective.local_ranks):
            raise InvalidParameterError(f"{len(workers)} WorkerCodecs for {len(collective.local_ranks)} local workers")
        if verify_shared not in VERIFY_MODES:
            raise InvalidParameterError(f"verify_shared must be 'first', 'always' or 'never', got {verify_shared!r}")
        self.workers = list(workers)
        self.collective = collective
        self.traffic = traffic if traffic is not None else TrafficLog()
        self.verify_shared = verify_shared
        self._verified: set[str] = set()
        #: The summed flats' layout per tuple of keys (:attr:`~gcbench.envs.exchange.Exchange.layouts`).
        self._layouts: dict[tuple[str, ...], list[tuple[torch.dtype, int]]] = {}
        self._recorder = Recorder(self.traffic, collective.local_ranks)
        #: Framing endpoints (header registries per link, :mod:`gcbench.envs.framing`): owned here so
        #: that a header sent once is referenced in every later step.
        self.links = FramedLinks()

    @property
    def world_size(self) -> int:
        """Workers in the collective."""
        return self.collective.world_size

    # -- what the hook and the policies use ---------------------------------------------------------

    def verified_keys(self) -> list[str]:
        """Keys whose shared sections were checked, sorted (for checkpoints)."""
        return sorted(self._verified)

    def set_verified(self, keys: Iterable[str]) -> None:
        """Replace the checked keys (restoring a checkpoint)."""
        self._verified = set(keys)
        self._layouts.clear()

    def invalidate(self, keys: Iterable[str]) -> None:
        """Forget that ``keys`` were checked (their codec parameters changed: new payload layouts)."""
        keys = set(keys)
        self._verified.difference_update(keys)
        for group in [g for g in self._layouts if keys.intersection(g)]:
            del self._layouts[group]

    def record(self, step: int, bucket: int, op: str, parts: Sequence[Part]) -> int:
        """Append one collective's wire records (``parts``: kind, bytes and padding per local worker)."""
        return self._recorder.record(step, bucket, op, parts)

    def broadcast(self, tensors: Sequence[torch.Tensor], *, src: int, step: int, kind: str) -> list[torch.Tensor]:
        """Broadcast rank ``src``'s tensor (one per local worker) and record it as ``broadcast``/``kind``."""
        out = self.collective.broadcast(tensors, src)
        self.record(step, -1, "broadcast", [(kind, [t.numel() * t.element_size() for t in tensors], None)])
        return out

    def all_finite(self, tensors: Sequence[torch.Tensor], *, step: int, bucket: int = -1) -> bool:
        """Whether every worker's tensor is finite (``tensors``: one per local worker), the same answer
        on every worker: each local worker's flag (1 where its tensor holds NaN or Inf) is summed over
        all workers in one int32 all-reduce, recorded as ``all_reduce``/``finite-flag`` (4 bytes a
        worker). Nothing else is sent and no codec state is touched."""
        flags = [torch.tensor([0 if all_finite(t) else 1], dtype=torch.int32, device=t.device) for t in tensors]
        total = self.collective.all_reduce(flags, inplace=True)
        self.record(step, bucket, "all_reduce", [("finite-flag", [f.numel() * f.element_size() for f in flags], None)])
        return int(total[0]) == 0

    def skips_step(self, tensors: Sequence[torch.Tensor], noted: list[int], *, step: int, bucket: int = -1) -> bool:
        """``non_finite="nan"`` (the DDP hook's and the simulated cluster's): whether this bucket of
        ``step`` averages to NaN. It does where an earlier bucket of the step was not finite (``noted``,
        the caller's list of such steps, ends with ``step``: every worker knows it, no flag is sent)
        or where some worker's tensor holds NaN or Inf (:meth:`all_finite`'s flag); ``step`` is then
        appended to ``noted``."""
        if noted[-1:] == [step]:
            return True
        if self.all_finite(tensors, step=step, bucket=bucket):
            return False
        noted.append(step)
        return True

    # -- entry points ------------------------------------------------------------------------------

    def _exchange(self, device: torch.device, step: int, bucket: int, outputs: dict[str, torch.Tensor] | None = None) -> Exchange:
        return Exchange(self.workers, self.collective, self._recorder, Clock(device, len(self.workers)), step=step,
                        bucket=bucket, verify_shared=self.verify_shared, verified=self._verified, links=self.links,
                        layouts=self._layouts, outputs=outputs)

    def _raw(self, grads: Sequence[Sequence[torch.Tensor]], step: int, bucket: int) -> None:
        for i, rank in enumerate(self.collective.local_ranks):
            self.traffic.raw(
                step, rank, sum(g.numel() * g.element_size() for g in grads[i]), sum(g.numel() for g in grads[i]), bucket=bucket
            )

    def _times(self, ex: Exchange) -> None:
        for i, rank in enumerate(self.collective.local_ranks):
            for phase, s in ex.clock.seconds[i].items():
                self.traffic.time(ex.step, rank, phase, s)

    def aggregate(
        self, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str], *, step: int, bucket: int = -1,
        into_grads: bool = False,
    ) -> list[torch.Tensor]:
        """Average ``grads[local_worker][j]`` (tensor ``keys[j]``) over all workers.

        Returns one averaged tensor per key (every worker's result is the same), shaped and typed
        like the gradients. Tensors are grouped by protocol (in order of first appearance, the same
        on every worker because codec parameters are), one batch of collectives per group.
        ``into_grads``: the first local worker's gradients are the caller's to overwrite (DDP's
        bucket, as torch's hooks do): a protocol may write a result into its gradient's memory once
        it has encoded it (the ``all_gather`` and per-tensor ``all_reduce`` protocols do), so that
        result is that gradient.
        """
        n_local = len(self.collective.local_ranks)
        if len(grads) != n_local or any(len(g) != len(keys) for g in grads):
            raise InvalidParameterError(f"grads must hold {len(keys)} tensors for each of {n_local} local workers")
        if not keys:
            return []
        self._raw(grads, step, bucket)
        groups: dict[str, list[int]] = {}
        for j, key in enumerate(keys):
            groups.setdefault(protocol_of(self.workers[0].codec_for(key)), []).append(j)
        out: list[torch.Tensor | None] = [None] * len(keys)
        outputs = dict(zip(keys, grads[0])) if into_grads else None
        ex = self._exchange(grads[0][0].device, step, bucket, outputs)
        for proto, idx in groups.items():
            run = PROTOCOLS.get(proto)
            if run is None:
                raise InvalidParameterError(f"no protocol {proto!r}; known: {sorted(PROTOCOLS)}")
            results = run(ex, [[g[j] for j in idx] for g in grads], [keys[j] for j in idx])
            for j, r in zip(idx, results):
                out[j] = r
        self._times(ex)
        return out  # type: ignore[return-value]

    def fusable(self, keys: Sequence[str]) -> bool:
        """Whether a bucket of ``keys`` can be aggregated as one flat tensor
        (:func:`gcbench.envs.protocols.all_reduce.run_fused`): every key has the same codec on every
        local worker, an ``elementwise`` one (no error-feedback wrapper, no per-tensor state)."""
        if not keys:
            return False
        for w in self.workers:
            codec = w.codec_for(keys[0])
            if inner_codec(codec) is not codec:  # error feedback keeps a residual per tensor, by key
                return False
            if not getattr(codec, "elementwise", False) or protocol_of(codec) != "all_reduce":
                return False
            if any(w.codec_for(k) is not codec for k in keys[1:]):
                return False
        return True

    def aggregate_fused(
        self, flats: Sequence[torch.Tensor], keys: Sequence[str], *, step: int, bucket: int = -1, checked: bool = False
    ) -> torch.Tensor:
        """The mean of ``flats`` (one flat bucket per local worker holding ``keys`` end to end) when
        :meth:`fusable` (``checked``: the caller has just asked); the flats may be overwritten.
        Records the same traffic as :meth:`aggregate`."""
        if len(flats) != len(self.collective.local_ranks):
            raise InvalidParameterError(f"flats must hold one tensor for each of {len(self.collective.local_ranks)} local workers")
        if not checked and not self.fusable(keys):
            raise InvalidParameterError("aggregate_fused needs keys sharing one elementwise codec (see Aggregator.fusable)")
        for i, rank in enumerate(self.collective.local_ranks):
            self.traffic.raw(step, rank, flats[i].numel() * flats[i].element_size(), flats[i].numel(), bucket=bucket)
        ex = self._exchange(flats[0].device, step, bucket)
        out = all_reduce.run_fused(ex, flats, keys)
        self._times(ex)
        return out

    def parameter_server(
        self,
        grads: Sequence[Sequence[torch.Tensor]],
        keys: Sequence[str],
        *,
        step: int,
        bucket: int = -1,
        pull: WorkerCodecs | None = None,
        server_step: ps.ServerStep | None = None,
    ) -> list[torch.Tensor]:
        """Push payloads to one server, run ``server_step`` there, pull the result
        (:mod:`gcbench.envs.protocols.parameter_server`). Needs every worker local (the simulator)."""
        if len(self.collective.local_ranks) != self.world_size:
            raise UnsupportedTopologyError("the parameter-server topology is simulated in one process only")
        self._raw(grads, step, bucket)
        ex = self._exchange(grads[0][0].device, step, bucket)
        out = ps.run(ex, grads, keys, pull=pull, server_step=server_step)
        self._times(ex)
        return out
