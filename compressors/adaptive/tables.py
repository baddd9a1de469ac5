"""The error and cost tables of Algorithm 1 (lines 4-5): layers x candidate parameters.

L-GreCo Sec. 4 ("Implementation"): between two decisions, each layer's gradients are accumulated
in an auxiliary buffer; the error table holds, for every layer and every candidate parameter, the
L2 distance between the accumulated gradient and its compressed-then-decompressed version,
"simulating compression/decompression of each layer ... without applying error feedback". The
public code accumulates the last 10 steps before a decision (``acc_iter = 10``) and scales the sum
by a constant (``delta / acc_iter``); the scale cancels in the DP (the budget and every error
scale alike), so gcbench uses the plain sum.

* ``E[l][j] = || decode_j(encode_j(G_l)) - G_l ||_2`` with the raw codec of candidate ``j``
  (``error_method="codec"``, any codec).
* PowerSGD (Appendix B): ``"svd"`` - the optimal rank-r error ``sqrt(sum_{i>r} sigma_i^2)`` for
  every rank from one ``svdvals`` (B.1); ``"power"`` - ``power_iters`` (5) power-iteration steps
  from a random start per rank (B.2); ``"auto"`` - per layer, the cheaper of the two by B.3's cost
  model (SVD ``O(n m min(n, m))`` against power ``O(iters n m sum(r))``, constant measured here). A rank at which
  gcbench's PowerSGD sends the tensor uncompressed (vectors; ``(n + m) r >= n m``) has error 0,
  as the codec's output does.
* Exact TopK: ``"sorted"`` - one ascending sort of the squared values per layer; the error of
  keeping the ``k`` largest is ``sqrt`` of the sum of the ``n - k`` smallest squares, for every
  candidate ``k`` at once (the same number the codec's payload gives: ties have equal magnitudes).
  The default for the ``"topk"`` ladder; ``"codec"`` runs a top-k per candidate instead.
* ``C[l][j]`` = ``payload.nbytes`` of candidate ``j``'s payload of layer ``l``: the real
  serialized size (header included), never a formula. By default measured on the same tensor as
  the error; pass ``cost_grads`` (e.g. one step's gradient) for codecs whose size depends on the
  data (3LC's zero runs, SketchML's keys) to price what is actually sent each step. For ladders
  whose payload size depends only on shape and dtype (``ladder.fixed_size``), a ``cost_cache``
  dict keeps the measured bytes across decisions (the policies pass one): the first decision
  encodes every cell, later ones only compute errors.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InvalidParameterError
from ..codecs.powersgd import matrix_shape, orthogonalize_, should_compress
from .ladders import Ladder

ERROR_METHODS = ("codec", "svd", "power", "auto", "sorted")


@dataclass
class Tables:
    """Error and cost tables of one decision.

    Attributes:
        errors: ``(L, K)`` float64, ``E[l][j]`` (L2 norm of the compression error).
        costs: ``(L, K)`` int64, ``C[l][j]`` (real payload bytes).
        keys: layer names, in row order.
        numel: ``(L,)`` element counts.
        raw_bytes: ``(L,)`` uncompressed bytes (``numel * element_size``).
        ladder: the candidates (columns).
        seconds: wall time of the table computation.
        methods: error method used per layer (``"codec"``, ``"svd"``, ``"power"``, ``"sorted"``
            or ``"raw"``: a PowerSGD vector, sent uncompressed, error 0).
    """

    errors: np.ndarray
    costs: np.ndarray
    keys: list[str]
    numel: np.ndarray
    raw_bytes: np.ndarray
    ladder: Ladder
    seconds: float = 0.0
    methods: list[str] = field(default_factory=list)

    @property
    def reference_index(self) -> int:
        """Column of the uniform default."""
        return self.ladder.reference_index


def _named(grads: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]) -> tuple[list[str], list[torch.Tensor]]:
    if isinstance(grads, Mapping):
        return list(grads.keys()), [g.detach() for g in grads.values()]
    tensors = [g.detach() for g in grads]
    return [str(i) for i in range(len(tensors))], tensors


def svd_tail_errors(matrix: torch.Tensor, ranks: Sequence[int]) -> np.ndarray:
    """Optimal rank-r approximation errors ``sqrt(sum_{i>r} sigma_i^2)`` for every ``r`` in ``ranks``.

    L-GreCo Appendix B.1: one ``svdvals``, then every rank's error from suffix sums of the squared
    singular values (one vectorised pass; the paper's "single matrix product"). Ranks at or above
    ``min(n, m)`` have error 0. Computed in float64 from float32 (or float64) singular values.
    """
    wd = torch.float64 if matrix.dtype == torch.float64 else torch.float32
    s = torch.linalg.svdvals(matrix.to(wd)).to(torch.float64)
    ss = s * s
    tails = torch.flip(torch.cumsum(torch.flip(ss, (0,)), 0), (0,))  # tails[i] = sum_{k >= i} s_k^2
    tails = torch.cat([tails, tails.new_zeros(1)])
    idx = torch.tensor([min(int(r), s.numel()) for r in ranks], dtype=torch.long, device=tails.device)
    return torch.sqrt(tails[idx].clamp(min=0)).cpu().numpy()


def power_iteration_errors(
    matrix: torch.Tensor, ranks: Sequence[int], *, iters: int = 5, generator: torch.Generator | None = None
) -> np.ndarray:
    """Rank-r errors ``||M - P Q^T||`` after ``iters`` power-iteration steps from a Gaussian start.

    L-GreCo Appendix B.2 (and the public code's ``error_method='Power'``): per rank, ``Q ~ N(0, 1)``,
    then ``iters`` times: orthogonalize Q, ``P = M Q``, orthogonalize P, ``Q = M^T P``; the error of
    ``P Q^T = P P^T M``. B.2: 5 power steps are enough for an error small against that of the optimal low-rank
    approximation SVD gives.
    """
    n, m = matrix.shape
    wd = torch.float64 if matrix.dtype == torch.float64 else torch.float32
    mat = matrix.to(wd)
    out = np.zeros(len(ranks), dtype=np.float64)
    for i, r0 in enumerate(ranks):
        r = min(int(r0), n, m)
        if r >= min(n, m):
            continue  # exact: error 0
        q = torch.randn(m, r, generator=generator, dtype=wd, device=mat.device)
        p = mat.new_empty(n, r)
        for _ in range(iters):
            orthogonalize_(q)
            p = orthogonalize_(mat @ q)
            q = mat.transpose(0, 1) @ p
        out[i] = float(torch.linalg.vector_norm(mat - p @ q.transpose(0, 1)))
    return out


def default_error_method(ladder: Ladder) -> str:
    """``"auto"`` (Appendix B) for PowerSGD rank ladders, ``"sorted"`` for exact TopK, else ``"codec"``."""
    if (ladder.codec, ladder.param) == ("powersgd", "rank"):
        return "auto"
    if _exact_topk(ladder):
        return "sorted"
    return "codec"


def _exact_topk(ladder: Ladder) -> bool:
    return ladder.codec == "topk" and ladder.param == "ratio" and ladder.base.get("method", "exact") == "exact"


def topk_sorted_errors(tensor: torch.Tensor, ratios: Sequence[float]) -> np.ndarray:
    """``||x - topk_k(x)||`` for ``k = num_selected(n, ratio)`` of every ratio, from one sort.

    Ascending sort of ``x^2`` (float64), prefix sums: the error of keeping the ``k`` largest is
    ``sqrt(sum of the n - k smallest squares)``.
    """
    from ..codecs.topk import num_selected

    x = tensor.detach().reshape(-1).to(torch.float64)
    n = x.numel()
    csum = torch.cumsum(torch.sort(x * x).values, 0)
    csum = torch.cat([csum.new_zeros(1), csum])  # csum[i] = sum of the i smallest squares
    rest = torch.tensor([n - num_selected(n, float(r)) for r in ratios], dtype=torch.long, device=csum.device)
    return torch.sqrt(csum[rest].clamp(min=0)).cpu().numpy()


#: Appendix B.3's choice, calibrated on this project's CPU (torch 2.13, 2 threads): ``svdvals`` of an
#: ``n x m`` matrix took about as long as ``AUTO_FACTOR * iters * sum(r) / min(n, m)`` power-iteration
#: sweeps over all ranks (256 x 2304 and 512 x 4608 matrices, ranks 2..8: SVD 1.2 s and 4.4 s,
#: power 0.66 s and 1.3 s).
AUTO_FACTOR = 0.8


def _auto_method(n: int, m: int, ranks: Sequence[int], iters: int) -> str:
    """Appendix B.3: SVD when the rank range is large relative to ``min(n, m)``, power iteration otherwise.

    SVD costs ``O(n m min(n, m))`` for every rank at once, power iteration ``O(iters n m sum(r))``;
    SVD is chosen when ``min(n, m) <= AUTO_FACTOR * iters * sum(r)``.
    """
    return "svd" if min(n, m) <= AUTO_FACTOR * iters * sum(min(int(r), n, m) for r in ranks) else "power"


def measure_tables(
    ladder: Ladder,
    grads: Mapping[str, torch.Tensor] | Sequence[torch.Tensor],
    *,
    cost_grads: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | None = None,
    error_method: str | None = None,
    power_iters: int = 5,
    seed: int = 0,
    cost_cache: dict | None = None,
) -> Tables:
    """Build the error and cost tables for ``grads`` (one accumulated gradient per layer).

    Args:
        ladder: the candidate parameters (columns).
        grads: accumulated gradient of each layer (mapping name -> tensor, or a sequence).
        cost_grads: tensors whose payload sizes are the costs (default: ``grads``); same layout.
        error_method: ``"codec"`` (encode/decode with the raw codec); for PowerSGD ladders
            ``"svd"``, ``"power"``, ``"auto"`` (Appendix B); for exact TopK ``"sorted"``. None:
            ``"auto"`` for PowerSGD (what L-GreCo does), ``"sorted"`` for exact TopK, else ``"codec"``.
        power_iters: power-iteration steps for ``"power"``/``"auto"`` (5, Appendix B.2).
        seed: seeds the power-iteration starts.
        cost_cache: a dict reused across calls for ``fixed_size`` ladders: ``(codec, fixed params,
            value, shape, dtype, device) -> bytes``, filled by real encodes on first sight (ignored
            for other ladders).

    Returns:
        :class:`Tables` with ``errors[l][j]`` and ``costs[l][j]`` (real ``payload.nbytes``).
    """
    if error_method is None:
        error_method = default_error_method(ladder)
    if error_method not in ERROR_METHODS:
        raise InvalidParameterError(f"error_method must be one of {ERROR_METHODS}, got {error_method!r}")
    lowrank = error_method in ("svd", "power", "auto")
    if lowrank and (ladder.param != "rank" or ladder.codec != "powersgd"):
        raise InvalidParameterError(f"error_method={error_method!r} is for PowerSGD rank ladders only")
    if error_method == "sorted" and not _exact_topk(ladder):
        raise InvalidParameterError("error_method='sorted' is for exact TopK ratio ladders only")
    by_codec = error_method == "codec"
    cache = cost_cache if ladder.fixed_size else None
    base_key = tuple(sorted(ladder.base.items()))
    keys, tensors = _named(grads)
    if cost_grads is None:
        cost_tensors = None
    else:
        _, cost_tensors = _named(cost_grads)
        if len(cost_tensors) != len(tensors) or any(a.shape != b.shape for a, b in zip(cost_tensors, tensors)):
            raise InvalidParameterError("cost_grads must have the layers and shapes of grads")
    L, K = len(tensors), len(ladder)
    errors = np.zeros((L, K), dtype=np.float64)
    costs = np.zeros((L, K), dtype=np.int64)
    numel = np.array([g.numel() for g in tensors], dtype=np.int64)
    raw = np.array([g.numel() * g.element_size() for g in tensors], dtype=np.int64)
    codecs = [ladder.build(j) for j in range(K)]
    gen = torch.Generator(device=tensors[0].device if tensors else "cpu")
    gen.manual_seed(seed)
    methods: list[str] = []
    t0 = time.perf_counter()
    for li, g in enumerate(tensors):
        method = error_method if error_method in ("codec", "sorted") else "codec"
        if error_method == "sorted":
            errors[li] = topk_sorted_errors(g, [float(v) for v in ladder.values])
        dims = matrix_shape(g.shape) if lowrank else None
        if lowrank:
            ranks = [int(v) for v in ladder.values]
            if dims is not None:
                n, m = dims
                method = _auto_method(n, m, ranks, power_iters) if error_method == "auto" else error_method
                mat = g.reshape(n, m)
                errs = (
                    svd_tail_errors(mat, ranks)
                    if method == "svd"
                    else power_iteration_errors(mat, ranks, iters=power_iters, generator=gen)
                )
                sent_raw = np.array([not should_compress(n, m, r) for r in ranks])
                errors[li] = np.where(sent_raw, 0.0, errs)
            else:
                method = "raw"  # vectors: gcbench's PowerSGD sends them uncompressed, error 0
        for j, codec in enumerate(codecs):
            ckey = (ladder.codec, base_key, ladder.values[j], tuple(g.shape), g.dtype, str(g.device))
            cached = cache.get(ckey) if cache is not None else None
            payload = None
            if by_codec:
                # a fresh state per cell: no warm start, and the random stream restarts from the
                # codec's seed, so a cell does not depend on which layers were measured before it
                codec.reset_state()
                payload = codec.encode(g)
                dec = codec.decode(payload)
                wd = torch.float64 if g.dtype == torch.float64 else torch.float32
                errors[li, j] = float(torch.linalg.vector_norm(dec.to(wd) - g.to(wd)))
            if cached is not None:
                costs[li, j] = cached
                continue
            if payload is None or cost_tensors is not None:
                codec.reset_state()
                payload = codec.encode(g if cost_tensors is None else cost_tensors[li])
            costs[li, j] = payload.nbytes
            if cache is not None:
                cache[ckey] = int(payload.nbytes)
        methods.append(method)
    seconds = time.perf_counter() - t0
    if not np.isfinite(errors).all():  # pragma: no cover - codecs reject non-finite input first
        raise InvalidParameterError("non-finite compression error")
    return Tables(errors, costs, keys, numel, raw, ladder, seconds, methods)


def accumulate(steps: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Sum per-layer gradients over several steps (the accumulation buffer of Sec. 4)."""
    if not steps:
        raise InvalidParameterError("nothing to accumulate")
    out = {k: v.detach().clone() for k, v in steps[0].items()}
    for s in steps[1:]:
        if s.keys() != out.keys():
            raise InvalidParameterError("every step must hold the same layers")
        for k, v in s.items():
            out[k].add_(v)
    return out


def compression_ratio(raw_bytes: np.ndarray | int, cost: np.ndarray | int) -> float:
    """``sum(raw bytes) / sum(payload bytes)``."""
    c = float(np.sum(cost))
    return float(np.sum(raw_bytes)) / c if c > 0 else math.inf
