/* 3LC's error accumulation with quartic packing in one pass (Lim, Andersen, Kaminsky, SysML 2019,
 * Sections 3.1 and 3.2): for c = g + e (g alone when e is NULL), the residual c - M, c + M or c
 * (above h = M / 2, below -h, else) written over e or into res, and each group of five shifted trits
 * t = (c > h) + (c >= -h) as its quartic byte 81 t0 + 27 t1 + 9 t2 + 3 t3 + t4. The trits never go
 * to memory: gcbench.compressors.kernels.threelc's two compiled passes (feedback_trits, then
 * pack_shifted over a byte per value) give the same residual and bytes, since each residual is one
 * correctly rounded float32 operation. A group past the end is padded with t = 1 (a quantized
 * zero). Built and loaded by gcbench.compressors.kernels.native.
 */
#pragma STDC FP_CONTRACT OFF
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "parallel.h"

/* Groups per inner step: their trits (5 bytes each) stay in a stack buffer. */
#define STEP 64

#if defined(__GNUC__) && !defined(__clang__)
/* GCC keeps the float selects of a loop as branches while FP operations may trap; none of these
 * can (finite values, checked by the caller's scan) and the values do not change. */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

/* One value's shifted trit, its residual written to *res. The three cases are one subtraction of
 * M * up - M * down (M, -M or +0, exact products of 0 or 1): c - (-M) is c + M and c - 0 is c, bit
 * for bit; no branch, so a loop of it vectorises. */
static inline uint8_t trit(float c, float m, float h, float neg_h, float *res) {
    const float up = (float)(c > h), down = (float)(c < neg_h);
    *res = c - (m * up - m * down);
    return (uint8_t)((c > h) + (c >= neg_h));
}

/* The values [5 first, 5 last) (whole groups, all before n): residuals and quartic bytes. The value
 * loop has no dependence between iterations (res[i] is written after e[i] is read, nothing else), so
 * the compiler vectorises it, once with e and once without (with_e a constant after inlining: g + 0
 * would turn -0.0 into +0.0); the bytes are formed from the stack buffer. */
static inline void values(const float *restrict g, const float *e, int with_e, float m, float h, size_t i0, size_t count,
                          float *res, uint8_t *restrict t) {
    const float neg_h = -h;
    GCBENCH_PRAGMA(GCC ivdep)
    for (size_t j = 0; j < count; j++)
        t[j] = trit(with_e ? g[i0 + j] + e[i0 + j] : g[i0 + j], m, h, neg_h, res + i0 + j);
}

static void groups(const float *restrict g, const float *e, float m, float h, size_t first, size_t last,
                   float *res, uint8_t *restrict q) {
    uint8_t t[5 * STEP];
    for (size_t k0 = first; k0 < last; k0 += STEP) {
        const size_t w = last - k0 < STEP ? last - k0 : STEP;
        if (e)
            values(g, e, 1, m, h, 5 * k0, 5 * w, res, t);
        else
            values(g, NULL, 0, m, h, 5 * k0, 5 * w, res, t);
        for (size_t k = 0; k < w; k++) {
            const uint8_t *s = t + 5 * k;
            q[k0 + k] = (uint8_t)(81 * s[0] + 27 * s[1] + 9 * s[2] + 3 * s[3] + s[4]);
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* The read-only scan before gcbench_threelc_feedback, on one thread: max |c| over c = g + e (g alone
 * when e is NULL) as the bits of a float32 with the sign cleared; 0x7f800000 (Inf) or more when some c
 * is Inf or NaN. For finite floats the order of these bits is the order of the magnitudes, so the
 * maximum is an integer maximum (which the compiler vectorises) and exact whatever the order. */
uint32_t gcbench_threelc_scan(const float *restrict g, const float *restrict e, size_t n) {
    uint32_t top = 0;
    if (e) {
        for (size_t i = 0; i < n; i++) {
            const float c = g[i] + e[i];
            uint32_t bits;
            memcpy(&bits, &c, sizeof bits);
            bits &= 0x7fffffffu;
            top = bits > top ? bits : top;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, g + i, sizeof bits);
            bits &= 0x7fffffffu;
            top = bits > top ? bits : top;
        }
    }
    return top;
}

/* Groups [start, end) of the n values g (and e) in blocks of `block` groups on `threads` threads
 * (parallel.h); res may be e itself (each value is read before it is written). The last group may
 * reach past n: its missing trits are 1 and nothing is written past res[n - 1]. */
void gcbench_threelc_feedback(const float *restrict g, const float *e, float m, float h, size_t n, size_t start,
                              size_t end, size_t block, int threads, float *res, uint8_t *restrict q) {
    const size_t full = n / 5, whole = end < full ? end : full;
    if (whole > start) {
        const size_t blocks = (whole - start + block - 1) / block;
        GCBENCH_BLOCKS(threads, )
        for (size_t b = 0; b < blocks; b++) {
            const size_t first = start + b * block, last = first + block < whole ? first + block : whole;
            groups(g, e, m, h, first, last, res, q);
        }
    }
    if (end > full && full >= start) { /* the padded last group */
        unsigned byte = 0;
        for (size_t j = 0; j < 5; j++) {
            const size_t i = 5 * full + j;
            byte = 3 * byte + (i < n ? trit(e ? g[i] + e[i] : g[i], m, h, -h, res + i) : 1u);
        }
        q[full] = (uint8_t)byte;
    }
}
