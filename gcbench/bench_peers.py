"""Other implementations ``gcbench bench`` measures beside gcbench's codecs: torch's own PowerSGD hook
math (without communication) and hivemind's compression classes, when hivemind is importable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .bench_inputs import SEED


class TorchPowerSGDMath:
    """The computation of torch's ``powerSGD_hook`` on a list of matrices, without communication.

    As in ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`` (warm start, no batching of
    same-shape tensors, ``orthogonalization_epsilon = 0``): P and Q live in one flat buffer each;
    :meth:`encode` re-orthogonalizes the previous Q, ``P = M Q`` (``bmm``), orthogonalizes P with
    the hook's ``_orthogonalize`` (QR for rank > 2) and ``Q = M^T P``; :meth:`decode` writes
    ``P Q^T`` into preallocated outputs (the hook writes into the gradient itself). The two
    all-reduces of the hook are left out, as gcbench's codec timing leaves out communication.
    """

    def __init__(self, matrices: Sequence[torch.Tensor], rank: int = 4, seed: int = SEED) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

        self._orth = _orthogonalize
        self.tensors = [t.reshape(1, t.shape[0], -1) for t in matrices]
        dev = self.tensors[0].device if self.tensors else torch.device("cpu")
        dims = [(t.shape[1], t.shape[2], min(t.shape[1], t.shape[2], rank)) for t in self.tensors]
        p_mem = torch.empty(sum(n * r for n, _, r in dims), device=dev)
        q_mem = torch.empty(sum(m * r for _, m, r in dims), device=dev)
        self.ps, self.qs = [], []
        pi = qi = 0
        for n, m, r in dims:
            self.ps.append(p_mem[pi : pi + n * r].view(1, n, r))
            self.qs.append(q_mem[qi : qi + m * r].view(1, m, r))
            pi += n * r
            qi += m * r
        gen = torch.Generator().manual_seed(seed)
        for q in self.qs:  # the hook's first step: random Qs, orthogonalized
            q.copy_(torch.randn(q.shape, generator=gen))
            self._orth(q, 0)
        self.outputs = [torch.empty_like(t) for t in self.tensors]

    def encode(self) -> None:
        """One step's P and Q (warm start from the previous Q)."""
        for q in self.qs:
            self._orth(q, 0)
        for t, q, p in zip(self.tensors, self.qs, self.ps):
            torch.bmm(t, q, out=p)
        for p in self.ps:
            self._orth(p, 0)
        for t, p, q in zip(self.tensors, self.ps, self.qs):
            torch.bmm(t.transpose(1, 2), p, out=q)

    def decode(self) -> None:
        """``P Q^T`` of every matrix, into the preallocated outputs."""
        for p, q, out in zip(self.ps, self.qs, self.outputs):
            torch.bmm(p, q.transpose(1, 2), out=out)


HIVEMIND_CLASSES = ("Float16Compression", "Uniform8BitQuantization", "Quantile8BitQuantization", "BlockwiseQuantization")


def hivemind_codecs() -> tuple[dict[str, Any], str | None]:
    """hivemind's compression objects by class name, or ``({}, why)`` when hivemind is absent."""
    try:
        import hivemind.compression as hc
    except Exception as err:  # noqa: BLE001 - any import failure means: no peer rows
        return {}, f"hivemind not importable ({type(err).__name__}: {err}); optional extra: pip install gcbench[peers]"
    out = {}
    for name in HIVEMIND_CLASSES:
        cls = getattr(hc, name, None)
        if cls is not None:
            try:
                out[name] = cls()
            except Exception:  # noqa: BLE001, S112 - e.g. BlockwiseQuantization without bitsandbytes: no row
                continue
    return out, None


class CSVecStyleSketch:
    """A Count Sketch written the way CSVec (Ivkin et al.'s ``csvec`` package) builds one: an
    *independent, short implementation* for ``gcbench bench``'s peer rows, not the csvec package.

    As CSVec: six random int64 hash coefficients per row from ``torch.randint(0, p)``, buckets
    ``((h1 * i + h2) mod p) mod c`` and signs from a degree-3 polynomial mod ``p``, both computed in
    plain int64 (whose products can wrap: CSVec's arithmetic, kept as it is), stored as int64
    buckets and float32 signs (``r x d`` each); ``accumulate(v)``: per row
    ``table[j] += bincount(buckets[j], weights=signs[j] * v, minlength=c)``.
    """

    PRIME = 2**61 - 1

    def __init__(self, d: int, c: int, r: int, seed: int = SEED, device: torch.device | str = "cpu") -> None:
        gen = torch.Generator().manual_seed(seed)
        h = torch.randint(0, self.PRIME, (r, 6), generator=gen, dtype=torch.int64).to(device)
        tokens = torch.arange(d, dtype=torch.int64, device=device).reshape(1, d)
        self.buckets = ((h[:, 0:1] * tokens + h[:, 1:2]) % self.PRIME) % c
        poly = ((h[:, 2:3] * tokens + h[:, 3:4]) * tokens + h[:, 4:5]) * tokens + h[:, 5:6]
        self.signs = ((poly % self.PRIME) % 2).to(torch.float32) * 2 - 1
        self.table = torch.zeros((r, c), dtype=torch.float32, device=device)
        self.c = c

    def accumulate(self, vec: torch.Tensor) -> None:
        """Add the sketch of ``vec`` (float32, length ``d``) to the table."""
        for j in range(self.table.shape[0]):
            self.table[j].add_(torch.bincount(self.buckets[j], weights=self.signs[j] * vec, minlength=self.c))

    def zero(self) -> "CSVecStyleSketch":
        """Clear the table."""
        self.table.zero_()
        return self
