/* The decode of one-byte quantization codes (QSGD, TernGrad, ZipML; Alistarh et al., NeurIPS 2017;
 * Wen et al., NeurIPS 2017; Zhang et al., ICML 2017): out[i] = fl(fl((float)codes[i] - offset) * f)
 * + base, f the factor of i's row of `span` values, each operation rounded to float32 on its own
 * (no contraction into a fused multiply-add: the pragma below, and -ffp-contract=off in the
 * build), so the same bits as gcbench.compressors.codecs.qsgd.decode_packed's torch reference and
 * the compiled kernel gcbench.compressors.kernels.core.dequantize. The loop over a row's bytes is
 * one the compiler vectorises for any x86 ISA (a byte widened to a float lane per element), where
 * Inductor's AVX2 code loads each 8 bytes through a stack buffer. Built and loaded by
 * gcbench.compressors.kernels.native.
 */
#pragma STDC FP_CONTRACT OFF
#include <stddef.h>
#include <stdint.h>

/* Values [start, end) of rows of `span` values: factor factors[row] (or factors[0] when one_factor),
 * base added when add_base (the reference adds no zero: -0.0 stays -0.0). Returns the largest code
 * read, the caller's range check: one pass of its own over the bytes (a maximum kept across a row's
 * loop would be reduced across its vector lanes at the end of every row, which for QSGD's rows of
 * 128 values cost more than reading the bytes again). */
unsigned gcbench_dequantize_u8(const uint8_t *restrict codes, size_t start, size_t end, const float *restrict factors,
                               size_t span, int one_factor, float offset, float base, int add_base,
                               float *restrict out) {
    uint8_t peak = 0;
    for (size_t t = start; t < end; t++) peak = codes[t] > peak ? codes[t] : peak;
    size_t i = start;
    while (i < end) {
        const size_t row = i / span;
        size_t stop = (row + 1) * span;
        if (stop > end) stop = end;
        const float f = factors[one_factor ? 0 : row];
        if (add_base) {
            for (size_t t = i; t < stop; t++) out[t] = ((float)codes[t] - offset) * f + base;
        } else {
            for (size_t t = i; t < stop; t++) out[t] = ((float)codes[t] - offset) * f;
        }
        i = stop;
    }
    return peak;
}

/* TernGrad's decode (Wen et al., NeurIPS 2017): bytes [start, end) of 2-bit codes (four per byte,
 * least significant first) to out[4 i .. 4 i + 3] = table[4 * packed[i] ..] (the byte's four values,
 * -s, 0 or s, computed by the caller: the reference's table, so the same bits). Returns whether a
 * byte holds the code 3, which no encoder writes (both bits of a pair set). */
int gcbench_trits_decode(const uint8_t *restrict packed, size_t start, size_t end, const float *restrict table,
                         float *restrict out) {
    unsigned bad = 0;
    for (size_t i = start; i < end; i++) {
        const unsigned b = packed[i];
        bad |= b & (b >> 1) & 0x55u;
        const float *restrict v = table + 4 * (size_t)b;
        float *restrict o = out + 4 * i;
        o[0] = v[0];
        o[1] = v[1];
        o[2] = v[2];
        o[3] = v[3];
    }
    return bad != 0;
}
