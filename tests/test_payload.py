"""The wire format: exact layout, round trips, and hostile bytes."""

from __future__ import annotations

import struct
import zlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gcbench import compressors
from gcbench.compressors import (
    CorruptPayloadError,
    Payload,
    PayloadError,
    TruncatedPayloadError,
    UnsupportedVersionError,
)
from gcbench.compressors.wire.payload import DTYPE_CODES, MAGIC

SECTION_DTYPES = list(DTYPE_CODES)


def _payload(shape=(3, 4), params=None, sections=None, sparse=False, dtype=torch.float32) -> Payload:
    if sections is None:
        sections = (torch.arange(12, dtype=torch.float32), torch.tensor([1, 2, 3], dtype=torch.uint8))
    return Payload(1, dtype, tuple(shape), params or {}, tuple(sections), sparse)


def _naive_bytes(p: Payload) -> bytes:
    """The layout written out independently from the docstring of payload.py."""
    out = bytearray(MAGIC)
    out += bytes([1, 1 if p.sparse else 0])
    out += struct.pack("<H", p.codec_id)
    out += bytes([DTYPE_CODES[p.dtype], len(p.shape)])
    for d in p.shape:
        out += struct.pack("<Q", d)
    out += struct.pack("<H", len(p.params))
    for k, v in p.params.items():
        out += bytes([len(k.encode())]) + k.encode()
        if isinstance(v, bool):
            out += b"b" + bytes([int(v)])
        elif isinstance(v, int):
            out += b"i" + struct.pack("<q", v)
        elif isinstance(v, float):
            out += b"f" + struct.pack("<d", v)
        else:
            out += b"s" + struct.pack("<H", len(v.encode())) + v.encode()
    out += struct.pack("<H", len(p.sections))
    for s in p.sections:
        out += bytes([DTYPE_CODES[s.dtype]]) + struct.pack("<Q", s.numel())
    for s in p.sections:
        out += s.contiguous().view(torch.uint8).numpy().tobytes()
    out += struct.pack("<I", zlib.crc32(bytes(out)))
    return bytes(out)


def test_layout_matches_the_documented_format():
    p = _payload(params={"bits": 8, "ratio": 0.25, "exact": True, "mode": "paper"}, sparse=True)
    assert p.to_bytes() == _naive_bytes(p)
    assert p.nbytes == len(p.to_bytes())
    assert p.data_nbytes == 12 * 4 + 3
    assert p.overhead_nbytes == p.nbytes - p.data_nbytes


@given(
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=4),
    params=st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans(), st.text(max_size=20)),
        max_size=5,
    ),
    sec_dtypes=st.lists(st.sampled_from(SECTION_DTYPES), max_size=4),
    seclen=st.integers(0, 9),
    sparse=st.booleans(),
)
def test_roundtrip_any_header(shape, params, sec_dtypes, seclen, sparse):
    sections = tuple((torch.arange(seclen) % 2).to(dt) for dt in sec_dtypes)
    p = Payload(7, torch.bfloat16, tuple(shape), params, sections, sparse)
    q = Payload.from_bytes(p.to_bytes())
    assert (q.codec_id, q.dtype, q.shape, dict(q.params), q.sparse) == (7, torch.bfloat16, tuple(shape), params, sparse)
    assert len(q.sections) == len(sections)
    for a, b in zip(sections, q.sections):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert q.to_bytes() == p.to_bytes()
    assert Payload.from_tensor(p.to_tensor()).to_bytes() == p.to_bytes()


def test_every_truncation_is_a_typed_error():
    raw = _payload(params={"k": 3, "s": "x"}).to_bytes()
    for cut in range(len(raw)):
        with pytest.raises((TruncatedPayloadError, CorruptPayloadError)):
            Payload.from_bytes(raw[:cut])


def test_every_single_bit_flip_is_detected():
    raw = bytearray(_payload(params={"k": 3}).to_bytes())
    for i in range(len(raw)):
        for bit in (0, 3, 7):
            bad = bytearray(raw)
            bad[i] ^= 1 << bit
            with pytest.raises(PayloadError):
                Payload.from_bytes(bytes(bad))


def test_trailing_bytes_rejected():
    with pytest.raises(CorruptPayloadError, match="trailing"):
        Payload.from_bytes(_payload().to_bytes() + b"\0")


def test_unknown_version_rejected():
    raw = bytearray(_payload().to_bytes())
    raw[4] = 2
    with pytest.raises(UnsupportedVersionError):
        Payload.from_bytes(bytes(raw))


def _forge(header_tail: bytes, data: bytes = b"") -> bytes:
    body = MAGIC + header_tail + data
    return body + struct.pack("<I", zlib.crc32(body))


def test_huge_section_length_does_not_allocate():
    # a valid-looking header claiming a 2**60-element section, with a correct checksum
    tail = struct.pack("<BBHBB", 1, 0, 1, 1, 1) + struct.pack("<Q", 4) + struct.pack("<H", 0)
    tail += struct.pack("<H", 1) + struct.pack("<BQ", 1, 2**60)
    with pytest.raises(TruncatedPayloadError):
        Payload.from_bytes(_forge(tail, b"\0" * 16))


def test_huge_declared_shape_is_refused():
    tail = struct.pack("<BBHBB", 1, 0, 1, 1, 2) + struct.pack("<2Q", 2**40, 2**40) + struct.pack("<HH", 0, 0)
    with pytest.raises(CorruptPayloadError, match="max_numel"):
        Payload.from_bytes(_forge(tail))


@pytest.mark.parametrize(
    "tail",
    [
        struct.pack("<BBHBB", 1, 0x80, 1, 1, 0) + struct.pack("<HH", 0, 0),  # unknown flag
        struct.pack("<BBHBB", 1, 0, 1, 99, 0) + struct.pack("<HH", 0, 0),  # unknown dtype
        struct.pack("<BBHBB", 1, 0, 1, 1, 17) + struct.pack("<17Q", *([1] * 17)) + struct.pack("<HH", 0, 0),
        struct.pack("<BBHBB", 1, 0, 1, 1, 0) + struct.pack("<H", 1) + b"\x01kz" + struct.pack("<H", 0),  # bad tag
        struct.pack("<BBHBB", 1, 0, 1, 1, 0) + struct.pack("<H", 1) + b"\x01kb\x02" + struct.pack("<H", 0),
        struct.pack("<BBHBB", 1, 0, 1, 1, 0) + struct.pack("<H", 2) + b"\x01ki" + bytes(8) + b"\x01ki" + bytes(8) + struct.pack("<H", 0),
        struct.pack("<BBHBB", 1, 0, 1, 1, 0) + struct.pack("<H", 0) + struct.pack("<H", 65),  # too many sections
        struct.pack("<BBHBB", 1, 0, 1, 1, 0) + struct.pack("<H", 0) + struct.pack("<H", 1) + struct.pack("<BQ", 77, 0),
    ],
    ids=["flag", "dtype", "ndim", "tag", "bool", "duplicate-param", "nsections", "section-dtype"],
)
def test_impossible_fields_rejected(tail):
    with pytest.raises(CorruptPayloadError):
        Payload.from_bytes(_forge(tail))


def test_bad_magic_and_non_bytes():
    with pytest.raises(CorruptPayloadError, match="magic"):
        Payload.from_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(PayloadError):
        Payload.from_bytes("GCBP")  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        Payload.from_tensor(torch.zeros(4))


def test_a_pickle_blob_is_refused():
    import pickle

    raw = pickle.dumps({"evil": 1})
    with pytest.raises(PayloadError):
        Payload.from_bytes(raw)


@pytest.mark.parametrize("name", compressors.names())
def test_pickle_never_involved(name, monkeypatch):
    """A payload of every codec goes encode -> bytes -> parse -> decode with every unpickling loader
    (pickle.load/loads, torch.load, numpy.load) made to raise, and none of them is called."""
    import pickle

    import numpy

    calls: list[str] = []

    def refuse(who):
        def loader(*args, **kwargs):
            calls.append(who)
            raise AssertionError(f"{who} called on the payload path")

        return loader

    for owner, attr, who in ((pickle, "loads", "pickle.loads"), (pickle, "load", "pickle.load"),
                             (torch, "load", "torch.load"), (numpy, "load", "numpy.load")):
        monkeypatch.setattr(owner, attr, refuse(who))

    x = torch.randn((12, 10), generator=torch.Generator().manual_seed(0))
    codec = compressors.get(name)
    payload = codec.encode(x, key="w")
    expected = codec.decode(payload)
    wire = payload.to_bytes()
    parsed = Payload.from_bytes(wire)
    assert parsed.to_bytes() == wire
    out = compressors.decode(parsed)
    assert tuple(out.shape) == tuple(x.shape) and out.dtype == x.dtype
    assert torch.equal(out, expected)
    assert calls == []


def test_sections_must_be_1d_with_wire_dtypes():
    with pytest.raises(PayloadError):
        _payload(sections=(torch.zeros(2, 2),))
    with pytest.raises(PayloadError):
        _payload(sections=(torch.zeros(2, dtype=torch.complex64),))
    with pytest.raises(PayloadError):
        _payload(params={"x": [1, 2]}).to_bytes()
