"""Quick local speed check with pytest-benchmark (``tox -e bench-quick``): every registered codec's
encode and decode next to the same-run baselines (clone, copy_, fp16 cast), 1M elements.

Not part of the test suite (``pyproject.toml``: ``testpaths = ["tests"]``) and asserts nothing
about speed: it prints pytest-benchmark's table, grouped by device, where the baselines and the
codecs of one group are measured by the same process on the same input. Run it with
``python -m pytest benchmarks/test_quick_codecs.py --benchmark-only`` (add
``--benchmark-json out.json`` or ``--benchmark-compare`` to keep and compare runs). The same cases
are in the asv suite (``bench_codecs.py``, ``bench_baselines.py``) for history.
"""

from __future__ import annotations

import pytest
import torch

from .common import (
    DEVICES,
    KEY,
    bits_per_element,
    build,
    dense_codec_names,
    make_input,
    make_sparse_input,
    sparse_codec_names,
    synchronize,
)

QUICK_SIZE = 1_000_000
QUICK_DENSITY = 0.1


def _device_params() -> list:
    return [
        pytest.param(d, marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))
        if d.startswith("cuda")
        else d
        for d in DEVICES
    ]


def _codec_or_skip(name: str, device: str):
    try:
        return build(name, device)
    except NotImplementedError as why:
        pytest.skip(str(why))


def _group(benchmark, device: str) -> None:
    benchmark.group = f"{QUICK_SIZE} elements, {device}"


@pytest.mark.parametrize("device", _device_params())
@pytest.mark.parametrize("baseline", ["clone", "copy_", "fp16 cast"])
def test_baseline(benchmark, baseline: str, device: str) -> None:
    x = make_input(QUICK_SIZE, device)
    dst = torch.empty_like(x)
    dst.copy_(x)
    op = {"clone": x.clone, "copy_": lambda: dst.copy_(x), "fp16 cast": x.half}[baseline]

    def run() -> None:
        op()
        synchronize(device)

    _group(benchmark, device)
    benchmark(run)


@pytest.mark.parametrize("device", _device_params())
@pytest.mark.parametrize("name", dense_codec_names() + sparse_codec_names())
@pytest.mark.parametrize("step", ["encode", "decode"])
def test_codec(benchmark, step: str, name: str, device: str) -> None:
    codec = _codec_or_skip(name, device)
    sparse = getattr(codec, "sparse_native", False)
    x = make_sparse_input(QUICK_SIZE, QUICK_DENSITY, device) if sparse else make_input(QUICK_SIZE, device)
    payload = codec.encode(x, key=KEY)

    if step == "encode":

        def run() -> None:
            codec.encode(x, key=KEY)
            synchronize(device)

    else:

        def run() -> None:
            codec.decode(payload)
            synchronize(device)

    _group(benchmark, device)
    benchmark.extra_info["bits_per_element"] = bits_per_element(payload.nbytes, QUICK_SIZE)
    benchmark.extra_info["input"] = f"sparse COO, density {QUICK_DENSITY}" if sparse else "dense N(0,1)"
    benchmark(run)


@pytest.mark.parametrize("impl", ["gcbench", "torch-hook"])
def test_powersgd_peer(benchmark, impl: str) -> None:
    """Rank-4 PowerSGD encode on ResNet-50 layer shapes with widths / 4 (53 matrices, 1,979,440
    elements, recorded as ``extra_info["elements"]``), gcbench's codec vs torch's powerSGD_hook math
    (see bench_peers.PowerSGDPeers)."""
    from gcbench import compressors
    from gcbench.bench.inputs import powersgd_matrices
    from gcbench.bench.peers import TorchPowerSGDMath

    mats = powersgd_matrices(4, 4, "cpu")
    if impl == "torch-hook":
        run = TorchPowerSGDMath(list(mats.values()), rank=4).encode
    else:
        codec = compressors.get("powersgd", rank=4)

        def run() -> None:
            for k, t in mats.items():
                codec.encode(t, key=k)

    run()
    benchmark.group = "PowerSGD rank 4, ResNet-50 widths / 4, cpu"
    benchmark.extra_info["elements"] = sum(t.numel() for t in mats.values())
    benchmark(run)
