/* TernGrad's statistics (Wen et al., NeurIPS 2017, Section 3: the scaler max |g| and, for gradient
 * clipping, the standard deviation) of float32 values viewed as 32 rows of `cols` columns, in one
 * read: per column the float32 sum and sum of squares of its 32 values, added row 0 first, each
 * product and sum rounded on its own (the pragma below and -ffp-contract=off in the build), and the
 * min and max of all values, NaN when one is NaN: the elementwise operations of
 * gcbench.compressors.kernels.core._moments, so the same column sums as the eager reference and the
 * compiled kernel. The loops run over columns, which the compiler vectorises on any ISA. Built and
 * loaded by gcbench.compressors.kernels.native.
 */
#pragma STDC FP_CONTRACT OFF
#include <stddef.h>

#define ROWS 32
#define CHUNK 512

/* Columns [0, cols) of the 32 x cols row-major x: s[c], q[c]; range[0] = the min, range[1] = the max
 * (both NaN when some value is NaN). */
void gcbench_moments(const float *restrict x, size_t cols, float *restrict s, float *restrict q,
                     float *restrict range) {
    float lo[CHUNK], hi[CHUNK];
    float all_lo = __builtin_inff(), all_hi = -__builtin_inff();
    int nan = 0;
    for (size_t c0 = 0; c0 < cols; c0 += CHUNK) {
        const size_t m = cols - c0 < CHUNK ? cols - c0 : CHUNK;
        float *restrict sc = s + c0, *restrict qc = q + c0;
        const float *restrict x0 = x + c0;
        for (size_t i = 0; i < m; i++) {
            const float v = x0[i];
            sc[i] = v;
            qc[i] = v * v;
            lo[i] = v;
            hi[i] = v;
            nan |= v != v;
        }
        for (size_t j = 1; j < ROWS; j++) {
            const float *restrict xj = x + j * cols + c0;
            for (size_t i = 0; i < m; i++) {
                const float v = xj[i];
                sc[i] = sc[i] + v;
                qc[i] = qc[i] + v * v;
                lo[i] = v < lo[i] ? v : lo[i];
                hi[i] = v > hi[i] ? v : hi[i];
                nan |= v != v;
            }
        }
        for (size_t i = 0; i < m; i++) {
            all_lo = lo[i] < all_lo ? lo[i] : all_lo;
            all_hi = hi[i] > all_hi ? hi[i] : all_hi;
        }
    }
    range[0] = nan ? __builtin_nanf("") : all_lo;
    range[1] = nan ? __builtin_nanf("") : all_hi;
}
