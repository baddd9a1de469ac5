"""The framing checksum covers the whole header the receiver holds for a reference (key,
descriptor, section dtypes), so a REF message read against a registry that differs from the
sender's in any of them is a CorruptFrameError, never a wrong tensor; message lengths do not
depend on it."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import get
from gcbench.compressors.wire.payload import DTYPE_CODES
from gcbench.envs.framing import CorruptFrameError, FrameReceiver, FrameSender, Header


def _payloads(n: int = 2):
    codec = get("identity")
    return [codec.encode(torch.arange(4, dtype=torch.float32) + i, key="w") for i in range(n)]


def _receiver_holding(key: str, descriptor: bytes, dtypes) -> FrameReceiver:
    rx = FrameReceiver(-1)
    rx.load_state_dict({"headers": [(0, 0, key, descriptor, [DTYPE_CODES[d] for d in dtypes])]})
    return rx


@pytest.mark.parametrize("change", ["key", "section_dtypes", "both"])
def test_a_reference_read_against_a_differing_header_is_corrupt(change):
    first, second = _payloads()
    tx = FrameSender(0)
    tx.frame(first, -1, "a")
    ref = tx.frame(second, -1, "a")  # a REF message: neither the key nor the dtypes travel
    h = Header.of(second, "a")
    assert h.section_dtypes == (torch.float32,)
    key = "b" if change in ("key", "both") else "a"
    dtypes = (torch.int32,) if change in ("section_dtypes", "both") else h.section_dtypes
    with pytest.raises(CorruptFrameError):
        _receiver_holding(key, h.descriptor, dtypes).unframe(ref, 0)
    got = _receiver_holding("a", h.descriptor, h.section_dtypes).unframe(ref, 0)  # the same header: read
    assert got.key == "a" and got.payload.to_bytes() == second.to_bytes()


def test_message_lengths_are_the_wire_formats():
    """DEFINE = tag + ref + static fields + counts + data + CRC; REF = tag + ref + counts + data + CRC."""
    first, second = _payloads()
    tx = FrameSender(0)
    define, ref = tx.frame(first, -1, "a"), tx.frame(second, -1, "a")
    h = Header.of(first, "a")
    assert len(first.sections) == 1 and first.sections[0].numel() < 128  # one one-byte varint count
    body = 1 + first.sections[0].numel() * first.sections[0].element_size()
    assert len(define) == 2 + len(h.define_bytes()) + body + 4
    assert len(ref) == 2 + body + 4
