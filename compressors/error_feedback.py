"""Error feedback (error accumulation / residual memory) as a wrapper around any codec.

Stich et al., "Sparsified SGD with Memory" (NeurIPS 2018); Karimireddy et al., "Error Feedback Fixes
SignSGD and other Gradient Compression Schemes" (ICML 2019). For each tensor name ``key``::

    corrected = g + e[key]
    payload   = codec.encode(corrected)
    e[key]    = corrected - codec.decode(payload)

The wrapped codec is unchanged and so is the wire format: the payload is the inner codec's, and
anyone can decode it with the inner codec. If encoding raises (NaN/Inf, bad input), the memory is
left exactly as it was.

Fused path: when compiled kernels are on (:func:`~gcbench.compressors.kernels.core.use_compiled`) and the input is a dense
float32 tensor, a deterministic codec (not ``stochastic``: the training paths' per-tensor generators,
which it does not use, change nothing) that defines ``encode_with_feedback(g, e)`` (3LC, EF-sign, the casts)
computes its sections *and* the new residual itself, in one or two compiled passes, instead of the
generic encode / decode / subtract (about ten passes). It returns the same bytes and the same
residual as the generic path (``tests/test_fused.py``) and raises the same error, the one
:func:`corrected_scan` raises, with the memory untouched. Once that read-only scan has passed
nothing can fail, so 3LC and EF-sign write the new residual over the old buffer (steady state: no
full-size allocation per step); :meth:`ErrorFeedback.state_dict` returns copies.

In eager mode (``GCBENCH_COMPILE=0``, or a tensor below ``auto``'s size rule), a codec that also
sets ``feedback_in_eager`` (3LC, EF-sign) takes the same hook from the second encode of a key on
(the first, with no residual yet, stays generic), in eager torch ops and block by block
(:func:`eager_block`: at most a quarter of the tensor): 3LC makes the read-only scan of ``g + e``
(:func:`corrected_scan`), then forms ``c = g + e`` in the residual's buffer, encodes ``c`` with its own
eager encode (the generic path's bytes) and writes ``c - decode`` over ``c`` block by block with the
decoder's own table (the generic path's values); EF-sign makes its two passes of :mod:`~gcbench.compressors.kernels.sign` (row sums of ``|g + e|``, read-only; then bits and residual)
with the kernels' eager references. Only per-block temporaries are added to the residual, so a
later encode peaks below 2x the input where the generic path held the corrected tensor and the
decode at once (docs/codecs.md, "Memory bounds").

Buffered generic path: every other codec (and 3LC/EF-sign where the hook does not apply) runs the
generic steps, and on the CPU, from a key's second encode on, for tensors of
:data:`~gcbench.compressors.kernels.workspace.NEW_PAGES_MIN_BYTES` to
:data:`~gcbench.compressors.kernels.workspace.WORKING_COPY_MAX_BYTES` (32 to 64 MiB), it forms ``g + e`` and the
decode in buffers kept per thread (:func:`~gcbench.compressors.kernels.workspace.scratch`) and copies
the new residual over the old one once it is known to be finite: the same values as new tensors, without
the page faults of two new full-size tensors a step (a smaller tensor's new memory comes back from the
heap at no such cost). A 16-bit input takes the same steps in float32
(:meth:`ErrorFeedback._encode_16_bit`), in the buffers where its float32 values are that large. A
payload whose sections view the corrected tensor (the identity codec's, PowerSGD's vectors) keeps that
buffer for itself.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import torch

from .base import Codec, check_call, state_entries, validate_input
from .numerics import ensure_finite, overflow_error, quarter_block, saturating_cast
from .errors import StateError
from .kernels.core import ef_amax, ef_scan, use_compiled
from .kernels.workspace import NEW_PAGES_MIN_BYTES, WORKING_COPY_MAX_BYTES, disown, scratch, widens, working_float32
from .wire.payload import Payload

#: What the corrected-gradient overflow error names (the same message on every path).
CORRECTED = "the error-corrected gradient (g + residual)"


#: Eager blocks of the error-feedback hooks (elements): at most a quarter of the tensor (so the
#: per-block temporaries stay a fraction of it, as :func:`~gcbench.compressors.codecs.rounding.stochastic_round`'s chunks), at
#: least this many (fewer, larger torch calls on small tensors) ...
EAGER_MIN_BLOCK = 1 << 14
#: ... and at most this many (16 MiB of float32: the temporaries stay small on huge tensors).
EAGER_MAX_BLOCK = 1 << 22


def eager_block(n: int, multiple: int) -> int:
    """Block length (a multiple of ``multiple``) of the eager error-feedback passes over ``n``
    elements: ``n / 4`` clamped to ``[EAGER_MIN_BLOCK, EAGER_MAX_BLOCK]``."""
    return quarter_block(n, multiple, EAGER_MIN_BLOCK, EAGER_MAX_BLOCK)


def corrected_scan(g: torch.Tensor, e: torch.Tensor | None) -> float:
    """``max |c|`` for ``c = g + e`` (``g`` itself when ``e`` is None), float32, read-only: the
    correction's scale and its finiteness check. Compiled, one pass (:data:`~gcbench.compressors.kernels.core.ef_scan`);
    eager, ``g + e`` block by block (:func:`eager_block`) into one block buffer and its ``aminmax``
    (NaN propagates, Inf shows at one end). After it, nothing can fail, so a codec's hook may update
    ``e`` in place (a new full-size buffer per step would cost its page faults: about 3x a ``copy_``
    at 25M elements here).

    Raises:
        NumericOverflowError: ``c`` holds NaN or Inf (the message of the generic path).
    """
    if use_compiled(g.numel()):
        amax, finite = ef_amax(g) if e is None else ef_scan(g, e)
        return checked_amax(float(amax) if bool(finite) else math.inf)
    n = g.numel()
    block = eager_block(n, 1)
    buf = None if e is None else torch.empty(min(block, n), dtype=g.dtype, device=g.device)
    ends = []
    for i in range(0, n, block):  # a loop over n / block blocks, not over elements
        k = min(block, n - i)
        c = g[i : i + k] if e is None or buf is None else torch.add(g[i : i + k], e[i : i + k], out=buf[:k])
        lo, hi = torch.aminmax(c)
        ends.append(torch.maximum(hi, -lo))  # max |c| of the block; NaN/Inf stay non-finite
    return checked_amax(float(torch.stack(ends).max()) if ends else 0.0)


def checked_amax(amax: float) -> float:
    """``amax``, the ``max |g + e|`` of a scan (:func:`corrected_scan`, or a codec's own), or the error
    that scan raises where it is not finite (some ``g + e`` is NaN or Inf).

    Raises:
        NumericOverflowError: ``amax`` is NaN or Inf (the message of the generic path).
    """
    if not math.isfinite(amax):
        raise overflow_error(CORRECTED, torch.float32)
    return amax


def _buffered_size(nbytes: int, device: torch.device) -> bool:
    """Whether error feedback's working tensors of ``nbytes`` on ``device`` go into kept buffers: on the
    CPU, from :data:`~.kernels.workspace.NEW_PAGES_MIN_BYTES` to :data:`~.kernels.workspace.WORKING_COPY_MAX_BYTES`."""
    return device.type == "cpu" and NEW_PAGES_MIN_BYTES <= nbytes <= WORKING_COPY_MAX_BYTES


def _owns(t: torch.Tensor, *others: Any) -> bool:
    """Whether ``t`` is a dense, contiguous tensor filling its own storage, which neither the
    tensors in ``others`` nor the sections of a payload among them share (so ``t`` may be
    overwritten: nothing else reads it)."""
    if t.layout != torch.strided or not t.is_contiguous() or t.requires_grad:
        return False
    if t.untyped_storage().nbytes() != t.numel() * t.element_size():
        return False
    return not _shared(t, *others)


def _shared(t: torch.Tensor, *others: Any) -> bool:
    """Whether a tensor in ``others``, or a section of a payload among them, views ``t``'s storage."""
    ptr = t.untyped_storage().data_ptr()
    for o in others:
        for u in o.sections if isinstance(o, Payload) else (o,):
            if isinstance(u, torch.Tensor) and u.layout == torch.strided and u.untyped_storage().data_ptr() == ptr:
                return True
    return False


class ErrorFeedback:
    """Residual memory keyed by tensor name, wrapped around ``codec``.

    It offers the codec interface (``encode``/``decode``/``params``/``linear``...), so it can stand
    wherever a codec is expected; ``encode`` takes ``key=`` to name the tensor (default ``""``).
    """

    stateful = True

    def __init__(self, codec: Codec) -> None:
        if isinstance(codec, ErrorFeedback):
            raise StateError("error feedback is already applied to this codec")
        self.codec = codec
        self.memory: dict[str, torch.Tensor] = {}
        #: Replaced residual buffers kept for reuse (:meth:`set_residual` with ``keep_old``).
        self.spares: dict[str, torch.Tensor] = {}

    # the codec's declarations pass through
    def __getattr__(self, name: str) -> Any:
        if name == "codec":  # not yet set (during unpickling/copy)
            raise AttributeError(name)
        return getattr(self.codec, name)

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.codec!r})"

    def corrected(self, tensor: torch.Tensor, *, key: str | None = None) -> torch.Tensor:
        """``tensor + memory[key]`` in the working precision (float32, float64 for float64), dense:
        what :meth:`encode` hands the codec. The memory is not changed."""
        validate_input(tensor, f"ErrorFeedback({type(self.codec).__name__})")
        residual = self._residual_for(tensor, key)
        # A sparse input is densified: the residual is dense anyway; the payload is flagged sparse.
        dense = tensor.detach().to_dense() if tensor.layout == torch.sparse_coo else tensor.detach()
        work = dense.to(torch.float64 if tensor.dtype == torch.float64 else torch.float32)
        corrected = work if residual is None else work + residual
        ensure_finite(corrected, what=CORRECTED)
        return corrected

    def _residual_for(self, tensor: torch.Tensor, key: str | None) -> torch.Tensor | None:
        k = "" if key is None else key
        residual = self.memory.get(k)
        if residual is not None and (residual.shape != tensor.shape or residual.device != tensor.device):
            raise StateError(
                f"error-feedback memory for {k!r} has shape {tuple(residual.shape)} on {residual.device}; "
                f"got {tuple(tensor.shape)} on {tensor.device}"
            )
        return residual

    def _fused_encode(self, tensor: torch.Tensor, key: str | None) -> Payload | None:
        """The fused path (module docstring: compiled, or eager block by block where the codec says
        ``feedback_in_eager``), or None where it does not apply."""
        hook = getattr(self.codec, "encode_with_feedback", None)
        if hook is None or not isinstance(tensor, torch.Tensor):
            return None
        # the hook updates the residual in place: an input no payload can carry is refused first
        validate_input(tensor, f"ErrorFeedback({type(self.codec).__name__})")
        n = tensor.numel()
        if tensor.layout != torch.strided or tensor.dtype != torch.float32 or n == 0:
            return None
        if not use_compiled(n) and not getattr(self.codec, "feedback_in_eager", False):
            return None
        residual = self._residual_for(tensor, key)
        if residual is not None and residual.dtype != torch.float32:
            return None
        if residual is None and not use_compiled(n):
            # eager first step: the generic path holds no corrected copy (c is g itself) and peaks
            # lower than a new residual buffer next to the encode (25M fp32: 3LC 1.32x vs 1.56x)
            return None
        self.codec.check_params_travel()
        g = tensor.detach().reshape(-1).contiguous()
        out = hook(g, None if residual is None else residual.reshape(-1))
        if out is None:
            return None
        sections, new_residual = out
        payload = self.codec.payload_of(tensor, sections)
        self.memory["" if key is None else key] = new_residual.view(tensor.shape)
        return payload

    def encode(self, tensor: torch.Tensor, *, key: str | None = None, generator: torch.Generator | None = None) -> Payload:
        """Encode ``tensor + memory[key]`` and keep the new residual (state unchanged if anything raises)."""
        check_call(key, generator, f"ErrorFeedback({type(self.codec).__name__})")
        if generator is None or not self.codec.stochastic:  # a deterministic codec uses no generator
            fast = self._fused_encode(tensor, key)
            if fast is not None:
                return fast
        if self._widens(tensor):
            return self._encode_16_bit(tensor, key, generator)
        if self._in_buffers(tensor, key):
            return self._encode_buffered(tensor, key, generator)
        corrected = self.corrected(tensor, key=key)
        payload = self.codec.encode(saturating_cast(corrected, tensor.dtype), key=key, generator=generator)
        decoded = self.codec.decode(payload).to(corrected.dtype)
        # corrected - decoded, written over decoded when decode returned a buffer of its own (one
        # full-size tensor fewer at the peak); the same values either way
        new_residual = torch.sub(corrected, decoded, out=decoded if _owns(decoded, tensor, corrected, payload) else None)
        ensure_finite(new_residual, what="the new error-feedback residual")
        self.memory["" if key is None else key] = new_residual
        if tensor.layout == torch.sparse_coo:  # decode must return the input's layout
            payload = dataclasses.replace(payload, sparse=True, _cache={})
        return payload

    @staticmethod
    def _widens(tensor: torch.Tensor) -> bool:
        """Whether :meth:`encode` takes the 16-bit path (:meth:`_encode_16_bit`): a dense tensor that
        :func:`~.kernels.workspace.widens` (float16 or bfloat16, its float32 copy within the buffers' cap)."""
        return isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided and widens(tensor)

    def _in_buffers(self, tensor: torch.Tensor, key: str | None) -> bool:
        """Whether :meth:`encode` takes the buffered path (:meth:`_encode_buffered`): a dense float32 or
        float64 CPU tensor of :data:`~.kernels.workspace.NEW_PAGES_MIN_BYTES` to
        :data:`~.kernels.workspace.WORKING_COPY_MAX_BYTES` bytes whose key already holds a residual of its
        dtype (off the CPU the caching allocator reuses memory anyway)."""
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or tensor.dtype not in (torch.float32, torch.float64):
            return False
        residual = self.memory.get("" if key is None else key)
        return residual is not None and residual.dtype == tensor.dtype and _buffered_size(tensor.numel() * tensor.element_size(), tensor.device)

    def _encode_buffered(self, tensor: torch.Tensor, key: str | None, generator: torch.Generator | None) -> Payload:
        """:meth:`encode`'s generic steps with the same values, ``g + e`` and the decode in this thread's
        buffers (:func:`~.kernels.workspace.scratch`) and the new residual copied over the old one
        (:meth:`_keep`): two new full-size tensors a step fewer, whose page faults cost several
        ``copy_``. A payload that views the corrected tensor (the identity codec's does) keeps it: the
        buffer is then left to the payload (:func:`~.kernels.workspace.disown`) and the residual is new memory."""
        validate_input(tensor, f"ErrorFeedback({type(self.codec).__name__})")
        residual = self._residual_for(tensor, key)
        n, shape, dtype = tensor.numel(), tensor.shape, tensor.dtype
        corrected = torch.add(tensor.detach(), residual, out=scratch("error_feedback.corrected", n, dtype).view(shape))
        ensure_finite(corrected, what=CORRECTED)
        payload = self.codec.encode(corrected, key=key, generator=generator)
        if _shared(corrected, payload):
            disown("error_feedback.corrected", dtype)
            new_residual = corrected - self.codec.decode(payload)
        else:
            new_residual = self.codec.decode(payload, out=scratch("error_feedback.decoded", n, dtype).view(shape))
            torch.sub(corrected, new_residual, out=new_residual)
        ensure_finite(new_residual, what="the new error-feedback residual")
        self._keep(key, new_residual, residual, tensor, payload)
        return payload

    def _keep(self, key: str | None, new: torch.Tensor, old: torch.Tensor, *readers: Any) -> None:
        """Store ``new``, a :func:`~.kernels.workspace.scratch` view, as ``key``'s residual in place of ``old``
        (the buffered paths take only a residual of ``new``'s dtype): copied over ``old`` where nothing in
        ``readers`` views it (:func:`_owns`), else into new memory."""
        if _owns(old, *readers):
            old.copy_(new)
        else:
            self.memory["" if key is None else key] = new.clone()

    def _encode_16_bit(self, tensor: torch.Tensor, key: str | None, generator: torch.Generator | None) -> Payload:
        """:meth:`encode`'s generic steps for a 16-bit input, with the same values: the input, ``g + e`` and the
        decode widened to float32 in this thread's buffers (:func:`~.kernels.workspace.working_float32`; torch's
        additions of a float32 and a 16-bit tensor run several times slower than a widening copy and a float32
        one); from :data:`~.kernels.workspace.NEW_PAGES_MIN_BYTES` of float32 on, ``g + e`` in the input's buffer
        too and the new residual copied over the old one (:meth:`_keep`)."""
        validate_input(tensor, f"ErrorFeedback({type(self.codec).__name__})")
        residual = self._residual_for(tensor, key)
        n, shape, dev = tensor.numel(), tensor.shape, tensor.device
        g = working_float32(tensor.detach(), "error_feedback.float32")
        buffered = residual is not None and residual.dtype == torch.float32 and _buffered_size(n * 4, dev)
        if buffered:
            corrected = torch.add(g, residual, out=g)
        else:  # new memory (a residual loaded in another precision: the sum in that dtype's promotion)
            corrected = g.clone() if residual is None else g + residual
        ensure_finite(corrected, what=CORRECTED)
        payload = self.codec.encode(saturating_cast(corrected, tensor.dtype), key=key, generator=generator)
        decoded16 = scratch("error_feedback.decoded", n, tensor.dtype, dev).view(shape)
        self.codec.decode(payload, out=decoded16)
        decoded = working_float32(decoded16, "error_feedback.decoded32" if buffered else "error_feedback.float32")
        new_residual = torch.sub(corrected, decoded, out=corrected)
        ensure_finite(new_residual, what="the new error-feedback residual")
        if buffered:
            self._keep(key, new_residual, residual, tensor, payload)
        else:
            self.memory["" if key is None else key] = new_residual
        return payload

    # -- the residual, for protocols that compress outside encode (PowerSGD's factor rounds) -------

    def residual(self, key: str) -> torch.Tensor | None:
        """The residual kept for ``key`` (None before its first encode): the live buffer, which the
        fused path (module docstring) updates in place on the next encode; clone it to keep it."""
        return self.memory.get(key)

    def set_residual(self, key: str, residual: torch.Tensor, *, keep_old: bool = False) -> None:
        """Replace the residual of ``key`` (a protocol that computed ``corrected - sent`` itself).

        ``keep_old``: hold the replaced buffer as ``key``'s spare (:meth:`take_spare`), for a
        protocol that writes the next step's corrected value into it rather than into new memory
        (new memory pays its page faults again on every step: a fresh 32 MB tensor cost 6x a
        ``copy_`` into a ready one on a 2-core Xeon). Without it, a spare held for ``key`` is dropped.
        """
        old = self.memory.get(key)
        self.memory[key] = residual
        self.spares.pop(key, None)
        if keep_old and old is not None and _owns(old, residual):
            self.spares[key] = old

    def take_spare(self, key: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """Remove and return, flat, the buffer :meth:`set_residual` kept for ``key`` (contiguous: it
        keeps only buffers that fill their own memory) if it holds ``numel`` elements of ``dtype`` on
        ``device``; else None (a caller allocates)."""
        spare = self.spares.pop(key, None)
        if spare is None or spare.numel() != numel or spare.dtype != dtype or spare.device != device:
            return None
        return spare.view(-1)

    def pop_residual(self, key: str) -> torch.Tensor | None:
        """Remove and return the residual of ``key`` (to move it to another codec instance)."""
        self.spares.pop(key, None)
        return self.memory.pop(key, None)

    def decode(
        self,
        payload: Payload,
        *,
        device: torch.device | str | None = None,
        max_numel: int | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Decode with the inner codec (error feedback does not change the wire format)."""
        return self.codec.decode(payload, device=device, max_numel=max_numel, out=out)

    def roundtrip(self, tensor: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.decode(self.encode(tensor, **kwargs))

    def reset_state(self) -> None:
        """Clear the residual memory and the inner codec's state."""
        self.memory.clear()
        self.spares.clear()
        self.codec.reset_state()

    def state_dict(self) -> dict[str, torch.Tensor]:
        # copies: the fused path updates the residual buffers in place
        out = {f"ef/{k}": v.clone() for k, v in self.memory.items()}
        out.update({f"codec/{k}": v for k, v in self.codec.state_dict().items()})
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        state = state_entries(state, f"ErrorFeedback({type(self.codec).__name__})")
        bad = [k for k, t in state.items() if k.startswith("ef/") and not t.is_floating_point()]
        if bad:
            raise StateError(f"error-feedback residuals are floating tensors; not so for {bad[:3]}")
        # the inner codec first: a state it refuses leaves the residuals as they were
        self.codec.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("codec/")})
        self.memory = {k[3:]: v.clone() for k, v in state.items() if k.startswith("ef/")}
        self.spares.clear()
