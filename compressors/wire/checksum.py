"""The wire format's checksum: CRC-32 with zlib's polynomial and conventions, at memory speed.

Every payload (:meth:`~gcbench.compressors.wire.payload.Payload.to_bytes`) and every framed message
(:mod:`gcbench.envs.framing`) ends with the CRC-32 that ``zlib.crc32`` computes. zlib's
table-driven loop reads about 2 GB/s, so on a 25 MB message the sender's and the receiver's checks
cost more than the codec's encode; ISA-L's carry-less-multiply folding (``isal.isal_zlib.crc32``,
vectorised for SSE, AVX2 and AVX-512 and chosen at run time) returns the same value at over
20 GB/s. It is used where ``isal`` imports, zlib's otherwise: the bytes never depend on which.
"""

from __future__ import annotations

from collections.abc import Iterable

try:
    from isal.isal_zlib import crc32 as _crc32

    #: Which implementation :func:`crc32` runs: ``"isal"`` or ``"zlib"``.
    BACKEND = "isal"
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel falls back
    from zlib import crc32 as _crc32

    BACKEND = "zlib"


def crc32(data: object, value: int = 0) -> int:
    """``zlib.crc32(data, value)``: the CRC-32 of ``data`` (any C-contiguous buffer: bytes,
    bytearray, memoryview, a numpy array) continued from ``value``, so that checksums of the parts
    of a message chain to the checksum of the whole."""
    return _crc32(data, value)


def crc32_parts(parts: Iterable[object], value: int = 0) -> int:
    """The CRC-32 of ``parts`` laid one after another (each a buffer :func:`crc32` takes), continued
    from ``value``: chained over the parts where they lie, without joining them."""
    for part in parts:
        value = _crc32(part, value)
    return value
