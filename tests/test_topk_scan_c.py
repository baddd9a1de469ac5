"""Top-k's candidate scan in C (compressors/kernels/sparse.py's abs_at_least_c,
compressors/kernels/c/abs_at_least.c) against ``torch.nonzero(x.abs() >= thr)``: positions, count,
the cap and the finiteness flag; with OpenMP and without; a build without AVX2 (the plain loops) in a
subprocess; and the codecs that scan (exact and sampled top-k, DGC) giving the eager bytes with it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch
from gcbench import compressors
from gcbench.compressors.kernels import core, native
from gcbench.compressors.kernels.sparse import C_BLOCK, SCAN_C, abs_at_least_c

pytestmark = pytest.mark.skipif(native.library(SCAN_C) is None, reason="no C compiler here")


def _values(n: int, seed: int) -> torch.Tensor:
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3
    x[::5] = 0.0
    x[1::7] = -0.0
    x[2::11] = x[3::11][: x[2::11].numel()]  # ties
    return x


def _expected(x: torch.Tensor, thr: float) -> torch.Tensor:
    return torch.nonzero(x.abs() >= torch.tensor(thr)).reshape(-1)


# sizes: below one byte, not a multiple of 8, a block's values exactly, past several blocks
SIZES = [1, 7, 8, 9, 64, 1001, 8 * C_BLOCK, 8 * C_BLOCK + 13, 3 * 8 * C_BLOCK + 5]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_positions_count_and_finiteness_are_torch_nonzero(n, workers, openmp, monkeypatch):
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    x = _values(n, n)
    for thr in (0.0, 0.5, 3.0, 9.0, 1e30):
        idx, count, finite, vals = abs_at_least_c(x, thr, None, workers)
        want = _expected(x, thr)
        assert finite and count == want.numel() and idx.dtype == torch.int64 and torch.equal(idx, want), thr
        assert vals.dtype == torch.float32
        assert torch.equal(vals.view(torch.int32), x[want].view(torch.int32)), thr  # the bits: -0.0 too
    for bad in (float("nan"), float("inf"), float("-inf")):
        for where in sorted({0, n // 2, n - 1}):
            y = x.clone()
            y[where] = bad
            idx, count, finite, _ = abs_at_least_c(y, 0.5, None, workers)
            assert not finite, (bad, where)
            assert torch.equal(idx, _expected(y, 0.5)) and count == idx.numel()  # NaN passes nothing, Inf passes


def test_a_nan_threshold_passes_nothing():
    x = _values(1001, 1)
    idx, count, finite, vals = abs_at_least_c(x, float("nan"), None, 1)
    assert finite and count == 0 and idx.numel() == 0 and vals.numel() == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_past_the_limit_no_position_is_formed(workers):
    """An all-zero tensor at threshold 0: every value passes; over the cap the count comes back without
    positions, at the cap exactly the positions come back."""
    n = 2 * 8 * C_BLOCK + 3
    x = torch.zeros(n)
    idx, count, finite, vals = abs_at_least_c(x, 0.0, n - 1, workers)
    assert idx is None and vals is None and count == n and finite
    idx, count, _, vals = abs_at_least_c(x, 0.0, n, workers)
    assert count == n and torch.equal(idx, torch.arange(n)) and torch.equal(vals, x)


def test_bad_arguments_raise_value_error():
    for x in (torch.zeros(16, dtype=torch.float64), torch.zeros(32)[::2], torch.zeros(4, 4)):
        with pytest.raises(ValueError):
            abs_at_least_c(x, 0.5, None, 1)


@pytest.mark.parametrize("name,params", [("topk", {"ratio": 0.01}), ("topk-sampled", {"ratio": 0.01}),
                                         ("dgc", {"ratio": 0.01})])
def test_codecs_that_scan_give_the_eager_bytes_with_it(name, params):
    """Above top-k's filter threshold the codecs' scan is the C one in ``auto`` (counted), and their
    payloads over three steps are the eager ones."""
    x = _values(300_001, 7)
    runs = {}
    for mode in ("eager", "auto"):
        with core.forced(mode):
            codec = compressors.get(name, **params)
            before = native.call_count(SCAN_C)
            runs[mode] = [codec.encode(x * (k + 1), key="k").to_bytes() for k in range(3)]
            assert (native.call_count(SCAN_C) > before) == (mode == "auto"), (name, mode)
    assert runs["eager"] == runs["auto"], name


def test_a_non_finite_input_is_refused_from_the_scan():
    """The scan is the codec's finiteness check where it runs in C (``checks_finite``): NaN and Inf
    raise the typed error."""
    x = _values(300_001, 3)
    x[123_457] = float("nan")
    with core.forced("auto"):
        codec = compressors.get("topk", ratio=0.01)
        assert codec.checks_finite(x)
        with pytest.raises(compressors.NonFiniteGradientError):
            codec.encode(x)


_PLAIN_SCRIPT = """
import torch
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels.sparse import SCAN_C, abs_at_least_c
g = torch.Generator().manual_seed(1)
for n in (1, 9, 70_001, 8 * 65536 + 13):
    x = torch.randn(n, generator=g) * 3
    x[::5] = 0.0
    x[1::7] = -0.0
    for thr in (0.0, 0.5, 3.0):
        idx, count, finite, vals = abs_at_least_c(x, thr, None, 2)
        assert finite and torch.equal(idx, torch.nonzero(x.abs() >= thr).reshape(-1)), (n, thr)
        assert torch.equal(vals.view(torch.int32), x[idx].view(torch.int32)), (n, thr)
    x[-1] = float("inf")
    assert not abs_at_least_c(x, 0.5, None, 1)[2]
print("same")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 CPU")
def test_a_build_without_avx2_gives_the_same_positions(tmp_path):
    """``TORCHINDUCTOR_CPP_MARCH=x86-64`` builds the C kernels for the baseline ISA (SSE2, no AVX2): the
    plain loops of c/abs_at_least.c run, with torch's positions and flag."""
    env = {**os.environ, "TORCHINDUCTOR_CPP_MARCH": "x86-64", "ATEN_CPU_CAPABILITY": "default",
           "GCBENCH_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", _PLAIN_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and "same" in run.stdout, run.stderr[-3000:]
