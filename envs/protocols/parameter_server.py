"""The parameter-server topology (simulated in one process): push, server step, pull.

SketchML's Spark driver and 3LC's servers: every worker pushes its payloads, each framed on the
link worker -> server (:mod:`gcbench.envs.framing`: the full header the first time a tensor key
travels on that link, a short reference afterwards; ``push`` traffic, one message per worker, its
bytes the framed messages' real lengths); the server unframes them (bounded by its own tensor
sizes) and decodes them - linear codecs: sums the payloads
first (:meth:`Codec.combine`, in rank order) and decodes the sum; the others: decodes each and sums
in rank order - and divides by ``W``. A ``server_step`` callback then turns the average into what
the server sends back (3LC's server takes an optimizer step and sends the model change; without
one it sends the average). The pull is those tensors as fp32 bytes, or, with ``pull`` (the
server's own codecs, e.g. 3LC with error feedback), encoded once, framed on each link server ->
worker (each link its own registry) and unframed by every worker (``pull`` traffic: one message per
worker; the workers' decoded tensors are identical, so the decode is done once, and counted as each
worker's). Measured seconds: the server's decode and average, its step and its pull encode are worker
``-1``'s ``decode``, ``step`` and ``encode``. Framing is timed on no side's ``encode`` (a push's framing
is outside its workers' encode, a pull's outside the server's); unframing is in the receiver's
``decode``: the server's of every push, each worker's of its own pull message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ...compressors import Payload
from ..errors import CollectiveMismatchError, UnsupportedTopologyError
from ..exchange import Exchange
from ..framing import FrameReceiver
from ..workers import WorkerCodecs, inner_codec, protocol_of

#: ``server_step(average, keys) -> tensors the server sends`` (one per key).
ServerStep = Callable[[list[torch.Tensor], Sequence[str]], list[torch.Tensor]]

#: Protocols whose payloads a server can decode one by one.
SERVABLE = ("all_reduce", "all_gather")
#: The server's id on its links (gcbench's convention; workers are their ranks).
SERVER = -1


def _unframe(rx: FrameReceiver, messages: Sequence[bytes], sender: int, keys: Sequence[str], like: Sequence[torch.Tensor]) -> list[Payload]:
    """``messages[j]`` from ``sender`` parsed at ``rx``, each bounded by ``like[j]``'s size."""
    out = []
    for m, key, t in zip(messages, keys, like):
        got = rx.unframe(m, sender, max_numel=t.numel())
        if got.key != key:
            raise CollectiveMismatchError(f"{sender} sent tensor {got.key!r} where {rx.receiver} expects {key!r}")
        out.append(got.payload)
    return out


def run(
    ex: Exchange,
    grads: Sequence[Sequence[torch.Tensor]],
    keys: Sequence[str],
    *,
    pull: WorkerCodecs | None = None,
    server_step: ServerStep | None = None,
) -> list[torch.Tensor]:
    """What every worker receives from the server, per key (see the module docstring)."""
    if ex.n_local != ex.world_size:
        raise UnsupportedTopologyError("the parameter-server topology is simulated in one process only")
    traffic = ex.recorder.traffic
    device = grads[0][0].device
    for key in keys:
        proto = protocol_of(ex.codec(0, key))
        if proto not in SERVABLE:
            raise UnsupportedTopologyError(f"{proto} runs its own collectives, not a parameter server")
    sent_payloads = ex.encode_all(grads, keys)
    links = ex.links
    pushes = [[links.sender(i).frame(p, SERVER, key) for p, key in zip(row, keys)] for i, row in enumerate(sent_payloads)]
    ex.record("push", [("payload", [sum(len(m) for m in row) for row in pushes], None)])
    t0 = ex.start()  # the server's work, timed like a worker's (the device waited for at both ends)
    server_rx = links.receiver(SERVER)
    payloads = [_unframe(server_rx, row, i, keys, grads[i]) for i, row in enumerate(pushes)]
    avg = []
    for j, key in enumerate(keys):
        codec = ex.codec(0, key)
        column = [payloads[i][j] for i in range(ex.n_local)]
        # decoded into buffers of their own (Exchange.decode_grad), so the sums and the mean run in place
        if inner_codec(codec).linear:
            total = ex.decode_grad(codec, inner_codec(codec).combine(column), grads[0][j], device=device)
        else:
            total, scratch = None, None
            for p in column:
                if total is None:
                    total = ex.decode_grad(codec, p, grads[0][j], device=device)
                else:
                    scratch = ex.decode_grad(codec, p, grads[0][j], device=device, into=scratch)
                    total.add_(scratch)
        avg.append(ex.mean_(total))
    traffic.time(ex.step, SERVER, "decode", ex.elapsed(t0))
    sent = avg
    if server_step is not None:
        t0 = ex.start()
        sent = list(server_step(avg, keys))
        traffic.time(ex.step, SERVER, "step", ex.elapsed(t0))
        if len(sent) != len(keys):
            raise UnsupportedTopologyError(f"server_step returned {len(sent)} tensors for {len(keys)} keys")
    if pull is None:
        ex.record("pull", [("payload", [sum(a.numel() * a.element_size() for a in sent)] * ex.n_local, None)])
        return sent
    t0 = ex.start()
    pulled = []
    for a, key in zip(sent, keys):
        codec = pull.codec_for(key)
        pulled.append(codec.encode(a, key=key, generator=pull.generator_for(key, device, codec)))
    traffic.time(ex.step, SERVER, "encode", ex.elapsed(t0))
    tx = links.sender(SERVER)
    msgs = [[tx.frame(p, w, key) for p, key in zip(pulled, keys)] for w in range(ex.n_local)]
    ex.record("pull", [("payload", [sum(len(m) for m in row) for row in msgs], None)])
    received = []
    for w, row in enumerate(msgs):  # each worker unframes its own message
        t0 = ex.start()
        received.append(_unframe(links.receiver(w), row, SERVER, keys, sent))
        ex.stop(t0, "decode", w)
    t0 = ex.start()
    out = [ex.decode_grad(pull.codec_for(k), p, a, device=device) for p, k, a in zip(received[0], keys, sent)]
    ex.stop(t0, "decode")  # every worker's decode of the same payloads: done once, each worker's time
    return out
