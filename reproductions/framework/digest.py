"""The digest of a stamp's labelled items (:mod:`.codec_stamp`, :mod:`.workload_stamp`): each label and
value length-prefixed, in order, so no two different item sequences hash alike by concatenation."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

import numpy as np
import torch

#: Hex digits of the SHA-256 kept.
DIGITS = 16


def item_bytes(value: Any) -> bytes:
    """The bytes a probe item contributes: a tensor's or array's dtype, shape and raw bytes; a ``bytes``
    as is; anything else as canonical JSON (floats in their shortest exact form)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        return f"{t.dtype}{tuple(t.shape)}".encode() + t.reshape(-1).view(torch.uint8).numpy().tobytes()
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        return f"{a.dtype}{a.shape}".encode() + a.tobytes()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def probe_digest(items: Iterable[tuple[str, Any]]) -> str:
    """The digest (:data:`DIGITS` hex digits) of ``(label, value)`` items, in order, each label and value
    length-prefixed (:func:`item_bytes` says how a value is written)."""
    h = hashlib.sha256()
    for label, value in items:
        data = item_bytes(value)
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:DIGITS]
