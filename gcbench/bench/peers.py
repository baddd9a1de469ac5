"""Other implementations ``gcbench bench`` measures beside gcbench's codecs: torch's own PowerSGD hook
math (without communication), a CSVec-style Count Sketch and hivemind's compression classes, when
hivemind is importable; the comparison of each gcbench row with its fastest peer; and the floor of
Count Sketch accumulate's design (:func:`countsketch_floor`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .inputs import SEED


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


#: gcbench row -> the peer rows that implement the same method (every gcbench codec must
#: be at least as fast as the fastest peer implementing the same method in the same run). 8-bit:
#: QSGD at 127 levels (a sign and 7 bits per element, blockwise norms) and ZipML-8 against
#: hivemind's three 8-bit quantizers; fp16 against hivemind's Float16; PowerSGD against torch's
#: hook math; Count Sketch's accumulate against the CSVec-style peer.
_HIVEMIND_8BIT = tuple(f"hivemind {n}" for n in ("Uniform8BitQuantization", "Quantile8BitQuantization", "BlockwiseQuantization"))
PEERS_OF: dict[str, tuple[str, ...]] = {
    "qsgd": _HIVEMIND_8BIT,
    "zipml8": _HIVEMIND_8BIT,
    "fp16": ("hivemind Float16Compression",),
    "powersgd [resnet50]": ("torch powerSGD_hook math [resnet50]",),
    "countsketch.accumulate": ("CSVec-style countsketch.accumulate",),
}


def _peer_metric(row: Any) -> tuple[str, float] | None:
    """What a row is compared on: encode + decode time over its own interleaved ``copy_`` when
    both were timed (with gcbench's allocating decode where it was timed too: hivemind's
    ``extract`` allocates its result), else encode alone (accumulate rows); None when not measured."""
    if getattr(row, "status", None) != "ok":
        return None
    if getattr(row, "total_new_x_copy", None) is not None:
        return "enc+dec", row.total_new_x_copy
    if row.total_x_copy is not None:
        return "enc+dec", row.total_x_copy
    if row.encode_x_copy is not None and row.decode_x_copy is None:
        return "enc", row.encode_x_copy
    return None


def compare_with_peers(rows: Sequence[Any]) -> None:
    """Fill ``row.extra`` of every gcbench row that has a measured peer in ``rows`` (see
    :data:`PEERS_OF`): ``vs_fastest_peer`` (its time / the fastest peer's, each as a multiple of
    its own same-run ``copy_``, so < 1 is faster), ``fastest_peer`` (that peer's name),
    ``peer_metric`` and ``at_least_as_fast_as_peers`` (``vs_fastest_peer <= 1``). Rows whose
    peers were not measured (hivemind absent, failed) get nothing."""
    by_name: dict[str, list[Any]] = {}
    for r in rows:
        by_name.setdefault(r.name, []).append(r)
    for r in rows:
        mine = _peer_metric(r) if r.name in PEERS_OF else None
        if mine is None:
            continue
        best: tuple[float, str] | None = None
        for peer_name in PEERS_OF[r.name]:
            for peer in by_name.get(peer_name, ()):
                theirs = _peer_metric(peer)
                if theirs is not None and theirs[0] == mine[0] and theirs[1] > 0 and (best is None or theirs[1] < best[0]):
                    best = (theirs[1], peer_name)
        if best is None:
            continue
        ratio = mine[1] / best[0]
        r.extra.update({"vs_fastest_peer": ratio, "fastest_peer": best[1], "peer_metric": mine[0],
                        "at_least_as_fast_as_peers": ratio <= 1.0})


def peer_cell(row: Any) -> str:
    """The table cell: ``0.85x Float16Compression: as fast`` / ``... : slower``, or ``-``."""
    ratio = row.extra.get("vs_fastest_peer")
    if ratio is None:
        return "-"
    name = row.extra["fastest_peer"].removeprefix("hivemind ")
    return f"{ratio:.2f}x {name}: {'as fast' if row.extra['at_least_as_fast_as_peers'] else 'slower'}"


def countsketch_floor(flat: torch.Tensor, cols: int, rows: int, coef: torch.Tensor, *, bins: int = 0) -> Callable:
    """The floor of a Count Sketch accumulate built on torch's scatter-add: a callable that ``index_add_``s
    ``flat`` into ``rows`` accumulators by codes computed once and held (``4 rows d`` bytes, which the codec does
    not keep), the two halves on accumulate's own thread pool, as accumulate splits them. Accumulate adds in
    index order (that fixes the table's bytes), so its ``index_add_`` path cannot beat this; its C pass
    (:func:`gcbench.compressors.kernels.countsketch.accumulate_c`: codes and additions in one loop, no
    per-element dispatch) can. ``bins`` (a power of 2): codes folded into that many bins, the scatter-add's
    cost without cache misses."""
    from ..compressors.codecs.countsketch.hashes import compute_codes, thread_pool

    codes = compute_codes(d := flat.numel(), cols, coef, flat.device)
    if bins:
        codes &= bins - 1
    pool, half = thread_pool(), d // 2
    accs = [torch.zeros(bins or 2 * cols, device=flat.device) for _ in range(2 * rows)]  # code = 2 bucket + sign

    def run(h: int) -> None:
        s, e = (0, half) if h == 0 else (half, d)
        for r in range(rows):
            accs[2 * r + h].zero_().index_add_(0, codes[r, s:e], flat[s:e])

    def floor() -> None:
        if pool is None:
            run(0)
            run(1)
        else:
            list(pool.map(run, range(2)))

    return floor
