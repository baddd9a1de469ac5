/* SketchML decode's MinMaxSketch query over sorted packed keys (Jiang et al., SIGMOD 2018, Sections
 * 3.3-3.4; gcbench.compressors.codecs.sketchml.merge._query_sorted holds the numpy reference): for
 * each packed integer p = key << gbits | group, the key, and the index of its value in the
 * (group, level) table: group * width + the largest table cell over the rows' hashes. The same
 * uint64 arithmetic (products wrap modulo 2^64, shifts are logical) and the same clipping of
 * indices as numpy's take(mode="clip"), so the same values for any input. Keys are taken CHUNK at a
 * time, one row after the other (independent table reads the processor overlaps, as numpy's passes
 * do, without numpy's temporaries). Built and loaded by gcbench.compressors.kernels.native. */
#include <stddef.h>
#include <stdint.h>

#define CHUNK 1024

static inline size_t clip(int64_t i, size_t n) { return i < 0 ? 0 : ((size_t)i >= n ? n - 1 : (size_t)i); }

/* Keys [s, e) of packed into keys[0 .. e - s) and their value indexes into vidx; cols, first: each
 * group's columns and first cell; a, b: each row's hash; table: table_n cells; values_n: entries of
 * the (group, level) table. Returns 1 when the keys do not ascend strictly (against packed[s - 1]
 * too), else 0. */
#define QUERY(NAME, PACKED_T, TABLE_T)                                                                           \
    int NAME(const PACKED_T *restrict packed, size_t s, size_t e, unsigned gbits, const uint64_t *restrict cols,  \
             const uint64_t *restrict first, size_t ngroups, const uint64_t *restrict a,                        \
             const uint64_t *restrict b, unsigned rows, const TABLE_T *restrict table, size_t table_n,          \
             int64_t width, size_t values_n, int64_t *restrict keys, int64_t *restrict vidx) {                 \
        const int64_t gmask = ((int64_t)1 << gbits) - 1;                                                        \
        int64_t prev = s ? (int64_t)packed[s - 1] >> gbits : INT64_MIN;                                        \
        int bad = 0;                                                                                           \
        uint64_t t[CHUNK], cell[CHUNK];                                                                        \
        int64_t grp[CHUNK];                                                                                    \
        int32_t level[CHUNK];                                                                                  \
        for (size_t i0 = s; i0 < e; i0 += CHUNK) {                                                             \
            const size_t w = e - i0 < CHUNK ? e - i0 : CHUNK;                                                  \
            int64_t *restrict k = keys + (i0 - s);                                                             \
            for (size_t u = 0; u < w; u++) {                                                                   \
                int64_t p = (int64_t)packed[i0 + u];                                                           \
                k[u] = p >> gbits;                                                                             \
                grp[u] = p & gmask;                                                                            \
                bad |= k[u] <= prev;                                                                           \
                prev = k[u];                                                                                   \
                size_t g = clip(grp[u], ngroups);                                                              \
                t[u] = cols[g];                                                                                \
                cell[u] = first[g];                                                                            \
            }                                                                                                  \
            for (unsigned row = 0; row < rows; row++) {                                                        \
                const uint64_t ar = a[row], br = b[row];                                                       \
                for (size_t u = 0; u < w; u++) {                                                               \
                    if (row) cell[u] += t[u];                                                                  \
                    uint64_t h = (((((uint64_t)k[u] * ar + br) >> 32) * t[u]) >> 32) + cell[u];                \
                    int32_t got = (int32_t)table[clip((int64_t)h, table_n)];                                   \
                    level[u] = (row == 0 || got > level[u]) ? got : level[u];                                  \
                }                                                                                              \
            }                                                                                                  \
            for (size_t u = 0; u < w; u++) vidx[i0 - s + u] = (int64_t)clip(grp[u] * width + level[u], values_n); \
        }                                                                                                      \
        return bad;                                                                                            \
    }

/* Packed int32 or int64; table cells uint8 (levels of at most 256 buckets: a table 4x smaller, in
 * cache) or int32. */
QUERY(gcbench_sketchml_query_p32_u8, int32_t, uint8_t)
QUERY(gcbench_sketchml_query_p64_u8, int64_t, uint8_t)
QUERY(gcbench_sketchml_query_p32_i32, int32_t, int32_t)
QUERY(gcbench_sketchml_query_p64_i32, int64_t, int32_t)

/* SketchML encode's grouping (gcbench.compressors.codecs.sketchml.groups._chunks holds the torch
 * reference): keys [lo, hi) and their levels, each to its group's next free slot (fill[g], advanced
 * here) of the n-slot outputs, in input order: the scatter of a stable counting sort by group, one
 * pass. Returns -1 (and stops) at a group >= r or a slot outside [0, n), else 0. */
int gcbench_sketchml_group(const uint8_t *restrict group, const int64_t *restrict keys, const int16_t *restrict levels,
                           size_t lo, size_t hi, unsigned r, int64_t *restrict fill, size_t n, int64_t *restrict keys_g,
                           int16_t *restrict levels_g) {
    for (size_t i = lo; i < hi; i++) {
        const unsigned g = group[i];
        if (g >= r || fill[g] < 0 || (size_t)fill[g] >= n) return -1;
        const size_t at = (size_t)fill[g]++;
        keys_g[at] = keys[i];
        levels_g[at] = levels[i];
    }
    return 0;
}

/* SketchML encode's MinMaxSketch insert (gcbench.compressors.codecs.sketchml.minmaxsketch.minmax_insert
 * holds the torch reference): for the keys of groups [g0, g1) (group g's counts[g] keys follow the
 * previous groups' from keys[start]), in every row, table[first[g] + row * cols[g] + h] keeps the
 * smallest level hashed to it, h = ((((key * a + b) mod 2^64) >> 32) * cols[g]) >> 32 (the same uint64
 * arithmetic as the query). A cell's minimum does not depend on the order of the inserts, so the
 * table is the reference's. Returns -1 (and stops) where a group with keys has no columns or a cell
 * falls outside the table, else 0. */
int gcbench_sketchml_insert(const int64_t *restrict keys, const int16_t *restrict levels, size_t start,
                            const int64_t *restrict counts, const uint64_t *restrict cols,
                            const uint64_t *restrict first, size_t g0, size_t g1, const uint64_t *restrict a,
                            const uint64_t *restrict b, unsigned rows, int16_t *restrict table, size_t table_n) {
    size_t i = start;
    for (size_t g = g0; g < g1; g++) {
        const size_t c = (size_t)counts[g];
        const uint64_t t = cols[g];
        if (c && !t) return -1;
        if (c && (first[g] > table_n || rows * t > table_n - first[g])) return -1;
        for (unsigned row = 0; row < rows; row++) {
            int16_t *restrict cells = table + first[g] + row * t;
            const uint64_t ar = a[row], br = b[row];
            for (size_t u0 = i; u0 < i + c; u0 += CHUNK) {  /* the hashes of a chunk (vector code), then the cells */
                const size_t w = i + c - u0 < CHUNK ? i + c - u0 : CHUNK;
                uint32_t h[CHUNK];
                for (size_t u = 0; u < w; u++) h[u] = (uint32_t)(((((uint64_t)keys[u0 + u] * ar + br) >> 32) * t) >> 32);
                for (size_t u = 0; u < w; u++) {  /* branch-free: the levels come in no order */
                    const int16_t lv = levels[u0 + u], cur = cells[h[u]];
                    cells[h[u]] = lv < cur ? lv : cur;
                }
            }
        }
        i += c;
    }
    return 0;
}

/* SketchML encode's bucket of each of the n values v: how many of the m sorted (non-decreasing)
 * boundaries are <= v, torch.searchsorted(b, v, right=True) for values that are not NaN. A binary
 * search whose step is a conditional move, not a branch (the values come in no order, so a branch
 * would mispredict about once per level). */
#define BUCKETIZE(NAME, T, OUT_T)                                                                              \
    void NAME(const T *restrict b, size_t m, const T *restrict v, size_t n, OUT_T *restrict out) {              \
        for (size_t i = 0; i < n; i++) {                                                                       \
            const T x = v[i];                                                                                  \
            const T *base = b;                                                                                 \
            size_t len = m;                                                                                    \
            while (len > 1) {                                                                                  \
                const size_t half = len / 2;                                                                   \
                base = base[half] <= x ? base + half : base;                                                   \
                len -= half;                                                                                   \
            }                                                                                                  \
            out[i] = (OUT_T)((size_t)(base - b) + (m && base[0] <= x));                                        \
        }                                                                                                      \
    }
BUCKETIZE(gcbench_sketchml_bucketize_f32_i32, float, int32_t)
BUCKETIZE(gcbench_sketchml_bucketize_f32_i64, float, int64_t)
BUCKETIZE(gcbench_sketchml_bucketize_f64_i32, double, int32_t)
BUCKETIZE(gcbench_sketchml_bucketize_f64_i64, double, int64_t)
