"""Encode peak memory as a multiple of the input (the bound: "encode peaks <= 2x the input").

asv's ``peakmem_`` benchmarks (:mod:`benchmarks.bench_codecs`) report the peak resident set of the
whole benchmark process: interpreter, torch, the input and encode's allocations together. That
number is what asv tracks across commits, but it cannot be read as a multiple of the input. This
module measures the part that can: the peak *increase* of the resident set while one encode runs,
divided by the bytes of the input (dense: ``numel * element_size``; sparse COO: keys + values).

Linux only: the kernel's high-water mark of the resident set (``VmHWM``) is reset by writing ``5``
to ``/proc/self/clear_refs`` just before the call and read just after it, so the peak is that of
the call alone, allocator behaviour included (what the machine really had to hold). Elsewhere
:func:`peak_during` raises ``NotImplementedError`` (asv: skipped).

:func:`fresh_encode_peak` runs one encode in a new interpreter, so the codec's first call, the one
that builds its caches, is the one measured (after a warm-up on a small input by another instance).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # kB
    raise NotImplementedError(f"{field} not in /proc/self/status")


def peak_during(fn: Callable[[], Any]) -> int:
    """Peak increase of this process's resident set (bytes) while ``fn()`` runs.

    Garbage that earlier code left in reference cycles is collected first: freed by a collection that
    happens to run inside ``fn``, it would lower the resident set while ``fn`` allocates and hide
    what ``fn`` adds.

    Raises:
        NotImplementedError: no ``/proc/self/clear_refs`` (not Linux, or not writable).
    """
    gc.collect()
    try:
        _CLEAR_REFS.write_text("5")  # resets VmHWM to the current resident set
    except OSError as err:
        raise NotImplementedError(f"cannot reset the RSS high-water mark: {err}") from None
    before = _status_bytes("VmRSS")
    fn()
    return max(0, _status_bytes("VmHWM") - before)


def input_bytes(x: torch.Tensor) -> int:
    """Bytes of an encode input: dense ``numel * element_size``; sparse COO keys + values."""
    if x.is_sparse:
        x = x.coalesce()
        idx, val = x.indices(), x.values()
        return idx.numel() * idx.element_size() + val.numel() * val.element_size()
    return x.numel() * x.element_size()


def encode_peak_ratio(codec: Any, x: torch.Tensor, key: str = "peak") -> float:
    """Peak resident-set increase of ``codec.encode(x)`` over :func:`input_bytes` of ``x``."""
    return peak_during(lambda: codec.encode(x, key=key)) / input_bytes(x)


_CHILD = """
import json, sys
from benchmarks.common import make_input, make_sparse_input
from benchmarks.memory import encode_peak_ratio
from gcbench import compressors
name, numel, density, params, encodes = json.loads(sys.argv[1])
def draw(n):
    return make_input(n, "cpu").reshape(-1) if density is None else make_sparse_input(n, density, "cpu")
# Warm the process (library pages, torch's and the codec module's thread pools: ~45 MB once per
# process, whatever the codec) with another instance on a small input; then the measured codec's
# first encode, which builds its own caches.
compressors.get(name, **params).encode(draw(min(numel, (1 << 20) + 1)), key="warm")
codec = compressors.get(name, **params)
for _ in range(encodes - 1):  # earlier encodes of the same key: a stateful codec's steady state
    codec.encode(draw(numel), key="peak")
x = draw(numel)
print(json.dumps({"ratio": encode_peak_ratio(codec, x)}))
"""


def fresh_encode_peak(
    name: str, numel: int, *, density: float | None = None, params: dict[str, Any] | None = None, timeout: float = 600,
    encodes: int = 1,
) -> float:
    """:func:`encode_peak_ratio` of the registered codec ``name``'s *first* encode, in a new
    interpreter (so caches the codec builds on that call count), on the benchmark input of
    ``numel`` elements (sparse COO at ``density`` when given). The process is warmed first by
    another instance of the codec on at most 2^20 + 1 elements: what a process pays once (code
    pages, thread pools) is not the codec's memory; the measured instance's caches are.
    ``encodes`` > 1 measures the last of that many encodes of the same key (each of a new input
    of the same size): a stateful codec's later encode (error feedback's residual exists).

    The child runs with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 64 KiB (unless the caller set
    it): large blocks are then always mapped and unmapped, so the resident set follows the live
    allocations. With glibc's adaptive threshold, freed heap blocks stay resident or are reused
    depending on what ran before, and 3LC's first encode at 8M read anywhere from 1.3x to 2.1x
    over repeated identical runs (1.21x every time with the fixed threshold)."""
    arg = json.dumps([name, numel, density, params or {}, encodes])
    return float(run_child(_CHILD, arg, timeout=timeout, what=f"peak measurement of {name}")["ratio"])


def run_child(code: str, *args: str, timeout: float = 600, what: str = "memory measurement") -> dict[str, Any]:
    """Run ``code`` in a new interpreter from the repository root, with glibc's mmap threshold fixed
    as :func:`fresh_encode_peak` explains, and return the JSON object its last line of output prints.
    A measurement there sees only its own allocations: not other threads' nor the heap that earlier
    code left.

    Raises:
        RuntimeError: the child failed (its standard error's tail is in the message).
    """
    root = Path(__file__).resolve().parent.parent
    env = {"MALLOC_MMAP_THRESHOLD_": "65536", **os.environ,
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=root,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
