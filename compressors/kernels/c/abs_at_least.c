/* Top-k's candidate scan (gcbench.compressors.codecs.topk, DGC's sampled threshold too): the positions
 * of |x| >= thr in a float32 vector, ascending, in two passes.
 *
 * 1. gcbench_abs_at_least_mask reads x once and writes one bit per value (bit j of byte i is
 *    |x[8 i + j]| >= thr, least significant first; the bits past the last value are 0), the number of
 *    set bits of each block of bytes, and whether a value read is NaN or infinite. With AVX2 a byte is
 *    one and-not of the sign, one compare and a movemask of eight lanes.
 * 2. gcbench_mask_positions reads the bits (1/32 of x's bytes) and writes each block's positions
 *    from its offset (the exclusive prefix sum of the counts, which the caller forms, and where there
 *    are too many, never asks for), one count-trailing-zeros per position, and x at each position into
 *    vals (float32 copies: the same bits as a gather), read in ascending order while the lines are
 *    near, which saves the two gathers of the few candidates from the whole x.
 *
 * The comparison is the float32 one of torch's x.abs() >= thr: a NaN value or threshold passes
 * nothing, -0.0 is 0. Built and loaded by gcbench.compressors.kernels.native.
 */
#pragma STDC FP_CONTRACT OFF
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "parallel.h"

/* Mask bytes [first, last) of the n values x: their bits, their set bits' count into *count, and 1 when
 * one of their values is NaN or infinite. */
static int mask_bytes(const float *restrict x, size_t n, float thr, size_t first, size_t last, uint8_t *restrict mask,
                      int64_t *restrict count) {
    size_t i = first;
    const size_t whole = n / 8 < last ? n / 8 : last; /* bytes of eight values */
    int64_t c = 0;
    int bad = 0;
#ifdef __AVX2__
    const __m256 t = _mm256_set1_ps(thr), inf = _mm256_set1_ps(__builtin_inff());
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 nonfinite = _mm256_setzero_ps();
    for (; i < whole; i++) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + 8 * i), magnitude);
        const unsigned b = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, t, _CMP_GE_OQ));
        mask[i] = (uint8_t)b;
        c += __builtin_popcount(b);
        /* |v| not below inf: Inf, or NaN (unordered) */
        nonfinite = _mm256_or_ps(nonfinite, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));
    }
    bad = _mm256_movemask_ps(nonfinite) != 0;
#endif
    for (; i < last; i++) {
        unsigned b = 0;
        for (unsigned j = 0; j < 8 && 8 * i + j < n; j++) {
            const float v = fabsf(x[8 * i + j]);
            b |= (unsigned)(v >= thr) << j;
            bad |= !(v - v == 0.0f);
        }
        mask[i] = (uint8_t)b;
        c += __builtin_popcount(b);
    }
    *count = c;
    return bad;
}

/* Pass 1 over mask bytes [start, end) of the n values x (ceil(n / 8) bytes in all) in blocks of `block`
 * bytes on `threads` threads (parallel.h): the bits into mask, the count of block b (the block that
 * starts at byte b * block) into counts[b]; returns 1 when a value read is NaN or infinite. */
int gcbench_abs_at_least_mask(const float *restrict x, size_t n, float thr, size_t start, size_t end, size_t block,
                              int threads, uint8_t *restrict mask, int64_t *restrict counts) {
    const size_t blocks = (end - start + block - 1) / block;
    int bad = 0;
    GCBENCH_BLOCKS(threads, reduction(| : bad))
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        bad |= mask_bytes(x, n, thr, first, last, mask, counts + first / block);
    }
    return bad;
}

/* Pass 2 over mask bytes [start, end) in blocks of `block` bytes (pass 1's blocks) on `threads`
 * threads: the positions of block b's set bits, ascending, into out from out[offsets[b]], and x at
 * them into vals from the same place. */
void gcbench_mask_positions(const uint8_t *restrict mask, size_t start, size_t end, size_t block, int threads,
                            const int64_t *restrict offsets, int64_t *restrict out, const float *restrict x,
                            float *restrict vals) {
    const size_t blocks = (end - start + block - 1) / block;
    GCBENCH_BLOCKS(threads, )
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        int64_t *o = out + offsets[first / block];
        size_t i = first;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        for (; i + 8 <= last; i += 8) { /* eight bytes a word, little-endian: bit order = position order */
            uint64_t w;
            memcpy(&w, mask + i, 8);
            while (w) {
                *o++ = (int64_t)(8 * i) + __builtin_ctzll(w);
                w &= w - 1;
            }
        }
#endif
        for (; i < last; i++) {
            unsigned w = mask[i];
            while (w) {
                *o++ = (int64_t)(8 * i) + __builtin_ctz(w);
                w &= w - 1;
            }
        }
        const int64_t *p = out + offsets[first / block];
        float *v = vals + offsets[first / block];
        for (; p < o; p++, v++) *v = x[*p];
    }
}
