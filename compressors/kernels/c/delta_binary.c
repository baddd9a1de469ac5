/* SketchML decode's delta-binary keys (Jiang et al., SIGMOD 2018, Section 3.4;
 * gcbench.compressors.codecs.sketchml.delta_binary holds the torch reference, and its module
 * docstring the wire layout). Built and loaded by gcbench.compressors.kernels.native. */
#include <stddef.h>
#include <stdint.h>

/* data is the stream, nbytes long: nflag bytes of 2-bit flags (4 a byte, the first in the low bits),
 * then each delta's flag + 1 bytes, little-endian, in key order. nseg segments of lengths[s] keys
 * each, every segment's keys the running sum of its deltas from 0, into out. One pass; a flag byte
 * of four one-byte deltas (most of a sparse gradient's) is taken at once. Returns 0 when the stream
 * was decoded, 1 where the reference must decide: a byte short, a flag 10 under no_three_bytes, a
 * delta not in its shortest width, an escape marker (a zero in four bytes: its value is in a tail
 * this pass does not read), bytes left over, or padding bits that are not zero. Deltas are below
 * 2^32, so the sums wrap as the reference's int64 cumsum does (uint64). */
int gcbench_delta_binary_decode(const uint8_t *restrict data, size_t nbytes, size_t nflag,
                                  const int64_t *restrict lengths, size_t nseg, int no_three_bytes,
                                  int64_t *restrict out) {
    if (nbytes < nflag) return 1;
    const uint8_t *restrict body = data + nflag;
    const size_t body_n = nbytes - nflag;
    size_t pos = 0, i = 0;
    for (size_t s = 0; s < nseg; s++) {
        const size_t end = i + (size_t)lengths[s];
        uint64_t acc = 0;
        while (i < end) {
            if ((i & 3) == 0 && end - i >= 4 && data[i >> 2] == 0 && body_n - pos >= 4) {
                acc += body[pos]; out[i] = (int64_t)acc;
                acc += body[pos + 1]; out[i + 1] = (int64_t)acc;
                acc += body[pos + 2]; out[i + 2] = (int64_t)acc;
                acc += body[pos + 3]; out[i + 3] = (int64_t)acc;
                pos += 4;
                i += 4;
                continue;
            }
            const unsigned f = (data[i >> 2] >> (2 * (i & 3))) & 3u;
            if (body_n - pos < f + 1) return 1;
            uint64_t v = 0;
            for (unsigned j = 0; j <= f; j++) v |= (uint64_t)body[pos + j] << (8 * j);
            if (f) {
                unsigned need = v >= (1u << 24) ? 3 : v >= (1u << 16) ? 2 : v >= (1u << 8) ? 1 : 0;
                if (no_three_bytes && need == 2) need = 3;
                if (need != f) return 1;  /* also the escape marker: a zero in four bytes */
            }
            pos += f + 1;
            acc += v;
            out[i++] = (int64_t)acc;
        }
    }
    const unsigned used = (unsigned)((2 * i) % 8);
    if (used && (data[nflag - 1] >> used)) return 1;
    return pos == body_n ? 0 : 1;
}
