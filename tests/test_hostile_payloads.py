"""Hostile payloads: typed errors in bounded time and memory, decode limits set by the receiver.

The fuzz test mutates the wire bytes of every registered codec's payloads with the CRC recomputed
(``gcbench.commands.fuzz``), under a lowered address-space limit. CI runs ``GCBENCH_FUZZ_EXAMPLES`` cases
(default 600, about 10 s); the long run (>= 10^5 cases) is ``python -m gcbench.commands.fuzz --cases 100000``.
"""

from __future__ import annotations

import os
import struct
import time
import zlib

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcbench import compressors
from gcbench.compressors import CorruptPayloadError, GCBenchError, Payload
from gcbench.compressors.errors import PayloadLimitError
from gcbench.compressors.wire.payload import DEFAULT_MAX_NUMEL, check_shape
from gcbench.commands.fuzz import EXTREME_U64, KINDS, Violation, check_case, corpus, layout, mutate

NAMES = compressors.names()
WIRES = corpus()
FUZZ_EXAMPLES = int(os.environ.get("GCBENCH_FUZZ_EXAMPLES", "600"))

def test_every_codec_has_payloads_to_mutate():
    assert set(WIRES) == set(NAMES)
    assert all(len(w) >= 4 for w in WIRES.values())


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from(NAMES),
    pick=st.integers(0, 1 << 16),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3),
    where=st.integers(0, 1 << 16),
    value=st.integers(0, 1 << 16),
)
def test_fuzzed_payloads_fail_typed_fast_and_small(bounded_memory, name, pick, kinds, where, value):
    wire = WIRES[name][pick % len(WIRES[name])]
    wire = mutate(wire, [(kind, where + 7 * i, value + 13 * i) for i, kind in enumerate(kinds)])
    # check_case raises Violation on an untyped error, > 5 s, a non-finite or oversized output
    check_case(wire, max_numel=1 << 20, time_limit=5.0)


SPARSE_NATIVE = [n for n in NAMES if getattr(compressors.get(n), "sparse_native", False)]
SPARSE_WIRES = [w for n in SPARSE_NATIVE for w in WIRES[n] if Payload.from_bytes(w).sparse]


def test_there_are_sparse_native_payloads():
    assert SPARSE_WIRES  # SketchML's sparse payloads


@settings(max_examples=min(FUZZ_EXAMPLES, 200), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    pick=st.integers(0, 1 << 16),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3),
    where=st.integers(0, 1 << 16),
    value=st.integers(0, 1 << 16),
)
def test_sparse_payloads_cost_what_they_carry_under_default_limits(bounded_memory, pick, kinds, where, value):
    """A sparse-native codec's sparse payload may declare any int64 key space: with the decoder's
    default limits its decode still stays within the time and memory bounds."""
    wire = SPARSE_WIRES[pick % len(SPARSE_WIRES)]
    wire = mutate(wire, [(kind, where + 7 * i, value + 13 * i) for i, kind in enumerate(kinds)])
    check_case(wire, max_numel=None, time_limit=5.0)


def test_sparse_native_payload_with_a_huge_key_space_decodes_sparse():
    x = torch.sparse_coo_tensor(torch.tensor([[0, 5, 2**40]]), torch.tensor([1.0, -2.0, 0.5]), (2**40 + 1,), check_invariants=True)
    codec = compressors.get("sketchml")
    out = compressors.decode(Payload.from_bytes(codec.encode(x).to_bytes()))
    assert out.layout == torch.sparse_coo and out.shape == x.shape
    assert out.coalesce().indices()[0].tolist() == [0, 5, 2**40]
    with pytest.raises(PayloadLimitError):  # the caller's explicit limit still applies
        compressors.decode(Payload.from_bytes(codec.encode(x).to_bytes()), max_numel=1 << 20)
    with pytest.raises(PayloadLimitError):  # decoded densely, it would be 8 TiB: the dense limit applies
        compressors.get("topk").decode(_forge(compressors.get("topk").encode(torch.randn(4).to_sparse()), (2**40,)))


def test_check_case_catches_what_it_should(monkeypatch):
    """The fuzz oracle is not vacuous: it flags untyped errors, non-finite and oversized outputs."""
    p = compressors.get("identity").encode(torch.ones(4))
    body = bytearray(p.to_bytes()[:-4])
    struct.pack_into("<f", body, layout(p.to_bytes()).data, float("nan"))
    nan_wire = bytes(body) + struct.pack("<I", zlib.crc32(bytes(body)))
    assert check_case(nan_wire) == "CorruptPayloadError"  # the decoder refuses NaN
    wire = p.to_bytes()
    assert check_case(wire) == "ok"
    for fake, match in [
        (lambda *a, **k: (_ for _ in ()).throw(TypeError("boom")), "untyped TypeError"),
        (lambda *a, **k: torch.tensor([1.0, float("inf")]), "non-finite"),
        (lambda *a, **k: torch.zeros(17), "max_numel"),
        (lambda *a, **k: time.sleep(0.3) or torch.zeros(1), "took"),
    ]:
        monkeypatch.setattr(compressors, "decode", fake)
        with pytest.raises(Violation, match=match):
            check_case(wire, max_numel=16, time_limit=0.2)


@pytest.mark.parametrize("name", NAMES)
def test_unmutated_payloads_decode_finite(name):
    for wire in WIRES[name]:
        assert check_case(wire) == "ok"


@pytest.mark.parametrize("kind", ["shape", "count", "param"])
@pytest.mark.parametrize("name", NAMES)
def test_every_extreme_of_a_length_field(bounded_memory, name, kind):
    wire = WIRES[name][1]
    for value in range(len(EXTREME_U64)):
        for where in range(3):
            check_case(mutate(wire, [(kind, where, value)]))


# --- decode limits --------------------------------------------------------------------------------


def _forge(payload: Payload, shape: tuple[int, ...]) -> Payload:
    return Payload(payload.codec_id, payload.dtype, shape, payload.params, payload.sections, payload.sparse)


@pytest.mark.parametrize(
    "shape", [(0, 2**63), (2**63, 0), (0, 2**64 - 1), (0, -1), (2**31 - 1,), (2**40,), (2**16, 2**16)]
)
@pytest.mark.parametrize("name", NAMES)
def test_declared_shape_is_range_checked_before_allocating(name, shape):
    p = compressors.get(name).encode(torch.randn(64), key="w")
    p = _forge(p, shape)
    t0 = time.perf_counter()
    with pytest.raises(PayloadLimitError):
        compressors.decode(p)
    assert time.perf_counter() - t0 < 5.0  # a hang guard, not a speed claim
    if all(0 <= d < 2**64 for d in shape):  # on the wire too (shape fields are u64)
        wire = _wire_with_shape(compressors.get(name).encode(torch.randn(64), key="w").to_bytes(), shape)
        with pytest.raises(PayloadLimitError):
            Payload.from_bytes(wire)


def _wire_with_shape(wire: bytes, shape: tuple[int, ...]) -> bytes:
    """Rewrite the shape fields of well-formed wire bytes (same ndim count as ``shape``)."""
    lay = layout(wire)
    head = bytearray(wire[: 9]) + bytes([len(shape)]) + b"".join(struct.pack("<Q", d) for d in shape)
    body = head + wire[10 + 8 * len(lay.shape) : -4]
    return bytes(body) + struct.pack("<I", zlib.crc32(bytes(body)))


def test_check_shape():
    assert check_shape((3, 4)) == 12 and check_shape(()) == 1 and check_shape((0, 5)) == 0
    for bad in [(0, DEFAULT_MAX_NUMEL + 1), (2**63,), (-1,), (DEFAULT_MAX_NUMEL, 2), (1.5,), (True,)]:
        with pytest.raises(PayloadLimitError):
            check_shape(bad)
    assert check_shape((DEFAULT_MAX_NUMEL,)) == DEFAULT_MAX_NUMEL
    with pytest.raises(PayloadLimitError):
        check_shape((1,), max_numel=-1)


@pytest.mark.parametrize("name", NAMES)
def test_the_receiver_sets_the_limit(name):
    codec = compressors.get(name)
    x = torch.randn(10, 100)
    wire = codec.encode(x, key="w").to_bytes()
    out = compressors.decode(Payload.from_bytes(wire, max_numel=1000), max_numel=1000)
    assert out.shape == x.shape
    assert codec.decode(Payload.from_bytes(wire), max_numel=1000).shape == x.shape
    with pytest.raises(PayloadLimitError):
        Payload.from_bytes(wire, max_numel=999)
    with pytest.raises(PayloadLimitError):
        compressors.decode(Payload.from_bytes(wire), max_numel=999)
    with pytest.raises(PayloadLimitError):
        codec.decode(Payload.from_bytes(wire), max_numel=999)


@pytest.mark.parametrize("name", ["dgc", "topk-sampled", "sketchml", "topk", "randomk"])
def test_a_small_sparse_payload_cannot_declare_a_huge_tensor(name):
    """A small payload declaring a float64 tensor of shape (2**31-1,) is refused before anything is
    allocated for it (that shape alone asks for 8-16 GiB)."""
    codec = compressors.get(name)
    p = codec.encode(torch.randn(100).double(), key="w")
    forged = _forge(p, (2**31 - 1,))
    assert forged.nbytes < 4096  # a few KB at most, against 8-16 GiB of output
    t0 = time.perf_counter()
    with pytest.raises(PayloadLimitError):
        compressors.decode(Payload.from_bytes(forged.to_bytes(), max_numel=2**31 - 1))
    assert time.perf_counter() - t0 < 5.0


def test_countsketch_decode_work_follows_the_table():
    """A few hundred bytes of Count Sketch table cannot declare 2**26 elements (14 s to unsketch)."""
    codec = compressors.get("countsketch", columns=10)
    p = codec.encode(torch.randn(2048))
    assert p.nbytes < 400
    t0 = time.perf_counter()
    with pytest.raises(CorruptPayloadError, match="compresses more than"):
        compressors.decode(_forge(p, (2**26,)))
    assert time.perf_counter() - t0 < 5.0


#: Codecs whose payload carries no float section (signSGD sends only the signs): nothing to set to NaN/Inf.
NO_FLOAT_SECTIONS = {"signsgd"}


@pytest.mark.parametrize("name", NAMES)
def test_non_finite_sections_never_decode(name):
    """A float section set to NaN/Inf is refused (or the codec cannot be built from it): no encoder writes one.
    Every float section of the payload is tried; a codec without one must be listed in NO_FLOAT_SECTIONS."""
    codec = compressors.get(name)
    p = codec.encode(torch.randn(16, 16), key="w")
    floats = [i for i, s in enumerate(p.sections) if s.is_floating_point() and s.numel()]
    assert (not floats) == (name in NO_FLOAT_SECTIONS), (name, [s.dtype for s in p.sections])
    for i in floats:
        for bad in (float("nan"), float("inf"), -float("inf")):
            secs = list(p.sections)
            secs[i] = secs[i].clone()
            secs[i].view(-1)[0] = bad
            forged = Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(secs), p.sparse)
            with pytest.raises(GCBenchError):
                codec.decode(forged)
