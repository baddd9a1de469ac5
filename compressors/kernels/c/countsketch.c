/* Count Sketch's accumulate (Charikar et al. 2002; Ivkin et al., NeurIPS 2019, Section 3) for one
 * row over a range of coordinates, in one pass: each coordinate's code 2 * bucket + (sign < 0) is
 * rebuilt from the compact hash tables and its value added into the row's 2c-bin accumulator, in
 * index order, one float32 add at a time: the additions of torch's index_add_ on the CPU, so the
 * same bytes. The integer steps are those of gcbench.compressors.codecs.countsketch.hashes
 * (HashTables._finish) and of the compiled kernel gcbench.compressors.kernels.countsketch
 * (_sketch_codes): u + v wraps past p iff rank(v) > k - 1, read from the sign of km1 - rank; then
 * 2 * bucket is reduced into [0, 2c) without a compare. Built and loaded by
 * gcbench.compressors.kernels.native.
 */
#include <stddef.h>
#include <stdint.h>

#define BLOCK_BITS 16
#define BLOCK ((size_t)1 << BLOCK_BITS)
#define CHUNK 2048

/* -1 where x < 0, else 0 (an arithmetic shift, written without implementation-defined behaviour). */
static inline int32_t sign_mask(int32_t x) { return -(int32_t)((uint32_t)x >> 31); }

/* One code from its row's table entries: k = km1[block], dl = delta[block], b0 = base0[block] - 2c,
 * rank and vc2 at the coordinate's low 16 bits, neg its sign bit. */
static inline int32_t code_of(int32_t k, int32_t dl, int32_t b0, int32_t rank, int32_t vc2, int32_t two_c,
                              int32_t neg) {
    int32_t o = k - rank;
    o = sign_mask(o) & dl;
    o = o + vc2 + b0;
    o += sign_mask(o) & two_c;
    return o + neg;
}

/* codes[t] for the w coordinates from i (all in block blk, low bits from lo0) of row `row`, whose
 * tables start at rk, vc (low bits) and km1, delta, base0 (blocks); a loop the compiler vectorises. */
static inline void chunk_codes(int32_t *restrict codes, size_t w, size_t i, size_t blk, size_t lo0, unsigned row,
                               const int32_t *restrict rk, const int32_t *restrict vc, const int32_t *restrict km1,
                               const int32_t *restrict delta, const int32_t *restrict base0, int32_t two_c,
                               const uint8_t *restrict negbits) {
    const int32_t k = km1[blk], dl = delta[blk], b0 = base0[blk] - two_c;
    for (size_t t = 0; t < w; t++)
        codes[t] = code_of(k, dl, b0, rk[lo0 + t], vc[lo0 + t], two_c, (negbits[i + t] >> row) & 1);
}

/* Adds v[i] into acc[code(row, i)] for i = start .. end - 1, in that order. rank, vc2: the row's
 * tables over the low 16 bits of a coordinate; km1, delta, base0: over its block (i >> 16); negbits:
 * one byte per coordinate, the row's sign in bit `row`. Returns the number of codes outside
 * [0, two_c), which are skipped (none for a sketch's own tables). Codes are formed CHUNK at a time
 * (a loop the compiler vectorises), then added. */
size_t gcbench_sketch_accumulate(float *restrict acc, int32_t two_c, const float *restrict v, size_t start,
                                 size_t end, const int32_t *restrict rank, const int32_t *restrict vc2,
                                 const int32_t *restrict km1, const int32_t *restrict delta,
                                 const int32_t *restrict base0, const uint8_t *restrict negbits, unsigned row) {
    int32_t codes[CHUNK];
    size_t bad = 0, i = start;
    while (i < end) {
        size_t blk = i >> BLOCK_BITS, stop = (blk + 1) << BLOCK_BITS;
        if (stop > end) stop = end;
        if (stop - i > CHUNK) stop = i + CHUNK;
        const size_t lo0 = i & (BLOCK - 1), w = stop - i;
        chunk_codes(codes, w, i, blk, lo0, row, rank, vc2, km1, delta, base0, two_c, negbits);
        for (size_t t = 0; t < w; t++) {
            uint32_t c = (uint32_t)codes[t];
            if (c < (uint32_t)two_c) acc[c] += v[i + t];
            else bad++;
        }
        i = stop;
    }
    return bad;
}

/* The coordinates i in [start, end) whose median estimate has |estimate| >= t, from per-cell flags
 * (CountSketch._at_least): flags is r x two_c bytes, 1 where a signed table cell is >= t and 16
 * where it is <= -t; coordinate i passes when the flags of its r cells sum to at least need_pos in
 * the low nibble or at least 16 * need_neg. Row j's tables start at rank + j * lo_n (and vc2), at
 * km1 + j * blocks (and delta, base0); its sign is bit j of negbits[i] (r <= 8). Writes the passing
 * coordinates to out in ascending order and returns their number; *bad counts codes outside
 * [0, two_c) (none for a sketch's own tables), which read no flag. */
size_t gcbench_sketch_at_least(const uint8_t *restrict flags, int32_t two_c, unsigned r, size_t start, size_t end,
                               const int32_t *restrict rank, const int32_t *restrict vc2, size_t lo_n,
                               const int32_t *restrict km1, const int32_t *restrict delta,
                               const int32_t *restrict base0, size_t blocks, const uint8_t *restrict negbits,
                               unsigned need_pos, unsigned need_neg, int64_t *restrict out, size_t *bad) {
    int32_t codes[CHUNK];
    uint8_t sums[CHUNK];
    size_t n = 0, nbad = 0, i = start;
    while (i < end) {
        size_t blk = i >> BLOCK_BITS, stop = (blk + 1) << BLOCK_BITS;
        if (stop > end) stop = end;
        if (stop - i > CHUNK) stop = i + CHUNK;
        const size_t lo0 = i & (BLOCK - 1), w = stop - i;
        for (size_t t = 0; t < w; t++) sums[t] = 0;
        for (unsigned j = 0; j < r; j++) {
            chunk_codes(codes, w, i, blk, lo0, j, rank + j * lo_n, vc2 + j * lo_n, km1 + j * blocks, delta + j * blocks,
                        base0 + j * blocks, two_c, negbits);
            const uint8_t *fj = flags + (size_t)j * (size_t)two_c;
            for (size_t t = 0; t < w; t++) {
                uint32_t c = (uint32_t)codes[t];
                int ok = c < (uint32_t)two_c;
                nbad += !ok;
                sums[t] += ok ? fj[c] : 0;
            }
        }
        for (size_t t = 0; t < w; t++) {
            unsigned a = sums[t];
            out[n] = (int64_t)(i + t);
            n += (a >= 16 * need_neg) | ((a & 15) >= need_pos);
        }
        i = stop;
    }
    *bad = nbad;
    return n;
}

/* Point queries' gathers (CountSketch.query): out[j * n + t] = signed_[j][code(j, idx[t])] for the r
 * rows j, with the tables laid out as in gcbench_sketch_at_least (signed_: r x two_c float32, each
 * table cell b at 2b and its negation at 2b + 1). idx holds coordinates below the tables' reach (the
 * caller checks them); returns the number of codes outside [0, two_c), whose value is left 0. */
size_t gcbench_sketch_gather(const float *restrict signed_, int32_t two_c, unsigned r, const int64_t *restrict idx,
                             size_t n, const int32_t *restrict rank, const int32_t *restrict vc2, size_t lo_n,
                             const int32_t *restrict km1, const int32_t *restrict delta,
                             const int32_t *restrict base0, size_t blocks, const uint8_t *restrict negbits,
                             float *restrict out) {
    size_t nbad = 0;
    for (unsigned j = 0; j < r; j++) {
        const int32_t *rk = rank + j * lo_n, *vc = vc2 + j * lo_n;
        const int32_t *kj = km1 + j * blocks, *dj = delta + j * blocks, *bj = base0 + j * blocks;
        const float *sj = signed_ + (size_t)j * (size_t)two_c;
        float *oj = out + (size_t)j * n;
        for (size_t t = 0; t < n; t++) {
            size_t i = (size_t)idx[t], blk = i >> BLOCK_BITS, lo = i & (BLOCK - 1);
            uint32_t c = (uint32_t)code_of(kj[blk], dj[blk], bj[blk] - two_c, rk[lo], vc[lo], two_c, (negbits[i] >> j) & 1);
            int ok = c < (uint32_t)two_c;
            nbad += !ok;
            oj[t] = ok ? sj[c] : 0.0f;
        }
    }
    return nbad;
}
