"""signSGD's C passes (compressors/kernels/sign.py, compressors/kernels/c/sign.c) against the torch
references: the packed bits and the finiteness flag, EF-signSGD's bits and residual (over the memory
and into a buffer of its own), the decode; with OpenMP and without; and a build without AVX2 (the
plain loops) in a subprocess. tests/test_fused.py compares the codecs' bytes in both modes."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels import core
from gcbench.compressors.kernels.sign import (SIGN_C, abs_row_sums, abs_row_sums_c, ef_sign_c, ef_sign_eager, sign_bits_c,
                                              sign_decode_c)
from gcbench.compressors.wire.bitpack import pack_bits

pytestmark = pytest.mark.skipif(native.library(SIGN_C) is None, reason="no C compiler here")


def _values(n: int, seed: int) -> torch.Tensor:
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3
    x[::5] = 0.0
    x[1::7] = -0.0  # sign(-0) = +1: -0.0 >= 0
    return x


def _bits(x: torch.Tensor) -> torch.Tensor:
    return pack_bits(torch.ge(x, 0).to(torch.int32), 1)


def _as_int(t: torch.Tensor) -> list[int]:
    return t.view(torch.int32).tolist()


@pytest.mark.parametrize("n", [8, 64, 8 * 8193, 8 * 100_003])
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_sign_bits_and_finiteness(n, workers, openmp, monkeypatch):
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    x = _values(n, n)
    bits = torch.full((n // 8,), 0xAA, dtype=torch.uint8)
    assert sign_bits_c(x, bits, workers) is True
    assert torch.equal(bits, _bits(x))
    for bad in (float("nan"), float("inf"), float("-inf")):
        for where in (0, n // 2 + 3, n - 1):
            y = x.clone()
            y[where] = bad
            assert sign_bits_c(y, bits, workers) is False, (bad, where)


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_ef_sign_has_the_eager_bits_and_residual(first, workers, openmp, monkeypatch):
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    n = 8 * 50_001
    g, e = _values(n, 1), None if first else _values(n, 2) * 0.5
    s = 0.7310585975646973  # a float32 value
    want_bits = torch.empty(n // 8, dtype=torch.uint8)
    want_res = torch.empty(n) if first else e.clone()
    ef_sign_eager(g.clone(), None if first else want_res, torch.tensor([s]), want_bits, want_res if first else None)
    bits = torch.empty(n // 8, dtype=torch.uint8)
    res = torch.full((n,), float("nan")) if first else None
    mem = None if first else e.clone()
    ef_sign_c(g, mem, s, bits, res, workers)
    got = res if first else mem
    assert torch.equal(bits, want_bits) and _as_int(got) == _as_int(want_res)


@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_sign_decode_is_plus_minus_s(workers, openmp, monkeypatch):
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    bits = torch.randint(0, 256, (70_001,), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    s = 0.25
    out = torch.empty(8 * bits.numel())
    sign_decode_c(bits, s, out, workers)
    set_ = ((bits.to(torch.int32).unsqueeze(1) >> torch.arange(8)) & 1).reshape(-1) == 1
    assert torch.equal(out, torch.where(set_, s, -s))


@pytest.mark.parametrize("n", [1, 7, 1023, 1024, 1025, 5000, 300_001])
@pytest.mark.parametrize("with_e", [False, True])
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_abs_row_sums_have_the_eager_values(n, with_e, workers, openmp, monkeypatch):
    """The scale's exact row sums of |g + e| in C equal the eager reference's float64 values bit for
    bit (a truncation instead of rounding to an integer, another row exponent or another row length
    fails this test), rows of tiny and huge magnitudes included, and the default mode takes them."""
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    g = _values(n, n)
    g[: n // 3] *= 1e-30  # rows of tiny values
    g[n // 3 : n // 2] *= 1e30
    g[-1100:] *= 1e-40  # subnormal values: a last row whose max is subnormal
    e = torch.randn(n, generator=torch.Generator().manual_seed(n + 1)) if with_e else None
    with core.forced("eager"):
        want = abs_row_sums(g, e, compiled=False)
    got = abs_row_sums_c(g, e, workers)
    assert got.dtype == torch.float64 and torch.equal(got, want)
    before = native.call_count(SIGN_C)
    with core.forced("auto"):
        assert torch.equal(abs_row_sums(g, e, compiled=False), want)
    assert native.call_count(SIGN_C) == before + 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_abs_row_sums_show_every_non_finite_row(bad):
    """A NaN or an infinity makes its own row's sum non-finite and no other (the encode's check)."""
    g = torch.randn(5000)
    for i in (0, 1024 + 512, 4999):
        g[i] = bad
    rows = abs_row_sums_c(g, None, 1)
    assert [not bool(torch.isfinite(r)) for r in rows] == [True, True, False, False, True]


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):  # float64 values
        abs_row_sums_c(torch.zeros(16, dtype=torch.float64), None, 1)
    with pytest.raises(ValueError):  # a memory of another length
        abs_row_sums_c(torch.zeros(16), torch.zeros(15), 1)
    with pytest.raises(ValueError):  # not a multiple of 8 values
        sign_bits_c(torch.zeros(12), torch.empty(1, dtype=torch.uint8), 1)
    with pytest.raises(ValueError):  # float64
        sign_bits_c(torch.zeros(16, dtype=torch.float64), torch.empty(2, dtype=torch.uint8), 1)
    with pytest.raises(ValueError):  # nowhere to write the residual
        ef_sign_c(torch.zeros(16), None, 1.0, torch.empty(2, dtype=torch.uint8), None, 1)
    with pytest.raises(ValueError):  # output of the wrong length
        sign_decode_c(torch.zeros(2, dtype=torch.uint8), 1.0, torch.empty(15), 1)


_PLAIN_SCRIPT = """
import torch
from gcbench import compressors
from gcbench.compressors.kernels import core, native
from gcbench.compressors.kernels.sign import SIGN_C
x = torch.randn(70_001, generator=torch.Generator().manual_seed(1)) * 3
x[::5] = 0.0
x[1::7] = -0.0
for name in ("signsgd", "ef-signsgd"):
    runs = {}
    for mode in ("eager", "auto"):  # auto: the C passes at this size, no compilation
        with core.forced(mode):
            codec = compressors.get(name)
            before = native.call_count(SIGN_C)
            steps = []
            for k in range(3):
                p = codec.encode(x * (k + 1), key="k")
                steps.append((p.to_bytes(), codec.decode(p)))
            runs[mode] = steps
            assert (native.call_count(SIGN_C) > before) == (mode == "auto"), (name, mode)
    for (a, da), (b, db) in zip(runs["eager"], runs["auto"]):
        assert a == b and torch.equal(da, db), name
print("same")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 CPU")
def test_a_build_without_avx2_gives_the_eager_bytes(tmp_path):
    """``TORCHINDUCTOR_CPP_MARCH=x86-64`` builds the C kernels for the baseline ISA (SSE2, no AVX2):
    the plain loops of c/sign.c run, and signSGD's and EF-signSGD's bytes and values are eager's."""
    env = {**os.environ, "TORCHINDUCTOR_CPP_MARCH": "x86-64", "ATEN_CPU_CAPABILITY": "default",
           "GCBENCH_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", _PLAIN_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and "same" in run.stdout, run.stderr[-3000:]
