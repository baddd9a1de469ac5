"""The transport frames every payload: all_gather and the parameter server send framed
messages (gcbench.envs.framing), the traffic log counts exactly their lengths, a receiver that lost
its registry gets a typed error, and mutated framed messages (checksum recomputed) fail typed, fast
and small."""

from __future__ import annotations

import struct
import time
import zlib
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcbench import compressors
from gcbench.compressors import GCBenchError, Payload
from gcbench.envs.aggregator import Aggregator
from gcbench.envs.collectives import LocalCollective
from gcbench.compressors.wire.payload import DTYPE_CODES
from gcbench.envs.framing import EVERY_RANK, TAG_DEFINE, TAG_REF, FrameReceiver, FrameSender, Header, UnknownHeaderError
from gcbench.envs.workers import CodecSpec, WorkerCodecs
from gcbench.commands.fuzz import EXTREME_U64, corpus, mutate

SHAPES = [(20, 12), (12,), (5, 3, 2), (64, 9)]
KEYS = ["w1", "b1", "w2", "w3"]
STEPS = 3


def _grads(W, step):
    g = torch.Generator().manual_seed(100 + step)
    return [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(W)]


def _workers(W, spec):
    return [WorkerCodecs(spec, r) for r in range(W)]


def _expected(W, spec, receivers_of, rows_of):
    """Per step and sender, the framed bytes an independent set of senders produces for the same
    payloads (same codecs, same seeds): the naive reference of what the transport must count."""
    senders = {}
    out = []
    for step in range(STEPS):
        per = {}
        for sender, payloads in rows_of(step):
            tx = senders.setdefault(sender, FrameSender(sender))
            per[sender] = [sum(len(tx.frame(p, r, k)) for p, k in zip(payloads, KEYS)) for r in receivers_of(sender)]
        out.append(per)
    return out


def test_all_gather_records_the_framed_bytes_and_amortises_the_header():
    W, spec = 3, CodecSpec(name="topk", params={"ratio": 0.1})
    agg = Aggregator(_workers(W, spec), LocalCollective(W))
    for step in range(STEPS):
        agg.aggregate(_grads(W, step), KEYS, step=step)
    ref = _workers(W, spec)

    def rows(step):
        grads = _grads(W, step)
        return [(w, [ref[w].codec_for(k).encode(g, key=k, generator=ref[w].generator_for(k, g.device, ref[w].codec_for(k)))
                     for g, k in zip(grads[w], KEYS)]) for w in range(W)]

    expected = _expected(W, spec, lambda s: [EVERY_RANK], rows)
    self_describing = [sum(p.nbytes for p in row) for _, row in rows(STEPS - 1)]
    for step in range(STEPS):
        recs = [r for r in agg.traffic.wire_records if r.step == step and r.kind == "payload"]
        own = {r.worker: r.nbytes - r.padding for r in recs}
        assert own == {w: expected[step][w][0] for w in range(W)}
    for w in range(W):
        later = expected[1][w][0]
        assert later < expected[0][w][0]  # the first message of each key carries the header
        assert later < self_describing[w]  # and later ones are smaller than Payload.to_bytes()
        # a reference message: tag, ref varint, one count varint per section, data, CRC
        assert later == sum(2 + 4 + sum(1 + (s.numel() > 127) for s in p.sections) + p.data_nbytes
                            for p in rows(1)[w][1])


def test_parameter_server_frames_push_and_each_pull_link():
    W = 2
    spec = CodecSpec(name="3lc", params={"sparsity": 1.5})
    agg = Aggregator(_workers(W, spec), LocalCollective(W))
    pull = WorkerCodecs(spec, -1)
    outs = [agg.parameter_server(_grads(W, step), KEYS, step=step, pull=pull) for step in range(STEPS)]
    # the same run without framing state shared: payloads re-encoded through independent codecs
    ref, ref_pull = _workers(W, spec), WorkerCodecs(spec, -1)
    push_tx, pull_tx = [FrameSender(w) for w in range(W)], FrameSender(-1)
    for step in range(STEPS):
        grads = _grads(W, step)
        rows = [[ref[w].codec_for(k).encode(g, key=k) for g, k in zip(grads[w], KEYS)] for w in range(W)]
        avg = [sum(compressors.decode(rows[w][j]) for w in range(W)) / W for j in range(len(KEYS))]
        pulled = [ref_pull.codec_for(k).encode(a, key=k) for a, k in zip(avg, KEYS)]
        for w in range(W):
            push = sum(len(push_tx[w].frame(p, -1, k)) for p, k in zip(rows[w], KEYS))
            pulled_bytes = sum(len(pull_tx.frame(p, w, k)) for p, k in zip(pulled, KEYS))
            assert agg.traffic.message_bytes(step=step, worker=w, op="push") == push
            assert agg.traffic.message_bytes(step=step, worker=w, op="pull") == pulled_bytes
        for o, p in zip(outs[step], pulled):
            assert torch.equal(o, compressors.decode(p).reshape(o.shape))
    first = agg.traffic.message_bytes(step=0, worker=0, op="push")
    assert agg.traffic.message_bytes(step=1, worker=0, op="push") < first


def test_parameter_server_times_framing_on_no_encode_and_each_worker_its_own_unframing(monkeypatch):
    """The measured seconds of a parameter-server step: framing (push or pull) is in no side's
    ``encode``, the server's ``decode`` unframes every push, and each worker's ``decode`` holds its own
    pull message's unframing, not the other workers'. The exchange's clock is replaced by one that
    only framing (1 s a message) and unframing (1000 s a message) advance, so each phase's seconds
    count exactly the messages it holds."""
    from gcbench.envs import exchange

    W, now = 3, [0.0]
    frame, unframe = FrameSender.frame, FrameReceiver.unframe

    def timed_frame(self, *args, **kwargs):
        now[0] += 1.0
        return frame(self, *args, **kwargs)

    def timed_unframe(self, *args, **kwargs):
        now[0] += 1000.0
        return unframe(self, *args, **kwargs)

    monkeypatch.setattr(FrameSender, "frame", timed_frame)
    monkeypatch.setattr(FrameReceiver, "unframe", timed_unframe)
    monkeypatch.setattr(exchange, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    spec = CodecSpec(name="3lc", params={"sparsity": 1.5})
    agg = Aggregator(_workers(W, spec), LocalCollective(W))
    agg.parameter_server(_grads(W, 0), KEYS, step=0, pull=WorkerCodecs(spec, -1))
    t, k = agg.traffic, len(KEYS)
    assert [t.seconds("encode", worker=w) for w in (-1, *range(W))] == [0.0] * (W + 1)  # no framing
    assert t.seconds("decode", worker=-1) == W * k * 1000.0  # the server unframes every push
    assert [t.seconds("decode", worker=w) for w in range(W)] == [k * 1000.0] * W  # each its own pull message
    assert now[0] == 2 * W * k * 1001.0  # every message was framed and unframed once


@pytest.mark.parametrize("topology", ["collective", "parameter_server"])
def test_a_receiver_without_the_header_gets_a_typed_error(topology):
    W, spec = 2, CodecSpec(name="qsgd")
    agg = Aggregator(_workers(W, spec), LocalCollective(W))
    run = agg.aggregate if topology == "collective" else agg.parameter_server
    run(_grads(W, 0), KEYS, step=0)
    agg.links.receivers.clear()  # a receiver restarted; the senders still hold their registries
    with pytest.raises(UnknownHeaderError) as err:
        run(_grads(W, 1), KEYS, step=1)
    assert isinstance(err.value, GCBenchError)
    agg.links.reset()  # every endpoint forgets together: headers are sent again and decode
    run(_grads(W, 2), KEYS, step=2)


# --- mutated framed messages ------------------------------------------------------------------------

WIRES = corpus(["3lc", "topk", "qsgd", "terngrad", "zipml8", "identity", "sketchml"])
NAMES = sorted(WIRES)
MUTATIONS = ("descriptor", "ref", "count", "code", "cut", "append", "byte", "key")

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _message(tag, ref, key, desc, codes, counts, data, held=None) -> bytes:
    """A framed message from its fields, CRC computed as the sender does: seeded by the header's
    static fields (key, descriptor less its own CRC, section dtype codes), those of the message for a
    DEFINE, those the receiver holds (``held``) for a REF."""
    head = bytes([tag]) + _varint(ref)
    if tag == TAG_DEFINE:
        head += struct.pack("<H", len(key)) + key + _varint(len(desc)) + desc + bytes([len(codes)]) + bytes(codes)
    msg = head + b"".join(_varint(c) for c in counts) + data
    k, d, c = (key, desc, codes) if tag == TAG_DEFINE or held is None else held
    static = struct.pack("<H", len(k)) + k + _varint(len(d)) + d[:-4] + bytes([len(c)]) + bytes(c)
    return msg + struct.pack("<I", zlib.crc32(msg, zlib.crc32(static)))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(NAMES), pick=st.integers(0, 1 << 16), ref_msg=st.booleans(),
       kinds=st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3), where=st.integers(0, 1 << 16),
       value=st.integers(0, 1 << 16))
def test_mutated_framed_messages_fail_typed_fast_and_small(bounded_memory, name, pick, ref_msg, kinds, where, value):
    payload = Payload.from_bytes(WIRES[name][pick % len(WIRES[name])])
    h = Header.of(payload, "w")
    rx = FrameReceiver(0)
    rx.unframe(FrameSender(1).frame(payload, 0, "w"), 1)  # the receiver holds ref 0 for sender 1
    tag, ref, key, desc = (TAG_REF if ref_msg else TAG_DEFINE), 0 if ref_msg else 1, b"w", h.descriptor
    codes = [DTYPE_CODES[s.dtype] for s in payload.sections]
    counts = [s.numel() for s in payload.sections]
    data = b"".join(s.contiguous().view(torch.uint8).numpy().tobytes() for s in payload.sections)
    u64 = EXTREME_U64[value % len(EXTREME_U64)]
    desc_mutations = []  # applied at once: mutate() reads field offsets from well-formed bytes
    for i, kind in enumerate(kinds):
        w, v = where + 7 * i, value + 13 * i
        if kind == "descriptor":
            desc_mutations.append((("shape", "ndim", "dtype", "param", "byte")[w % 5], w // 5, v))
        elif kind == "ref":
            ref = u64
        elif kind == "count" and counts:
            counts[w % len(counts)] = u64
        elif kind == "code" and codes:
            codes[w % len(codes)] = v % 256
        elif kind == "cut" and data:
            data = data[: w % len(data)]
        elif kind == "append":
            data += bytes([v % 256]) * (1 + w % 64)
        elif kind == "byte" and data:
            data = data[: w % len(data)] + bytes([v % 256]) + data[w % len(data) + 1 :]
        elif kind == "key":
            key = bytes([v % 256]) * (w % 4)
    if desc_mutations:
        desc = mutate(desc, desc_mutations)
    msg = _message(tag, ref, key, desc, codes, counts, data, held=(b"w", h.descriptor, [DTYPE_CODES[s.dtype] for s in payload.sections]))
    t0 = time.perf_counter()
    limit = 1 << 20
    try:
        got = rx.unframe(msg, 1, max_numel=limit)
        out = compressors.decode(got.payload, max_numel=limit)
    except GCBenchError:
        out = None
    assert time.perf_counter() - t0 < 5.0
    if out is not None:
        values = out.values() if out.layout == torch.sparse_coo else out
        assert out.numel() <= limit
        assert not values.numel() or bool(torch.isfinite(values).all())


def test_registries_travel_with_a_checkpoint(tmp_path):
    """Restored registries (every endpoint together) make a resumed run send exactly the bytes of an
    uninterrupted one; without them every header is sent again."""
    W, spec = 2, CodecSpec(name="topk", params={"ratio": 0.1})
    straight = Aggregator(_workers(W, spec), LocalCollective(W))
    for step in range(STEPS):
        straight.aggregate(_grads(W, step), KEYS, step=step)
    first = Aggregator(_workers(W, spec), LocalCollective(W))
    first.aggregate(_grads(W, 0), KEYS, step=0)
    torch.save({"framing": first.links.state_dict(), "codecs": [w.state_dict() for w in first.workers]}, tmp_path / "ck.pt")
    ck = torch.load(tmp_path / "ck.pt", weights_only=False)
    resumed, fresh = Aggregator(_workers(W, spec), LocalCollective(W)), Aggregator(_workers(W, spec), LocalCollective(W))
    resumed.links.load_state_dict(ck["framing"])
    for agg in (resumed, fresh):
        for w, state in zip(agg.workers, ck["codecs"]):
            w.load_state_dict(state)
        for step in range(1, STEPS):
            agg.aggregate(_grads(W, step), KEYS, step=step)
    later = [r for r in straight.traffic.wire_records if r.step >= 1]
    assert resumed.traffic.wire_records == later
    assert fresh.traffic.message_bytes(step=1) > resumed.traffic.message_bytes(step=1)
