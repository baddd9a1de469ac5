"""Scratch tensors that a codec's intermediate results reuse call after call, on the CPU.

A fresh large CPU tensor pays for its pages again on every call: the allocator hands big blocks
back to the system when they are freed, and the next call's first writes fault them in anew (a
25M-byte uint8 buffer: about half a 25M-float ``copy_`` on a 2-core virtual machine). An
intermediate that never leaves the call (3LC's quartic bytes before their zero-run encoding) is
written into a buffer kept per thread and per name instead, grown to the largest size asked and
held until :func:`release`. Off the CPU the caching allocator already reuses device memory, so
:func:`scratch` returns a fresh tensor there.

Rules for a caller: the name is the call site's own (two live intermediates never share one), the
tensor does not outlive the call (nothing returned or stored views it), and its contents are
whatever the last call left (write before reading).
"""

from __future__ import annotations

import threading

import torch

_local = threading.local()


def scratch(name: str, numel: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """A 1-D tensor of ``numel`` elements of ``dtype`` on ``device``: on the CPU a view of this
    thread's buffer ``name`` (grown when too small; contents undefined), elsewhere a new tensor."""
    device = torch.device(device)
    if device.type != "cpu":
        return torch.empty(numel, dtype=dtype, device=device)
    buffers: dict[tuple[str, torch.dtype], torch.Tensor] = _local.__dict__.setdefault("buffers", {})
    buf = buffers.get((name, dtype))
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=dtype)
        buffers[(name, dtype)] = buf
    return buf[:numel]


def release() -> int:
    """Drop this thread's scratch buffers; returns the bytes they held."""
    buffers: dict[tuple[str, torch.dtype], torch.Tensor] = _local.__dict__.pop("buffers", {})
    return sum(b.numel() * b.element_size() for b in buffers.values())
