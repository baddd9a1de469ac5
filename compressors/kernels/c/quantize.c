/* Stochastic rounding to codes of 1 to 8 or of 16 bits (QSGD, TernGrad, ZipML; Alistarh et al., NeurIPS 2017, Section 3.1;
 * Zhang et al., ICML 2017) with the counter-based dither of gcbench.compressors.kernels.dither: for
 * the pair index p (p < 2^31), the word h = pcg(pcg(p ^ k0) ^ k1) (Jarzynski and Olano's pcg_hash,
 * uint32 arithmetic wrapping modulo 2^32); its low 16 bits are the uniform of value p, its high 16
 * bits that of value split + p. A value's code is
 *     v = fl(fl(fl(x - shift) * scale) + fl(konst + r * 2^-16)), clamped to [0, top] by two selects
 * (NaN -> 0), truncated to an integer: the float32 operations of
 * gcbench.compressors.kernels.core._dither_values, each rounded on its own (no contraction into a
 * fused multiply-add: the pragma below, and -ffp-contract=off in the build), so the same bytes as
 * the eager reference and the compiled kernel. The loop over a row is one the compiler vectorises
 * on any x86 ISA (32-bit multiplies and per-lane shifts: AVX2's vpmulld and vpsrlvd), where
 * Inductor's AVX2 code has half AVX-512's lanes and loads integers through a stack buffer. The
 * values after the pairs (fewer than two rows' worth, or a whole small tensor) take the high 16 bits
 * of their own word h(e) (gcbench_dither_rest). Built and loaded by gcbench.compressors.kernels.native.
 */
#pragma STDC FP_CONTRACT OFF
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "parallel.h"

static inline uint32_t pcg(uint32_t v) {
    const uint32_t s = v * 747796405u + 2891336453u;
    const uint32_t w = (s ^ (s >> ((s >> 28) + 4u))) * 277803737u;
    return w ^ (w >> 22);
}

static inline int32_t code(float x, float shift, float scale, float konst, uint32_t r, float top) {
    const float w = konst + (float)r * 0x1p-16f;
    const float y = (x - shift) * scale;
    float v = y + w;
    v = v > 0.0f ? v : 0.0f;
    v = v < top ? v : top;
    return (int32_t)v;
}

/* Rows [r0, r1) of the two halves of the first 2 * split values of x (rows of `span` values; split
 * = rows * span), each value p of the first half paired with split + p (one word for both): their
 * codes of 8 / K bits, K to a byte, least significant first (gcbench.compressors.wire.bitpack's
 * layout), written to out[p / K] and out[(split + p) / K] (span a multiple of K). scales: one
 * float32 per row of the whole tensor (the second half's row r is scales[rows + r]), or scales[0]
 * for every value when one_scale. (The last argument is the 16-bit kernel's.) */
#define DITHER_ROWS(NAME, K)                                                                                    \
    static void NAME(const float *restrict x, size_t split, size_t span, size_t r0, size_t r1,                \
                     const float *restrict scales, int one_scale, uint32_t k0, uint32_t k1, float konst,       \
                     float shift, float top, uint8_t *restrict out, uint8_t *restrict unused) {               \
        const size_t rows = split / span;                                                                      \
        (void)unused;                                                                                          \
        for (size_t r = r0; r < r1; r++) {                                                                     \
            const float s0 = scales[one_scale ? 0 : r], s1 = scales[one_scale ? 0 : rows + r];                 \
            const size_t a = r * span;                                                                         \
            const float *restrict xa = x + a, *restrict xb = x + split + a;                                    \
            uint8_t *restrict oa = out + a / K, *restrict ob = out + (split + a) / K;                          \
            const uint32_t base = (uint32_t)a;                                                                 \
            for (size_t i = 0; i < span / K; i++) {                                                            \
                unsigned ba = 0, bb = 0;                                                                       \
                for (unsigned j = 0; j < K; j++) {                                                             \
                    const uint32_t h = pcg(pcg((base + (uint32_t)(K * i + j)) ^ k0) ^ k1);                     \
                    ba |= (unsigned)code(xa[K * i + j], shift, s0, konst, h & 0xFFFFu, top) << (8 / K * j);    \
                    bb |= (unsigned)code(xb[K * i + j], shift, s1, konst, h >> 16, top) << (8 / K * j);        \
                }                                                                                              \
                oa[i] = (uint8_t)ba;                                                                           \
                ob[i] = (uint8_t)bb;                                                                           \
            }                                                                                                  \
        }                                                                                                      \
    }

DITHER_ROWS(rows_u8, 1)
DITHER_ROWS(rows_u4, 2)
DITHER_ROWS(rows_u2, 4)
DITHER_ROWS(rows_u1, 8)

/* The same for codes of B bits that do not divide a byte (3, 5, 6, 7): the bit stream of
 * gcbench.compressors.wire.bitpack (least significant first), B bytes per group of 8 values, written
 * to out[B p / 8] and out[B (split + p) / 8] (span a multiple of 8). A row's codes go to a byte buffer
 * CHUNK values at a time (the loop of rows_u8), whose groups of 8 bytes, read as little-endian words,
 * merge in three rounds (pairs, quads, the word) to their low 8 B bits. */
#define CHUNK 256
static inline uint64_t merge_odd(uint64_t w, unsigned b) {
    w = (w & 0x00FF00FF00FF00FFull) | ((w & 0xFF00FF00FF00FF00ull) >> (8 - b));
    w = (w & 0x0000FFFF0000FFFFull) | ((w & 0xFFFF0000FFFF0000ull) >> (16 - 2 * b));
    return (w & 0x00000000FFFFFFFFull) | ((w & 0xFFFFFFFF00000000ull) >> (32 - 4 * b));
}

/* A chunk's m codes (m a multiple of 8) to m b / 8 bytes at o. Each group is merged in a 64-bit word
 * whose bytes above the group's b are zero, so a group is stored as 8 bytes where those end within the
 * chunk's bytes: the next groups' stores, in order, overwrite the zeros past its b. The last groups
 * store exactly their b bytes, so nothing is written past the chunk's bytes (the other half's rows, or
 * another thread's, may begin there). */
static inline void store_odd(const uint8_t *restrict c, size_t m, unsigned b, uint8_t *restrict o) {
    const size_t groups = m / 8, end = groups * b;
    for (size_t g = 0; g < groups; g++) {
        uint64_t w;
        memcpy(&w, c + 8 * g, 8);
        w = merge_odd(w, b);
        if (b * g + 8 <= end) {
            memcpy(o + b * g, &w, 8);
        } else {
            for (unsigned k = 0; k < b; k++) o[b * g + k] = (uint8_t)(w >> (8 * k));
        }
    }
}

#define DITHER_ROWS_ODD(NAME, B)                                                                                \
    static void NAME(const float *restrict x, size_t split, size_t span, size_t r0, size_t r1,                \
                     const float *restrict scales, int one_scale, uint32_t k0, uint32_t k1, float konst,       \
                     float shift, float top, uint8_t *restrict out, uint8_t *restrict unused) {               \
        const size_t rows = split / span;                                                                      \
        uint8_t ca[CHUNK], cb[CHUNK];                                                                          \
        (void)unused;                                                                                          \
        for (size_t r = r0; r < r1; r++) {                                                                     \
            const float s0 = scales[one_scale ? 0 : r], s1 = scales[one_scale ? 0 : rows + r];                 \
            const size_t a = r * span;                                                                         \
            for (size_t c0 = 0; c0 < span; c0 += CHUNK) {                                                      \
                const size_t m = span - c0 < CHUNK ? span - c0 : CHUNK;                                        \
                const float *restrict xa = x + a + c0, *restrict xb = x + split + a + c0;                      \
                const uint32_t base = (uint32_t)(a + c0);                                                      \
                for (size_t j = 0; j < m; j++) {                                                               \
                    const uint32_t h = pcg(pcg((base + (uint32_t)j) ^ k0) ^ k1);                               \
                    ca[j] = (uint8_t)code(xa[j], shift, s0, konst, h & 0xFFFFu, top);                          \
                    cb[j] = (uint8_t)code(xb[j], shift, s1, konst, h >> 16, top);                              \
                }                                                                                              \
                store_odd(ca, m, B, out + (a + c0) / 8 * B);                                                   \
                store_odd(cb, m, B, out + (split + a + c0) / 8 * B);                                           \
            }                                                                                                  \
        }                                                                                                      \
    }

DITHER_ROWS_ODD(rows_u3, 3)
DITHER_ROWS_ODD(rows_u5, 5)
DITHER_ROWS_ODD(rows_u6, 6)
DITHER_ROWS_ODD(rows_u7, 7)

/* The same rows' 16-bit codes (top < 2^16) as two byte planes (gcbench.compressors.wire.bitpack's
 * 16-bit layout): the low bytes of value p at low[p], its high bytes at high[p], for p and split + p. */
static void rows_u16(const float *restrict x, size_t split, size_t span, size_t r0, size_t r1,
                     const float *restrict scales, int one_scale, uint32_t k0, uint32_t k1, float konst, float shift,
                     float top, uint8_t *restrict low, uint8_t *restrict high) {
    const size_t rows = split / span;
    for (size_t r = r0; r < r1; r++) {
        const float s0 = scales[one_scale ? 0 : r], s1 = scales[one_scale ? 0 : rows + r];
        const size_t a = r * span;
        const float *restrict xa = x + a, *restrict xb = x + split + a;
        uint8_t *restrict la = low + a, *restrict ha = high + a, *restrict lb = low + split + a,
                          *restrict hb = high + split + a;
        const uint32_t base = (uint32_t)a;
        for (size_t j = 0; j < span; j++) {
            const uint32_t h = pcg(pcg((base + (uint32_t)j) ^ k0) ^ k1);
            const uint32_t ca = (uint32_t)code(xa[j], shift, s0, konst, h & 0xFFFFu, top);
            const uint32_t cb = (uint32_t)code(xb[j], shift, s1, konst, h >> 16, top);
            la[j] = (uint8_t)ca;
            ha[j] = (uint8_t)(ca >> 8);
            lb[j] = (uint8_t)cb;
            hb[j] = (uint8_t)(cb >> 8);
        }
    }
}

/* The entry points: rows [r0, r1) in blocks of `block` rows on `threads` threads (parallel.h); the
 * 16-bit one writes its high bytes to `high`, the others leave it unused. */
#define DITHER(NAME, ROWS)                                                                                 \
    void NAME(const float *restrict x, size_t split, size_t span, size_t r0, size_t r1, size_t block,         \
              int threads, const float *restrict scales, int one_scale, uint32_t k0, uint32_t k1, float konst, \
              float shift, float top, uint8_t *restrict out, uint8_t *restrict high) {                         \
        const size_t blocks = (r1 - r0 + block - 1) / block;                                                   \
        GCBENCH_BLOCKS(threads, )                                                                              \
        for (size_t b = 0; b < blocks; b++) {                                                                  \
            const size_t first = r0 + b * block, last = first + block < r1 ? first + block : r1;              \
            ROWS(x, split, span, first, last, scales, one_scale, k0, k1, konst, shift, top, out, high);        \
        }                                                                                                      \
    }

DITHER(gcbench_dither_u8, rows_u8)
DITHER(gcbench_dither_u4, rows_u4)
DITHER(gcbench_dither_u2, rows_u2)
DITHER(gcbench_dither_u1, rows_u1)
DITHER(gcbench_dither_u3, rows_u3)
DITHER(gcbench_dither_u5, rows_u5)
DITHER(gcbench_dither_u6, rows_u6)
DITHER(gcbench_dither_u7, rows_u7)
DITHER(gcbench_dither_u16, rows_u16)

/* The values e in [a, n) after the pairs (e < 2^32), each with the high 16 bits of its own word
 * h(e) = pcg(pcg(e ^ k0) ^ k1) (gcbench.compressors.kernels.core.dither_unpaired): their int32 codes
 * at out[e - a]; scales: one float32 per row of `span` values (value e's is scales[e / span]), or
 * scales[0] for every value when one_scale. One thread: fewer than two rows of values. */
void gcbench_dither_rest(const float *restrict x, size_t a, size_t n, size_t span, const float *restrict scales,
                         int one_scale, uint32_t k0, uint32_t k1, float konst, float shift, float top,
                         int32_t *restrict out) {
    for (size_t e = a; e < n; e++) {
        const uint32_t h = pcg(pcg((uint32_t)e ^ k0) ^ k1);
        out[e - a] = code(x[e], shift, scales[one_scale ? 0 : e / span], konst, h >> 16, top);
    }
}
