"""SketchML decode's last steps: the groups' key lists merged into one ascending list, and each
key's value read from its group's MinMaxSketch.

Jiang et al., "SketchML", SIGMOD 2018, Sections 3.3-3.4: the keys travel group after group (each
group's list ascending, :mod:`~gcbench.compressors.codecs.sketchml.delta_binary`) and a key's value is
the bucket value of the level its group's :mod:`MinMaxSketch <.minmaxsketch>` answers. The
decoder's output is one ascending key list (a coalesced sparse tensor), so the groups are merged.

How, without a permutation of the values: each key and its group are packed into one integer,
``key << gbits | group`` (int32 while ``numel << gbits`` fits, else int64), and these are sorted
(numpy's stable or default sort, whichever is faster on this machine: :func:`sort_kind`; keys are
unique, so both give the same array and no index array is formed). The sketch is then queried in
*sorted* order, a block of keys at a time (the block's buffers stay in cache): the key's group
gives its table's width and first cell, the hash is
:func:`~gcbench.compressors.codecs.sketchml.minmaxsketch.hash_params`'s, and a small table over
``(group, level)`` gives the value. Same cells, same maximum, same bucket values as querying
group by group and sorting the values along: the decoded tensor is bit for bit the same.

Where C kernels build (not in eager mode) each block's query is one C call
(:func:`~gcbench.compressors.kernels.sketchml.query_sorted_c`): the same arithmetic and clipping, the
same values; 2.5M keys took 12.6-13.6 ms on two threads against 28.5-29 ms for the numpy passes.

Work is spread over the caller's threads (:mod:`~gcbench.compressors.parallel.cpu_pool`): the
packed integers are cut by key range (each group's list split by ``searchsorted``) so that each
thread sorts one range, and the query runs block by block. Every block writes its own slice.

Packing needs ``key << gbits | (r - 1) < 2^63`` for the largest key (``gbits = max(1, ceil(log2
r))``: keys below 2^60 with the 8 groups of both presets, 2^55 with 256). Larger keys (of a sparse
tensor of ``2^62`` elements, or ``(2^31, 2^31)``) take :func:`merge_wide`: the keys sorted with their groups
alongside (a stable sort and one gather), the same checks and the same hash in torch ops, so the
same keys and values as the packed path would give where both apply.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from ...errors import CorruptPayloadError
from ...kernels.native import use_native
from ...kernels.sketchml import SKETCHML_C, params_u64, query_sorted_c
from ...parallel.cpu_pool import map_blocks
from ...parallel.threads import single_thread
from .minmaxsketch import hash_params, table_layout

_UNSORTED = "SketchML keys must be strictly increasing within a group and in [0, numel)"


def _not_increasing(part: torch.Tensor | np.ndarray) -> bool:
    """Whether a 1-D tensor or array is not strictly increasing (a CPU tensor by numpy: several times faster)."""
    a = part.numpy() if isinstance(part, torch.Tensor) and part.device.type == "cpu" else part
    return bool((a[1:] <= a[:-1]).any())


#: Keys per block of the query (its int64 buffers: 256 KiB each, in L2).
BLOCK = 1 << 15
_MASK32 = 0xFFFFFFFF
#: Packed integers of the probe that picks numpy's sort (:func:`sort_kind`): 8 ascending runs, as a
#: block of SketchML's 8 groups.
SORT_PROBE_N = 1 << 17
#: Fewer packed integers than this are sorted by the stable sort without measuring (:func:`sort_kind`'s
#: 10-20 ms would outweigh what either sort could save on them for many calls).
SORT_PROBE_MIN = 1 << 16
#: numpy's sort kind for the packed integers, per dtype: measured once per process (:func:`sort_kind`).
sort_kinds: dict[str, str] = {}
_sort_lock = threading.Lock()


def sort_kind(dtype: np.dtype) -> str:
    """The faster of numpy's two sorts of packed integers of ``dtype`` (int32 or int64) on this
    machine: ``"stable"`` or ``"quicksort"``. Keys are distinct, so both give the same array; which
    one is faster depends on the CPU. The stable sort (timsort for these widths) merges a block's
    ascending runs, one per group, in n log(runs); the default sort sees no runs, but numpy runs it
    with AVX-512 sorting networks where the CPU has them (x86-simd-sort). 1.25M int32 keys in 8 runs:
    17.0 ms stable against 6.5 ms default with AVX-512, 17.0 against 34 ms without it (the same
    2-core Intel Xeon, numpy 2.4 with its AVX-512 dispatch turned off); stable won on a 2-core AMD
    EPYC (AVX2: 12.8 against 57 ms). Measured here once per dtype on :data:`SORT_PROBE_N` integers in
    8 runs (the fastest of three sorts each), 10-20 ms, by the first decode of at least
    :data:`SORT_PROBE_MIN` keys (smaller ones take the stable sort)."""
    dt = np.dtype(dtype)
    kind = sort_kinds.get(dt.name)
    if kind is None:
        with _sort_lock:
            kind = sort_kinds.get(dt.name)
            if kind is None:
                kind = sort_kinds[dt.name] = measure_sort_kind(dt)
    return kind


def measure_sort_kind(dtype: np.dtype) -> str:
    """The faster sort of ``dtype`` integers here, measured now (:func:`sort_kind` keeps it)."""
    rng = np.random.default_rng(0)
    runs = SORT_PROBE_N // 8
    probe = np.concatenate([np.sort(rng.integers(0, 1 << 24, runs)) << 3 | g for g in range(8)]).astype(dtype)
    best = {}
    for kind in ("stable", "quicksort"):
        times = []
        for _ in range(3):
            work = probe.copy()
            t0 = time.perf_counter()
            work.sort(kind=kind)
            times.append(time.perf_counter() - t0)
        best[kind] = min(times)
    return "stable" if best["stable"] <= best["quicksort"] else "quicksort"


def packs(numel: int, groups: int) -> bool:
    """Whether every key of ``[0, numel)`` and group of ``groups`` fit one int64 as ``key << gbits |
    group`` (:func:`merge_and_query` asks it of its largest key + 1, and merges by
    :func:`merge_wide` where they do not)."""
    gbits = max(1, (groups - 1).bit_length())
    return (max(numel - 1, 0) << gbits | (groups - 1)) < 1 << 63


def merge_and_query(
    keys_g: torch.Tensor,
    counts: list[int],
    numel: int,
    table: torch.Tensor,
    columns: list[int],
    rows: int,
    seed: int,
    values: torch.Tensor,
    *,
    workers: int = 1,
    use_numpy: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ascending keys and their decoded values.

    Args:
        keys_g: int64 keys, group after group (``counts[g]`` of group ``g``).
        counts: keys per group.
        numel: keys must lie in ``[0, numel)``.
        table, columns, rows, seed: the grouped MinMaxSketch (as for
            :func:`~gcbench.compressors.codecs.sketchml.minmaxsketch.minmax_query`).
        values: ``(groups, width)`` value of each level of each group (levels past a group's width
            are never answered: cells are checked against their group's range).
        workers: threads (CPU).
        use_numpy: sort and query with numpy (default: on the CPU), else with torch ops.

    Raises:
        CorruptPayloadError: keys out of range, not strictly increasing within a group, or a key in
            two groups.
    """
    dev = keys_g.device
    use_numpy = dev.type == "cpu" if use_numpy is None else use_numpy and dev.type == "cpu"
    n, r = keys_g.numel(), len(counts)
    gbits = max(1, (r - 1).bit_length())
    narrow = (max(numel - 1, 0) << gbits | (r - 1)) < 1 << 31
    starts = [sum(counts[:g]) for g in range(r)]
    used = [g for g in range(r) if counts[g]]
    # key ranges, one per thread: each group's list is cut at the same keys
    parts = max(1, min(workers, n // BLOCK)) if dev.type == "cpu" else 1
    bounds = [numel * p // parts for p in range(1, parts)]
    # on the CPU the per-group steps below are numpy's: each costs a fraction of a torch op's fixed cost,
    # which a small message (8 groups, a few passes each) pays many times
    keys_any = keys_g.numpy() if use_numpy else keys_g
    with single_thread(dev):
        cuts = {}
        for g in used:
            part = keys_any[starts[g] : starts[g] + counts[g]]
            if int(part[0]) < 0 or int(part[-1]) >= numel:
                raise CorruptPayloadError(_UNSORTED)
            if not bounds:
                at = []
            elif use_numpy:
                at = np.searchsorted(part, bounds).tolist()
            else:
                at = torch.searchsorted(part, torch.tensor(bounds, dtype=torch.int64, device=dev)).tolist()
            # each piece is checked below, the pairs that straddle a cut here: with both, the whole
            # list ascends, whatever a binary search makes of a list that does not
            if any(0 < c < counts[g] and int(part[c - 1]) >= int(part[c]) for c in at):
                raise CorruptPayloadError(_UNSORTED)
            cuts[g] = [0] + at + [counts[g]]
        # each group ascends (checked below before any shift), so its last key is its largest
        if not packs(max(int(keys_any[starts[g] + counts[g] - 1]) for g in used) + 1, r):
            return merge_wide(keys_g, counts, numel, table, columns, rows, seed, values)
        sizes = [sum(cuts[g][p + 1] - cuts[g][p] for g in used) for p in range(parts)]
        packed = torch.empty(n, dtype=torch.int32 if narrow else torch.int64, device=dev)
        packed_any = packed.numpy() if use_numpy else packed
        offsets = [sum(sizes[:p]) for p in range(parts)]
        kind = sort_kind(packed_any.dtype) if use_numpy and n >= SORT_PROBE_MIN else "stable"

        def pack(p: int) -> None:
            at = offsets[p]
            for g in used:
                lo, hi = cuts[g][p], cuts[g][p + 1]
                if hi == lo:
                    continue
                part = keys_any[starts[g] + lo : starts[g] + hi]
                if hi - lo > 1 and _not_increasing(part):
                    raise CorruptPayloadError(_UNSORTED)
                dst = packed_any[at : at + hi - lo]
                if use_numpy:  # keys in [0, numel): the packed integers fit dst's type (``narrow``)
                    np.left_shift(part, gbits, out=dst, casting="unsafe")
                else:
                    dst.copy_(part)
                    dst <<= gbits
                dst += g
                at += hi - lo
            block = packed[offsets[p] : offsets[p] + sizes[p]]
            if use_numpy:
                # in place, releasing the GIL, by the sort that is faster here (:func:`sort_kind`);
                # distinct integers, so the same array either way
                block.numpy().sort(kind=kind)
            else:
                block.copy_(torch.sort(block).values)

        map_blocks(pack, range(parts), dev, workers)
        return _query_sorted(packed, gbits, counts, table, columns, rows, seed, values, workers, use_numpy)


def _query_sorted(
    packed: torch.Tensor,
    gbits: int,
    counts: list[int],
    table: torch.Tensor,
    columns: list[int],
    rows: int,
    seed: int,
    values: torch.Tensor,
    workers: int,
    use_numpy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys (int64) and values of the sorted packed integers, block by block: numpy on the CPU
    (its int64 products and small-table gathers are vectorised where torch's are not, and each
    call releases the GIL), torch elsewhere."""
    dev, n = packed.device, packed.numel()
    base = table_layout(columns, rows)
    width = values.shape[1]
    params = hash_params(seed, rows)
    keys = torch.empty(n, dtype=torch.int64, device=dev)
    out = torch.empty(n, dtype=values.dtype, device=dev)
    if not use_numpy:
        _query_torch(packed, gbits, table, columns, base, params, values, keys, out)
        return keys, out
    # uint64 arithmetic: products wrap modulo 2^64 and ">> 32" is logical, so the high 32 bits
    # need no mask; the same values as the signed steps of minmax_query
    cols_np = np.asarray(columns, dtype=np.uint64)
    first_np = np.asarray(base, dtype=np.uint64)  # row 0's first cell; row i adds i * t
    a_np, b_np = params_u64(params)
    params_np = list(zip(a_np, b_np))
    table_np, values_np = table.numpy(), values.reshape(-1).numpy()
    packed_np, keys_np, out_np = packed.numpy(), keys.numpy(), out.numpy()
    blocks = list(range(0, n, BLOCK))
    gmask = (1 << gbits) - 1
    bad: list[int] = []
    if use_native(SKETCHML_C):  # one C call per block (the same values), else the numpy passes below
        table_c = table_np if table_np.dtype in (np.uint8, np.int32) else table_np.astype(np.int32)

        def query_c(s: int) -> None:
            e = min(n, s + BLOCK)
            vidx = np.empty(e - s, dtype=np.int64)
            if query_sorted_c(packed_np, s, e, gbits, cols_np, first_np, a_np, b_np, table_c, width, values_np.size,
                              keys_np, vidx):
                np.take(values_np, vidx, out=out_np[s:e], mode="clip")
            else:
                bad.append(s)

        map_blocks(query_c, blocks, dev, workers)
        if bad:
            raise CorruptPayloadError("SketchML key present in two groups")
        return keys, out

    def query(s: int) -> None:
        e = min(n, s + BLOCK)
        p, k = packed_np[s:e], keys_np[s:e]
        np.right_shift(p, gbits, out=k)
        # a key sent in two groups is the only way to repeat one (each group's keys ascend)
        if (k[1:] <= k[:-1]).any() or (s and int(p[0]) >> gbits <= int(packed_np[s - 1]) >> gbits):
            bad.append(s)
            return
        grp = np.empty(e - s, dtype=np.intp)
        np.bitwise_and(p, gmask, out=grp)
        t = np.take(cols_np, grp, mode="clip")
        cell = np.take(first_np, grp, mode="clip")
        ku = k.view(np.uint64)
        h = np.empty_like(ku)
        hi = h.view(np.int64)
        level = got = None
        for row, (a, b) in enumerate(params_np):
            if row:
                cell += t
            np.multiply(ku, a, out=h)
            h += b
            h >>= np.uint64(32)
            h *= t
            h >>= np.uint64(32)
            h += cell
            if level is None:
                level = np.take(table_np, hi, mode="clip")
            else:
                got = np.take(table_np, hi, out=got, mode="clip")
                np.maximum(level, got, out=level)
        grp *= width
        grp += level
        np.take(values_np, grp, out=out_np[s:e], mode="clip")

    map_blocks(query, blocks, dev, workers)
    if bad:
        raise CorruptPayloadError("SketchML key present in two groups")
    return keys, out


def _query_torch(packed, gbits, table, columns, base, params, values, keys, out) -> None:
    """:func:`_query_sorted` in torch ops, all keys at once (accelerators)."""
    keys.copy_(packed)
    grp = keys & ((1 << gbits) - 1)
    keys >>= gbits
    if _not_increasing(keys):
        raise CorruptPayloadError("SketchML key present in two groups")
    _lookup_torch(keys, grp, table, columns, base, params, values, out)


def merge_wide(
    keys_g: torch.Tensor,
    counts: list[int],
    numel: int,
    table: torch.Tensor,
    columns: list[int],
    rows: int,
    seed: int,
    values: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`merge_and_query` for key ranges whose packed integers would not fit an int64: each
    group's list checked, all keys sorted (stable) with their groups gathered alongside, then the
    query in torch ops. Memory: the sort's keys and order and the gathered groups, three int64 per key."""
    dev = keys_g.device
    start = 0
    for c in counts:
        part = keys_g[start : start + c]
        start += c
        if c and (int(part[0]) < 0 or int(part[-1]) >= numel or (c > 1 and _not_increasing(part))):
            raise CorruptPayloadError(_UNSORTED)
    group_of = torch.repeat_interleave(
        torch.arange(len(counts), dtype=torch.int64, device=dev), torch.tensor(counts, dtype=torch.int64, device=dev)
    )
    keys, order = torch.sort(keys_g, stable=True)
    grp = group_of.index_select(0, order)
    del order, group_of
    if keys.numel() > 1 and _not_increasing(keys):
        raise CorruptPayloadError("SketchML key present in two groups")
    out = torch.empty(keys.numel(), dtype=values.dtype, device=dev)
    _lookup_torch(keys, grp, table, columns, table_layout(columns, rows), hash_params(seed, rows), values, out)
    return keys, out


def _lookup_torch(keys, grp, table, columns, base, params, values, out) -> None:
    """Each ascending int64 key's value from its group's MinMaxSketch into ``out``, in torch ops
    (``grp``: each key's group, int64; consumed)."""
    dev = keys.device
    t = torch.tensor(columns, dtype=torch.int64, device=dev).index_select(0, grp)
    cell = torch.tensor(base, dtype=torch.int64, device=dev).index_select(0, grp)
    level = None
    for row, (a, b) in enumerate(params):
        if row:
            cell += t
        h = torch.add(torch.tensor(b, dtype=torch.int64, device=dev), keys, alpha=a)  # wraps modulo 2^64
        h >>= 32
        h &= _MASK32
        h *= t
        h >>= 32
        h += cell
        got = table.index_select(0, h)
        level = got if level is None else torch.maximum(level, got)
    grp *= values.shape[1]
    grp += level
    torch.index_select(values.reshape(-1), 0, grp, out=out)
