"""The helper process that feeds SketchML's negatives' quantile sketch (compressors/codecs/sketchml/feed.py):
same splits as in process, fallback on failure with the in-process error, and the codec with it."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from gcbench.compressors.codecs.sketchml import feed as sketch_feed
from gcbench.compressors.codecs.sketchml import splits as sketch_splits
from gcbench.compressors.codecs.sketchml.feed import SketchHelper, sketch_quantiles
from gcbench.compressors.codecs.sketchml.codec import SketchML

needs_helper = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the helper needs os.memfd_create (Linux)")


@pytest.fixture
def helper():
    h = SketchHelper()
    yield h
    h.close()
    h._proc.wait(timeout=30)


@needs_helper
@pytest.mark.parametrize("sketch,k", [("quantiles", 128), ("kll", 200)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_helper_gives_the_in_process_quantiles(helper, sketch, k, dtype):
    """Fewer than k items: neither sketch compacts (no coin flips), so the quantiles are exact and
    the helper's reply must equal the in-process sketch's, bit for bit, for both item types."""
    for n, parts in ((1, 2), (100, 7), (k - 1, 16)):
        arr = np.random.default_rng(n).standard_normal(n).astype(dtype)
        buf = helper.buffer(n, dtype)
        buf[:] = arr
        helper.start(parts, sketch, k)
        assert helper.result() == sketch_quantiles(arr, parts, sketch, k)
    assert not helper.broken


@needs_helper
def test_buffer_grows_and_is_remapped_by_the_helper(helper):
    """A request larger than the shared file so far grows it; the helper maps the new size (the
    min and max it reports are those of the new values, at the end of the grown buffer)."""
    for n in (10, 3_000_000):
        arr = np.arange(n, dtype=np.float32)
        helper.buffer(n, np.float32)[:] = arr
        helper.start(4, "quantiles", 128)
        _, lo, hi = helper.result()
        assert (lo, hi) == (0.0, float(n - 1))
    assert not helper.broken


@needs_helper
def test_a_dead_helper_falls_back_to_this_process(helper):
    """The helper killed before a request: the result still comes (computed here), the helper is
    marked broken and never used again."""
    arr = np.linspace(0, 1, 50, dtype=np.float32)
    helper._proc.kill()
    helper._proc.wait(timeout=30)
    helper.buffer(50, np.float32)[:] = arr
    helper.start(5, "quantiles", 128)
    assert helper.result() == sketch_quantiles(arr, 5, "quantiles", 128)
    assert helper.broken


@needs_helper
def test_an_error_in_the_helper_surfaces_as_the_in_process_error(helper):
    """A sketch that fails in the helper (KLL refuses k = 1) is redone here, so the caller sees the
    exception type the in-process call raises, and the helper stays usable."""
    arr = np.ones(10, dtype=np.float32)
    with pytest.raises(Exception) as direct:
        sketch_quantiles(arr, 4, "kll", 1)
    helper.buffer(10, np.float32)[:] = arr
    helper.start(4, "kll", 1)
    with pytest.raises(type(direct.value)):
        helper.result()
    assert not helper.broken
    helper.buffer(10, np.float32)[:] = arr
    helper.start(4, "quantiles", 128)
    assert helper.result() == sketch_quantiles(arr, 4, "quantiles", 128)


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("GCBENCH_SKETCH_HELPER", "0")
    assert sketch_feed.helper() is None


@needs_helper
@pytest.mark.parametrize("use", ["1", "0"])
def test_codec_with_and_without_the_helper(monkeypatch, use):
    """With the helper threshold lowered so that a small input uses it: the codec's guarantees hold
    (exact keys, no sign flip, decoded values inside the input's range, quantile-bucket error)."""
    monkeypatch.setattr(sketch_splits, "HELPER_MIN", 100)
    monkeypatch.setenv("GCBENCH_SKETCH_HELPER", use)
    gen = torch.Generator().manual_seed(5)
    keys = torch.nonzero(torch.rand(200_000, generator=gen) < 0.2).reshape(-1)
    values = torch.randn(keys.numel(), generator=gen)
    x = torch.sparse_coo_tensor(keys[None], values, (200_000,), is_coalesced=True, check_invariants=True)
    codec = SketchML()
    before = h.requests if (h := sketch_feed.helper()) is not None else 0
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the helper serves callers with more than one thread
    try:
        y = codec.decode(codec.encode(x)).coalesce()
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(y.indices(), x.indices())
    got = y.values()
    assert bool((got * values >= 0).all())  # no sign flip
    assert float(got.min()) >= float(values.min()) and float(got.max()) <= float(values.max())
    # 256 quantile buckets of N(0, 1) values: the relative error of the paper preset is ~0.3
    assert float((got - values).norm() / values.norm()) < 0.4
    h = sketch_feed.helper()
    assert (h is not None and not h.broken and h.requests == before + 1) if use == "1" else h is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_sorted_feed_keeps_the_classic_sketch_rank_error(dtype):
    """The classic sketch is fed its 2k-item blocks pre-sorted (its own base-buffer sort then has
    nothing to do): every returned quantile's true rank stays within the sketch's normalized rank
    error (k = 128: ~1.7%, with margin), over several runs (the compaction coins differ), and the
    min and max are exact."""
    import datasketches

    n, parts, k = 200_003, 64, 128  # not a multiple of 2k: a tail stays in the base buffer
    eps = datasketches.quantiles_floats_sketch.get_normalized_rank_error(k, False)
    arr = np.random.default_rng(7).standard_normal(n).astype(dtype)
    srt = np.sort(arr)
    for _ in range(3):
        before = arr.copy()
        qs, lo, hi = sketch_quantiles(arr, parts, "quantiles", k)
        assert np.array_equal(arr, before)  # scratch=False: the caller's array is not touched
        assert (lo, hi) == (float(srt[0]), float(srt[-1]))
        ranks = np.searchsorted(srt, np.asarray(qs, dtype=dtype), side="left") / n
        assert np.abs(ranks - np.arange(1, parts) / parts).max() <= 1.5 * eps


def test_scratch_sorts_whole_blocks_in_place():
    arr = np.random.default_rng(8).standard_normal(1000).astype(np.float32)
    orig = arr.copy()
    sketch_quantiles(arr, 4, "quantiles", 128, scratch=True)
    assert np.array_equal(arr[:768], np.sort(orig[:768].reshape(-1, 256), axis=1).ravel())
    assert np.array_equal(arr[768:], orig[768:])  # the tail is fed as it is


@needs_helper
def test_a_hung_helper_is_given_up_in_bounded_time(helper, monkeypatch):
    """A stopped helper (SIGSTOP: alive, never replying) costs at most the reply timeout: the result
    comes from this process, the helper is marked broken and killed."""
    import signal
    import time

    monkeypatch.setattr(sketch_feed, "REPLY_TIMEOUT_S", 0.5)
    arr = np.linspace(0, 1, 50, dtype=np.float32)
    os.kill(helper._proc.pid, signal.SIGSTOP)
    helper.buffer(50, np.float32)[:] = arr
    helper.start(5, "quantiles", 128)
    start = time.monotonic()
    assert helper.result() == sketch_quantiles(arr, 5, "quantiles", 128)
    assert time.monotonic() - start < 10
    assert helper.broken
    assert helper._proc.poll() is not None  # killed and reaped, not left stopped


@needs_helper
def test_a_one_thread_caller_keeps_the_sketch_in_process(monkeypatch):
    """With torch on one thread (the SketchML reproduction's CPU-time clock counts that thread only)
    the helper is not used: the whole encode runs on the calling thread."""
    monkeypatch.setattr(sketch_splits, "HELPER_MIN", 100)
    monkeypatch.setenv("GCBENCH_SKETCH_HELPER", "1")
    gen = torch.Generator().manual_seed(6)
    keys = torch.nonzero(torch.rand(100_000, generator=gen) < 0.2).reshape(-1)
    x = torch.sparse_coo_tensor(keys[None], torch.randn(keys.numel(), generator=gen), (100_000,), is_coalesced=True,
                                check_invariants=True)
    h = sketch_feed.helper()
    before = h.requests if h is not None else 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        SketchML().encode(x)
    finally:
        torch.set_num_threads(threads)
    h = sketch_feed.helper()
    assert (h.requests if h is not None else 0) == before
