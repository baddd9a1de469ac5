"""Framing with a header registry per (sender, receiver, key): gcbench.envs.framing."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import GCBenchError, get
from gcbench.compressors.wire.payload import Payload
from gcbench.envs.framing import (
    CorruptFrameError,
    FramedLinks,
    FrameReceiver,
    FrameSender,
    FramingError,
    TruncatedFrameError,
    UnknownHeaderError,
)

CODECS = [("3lc", {"sparsity": 1.5}), ("topk", {"ratio": 0.05}), ("zipml8", {}), ("identity", {}), ("terngrad", {})]


def _payloads(name: str, params: dict, n: int = 3, shape=(16, 3, 3, 3)) -> list[Payload]:
    codec = get(name, **params)
    g = torch.Generator().manual_seed(0)
    return [codec.encode(torch.randn(shape, generator=g), key="w", generator=torch.Generator().manual_seed(i)) for i in range(n)]


@pytest.mark.parametrize("name,params", CODECS)
def test_round_trip_with_references(name, params):
    """The first message defines the header, later ones reference it; every one decodes to the
    same payload bytes, and the codec decodes the received payload to the same tensor."""
    tx, rx = FrameSender(0), FrameReceiver(-1)
    codec = get(name, **params)
    for i, p in enumerate(_payloads(name, params)):
        msg = tx.frame(p, -1, "w")
        got = rx.unframe(msg, 0)
        assert got.defined == (i == 0)
        assert got.key == "w" and got.nbytes == len(msg)
        assert got.payload.to_bytes() == p.to_bytes()
        assert torch.equal(codec.decode(got.payload), codec.decode(p))
        if i > 0:  # a reference message is shorter than the self-describing payload
            assert len(msg) < p.nbytes


def test_first_message_carries_the_full_header_and_is_counted():
    ps = _payloads("3lc", {"sparsity": 1.0}, n=2)
    tx = FrameSender(0)
    first, second = tx.frame(ps[0], 1, "w"), tx.frame(ps[1], 1, "w")
    # the first message holds the descriptor (shape, codec id, params) in full
    desc = Payload(ps[0].codec_id, ps[0].dtype, ps[0].shape, dict(ps[0].params), ()).to_bytes()
    assert desc in first and desc not in second
    # its length is what is sent: the descriptor's bytes are included, not hidden
    assert len(first) - len(second) >= len(desc) + (ps[0].data_nbytes - ps[1].data_nbytes)
    assert tx.messages == 2 and tx.defines == 1


def test_reference_message_size_is_exact():
    """A REF message is tag + ref + one varint count per section + the section data + CRC-32:
    nothing else travels."""
    ps = _payloads("topk", {"ratio": 0.25}, n=2, shape=(4000,))
    tx = FrameSender(0)
    tx.frame(ps[0], 1, "w")
    msg = tx.frame(ps[1], 1, "w")
    counts = [s.numel() for s in ps[1].sections]
    varints = sum(1 if c < 128 else 2 if c < 16384 else 3 for c in counts)
    assert len(msg) == 1 + 1 + varints + ps[1].data_nbytes + 4


def test_unknown_reference_is_a_typed_error():
    ps = _payloads("3lc", {"sparsity": 1.0}, n=2)
    tx = FrameSender(3)
    tx.frame(ps[0], -1, "w")  # the DEFINE is lost: this receiver never sees it
    ref_msg = tx.frame(ps[1], -1, "w")
    rx = FrameReceiver(-1)
    with pytest.raises(UnknownHeaderError) as e:
        rx.unframe(ref_msg, 3)
    assert isinstance(e.value, GCBenchError) and e.value.sender == 3 and e.value.ref == 0


def test_headers_are_per_link_and_per_key():
    ps = _payloads("3lc", {"sparsity": 1.0}, n=2)
    tx, rx = FrameSender(0), FrameReceiver(-1)
    rx.unframe(tx.frame(ps[0], -1, "a"), 0)
    # another key on the same link, and the same key to another receiver, define again
    assert rx.unframe(tx.frame(ps[1], -1, "b"), 0).defined
    other = FrameReceiver(2)
    assert other.unframe(tx.frame(ps[1], 2, "a"), 0).defined
    # a reference from another sender with the same id is unknown
    ref = tx.frame(ps[1], -1, "a")
    with pytest.raises(UnknownHeaderError):
        rx.unframe(ref, 7)
    assert rx.unframe(ref, 0).key == "a"


def test_changed_static_part_redefines():
    """Different parameters or shape under the same key: a new DEFINE, never a stale reference."""
    tx, rx = FrameSender(0), FrameReceiver(1)
    a = _payloads("3lc", {"sparsity": 1.0}, n=1)[0]
    b = _payloads("3lc", {"sparsity": 1.9}, n=1)[0]
    c = _payloads("3lc", {"sparsity": 1.9}, n=1, shape=(8, 3))[0]
    for p, defined in ((a, True), (a, False), (b, True), (c, True), (c, False)):
        got = rx.unframe(tx.frame(p, 1, "w"), 0)
        assert got.defined == defined and got.payload.to_bytes() == p.to_bytes()


def test_forget_resends_the_header():
    ps = _payloads("zipml8", {}, n=3)
    tx = FrameSender(0)
    tx.frame(ps[0], 1, "w")
    tx.forget(1)
    rx = FrameReceiver(1)  # a restarted receiver
    assert rx.unframe(tx.frame(ps[1], 1, "w"), 0).defined


def test_corruption_and_truncation_are_typed_errors():
    ps = _payloads("3lc", {"sparsity": 1.0}, n=2)
    tx, rx = FrameSender(0), FrameReceiver(1)
    first = tx.frame(ps[0], 1, "w")
    rx.unframe(first, 0)
    msg = bytearray(tx.frame(ps[1], 1, "w"))
    for bad, err in ((bytes(msg[:-1]), TruncatedFrameError), (bytes(msg) + b"\0", CorruptFrameError),
                     (bytes([0x00]) + bytes(msg[1:]), CorruptFrameError)):
        with pytest.raises(err):
            rx.unframe(bad, 0)
    flipped = bytearray(msg)
    flipped[len(flipped) // 2] ^= 0x10
    with pytest.raises(CorruptFrameError):
        rx.unframe(bytes(flipped), 0)
    with pytest.raises(FramingError):
        rx.unframe("not bytes", 0)  # type: ignore[arg-type]
    with pytest.raises(FramingError):
        tx.frame(b"x", 1, "w")  # type: ignore[arg-type]


def test_receiver_with_a_different_header_fails_the_checksum():
    """The CRC covers the descriptor the receiver holds: registries that disagree are caught."""
    a = _payloads("3lc", {"sparsity": 1.0}, n=2)
    b = _payloads("3lc", {"sparsity": 1.5}, n=1)[0]
    tx_a, tx_b = FrameSender(0), FrameSender(0)
    rx = FrameReceiver(1)
    rx.unframe(tx_b.frame(b, 1, "w"), 0)  # the receiver's ref 0 is b's header
    tx_a.frame(a[0], 1, "w")
    with pytest.raises(CorruptFrameError):
        rx.unframe(tx_a.frame(a[1], 1, "w"), 0)  # same ref id, same body layout, other header


def test_framed_links_count_real_bytes_and_check():
    """FramedLinks with check=True parses every message at its receiver; byte totals equal the
    lengths of the messages, and amortise: the second step costs less than the first."""
    links = FramedLinks(check=True)
    codec = get("3lc", sparsity=1.0)
    g = torch.Generator().manual_seed(1)
    per_step = []
    for step in range(3):
        total = 0
        for w in range(4):
            for key, shape in (("conv", (16, 16, 3, 3)), ("bn", (16,))):
                msg = links.send(codec.encode(torch.randn(shape, generator=g), key=f"{w}/{key}"), w, -1, key)
                total += len(msg)
        per_step.append(total)
    assert per_step[1] < per_step[0] and per_step[2] < per_step[0]
    assert links.receivers[-1].known(0) == 2


def test_payload_to_bytes_is_unchanged():
    """Framing leaves the self-describing format alone: a payload still parses with no context."""
    p = _payloads("3lc", {"sparsity": 1.0}, n=1)[0]
    FrameSender(0).frame(p, 1, "w")
    assert Payload.from_bytes(p.to_bytes()).to_bytes() == p.to_bytes()
    assert p.to_bytes()[:4] == b"GCBP"


def test_every_rank_framing_keeps_all_receivers_in_step():
    """all_gather semantics: one message per sender, received by every rank; every rank decodes the
    references after seeing the one DEFINE."""
    from gcbench.envs.framing import EVERY_RANK

    ps = _payloads("topk", {"ratio": 0.05}, n=3)
    senders = [FrameSender(r) for r in range(3)]
    receivers = [FrameReceiver(r) for r in range(3)]
    for p in ps:
        msgs = [tx.frame(p, EVERY_RANK, "bucket0") for tx in senders]
        for rx in receivers:
            for src, m in enumerate(msgs):
                assert rx.unframe(m, src).payload.to_bytes() == p.to_bytes()
    assert all(tx.defines == 1 and tx.messages == 3 for tx in senders)


@pytest.mark.parametrize("name,params", CODECS)
def test_parts_laid_into_a_buffer_are_the_message_and_its_zlib_checksum(name, params):
    """frame_parts checksums the parts where they are (no joined copy first): its message is the
    head, every section's bytes and zlib's CRC-32 of them seeded by the header, written the same
    by to_bytes and by write_into at any offset of a ready buffer, and the receiver parses it."""
    import struct
    import zlib

    from gcbench.envs.framing import Header

    tx, rx = FrameSender(0), FrameReceiver(-1)
    for p in _payloads(name, params, n=2):
        parts = tx.frame_parts(p, -1, "w")
        body = parts.head + b"".join(s.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for s in p.sections)
        expect = body + struct.pack("<I", zlib.crc32(body, Header.of(p, "w").seed))
        assert parts.to_bytes() == expect and parts.nbytes == len(expect)
        buf = torch.full((parts.nbytes + 7,), 0xFF, dtype=torch.uint8)
        assert parts.write_into(buf[5:]) == parts.nbytes
        assert bytes(buf[5 : 5 + parts.nbytes].numpy()) == expect
        assert buf[:5].eq(0xFF).all() and buf[5 + parts.nbytes :].eq(0xFF).all()
        assert rx.unframe(memoryview(buf[5 : 5 + parts.nbytes].numpy()), 0).payload.to_bytes() == p.to_bytes()
