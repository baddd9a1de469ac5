"""Grouping of SketchML's keys by bucket group (Jiang et al., SIGMOD 2018, Section 3.3 "Grouped
MinMaxSketch"): which group and level each bucket index has, and the keys and levels reordered
group after group, keys ascending within a group, for :func:`~gcbench.compressors.codecs.sketchml.minmaxsketch.minmax_insert` and the
per-group delta-binary keys (Section 3.4)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ...kernels.native import use_native
from ...kernels.sketchml import SKETCHML_C, group_scatter_c
from ...parallel.cpu_pool import caller_workers, map_blocks
from ...parallel.threads import single_thread


class GroupLayout(NamedTuple):
    """Bucket groups of SketchML's grouped MinMaxSketch (Section 3.3), negatives first."""

    edges: list[int]  # group j holds bucket indexes [edges[j], edges[j+1])
    width: list[int]
    base: list[int]  # bucket index of level 0 (the end nearest zero)
    step: list[int]  # +1 for a positive group, -1 for a negative one


#: Keys sorted by group at a time in :func:`group_keys` on the CPU (its int64 permutation: 512 KiB).
GROUP_CHUNK = 1 << 16
#: The same off the CPU, where each chunk costs about 20 kernel launches and a synchronising read of
#: its counts (an H200 profile of one 64M-coordinate SketchML encode + decode counted 4571 kernels,
#: the grouping's the largest share) and a 16M-key sort (a 128 MiB permutation) fits easily. The
#: result does not depend on the chunk.
DEVICE_GROUP_CHUNK = 1 << 24


def group_chunk(device: torch.device) -> int:
    """Keys per sorted chunk on ``device``: :data:`GROUP_CHUNK` on the CPU, else :data:`DEVICE_GROUP_CHUNK`."""
    return GROUP_CHUNK if device.type == "cpu" else DEVICE_GROUP_CHUNK


def group_keys(
    keys: torch.Tensor, held: list[torch.Tensor], lay: GroupLayout, buckets: int, workers: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys and levels group after group (keys ascending within a group), and keys per group.

    A bucket index maps to its group and to its level (distance to the group's zero-side end) by
    table lookup. The grouping is a stable sort by group done in chunks (:func:`group_chunk` keys):
    each chunk is sorted by group (stable ``argsort``) and its runs are copied to their group's
    next free slots, so keys stay ascending within a group (they ascend in the input) and no int64
    permutation of *all* keys is ever held (memory). Also faster than one
    ``argsort`` of all keys (measured at 2.5M keys, 1 thread, load 6: 45.8 ms vs 77.8 ms; per-
    group ``nonzero`` + gathers: 178 ms). Where C kernels run on the CPU, each range is one scatter
    pass instead (:func:`~gcbench.compressors.kernels.sketchml.group_scatter_c`, the same result).
    ``held`` is ``[bucket index]``, emptied here so that the index is freed as soon as groups and
    levels are known. Levels are int16 (a level is below the
    group width, at most ``buckets / 2 <= 2**15``); the MinMaxSketch table takes their dtype.
    ``workers``: threads for the chunk ranges (:mod:`~gcbench.compressors.parallel.cpu_pool`; default ``torch.get_num_threads()``).
    """
    dev, r = keys.device, len(lay.width)
    width_t = torch.tensor(lay.width, device=dev)
    group_of = torch.repeat_interleave(torch.arange(r, device=dev), width_t)
    step_b, base_b = torch.tensor(lay.step, device=dev)[group_of], torch.tensor(lay.base, device=dev)[group_of]
    level_of = ((torch.arange(buckets, device=dev) - base_b) * step_b).to(torch.int16)
    index = held.pop()
    group = group_of.to(torch.uint8).index_select(0, index)
    levels = level_of.index_select(0, index)
    del index
    # the chunks in one contiguous range per thread (.cpu_pool); each range's counts give the
    # next range its first free slot per group, so the result is the one-thread result
    workers = caller_workers(workers) if keys.device.type == "cpu" else 1
    n, chunk = keys.numel(), group_chunk(keys.device)
    per = max(-(-n // (max(workers, 1) * chunk)), 1) * chunk
    ranges = [(a, min(a + per, n)) for a in range(0, n, per)] or [(0, 0)]
    keys_g = torch.empty_like(keys)
    levels_g = torch.empty_like(levels)
    with single_thread(keys.device):  # many small ops (see .threads)
        part_counts = map_blocks(lambda ab: torch.bincount(group[ab[0] : ab[1]], minlength=r), ranges, keys.device, workers)
        counts_t = torch.stack(part_counts).sum(0)
        fill = (torch.cumsum(counts_t, 0) - counts_t).tolist()  # next free slot of each group
        fills = []
        for c in part_counts:
            fills.append(list(fill))
            fill = [f + x for f, x in zip(fill, c.tolist())]
        if keys.device.type == "cpu" and keys.is_contiguous() and use_native(SKETCHML_C):  # one pass per range, in C
            def scatter(i: int) -> object:
                return group_scatter_c(group, keys, levels, *ranges[i], fills[i], keys_g, levels_g)
        else:
            def scatter(i: int) -> object:
                return _chunks(keys, levels, group, keys_g, levels_g, fills[i], r, chunk, *ranges[i])
        map_blocks(scatter, range(len(ranges)), keys.device, workers)
    return keys_g, levels_g, counts_t


def _chunks(
    keys: torch.Tensor, levels: torch.Tensor, group: torch.Tensor, keys_g: torch.Tensor, levels_g: torch.Tensor,
    fill: list[int], r: int, chunk: int, lo: int, hi: int,
) -> None:
    """Stable sort by group of keys ``[lo, hi)``, ``chunk`` keys at a time, into
    ``keys_g``/``levels_g`` (``fill``: each group's next free slot, advanced here)."""
    for a in range(lo, hi, chunk):
        b = min(a + chunk, hi)
        part = group[a:b]
        order = torch.argsort(part, stable=True)
        ks = keys[a:b].index_select(0, order)
        ls = levels[a:b].index_select(0, order)
        o = 0
        for g, c in enumerate(torch.bincount(part, minlength=r).tolist()):
            if c:
                keys_g[fill[g] : fill[g] + c] = ks[o : o + c]
                levels_g[fill[g] : fill[g] + c] = ls[o : o + c]
                fill[g] += c
                o += c
