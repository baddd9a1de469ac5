"""Same-run baselines: what moving the uncompressed tensor costs on this machine, in this run.

Codec timings mean little alone (machines differ by 10x, a shared machine varies run to run); the
HTML puts them next to these, measured by the same asv run on the same input
(:func:`benchmarks.common.make_input`):

* ``time_copy_`` - ``dst.copy_(x)`` into a preallocated buffer: memory bandwidth (read + write).
* ``time_clone`` - ``x.clone()``: allocation + copy; on CPU mostly the page faults of fresh memory.
* ``time_fresh_copy`` - the same copy into new memory from ``workspace.fresh``, which the codecs'
  large payloads and decodes use (huge pages where the kernel gives them on request).
* ``time_fp16_cast`` - ``x.half()``: the simplest compressor (2x), elementwise.
* ``peakmem_clone`` - peak RSS of the process doing one clone (reference for ``peakmem_encode``).
* ``track_copy_GBps`` - bytes read + written per second by ``copy_`` (median of 5 calls).

``gcbench bench`` reports codec times as multiples of the clone and copy measured in its own
process, interleaved with the codec calls.
"""

from __future__ import annotations

import time

import torch

from .common import DEVICES, SIZES, TIMEOUT, SkipNotImplemented, check_case, make_input, synchronize


class Baselines:
    """asv: copy_, clone and fp16 cast of the dense input."""

    params = (SIZES, DEVICES)
    param_names = ["numel", "device"]
    timeout = TIMEOUT

    def setup(self, numel: int, device: str) -> None:
        check_case(numel, device)
        self.x = make_input(numel, device)
        self.dst = torch.empty_like(self.x)
        self.dst.copy_(self.x)  # touch the pages once: copy_ measures bandwidth, not page faults
        self.device = device
        try:  # newer than the suite: a commit without it skips time_fresh_copy alone
            from gcbench.compressors.kernels.workspace import fresh
        except ImportError as err:
            fresh, self.no_fresh = None, f"gcbench.compressors.kernels.workspace.fresh: {err}"
        self.fresh = fresh
        synchronize(device)

    def time_copy_(self, numel: int, device: str) -> None:
        self.dst.copy_(self.x)
        synchronize(self.device)

    def time_clone(self, numel: int, device: str) -> None:
        self.x.clone()
        synchronize(self.device)

    def time_fresh_copy(self, numel: int, device: str) -> None:
        if self.fresh is None:
            raise SkipNotImplemented(self.no_fresh)
        self.fresh(self.x.numel(), self.x.dtype, self.x.device).view(self.x.shape).copy_(self.x)
        synchronize(self.device)

    def time_fp16_cast(self, numel: int, device: str) -> None:
        self.x.half()
        synchronize(self.device)

    def peakmem_clone(self, numel: int, device: str) -> None:
        self.x.clone()
        synchronize(self.device)

    def track_copy_GBps(self, numel: int, device: str) -> float:
        samples = []
        for _ in range(5):
            synchronize(self.device)
            start = time.perf_counter()
            self.dst.copy_(self.x)
            synchronize(self.device)
            samples.append(time.perf_counter() - start)
        samples.sort()
        return 2 * self.x.numel() * self.x.element_size() / samples[len(samples) // 2] / 1e9

    track_copy_GBps.unit = "GB/s (read + write)"  # type: ignore[attr-defined]
