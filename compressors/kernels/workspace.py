"""Memory for a codec's large CPU tensors: scratch buffers reused call after call, and fresh
tensors that fault in fewer pages.

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

What a call returns (a payload's sections, a decoded tensor) must be new memory. :func:`fresh`
takes a large one from numpy's allocator, which asks the kernel for transparent huge pages
(``madvise``): where the kernel hands them out on request only
(``/sys/kernel/mm/transparent_hugepage/enabled`` reads ``[madvise]``), one fault then maps 2 MiB
instead of 4 KiB. torch's CPU allocator asks only when ``THP_MEM_ALLOC_ENABLE=1`` was set before
torch started. Where huge pages are always on, or off, both allocators get the same pages.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

_local = threading.local()

#: CPU tensors of at least this many bytes come from numpy's allocator (:func:`fresh`): numpy asks
#: for huge pages from 4 MiB on.
FRESH_MIN_BYTES = 4 << 20
#: Byte alignment of :func:`fresh`'s tensors (a cache line; torch's CPU allocator aligns to 64 too).
ALIGN = 64
#: The largest float32 working copy of a 16-bit tensor (bytes) that the codecs keep in a
#: :func:`scratch` buffer between calls (a 16-bit input's float32 values in an encode, a 16-bit
#: payload's in a decode into ``out``); a larger one is new memory. 64 MiB covers a 16-bit DDP
#: bucket of torch's default 25 MB cap.
WORKING_COPY_MAX_BYTES = 64 << 20
#: The smallest CPU tensor (bytes) that is taken to pay for new pages each time it is made anew: glibc's
#: malloc serves a block from its largest dynamic mmap threshold on (32 MiB on 64-bit) by a new mapping,
#: while a smaller block freed before is served again from the heap, whose pages are already there.
#: Error feedback keeps its working tensors in :func:`scratch` buffers from this size on; below it a
#: copy into a kept buffer would cost more than the new tensor (2^22 float32 values, 16 MiB: about
#: 2 ms more per encode on a 2-core AMD EPYC; 2^23 values, 32 MiB: two new tensors cost 10-50 ms more).
NEW_PAGES_MIN_BYTES = 32 << 20


def fresh(numel: int, dtype: torch.dtype, device: torch.device | str | None = None) -> torch.Tensor:
    """A new uninitialised 1-D tensor of ``numel`` elements, as ``torch.empty``. On the CPU, from
    :data:`FRESH_MIN_BYTES` on, its memory comes from numpy (module docstring), aligned to
    :data:`ALIGN` bytes, and is freed with the tensor. Measured on a 2-core AMD EPYC with THP
    ``[madvise]``: a new 50 MB tensor written once took 15 ms from torch's allocator and 3.5 ms from
    numpy's (a ``copy_`` of 25M floats: 6 ms).

    Raises:
        MemoryError: the memory cannot be had (torch's allocator raises RuntimeError).
    """
    device = torch.device("cpu" if device is None else device)
    nbytes = numel * dtype.itemsize
    if device.type != "cpu" or nbytes < FRESH_MIN_BYTES:
        return torch.empty(numel, dtype=dtype, device=device)
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    # the aligned slice becomes the tensor's whole storage (a tensor filling its storage may be
    # written over by its owner: error feedback's residual, :mod:`~gcbench.compressors.error_feedback`)
    return torch.from_numpy(raw[start : start + nbytes]).view(dtype)


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


def working_float32(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x.to(torch.float32)`` (``x`` itself when it is float32): a float16 or bfloat16 ``x`` of at most
    :data:`WORKING_COPY_MAX_BYTES` float32 bytes is widened into this thread's buffer ``name``
    (:func:`scratch`: the same values, without a new tensor's page faults, which cost several times
    the widening), so the result follows :func:`scratch`'s rules: it never leaves the caller's call."""
    if x.dtype == torch.float32:
        return x
    if widens(x):
        return scratch(name, x.numel(), torch.float32, x.device).view(x.shape).copy_(x)
    return x.to(torch.float32)


def widens(x: torch.Tensor) -> bool:
    """Whether :func:`working_float32` widens ``x`` into a reused buffer (:func:`widening`)."""
    return widening(x.dtype, x.numel())


def widening(dtype: torch.dtype, numel: int) -> bool:
    """Whether ``numel`` values of ``dtype`` get their float32 working copy in a reused buffer: float16
    or bfloat16 values whose float32 copy fits :data:`WORKING_COPY_MAX_BYTES`."""
    return dtype in (torch.float16, torch.bfloat16) and numel * 4 <= WORKING_COPY_MAX_BYTES


def disown(name: str, dtype: torch.dtype) -> None:
    """Forget this thread's buffer ``name`` of ``dtype`` without touching it: for a caller whose
    :func:`scratch` view turned out to be held past the call (a payload's section viewing the input
    it was given), so the next call with that name gets new memory and the held view stays intact."""
    buffers: dict[tuple[str, torch.dtype], torch.Tensor] = _local.__dict__.get("buffers", {})
    buffers.pop((name, dtype), None)


def release() -> int:
    """Drop this thread's scratch buffers; returns the bytes they held."""
    buffers: dict[tuple[str, torch.dtype], torch.Tensor] = _local.__dict__.pop("buffers", {})
    return sum(b.numel() * b.element_size() for b in buffers.values())
