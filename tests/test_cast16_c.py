"""The float16 cast and widening in C (compressors/kernels/cast16.py, compressors/kernels/c/cast16.c)
against torch's conversions, bit for bit: every float16 pattern widened, float32 patterns of every
kind cast (normal, subnormal, the rounding boundaries, beyond the range, NaN, Inf); the finiteness
flag; with OpenMP and without; and a build without F16C, where the codec keeps torch's ops."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels.cast16 import f16c_built, from_f16_c, to_f16_c

pytestmark = pytest.mark.skipif(not f16c_built(), reason="no C compiler with F16C here")


def _openmp(openmp: bool, monkeypatch) -> None:
    if not openmp:  # a build without OpenMP: a call per block, on the caller's pool threads
        monkeypatch.setattr(native, "openmp", lambda name: False)


@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_every_float16_pattern_widens_as_torch_does(workers, openmp, monkeypatch):
    _openmp(openmp, monkeypatch)
    q = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    finite = torch.isfinite(q)
    out = torch.empty(q.numel())
    assert from_f16_c(q[finite].contiguous(), out[: int(finite.sum())], workers) is True
    assert torch.equal(out[: int(finite.sum())].view(torch.int32), q[finite].to(torch.float32).view(torch.int32))
    assert from_f16_c(q, out, workers) is False  # the NaN and Inf patterns are flagged


@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_float32_values_cast_as_torch_casts_them(workers, openmp, monkeypatch):
    _openmp(openmp, monkeypatch)
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(1 << 31), 1 << 31, (1_000_003,), dtype=torch.int64, generator=g).to(torch.int32)
    x = bits.view(torch.float32).clone()
    # around the float16 range and its rounding boundaries, and its subnormals
    edges = torch.tensor([65504.0, 65519.99, 65520.0, 65536.0, 6e-8, 5.96e-8, 2.98e-8, 2.99e-8, 6.1e-5, 0.0, -0.0,
                          1.0 + 2**-11, 1.0 + 3 * 2**-11, float("inf"), float("nan")])
    x[: 2 * edges.numel()] = torch.cat([edges, -edges])
    x[100_000:200_000] = torch.randn(100_000, generator=g) * 1e-6
    x[200_000:300_000] = torch.randn(100_000, generator=g) * 1e4
    want = x.to(torch.float16)
    q = torch.empty(x.numel(), dtype=torch.float16)
    assert to_f16_c(x, q, workers) is False  # NaN, Inf and values beyond the range are flagged
    ok = torch.isfinite(want)
    assert torch.equal(q[ok].view(torch.int16), want[ok].view(torch.int16))
    assert torch.equal(torch.isfinite(q), ok)
    small = x[100_000:300_000].contiguous()
    assert to_f16_c(small, q[: small.numel()], workers) is True


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):
        to_f16_c(torch.zeros(8, dtype=torch.float64), torch.empty(8, dtype=torch.float16), 1)
    with pytest.raises(ValueError):
        from_f16_c(torch.zeros(8, dtype=torch.float16), torch.empty(7), 1)


_PLAIN_SCRIPT = """
import torch
from gcbench import compressors
from gcbench.compressors.kernels import core
from gcbench.compressors.kernels.cast16 import cast16_native
assert not cast16_native(torch.device("cpu"))
x = torch.randn(70_001, generator=torch.Generator().manual_seed(1)) * 3e4
runs = []
for mode in ("eager", "auto"):
    with core.forced(mode):
        codec = compressors.get("fp16")
        p = codec.encode(x)
        runs.append((p.to_bytes(), codec.decode(p, out=torch.empty_like(x))))
assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])
print("same")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 CPU")
def test_a_build_without_f16c_keeps_torchs_ops(tmp_path):
    """``TORCHINDUCTOR_CPP_MARCH=x86-64`` builds the C kernels without F16C: the codec says so and
    casts with torch's ops, the same bytes."""
    env = {**os.environ, "TORCHINDUCTOR_CPP_MARCH": "x86-64", "ATEN_CPU_CAPABILITY": "default",
           "GCBENCH_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", _PLAIN_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and "same" in run.stdout, run.stderr[-3000:]
