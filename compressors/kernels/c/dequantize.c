/* The decode of one- and two-byte quantization codes (QSGD, TernGrad, ZipML; Alistarh et al., NeurIPS 2017;
 * Wen et al., NeurIPS 2017; Zhang et al., ICML 2017): out[i] = fl(fl((float)codes[i] - offset) * f)
 * + base, f the factor of i's row of `span` values, each operation rounded to float32 on its own
 * (no contraction into a fused multiply-add: the pragma below, and -ffp-contract=off in the
 * build), so the same bits as gcbench.compressors.codecs.rounding.decode_packed's torch reference
 * and the compiled kernels gcbench.compressors.kernels.core.dequantize and dequantize16. The loop over a row's bytes is
 * one the compiler vectorises for any x86 ISA (a byte widened to a float lane per element), where
 * Inductor's AVX2 code loads each 8 bytes through a stack buffer. Built and loaded by
 * gcbench.compressors.kernels.native.
 */
#pragma STDC FP_CONTRACT OFF
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "parallel.h"

/* The loop over values [start, end) of rows of `span` values: out[t] = fl(fl(CODE - offset) * f) + base,
 * CODE the code at t (an expression of t), f factors[row] (or factors[0] when one_factor), base
 * added when add_base (the reference adds no zero: -0.0 stays -0.0). A row at a time, so that the
 * inner loop has one factor and vectorises. */
#define DEQUANTIZE_ROWS(CODE)                                                                                   \
    for (size_t i = start; i < end;) {                                                                         \
        const size_t row = i / span;                                                                           \
        size_t stop = (row + 1) * span;                                                                        \
        if (stop > end) stop = end;                                                                            \
        const float f = factors[one_factor ? 0 : row];                                                         \
        if (add_base) {                                                                                        \
            for (size_t t = i; t < stop; t++) out[t] = ((float)(CODE) - offset) * f + base;                    \
        } else {                                                                                               \
            for (size_t t = i; t < stop; t++) out[t] = ((float)(CODE) - offset) * f;                           \
        }                                                                                                      \
        i = stop;                                                                                              \
    }

/* One-byte codes: DEQUANTIZE_ROWS over values [start, end). Returns the largest code read, the
 * caller's range check: one pass of its own over the bytes (a maximum kept across a row's loop would
 * be reduced across its vector lanes at the end of every row, which for QSGD's rows of 128 values
 * cost more than reading the bytes again). */
static unsigned dequantize_u8(const uint8_t *restrict codes, size_t start, size_t end, const float *restrict factors,
                              size_t span, int one_factor, float offset, float base, int add_base,
                              float *restrict out) {
    uint8_t peak = 0;
    for (size_t t = start; t < end; t++) peak = codes[t] > peak ? codes[t] : peak;
    DEQUANTIZE_ROWS(codes[t])
    return peak;
}

/* dequantize_u8 over [start, end) in blocks of `block` values (a multiple of span: whole rows) on
 * `threads` threads (parallel.h); the largest code of all. */
unsigned gcbench_dequantize_u8(const uint8_t *restrict codes, size_t start, size_t end, size_t block, int threads,
                               const float *restrict factors, size_t span, int one_factor, float offset, float base,
                               int add_base, float *restrict out) {
    const size_t blocks = (end - start + block - 1) / block;
    unsigned peak = 0;
    GCBENCH_BLOCKS(threads, reduction(max : peak))
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        const unsigned p = dequantize_u8(codes, first, last, factors, span, one_factor, offset, base, add_base, out);
        peak = p > peak ? p : peak;
    }
    return peak;
}

/* 16-bit codes from their two byte planes (gcbench.compressors.wire.bitpack's 16-bit layout: code =
 * low + 256 high, exact in float32): DEQUANTIZE_ROWS over values [start, end); returns the largest
 * code read. */
static unsigned dequantize_u16(const uint8_t *restrict low, const uint8_t *restrict high, size_t start, size_t end,
                               const float *restrict factors, size_t span, int one_factor, float offset, float base,
                               int add_base, float *restrict out) {
    unsigned peak = 0;
    for (size_t t = start; t < end; t++) {
        const unsigned c = (unsigned)low[t] | (unsigned)high[t] << 8;
        peak = c > peak ? c : peak;
    }
    DEQUANTIZE_ROWS((unsigned)low[t] | (unsigned)high[t] << 8)
    return peak;
}

/* dequantize_u16 over [start, end) in blocks of `block` values (whole rows) on `threads` threads
 * (parallel.h); the largest code of all. */
unsigned gcbench_dequantize_u16(const uint8_t *restrict low, const uint8_t *restrict high, size_t start, size_t end,
                                size_t block, int threads, const float *restrict factors, size_t span, int one_factor,
                                float offset, float base, int add_base, float *restrict out) {
    const size_t blocks = (end - start + block - 1) / block;
    unsigned peak = 0;
    GCBENCH_BLOCKS(threads, reduction(max : peak))
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        const unsigned p = dequantize_u16(low, high, first, last, factors, span, one_factor, offset, base, add_base, out);
        peak = p > peak ? p : peak;
    }
    return peak;
}

/* TernGrad's decode (Wen et al., NeurIPS 2017): bytes [start, end) of 2-bit codes (four per byte,
 * least significant first) to out[4 i .. 4 i + 3] = table[4 * packed[i] ..] (the byte's four values,
 * -s, 0 or s, computed by the caller: the reference's table, so the same bits), in blocks of `block`
 * bytes on `threads` threads (parallel.h). Returns whether a byte holds the code 3, which no encoder
 * writes (both bits of a pair set). */
int gcbench_trits_decode(const uint8_t *restrict packed, size_t start, size_t end, size_t block, int threads,
                         const float *restrict table, float *restrict out) {
    const size_t blocks = (end - start + block - 1) / block;
    unsigned bad = 0;
    GCBENCH_BLOCKS(threads, reduction(| : bad))
    for (size_t b = 0; b < blocks; b++) {
        const size_t first = start + b * block, last = first + block < end ? first + block : end;
        for (size_t i = first; i < last; i++) {
            const unsigned v = packed[i];
            bad |= v & (v >> 1) & 0x55u;
            const float *restrict t = table + 4 * (size_t)v;
            float *restrict o = out + 4 * i;
            o[0] = t[0];
            o[1] = t[1];
            o[2] = t[2];
            o[3] = t[3];
        }
    }
    return bad != 0;
}

/* Codes of b = 1 to 7 bits (gcbench.compressors.wire.bitpack's layout: one bit stream, least
 * significant first, so every eight codes fill b whole bytes) back to one byte each: the b bytes of a
 * group zero-extended to a 64-bit word, then the three shift rounds of bitpack's _split (lanes of 64,
 * 32 and 16 bits; the rounds of gcbench.compressors.kernels.c.quantize's merge_odd undone). Groups
 * [start, end) of the n codes, in blocks of `block` groups on `threads` threads (parallel.h); the last
 * group may hold fewer than eight codes (its bytes end early; the caller checked that its padding
 * bits are zero). */
static inline uint64_t split_bits(uint64_t w, unsigned b) {
    w = (w & ((1ull << (4 * b)) - 1)) | ((w << (32 - 4 * b)) & 0xFFFFFFFF00000000ull);
    w = (w & (((1ull << (2 * b)) - 1) * 0x0000000100000001ull)) | ((w << (16 - 2 * b)) & 0xFFFF0000FFFF0000ull);
    return (w & (((1ull << b) - 1) * 0x0001000100010001ull)) | ((w << (8 - b)) & 0xFF00FF00FF00FF00ull);
}

void gcbench_unpack_bits(const uint8_t *restrict packed, size_t start, size_t end, size_t block, int threads,
                         size_t n, unsigned b, uint8_t *restrict out) {
    const size_t nbytes = (n * b + 7) / 8, blocks = (end - start + block - 1) / block;
    const uint64_t keep = (1ull << (8 * b)) - 1;
    GCBENCH_BLOCKS(threads, )
    for (size_t k = 0; k < blocks; k++) {
        const size_t first = start + k * block, last = first + block < end ? first + block : end;
        for (size_t g = first; g < last; g++) {
            const size_t at = g * b;
            uint64_t w = 0;
            if (at + 8 <= nbytes) {
                memcpy(&w, packed + at, 8); /* one unaligned load; the bytes past the group masked off */
                w &= keep;
            } else {
                for (size_t j = 0; j < b && at + j < nbytes; j++) w |= (uint64_t)packed[at + j] << (8 * j);
            }
            w = split_bits(w, b);
            if (8 * g + 8 <= n) {
                memcpy(out + 8 * g, &w, 8);
            } else {
                for (size_t j = 0; 8 * g + j < n; j++) out[8 * g + j] = (uint8_t)(w >> (8 * j));
            }
        }
    }
}
