"""Blocks of torch ops on the caller's threads (compressors/parallel/cpu_pool.py) and the SketchML stages that
use them: results in block order, errors surfaced, and the same bytes as one thread."""

from __future__ import annotations

import threading

import pytest
import torch
from gcbench.compressors import InvalidParameterError
from gcbench.compressors.parallel.cpu_pool import map_blocks
from gcbench.compressors.codecs.sketchml.delta_binary import delta_binary_encode
from gcbench.compressors.codecs.sketchml.minmaxsketch import minmax_insert
import gcbench.compressors.codecs.sketchml.delta_binary as delta_binary
import gcbench.compressors.codecs.sketchml.minmaxsketch as minmaxsketch
from gcbench.compressors.codecs.sketchml.groups import GroupLayout, group_keys
from gcbench.compressors.codecs.sketchml.codec import bucketize

CPU = torch.device("cpu")


def test_results_in_block_order_and_every_block_once():
    seen: list[int] = []
    lock = threading.Lock()

    def fn(i: int) -> int:
        with lock:
            seen.append(i)
        return i * i

    assert map_blocks(fn, range(50), CPU, 3) == [i * i for i in range(50)]
    assert sorted(seen) == list(range(50))


def test_an_error_in_any_block_is_raised_with_its_type():
    def fn(i: int) -> int:
        if i == 7:
            raise InvalidParameterError("block 7")
        return i

    for workers in (1, 2, 4):
        with pytest.raises(InvalidParameterError, match="block 7"):
            map_blocks(fn, range(20), CPU, workers)


def test_nested_calls_run_inline():
    """A block that maps blocks itself runs them on its own thread (no pool thread waits for another)."""
    out = map_blocks(lambda i: map_blocks(lambda j: i * 10 + j, range(3), CPU, 2), range(4), CPU, 2)
    assert out == [[i * 10 + j for j in range(3)] for i in range(4)]


def _grouped_input(n: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.nonzero(torch.rand(10 * n, generator=gen) < 0.1).reshape(-1)
    index = torch.randint(0, 64, (keys.numel(),), generator=gen, dtype=torch.int32)
    edges = [0, 16, 32, 48, 64]
    lay = GroupLayout(edges, [16] * 4, [15, 31, 32, 48], [-1, -1, 1, 1])
    return keys, index, lay


@pytest.mark.cuda
def test_grouping_on_cuda_in_one_chunk_equals_the_cpu_chunks():
    """On CUDA the keys are grouped in one sort (``DEVICE_GROUP_CHUNK``): the CPU's chunked grouping."""
    keys, index, lay = _grouped_input(300_000, 5)
    want = group_keys(keys, [index.clone()], lay, 64, 1)
    got = group_keys(keys.cuda(), [index.cuda()], lay, 64)
    assert all(torch.equal(a.cpu(), b) for a, b in zip(got, want))


@pytest.mark.parametrize("workers", [2, 3])
def test_sketchml_stages_on_threads_equal_one_thread(workers, monkeypatch):
    """Grouping (chunk ranges), MinMaxSketch insert (groups), delta-binary (segments) and bucketize
    (slices) on several threads give exactly the one-thread tensors."""
    from gcbench.compressors.codecs.sketchml import groups as sketch_groups

    monkeypatch.setattr(sketch_groups, "GROUP_CHUNK", 1000)  # several chunks per thread's range
    monkeypatch.setattr(minmaxsketch, "ONE_BUFFER_MAX", 0)  # groups and segments on threads at this size too
    monkeypatch.setattr(delta_binary, "WHOLE_ARRAY_MAX", 0)
    keys, index, lay = _grouped_input(60_000, workers)
    one = group_keys(keys, [index.clone()], lay, 64, 1)
    many = group_keys(keys, [index.clone()], lay, 64, workers)
    assert all(torch.equal(a, b) for a, b in zip(one, many))
    # off the CPU the keys are sorted in larger chunks (one here): the same grouping
    assert sketch_groups.group_chunk(torch.device("meta")) == sketch_groups.DEVICE_GROUP_CHUNK > 1000
    monkeypatch.setattr(sketch_groups, "GROUP_CHUNK", sketch_groups.DEVICE_GROUP_CHUNK)
    whole = group_keys(keys, [index.clone()], lay, 64, 1)
    assert all(torch.equal(a, b) for a, b in zip(one, whole))
    keys_g, levels_g, counts_t = one
    counts = counts_t.tolist()
    cols = [max(1, c // 5) for c in counts]
    fill = [15] * 4
    t1 = minmax_insert(keys_g, levels_g, counts, cols, 3, 11, fill, workers=1)
    assert torch.equal(t1, minmax_insert(keys_g, levels_g, counts, cols, 3, 11, fill, workers=workers))
    for widths in ("1234", "124"):
        d1 = delta_binary_encode(keys_g * 37, counts_t, widths, workers=1)  # wider gaps: 1-3 byte deltas
        assert torch.equal(d1, delta_binary_encode(keys_g * 37, counts_t, widths, workers=workers))
    values = torch.randn(200_000, generator=torch.Generator().manual_seed(1))
    bounds = torch.sort(torch.randn(255, generator=torch.Generator().manual_seed(2), dtype=torch.float64)).values
    expect = torch.searchsorted(bounds.float(), values, right=True, out_int32=True)
    assert torch.equal(bucketize(values, bounds, out_int32=True, workers=workers), expect)


@pytest.mark.parametrize("workers", [1, 2])
def test_sketchml_grouping_in_c_equals_the_torch_reference(workers):
    """The C scatter (one pass per thread's range, where C kernels run) gives the eager chunked stable
    sort's keys, levels and counts; it refuses a group outside the layout and a slot past the outputs."""
    from gcbench.compressors.kernels import core, native
    from gcbench.compressors.kernels.sketchml import SKETCHML_C, group_scatter_c

    if native.library(SKETCHML_C) is None:
        pytest.skip("no C compiler here")
    keys, index, lay = _grouped_input(150_001, workers)
    with core.forced("eager"):
        want = group_keys(keys, [index.clone()], lay, 64, workers)
    with core.forced("auto"):
        before = native.call_count(SKETCHML_C)
        got = group_keys(keys, [index.clone()], lay, 64, workers)
        assert native.call_count(SKETCHML_C) > before
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    g = torch.tensor([0, 1, 3], dtype=torch.uint8)
    k, lv = torch.arange(3), torch.zeros(3, dtype=torch.int16)
    with pytest.raises(ValueError, match="group"):
        group_scatter_c(g, k, lv, 0, 3, [0, 1, 2], torch.empty(3, dtype=torch.int64), torch.empty(3, dtype=torch.int16))
    with pytest.raises(ValueError, match="slot"):
        group_scatter_c(g[:2], k, lv, 0, 2, [0, 3], torch.empty(3, dtype=torch.int64), torch.empty(3, dtype=torch.int16))
    assert group_scatter_c(g[:2], k, lv, 0, 2, [1, 0], torch.empty(3, dtype=torch.int64),
                           torch.empty(3, dtype=torch.int16)) == [2, 1]
