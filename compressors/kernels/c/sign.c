/* signSGD and EF-signSGD (Bernstein et al., ICML 2018, Alg. 1; Karimireddy et al., ICML 2019, Alg. 1):
 * the packed sign bits of float32 values, the error-feedback pass, and the decode, each one pass.
 * Bit j of byte i is x[8 i + j] >= 0 (sign(0) = +1, NaN gives 0), least significant first
 * (gcbench.compressors.wire.bitpack's 1-bit layout): the bytes of the torch code in
 * gcbench.compressors.kernels.sign and gcbench.compressors.codecs.sign. With AVX2 a byte is one
 * compare and a movemask of eight lanes, where Inductor's code packs through a 64-bit multiply that
 * AVX2 has no vector instruction for; without AVX2 the plain loops. The residual p - s or p + s and
 * the decoded +-s are single float32 operations, so the same bits as the torch code. The scale's
 * exact row sums of |p| (gcbench_abs_row_sums) are float64 operations on integers and powers of two,
 * exact in any order: the torch code's values. Built and loaded by gcbench.compressors.kernels.native.
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

/* Bytes [first, last): bits[i] from x[8 i .. 8 i + 7]; returns 1 when one of those values is NaN or
 * infinite. */
static int sign_bytes(const float *restrict x, size_t first, size_t last, uint8_t *restrict bits) {
    size_t i = first;
    int bad = 0;
#ifdef __AVX2__
    const __m256 zero = _mm256_setzero_ps(), inf = _mm256_set1_ps(__builtin_inff());
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 nonfinite = _mm256_setzero_ps();
    for (; i < last; i++) {
        const __m256 v = _mm256_loadu_ps(x + 8 * i);
        bits[i] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_GE_OQ));
        /* |v| not below inf: Inf, or NaN (unordered) */
        nonfinite = _mm256_or_ps(nonfinite, _mm256_cmp_ps(_mm256_and_ps(v, magnitude), inf, _CMP_NLT_UQ));
    }
    bad = _mm256_movemask_ps(nonfinite) != 0;
#endif
    for (; i < last; i++) {
        unsigned b = 0;
        for (unsigned j = 0; j < 8; j++) {
            const float v = x[8 * i + j];
            b |= (unsigned)(v >= 0.0f) << j;
            bad |= !(v - v == 0.0f);
        }
        bits[i] = (uint8_t)b;
    }
    return bad;
}

/* signSGD's bits of bytes [start, end) in blocks of `block` bytes on `threads` threads (parallel.h);
 * returns 1 when a value read is NaN or infinite. */
int gcbench_sign_bits(const float *restrict x, size_t start, size_t end, size_t block, int threads,
                      uint8_t *restrict bits) {
    const size_t blocks = (end - start + block - 1) / block;
    int bad = 0;
    GCBENCH_BLOCKS(threads, reduction(| : bad))
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        bad |= sign_bytes(x, first, last, bits);
    }
    return bad;
}

/* EF-signSGD's second pass over bytes [first, last): p = g + e (g when e is NULL), its bits, and the
 * residual p - s where p >= 0, else p + s, into res (which may be e: each group of eight values is
 * read before it is written). */
static void ef_sign_bytes(const float *g, const float *e, float s, size_t first, size_t last, uint8_t *restrict bits,
                          float *res) {
    size_t i = first;
#ifdef __AVX2__
    const __m256 zero = _mm256_setzero_ps(), sv = _mm256_set1_ps(s);
    for (; i < last; i++) {
        __m256 p = _mm256_loadu_ps(g + 8 * i);
        if (e) p = _mm256_add_ps(p, _mm256_loadu_ps(e + 8 * i));
        const __m256 pos = _mm256_cmp_ps(p, zero, _CMP_GE_OQ);
        bits[i] = (uint8_t)_mm256_movemask_ps(pos);
        _mm256_storeu_ps(res + 8 * i, _mm256_blendv_ps(_mm256_add_ps(p, sv), _mm256_sub_ps(p, sv), pos));
    }
#endif
    for (; i < last; i++) {
        unsigned b = 0;
        float r[8];
        for (unsigned j = 0; j < 8; j++) {
            const size_t t = 8 * i + j;
            const float p = e ? g[t] + e[t] : g[t];
            const int pos = p >= 0.0f;
            b |= (unsigned)pos << j;
            r[j] = pos ? p - s : p + s;
        }
        for (unsigned j = 0; j < 8; j++) res[8 * i + j] = r[j];
        bits[i] = (uint8_t)b;
    }
}

/* ef_sign_bytes over bytes [start, end) in blocks of `block` bytes on `threads` threads (parallel.h).
 * res may be e (the residual written over the memory) or a buffer of its own. */
void gcbench_ef_sign(const float *g, const float *e, float s, size_t start, size_t end, size_t block,
                     int threads, uint8_t *restrict bits, float *res) {
    const size_t blocks = (end - start + block - 1) / block;
    GCBENCH_BLOCKS(threads, )
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        ef_sign_bytes(g, e, s, first, last, bits, res);
    }
}

/* The decode of bytes [first, last): out[8 i + j] = s where bit j of bits[i] is set, else -s. */
static void sign_decode_bytes(const uint8_t *restrict bits, float s, size_t first, size_t last, float *restrict out) {
    size_t i = first;
#ifdef __AVX2__
    const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 plus = _mm256_set1_ps(s), minus = _mm256_set1_ps(-s);
    for (; i < last; i++) {
        const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits[i]), lanes), lanes);
        _mm256_storeu_ps(out + 8 * i, _mm256_blendv_ps(minus, plus, _mm256_castsi256_ps(set)));
    }
#endif
    for (; i < last; i++) {
        for (unsigned j = 0; j < 8; j++) out[8 * i + j] = (bits[i] >> j) & 1u ? s : -s;
    }
}

/* sign_decode_bytes over bytes [start, end) in blocks of `block` bytes on `threads` threads (parallel.h). */
void gcbench_sign_decode(const uint8_t *restrict bits, float s, size_t start, size_t end, size_t block, int threads,
                         float *restrict out) {
    const size_t blocks = (end - start + block - 1) / block;
    GCBENCH_BLOCKS(threads, )
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        sign_decode_bytes(bits, s, first, last, out);
    }
}

/* The sum of |p| over values [a, b) (p = g + e, or g when e is NULL), exact up to the rounding of
 * each |p| to a multiple of 2^-43 of a power of two above the row's max (gcbench.compressors.kernels.sign
 * _abs_rows and _scaled_back): E = the biased float32 exponent of the max |p| (at least 1), each
 * |p| times 2^(169 - E) in float64 (below 2^43) rounded to an integer, ties to even, by adding and
 * subtracting 2^52; the integers' sum (exact below 2^53: at most 1024 of them) times 2^(E - 169).
 * NaN or infinite when the row holds a NaN or an infinity. */
static double abs_row_sum(const float *restrict g, const float *restrict e, size_t a, size_t b) {
    float m = 0.0f;
    size_t i = a;
#ifdef __AVX2__
    /* 8 lanes at a time: max_ps returns its second operand (the running max) for a NaN lane, as the
     * scalar comparison below ignores a NaN */
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 mv = _mm256_setzero_ps();
    for (; i + 8 <= b; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        if (e) v = _mm256_add_ps(v, _mm256_loadu_ps(e + i));
        mv = _mm256_max_ps(_mm256_and_ps(v, magnitude), mv);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, mv);
    for (int j = 0; j < 8; j++) m = lanes[j] > m ? lanes[j] : m;
#endif
    for (; i < b; i++) {
        const float v = fabsf(e ? g[i] + e[i] : g[i]);
        m = v > m ? v : m;
    }
    uint32_t w;
    memcpy(&w, &m, sizeof w);
    const int exponent = (int)((w >> 23) & 255u) > 1 ? (int)((w >> 23) & 255u) : 1;
    const double up = ldexp(1.0, 169 - exponent), round = 0x1p52;
    double sum = 0.0;
    i = a;
#ifdef __AVX2__
    /* each term an integer below 2^43, at most 1024 of them: every partial sum is exact, so the
     * lanes' order gives the scalar loop's value */
    const __m256d upv = _mm256_set1_pd(up), roundv = _mm256_set1_pd(round);
    __m256d lo_sum = _mm256_setzero_pd(), hi_sum = _mm256_setzero_pd();
    for (; i + 8 <= b; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        if (e) v = _mm256_add_ps(v, _mm256_loadu_ps(e + i));
        v = _mm256_and_ps(v, magnitude);
        __m256d lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), upv);
        __m256d hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), upv);
        lo_sum = _mm256_add_pd(lo_sum, _mm256_sub_pd(_mm256_add_pd(lo, roundv), roundv));
        hi_sum = _mm256_add_pd(hi_sum, _mm256_sub_pd(_mm256_add_pd(hi, roundv), roundv));
    }
    double parts[4];
    _mm256_storeu_pd(parts, _mm256_add_pd(lo_sum, hi_sum));
    sum = (parts[0] + parts[1]) + (parts[2] + parts[3]);
#endif
    for (; i < b; i++) {
        const double y = (double)fabsf(e ? g[i] + e[i] : g[i]) * up;
        sum += (y + round) - round;
    }
    return sum * ldexp(1.0, exponent - 169);
}

/* Rows [start, end) of `row` values of the n values (the last row shorter): out[r] = abs_row_sum of
 * row r, in blocks of `block` rows on `threads` threads (parallel.h). */
void gcbench_abs_row_sums(const float *g, const float *e, size_t n, size_t row, size_t start, size_t end,
                          size_t block, int threads, double *restrict out) {
    const size_t blocks = (end - start + block - 1) / block;
    GCBENCH_BLOCKS(threads, )
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        for (size_t r = first; r < last; r++) {
            out[r] = abs_row_sum(g, e, r * row, (r + 1) * row < n ? (r + 1) * row : n);
        }
    }
}
