"""MinMaxSketch (SketchML Section 3.3): agreement with a naive Python implementation, never an
over-estimate (Min insert / Max query), adversarial collisions, and the hash's range and spread."""

from __future__ import annotations

import pytest
import torch
import gcbench.compressors.codecs.sketchml.minmaxsketch as minmaxsketch
from gcbench.compressors.codecs.sketchml.minmaxsketch import MAX_COLUMNS, hash_columns, hash_params, minmax_insert, minmax_query
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels.sketchml import SKETCHML_C, minmax_insert_c
from hypothesis import given
from hypothesis import strategies as st

M64 = (1 << 64) - 1


def naive_hash(key: int, a: int, b: int, t: int) -> int:
    """The documented hash with Python integers: ((a*k + b) mod 2^64) >> 32, then (h * t) >> 32."""
    h = ((a & M64) * key + (b & M64)) & M64
    return ((h >> 32) * t) >> 32


def naive_sketch(keys, levels, counts, columns, rows, seed, fill):
    """One s x t table per group, filled key by key (Min insert); query key by key (Max)."""
    params = hash_params(seed, rows)
    tables, pos = [], 0
    for g, c in enumerate(counts):
        t = columns[g]
        table = [[fill[g]] * t for _ in range(rows)]
        for k, lv in zip(keys[pos : pos + c], levels[pos : pos + c]):
            for i, (a, b) in enumerate(params):
                j = naive_hash(k, a, b, t)
                table[i][j] = min(table[i][j], lv)
        tables.append(table)
        pos += c
    answers, pos = [], 0
    for g, c in enumerate(counts):
        for k in keys[pos : pos + c]:
            answers.append(max(tables[g][i][naive_hash(k, a, b, columns[g])] for i, (a, b) in enumerate(params)))
        pos += c
    flat = [v for table in tables for row in table for v in row]
    return flat, answers


@st.composite
def grouped(draw, max_columns=40):
    ngroups = draw(st.integers(1, 4))
    rows = draw(st.integers(1, 4))
    seed = draw(st.integers(0, (1 << 63) - 1))
    keys, levels, counts, columns, fill = [], [], [], [], []
    for _ in range(ngroups):
        ks = sorted(draw(st.sets(st.integers(0, (1 << 63) - 1), max_size=30)))
        width = draw(st.integers(1, 40))
        keys += ks
        levels += [draw(st.integers(0, width - 1)) for _ in ks]
        counts.append(len(ks))
        columns.append(draw(st.integers(1, max_columns)) if ks else 0)
        fill.append(width - 1)
    return keys, levels, counts, columns, rows, seed, fill


def _run(keys, levels, counts, columns, rows, seed, fill, levels_dtype=torch.int32):
    k = torch.tensor(keys, dtype=torch.int64)
    lv = torch.tensor(levels, dtype=levels_dtype)
    table = minmax_insert(k, lv, counts, columns, rows, seed, fill)
    return table, minmax_query(k, counts, table, columns, rows, seed)


#: The insert's paths: torch's scatters (int32 levels: every mode; int16: eager), and the C pass
#: (int16 levels, the encoder's, where C kernels run).
PATHS = {"torch-int32": (torch.int32, "eager"), "torch-int16": (torch.int16, "eager"), "c": (torch.int16, "compiled")}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("one_buffer_max", [minmaxsketch.ONE_BUFFER_MAX, 0],
                         ids=["all-groups-at-once", "group-by-group"])
@given(case=grouped())
def test_agrees_with_the_naive_sketch(one_buffer_max, path, case):
    dtype, mode = PATHS[path]
    calls = native.call_count(SKETCHML_C)
    with pytest.MonkeyPatch.context() as m, fused.forced(mode):
        m.setattr(minmaxsketch, "ONE_BUFFER_MAX", one_buffer_max)
        table, answers = _run(*case, levels_dtype=dtype)
    flat, expect = naive_sketch(*case)
    assert table.tolist() == flat
    assert answers.tolist() == expect
    if path != "c":
        assert native.call_count(SKETCHML_C) == calls
    elif sum(case[2]):
        assert native.call_count(SKETCHML_C) > calls


def test_c_insert_refuses_what_it_cannot_index():
    keys, levels = torch.arange(10, dtype=torch.int64), torch.zeros(10, dtype=torch.int16)
    table = torch.full((8,), 5, dtype=torch.int16)
    params = hash_params(1, 2)
    with pytest.raises(ValueError, match="no columns"):  # a group with keys and no columns
        minmax_insert_c(keys, levels, 0, [10], [0], [0], range(1), params, table)
    with pytest.raises(ValueError, match="outside the table"):  # 2 rows x 5 columns > 8 cells
        minmax_insert_c(keys, levels, 0, [10], [5], [0], range(1), params, table)
    with pytest.raises(ValueError, match="dtypes"):
        minmax_insert_c(keys, levels.int(), 0, [10], [4], [0], range(1), params, table)
    with pytest.raises(ValueError, match="dtypes"):  # more keys than given
        minmax_insert_c(keys, levels, 5, [10], [4], [0], range(1), params, table)
    with pytest.raises(ValueError, match="dtypes"):  # a group that is not there
        minmax_insert_c(keys, levels, 0, [10], [4], [0], range(2), params, table)
    minmax_insert_c(keys, levels, 0, [10], [4], [0], range(1), params, table)
    assert table.tolist() == naive_sketch(keys.tolist(), levels.tolist(), [10], [4], 2, 1, [5])[0]


@given(grouped())
def test_query_never_exceeds_the_inserted_level(case):
    levels = case[1]
    _, answers = _run(*case)
    assert all(a <= lv for a, lv in zip(answers.tolist(), levels))
    assert all(a >= 0 for a in answers.tolist())


@given(grouped(max_columns=1))
def test_one_column_every_key_collides_and_gets_its_groups_minimum(case):
    _keys, levels, counts, _columns, _rows, _seed, _fill = case
    _, answers = _run(*case)
    pos = 0
    for c in counts:
        group_min = min(levels[pos : pos + c], default=None)
        assert answers[pos : pos + c].tolist() == [group_min] * c
        pos += c


def test_no_collision_means_exact_answers():
    keys = torch.arange(0, 2000, 7)
    levels = (keys % 31).to(torch.int32)
    counts, columns = [keys.numel()], [1 << 20]  # so wide that collisions are unlikely
    table = minmax_insert(keys, levels, counts, columns, 2, 3, [30])
    answers = minmax_query(keys, counts, table, columns, 2, 3)
    assert (answers == levels).float().mean() > 0.999


def test_hash_range_and_spread():
    a, b = hash_params(0, 1)[0]
    extreme = torch.tensor([0, 1, (1 << 63) - 1, (1 << 62) + 12345], dtype=torch.int64)
    for t in (1, 2, 1000, MAX_COLUMNS):
        h = hash_columns(extreme, a, b, t)
        assert bool(((h >= 0) & (h < t)).all())
        assert h.tolist() == [naive_hash(int(k), a, b, t) for k in extreme.tolist()]
    # consecutive keys (the typical sparse-gradient case) spread evenly: chi-square over 50 columns
    keys = torch.arange(100_000, dtype=torch.int64)
    counts = torch.bincount(hash_columns(keys, a, b, 50), minlength=50).double()
    chi2 = float(((counts - 2000) ** 2 / 2000).sum())
    assert chi2 < 120, chi2  # 49 degrees of freedom; a broken hash is in the thousands


def test_rows_use_independent_hashes():
    (a1, b1), (a2, b2) = hash_params(7, 2)
    keys = torch.arange(10_000, dtype=torch.int64)
    same = (hash_columns(keys, a1, b1, 100) == hash_columns(keys, a2, b2, 100)).float().mean()
    assert same < 0.03  # about 1/100 for independent rows
    assert hash_params(7, 2) != hash_params(8, 2)


@given(
    counts=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    wide=st.lists(st.booleans(), min_size=4, max_size=4),
    rows=st.integers(1, 3),
    seed=st.integers(0, (1 << 63) - 1),
)
def test_row_cells_equal_the_naive_hash_plus_offsets_for_narrow_and_huge_tables(counts, wide, rows, seed):
    """``row_cells`` fuses ``(h t) >> 32 + offset`` as ``(h t + offset 2^32) >> 32`` while that fits
    in int64 and falls back to three steps for huge tables; both must equal the documented hash.
    Huge tables are only laid out (no table is allocated), so columns up to MAX_COLUMNS are cheap."""
    from gcbench.compressors.codecs.sketchml.minmaxsketch import row_cells, table_layout

    g = torch.Generator().manual_seed(seed % 1000)
    keys, columns = [], []
    for c, w in zip(counts, wide):
        keys += sorted(torch.randint(0, 1 << 62, (c,), generator=g).tolist())
        columns.append((MAX_COLUMNS - int(torch.randint(0, 5, (1,), generator=g))) if w else 1 + int(torch.randint(0, 50, (1,), generator=g)))
    k = torch.tensor(keys, dtype=torch.int64)
    base = table_layout(columns, rows)
    for i, (a, b) in enumerate(hash_params(seed, rows)):
        got = row_cells(k, counts, columns, rows, i, a, b).tolist()
        expect, pos = [], 0
        for gi, c in enumerate(counts):
            expect += [base[gi] + i * columns[gi] + naive_hash(key, a, b, columns[gi]) for key in keys[pos : pos + c]]
            pos += c
        assert got == expect


@pytest.mark.parametrize("nnz", [300, (1 << 16) + 2_000])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_encoder_writes_the_same_bytes_with_the_c_insert(nnz, rows):
    """SketchML with exact quantiles (reproducible) encodes to the same bytes in eager mode (torch's
    scatters) and where the C insert runs, one call for a small message and one per group above
    ONE_BUFFER_MAX keys."""
    from gcbench.compressors.codecs.sketchml.codec import SketchML

    g = torch.Generator().manual_seed(nnz + rows)
    x = torch.zeros(4 * nnz)
    x[torch.randperm(4 * nnz, generator=g)[:nnz]] = torch.randn(nnz, generator=g)
    out = {}
    for mode in ("eager", "compiled"):
        calls = native.call_count(SKETCHML_C)
        with fused.forced(mode):
            out[mode] = SketchML(sketch="exact", rows=rows, seed=5).encode(x, key="k").to_bytes()
        assert (native.call_count(SKETCHML_C) > calls) == (mode == "compiled")
    assert out["eager"] == out["compiled"]
