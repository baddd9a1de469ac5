"""Encode/decode time and real payload size of every registered codec, generated from the registry.

asv (``asv run --quick``, see ``asv.conf.json``) runs :class:`CodecSuite`, parametrised over
``gcbench.compressors.names()`` x tensor sizes x devices, so a new registry line is benchmarked with
no edit here. Combinations that cannot run are *skipped* the asv way (``NotImplementedError`` in
``setup``): CUDA on a machine without it, and registry entries whose module does not exist yet.

Input: a synthetic float32 matrix (1000 x 1000 for 1M elements) drawn from N(0, 1) with a fixed
seed - not a real gradient; ``gcbench compare`` measures real gradients. Timings are measured by asv; after each
call on CUDA the suite synchronises so queued kernels are counted. Sizes are ``payload.nbytes``,
the real serialized bytes including header and checksum.

The same cases run under pytest-benchmark (``tox -e bench-quick``):
``python -m pytest benchmarks/bench_codecs.py --benchmark-only``.
"""

from __future__ import annotations

import math

import pytest
import torch

from gcbench import compressors
from gcbench.timing import synchronize

#: Tensor sizes (elements). Kept small so ``asv run --quick`` finishes in minutes on a laptop CPU.
SIZES = [1_000_000]
DEVICES = ["cpu", "cuda"]
KEY = "bench"


def matrix_shape(numel: int) -> tuple[int, int]:
    """The most nearly square ``(rows, cols)`` with ``rows * cols == numel`` (a layer's weight matrix:
    low-rank codecs such as PowerSGD need two dimensions)."""
    rows = max(d for d in range(1, math.isqrt(numel) + 1) if numel % d == 0)
    return rows, numel // rows


def make_input(numel: int, device: str, seed: int = 0) -> torch.Tensor:
    """The benchmark input: a :func:`matrix_shape` float32 tensor of N(0, 1) values drawn on CPU from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(matrix_shape(numel), generator=gen).to(device)


def build(name: str, device: str) -> compressors.Codec:
    """The registered codec ``name``, or NotImplementedError when this case cannot run here."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise NotImplementedError("CUDA is not available")
    try:
        return compressors.get(name)
    except ImportError as err:  # the registry lists codecs whose module is still being written
        raise NotImplementedError(f"{name}: {err}") from None


class CodecSuite:
    """asv suite: ``time_encode``, ``time_decode`` and ``track_bits_per_element`` per codec."""

    params = (compressors.names(), SIZES, DEVICES)
    param_names = ["codec", "numel", "device"]
    timeout = 300

    def setup(self, name: str, numel: int, device: str) -> None:
        self.codec = build(name, device)
        self.x = make_input(numel, device)
        self.payload = self.codec.encode(self.x, key=KEY)
        self.device = device
        synchronize(device)

    def time_encode(self, name: str, numel: int, device: str) -> None:
        self.codec.encode(self.x, key=KEY)
        synchronize(self.device)

    def time_decode(self, name: str, numel: int, device: str) -> None:
        self.codec.decode(self.payload)
        synchronize(self.device)

    def track_bits_per_element(self, name: str, numel: int, device: str) -> float:
        return 8.0 * self.payload.nbytes / numel

    track_bits_per_element.unit = "bits/element"  # type: ignore[attr-defined]


# -- pytest-benchmark view of the same cases (asv ignores functions named test_*) -------------------

_CASES = [(n, s, d) for n in compressors.names() for s in SIZES for d in DEVICES]


def _setup_or_skip(name: str, numel: int, device: str) -> tuple[compressors.Codec, torch.Tensor]:
    try:
        codec = build(name, device)
    except NotImplementedError as why:
        pytest.skip(str(why))
    return codec, make_input(numel, device)


@pytest.mark.parametrize("name,numel,device", _CASES)
def test_encode(benchmark, name: str, numel: int, device: str) -> None:
    codec, x = _setup_or_skip(name, numel, device)

    def run() -> compressors.Payload:
        p = codec.encode(x, key=KEY)
        synchronize(device)
        return p

    payload = benchmark(run)
    benchmark.extra_info["bits_per_element"] = 8.0 * payload.nbytes / numel


@pytest.mark.parametrize("name,numel,device", _CASES)
def test_decode(benchmark, name: str, numel: int, device: str) -> None:
    codec, x = _setup_or_skip(name, numel, device)
    payload = codec.encode(x, key=KEY)

    def run() -> torch.Tensor:
        out = codec.decode(payload)
        synchronize(device)
        return out

    out = benchmark(run)
    assert out.shape == x.shape
