/* The sign hashes of Count Sketch, evaluated directly (the packed sign bits that
 * gcbench.compressors.codecs.countsketch.hashes.HashTables holds, and the flags of a table without
 * them). Built and loaded by gcbench.compressors.kernels.native.
 */
#include <stddef.h>
#include <stdint.h>

/* CSVec's sign hashes (Ivkin et al., NeurIPS 2019): for each of the n coordinates x = first + t
 * and each row j < r, the polynomial ((e3 x + e2) x + e1) x + e0 mod p = 2^61 - 1 with row j's
 * coefficients coef[6 j + 2 .. 6 j + 5] (each in [0, p), x < p); the sign is -1 where that value is
 * even. Writes the flag (1 = negative) of row j and coordinate t to out[(j / 8) * stride + t], bit
 * j % 8 when `packed`, else to out[j * stride + t] as a whole byte: the bytes of
 * gcbench.compressors.codecs.countsketch.hashes.negative_flags. Exact: every product is formed in
 * 128 bits and reduced with the Mersenne fold. */
__extension__ typedef unsigned __int128 u128;
#define PRIME (((uint64_t)1 << 61) - 1)

/* (a x + b) mod p for a, b, x < p: the product is below 2^122, one fold brings it below 2^62, the
 * sum and a second fold below 2^61 + 2, one conditional subtraction into [0, p). */
static inline uint64_t horner_step(uint64_t a, uint64_t x, uint64_t b) {
    u128 m = (u128)a * x;
    uint64_t s = (uint64_t)(m & PRIME) + (uint64_t)(m >> 61) + b;
    s = (s & PRIME) + (s >> 61);
    return s >= PRIME ? s - PRIME : s;
}

void gcbench_sketch_negbits(uint8_t *restrict out, const int64_t *restrict coef, unsigned r, uint64_t first,
                            size_t n, size_t stride, int packed) {
    for (unsigned j0 = 0; j0 < r; j0 += 8) {
        const unsigned rows = r - j0 < 8 ? r - j0 : 8;
        for (unsigned q = 0; q < rows; q++) {
            const int64_t *e = coef + 6 * (size_t)(j0 + q);
            const uint64_t e3 = (uint64_t)e[2], e2 = (uint64_t)e[3], e1 = (uint64_t)e[4], e0 = (uint64_t)e[5];
            uint8_t *o = packed ? out + (size_t)(j0 / 8) * stride : out + (size_t)(j0 + q) * stride;
            const unsigned shift = packed ? q : 0;
            for (size_t t = 0; t < n; t++) {
                const uint64_t x = first + t;
                const uint64_t h = horner_step(horner_step(horner_step(e3, x, e2), x, e1), x, e0);
                const uint8_t flag = (uint8_t)((~h & 1) << shift);
                if (packed && q) o[t] |= flag;
                else o[t] = flag;
            }
        }
    }
}
