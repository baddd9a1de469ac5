"""The comparators of L-GreCo Sec. 5.3 (Table 4), as functions of the same error and cost tables.

* :func:`uniform_choice` - every layer at the default (the paper's "uniform" baseline).
* :func:`cgx_kmeans_choice` - CGX's adaptive scheme (Markov et al., 2022). What L-GreCo says of
  it (Sec. 5.3, the CGX comparison; Sec. 2 calls it a k-means heuristic): "CGX's adaptive
  compression is based on k-means and maps layers into a 2-dimensional space (layer size vs. L2
  error). The algorithm clusters the layers into a number of groups and assigns predefined
  compression parameters to the layers of each group"; the paper ran
  it with PowerSGD, default rank 32, range 8..64, 6 clusters. Not specified there, so gcbench's
  interpretation (documented, seeded, deterministic):

  1. features: (layer size in elements, L2 error at the reference parameter), each min-max scaled
     to [0, 1] (``log_size=True`` scales ``log(size)`` instead);
  2. k-means (k-means++ start from ``seed``, Lloyd iterations) into ``k = 6`` clusters (fewer when
     there are fewer distinct layers);
  3. the "predefined parameters": ``k`` candidates evenly spaced along the ladder (both ends
     included), ordered from least to most compression by the table's total cost;
  4. clusters ranked by ``size - error`` of their centroid: the largest, least sensitive cluster
     gets the most compression, the smallest, most sensitive one the least.

  No error budget is enforced (CGX has none); compare its error and bytes with L-GreCo's.
* :func:`global_topk` - one top-k over all layers' magnitudes at a total density (each layer then
  sends however many of its coordinates made the global cut), priced with the real TopK codec.
* :class:`Accordion` - Agarwal et al., "Adaptive Gradient Communication via Critical Learning
  Regime Identification", MLSys 2021: per layer, compare the norm of the gradient accumulated over
  the last period with the previous period's; ``|old - new| / old >= eta`` (eta = 0.5) means a
  critical regime -> the *low*-compression setting, otherwise the *high*-compression one. The first
  period (no previous norm) is critical, as a learning-rate decay is (Accordion Sec. 3). This is
  the rule of L-GreCo's own Accordion hook (``accordion_hook.py``: ``ratio < eta`` -> ``min_rank``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import InvalidParameterError
from ..codecs.topk import num_selected
from .dp import reference_vector


@dataclass
class Assignment:
    """A per-layer choice evaluated on the tables."""

    name: str
    choice: np.ndarray
    cost: float
    error: float
    extra: dict[str, Any] = field(default_factory=dict)


def uniform_choice(layers: int, index: int) -> np.ndarray:
    """Every layer at candidate ``index``."""
    return np.full(layers, int(index), dtype=np.int64)


def evaluate(name: str, errors: np.ndarray, costs: np.ndarray, choice: Sequence[int], **extra: Any) -> Assignment:
    """Total cost and total error of ``choice`` on the tables."""
    e, c = np.asarray(errors, dtype=np.float64), np.asarray(costs, dtype=np.float64)
    ch = np.asarray(choice, dtype=np.int64)
    rows = np.arange(e.shape[0])
    return Assignment(name, ch, float(c[rows, ch].sum()), float(e[rows, ch].sum()), dict(extra))


# -- k-means ----------------------------------------------------------------------------------------


def kmeans(points: np.ndarray, k: int, *, seed: int = 0, iters: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means with a k-means++ start drawn from ``numpy.random.default_rng(seed)``.

    Deterministic for a seed. An emptied cluster is re-seeded with the point farthest from its
    centroid. Returns ``(labels (N,), centroids (k, dims))``; ``k`` is capped at the number of
    distinct points.
    """
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise InvalidParameterError("kmeans needs a non-empty (points, dims) array")
    distinct = np.unique(x, axis=0).shape[0]
    k = max(1, min(int(k), distinct))
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    centroids = np.empty((k, x.shape[1]))
    centroids[0] = x[rng.integers(n)]
    d2 = ((x - centroids[0]) ** 2).sum(1)
    for i in range(1, k):  # k-means++: next centre with probability proportional to D(x)^2
        total = d2.sum()
        idx = int(rng.choice(n, p=d2 / total)) if total > 0 else int(rng.integers(n))
        centroids[i] = x[idx]
        d2 = np.minimum(d2, ((x - centroids[i]) ** 2).sum(1))
    labels = np.full(n, -1, dtype=np.int64)
    for _ in range(iters):
        dist = ((x[:, None, :] - centroids[None, :, :]) ** 2).sum(2)
        new = np.argmin(dist, axis=1)
        for j in range(k):
            if not np.any(new == j):  # empty cluster: take the point worst served by its centroid
                far = int(np.argmax(dist[np.arange(n), new]))
                new[far] = j
        if np.array_equal(new, labels):
            break
        labels = new
        for j in range(k):
            centroids[j] = x[labels == j].mean(0)
    return labels, centroids


def _minmax(v: np.ndarray) -> np.ndarray:
    lo, hi = float(v.min()), float(v.max())
    return np.zeros_like(v) if hi <= lo else (v - lo) / (hi - lo)


def cgx_kmeans_choice(
    errors: np.ndarray,
    costs: np.ndarray,
    numel: Sequence[int],
    reference: int | Sequence[int],
    *,
    k: int = 6,
    seed: int = 0,
    log_size: bool = False,
) -> Assignment:
    """CGX's k-means layer assignment (see the module docstring for the interpretation)."""
    e, c = np.asarray(errors, dtype=np.float64), np.asarray(costs, dtype=np.float64)
    L, K = e.shape
    ref = reference_vector(reference, L, K)
    size = np.asarray(numel, dtype=np.float64)
    if size.shape != (L,):
        raise InvalidParameterError("numel must hold one size per layer")
    feats = np.stack([_minmax(np.log(size) if log_size else size), _minmax(e[np.arange(L), ref])], 1)
    labels, centroids = kmeans(feats, k, seed=seed)
    kk = centroids.shape[0]
    # candidates from least to most compression (most bytes first), then kk evenly spaced of them
    order = np.argsort(-c.sum(0), kind="stable")
    settings = order[np.round(np.linspace(0, K - 1, kk)).astype(np.int64)] if kk > 1 else order[[K // 2]]
    score = centroids[:, 0] - centroids[:, 1]  # big and insensitive -> more compression
    rank_of_cluster = np.empty(kk, dtype=np.int64)
    rank_of_cluster[np.argsort(score, kind="stable")] = np.arange(kk)
    choice = settings[rank_of_cluster[labels]]
    return evaluate("cgx-kmeans", e, c, choice, labels=labels, centroids=centroids, settings=settings)


# -- global top-k -----------------------------------------------------------------------------------


@dataclass
class GlobalTopK:
    """Global top-k across layers at one total density, priced with real TopK payloads.

    Attributes:
        keys: layer names.
        counts: coordinates each layer contributes to the global top-k.
        ratios: per-layer TopK ``ratio`` sending exactly ``counts`` (``1 / numel`` where the count is
            0: gcbench's TopK sends at least one coordinate, so such a layer is priced and
            reconstructed with its single largest coordinate).
        threshold: the smallest selected magnitude.
        bytes: per-layer real payload bytes; ``cost`` their sum.
        errors: per-layer L2 error of the decoded payloads; ``error`` their sum.
    """

    keys: list[str]
    counts: np.ndarray
    ratios: np.ndarray
    threshold: float
    bytes: np.ndarray
    errors: np.ndarray

    @property
    def cost(self) -> float:
        return float(self.bytes.sum())

    @property
    def error(self) -> float:
        return float(self.errors.sum())

    def layer_params(self) -> dict[str, dict[str, Any]]:
        """``{key: {"ratio": r}}`` for the DDP hook's per-layer parameters."""
        return {k: {"ratio": float(r)} for k, r in zip(self.keys, self.ratios)}


def global_topk(
    grads: Mapping[str, torch.Tensor] | Sequence[torch.Tensor], density: float, *, codec: str = "topk"
) -> GlobalTopK:
    """Select the ``round(density * N)`` largest magnitudes over all layers (``N`` = total elements).

    One ``torch.topk`` over the concatenated magnitudes; per-layer counts by ``bincount`` of the
    selected positions' layer ids. Each layer is then encoded with the registry ``codec`` (TopK) at
    ratio ``count / numel``, whose ``round(ratio * n)`` is exactly ``count``: bytes and errors are
    the real payloads'.
    """
    from ..registry import get

    if isinstance(grads, Mapping):
        keys, tensors = list(grads.keys()), [g.detach() for g in grads.values()]
    else:
        tensors = [g.detach() for g in grads]
        keys = [str(i) for i in range(len(tensors))]
    if not tensors:
        raise InvalidParameterError("global_topk needs at least one layer")
    if not (0 < density <= 1):
        raise InvalidParameterError(f"density must be in (0, 1], got {density}")
    numel = np.array([t.numel() for t in tensors], dtype=np.int64)
    flat = torch.cat([t.reshape(-1).abs().to(torch.float32) for t in tensors])
    total = flat.numel()
    k = num_selected(total, density)
    vals, idx = torch.topk(flat, k, sorted=False)
    offsets = torch.tensor(np.cumsum(numel), device=flat.device)
    layer_of = torch.bucketize(idx, offsets, right=True)
    counts = torch.bincount(layer_of, minlength=len(tensors)).cpu().numpy().astype(np.int64)
    ratios = np.where(counts > 0, counts / np.maximum(numel, 1), 1.0 / np.maximum(numel, 1))
    nbytes = np.zeros(len(tensors), dtype=np.int64)
    errs = np.zeros(len(tensors), dtype=np.float64)
    for i, t in enumerate(tensors):
        cod = get(codec, ratio=float(ratios[i]))
        p = cod.encode(t)
        nbytes[i] = p.nbytes
        errs[i] = float(torch.linalg.vector_norm(cod.decode(p).float() - t.float()))
    return GlobalTopK(keys, counts, ratios, float(vals.min()) if k else math.inf, nbytes, errs)


# -- Accordion --------------------------------------------------------------------------------------


class Accordion:
    """Accordion's per-layer switch between a low- and a high-compression setting.

    Args:
        low: the low-compression setting (e.g. PowerSGD rank 64), used in critical regimes.
        high: the high-compression setting (e.g. rank 16).
        eta: the detection threshold (0.5, Accordion's and L-GreCo's value).

    Call :meth:`update` once per period (an epoch in Accordion; L-GreCo's decision period) with the
    per-layer norms of the gradient accumulated over that period.
    """

    def __init__(self, low: Any, high: Any, eta: float = 0.5) -> None:
        if not (math.isfinite(eta) and eta > 0):
            raise InvalidParameterError(f"eta must be positive, got {eta}")
        self.low, self.high, self.eta = low, high, float(eta)
        self.previous: np.ndarray | None = None
        self.critical: np.ndarray | None = None
        self.history: list[np.ndarray] = []

    def reset(self) -> None:
        """Forget the previous norms (the next update is critical)."""
        self.previous, self.critical = None, None
        self.history.clear()

    def state_dict(self) -> dict[str, Any]:
        """The previous period's norms and flags, and the flag history (plain lists)."""
        return {
            "previous": None if self.previous is None else self.previous.tolist(),
            "critical": None if self.critical is None else self.critical.tolist(),
            "history": [h.tolist() for h in self.history],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        prev, crit = state.get("previous"), state.get("critical")
        self.previous = None if prev is None else np.asarray(prev, dtype=np.float64)
        self.critical = None if crit is None else np.asarray(crit, dtype=bool)
        self.history = [np.asarray(h, dtype=bool) for h in state.get("history", [])]

    def detect(self, norms: Sequence[float], *, lr_decayed: bool = False) -> np.ndarray:
        """Per-layer critical-regime flags for this period's norms (and remember them)."""
        new = np.asarray(norms, dtype=np.float64)
        if self.previous is None or self.previous.shape != new.shape:
            crit = np.ones(new.shape, dtype=bool)
        else:
            old = self.previous
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(old > 0, np.abs(old - new) / np.where(old > 0, old, 1.0), np.inf)
            crit = rel >= self.eta
        if lr_decayed:
            crit = np.ones_like(crit)
        self.previous, self.critical = new, crit
        self.history.append(crit.copy())
        return crit

    def update(self, norms: Sequence[float], *, lr_decayed: bool = False) -> list[Any]:
        """Per-layer settings: ``low`` where critical, ``high`` elsewhere."""
        crit = self.detect(norms, lr_decayed=lr_decayed)
        return [self.low if c else self.high for c in crit]
