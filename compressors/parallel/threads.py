"""One intra-op thread for a block of small ops (CPU only).

Why: an op on a tensor of a few hundred KB takes microseconds on one core, but with more than
one intra-op thread it opens an OpenMP parallel region, which first wakes the pool's other
threads; on shared cores the wake-up waits for a scheduler slice, so a sequence of many small ops
runs many times slower on two threads than on one (measured on the 2-core bench machine: see
:mod:`~gcbench.compressors.codecs.powersgd` and :mod:`~gcbench.compressors.codecs.sketchml.groups`). Large single ops keep every thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def single_thread(device: torch.device, enabled: bool = True) -> Iterator[None]:
    """Run the block on one intra-op thread when ``enabled`` and ``device`` is the CPU; the
    previous thread count is restored on exit (also when the block raises)."""
    before = torch.get_num_threads()
    if not enabled or device.type != "cpu" or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
