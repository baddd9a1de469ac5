"""Error feedback (error accumulation / residual memory) as a wrapper around any codec.

Stich et al., "Sparsified SGD with Memory" (NeurIPS 2018); Karimireddy et al., "Error Feedback Fixes
SignSGD and other Gradient Compression Schemes" (ICML 2019). For each tensor name ``key``::

    corrected = g + e[key]
    payload   = codec.encode(corrected)
    e[key]    = corrected - codec.decode(payload)

The wrapped codec is unchanged and so is the wire format: the payload is the inner codec's, and
anyone can decode it with the inner codec. If encoding raises (NaN/Inf, bad input), the memory is
left exactly as it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch

from .base import Codec, validate_input
from .errors import StateError
from .payload import Payload


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
        k = "" if key is None else key
        residual = self.memory.get(k)
        if residual is not None and (residual.shape != tensor.shape or residual.device != tensor.device):
            raise StateError(
                f"error-feedback memory for {k!r} has shape {tuple(residual.shape)} on {residual.device}; "
                f"got {tuple(tensor.shape)} on {tensor.device}"
            )
        # A sparse input is densified: the residual is dense anyway; the payload is flagged sparse.
        dense = tensor.detach().to_dense() if tensor.layout == torch.sparse_coo else tensor.detach()
        work = dense.to(torch.float64 if tensor.dtype == torch.float64 else torch.float32)
        return work if residual is None else work + residual

    def encode(self, tensor: torch.Tensor, *, key: str | None = None, generator: torch.Generator | None = None) -> Payload:
        """Encode ``tensor + memory[key]`` and keep the new residual."""
        corrected = self.corrected(tensor, key=key)
        payload = self.codec.encode(corrected.to(tensor.dtype), key=key, generator=generator)
        decoded = self.codec.decode(payload).to(corrected.dtype)
        self.memory["" if key is None else key] = corrected - decoded
        if tensor.layout == torch.sparse_coo:  # decode must return the input's layout
            payload = dataclasses.replace(payload, sparse=True, _cache={})
        return payload

    # -- the residual, for protocols that compress outside encode (PowerSGD's factor rounds) -------

    def residual(self, key: str) -> torch.Tensor | None:
        """The residual kept for ``key`` (None before its first encode)."""
        return self.memory.get(key)

    def set_residual(self, key: str, residual: torch.Tensor) -> None:
        """Replace the residual of ``key`` (a protocol that computed ``corrected - sent`` itself)."""
        self.memory[key] = residual

    def pop_residual(self, key: str) -> torch.Tensor | None:
        """Remove and return the residual of ``key`` (to move it to another codec instance)."""
        return self.memory.pop(key, None)

    def decode(self, payload: Payload, *, device: torch.device | str | None = None) -> torch.Tensor:
        """Decode with the inner codec (error feedback does not change the wire format)."""
        return self.codec.decode(payload, device=device)

    def roundtrip(self, tensor: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.decode(self.encode(tensor, **kwargs))

    def reset_state(self) -> None:
        """Clear the residual memory and the inner codec's state."""
        self.memory.clear()
        self.codec.reset_state()

    def state_dict(self) -> dict[str, torch.Tensor]:
        out = {f"ef/{k}": v for k, v in self.memory.items()}
        out.update({f"codec/{k}": v for k, v in self.codec.state_dict().items()})
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.memory = {k[3:]: v.clone() for k, v in state.items() if k.startswith("ef/")}
        self.codec.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("codec/")})
