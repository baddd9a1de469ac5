"""SketchML decode (merge of the groups' key lists, MinMaxSketch query in sorted order) against a
reference decode: each group's keys queried group by group (``minmax_query``), levels mapped to
bucket values, and a stable sort of the keys carrying the values along. Keys and values must be
equal bit for bit, for any thread count, block size, sort/query engine (numpy, its C twin in
compiled mode, torch) and packed width."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
import torch
from gcbench.compressors import CorruptPayloadError
from gcbench.compressors.codecs.sketchml import codec as codec_module
from gcbench.compressors.codecs.sketchml import merge
from gcbench.compressors.codecs.sketchml.codec import SketchML
from gcbench.compressors.codecs.sketchml.delta_binary import delta_binary_decode
from gcbench.compressors.codecs.sketchml.minmaxsketch import minmax_query
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels.core import forced
from gcbench.compressors.kernels.sketchml import SKETCHML_C
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_decode(codec: SketchML, sections, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode as it was first written: query per group, values, then one stable sort."""
    meta, bv, key_bytes, tables = sections
    r_neg, *counts = meta.tolist()
    lay = codec._layout(r_neg)
    cols = codec._columns(counts)
    bits = codec._cell_bits(lay.width)
    table = codec._unpack_tables(tables, cols, bits, codec._table_nbytes(cols, bits))
    keys_g = delta_binary_decode(key_bytes, sum(counts), torch.tensor(counts), codec.key_widths)
    index = minmax_query(keys_g, counts, table, cols, codec.rows, codec.seed).to(torch.int64)
    start = 0
    for c, b, st_ in zip(counts, lay.base, lay.step):
        index[start : start + c].mul_(st_).add_(b)
        start += c
    keys, order = torch.sort(keys_g, stable=True)
    return keys, bv[index][order]


def _input(numel: int, n: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    keys = torch.randperm(numel, generator=g)[:n].sort().values if numel < 1 << 22 else torch.unique(
        torch.randint(0, numel, (n,), generator=g)
    )
    vals = (torch.randn(keys.numel(), generator=g, dtype=torch.float64) * 1e-2).to(dtype)
    return torch.sparse_coo_tensor(keys[None], vals, (numel,), is_coalesced=True, check_invariants=True)


@settings(max_examples=25, deadline=None)
@given(
    numel=st.sampled_from([50, 1000, 70_000, 1 << 30]),
    density=st.floats(0.01, 1.0),
    groups=st.sampled_from([2, 3, 8, 16]),
    rows=st.integers(1, 4),
    columns=st.sampled_from([0.05, 0.2, 1.0]),
    cells=st.sampled_from(["bytes", "bits"]),
    buckets=st.sampled_from([16, 256, 1024]),
    key_widths=st.sampled_from(["1234", "124"]),
    seed=st.integers(0, 2**20),
    block=st.sampled_from([16, 1 << 15]),
    workers=st.integers(1, 3),
    use_numpy=st.booleans(),
    mode=st.sampled_from(["eager", "compiled"]),
    sort=st.sampled_from(["stable", "quicksort"]),
)
def test_decode_equals_the_reference_bit_for_bit(
    numel, density, groups, rows, columns, cells, buckets, key_widths, seed, block, workers, use_numpy, mode, sort
):
    groups = min(groups, buckets)
    n = max(1, min(numel, int(density * min(numel, 20_000))))
    x = _input(numel, n, seed, torch.float64 if seed % 5 == 0 else torch.float32)
    codec = SketchML(sketch="exact", groups=groups, rows=rows, columns=columns, cells=cells, buckets=buckets,
                     key_widths=key_widths, seed=seed)
    p = codec.encode(x)
    want_keys, want_values = reference_decode(codec, p.sections, numel)
    def engine(*args, **kw):
        return merge.merge_and_query(*args, **{**kw, "workers": workers, "use_numpy": use_numpy})

    ran_c = native.call_count(SKETCHML_C)
    kinds = {"int32": sort, "int64": sort}  # whichever sort this machine would pick (merge.sort_kind)
    with patch.object(merge, "BLOCK", block), patch.object(codec_module, "merge_and_query", engine), forced(mode), \
            patch.object(merge, "sort_kinds", kinds), patch.object(merge, "SORT_PROBE_MIN", 0):
        keys, values = codec._decode_sparse(p.sections, numel)
    assert (native.call_count(SKETCHML_C) > ran_c) == (mode == "compiled" and use_numpy)  # the C query ran
    assert torch.equal(keys, want_keys)
    assert values.dtype == want_values.dtype and torch.equal(values, want_values)
    # and through the public decode
    out = codec.decode(p)
    assert torch.equal(out.indices()[0], want_keys) and torch.equal(out.values(), want_values.to(out.dtype))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("use_numpy", [True, False])
@pytest.mark.parametrize("block", [4, 1 << 15])
def test_a_key_in_two_groups_is_refused_at_any_block_boundary(use_numpy, block, mode, monkeypatch):
    """Key lists that are each ascending but share a key: refused whether the repeat falls inside a
    query block or across two (and whichever thread range holds it), by numpy, C and torch."""
    monkeypatch.setattr(merge, "BLOCK", block)
    keys_g = torch.tensor([1, 3, 5, 7, 9, 11, 2, 4, 7, 10])  # 7 in both groups
    counts = [6, 4]
    table = torch.zeros(2 * 2 * 4, dtype=torch.uint8)  # 2 groups x 2 rows x 4 columns
    values = torch.zeros(2, 1)
    ran_c = native.call_count(SKETCHML_C)
    with forced(mode):
        with pytest.raises(CorruptPayloadError, match="two groups"):
            merge.merge_and_query(keys_g, counts, 12, table, [4, 4], 2, 0, values, workers=2, use_numpy=use_numpy)
        ok = torch.tensor([1, 3, 5, 8, 9, 11, 2, 4, 7, 10])
        keys, _ = merge.merge_and_query(ok, counts, 12, table, [4, 4], 2, 0, values, workers=2, use_numpy=use_numpy)
    assert keys.tolist() == sorted(ok.tolist())
    assert (native.call_count(SKETCHML_C) > ran_c) == (mode == "compiled" and use_numpy)


@pytest.mark.parametrize("bad", [[3, 2, 5], [-1, 2, 5], [1, 2, 12], [1, 1, 5]])
def test_keys_out_of_range_or_not_increasing_in_a_group_are_refused(bad):
    table = torch.zeros(4, dtype=torch.uint8)
    with pytest.raises(CorruptPayloadError, match="strictly increasing"):
        merge.merge_and_query(torch.tensor(bad), [3], 12, table, [4], 1, 0, torch.zeros(1, 1))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 60), at=st.integers(0, 10_000), dup=st.booleans(), workers=st.integers(1, 3),
       block=st.sampled_from([1, 2, 5]), use_numpy=st.booleans())
def test_a_group_whose_keys_do_not_ascend_is_refused_wherever_the_key_ranges_are_cut(
    n, at, dup, workers, block, use_numpy
):
    """One pair out of order (or repeated) anywhere in a group's list: refused, also when the list is
    cut into key ranges for the threads right at that pair (each piece ascends on its own)."""
    keys = list(range(0, 3 * n, 3))
    i = at % (n - 1)
    if dup:
        keys[i + 1] = keys[i]
    else:
        keys[i], keys[i + 1] = keys[i + 1], keys[i]
    table = torch.zeros(4, dtype=torch.uint8)
    with patch.object(merge, "BLOCK", block), pytest.raises(CorruptPayloadError, match="strictly increasing"):
        merge.merge_and_query(torch.tensor(keys), [n], 3 * n, table, [4], 1, 0, torch.zeros(1, 1),
                              workers=workers, use_numpy=use_numpy)


@pytest.mark.parametrize(("rows", "columns", "groups", "buckets", "numel"),
                         [(3, 0.05, 8, 256, 200_000), (2, 0.2, 2, 1024, 1 << 30), (2, 0.05, 8, 256, 1 << 31),
                          (3, 0.2, 2, 1024, 1 << 31)])
def test_the_c_query_equals_the_reference_where_cells_collide(rows, columns, groups, buckets, numel):
    """Few columns per key (cells shared by many keys, so the rows' cells differ and the maximum
    matters), uint8 and int32 cells, int32 and int64 packed keys (all four C variants), two
    threads: the C query's keys and values equal the reference's bit for bit."""
    x = _input(numel, 30_000, rows)
    codec = SketchML(sketch="exact", groups=groups, rows=rows, columns=columns, buckets=buckets, seed=rows)
    p = codec.encode(x)
    want_keys, want_values = reference_decode(codec, p.sections, numel)
    ran_c = native.call_count(SKETCHML_C)
    with forced("compiled"):
        keys, values = codec._decode_sparse(p.sections, numel)
    assert native.call_count(SKETCHML_C) > ran_c
    assert torch.equal(keys, want_keys) and torch.equal(values, want_values)


def test_the_sort_of_the_packed_keys_is_measured_once_per_dtype(monkeypatch):
    """numpy's faster sort here, one of the two whose arrays are the same for distinct keys, measured
    once per dtype and process, and not for a message too small to gain from it."""
    monkeypatch.setattr(merge, "sort_kinds", {})
    measured = []
    real = merge.measure_sort_kind
    monkeypatch.setattr(merge, "measure_sort_kind", lambda dtype: measured.append(dtype.name) or real(dtype))
    codec = SketchML(sketch="exact", groups=8, buckets=256)
    small = codec.encode(_input(1 << 20, 20_000, 3))
    codec.decode(small)  # below SORT_PROBE_MIN keys: the stable sort, nothing measured
    assert measured == []
    kinds = [merge.sort_kind(d) for d in (np.int32, np.int64, np.int32, np.dtype("int64"))]
    assert measured == ["int32", "int64"]
    assert set(kinds) <= {"stable", "quicksort"} and kinds[0] == kinds[2] and kinds[1] == kinds[3]
