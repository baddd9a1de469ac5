"""The wire format's checksum (gcbench.compressors.wire.checksum): zlib's CRC-32, whichever library computes it."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from gcbench.compressors.wire import checksum


@pytest.mark.parametrize("n", [0, 1, 3, 15, 16, 17, 63, 64, 65, 255, 4096, (1 << 20) + 5])
@pytest.mark.parametrize("start", [0, 1, 0xFFFFFFFF, 0x1234ABCD])
def test_crc32_is_zlibs_on_every_length_and_start_value(n, start):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    assert checksum.crc32(data, start) == zlib.crc32(data.tobytes(), start)
    assert checksum.crc32(data.tobytes()) == zlib.crc32(data.tobytes())


def test_crc32_reads_any_contiguous_buffer_and_chains_over_parts():
    raw = np.random.default_rng(1).integers(0, 256, 100_003, dtype=np.uint8)
    whole = zlib.crc32(raw.tobytes())
    view = memoryview(raw)
    for cut in (0, 1, 7, 50_000, 100_003):  # the parts at unaligned offsets, as a message's sections lie
        assert checksum.crc32(view[cut:], checksum.crc32(view[:cut])) == whole
        assert checksum.crc32(bytearray(raw[cut:].tobytes()), checksum.crc32(raw[:cut])) == whole
        assert checksum.crc32_parts([view[:cut], raw[cut : cut + 3], view[cut + 3 :]]) == whole
    assert checksum.crc32_parts([raw[:9], raw[9:]], 12345) == zlib.crc32(raw.tobytes(), 12345)
    assert checksum.crc32_parts([]) == 0
    assert checksum.BACKEND in ("isal", "zlib")
