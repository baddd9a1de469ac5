"""3LC's error accumulation with quartic packing in one C pass (compressors/kernels/c/threelc.c) against
the two torch passes it replaces (feedback_trits, then pack_shifted over the trits), bit for bit, and the
error-feedback codec giving the eager bytes and residuals with it."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors.kernels import native
from gcbench.compressors.kernels.threelc import FEEDBACK_BLOCK, THREELC_C, feedback_pack_c, feedback_trits, pack_shifted

pytestmark = pytest.mark.skipif(native.library(THREELC_C) is None, reason="no C compiler here")


def _reference(g, e, m):
    """The torch passes (the kernels' functions, eagerly): residual and quartic bytes, padding trits 1."""
    n = g.numel()
    mt = torch.tensor([m], dtype=torch.float32)
    h = mt * 0.5
    res = torch.empty(n)
    trits = torch.ones((n + 4) // 5 * 5, dtype=torch.uint8)
    feedback_trits.fn(g, None if e is None else e.clone(), h, -h, mt, res, trits[:n])
    return res, pack_shifted.fn(trits), float(h)


def _hostile(n: int, m: float, seed: int) -> torch.Tensor:
    """Values around 0, on and beside the thresholds +-M/2, -0.0, subnormals, and beyond +-M."""
    g = torch.Generator().manual_seed(seed)
    h = m / 2
    pool = torch.tensor([0.0, -0.0, h, -h, torch.nextafter(torch.tensor(h), torch.tensor(0.0)).item(),
                         torch.nextafter(torch.tensor(-h), torch.tensor(0.0)).item(), m, -m, 1e-45, -1e-45, 3 * m])
    x = torch.randn(n, generator=g) * m
    pick = torch.rand(n, generator=g) < 0.3
    x[pick] = pool[torch.randint(0, pool.numel(), (int(pick.sum()),), generator=g)]
    return x


@pytest.mark.parametrize("n", [1, 4, 5, 6, 999, 5 * FEEDBACK_BLOCK + 3])
@pytest.mark.parametrize("with_e", [True, False])
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_one_pass_has_the_bits_of_the_two_torch_passes(n, with_e, workers, openmp, monkeypatch):
    """Residuals and quartic bytes equal the torch passes' for every value, the last group padded with
    quantized zeros, with ``e`` updated in place or no ``e``, on one thread, OpenMP threads and pool threads."""
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    m = 0.75
    g = _hostile(n, m, n)
    e = _hostile(n, m / 3, n + 1) if with_e else None
    want_res, want_q, h = _reference(g, e, m)
    res = torch.full((n,), float("nan")) if e is None else e
    q = torch.full(((n + 4) // 5,), 255, dtype=torch.uint8)
    feedback_pack_c(g, e, m, h, res, q, workers)
    assert torch.equal(q, want_q)
    assert torch.equal(res.view(torch.int32), want_res.view(torch.int32))  # bits: -0.0 and +0.0 apart


def test_one_pass_refuses_what_it_cannot_read():
    g = torch.zeros(10)
    with pytest.raises(ValueError):
        feedback_pack_c(g, None, 1.0, 0.5, torch.zeros(10), torch.zeros(3, dtype=torch.uint8), 1)  # 2 groups, not 3
    with pytest.raises(ValueError):
        feedback_pack_c(g.double(), None, 1.0, 0.5, torch.zeros(10), torch.zeros(2, dtype=torch.uint8), 1)


def test_error_feedback_codec_runs_the_one_pass_with_the_eager_bytes():
    """The default (C) path of 3LC with error feedback: the payloads and residuals of several steps
    equal eager mode's, and the C pass ran."""
    from gcbench.compressors import registry
    from gcbench.compressors.kernels import core

    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(100_003, generator=gen) for _ in range(4)]
    runs = {}
    for mode in ("eager", "compiled"):
        codec = registry.get("3lc")
        before = native.call_count(THREELC_C)
        with core.forced(mode):
            runs[mode] = [codec.encode(x, key="w").to_bytes() for x in xs]
        calls = native.call_count(THREELC_C) - before
        assert (calls > 0) == (mode == "compiled")
    assert runs["eager"] == runs["compiled"]
