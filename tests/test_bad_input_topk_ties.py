"""Top-k, sampled top-k and DGC on inputs whose magnitudes tie at the threshold (all zeros, a few
distinct values): the candidate scans form no int64 position per candidate past
:func:`~gcbench.compressors.codecs.topk.candidate_limit`, and the payloads are those of the path
that gathers every candidate (the limit lifted), ties included, in every scan mode. A subprocess
checks the peak resident set of an all-zero encode against the ``torch.topk`` bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_topk import magnitudes

from gcbench.compressors import get
from gcbench.compressors.codecs import topk as topk_module
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels import sparse as sparse_kernels

N = 300_001  # several scan blocks, not a multiple of 8 (the compiled scan's tail)


def _input(kind: str, n: int = N) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    if kind == "zeros":
        return torch.zeros(n)
    if kind == "signed-zeros":
        return torch.where(torch.rand(n, generator=g) < 0.5, -0.0, 0.0)
    if kind == "one-value":
        return torch.full((n,), -0.75)
    if kind == "half-tied":
        x = torch.rand(n, generator=g) * 0.5
        x[::2] = 1.0
        return x
    if kind == "few-values":
        return (torch.randint(-2, 3, (n,), generator=g) * 0.5).float()
    if kind == "half-zero":  # the exact path's strided sample sees only zeros
        x = torch.randn(n, generator=g)
        x[::2] = 0.0
        return x
    if kind == "tied-tail":
        x = torch.randn(n, generator=g)
        x[: n // 3] = 0.25
        return x
    raise ValueError(kind)


KINDS = ["zeros", "signed-zeros", "one-value", "half-tied", "few-values", "half-zero", "tied-tail"]
CODECS = [("topk", {}), ("topk", {"ratio": 0.1}), ("topk-sampled", {}), ("topk-sampled", {"ratio": 0.001}), ("dgc", {})]


@pytest.fixture
def scan_mode(request, monkeypatch):
    """``eager-1``: the blocked scan; ``eager-2``: full-size comparisons; ``packed-1``: the compiled
    scan's flow (packed bits, their count, the slabs' positions) with the kernel's eager twin, whose
    equality with the compiled kernel ``tests/test_topk.py`` checks (no compilation here); ``c-1`` and
    ``c-2``: the C scan (``auto`` below the compiled kernels' size), on one and two threads."""
    engine, threads = request.param.split("-")
    if engine == "packed":
        monkeypatch.setattr(sparse_kernels, "abs_at_least_bits", sparse_kernels.abs_at_least_bits.fn)
        monkeypatch.setattr(topk_module, "compiles_scan", lambda t: t.dtype == torch.float32 and t.numel() >= 8)
    if engine == "c" and native.library(sparse_kernels.SCAN_C) is None:
        pytest.skip("no C compiler here")
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        with fused.forced("auto" if engine == "c" else "eager"):
            yield request.param
    finally:
        torch.set_num_threads(before)


MODES = ["eager-1", "eager-2", "packed-1", "c-1", "c-2"]


def _payloads(x: torch.Tensor, name: str, params: dict, limit_lifted: bool, monkeypatch) -> list[bytes]:
    with monkeypatch.context() as m:
        if limit_lifted:
            m.setattr(topk_module, "candidate_limit", lambda n, k: n)
        codec = get(name, **params)
        return [codec.encode(x * s, key="k").to_bytes() for s in (1, -1, 1)]  # DGC: a second step too


@pytest.mark.parametrize("scan_mode", MODES, indirect=True)
@pytest.mark.parametrize("name, params", CODECS)
@pytest.mark.parametrize("kind", KINDS)
def test_tied_inputs_give_the_payloads_of_the_gathering_path(kind, name, params, scan_mode, monkeypatch):
    """Every scan: the same bytes with and without the limit (where it is lifted every candidate is
    gathered, as a selection with few candidates still does)."""
    x = _input(kind)
    assert _payloads(x, name, params, False, monkeypatch) == _payloads(x, name, params, True, monkeypatch)


def test_exact_ties_equal_torch_topk_of_the_full_magnitudes():
    for kind in KINDS:
        x = _input(kind)
        k = topk_module.num_selected(N, 0.01)
        idx, vals = topk_module.topk_with_values(x, k, absolute=True)
        want = torch.sort(torch.topk(x.abs(), k, sorted=False).indices).values
        assert torch.equal(idx, want), kind
        assert torch.equal(vals.view(torch.int32), x[want].view(torch.int32)), kind


@pytest.mark.parametrize("scan_mode", MODES, indirect=True)
@pytest.mark.parametrize("name", ["topk", "topk-sampled", "dgc"])
def test_no_position_is_formed_per_candidate_past_the_limit(name, scan_mode, monkeypatch):
    """An all-zero tensor passes every threshold: the scans' position tensors, the gathered
    candidates and every int64 tensor the kernels expand stay within the limit (instrumented
    sizes, not time)."""
    n = N
    k = topk_module.num_selected(n, get(name).ratio)
    limit = topk_module.candidate_limit(n, k)
    assert limit < n // 10
    sizes: dict[str, list[int]] = {"scan": [], "gathered": [], "slab": [], "block": [], "packed": [], "c": []}

    def wrap(module, attr, key, size):
        real = getattr(module, attr)

        def spy(*args, **kw):
            out = real(*args, **kw)
            sizes[key].append(size(out))
            return out

        monkeypatch.setattr(module, attr, spy)

    wrap(topk_module, "_indices_at_least", "scan", lambda r: 0 if r[0] is None else r[0].numel())
    wrap(topk_module, "_importance_of", "gathered", lambda r: r.numel())
    wrap(sparse_kernels, "_slab_positions", "slab", lambda r: 0 if r[0] is None else r[0].numel())
    wrap(topk_module, "abs_at_least_capped", "packed", lambda r: r[1])
    wrap(topk_module, "abs_at_least_c", "c", lambda r: 0 if r.positions is None else r.positions.numel())
    wrap(topk_module, "nonzero_sorted", "block", lambda r: r.numel())
    p = get(name).encode(torch.zeros(n), key="k")
    assert p.sections[0].numel() == k
    # the packed scan counted its bits and paired none of them up as positions
    assert bool(sizes["packed"]) == (scan_mode == "packed-1") and not any(sizes["slab"])
    # the C scan ran in its modes only, and formed no position past the limit either
    assert bool(sizes["c"]) == scan_mode.startswith("c-") and max(sizes["c"], default=0) <= limit
    assert sizes["scan"] and max(sizes["scan"]) <= limit
    assert max(sizes["gathered"], default=0) <= limit
    assert max(sizes["slab"], default=0) <= limit
    assert max(sizes["block"], default=0) <= max(limit, n // 4)  # one block's positions at a time


_PEAK = """
import json, sys
import torch
sys.path.insert(0, {root!r})
from benchmarks.memory import peak_during
from gcbench import compressors
torch.set_num_threads(1)
n = 1 << 22
out = {{}}
for name in ("topk", "topk-sampled"):
    compressors.get(name).encode(torch.randn(1 << 17))  # caches, outside the measurement
    x = torch.zeros(n)
    out[name] = peak_during(lambda: compressors.get(name).encode(x)) / x.nbytes
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc/self/clear_refs")
def test_an_all_zero_encode_peaks_at_the_torch_topk_bound():
    """Peak resident-set increase of one encode of 2^22 zeros, eager, one thread, every allocation
    of 64 KiB or more its own mapping (freed memory leaves the resident set): ``torch.topk``'s queue
    (16 bytes an element) and ``|x|`` are 5x the input; gathering every candidate took about 9x."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "GCBENCH_COMPILE": "0", "MALLOC_MMAP_THRESHOLD_": "65536"}
    res = subprocess.run([sys.executable, "-c", _PEAK.format(root=root)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=root)
    assert res.returncode == 0, res.stderr[-2000:]
    peaks = json.loads(res.stdout.strip().splitlines()[-1])
    for name, ratio in peaks.items():
        assert ratio <= 5.6, f"{name} encode of zeros peaked at {ratio:.2f}x its input"


@pytest.mark.parametrize("kind", ["normal", "ties", "zeros", "one-value", "wide", "two-values"])
@pytest.mark.parametrize("block", [1000, 1 << 16])
def test_kth_largest_by_blocks_equals_kthvalue(kind, block):
    """The blocked selection (histograms only, for a tie that fills a bucket) gives kthvalue's value."""
    a = magnitudes(kind, seed=11)
    c = a.numel()
    for k in (1, 2, 17, 300, c // 2, c - 1, c):
        want = torch.kthvalue(a, c - k + 1).values
        got = topk_module.kth_largest(a, k, block)
        assert got.dtype == torch.float32 and got.view(torch.int32) == want.view(torch.int32), k
