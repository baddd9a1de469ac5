"""MinMaxSketch: approximate storage of one small integer per key (a lossy stage of SketchML).

Jiang et al., "SketchML", SIGMOD 2018, Section 3.3. A MinMaxSketch is an ``s x t`` table (``s`` rows,
each with its own hash of the key onto ``t`` columns). SketchML stores a quantized gradient value's
bucket index in it, keyed by the gradient key:

* **Insert (Min).** Each row's cell keeps the *smallest* level inserted into it (the paper's "bucket
  index closest to the minimum bucket", i.e. to zero, after the separation of signs).
* **Query (Max).** The answer is the *largest* of the key's ``s`` cells.

Every cell a key hashes to holds the minimum over the keys sharing it, itself included, so each cell
is <= the key's own level and so is their maximum: a query never *over*-estimates, and a decoded
gradient is never larger in magnitude than its bucket value (the paper's "underestimated error").

Levels here are the *distance to zero* within a group of buckets (0 = the bucket nearest zero),
so one "amin"/"amax" rule serves both signs; :mod:`~gcbench.compressors.codecs.sketchml.codec` maps bucket indexes to levels.

Grouped sketches (the paper's r groups; Section 3.3, "Grouped MinMaxSketch") live in one flat
table: group ``g`` owns ``rows * columns[g]`` consecutive cells, row-major. Insert and query are
vectorised over all keys of all groups at once (Python loops over the ``s`` rows and, for the
per-group table width, the ``r`` groups only): ``scatter_reduce_(..., "amin")`` inserts (all groups at
once for a small message, else group by group, each group's cell indexes in a buffer of its size), gathers and a running
``maximum`` query (the rows share one int64 buffer of cell indexes). Where C kernels run on the CPU the insert is one
pass per group and row (:func:`~gcbench.compressors.kernels.sketchml.minmax_insert_c`; the same table).

Hash (row ``i``): ``h_i(k) = (((a_i * k + b_i) mod 2^64) >> 32) * t >> 32`` - a multiply-add-shift
hash to 32 bits (Dietzfelbinger) followed by Lemire's multiply-shift range reduction onto ``t``
columns; ``a_i`` odd and ``b_i`` come from SplitMix64 of the ``seed``, so both ends of the wire
derive the same functions from the seed in the payload header. int64 products wrap modulo 2^64 in
torch on CPU and CUDA, which is the arithmetic the hash needs.
"""

from __future__ import annotations

import torch

from ...kernels.native import use_native
from ...kernels.sketchml import SKETCHML_C, minmax_insert_c
from ...parallel.cpu_pool import caller_workers, map_blocks
from ...parallel.threads import single_thread

#: Up to this many keys, :func:`minmax_insert` computes the cell indexes of every group at once (one int64
#: buffer of at most 512 KiB, one scatter per row); above, group by group on the caller's threads, each in
#: a buffer of its group's size (the encoder's peak memory). The table is the same (a cell's minimum does
#: not depend on the order of the inserts); a small message pays each pass's fixed cost once, not per group
#: (SketchML's 8 groups x 2 rows: 16 scatters and their hashing, and a thread hand-off each on 2 threads).
ONE_BUFFER_MAX = 1 << 16
_MASK64 = (1 << 64) - 1
_MASK32 = 0xFFFFFFFF
#: Columns per table are limited so that ``hash32 * t`` fits in int64.
MAX_COLUMNS = (1 << 31) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def hash_params(seed: int, rows: int) -> list[tuple[int, int]]:
    """``(a, b)`` of each row's hash as signed int64 values (``a`` odd), derived from ``seed``."""
    out = []
    state = seed & _MASK64
    for _ in range(rows):
        state = _splitmix64(state)
        a = state | 1
        state = _splitmix64(state)
        out.append((_signed(a), _signed(state)))
    return out


def hash_columns(keys: torch.Tensor, a: int, b: int, columns: int) -> torch.Tensor:
    """Column ``h(k) in [0, columns)`` of each int64 key for the hash ``(a, b)`` (vectorised).

    Args:
        keys: int64 keys.
        a, b: the row's hash parameters (:func:`hash_params`).
        columns: the table width, in 1..MAX_COLUMNS.
    """
    h = keys * a  # wraps modulo 2^64
    h += b
    h >>= 32  # arithmetic shift; the mask keeps the high 32 bits as a non-negative int64
    h &= _MASK32
    h *= columns
    h >>= 32
    return h


def table_layout(columns: list[int], rows: int) -> list[int]:
    """First cell of each group's table in the flat array."""
    out, acc = [], 0
    for t in columns:
        out.append(acc)
        acc += rows * t
    return out


def row_cells(
    keys: torch.Tensor,
    counts: list[int],
    columns: list[int],
    rows: int,
    row: int,
    a: int,
    b: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Flat cell index of every key (group-major) in hash row ``row``: ``base_g + row t_g + h(k)``.

    Written into ``out`` (int64, ``len(keys)``; allocated if None) with in-place passes only, so
    the rows of one sketch share one buffer: ``torch.add(b, keys, alpha=a)`` (the multiply-add
    wraps modulo 2^64 as ``keys * a + b`` does), ``>> 32`` and the 32-bit mask, then per group
    ``h t + off 2^32`` and one final ``>> 32`` for all keys (``(h t + off 2^32) >> 32 = ((h t) >> 32)
    + off`` exactly, ``off 2^32`` being a multiple of 2^32) while those sums fit in int64, else
    three steps per group.
    """
    dev = keys.device
    h = torch.add(torch.tensor(b, dtype=torch.int64, device=dev), keys, alpha=a, out=out)
    h >>= 32  # arithmetic shift; the mask keeps the high 32 bits as a non-negative int64
    h &= _MASK32
    base = table_layout(columns, rows)
    spans, start = [], 0
    for g, (c, t) in enumerate(zip(counts, columns)):
        if c:
            if t < 1:
                raise ValueError(f"group {g} holds {c} keys but has no columns")
            spans.append((start, c, t, base[g] + row * t))
        start += c
    if all(t + off < 1 << 31 for _, _, t, off in spans):  # (2^32 - 1) t + off 2^32 < 2^63
        for start, c, t, off in spans:  # one pass per group, one shift for all
            part = h[start : start + c]
            torch.add(torch.tensor(off << 32, dtype=torch.int64, device=dev), part, alpha=t, out=part)
        h >>= 32
    else:  # huge tables: three steps per group
        for start, c, t, off in spans:
            part = h[start : start + c]
            part *= t
            part >>= 32
            part += off
    return h


def minmax_insert(
    keys: torch.Tensor,
    levels: torch.Tensor,
    counts: list[int],
    columns: list[int],
    rows: int,
    seed: int,
    fill: list[int],
    *,
    workers: int | None = None,
) -> torch.Tensor:
    """Build grouped MinMaxSketches: every cell keeps the minimum level hashed to it.

    Args:
        keys: int64 keys, group after group (``counts[g]`` keys of group g; unique within a group).
        levels: level of each key (0 = nearest zero), at most ``fill`` of its group; its integer
            dtype (int32 is faster than int64) is the table's dtype.
        counts: keys per group.
        columns: table width ``t`` of each group (0 for a group without keys).
        rows: hash rows ``s``.
        seed: hash seed.
        fill: per group, the value of a cell no key hashes to (the group's largest level).
        workers: threads for the groups (:mod:`~gcbench.compressors.parallel.cpu_pool`; default ``torch.get_num_threads()``).

    Returns:
        The flat table of ``rows * sum(columns)`` cells (group after group, each row-major).
    """
    sizes = torch.tensor([rows * t for t in columns], device=keys.device)
    table = torch.repeat_interleave(torch.tensor(fill, dtype=levels.dtype, device=keys.device), sizes)
    # Above ONE_BUFFER_MAX keys, one group and one row at a time (min is order-free, so the table is
    # the same as one scatter of all keys and rows); a group's int64 cell indexes live in a buffer of
    # its own size, not of all keys (the encoder's peak memory). Groups own disjoint table cells, so
    # they run on the caller's threads at once (.cpu_pool) with the same table.
    params = hash_params(seed, rows)
    starts = [sum(counts[:g]) for g in range(len(counts))]
    if (keys.device.type == "cpu" and levels.dtype == torch.int16 and keys.is_contiguous() and levels.is_contiguous()
            and use_native(SKETCHML_C)):  # C: one pass per group and row, the same table
        first = table_layout(columns, rows)
        if sum(counts) <= ONE_BUFFER_MAX:
            minmax_insert_c(keys, levels, 0, counts, columns, first, range(len(counts)), params, table)
        else:
            map_blocks(lambda g: minmax_insert_c(keys, levels, starts[g], counts, columns, first, range(g, g + 1), params,
                                                 table), [g for g, c in enumerate(counts) if c], keys.device,
                       caller_workers(workers))
        return table

    def insert_span(start: int, span_counts: list[int]) -> None:
        """Insert the keys of ``span_counts`` (``counts`` with the groups outside the span at 0), from ``start``."""
        c = sum(span_counts)
        part_keys, part_levels = keys[start : start + c], levels[start : start + c]
        cells = torch.empty(c, dtype=torch.int64, device=keys.device)
        for i, (a, b) in enumerate(params):
            row_cells(part_keys, span_counts, columns, rows, i, a, b, out=cells)
            table.scatter_reduce_(0, cells, part_levels, reduce="amin", include_self=True)

    if sum(counts) <= ONE_BUFFER_MAX:  # every group's cell indexes in one buffer: one scatter per row
        insert_span(0, counts)
        return table

    def insert(g: int) -> None:
        only = [0] * len(counts)
        only[g] = counts[g]
        insert_span(starts[g], only)

    workers = caller_workers(workers)
    with single_thread(keys.device):  # rows x groups passes of a group's size each (see .threads)
        map_blocks(insert, [g for g, c in enumerate(counts) if c], keys.device, workers)
    return table


def minmax_query(
    keys: torch.Tensor, counts: list[int], table: torch.Tensor, columns: list[int], rows: int, seed: int
) -> torch.Tensor:
    """Query grouped MinMaxSketches: the maximum over each key's ``rows`` cells (never above its level).

    ``keys``, ``counts``, ``columns``, ``rows`` and ``seed`` as given to :func:`minmax_insert`.
    """
    if not rows:
        return torch.zeros_like(keys)
    cells = torch.empty(keys.numel(), dtype=torch.int64, device=keys.device)
    out = got = None
    for i, (a, b) in enumerate(hash_params(seed, rows)):
        row_cells(keys, counts, columns, rows, i, a, b, out=cells)
        if out is None:
            out = table.index_select(0, cells)
        else:
            got = torch.index_select(table, 0, cells, out=got)
            torch.maximum(out, got, out=out)
    return out
