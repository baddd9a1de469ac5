"""SketchML's MinMaxSketch query over sorted packed keys in C (:file:`c/sketchml.c`, built by
:mod:`~gcbench.compressors.kernels.native`): the decoder's last pass, one C call per block of keys
instead of a dozen numpy passes with their temporaries
(:func:`~gcbench.compressors.codecs.sketchml.merge.merge_and_query`, whose numpy code stays the
reference and gives the same values); the encoder's grouping of keys by bucket group, one
scatter pass (:func:`group_scatter_c`; the torch reference is
:func:`~gcbench.compressors.codecs.sketchml.groups.group_keys`' chunked stable sort); and its
MinMaxSketch insert, one pass per group and row (:func:`minmax_insert_c`; the torch reference is
:func:`~gcbench.compressors.codecs.sketchml.minmaxsketch.minmax_insert`' scatters); and the bucket of
each value of a message too small for the bucketing table, a branch-free binary search
(:func:`bucketize_c`; the reference is ``torch.searchsorted``); and, from its own source
(:file:`c/delta_binary.c`), the decoder's delta-binary keys in one pass (:func:`delta_decode_c`; the
torch reference is :func:`~gcbench.compressors.codecs.sketchml.delta_binary.delta_binary_decode`)."""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from ..wire.bitpack import packed_nbytes
from . import native

#: The C source of the query (:file:`c/sketchml.c`).
SKETCHML_C = "sketchml"
_P = ctypes.c_void_p
_VARIANTS = {(p, t): f"gcbench_sketchml_query_p{p}_{t}" for p in ("32", "64") for t in ("u8", "i32")}
#: The bucketing's C function of each (values' dtype, int32 result).
_BUCKETIZE = {(dt, i32): f"gcbench_sketchml_bucketize_{v}_{'i32' if i32 else 'i64'}"
              for dt, v in ((torch.float32, "f32"), (torch.float64, "f64")) for i32 in (True, False)}


#: ctypes signatures of :file:`c/sketchml.c`: each variant of the query, and the grouping's scatter.
_SIGNATURES = {
    **{name: ([_P, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint, _P, _P, ctypes.c_size_t, _P, _P, ctypes.c_uint, _P,
               ctypes.c_size_t, ctypes.c_int64, ctypes.c_size_t, _P, _P], ctypes.c_int)
       for name in _VARIANTS.values()},
    "gcbench_sketchml_group": ([_P, _P, _P, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint, _P, ctypes.c_size_t, _P,
                                _P], ctypes.c_int),
    "gcbench_sketchml_insert": ([_P, _P, ctypes.c_size_t, _P, _P, _P, ctypes.c_size_t, ctypes.c_size_t, _P, _P,
                                 ctypes.c_uint, _P, ctypes.c_size_t], ctypes.c_int),
    **{name: ([_P, ctypes.c_size_t, _P, ctypes.c_size_t, _P], None) for name in _BUCKETIZE.values()},
}
_MASK64 = (1 << 64) - 1
#: The C source of the delta-binary key decoder (:file:`c/delta_binary.c`).
DELTA_BINARY_C = "delta_binary"
#: ctypes signature of :file:`c/delta_binary.c`'s decoder.
_DELTA_SIGNATURES = {
    "gcbench_delta_binary_decode": ([_P, ctypes.c_size_t, ctypes.c_size_t, _P, ctypes.c_size_t, ctypes.c_int, _P],
                                    ctypes.c_int),
}


def _lib() -> ctypes.CDLL:
    return native.typed(SKETCHML_C, _SIGNATURES)


def params_u64(params: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The rows' signed int64 hash parameters ``(a, b)`` as two uint64 arrays (the same bits): the
    form the C kernels and the numpy query take, whose products wrap modulo 2^64."""
    a_np = np.array([a & _MASK64 for a, _ in params], dtype=np.uint64)
    b_np = np.array([b & _MASK64 for _, b in params], dtype=np.uint64)
    return a_np, b_np


def query_sorted_c(
    packed: np.ndarray, s: int, e: int, gbits: int, cols: np.ndarray, first: np.ndarray, a: np.ndarray,
    b: np.ndarray, table: np.ndarray, width: int, values_n: int, keys: np.ndarray, vidx: np.ndarray,
) -> bool:
    """Block ``[s, e)`` of the sorted packed integers ``packed`` (int32 or int64, ``key << gbits |
    group``): each key into ``keys[s:e]`` and the index of its value in the flat ``(group, level)``
    table of ``values_n`` entries into ``vidx[:e - s]`` (int64); ``cols``, ``first``: each group's
    columns and first cell, ``a``, ``b``: each row's hash parameters (uint64); ``table``: the cells
    (uint8 or int32). Returns False when the keys do not ascend strictly (also against the key
    before the block), the reference's check.

    Raises:
        ValueError: arrays of other types, layouts or sizes.
    """
    arrays = (packed, cols, first, a, b, table, keys, vidx)
    if (packed.dtype not in (np.int32, np.int64) or table.dtype not in (np.uint8, np.int32)
            or not all(x.flags.c_contiguous for x in arrays)
            or not all(x.dtype == np.uint64 for x in (cols, first, a, b))
            or keys.dtype != np.int64 or vidx.dtype != np.int64 or not 0 <= s <= e <= packed.size <= keys.size
            or vidx.size < e - s or cols.size != first.size or not cols.size or a.size != b.size or not table.size
            or values_n < 1 or not 0 <= gbits < 32):
        raise ValueError("query_sorted_c: arrays of other types, layouts or sizes")
    fn = getattr(_lib(), _VARIANTS[(str(packed.dtype.itemsize * 8), "u8" if table.dtype == np.uint8 else "i32")])
    native.record_call(SKETCHML_C)
    bad = fn(packed.ctypes.data, s, e, gbits, cols.ctypes.data, first.ctypes.data, cols.size, a.ctypes.data,
             b.ctypes.data, a.size, table.ctypes.data, table.size, width, values_n, keys[s:].ctypes.data, vidx.ctypes.data)
    return not bad


def group_scatter_c(
    group: torch.Tensor, keys: torch.Tensor, levels: torch.Tensor, lo: int, hi: int, fill: list[int],
    keys_g: torch.Tensor, levels_g: torch.Tensor,
) -> list[int]:
    """Keys ``[lo, hi)`` and their levels, each to its group's next free slot of ``keys_g`` /
    ``levels_g`` in input order (a stable counting sort's scatter): ``fill[g]`` is group ``g``'s next
    slot; returns the slots after the range. ``group`` uint8 (each below ``len(fill)``), ``keys`` and
    ``keys_g`` int64, ``levels`` and ``levels_g`` int16, all contiguous on the CPU.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes; a group at or above
            ``len(fill)``, or a slot outside the outputs (the outputs then hold what was written).
    """
    r, n = len(fill), keys_g.numel()
    if (group.dtype != torch.uint8 or keys.dtype != torch.int64 or keys_g.dtype != torch.int64
            or levels.dtype != torch.int16 or levels_g.dtype != torch.int16 or not r or levels_g.numel() != n
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (group, keys, levels, keys_g, levels_g))
            or not (0 <= lo <= hi <= min(group.numel(), keys.numel(), levels.numel()))):
        raise ValueError("group_scatter_c: tensors of other dtypes, devices, layouts or sizes")
    slots = np.asarray(fill, dtype=np.int64)
    native.record_call(SKETCHML_C)
    if _lib().gcbench_sketchml_group(group.data_ptr(), keys.data_ptr(), levels.data_ptr(), lo, hi, r,
                                     slots.ctypes.data, n, keys_g.data_ptr(), levels_g.data_ptr()):
        raise ValueError(f"group_scatter_c: a group at or above {r}, or a slot outside the {n} outputs")
    return slots.tolist()


def minmax_insert_c(
    keys: torch.Tensor, levels: torch.Tensor, start: int, counts: list[int], columns: list[int], first: list[int],
    groups: range, params: list[tuple[int, int]], table: torch.Tensor,
) -> None:
    """Insert the keys of ``groups`` (group ``g``'s ``counts[g]`` keys follow the earlier groups' from
    ``keys[start]``) into grouped MinMaxSketches: in each row ``i`` with hash ``params[i]`` (signed
    int64 ``(a, b)``), cell ``first[g] + i * columns[g] + h(key)`` of the flat ``table`` keeps the
    smallest level. ``keys`` int64, ``levels`` and ``table`` int16, all contiguous on the CPU. Groups own
    disjoint cells, so calls for different groups may run at once.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes; a group with keys and no
            columns, or cells outside the table (the table then holds what was inserted).
    """
    ng = len(counts)
    in_range = 0 <= groups.start <= groups.stop <= ng and groups.step == 1
    end = start + sum(counts[g] for g in groups) if in_range else -1
    if (keys.dtype != torch.int64 or levels.dtype != torch.int16 or table.dtype != torch.int16
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (keys, levels, table))
            or len(columns) != ng or len(first) != ng or not in_range
            or min(counts, default=0) < 0 or not 0 <= start <= end <= min(keys.numel(), levels.numel())):
        raise ValueError("minmax_insert_c: tensors of other dtypes, devices, layouts or sizes")
    counts_np = np.asarray(counts, dtype=np.int64)
    cols_np, first_np = np.asarray(columns, dtype=np.uint64), np.asarray(first, dtype=np.uint64)
    a_np, b_np = params_u64(params)
    native.record_call(SKETCHML_C)
    if _lib().gcbench_sketchml_insert(keys.data_ptr(), levels.data_ptr(), start, counts_np.ctypes.data, cols_np.ctypes.data,
                                      first_np.ctypes.data, groups.start, groups.stop, a_np.ctypes.data, b_np.ctypes.data,
                                      len(params), table.data_ptr(), table.numel()):
        raise ValueError("minmax_insert_c: a group with keys and no columns, or cells outside the table")


def bucketize_c(values: torch.Tensor, boundaries: torch.Tensor, *, out_int32: bool = False) -> torch.Tensor:
    """``torch.searchsorted(boundaries, values, right=True, out_int32=out_int32)`` in C, for values
    that are not NaN: how many of the sorted ``boundaries`` are ``<= value``. Both float32 or both
    float64, 1-D, contiguous, on the CPU.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes.
    """
    name = _BUCKETIZE.get((values.dtype, bool(out_int32)))
    if (name is None or boundaries.dtype != values.dtype or values.dim() != 1 or boundaries.dim() != 1
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (values, boundaries))):
        raise ValueError("bucketize_c: tensors of other dtypes, devices, layouts or sizes")
    out = torch.empty(values.numel(), dtype=torch.int32 if out_int32 else torch.int64)
    if values.numel():
        fn = getattr(_lib(), name)
        native.record_call(SKETCHML_C)
        fn(boundaries.data_ptr(), boundaries.numel(), values.data_ptr(), values.numel(), out.data_ptr())
    return out


def delta_decode_c(data: torch.Tensor, nflag: int, lengths: list[int], no_three_bytes: bool, out: torch.Tensor) -> bool:
    """The keys of a delta-binary stream ``data`` (uint8: ``nflag`` flag bytes, then the deltas)
    whose segments hold ``lengths`` keys, each segment's running sum from 0, into ``out`` (int64,
    ``sum(lengths)`` values); ``no_three_bytes``: flag 10 (a three-byte delta) is never written (the
    codec's ``widths="124"``), so a stream holding one is left to the reference. Returns False, ``out`` then holding
    unspecified values, where the stream is not one this pass decodes alone (a bad or short stream,
    or one with escaped deltas): the reference decides it. 1-D contiguous tensors on the CPU.

    Raises:
        ValueError: tensors of other dtypes, devices, layouts or sizes, or ``no_three_bytes`` not a bool.
    """
    n = sum(lengths)
    if (data.dtype != torch.uint8 or out.dtype != torch.int64 or data.dim() != 1 or out.dim() != 1
            or not all(t.device.type == "cpu" and t.is_contiguous() for t in (data, out))
            or out.numel() != n or min(lengths, default=0) < 0 or nflag != packed_nbytes(n, 2)
            or data.numel() < nflag or not isinstance(no_three_bytes, bool)):
        raise ValueError("delta_decode_c: tensors of other dtypes, devices, layouts or sizes, "
                         "or no_three_bytes not a bool")
    if not n:
        return data.numel() == nflag
    lengths_np = np.asarray(lengths, dtype=np.int64)
    lib = native.typed(DELTA_BINARY_C, _DELTA_SIGNATURES)
    native.record_call(DELTA_BINARY_C)
    return not lib.gcbench_delta_binary_decode(data.data_ptr(), data.numel(), nflag, lengths_np.ctypes.data,
                                               lengths_np.size, int(no_three_bytes), out.data_ptr())
