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

#include "parallel.h"

/* Groups per inner step: their trits (5 bytes each) stay in a stack buffer. */
#define STEP 64

/* The values [5 first, 5 last) (whole groups, all before n): residuals and quartic bytes. The value
 * loop has no dependence between iterations, so the compiler vectorises it; the bytes are formed
 * from the stack buffer. */
#if defined(__GNUC__) && !defined(__clang__)
/* GCC keeps the float selects of a loop as branches while FP operations may trap; none of these
 * can (finite values, checked by the caller's scan) and the values do not change. */
__attribute__((optimize("no-trapping-math")))
#endif
static void groups(const float *restrict g, const float *e, float m, float h, size_t first, size_t last,
                   float *res, uint8_t *restrict q) {
    uint8_t t[5 * STEP];
    const float neg_h = -h;
    for (size_t k0 = first; k0 < last; k0 += STEP) {
        const size_t w = last - k0 < STEP ? last - k0 : STEP, i0 = 5 * k0;
        /* res[i] is written after e[i] is read, nothing else: no dependence between iterations.
         * The three cases are one subtraction of M * up - M * down (M, -M or +0, exact products of
         * 0 or 1): c - (-M) is c + M and c - 0 is c, bit for bit; no branch, so the loop vectorises. */
        if (e) {
            GCBENCH_PRAGMA(GCC ivdep)
            for (size_t j = 0; j < 5 * w; j++) {
                const float c = g[i0 + j] + e[i0 + j];
                t[j] = (uint8_t)((c > h) + (c >= neg_h));
                const float up = (float)(c > h), down = (float)(c < neg_h);
                res[i0 + j] = c - (m * up - m * down);
            }
        } else {
            GCBENCH_PRAGMA(GCC ivdep)
            for (size_t j = 0; j < 5 * w; j++) {
                const float c = g[i0 + j];
                t[j] = (uint8_t)((c > h) + (c >= neg_h));
                const float up = (float)(c > h), down = (float)(c < neg_h);
                res[i0 + j] = c - (m * up - m * down);
            }
        }
        for (size_t k = 0; k < w; k++) {
            const uint8_t *s = t + 5 * k;
            q[k0 + k] = (uint8_t)(81 * s[0] + 27 * s[1] + 9 * s[2] + 3 * s[3] + s[4]);
        }
    }
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
        const float neg_h = -h;
        unsigned byte = 0;
        for (size_t j = 0; j < 5; j++) {
            const size_t i = 5 * full + j;
            unsigned t = 1;
            if (i < n) {
                const float c = e ? g[i] + e[i] : g[i];
                t = (unsigned)((c > h) + (c >= neg_h));
                res[i] = c > h ? c - m : (c < neg_h ? c + m : c);
            }
            byte = 3 * byte + t;
        }
        q[full] = (uint8_t)byte;
    }
}
