"""Random-k sparsification with a shared seed: a *linear* sparsifier whose indices never travel.

References: Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory", NeurIPS 2018 (rand-k,
Definition 2.1: a ``k/n``-contraction); Wangni et al., "Gradient Sparsification for
Communication-Efficient Distributed Optimization", NeurIPS 2018 (rescaling by the inverse
inclusion probability makes a sparsifier unbiased); the shared-seed trick (every worker picks the
same coordinates, so the sparse vectors add and all-reduce works) as in the Random-K baseline of
Vogels et al., PowerSGD, NeurIPS 2019.

Each call draws a per-call seed ``s`` (one int64 in ``[0, 2**62)``) from the codec generator, so
the sequence of calls is reproducible from ``seed`` and workers that build the codec with the same
``seed`` and call it the same number of times draw the same ``s``. The coordinates are a function
of ``(s, n, k, sampling)`` alone, drawn with a *CPU* ``torch.Generator`` seeded with ``s`` whatever
the tensor's device, so a payload encoded on CUDA decodes to the same coordinates on CPU (and vice
versa). Caveat: the coordinates rely on torch's CPU Mersenne-Twister streams (``randint``,
``randperm``, ``rand``), so encoder and decoder should run torch versions that agree on them
(every release to date does).

Payload: ``[seed (int64, 1 element), values (k)]``. Values are ``x[idx]`` (times the inverse
inclusion probability when ``rescale=True``) in float32, float64 for float64 input: they are what
workers *sum* (``summed_sections = (1,)``; the seed section must match across workers, which
:meth:`Codec.combine` checks), and summing or rescaling in fp16 could overflow.

``sampling``:

* ``"uniform"``: an exactly uniform ``k``-subset of ``[0, n)`` (each coordinate with probability
  ``k/n``, each pair with ``k(k-1)/(n(n-1))``), built in ``O(k log k)``: draw positions with
  replacement, deduplicate, draw more while fewer than ``k`` are distinct, then keep a uniformly
  random ``k`` of the distinct ones. Exchangeability makes the result uniform over ``k``-subsets.
  When ``4k >= n`` it is ``randperm(n)[:k]`` instead.
* ``"stratified"``: ``[0, n)`` is cut into ``k`` consecutive blocks (the first ``n mod k`` of size
  ``floor(n/k) + 1``, the rest ``floor(n/k)``) and one uniform coordinate is taken per block:
  ``O(k)``, better cache locality, inclusion probability ``1 / block size`` (about ``k/n``).

``rescale=False`` (default): ``decode`` returns ``x`` on the chosen coordinates, zero elsewhere:
biased, contractive. ``rescale=True``: each value is divided by its inclusion probability
(``n/k`` for uniform, the block size for stratified), so ``E[decode(encode(x))] = x`` exactly, and
the codec is no longer contractive. The class attributes describe the default (``unbiased=False``,
``contractive=True``), because they are static (ClassVars); ``tests/test_randomk.py`` checks
unbiasedness of ``rescale=True`` itself. The values travel as float32 (float64 for float64 input);
with fp16 inputs, rescaled values beyond 65504 saturate at +-65504 when ``decode`` casts back to fp16
(a silent clip, so ``rescale=True`` is biased there): use ``rescale=True`` with fp32/bf16 tensors.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch

from ..base import Codec, Stage, check_ratio, check_seed, expect_sections
from ..numerics import nonzero_positions, saturating_cast
from ..errors import CorruptPayloadError
from .topk import num_selected

SAMPLINGS = ("uniform", "stratified")
#: Per-call seeds are drawn in ``[0, SEED_BOUND)``.
SEED_BOUND = 2**62


def random_indices(n: int, k: int, call_seed: int, sampling: str) -> tuple[torch.Tensor, torch.Tensor | float]:
    """The coordinates a call with ``call_seed`` keeps, and the rescale factor(s).

    Computed on the CPU (see the module docstring); the caller moves them to its device.

    Returns:
        ``(idx, scale)``: int64 indices sorted ascending, unique, ``len == k``; ``scale`` is the
        inverse inclusion probability, a float (uniform) or a float64 tensor per index (stratified).
    """
    g = torch.Generator(device="cpu")
    g.manual_seed(call_seed)
    if sampling == "stratified":
        q, r = divmod(n, k)
        j = torch.arange(k, dtype=torch.int64)
        size = q + (j < r).to(torch.int64)  # the first r blocks hold one extra coordinate
        start = j * q + torch.clamp(j, max=r)
        u = torch.rand(k, generator=g, dtype=torch.float64)
        offset = torch.minimum((u * size).to(torch.int64), size - 1)
        return start + offset, size.to(torch.float64)
    if k == n:
        return torch.arange(n, dtype=torch.int64), 1.0
    if 4 * k >= n:
        # sort(randperm(n)[:k]) as the positions of a mask: O(n), no sort (n <= 4k here)
        keep = torch.zeros(n, dtype=torch.bool)
        keep[torch.randperm(n, generator=g)[:k]] = True
        return nonzero_positions(keep), n / k
    # With-replacement draws, deduplicated; ~k^2/(2n) collisions expected, plus a margin.
    draw = k + k * k // n + 4 * math.isqrt(k) + 16
    distinct = torch.empty(0, dtype=torch.int64)
    while True:
        fresh = torch.randint(0, n, (draw,), generator=g, dtype=torch.int64)
        distinct = torch.unique(torch.cat([distinct, fresh]))
        if distinct.numel() >= k:
            break
        draw = k - distinct.numel() + 4 * math.isqrt(k) + 16
    # A uniformly random k of the distinct positions: uniform over k-subsets by symmetry. They are
    # sort(distinct[perm[:k]]); ``distinct`` is sorted, so the same set in ascending order is
    # ``distinct`` less the few positions ``perm[k:]`` (a mask, no sort of k values).
    perm = torch.randperm(distinct.numel(), generator=g)
    keep = torch.ones(distinct.numel(), dtype=torch.bool)
    keep[perm[k:]] = False
    return distinct[keep], n / k


#: Coordinate sets kept by :func:`device_indices`: a call's encode and the decode of its (summed)
#: payload draw the same set, so the decode reuses the encode's (at most a few 8k-byte sets: 5 MB
#: each at 64M values and ratio 0.01).
INDEX_CACHE = 4


@functools.lru_cache(maxsize=INDEX_CACHE)
def device_indices(n: int, k: int, call_seed: int, sampling: str,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor | float]:
    """:func:`random_indices` moved to ``device``, remembered for the last :data:`INDEX_CACHE` calls:
    drawing them again for the decode of the same seed cost as much as the encode's whole work
    (about 2.5x a ``copy_`` of 25M values on the CPU; on a GPU, CPU time and a host-to-device copy).
    The tensors are shared between callers, which only read them."""
    idx, scale = random_indices(n, k, call_seed, sampling)
    return idx.to(device), (scale.to(device) if isinstance(scale, torch.Tensor) else scale)


@dataclass(eq=False)
class RandomK(Codec):
    """Keep ``k = round(ratio * n)`` coordinates chosen by a shared per-call seed (linear)."""

    ratio: float = 0.01
    seed: int = 0
    rescale: bool = False
    sampling: str = "uniform"

    codec_id: ClassVar[int] = 11
    linear: ClassVar[bool] = True
    stochastic: ClassVar[bool] = True
    unbiased: ClassVar[bool] = False  # True only with rescale=True (not the default)
    contractive: ClassVar[bool] = True  # for the default rescale=False
    summed_sections: ClassVar[tuple[int, ...] | None] = (1,)
    decodes_into: ClassVar[bool] = True
    decodes_into_own_dtype: ClassVar[bool] = True
    decodes_finite: ClassVar[bool] = True  # values are checked finite; the rest is zeros
    no_kernel_reason: ClassVar[str] = (
        "the k positions come from the CPU generator (the wire contract) and the values are one "
        "gather of k elements: no full-size pass to fuse"
    )
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("random-k selection from a shared per-call seed", lossless=False),
        Stage("seed (int64) + values (float32)", lossless=True),
    )
    reference: ClassVar[str] = (
        "Stich et al., Sparsified SGD with Memory, NeurIPS 2018 (rand-k); "
        "Wangni et al., Gradient Sparsification, NeurIPS 2018 (unbiased rescaling)"
    )

    def __post_init__(self) -> None:
        check_ratio(self)
        check_seed(self)
        self._require(isinstance(self.rescale, bool), f"rescale must be a bool, got {self.rescale!r}")
        self._require(self.sampling in SAMPLINGS, f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}")

    def _value_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return torch.float64 if dtype == torch.float64 else torch.float32

    def _encode(self, x: torch.Tensor, *, key: str | None, generator: torch.Generator | None) -> Sequence[torch.Tensor]:
        n = x.numel()
        k = num_selected(n, self.ratio)
        gen = generator if generator is not None else self.generator(x.device)
        seed_t = torch.randint(0, SEED_BOUND, (1,), generator=gen, device=gen.device, dtype=torch.int64)
        idx, scale = device_indices(n, k, int(seed_t), self.sampling, x.device)
        vd = self._value_dtype(x.dtype)
        values = x.index_select(0, idx).to(vd)
        if self.rescale:
            values = values * (scale.to(vd) if isinstance(scale, torch.Tensor) else scale)
        return seed_t.to(x.device), values

    def _checked(self, sections: tuple[torch.Tensor, ...], numel: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The coordinates (int64, on the values' device) and values, once the sections passed."""
        k = num_selected(numel, self.ratio)
        if len(sections) != 2 or sections[1].dtype not in (torch.float32, torch.float64):
            expect_sections(self, sections, [(torch.int64, 1), (torch.float32, k)])
        expect_sections(self, sections, [(torch.int64, 1), (sections[1].dtype, k)])
        seed_t, values = sections
        call_seed = int(seed_t[0])
        if not 0 <= call_seed < SEED_BOUND:
            raise CorruptPayloadError(f"RandomK per-call seed {call_seed} is outside [0, 2**62)")
        if not bool(torch.isfinite(values).all()):
            raise CorruptPayloadError("RandomK payload holds non-finite values")
        idx, _ = device_indices(numel, k, call_seed, self.sampling, values.device)
        return idx, values

    def _decode(self, sections: tuple[torch.Tensor, ...], numel: int) -> torch.Tensor:
        idx, values = self._checked(sections, numel)
        out = torch.zeros(numel, dtype=values.dtype, device=values.device)
        out.index_copy_(0, idx, values)
        return out

    def _decode_into(self, sections: tuple[torch.Tensor, ...], numel: int, out: torch.Tensor) -> None:
        idx, values = self._checked(sections, numel)
        out.zero_()
        out.index_copy_(0, idx, saturating_cast(values, out.dtype))  # as the fresh result is cast
