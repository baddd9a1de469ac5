"""The transports the execution layer runs on: one :class:`Collective` abstraction, two kinds.

The aggregation is written SPMD-style over the *local workers* of a collective: one (this rank) in
a real run (:class:`TorchCollective`, ``torch.distributed``), all ``W`` in a simulation
(:class:`LocalCollective`, one process). Every method takes one tensor per local worker and
returns what each local worker receives; since every worker receives the same thing, the steps
after a collective run once and their result is every worker's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..compressors.errors import InvalidParameterError
from .errors import CollectiveMismatchError


class Collective(ABC):
    """What the aggregation needs from a transport, for the local workers it serves.

    ``local_ranks[i]`` is the global rank of local worker ``i``; methods take one tensor per local
    worker (same shape and dtype on every worker) and return what each local worker receives.
    """

    world_size: int
    local_ranks: tuple[int, ...]

    @abstractmethod
    def all_reduce(self, tensors: Sequence[torch.Tensor], *, inplace: bool = False) -> list[torch.Tensor]:
        """Element-wise sum over all ``world_size`` workers; one result per local worker.

        ``inplace``: the caller owns ``tensors`` and no longer needs their values, so the sum may
        be written into them (a copy of the whole bucket saved in the DDP hook's fused path)."""

    @abstractmethod
    def all_gather(self, tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
        """Every worker's tensor, in rank order; one list per local worker."""

    @abstractmethod
    def broadcast(self, tensors: Sequence[torch.Tensor], src: int) -> list[torch.Tensor]:
        """Rank ``src``'s tensor on every worker (the others' contents are ignored); one per local worker."""


class LocalCollective(Collective):
    """All ``world_size`` workers live in this process (the simulated cluster).

    Sums run in rank order (``((t0 + t1) + t2) + ...``), which is what a 2-rank gloo all_reduce
    computes (``t0 + t1`` is commutative in IEEE arithmetic); with more ranks gloo's ring adds in
    another order, so float results may differ in the last bits from a real run with ``W > 2``.
    """

    def __init__(self, world_size: int) -> None:
        if world_size < 1:
            raise InvalidParameterError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self.local_ranks = tuple(range(world_size))

    def _check(self, tensors: Sequence[torch.Tensor]) -> None:
        if len(tensors) != self.world_size:
            raise InvalidParameterError(f"expected {self.world_size} tensors (one per worker), got {len(tensors)}")
        first = tensors[0]
        for t in tensors[1:]:
            if t.shape != first.shape or t.dtype != first.dtype:
                raise CollectiveMismatchError(
                    f"workers' tensors differ: {tuple(first.shape)} {first.dtype} vs {tuple(t.shape)} {t.dtype}"
                )

    def all_reduce(self, tensors: Sequence[torch.Tensor], *, inplace: bool = False) -> list[torch.Tensor]:
        self._check(tensors)
        total = tensors[0].clone()
        for t in tensors[1:]:
            total += t
        return [total] * self.world_size

    def all_gather(self, tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
        self._check(tensors)
        gathered = [t.clone() for t in tensors]
        return [gathered] * self.world_size

    def broadcast(self, tensors: Sequence[torch.Tensor], src: int) -> list[torch.Tensor]:
        self._check(tensors)
        return [tensors[src].clone() for _ in range(self.world_size)]


class TorchCollective(Collective):
    """This process's rank in a ``torch.distributed`` process group (gloo, NCCL...).

    Collectives are issued synchronously (they return when the data is there), so every rank
    issues the same collectives in the same order whatever DDP's bucketing is. ``progress`` is
    called before each collective (the launcher's hang detector counts these calls).
    """

    def __init__(self, group: Any = None, progress: Callable[[], None] | None = None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.local_ranks = (dist.get_rank(group),)
        self.progress = progress

    def all_reduce(self, tensors: Sequence[torch.Tensor], *, inplace: bool = False) -> list[torch.Tensor]:
        (t,) = tensors
        out = t if inplace and t.is_contiguous() else t.clone()
        if self.progress is not None:
            self.progress()
        self._dist.all_reduce(out, group=self.group)
        return [out]

    def all_gather(self, tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
        (t,) = tensors
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        if self.progress is not None:
            self.progress()
        self._dist.all_gather(out, t.contiguous(), group=self.group)
        return [out]

    def broadcast(self, tensors: Sequence[torch.Tensor], src: int) -> list[torch.Tensor]:
        (t,) = tensors
        out = t.clone()
        if self.world_size == 1:
            return [out]
        if self.progress is not None:
            self.progress()
        self._dist.broadcast(out, src=src, group=self.group)
        return [out]
