/* The float16 cast of float32 values and its widening back, each one pass that also says whether a
 * float16 value is NaN or infinite (exponent bits all set): the cast and the scan of its result that
 * gcbench.compressors.codecs.identity.Cast makes, without the second read. With F16C (every AVX2
 * CPU has it) the conversions are vcvtps2ph with round-to-nearest-even, the rounding of torch's
 * cast, and vcvtph2ps, exact; a build without F16C has neither function's fast path and says so
 * (gcbench_cast16_native), and the caller keeps torch's ops. Built and loaded by
 * gcbench.compressors.kernels.native.
 */
#include <stddef.h>
#include <stdint.h>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define GCBENCH_F16C 1
#else
#define GCBENCH_F16C 0
#endif

#include "parallel.h"

/* 1 when the conversions below are built (F16C), else 0: the functions then do nothing. */
int gcbench_cast16_native(void) { return GCBENCH_F16C; }

#if GCBENCH_F16C
/* Values [first, last) of x to float16 in q; returns 1 when one of the results is NaN or infinite. */
static int to_f16(const float *restrict x, size_t first, size_t last, uint16_t *restrict q) {
    const __m128i exponent = _mm_set1_epi16(0x7C00);
    __m128i bad = _mm_setzero_si128();
    size_t i = first;
    for (; i + 8 <= last; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(q + i), h);
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent));
    }
    int flag = _mm_movemask_epi8(bad) != 0;
    for (; i < last; i++) {
        const uint16_t h = (uint16_t)_mm_extract_epi16(
            _mm_cvtps_ph(_mm_set_ss(x[i]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0);
        q[i] = h;
        flag |= (h & 0x7C00) == 0x7C00;
    }
    return flag;
}

/* Values [first, last) of q widened to float32 in out; returns 1 when one of them is NaN or infinite. */
static int from_f16(const uint16_t *restrict q, size_t first, size_t last, float *restrict out) {
    const __m128i exponent = _mm_set1_epi16(0x7C00);
    __m128i bad = _mm_setzero_si128();
    size_t i = first;
    for (; i + 8 <= last; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(q + i));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent));
    }
    int flag = _mm_movemask_epi8(bad) != 0;
    for (; i < last; i++) {
        out[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(q[i])));
        flag |= (q[i] & 0x7C00) == 0x7C00;
    }
    return flag;
}
#endif

/* NAME: STEP (to_f16 or from_f16) over [start, end) of src into dst, in blocks of `block` values on
 * `threads` threads (parallel.h); returns 1 when a float16 value is NaN or infinite (for the cast: a
 * non-finite input, or a finite one beyond the float16 range), 0 otherwise, -1 without F16C
 * (nothing written). */
#if GCBENCH_F16C
#define CONVERT(NAME, STEP, SRC_T, DST_T)                                                                       \
    int NAME(const SRC_T *restrict src, size_t start, size_t end, size_t block, int threads, DST_T *restrict dst) { \
        const size_t blocks = (end - start + block - 1) / block;                                               \
        int bad = 0;                                                                                           \
        GCBENCH_BLOCKS(threads, reduction(| : bad))                                                            \
        for (size_t b = 0; b < blocks; b++) {                                                                  \
            const size_t first = start + b * block, last = first + block < end ? first + block : end;         \
            bad |= STEP(src, first, last, dst);                                                                \
        }                                                                                                      \
        return bad;                                                                                            \
    }
#else
#define CONVERT(NAME, STEP, SRC_T, DST_T)                                                                       \
    int NAME(const SRC_T *restrict src, size_t start, size_t end, size_t block, int threads, DST_T *restrict dst) { \
        (void)src, (void)start, (void)end, (void)block, (void)threads, (void)dst;                              \
        return -1;                                                                                             \
    }
#endif

CONVERT(gcbench_to_f16, to_f16, float, uint16_t)
CONVERT(gcbench_from_f16, from_f16, uint16_t, float)
