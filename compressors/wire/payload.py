"""The gcbench payload and its binary wire format (version 1).

A :class:`Payload` is what a codec's ``encode`` returns: the original tensor's dtype and shape, the
codec's id and parameters, and a tuple of 1-D *sections* (packed bits, indices, scales...) whose
meaning belongs to the codec. ``payload.to_bytes()`` is the exact byte string that would cross the
wire, and ``payload.nbytes`` is its length: every ratio gcbench reports comes from it.

Wire format, version 1 (all integers little-endian)::

    offset  size        field
    0       4           magic b"GCBP"
    4       1           format version (1)
    5       1           flags: bit 0 = the input was a sparse COO tensor (decode returns one)
    6       2           codec id (u16, see gcbench.compressors.registry)
    8       1           dtype code of the original tensor (DTYPE_CODES)
    9       1           ndim (0..MAX_NDIM)
    10      8*ndim      shape, u64 per dimension
    ..      2           number of parameters P (u16)
    ..      P records   u8 key length, key (UTF-8), u8 type tag, value:
                          b'i' int64 | b'f' float64 | b'b' u8 (0/1) | b's' u16 length + UTF-8
    ..      2           number of sections S (u16, at most MAX_SECTIONS)
    ..      9*S         per section: u8 dtype code, u64 element count
    ..      ...         section data, in order, raw little-endian, no padding
    end-4   4           CRC-32 (zlib) of every byte before it

Parsing is defensive: every length is checked against the bytes actually present *before*
anything is allocated (memory used is bounded by ``len(data)`` plus the codec's output, itself
bounded by ``max_numel``), the checksum is verified, and nothing is ever unpickled.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass, field
from typing import Mapping, Union

import torch

from .checksum import crc32, crc32_parts
from ..errors import (
    CorruptPayloadError,
    PayloadError,
    PayloadLimitError,
    TruncatedPayloadError,
    UnsupportedVersionError,
)

MAGIC = b"GCBP"
FORMAT_VERSION = 1
MAX_NDIM = 16
MAX_SECTIONS = 64
#: Largest element count a payload may declare for its tensor unless the receiver says otherwise
#: (2**28 = 268M elements: a 1 GiB float32 / 2 GiB float64 decoded tensor, which fits a normal
#: machine). The receiver knows the size of its own tensor (the DDP hook its bucket) and should pass
#: it as ``max_numel`` to :meth:`Payload.from_bytes` and ``Codec.decode``; larger tensors need a
#: larger ``max_numel`` there.
DEFAULT_MAX_NUMEL = 1 << 28
#: Largest key space of a payload flagged sparse: its decode (by a sparse-native codec) costs what
#: the payload carries, not the key space, so only int64 range applies unless the caller says less.
MAX_SPARSE_NUMEL = (1 << 63) - 1
FLAG_SPARSE = 0x01

#: dtype <-> one-byte code on the wire. Codes are stable: never renumber, only append.
DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float32: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.float64: 4,
    torch.uint8: 5,
    torch.int8: 6,
    torch.int16: 7,
    torch.int32: 8,
    torch.int64: 9,
    torch.bool: 10,
}
CODE_DTYPES: dict[int, torch.dtype] = {v: k for k, v in DTYPE_CODES.items()}

ParamValue = Union[int, float, bool, str]

if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
    raise ImportError("gcbench's wire format assumes a little-endian host")


def _elem_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


_ELEM_SIZE = {code: _elem_size(dt) for dt, code in DTYPE_CODES.items()}


def _encode_params(params: Mapping[str, ParamValue]) -> bytes:
    out = [struct.pack("<H", len(params))]
    for key, value in params.items():
        kb = key.encode("utf-8")
        if not 0 < len(kb) < 256:
            raise PayloadError(f"parameter name {key!r} must be 1..255 UTF-8 bytes")
        out.append(struct.pack("<B", len(kb)) + kb)
        # bool before int: bool is a subclass of int
        if isinstance(value, bool):
            out.append(b"b" + struct.pack("<B", int(value)))
        elif isinstance(value, int):
            out.append(b"i" + struct.pack("<q", value))
        elif isinstance(value, float):
            out.append(b"f" + struct.pack("<d", value))
        elif isinstance(value, str):
            vb = value.encode("utf-8")
            if len(vb) > 0xFFFF:
                raise PayloadError(f"string parameter {key!r} is too long")
            out.append(b"s" + struct.pack("<H", len(vb)) + vb)
        else:
            raise PayloadError(f"parameter {key!r} has type {type(value).__name__}; only int, float, bool, str travel")
    return b"".join(out)


def section_bytes(section: torch.Tensor) -> torch.Tensor:
    """A section's wire bytes, raw little-endian in index order: a flat uint8 view of it on the CPU
    (a copy only for a section off the CPU or not contiguous)."""
    return section.detach().contiguous().cpu().reshape(-1).view(torch.uint8)


@dataclass(frozen=True, eq=False)
class Payload:
    """An encoded tensor: header fields plus the codec's sections.

    Attributes:
        codec_id: wire id of the codec class that wrote it.
        dtype: dtype of the original tensor (``decode`` returns this dtype).
        shape: shape of the original tensor.
        params: the codec's construction parameters (enough to rebuild the codec for decoding).
        sections: 1-D tensors, the codec's data, on the device the codec ran on.
        sparse: the original tensor was a sparse COO tensor.
    """

    codec_id: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    params: Mapping[str, ParamValue]
    sections: tuple[torch.Tensor, ...]
    sparse: bool = False
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_CODES:
            raise PayloadError(f"dtype {self.dtype} has no wire code")
        for s in self.sections:
            if not isinstance(s, torch.Tensor) or s.dim() != 1:
                raise PayloadError("payload sections must be 1-D tensors")
            if s.dtype not in DTYPE_CODES:
                raise PayloadError(f"section dtype {s.dtype} has no wire code")
        if len(self.sections) > MAX_SECTIONS:
            raise PayloadError(f"at most {MAX_SECTIONS} sections")

    # -- sizes -----------------------------------------------------------------------------------

    @property
    def numel(self) -> int:
        """Element count of the original tensor."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """``len(self.to_bytes())``: the real size on the wire, header and checksum included."""
        return len(self.to_bytes())

    @property
    def data_nbytes(self) -> int:
        """Bytes of section data alone (``nbytes`` minus header, descriptors and checksum)."""
        return sum(s.numel() * s.element_size() for s in self.sections)

    @property
    def overhead_nbytes(self) -> int:
        """Bytes that are not section data: header, parameters, section descriptors, checksum."""
        return self.nbytes - self.data_nbytes

    @property
    def device(self) -> torch.device:
        """Device of the sections (CPU for a payload without sections)."""
        return self.sections[0].device if self.sections else torch.device("cpu")

    def shares_memory_with(self, t: torch.Tensor) -> bool:
        """Whether the non-empty tensor ``t`` lies in the storage of one of the sections (a decode
        written into it would overwrite what it reads; a decode that returned a section is one)."""
        if not t.numel():
            return False
        ptr = t.untyped_storage().data_ptr()
        return any(s.device == t.device and s.untyped_storage().data_ptr() == ptr for s in self.sections)

    # -- serialization ---------------------------------------------------------------------------

    def _header(self) -> bytes:
        if len(self.shape) > MAX_NDIM:
            raise PayloadError(f"at most {MAX_NDIM} dimensions travel")
        flags = FLAG_SPARSE if self.sparse else 0
        parts = [
            MAGIC,
            struct.pack("<BBHBB", FORMAT_VERSION, flags, self.codec_id, DTYPE_CODES[self.dtype], len(self.shape)),
            struct.pack(f"<{len(self.shape)}Q", *self.shape),
            _encode_params(self.params),
            struct.pack("<H", len(self.sections)),
        ]
        for s in self.sections:
            parts.append(struct.pack("<BQ", DTYPE_CODES[s.dtype], s.numel()))
        return b"".join(parts)

    def to_bytes(self) -> bytes:
        """Serialize to the version-1 wire format (cached: a payload is immutable). The checksum is
        chained over the header and the sections where they lie, and the bytes are joined once."""
        cached = self._cache.get("bytes")
        if cached is None:
            head = self._header()
            sections = [section_bytes(s).numpy() for s in self.sections]
            crc = crc32_parts([head, *sections])
            cached = b"".join([head, *map(memoryview, sections), struct.pack("<I", crc)])
            self._cache["bytes"] = cached
        return cached

    def to_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The wire bytes as a uint8 tensor (for collectives), optionally on ``device``."""
        t = torch.frombuffer(bytearray(self.to_bytes()), dtype=torch.uint8)
        return t if device is None else t.to(device)

    @classmethod
    def from_tensor(cls, data: torch.Tensor, *, max_numel: int | None = None) -> "Payload":
        """Parse a uint8 tensor holding wire bytes (see :meth:`from_bytes`)."""
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
            raise PayloadError("from_tensor takes a 1-D uint8 tensor")
        if data.layout != torch.strided or data.device.type == "meta":
            raise PayloadError("from_tensor takes a dense tensor holding bytes (not sparse, not on the meta device)")
        return cls.from_bytes(data.cpu().numpy().tobytes(), max_numel=max_numel)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, max_numel: int | None = None) -> "Payload":
        """Parse wire bytes into a CPU payload.

        ``max_numel`` bounds the declared shape (every dimension and the element count); default
        :data:`DEFAULT_MAX_NUMEL`, or :data:`MAX_SPARSE_NUMEL` for a payload flagged sparse (a
        sparse-native codec decodes it at the cost of its keys; ``Codec.decode`` applies the dense
        limit to codecs that are not).

        Raises:
            TruncatedPayloadError: the bytes end early.
            CorruptPayloadError: bad magic, checksum, field values or trailing bytes.
            UnsupportedVersionError: an unknown format version.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise PayloadError(f"from_bytes takes bytes, not {type(data).__name__}")
        try:
            buf = memoryview(data)
            # a strided view (every other byte...) is read in its logical order, as bytes(view) would
            buf = buf.cast("B") if buf.c_contiguous else memoryview(buf.tobytes())
        except ValueError as err:  # a released memoryview
            raise PayloadError(f"from_bytes cannot read this buffer: {err}") from None
        r = _Reader(buf)
        if len(buf) < 4 or bytes(buf[:4]) != MAGIC:
            if len(buf) < 4 and MAGIC.startswith(bytes(buf)):
                raise TruncatedPayloadError("payload ends inside its magic number")
            raise CorruptPayloadError("not a gcbench payload (bad magic)")
        r.pos = 4
        version, flags, codec_id, dcode, ndim = r.unpack("<BBHBB")
        if version != FORMAT_VERSION:
            raise UnsupportedVersionError(f"payload format version {version}; this gcbench reads {FORMAT_VERSION}")
        if flags & ~FLAG_SPARSE:
            raise CorruptPayloadError(f"unknown flag bits {flags:#x}")
        if dcode not in CODE_DTYPES:
            raise CorruptPayloadError(f"unknown dtype code {dcode}")
        if ndim > MAX_NDIM:
            raise CorruptPayloadError(f"ndim {ndim} exceeds {MAX_NDIM}")
        shape = r.unpack(f"<{ndim}Q") if ndim else ()
        if max_numel is None:
            max_numel = MAX_SPARSE_NUMEL if flags & FLAG_SPARSE else DEFAULT_MAX_NUMEL
        check_shape(shape, max_numel)
        params = r.params()
        (nsec,) = r.unpack("<H")
        if nsec > MAX_SECTIONS:
            raise CorruptPayloadError(f"{nsec} sections exceed {MAX_SECTIONS}")
        descs = []
        total = 0
        for _ in range(nsec):
            scode, count = r.unpack("<BQ")
            if scode not in CODE_DTYPES:
                raise CorruptPayloadError(f"unknown section dtype code {scode}")
            size = count * _ELEM_SIZE[scode]
            total += size
            descs.append((scode, count, size))
        expected = r.pos + total + 4
        if len(buf) < expected:
            raise TruncatedPayloadError(f"payload is {len(buf)} bytes; its header says {expected}")
        if len(buf) > expected:
            raise CorruptPayloadError(f"{len(buf) - expected} trailing bytes after the payload")
        (crc,) = struct.unpack_from("<I", buf, expected - 4)
        if crc32(buf[: expected - 4]) != crc:
            raise CorruptPayloadError("checksum mismatch: the payload was corrupted")
        sections = []
        pos = r.pos
        for scode, count, size in descs:
            raw = torch.frombuffer(bytearray(buf[pos : pos + size]), dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
            sections.append(raw.view(CODE_DTYPES[scode]) if size else torch.empty(0, dtype=CODE_DTYPES[scode]))
            pos += size
        payload = cls(codec_id, CODE_DTYPES[dcode], tuple(shape), params, tuple(sections), bool(flags & FLAG_SPARSE))
        payload._cache["bytes"] = bytes(buf)
        return payload


def check_shape(shape: tuple[int, ...], max_numel: int = DEFAULT_MAX_NUMEL) -> int:
    """Range-check a declared tensor shape and return its element count.

    Every dimension must be an int in ``[0, max_numel]`` (a zero dimension does not exempt the
    others: ``(0, 2**63)`` is refused), and so must their product.

    Raises:
        PayloadLimitError: a dimension or the element count is out of range.
    """
    if isinstance(max_numel, bool) or not isinstance(max_numel, int) or max_numel < 0:
        raise PayloadLimitError(f"max_numel must be an int >= 0, got {max_numel!r}")
    numel = 1
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= max_numel:
            raise PayloadLimitError(
                f"declared shape {tuple(shape)} has a dimension outside [0, max_numel={max_numel}]"
            )
        numel *= d
        if numel > max_numel:
            raise PayloadLimitError(f"declared shape {tuple(shape)} exceeds max_numel={max_numel} elements")
    return numel


class _Reader:
    """Bounds-checked cursor over wire bytes."""

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise TruncatedPayloadError(f"payload ends at byte {len(self.buf)} inside a field at {self.pos}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def params(self) -> dict[str, ParamValue]:
        (count,) = self.unpack("<H")
        out: dict[str, ParamValue] = {}
        for _ in range(count):
            (klen,) = self.unpack("<B")
            try:
                key = bytes(self.take(klen)).decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorruptPayloadError("parameter name is not UTF-8") from e
            tag = bytes(self.take(1))
            if tag == b"i":
                (value,) = self.unpack("<q")
            elif tag == b"f":
                (value,) = self.unpack("<d")
            elif tag == b"b":
                (raw,) = self.unpack("<B")
                if raw > 1:
                    raise CorruptPayloadError("boolean parameter is neither 0 nor 1")
                value = bool(raw)
            elif tag == b"s":
                (slen,) = self.unpack("<H")
                try:
                    value = bytes(self.take(slen)).decode("utf-8")
                except UnicodeDecodeError as e:
                    raise CorruptPayloadError("string parameter is not UTF-8") from e
            else:
                raise CorruptPayloadError(f"unknown parameter type tag {tag!r}")
            if key in out:
                raise CorruptPayloadError(f"parameter {key!r} appears twice")
            out[key] = value
        return out
