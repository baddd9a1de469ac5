"""Deep Gradient Compression (Lin, Han, Mao, Wang & Dally, ICLR 2018).

Per tensor ``key`` the codec keeps a momentum buffer ``u`` and an accumulator ``v`` (float32, or
float64 for float64 input) and, for each gradient ``g`` (Sec. 3.2 "momentum correction",
Sec. 3.3 "momentum factor masking"; ``DGCSGDMemory.compensate``/``update`` in the released code)::

    u = m * u + g          # local momentum
    v = v + u              # accumulate the *velocity*, not the raw gradient
    idx = top-k(|v|)       # Sec. 3.1; threshold from a sample (Sec. 5 and the code), shared with TopK
    send (idx, v[idx])
    v[idx] = 0; u[idx] = 0 # momentum factor masking (Sec. 3.3): stop the stale momentum of sent coordinates

``k = max(1, round(ratio * n))`` (the paper's 99.9% sparsity is ``ratio=0.001``). Selection is
:func:`~gcbench.compressors.codecs.topk.sampled_topk_indices`: ``1 <= count <= k``, normally ``>= 0.8 k``.

How to use it (the parts of DGC that are not a codec):

* The momentum lives here, so train with **momentum-free SGD** on the decoded, averaged update
  (the released ``DGCSGD`` optimizer applies momentum only to the weight-decay term). Do not add
  weight decay into ``g`` if the optimizer also applies it.
* Do **not** wrap DGC in :class:`~.error_feedback.ErrorFeedback`: ``v`` already is the
  accumulated, not-yet-sent residual; a second memory would count it twice.
* Local gradient clipping (Sec. 3.2: clip each worker's gradient norm at ``N^{-1/2}`` times the
  global threshold) and warm-up training (Sec. 3.3: sparsity raised exponentially from 75% to
  99.9% over the first epochs) are training-loop concerns: clip before ``encode``; for warm-up build codecs with
  growing ``ratio`` (a new ``ratio`` is a new codec; carry ``state_dict`` over).
* The released code leaves tensors with ``n <= 2 / ratio`` effectively dense and 1-D tensors
  (biases, BN) are usually excluded from compression by the training loop; both are caller choices.
* At ``ratio -> 1`` momentum masking zeroes ``u`` everywhere each step, i.e. DGC degenerates to
  momentum-free SGD; DGC's code sends uncompressed tensors through a plain momentum path instead.

The payload layout is :class:`~gcbench.compressors.codecs.topk.TopK`'s: sorted int32/int64 indices + values in the input
dtype; ``decode`` is stateless (any worker can decode any other's payload). The values are cast to
the input dtype for the wire while ``v`` is zeroed at the sent coordinates, so with fp16/bf16
inputs the cast's rounding error is not fed back (and values beyond the input dtype's range saturate
at its largest finite value: +-65504 for fp16).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Sequence

import torch

from ..base import Codec, Stage, check_ratio, check_seed, state_entries
from ..numerics import all_finite, ensure_finite, overflow_error, saturating_cast
from ..errors import StateError
from ..kernels.core import use_compiled
from ..kernels.sparse import dgc_step, dgc_step_finite
from .topk import decode_sparse, decode_sparse_into, index_dtype, num_selected, sampled_topk_with_values


_ACCUMULATION = "DGC's momentum accumulation"


@dataclass(eq=False)
class DGC(Codec):
    """Deep Gradient Compression: momentum correction + sampled top-k + momentum factor masking."""

    ratio: float = 0.001
    momentum: float = 0.9
    seed: int = 0

    codec_id: ClassVar[int] = 12
    stochastic: ClassVar[bool] = True
    stateful: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    decodes_into_own_dtype: ClassVar[bool] = True
    decodes_finite: ClassVar[bool] = True  # values are checked finite; the rest is zeros
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("momentum correction + accumulation (stateful)", lossless=False),
        Stage("sampled-threshold top-k + momentum factor masking", lossless=False),
        Stage("indices (int32/int64) + values (input dtype)", lossless=True),
    )
    reference: ClassVar[str] = "Lin et al., Deep Gradient Compression, ICLR 2018 (Sec. 3.1-3.3)"

    _u: dict = field(default_factory=dict, init=False, repr=False)
    _v: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        check_ratio(self)
        m = self.momentum
        self._require(isinstance(m, (int, float)) and not isinstance(m, bool), f"momentum must be a float, got {m!r}")
        self._require(0 <= m < 1, f"momentum must be in [0, 1), got {m!r}")
        self.momentum = float(m)
        check_seed(self)

    def _encode(self, x: torch.Tensor, *, key: str | None, generator: torch.Generator | None) -> Sequence[torch.Tensor]:
        # The buffers u and v outlive the call and are updated in place by the next one: they are
        # made and kept as normal tensors even under ``torch.inference_mode`` (an inference tensor
        # cannot be updated in place outside it), with the same values and payload either way.
        with torch.inference_mode(False):
            return self._step(x, key, generator)

    def _step(self, x: torch.Tensor, key: str | None, generator: torch.Generator | None) -> Sequence[torch.Tensor]:
        """:meth:`_encode`'s body: the momentum step, the selection and the masking."""
        name = "" if key is None else key
        n = x.numel()
        wd = torch.float64 if x.dtype == torch.float64 else torch.float32
        g = x.to(wd)
        u, v = self._u.get(name), self._v.get(name)
        if u is None:
            # u_0 = 0  =>  u_1 = g, v_1 = g, and both are masked at the same coordinates below: the
            # first step's u and v are one buffer (one full-size buffer fewer); the next
            # step gives v its own copy before updating both in place
            u = v = g.clone()
            ensure_finite(v, what=_ACCUMULATION)
        else:
            if u.shape != (n,) or u.device != x.device or u.dtype != wd:
                raise StateError(
                    f"DGC state for {name!r} holds {u.numel()} {u.dtype} values on {u.device}; "
                    f"got {n} values ({wd} work dtype) on {x.device}"
                )
            if u.is_inference() or v.is_inference():  # stored from inside inference mode: normal copies
                u, v = (u.clone(), v.clone()) if v is not u else (u.clone(),) * 2
            # In place, after a read-only check: the stored buffers change only once the new ones
            # are known to be finite, and no fresh full-size buffer is written (its page faults cost
            # more than the arithmetic; a second buffer raised the peak)
            if wd == torch.float32 and use_compiled(n):
                m = torch.tensor([self.momentum], dtype=torch.float32, device=x.device)
                if not bool(dgc_step_finite(u, v, g, m)):
                    raise overflow_error(_ACCUMULATION, v.dtype)
                if v is u:
                    v = u.clone()
                dgc_step(u, v, g, m)
            else:
                _check_step_finite(u, v, g, self.momentum)
                if v is u:
                    v = u.clone()
                u.mul_(self.momentum).add_(g)
                v.add_(u)
        gen = generator if generator is not None else self.generator(x.device)
        # ranked by |v| without materialising it (absolute=True: the same selection, one pass fewer)
        idx, values = sampled_topk_with_values(v, num_selected(n, self.ratio), gen, absolute=True)
        # v can outgrow a 16-bit input's range: saturate rather than send inf (which the contract's
        # check would refuse only after the state below had changed)
        sections = (idx.to(index_dtype(n)), saturating_cast(values, x.dtype))
        u.index_fill_(0, idx, 0)  # momentum factor masking
        if v is not u:
            v.index_fill_(0, idx, 0)
        self._u[name], self._v[name] = u, v
        return sections

    def _decode(self, sections: tuple[torch.Tensor, ...], numel: int) -> torch.Tensor:
        return decode_sparse(self, sections, numel, min_count=1, max_count=num_selected(numel, self.ratio))

    def _decode_into(self, sections: tuple[torch.Tensor, ...], numel: int, out: torch.Tensor) -> None:
        decode_sparse_into(self, sections, out, min_count=1, max_count=num_selected(numel, self.ratio))

    # -- state -------------------------------------------------------------------------------------

    def reset_state(self) -> None:
        """Forget every momentum/accumulator buffer and restart the random sequence."""
        super().reset_state()
        self._u.clear()
        self._v.clear()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``u/<key>``, ``v/<key>`` buffers and ``rng/<device>`` generator states (copies)."""
        out = {f"u/{k}": t.clone() for k, t in self._u.items()}
        out.update({f"v/{k}": t.clone() for k, t in self._v.items()})
        out.update(super().state_dict())  # the generators
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Replace the state with one saved by :meth:`state_dict` (tensors are copied)."""
        state = state_entries(state, "DGC")
        u = {k[2:]: t.clone() for k, t in state.items() if k.startswith("u/")}
        v = {k[2:]: t.clone() for k, t in state.items() if k.startswith("v/")}
        unknown = [k for k in state if not k.startswith(("u/", "v/", "rng/"))]
        if unknown or u.keys() != v.keys() or any(u[k].shape != v[k].shape for k in u):
            raise StateError(f"not a DGC state dict (unknown keys {unknown[:3]} or unpaired u/v buffers)")
        if any(u[k].dtype != v[k].dtype or not u[k].is_floating_point() for k in u):
            raise StateError("DGC's u/v buffers are floating tensors of one dtype per key")
        super().load_state_dict(state)  # its rng/ entries: the generators, or StateError
        self._u, self._v = u, v


#: Values per block of :func:`_check_step_finite` (two scratch buffers: 32 MiB of float32).
_CHECK_BLOCK = 1 << 22


def _check_step_finite(u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, momentum: float) -> None:
    """Raise :func:`~.numerics.overflow_error` unless every ``v + (u * momentum + g)`` is finite, block by
    block in two block-sized scratch buffers (the eager form of :func:`~gcbench.compressors.kernels.sparse.dgc_step_finite`:
    the same roundings as the in-place update that follows)."""
    n = v.numel()
    b = min(n, _CHECK_BLOCK)
    s1 = torch.empty(b, dtype=v.dtype, device=v.device)
    s2 = torch.empty(b, dtype=v.dtype, device=v.device)
    for a in range(0, n, _CHECK_BLOCK):
        e = min(n, a + _CHECK_BLOCK)
        un = torch.mul(u[a:e], momentum, out=s1[: e - a]).add_(g[a:e])
        if not all_finite(torch.add(v[a:e], un, out=s2[: e - a])):
            raise overflow_error(_ACCUMULATION, v.dtype)
