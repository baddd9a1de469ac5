"""SketchML encode memory and the chunked grouping that keeps it small."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gcbench.compressors.codecs.sketchml import groups as sketch_groups
from gcbench.compressors.codecs.sketchml.codec import SketchML

# Run in a fresh interpreter: large allocations are mmapped (MALLOC_MMAP_THRESHOLD_) so that a freed
# buffer leaves the resident set at once and the high-water mark (VmHWM, reset through
# /proc/self/clear_refs just before the encode) is the live peak, not the allocator's cache.
_PEAK_SCRIPT = r"""
import sys, torch
from gcbench.compressors.codecs.sketchml.codec import SketchML
from gcbench.bench.inputs import make_sparse_input

def status(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))

x = make_sparse_input(int(sys.argv[1]), 0.1)
codec = SketchML()
codec.encode(make_sparse_input(100_000, 0.1))  # lazy imports and one-time tables out of the way
coo = x.indices().numel() * x.indices().element_size() + x.values().numel() * x.values().element_size()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to the current resident set
before = status("VmRSS")
payload = codec.encode(x)
print((status("VmHWM") - before) / coo, payload.nbytes)
"""


def _clear_refs_works() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _clear_refs_works(), reason="needs Linux VmHWM reset")
def test_encode_peak_memory_is_at_most_twice_the_coo_bytes():
    """10M elements at 10% density (1M key-value pairs, 11.5 MiB of COO): the encoder's resident
    peak above what was resident before must stay <= 2x the COO bytes (3.7-5.3x before the
    chunked grouping, per-group MinMaxSketch cells and per-segment delta-binary; 1.39x after)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, "10000000"], capture_output=True, text=True, env=env, cwd=root, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    ratio, nbytes = out.stdout.split()
    assert int(nbytes) > 0
    assert 0.0 < float(ratio) <= 2.0, f"peak {float(ratio):.2f}x the COO bytes"


@pytest.mark.parametrize("chunk", [5, 1000])
def test_grouping_in_chunks_gives_the_same_bytes(monkeypatch, chunk):
    """The chunked stable grouping is chunk-size independent: small chunks (many chunks, runs that
    cross chunk edges) give the bytes of a single chunk (the deterministic exact sketch)."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.nonzero(torch.rand(40_000, generator=gen) < 0.2).reshape(-1)
    x = torch.sparse_coo_tensor(keys[None], torch.randn(keys.numel(), generator=gen), (40_000,), check_invariants=True).coalesce()
    for preset in ("paper", "code"):
        monkeypatch.setattr(sketch_groups, "GROUP_CHUNK", 1 << 30)
        whole = SketchML(preset=preset, sketch="exact").encode(x).to_bytes()
        monkeypatch.setattr(sketch_groups, "GROUP_CHUNK", chunk)
        assert SketchML(preset=preset, sketch="exact").encode(x).to_bytes() == whole
