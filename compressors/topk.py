"""Top-k sparsification: send the ``k`` largest-magnitude coordinates and their indices.

References:

* Aji & Heafield, "Sparse Communication for Distributed Gradient Descent", EMNLP 2017 (gradient
  dropping: keep the largest magnitudes);
* Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory", NeurIPS 2018 (Definition 2.1: top-k is
  a ``k/n``-contraction, ``||x - top_k(x)||^2 <= (1 - k/n) ||x||^2``);
* Lin et al., "Deep Gradient Compression", ICLR 2018 (Sec. 3.1; threshold estimated from a
  sample, Sec. 5, and the released ``dgc/compression.py``): the *sampled* threshold used by
  ``method="sampled"`` and by :class:`~.dgc.DGC`.

Selection (``k = max(1, round(ratio * n))``, clipped to ``n``; Python's ``round``):

* ``method="exact"``: ``torch.topk`` on ``|x|``; exactly ``k`` coordinates. Among equal magnitudes
  the choice is torch's (deterministic for a given input and device).
* ``method="sampled"`` (:func:`sampled_topk_indices`): DGC's estimate. ``s = max(ceil(n / 100),
  ceil(2 n / k))`` magnitudes are drawn uniformly (with replacement) with the codec generator; the
  threshold is the smallest of the sample's top ``ceil(s k / n)``; every ``|x| >= thr`` is a
  candidate. If more than ``k`` candidates pass, the exact top ``k`` *among the candidates* is kept
  (DGC does this above ``1.3 k`` and otherwise truncates by position; refining is cheap and never
  worse). If fewer than ``0.8 k`` pass, the threshold is multiplied by 0.8 and the mask rebuilt, at
  most 10 times (DGC's ``compress_lower_bound`` / ``max_adaptation_iters``). So ``1 <= count <= k``,
  and ``count >= 0.8 k`` unless ten lowerings did not get there (e.g. a tensor with fewer than
  ``0.8 k`` non-zeros). The selected set is always a top set: every unselected magnitude is
  ``<=`` every selected one. Tensors with ``n <= s`` (tiny ones, ``k <= 2``) use the exact path,
  as DGC does. Deviation from DGC: samples are uniform random positions (DGC's
  ``strided_sample=False``), not a strided slice with a random start, and DGC's ``k`` is
  ``ceil(ratio n)`` where gcbench uses ``round``.

Payload: ``[indices, values]``. Indices are sorted ascending, unique, int32 when ``n < 2**31``
else int64; values are ``x[indices]`` in the input's dtype (exact copies, so nothing is lost that
``decode`` would keep: it returns the input dtype anyway; fp16/bf16 inputs pay 2 bytes a value).
``decode`` scatters the values into zeros. It rejects (``CorruptPayloadError``) indices out of
range, unsorted or repeated indices, non-float or non-finite values, and counts a correct encoder
cannot write (``!= k`` for exact, outside ``1..k`` for sampled).

The helpers :func:`num_selected`, :func:`index_dtype`, :func:`topk_indices`,
:func:`sampled_topk_indices`, :func:`sparse_sections` and :func:`decode_sparse` are shared with
:mod:`.dgc`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch

from .base import FLOAT_DTYPES, Codec, Stage, expect_sections
from .errors import CorruptPayloadError

METHODS = ("exact", "sampled")

#: DGC defaults (``dgc/compression.py``): fraction of the tensor sampled, and the adaptation rule.
SAMPLE_RATIO = 0.01
LOWER_BOUND = 0.8
MAX_ADAPTATION_ITERS = 10


def num_selected(n: int, ratio: float) -> int:
    """``k = max(1, round(ratio * n))`` clipped to ``n`` (0 for an empty tensor)."""
    if n <= 0:
        return 0
    return min(n, max(1, int(round(ratio * n))))


def index_dtype(n: int) -> torch.dtype:
    """Wire dtype of indices into a tensor of ``n`` elements: int32 below ``2**31``, else int64."""
    return torch.int32 if n < 2**31 else torch.int64


def topk_indices(importance: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (int64, sorted ascending) of the ``k`` largest entries of a 1-D ``importance``."""
    n = importance.numel()
    if k >= n:
        return torch.arange(n, device=importance.device)
    idx = torch.topk(importance, k, sorted=False).indices
    return torch.sort(idx).values


def sampled_topk_indices(
    importance: torch.Tensor,
    k: int,
    generator: torch.Generator | None,
    *,
    sample_ratio: float = SAMPLE_RATIO,
    lower_bound: float = LOWER_BOUND,
    max_iters: int = MAX_ADAPTATION_ITERS,
) -> torch.Tensor:
    """DGC's sampled-threshold top-k (Lin et al., ICLR 2018, Sec. 5; ``DGCCompressor._sparsify``).

    Args:
        importance: 1-D non-negative tensor (``|x|``, or ``|v|`` in DGC).
        k: target count, ``1 <= k``.
        generator: random source for the sample positions (on ``importance.device``).
        sample_ratio: fraction of the tensor sampled (DGC: 0.01, at least ``2 n / k`` samples).
        lower_bound: if fewer than ``lower_bound * k`` pass, the threshold is multiplied by it.
        max_iters: at most this many threshold lowerings.

    Returns:
        int64 indices, sorted ascending, ``1 <= len <= k``; they index a top set of ``importance``.
    """
    n = importance.numel()
    if k >= n:
        return torch.arange(n, device=importance.device)
    num_samples = max(math.ceil(n * sample_ratio), math.ceil(2 * n / k))
    if num_samples >= n:  # tiny tensor: DGC samples everything, i.e. exact selection
        return topk_indices(importance, k)
    top_samples = math.ceil(num_samples * k / n)
    pos = torch.randint(0, n, (num_samples,), generator=generator, device=importance.device)
    samples = importance[pos]
    threshold = torch.topk(samples, top_samples, sorted=False).values.min()
    for it in range(max_iters + 1):
        idx = torch.nonzero(importance >= threshold).reshape(-1)  # sorted ascending
        count = idx.numel()
        if count > k:
            # Too many candidates: keep the exact top-k among them (DGC's "resample" branch).
            sub = torch.topk(importance[idx], k, sorted=False).indices
            return torch.sort(idx[sub]).values
        if count >= lower_bound * k or it == max_iters:
            return idx
        threshold = threshold * lower_bound  # too few: lower the threshold (DGC's adaptation)
    raise AssertionError("unreachable")  # pragma: no cover


def sparse_sections(
    values: torch.Tensor, idx: torch.Tensor, n: int, value_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two wire sections ``(indices, values[idx])`` for a sparse payload over ``n`` elements."""
    return idx.to(index_dtype(n)), values[idx].to(value_dtype)


def decode_sparse(
    codec: Codec,
    sections: tuple[torch.Tensor, ...],
    numel: int,
    *,
    min_count: int,
    max_count: int,
) -> torch.Tensor:
    """Validate ``[indices, values]`` sections and scatter them into a zero tensor of ``numel``.

    Raises:
        CorruptPayloadError: wrong section count/dtypes, a count outside ``[min_count, max_count]``,
            indices out of range, unsorted or repeated, or non-finite values.
    """
    name = type(codec).__name__
    if len(sections) != 2:
        expect_sections(codec, sections, [(index_dtype(numel), None), (torch.float32, None)])
    idx, vals = sections
    if idx.dtype != index_dtype(numel):
        raise CorruptPayloadError(f"{name} indices have dtype {idx.dtype}, expected {index_dtype(numel)}")
    if vals.dtype not in FLOAT_DTYPES:
        raise CorruptPayloadError(f"{name} values have dtype {vals.dtype}, expected a float dtype")
    count = idx.numel()
    if vals.numel() != count:
        raise CorruptPayloadError(f"{name} payload has {count} indices but {vals.numel()} values")
    if not min_count <= count <= max_count:
        raise CorruptPayloadError(f"{name} payload holds {count} coordinates; expected {min_count}..{max_count}")
    out = torch.zeros(numel, dtype=vals.dtype, device=vals.device)
    if count == 0:
        return out
    idx = idx.to(torch.int64)
    # One device sync for every check: sorted strictly ascending => unique; then only the ends
    # need a range check.
    ok = (idx[0] >= 0) & (idx[-1] < numel) & torch.isfinite(vals).all()
    if count > 1:
        ok &= (idx[1:] > idx[:-1]).all()
    if not bool(ok):
        if int(idx.min()) < 0 or int(idx.max()) >= numel:
            raise CorruptPayloadError(f"{name} index out of range [0, {numel})")
        if not bool(torch.isfinite(vals).all()):
            raise CorruptPayloadError(f"{name} payload holds non-finite values")
        raise CorruptPayloadError(f"{name} indices are not strictly ascending (unsorted or repeated)")
    out[idx] = vals
    return out


@dataclass(eq=False)
class TopK(Codec):
    """Keep the ``k = round(ratio * n)`` largest-magnitude coordinates (see the module docstring).

    ``stochastic`` describes the default ``method="exact"`` (deterministic, draws nothing) at class
    level; an instance with ``method="sampled"`` (which draws sample positions from the codec
    generator) sets ``stochastic = True`` on itself, so ``codec.stochastic`` is always right.
    """

    ratio: float = 0.01
    method: str = "exact"
    seed: int = 0

    codec_id: ClassVar[int] = 10
    stochastic: ClassVar[bool] = False  # True on instances with method="sampled" (see __post_init__)
    contractive: ClassVar[bool] = True
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("top-k selection by magnitude", lossless=False),
        Stage("indices (int32/int64) + values (input dtype)", lossless=True),
    )
    reference: ClassVar[str] = (
        "Aji & Heafield, Sparse Communication for Distributed Gradient Descent, EMNLP 2017; "
        "Stich et al., Sparsified SGD with Memory, NeurIPS 2018; sampled threshold: Lin et al., DGC, ICLR 2018"
    )

    def __post_init__(self) -> None:
        _check_ratio(self)
        self._require(self.method in METHODS, f"method must be one of {METHODS}, got {self.method!r}")
        _check_seed(self)
        if self.method == "sampled":
            self.stochastic = True  # instance attribute shadowing the ClassVar: this instance draws

    def _encode(self, x: torch.Tensor, *, key: str | None, generator: torch.Generator | None) -> Sequence[torch.Tensor]:
        n = x.numel()
        k = num_selected(n, self.ratio)
        importance = x.abs()
        if self.method == "exact":
            idx = topk_indices(importance, k)
        else:
            gen = generator if generator is not None else self.generator(x.device)
            idx = sampled_topk_indices(importance, k, gen)
        return sparse_sections(x, idx, n, x.dtype)

    def _decode(self, sections: tuple[torch.Tensor, ...], numel: int) -> torch.Tensor:
        k = num_selected(numel, self.ratio)
        return decode_sparse(self, sections, numel, min_count=k if self.method == "exact" else 1, max_count=k)


def _check_ratio(codec: Codec) -> None:
    """Validate and normalise a ``ratio`` parameter to a float in ``(0, 1]``."""
    r = codec.ratio  # type: ignore[attr-defined]
    codec._require(isinstance(r, (int, float)) and not isinstance(r, bool), f"ratio must be a float, got {r!r}")
    codec._require(math.isfinite(r) and 0 < r <= 1, f"ratio must be in (0, 1], got {r!r}")
    codec.ratio = float(r)  # type: ignore[attr-defined]


def _check_seed(codec: Codec) -> None:
    """Validate a ``seed`` parameter: an int in ``[0, 2**63)``."""
    s = codec.seed  # type: ignore[attr-defined]
    codec._require(isinstance(s, int) and not isinstance(s, bool), f"seed must be an int, got {s!r}")
    codec._require(0 <= s < 2**63, f"seed must be in [0, 2**63), got {s}")
