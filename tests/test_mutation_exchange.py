"""What one aggregation's building blocks promise, checked on small hand-made inputs.

* A shared all-reduce of several tensors hands each tensor its own slice of the sum, and the traffic
  log counts every byte of each kind of message; each worker's padding is recorded as its own.
* A tensor's shared sections are checked again as long as any of the tensors sent with it has not
  been checked yet.
* A decoded gradient never shares memory with the payload it came from.
* The simulated collectives leave their inputs untouched, return copies, broadcast the chosen
  worker's tensor and refuse tensors whose dtypes differ.
* Framing: a link that forgot a receiver starts over like a new one; a restored sender numbers new
  headers after the ones it had sent; a receiver bounds a referenced header by the size it is told;
  an over-long reference number is a corrupt message.
* Codecs that do not share randomness draw different numbers on each worker; a codec that already
  applies error feedback is not wrapped in a second one.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gcbench.compressors import ErrorFeedback, get
from gcbench.compressors.wire.payload import Payload
from gcbench.envs.collectives import LocalCollective
from gcbench.envs.errors import CollectiveMismatchError
from gcbench.envs.exchange import Clock, Exchange, Recorder
from gcbench.envs.framing import CorruptFrameError, FrameReceiver, FrameSender
from gcbench.envs.traffic import TrafficLog
from gcbench.envs.workers import CodecSpec, WorkerCodecs

CPU = torch.device("cpu")


def _exchange(world: int, verified: set[str] | None = None) -> Exchange:
    workers = [WorkerCodecs(CodecSpec.of("identity"), rank=r) for r in range(world)]
    recorder = Recorder(TrafficLog(), range(world))
    return Exchange(workers, LocalCollective(world), recorder, Clock(CPU, world), step=0, bucket=0, verified=verified)


def _payload(seed: int, shape: tuple[int, ...] = (6, 4)) -> Payload:
    g = torch.Generator().manual_seed(seed)
    return get("identity").encode(torch.randn(shape, generator=g))


def test_a_shared_all_reduce_slices_each_sum_and_counts_every_byte() -> None:
    """Three tensors (2, 3 and 4 floats) of three workers in one all-reduce: each comes back as its
    own sum, and worker records hold 20 bytes of ``a`` and 16 of ``b``."""
    ex = _exchange(3)
    sizes = {("a", 0): 2, ("a", 1): 3, ("b", 0): 4}

    def tensor(kind: str, j: int, i: int) -> torch.Tensor:
        base = 100.0 * (kind == "b") + 10.0 * j
        return torch.arange(sizes[(kind, j)], dtype=torch.float32) + base + 1000.0 * i

    entries = [(k, j, lambda i, k=k, j=j: tensor(k, j, i)) for k, j in sizes]
    out = ex.all_reduce(entries)
    for kind, j in sizes:
        want = sum(tensor(kind, j, i) for i in range(3))
        assert torch.equal(out[kind][j], want), (kind, j)
    recs = ex.recorder.traffic.wire_records
    want = {(w, k): b for w in range(3) for k, b in (("a", 20), ("b", 16))}
    assert {(r.worker, r.kind): r.nbytes for r in recs} == want


def test_each_workers_padding_is_its_own() -> None:
    """Padding of 0, 3 and 7 bytes for workers 0, 1 and 2 lands in each worker's record."""
    log = TrafficLog()
    Recorder(log, [0, 1, 2]).record(0, 0, "all_gather", [("payload", [10, 10, 10], [0, 3, 7])])
    assert {r.worker: r.padding for r in log.wire_records} == {0: 0, 1: 3, 2: 7}


def test_a_partly_checked_set_of_tensors_is_checked_again() -> None:
    """With ``a`` checked and ``b`` not, a call sending both checks them; once both agreed, it does not."""
    ex = _exchange(2, verified={"a"})
    assert ex.check_due(["a", "b"])
    assert not ex.check_due(["a"])
    ex.mark_verified(["b"])
    assert not ex.check_due(["a", "b"])


class _SectionCodec:
    """A codec whose decode hands back its payload's own section, reshaped."""

    def decode(
        self, payload: Payload, device: Any = None, max_numel: int | None = None, out: Any = None
    ) -> torch.Tensor:
        return payload.sections[0].view(tuple(payload.shape))


def test_a_decoded_gradient_never_shares_the_payloads_memory() -> None:
    """A decode that returns the payload's own memory is copied before the caller adds into it."""
    section = torch.arange(6, dtype=torch.float32)
    payload = Payload(get("identity").codec_id, torch.float32, (2, 3), {}, (section,), True)
    got = Exchange.decode_grad(_SectionCodec(), payload, torch.zeros(2, 3), device=None)
    assert torch.equal(got, section.view(2, 3))
    got.add_(1.0)
    assert torch.equal(section, torch.arange(6, dtype=torch.float32))


def test_simulated_collectives_copy_and_leave_inputs_alone() -> None:
    """The sum and the gather are new tensors; changing an input afterwards changes neither."""
    coll = LocalCollective(2)
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0])
    (total, _) = coll.all_reduce([a, b])
    assert torch.equal(a, torch.tensor([1.0, 2.0])) and torch.equal(total, torch.tensor([11.0, 22.0]))
    gathered = coll.all_gather([a, b])[0]
    a.fill_(-1.0)
    b.fill_(-1.0)
    assert torch.equal(gathered[0], torch.tensor([1.0, 2.0])) and torch.equal(gathered[1], torch.tensor([10.0, 20.0]))
    assert torch.equal(total, torch.tensor([11.0, 22.0]))


def test_a_broadcast_sends_the_chosen_workers_tensor() -> None:
    """Broadcasting from worker 2 of 3 gives every worker worker 2's tensor."""
    coll = LocalCollective(3)
    got = coll.broadcast([torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([2.0])], src=2)
    assert [float(t) for t in got] == [2.0, 2.0, 2.0]


def test_workers_tensors_of_different_dtypes_are_refused() -> None:
    """A float32 and a float64 tensor in one simulated all-reduce raise a mismatch error."""
    with pytest.raises(CollectiveMismatchError):
        LocalCollective(2).all_reduce([torch.zeros(3), torch.zeros(3, dtype=torch.float64)])


def test_a_forgotten_receiver_gets_what_a_new_link_would_send() -> None:
    """After ``forget(1)``, the message to receiver 1 equals a brand-new sender's first message."""
    tx = FrameSender(0)
    p, q = _payload(0), _payload(1)
    tx.frame(p, 1, "w")
    tx.frame(p, 1, "v")
    tx.forget(1)
    assert tx.frame(q, 1, "w") == FrameSender(0).frame(q, 1, "w")


def test_a_restored_sender_numbers_new_headers_after_the_old_ones() -> None:
    """A sender restored from a checkpoint sends a new key exactly as the uninterrupted one does,
    and the receiver still resolves the earlier key's references afterwards."""
    tx, rx = FrameSender(0), FrameReceiver(5)
    p, q = _payload(0), _payload(1, shape=(3,))
    rx.unframe(tx.frame(p, 5, "a"), 0)
    restored = FrameSender(0)
    restored.load_state_dict(tx.state_dict())
    msg = restored.frame(q, 5, "b")
    assert msg == tx.frame(q, 5, "b")
    assert rx.unframe(msg, 0).key == "b"
    got = rx.unframe(restored.frame(p, 5, "a"), 0)
    assert got.key == "a" and not got.defined and got.payload.to_bytes() == p.to_bytes()


def test_a_reference_is_bounded_by_the_size_the_receiver_passes() -> None:
    """A header of 24 elements defined under a limit of 100 is refused by a later reference under 10."""
    tx, rx = FrameSender(0), FrameReceiver(1)
    p = _payload(0)
    rx.unframe(tx.frame(p, 1, "w"), 0, max_numel=100)
    with pytest.raises(CorruptFrameError):
        rx.unframe(tx.frame(p, 1, "w"), 0, max_numel=10)


def test_a_reference_number_longer_than_64_bits_is_corrupt() -> None:
    """A reference varint with ten continuation bytes is a corrupt message, not an unknown header."""
    with pytest.raises(CorruptFrameError):
        FrameReceiver(1).unframe(bytes([0xA1]) + b"\xff" * 10 + b"\x00", 0)


def test_only_shared_randomness_codecs_draw_the_same_numbers_on_every_worker() -> None:
    """QSGD's stochastic rounding differs between ranks 0 and 1; RandomK's coordinates agree."""
    draws = {}
    for name in ("qsgd", "randomk"):
        for rank in (0, 1):
            w = WorkerCodecs(CodecSpec.of(name), rank=rank)
            draws[name, rank] = torch.rand(8, generator=w.generator_for("w", CPU, w.codec_for("w")))
    assert not torch.equal(draws["qsgd", 0], draws["qsgd", 1])
    assert torch.equal(draws["randomk", 0], draws["randomk", 1])


def test_error_feedback_is_not_applied_twice() -> None:
    """Asking for error feedback on a codec entry that already applies it gives one wrapper."""
    codec = CodecSpec.of("ef-signsgd", error_feedback=True).build("w")
    assert isinstance(codec, ErrorFeedback) and not isinstance(codec.codec, ErrorFeedback)
