"""Parameter ranges: out-of-range values are InvalidParameterError, never an
untyped error at encode or ``to_bytes``, nor an allocation sized by the parameter."""

from __future__ import annotations

import math
import resource
import time

import pytest
import torch

from gcbench import compressors
from gcbench.compressors import GCBenchError, InvalidParameterError
from gcbench.commands.fuzz import limit_address_space

NAMES = compressors.names()


SEEDED = ["qsgd", "terngrad", "zipml8", "zipml16", "topk-sampled", "randomk", "dgc", "powersgd"]


@pytest.mark.parametrize("name", SEEDED)
@pytest.mark.parametrize("seed", [2**63, 2**64, -1])
def test_seed_out_of_int64_is_refused_at_construction(name, seed):
    with pytest.raises(InvalidParameterError, match="seed"):
        compressors.get(name, seed=seed)


@pytest.mark.parametrize("name", ["qsgd", "terngrad", "zipml8"])
def test_largest_seed_travels(name):
    codec = compressors.get(name, seed=2**63 - 1)
    wire = codec.encode(torch.randn(100)).to_bytes()
    assert compressors.decode(compressors.Payload.from_bytes(wire)).shape == (100,)


@pytest.mark.parametrize("compression", [5e-324, 1e-3, 0.0, -1.0, math.nan, math.inf, 1e300, 2.0**17])
def test_countsketch_compression_range(compression):
    with pytest.raises(InvalidParameterError, match="compression"):
        compressors.get("countsketch", compression=compression)


def test_countsketch_compression_limits_are_usable():
    for compression in (0.01, 65536.0):
        out = compressors.get("countsketch", compression=compression).roundtrip(torch.randn(2048))
        assert out.shape == (2048,) and bool(torch.isfinite(out).all())


def test_countsketch_columns_relative_to_the_tensor():
    """columns=2**30-1 for a 2,048-element tensor would need a 21 GB sketch (5 rows x 2^30 float32
    columns); it is refused before allocating."""
    codec = compressors.get("countsketch", columns=2**30 - 1)  # a valid width for a huge tensor
    old = limit_address_space(1 << 30)
    try:
        t0 = time.perf_counter()
        with pytest.raises(InvalidParameterError, match="columns"):
            codec.encode(torch.randn(2048))
        assert time.perf_counter() - t0 < 5.0
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)
    assert compressors.get("countsketch", columns=4096).roundtrip(torch.randn(2048)).shape == (2048,)
    with pytest.raises(InvalidParameterError, match="compresses more than"):
        compressors.get("countsketch", rows=1, columns=1).encode(torch.randn(70_000))


def _int_params(name: str) -> list[str]:
    cls = compressors.entry(name).load()
    return [p for p, _, default in cls.param_specs() if isinstance(default, int) and not isinstance(default, bool)]


@pytest.mark.parametrize("name", NAMES)
def test_every_int_parameter_beyond_int64_is_refused(name):
    for param in _int_params(name):
        for value in (2**63, -(2**63) - 1, 2**64):
            with pytest.raises(InvalidParameterError):
                compressors.get(name, **{param: value})


HOSTILE = [2**63 - 1, -(2**63), 2**31, -1, 0, math.nan, math.inf, -math.inf, 5e-324, 1e308, -0.0, "", True]


@pytest.mark.parametrize("name", NAMES)
def test_hostile_parameter_values_are_typed_and_bounded(name):
    """Every parameter x hostile value: refused at construction, or encodes/decodes a 2,048-element
    tensor within a time and memory bound, with finite output or a typed error."""
    cls = compressors.entry(name).load()
    x = torch.randn(2048, generator=torch.Generator().manual_seed(0))
    old = limit_address_space(1 << 30)
    try:
        for param, _, _ in cls.param_specs():
            for value in HOSTILE:
                t0 = time.perf_counter()
                try:
                    codec = compressors.get(name, **{param: value})
                    out = compressors.decode(compressors.Payload.from_bytes(codec.encode(x, key="w").to_bytes()))
                except GCBenchError:
                    continue
                finally:
                    assert time.perf_counter() - t0 < 5.0, (param, value)
                assert bool(torch.isfinite(out).all()), (param, value)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)
