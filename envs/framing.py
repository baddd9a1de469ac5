"""Framing that does not resend what both ends already know: a header registry per (sender, receiver, key).

A :class:`~gcbench.compressors.wire.payload.Payload` serialized with ``to_bytes()`` is self-describing:
codec id, dtype, shape, codec parameters, section descriptors and a CRC travel with every tensor
in every message. That is right for storage and for decoding with no context, but on a link that
carries the same tensor step after step, the *static* part (codec, parameters, dtype, shape, the
sections' dtypes) never changes. This module sends it once per ``(sender, receiver, tensor key)``;
later messages carry a short reference, the sections and an integrity check.

Wire format, version 1 (integers little-endian; ``varint`` = unsigned LEB128)::

    DEFINE message (the first for a key on a link, or after its static part changed)
        u8       0xD1
        varint   reference id (per sender -> receiver link, assigned 0, 1, 2, ... in order)
        u16      key length, key (UTF-8)
        varint   descriptor length, descriptor: a section-less Payload in its own
                 self-describing format (magic, codec id, dtype, flags, shape, parameters, CRC)
        u8       section count S, then S x u8 section dtype codes
        body
    REF message (the static part is the one the reference names)
        u8       0xA1
        varint   reference id
        body
    body
        S x varint   element count of each section
        ...          section data, in order, raw little-endian
        u32          CRC-32 of (the header's static fields as a DEFINE carries them, its
                     descriptor less the descriptor's own 4-byte CRC: u16 key length, key,
                     varint descriptor length, descriptor, u8 S, section dtype codes; then
                     every byte of this message before this CRC)

The CRC covers the header the receiver *holds* (key, descriptor and section dtypes), not only the
bytes that travelled: a receiver whose registry disagrees with the sender's on any of them gets a
checksum error rather than a wrong tensor, for a REF message too.

Bytes are real: :meth:`FrameSender.frame` returns the message, its length is what a traffic log
must count (a DEFINE message, with the full descriptor, is counted like any other), and
:meth:`FrameReceiver.unframe` parses exactly those bytes back into a :class:`Payload` whose
``to_bytes()`` equals the original's. ``Payload.to_bytes()`` itself is unchanged.

Usage (the integration points: the DDP hook's gather, the simulated cluster, the parameter server's
push and pull)::

    tx, rx = FrameSender(sender=0), FrameReceiver(receiver=-1)   # worker 0 -> server (-1)
    msg = tx.frame(payload, receiver=-1, key="conv.weight")      # bytes to send; log len(msg)
    got = rx.unframe(msg, sender=0)                               # -> Received(key, payload, defined)

A one-to-many send (a server's pull to W workers) frames once per receiver: each link has its own
registry, so a new worker gets the full header on its first message. In a collective where every
rank receives the *same* bytes (the DDP hook's all_gather, a broadcast), frame once with
``receiver=EVERY_RANK``: every rank sees every DEFINE, so each rank's :class:`FrameReceiver` (keyed
by sender) stays in step; a rank that joins later needs the sender to :meth:`FrameSender.forget`
``EVERY_RANK`` first.

Where it is used: every payload a protocol sends goes through it. The ``all_gather`` protocol
(:mod:`gcbench.envs.protocols.all_gather`: the DDP hook and the simulated cluster's collective
topology) frames each tensor's payload with ``receiver=EVERY_RANK`` before the size exchange and
unframes every rank's messages after the gather; the parameter-server topology
(:mod:`gcbench.envs.protocols.parameter_server`) frames each push (worker -> ``-1``) and each
encoded pull (``-1`` -> each worker). The endpoints are a :class:`FramedLinks` owned by the
:class:`~gcbench.envs.aggregator.Aggregator`, so registries live as long as the aggregation does,
and the traffic log records ``len(message)``. Linear codecs' all_reduce sends bare sections (no
header at all) and is not framed; a ``rounds`` codec's all-reduces are bare tensors too.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..compressors.errors import PayloadError
from ..compressors.wire.checksum import crc32, crc32_parts
from ..compressors.wire.payload import CODE_DTYPES, DEFAULT_MAX_NUMEL, DTYPE_CODES, MAX_SECTIONS, Payload, section_bytes
from .errors import EnvError

#: The receiver id of a message every rank receives identically (all_gather, broadcast).
EVERY_RANK = -2
TAG_DEFINE = 0xD1
TAG_REF = 0xA1
FRAMING_VERSION = 1
_ELEM = {code: torch.empty((), dtype=dt).element_size() for dt, code in DTYPE_CODES.items()}


class FramingError(EnvError, ValueError):
    """A framed message that cannot be parsed, or a framing API used wrongly."""


class UnknownHeaderError(FramingError, LookupError):
    """A message references a header the receiver has never been sent on that link.

    Attributes:
        sender: the link's sender.
        ref: the reference id in the message.
    """

    def __init__(self, message: str, *, sender: int, ref: int) -> None:
        super().__init__(message)
        self.sender = sender
        self.ref = ref


class TruncatedFrameError(FramingError):
    """The message ends before its fields say it should."""


class CorruptFrameError(FramingError):
    """Unknown tag, checksum mismatch (also when the receiver's header, i.e. its key, descriptor or
    section dtypes, differs from the sender's), impossible field values or trailing bytes."""


def _varint(n: int) -> bytes:
    if n < 0:
        raise FramingError(f"varint of a negative number {n}")
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class _Cursor:
    """Bounds-checked reading of a framed message."""

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise TruncatedFrameError(f"message ends at byte {len(self.buf)} inside a field at {self.pos}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def varint(self) -> int:
        n = shift = 0
        while True:
            b = self.u8()
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 63:
                raise CorruptFrameError("varint longer than 64 bits")


@dataclass(frozen=True)
class Header:
    """The static part of a payload, agreed once per (sender, receiver, key).

    Attributes:
        key: the tensor key the sender framed it under.
        descriptor: a section-less :class:`Payload` in its self-describing format (codec id, dtype,
            flags, shape, parameters, CRC).
        section_dtypes: the dtype of each section, in order.
    """

    key: str
    descriptor: bytes
    section_dtypes: tuple[torch.dtype, ...]

    @classmethod
    def of(cls, payload: Payload, key: str) -> Header:
        """The header of ``payload`` sent under ``key``."""
        desc = Payload(payload.codec_id, payload.dtype, tuple(payload.shape), dict(payload.params), (), payload.sparse)
        return cls(key, desc.to_bytes(), tuple(s.dtype for s in payload.sections))

    @functools.cached_property
    def seed(self) -> int:
        """CRC-32 of :meth:`define_bytes` with the descriptor *without* its own trailing CRC: a
        message's checksum starts from it, so it covers the key, the descriptor and the section
        dtypes the receiver holds. (The CRC of bytes that end with their own CRC-32 is the same
        constant for every input, so the whole descriptor would not tell two headers apart.)"""
        return crc32(self._static_bytes(self.descriptor[:-4]))

    def define_bytes(self) -> bytes:
        """The DEFINE message's static fields (everything between the reference and the body)."""
        return self._static_bytes(self.descriptor)

    def _static_bytes(self, descriptor: bytes) -> bytes:
        kb = self.key.encode("utf-8")
        if len(kb) > 0xFFFF:
            raise FramingError(f"key {self.key[:40]!r}... is longer than 65535 UTF-8 bytes")
        return (struct.pack("<H", len(kb)) + kb + _varint(len(self.descriptor)) + descriptor
                + bytes([len(self.section_dtypes)]) + bytes(DTYPE_CODES[d] for d in self.section_dtypes))


@dataclass(frozen=True)
class Received:
    """What :meth:`FrameReceiver.unframe` returns."""

    key: str
    payload: Payload
    defined: bool  # the message carried the full header (a DEFINE)
    nbytes: int  # its length


@dataclass(frozen=True)
class Framed:
    """One message of :meth:`FrameSender.frame_parts`, not yet laid out in memory: ``head`` (tag,
    reference, header, section counts), the sections' bytes (flat uint8 CPU tensors, views of the
    payload's where it lives on the CPU) and the 4 CRC bytes. :meth:`to_bytes` is the message;
    :meth:`write_into` lays it into a ready buffer with one copy of each section (a protocol that
    sends many messages in one buffer copies each byte once)."""

    head: bytes
    sections: tuple[torch.Tensor, ...]
    crc: bytes

    @property
    def nbytes(self) -> int:
        """The message's length in bytes."""
        return len(self.head) + sum(s.numel() for s in self.sections) + len(self.crc)

    def to_bytes(self) -> bytes:
        """The message."""
        return b"".join([self.head, *(memoryview(s.numpy()) for s in self.sections), self.crc])

    def write_into(self, out: torch.Tensor) -> int:
        """Copy the message to the start of ``out`` (a flat uint8 CPU tensor of at least
        :attr:`nbytes` elements); returns :attr:`nbytes`."""
        pos = 0
        for part in (self.head, *self.sections, self.crc):
            if isinstance(part, bytes):
                part = torch.frombuffer(bytearray(part), dtype=torch.uint8) if part else torch.empty(0, dtype=torch.uint8)
            out[pos : pos + part.numel()].copy_(part)
            pos += part.numel()
        return pos


class FrameSender:
    """One sending endpoint: remembers, per receiver and key, the header it last sent.

    Args:
        sender: this endpoint's id (a rank; ``-1`` for a parameter server by gcbench's convention).
    """

    def __init__(self, sender: int) -> None:
        self.sender = int(sender)
        self._sent: dict[tuple[int, str], tuple[int, Header]] = {}
        self._next_ref: dict[int, int] = {}
        self.messages = 0
        self.defines = 0

    def frame(self, payload: Payload, receiver: int, key: str) -> bytes:
        """The bytes to send ``payload`` to ``receiver`` under ``key``: a DEFINE message the first
        time (or when the static part changed since the last one), a REF message otherwise."""
        return self.frame_parts(payload, receiver, key).to_bytes()

    def frame_parts(self, payload: Payload, receiver: int, key: str) -> Framed:
        """:meth:`frame`'s message as its parts (the same bytes and the same registry update), its
        checksum computed over them in place, without joining them first."""
        if not isinstance(payload, Payload):
            raise FramingError(f"frame takes a Payload, not {type(payload).__name__}")
        if len(payload.sections) > MAX_SECTIONS:
            raise FramingError(f"at most {MAX_SECTIONS} sections")
        receiver = int(receiver)
        header = Header.of(payload, str(key))
        known = self._sent.get((receiver, header.key))
        if known is not None and known[1] == header:
            ref = known[0]
            head = bytes([TAG_REF]) + _varint(ref)
        else:
            ref = self._next_ref.get(receiver, 0)
            self._next_ref[receiver] = ref + 1
            self._sent[(receiver, header.key)] = (ref, header)
            head = bytes([TAG_DEFINE]) + _varint(ref) + header.define_bytes()
            self.defines += 1
        head += b"".join(_varint(s.numel()) for s in payload.sections)
        sections = tuple(section_bytes(s) for s in payload.sections)
        crc = crc32_parts([head, *(sec.numpy() for sec in sections)], header.seed)
        self.messages += 1
        return Framed(head, sections, struct.pack("<I", crc))

    def state_dict(self) -> dict[str, Any]:
        """The registry (what each receiver was sent), for a checkpoint every endpoint takes together."""
        return {"sent": [(r, ref, h.key, h.descriptor, [DTYPE_CODES[d] for d in h.section_dtypes])
                         for (r, _), (ref, h) in self._sent.items()],
                "next_ref": dict(self._next_ref), "messages": self.messages, "defines": self.defines}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self._sent = {(int(r), key): (int(ref), Header(key, bytes(desc), tuple(CODE_DTYPES[c] for c in codes)))
                      for r, ref, key, desc, codes in state["sent"]}
        self._next_ref = {int(k): int(v) for k, v in state["next_ref"].items()}
        self.messages, self.defines = int(state["messages"]), int(state["defines"])

    def forget(self, receiver: int | None = None) -> None:
        """Drop what ``receiver`` (every receiver when None) was sent: the next message to it for
        each key carries the full header again (after a reconnect or a receiver restart)."""
        if receiver is None:
            self._sent.clear()
            self._next_ref.clear()
            return
        self._sent = {k: v for k, v in self._sent.items() if k[0] != int(receiver)}
        self._next_ref.pop(int(receiver), None)


class FrameReceiver:
    """One receiving endpoint: the headers each sender has defined on its link to here.

    Args:
        receiver: this endpoint's id.
        max_numel: the largest tensor a header may declare (see :meth:`Payload.from_bytes`).
    """

    def __init__(self, receiver: int, *, max_numel: int = DEFAULT_MAX_NUMEL) -> None:
        self.receiver = int(receiver)
        self.max_numel = max_numel
        self._headers: dict[tuple[int, int], tuple[Header, Payload]] = {}

    def state_dict(self) -> dict[str, Any]:
        """The headers each sender defined here, for a checkpoint every endpoint takes together."""
        return {"headers": [(sender, ref, h.key, h.descriptor, [DTYPE_CODES[d] for d in h.section_dtypes])
                            for (sender, ref), (h, _) in self._headers.items()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (descriptors are parsed again, with this receiver's limit)."""
        headers = {}
        for sender, ref, key, desc, codes in state["headers"]:
            h = Header(key, bytes(desc), tuple(CODE_DTYPES[c] for c in codes))
            headers[(int(sender), int(ref))] = (h, Payload.from_bytes(h.descriptor, max_numel=self.max_numel))
        self._headers = headers

    def known(self, sender: int) -> int:
        """How many headers ``sender`` has defined here."""
        return sum(1 for s, _ in self._headers if s == int(sender))

    def unframe(self, data: bytes | bytearray | memoryview, sender: int, *, max_numel: int | None = None) -> Received:
        """Parse one message from ``sender``.

        ``max_numel`` (default: the receiver's) bounds the tensor a DEFINE's header may declare and
        the tensor a REF's header declared: a receiver passes its own tensor's size.

        Raises:
            UnknownHeaderError: a REF message names a header this receiver was never sent.
            TruncatedFrameError: the message ends early.
            CorruptFrameError: bad tag, checksum, descriptor or trailing bytes.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise FramingError(f"unframe takes bytes, not {type(data).__name__}")
        sender = int(sender)
        limit = self.max_numel if max_numel is None else int(max_numel)
        buf = memoryview(data).cast("B")
        cur = _Cursor(buf)
        tag = cur.u8()
        ref = cur.varint()
        if tag == TAG_DEFINE:
            (klen,) = struct.unpack("<H", cur.take(2))
            try:
                key = bytes(cur.take(klen)).decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorruptFrameError("key is not UTF-8") from e
            desc = bytes(cur.take(cur.varint()))
            try:
                shell = Payload.from_bytes(desc, max_numel=limit)
            except PayloadError as e:
                raise CorruptFrameError(f"bad header descriptor: {e}") from e
            if shell.sections:
                raise CorruptFrameError("a header descriptor carries no sections")
            nsec = cur.u8()
            if nsec > MAX_SECTIONS:
                raise CorruptFrameError(f"{nsec} sections exceed {MAX_SECTIONS}")
            codes = bytes(cur.take(nsec))
            if any(c not in CODE_DTYPES for c in codes):
                raise CorruptFrameError("unknown section dtype code")
            header = Header(key, desc, tuple(CODE_DTYPES[c] for c in codes))
        elif tag == TAG_REF:
            entry = self._headers.get((sender, ref))
            if entry is None:
                raise UnknownHeaderError(
                    f"receiver {self.receiver}: message from {sender} references header {ref}, which was never defined on this link",
                    sender=sender, ref=ref)
            header, shell = entry
            if shell.numel > limit:
                raise CorruptFrameError(f"header {ref} from {sender} declares {shell.numel} elements; this receiver accepts {limit}")
        else:
            raise CorruptFrameError(f"unknown message tag {tag:#x}")
        counts = [cur.varint() for _ in header.section_dtypes]
        sizes = [c * _ELEM[DTYPE_CODES[d]] for c, d in zip(counts, header.section_dtypes)]
        expected = cur.pos + sum(sizes) + 4
        if len(buf) < expected:
            raise TruncatedFrameError(f"message is {len(buf)} bytes; its fields say {expected}")
        if len(buf) > expected:
            raise CorruptFrameError(f"{len(buf) - expected} trailing bytes after the message")
        (crc,) = struct.unpack_from("<I", buf, expected - 4)
        if crc32(buf[: expected - 4], header.seed) != crc:
            raise CorruptFrameError("checksum mismatch: the message was corrupted or the receiver's header differs from the sender's")
        sections = []
        pos = cur.pos
        for size, dt in zip(sizes, header.section_dtypes):
            raw = torch.frombuffer(bytearray(buf[pos : pos + size]), dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
            sections.append(raw.view(dt) if size else torch.empty(0, dtype=dt))
            pos += size
        if tag == TAG_DEFINE:
            self._headers[(sender, ref)] = (header, shell)  # only once the whole message checked out
        payload = Payload(shell.codec_id, shell.dtype, tuple(shell.shape), dict(shell.params), tuple(sections), shell.sparse)
        return Received(header.key, payload, tag == TAG_DEFINE, len(buf))


@dataclass
class FramedLinks:
    """The framing endpoints one process holds (what an :class:`~gcbench.envs.aggregator.Aggregator`
    owns, so that registries persist across steps): a sender per local rank (and the simulated
    server, ``-1``), a receiver per receiving endpoint. ``send`` frames and, with ``check=True``,
    parses the message at the receiver and verifies it carries the same payload bytes.

    Attributes:
        check: make :meth:`send` parse each message it frames at its receiver (costs a copy; off
            by default; the protocols frame through :meth:`sender` and are not checked).
    """

    check: bool = False

    def __post_init__(self) -> None:
        self.senders: dict[int, FrameSender] = {}
        self.receivers: dict[int, FrameReceiver] = {}

    def sender(self, sender: int) -> FrameSender:
        """The endpoint that sends as ``sender`` (created on first use)."""
        tx = self.senders.get(int(sender))
        if tx is None:
            tx = self.senders[int(sender)] = FrameSender(sender)
        return tx

    def receiver(self, receiver: int) -> FrameReceiver:
        """The endpoint that receives as ``receiver`` (created on first use; ``EVERY_RANK``: what
        this process receives from collectives every rank receives identically)."""
        rx = self.receivers.get(int(receiver))
        if rx is None:
            rx = self.receivers[int(receiver)] = FrameReceiver(receiver)
        return rx

    def reset(self) -> None:
        """Forget every link (every endpoint of the topology must reset together)."""
        self.senders.clear()
        self.receivers.clear()

    def state_dict(self) -> dict[str, Any]:
        """Every endpoint's registry (a checkpoint: every rank restores its own together, so a
        resumed run sends exactly the bytes an uninterrupted one would)."""
        return {"senders": {i: tx.state_dict() for i, tx in self.senders.items()},
                "receivers": {i: rx.state_dict() for i, rx in self.receivers.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (replaces every endpoint)."""
        self.reset()
        for i, st in state["senders"].items():
            self.sender(int(i)).load_state_dict(st)
        for i, st in state["receivers"].items():
            self.receiver(int(i)).load_state_dict(st)

    def send(self, payload: Payload, sender: int, receiver: int, key: str) -> bytes:
        """Frame ``payload`` on the link ``sender -> receiver`` and return the message."""
        msg = self.sender(sender).frame(payload, receiver, key)
        if self.check:
            rx = self.receiver(receiver)
            got = rx.unframe(msg, sender)
            if got.key != key or got.payload.to_bytes() != payload.to_bytes():
                raise CorruptFrameError(f"link {sender}->{receiver} key {key!r}: the received payload differs from the sent one")
        return msg


__all__ = [
    "EVERY_RANK", "FRAMING_VERSION", "CorruptFrameError", "FrameReceiver", "FrameSender", "FramedLinks", "FramingError", "Header",
    "Received", "TruncatedFrameError", "UnknownHeaderError",
]
