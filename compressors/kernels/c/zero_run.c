/* 3LC's zero-run coding (Lim, Andersen, Kaminsky, SysML 2019, Section 3.3) in one pass each way.
 *
 * A run of k (2..14) quartic bytes 121 (five quantized zeros) is the byte 243 + k - 2; longer runs
 * are cut greedily (14, 14, ..., remainder; a remainder of 1 stays 121). The Python reference is
 * gcbench.compressors.codecs.threelc.zero_run (vectorised numpy / torch); these loops give the same
 * bytes and reject the same streams. Built and loaded by gcbench.compressors.kernels.native.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define ZERO_GROUP 121
#define MAX_RUN 14
#define FULL_RUN 255

/* Bit i set where byte i of p[0..64) is not 121 (a kept byte). */
static inline uint64_t kept_mask(const uint8_t *p) {
#if defined(__AVX2__)
    const __m256i z = _mm256_set1_epi8((char)ZERO_GROUP);
    uint32_t lo = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)p), z));
    uint32_t hi = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(p + 32)), z));
    return ~(((uint64_t)hi << 32) | lo);
#else
    uint64_t m = 0;
    for (int i = 0; i < 64; i++) m |= (uint64_t)(p[i] != ZERO_GROUP) << i;
    return m;
#endif
}

/* Writes a run of `run` zero groups at out + o: run / 14 bytes 255, then the remainder's code
 * (remainder[r], r = run % 14; nothing for r = 0). Returns the new output length. Writes up to
 * 16 bytes past it (the caller's slack), without branches on the common short runs. */
static inline size_t put_run(uint8_t *restrict out, size_t o, size_t run, const uint8_t *restrict remainder) {
    size_t full = run / MAX_RUN, rem = run - full * MAX_RUN;
    if (full <= 16)
        memset(out + o, FULL_RUN, 16); /* a constant size: one vector store, no call */
    else
        memset(out + o, FULL_RUN, full);
    o += full;
    out[o] = remainder[rem];
    return o + (rem != 0);
}

/* Greedy zero-run encoding of src[0..n) into out, which holds n + 16 bytes (the output is never
 * longer than the input). remainder: 14 bytes, the code of a run's last chunk of r = 0..13 zero
 * groups (entry 0 unused). Returns the output's length. Kept bytes are found 64 at a time. */
size_t gcbench_zero_run_encode(const uint8_t *restrict src, size_t n, uint8_t *restrict out,
                               const uint8_t *restrict remainder) {
    size_t o = 0, run = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t m = kept_mask(src + i);
        size_t next = 0; /* first position of this block not yet counted */
        while (m) {
            size_t p = (size_t)__builtin_ctzll(m);
            m &= m - 1;
            o = put_run(out, o, run + p - next, remainder);
            out[o++] = src[i + p];
            run = 0;
            next = p + 1;
        }
        run += 64 - next;
    }
    for (; i < n; i++) {
        if (src[i] == ZERO_GROUP) {
            run++;
        } else {
            o = put_run(out, o, run, remainder);
            out[o++] = src[i];
            run = 0;
        }
    }
    if (run) o = put_run(out, o, run, remainder);
    return o;
}

/* Expands and validates a zero-run stream d[0..m) into the quartic stream q[0..groups), in one pass.
 * Tables (256 entries, indexed by a stream byte): first = the quartic byte of its first group (121
 * for a run code), span = the quartic bytes it stands for (1, or k for a run code), classes = bit 0:
 * it ends a zero-run (121, 243..254), bit 1: it continues one (121, 243..255), bit 2: a non-zero
 * group. Returns 0, or 1 when the stream is not canonical (a byte that ends a zero-run followed by
 * one that continues it: the greedy encoder merges those), else 2 when it expands to a length other
 * than groups (the order of the reference's checks); *total = the length it expands to, *nonzero =
 * its non-zero groups. Never writes past q + groups. */
int gcbench_zero_run_expand(const uint8_t *restrict d, size_t m, const uint8_t *restrict first,
                            const uint8_t *restrict span, const uint8_t *restrict classes,
                            uint8_t *restrict q, size_t groups, size_t *total, size_t *nonzero) {
    size_t g = 0, nz = 0, i = 0;
    unsigned bad = 0, prev = 0;
    memset(q, ZERO_GROUP, groups);
    for (; i < m; i++) {
        unsigned b = d[i], c = classes[b];
        if (g >= groups) break;
        q[g] = first[b];
        g += span[b];
        nz += c >> 2;
        bad |= prev & (c >> 1);
        prev = c;
    }
    for (; i < m; i++) { /* past the end: no writes, the length and the checks only */
        unsigned b = d[i], c = classes[b];
        g += span[b];
        nz += c >> 2;
        bad |= prev & (c >> 1);
        prev = c;
    }
    *total = g;
    *nonzero = nz;
    if (bad & 1) return 1;
    return g != groups ? 2 : 0;
}

/* Zeros (+0.0f: all bits clear) for the values of groups [g0, g1) that lie below n. */
static inline void zero_groups(float *restrict out, size_t n, size_t g0, size_t g1) {
    size_t a = 5 * g0, e = 5 * g1;
    if (e > n) e = n;
    if (a < e) memset(out + a, 0, (e - a) * sizeof(float));
}

/* Decodes a 3LC zero-run stream d[0..m) straight into its n float32 values out[0..n) (the stream
 * stands for groups = ceil(n / 5) quartic bytes), validating it in the same pass: the expansion of
 * gcbench_zero_run_expand and the table decode without the quartic stream in between. span and
 * classes: its tables; digits: 256 rows of the five shifted trits (0, 1, 2) of a quartic byte, in
 * the order they decode (rows 243..255 unused); a shifted trit t decodes to {-M, +0, M}[t]. Returns
 * bits: 1 the stream is not canonical, 2 it expands to *total quartic bytes, not groups, 4 the last
 * byte is a quartic byte whose padding trits (those past n) are not quantized zeros (shifted trit
 * 1); *nonzero = its non-zero groups. Never writes past out + n. */
int gcbench_zero_run_decode(const uint8_t *restrict d, size_t m, const uint8_t *restrict span,
                            const uint8_t *restrict classes, const uint8_t *restrict digits, float M,
                            float *restrict out, size_t n, size_t *total, size_t *nonzero) {
    const float value[3] = {-M, 0.0f, M};
    float table[243 * 5]; /* row b: the five decoded values of the quartic byte b */
    for (size_t k = 0; k < 243 * 5; k++) table[k] = value[digits[k]];
    size_t groups = (n + 4) / 5, full = n / 5, g = 0, nz = 0;
    unsigned bad = 0, prev = 0;
    for (size_t i = 0; i < m; i++) {
        unsigned b = d[i], c = classes[b];
        size_t s = span[b];
        unsigned f = b < 243 ? b : ZERO_GROUP; /* the quartic byte of its first group */
        /* the first group's five values (fewer for a partial last group), whatever the byte: no
         * branch on its class; then the rest of a run's zeros */
        if (g < full) {
            memcpy(out + 5 * g, table + 5 * f, 5 * sizeof(float));
            if (s > 1) zero_groups(out, n, g + 1, g + s);
        } else if (g < groups) {
            memcpy(out + 5 * g, table + 5 * f, (n - 5 * g) * sizeof(float));
        }
        g += s;
        nz += c >> 2;
        bad |= prev & (c >> 1);
        prev = c;
    }
    *total = g;
    *nonzero = nz;
    int status = (bad & 1) ? 1 : (g != groups ? 2 : 0);
    if (m && n % 5 && d[m - 1] < 243) {
        const uint8_t *t = digits + 5 * d[m - 1];
        for (size_t j = n % 5; j < 5; j++)
            if (t[j] != 1) status |= 4;
    }
    return status;
}
