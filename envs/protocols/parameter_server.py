"""The parameter-server topology (simulated in one process): push, server step, pull.

SketchML's Spark driver and 3LC's servers: every worker pushes its serialized payloads (``push``
traffic, one message per worker); the server decodes them - linear codecs: sums the payloads
first (:meth:`Codec.combine`, in rank order) and decodes the sum; the others: decodes each and sums
in rank order - and divides by ``W``. A ``server_step`` callback then turns the average into what
the server sends back (3LC's server takes an optimizer step and sends the model change; without
one it sends the average). The pull is those tensors as fp32 bytes, or, with ``pull`` (the
server's own codecs, e.g. 3LC with error feedback), encoded once and decoded by every worker
(``pull`` traffic: one message per worker). Measured seconds: the server's decode and average,
its step and its pull encode are worker ``-1``'s ``decode``, ``step`` and ``encode``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from ..errors import UnsupportedTopologyError
from ..exchange import Exchange
from ..workers import WorkerCodecs, inner_codec, protocol_of

#: ``server_step(average, keys) -> tensors the server sends`` (one per key).
ServerStep = Callable[[list[torch.Tensor], Sequence[str]], list[torch.Tensor]]

#: Protocols whose payloads a server can decode one by one.
SERVABLE = ("all_reduce", "all_gather")


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
    payloads = ex.encode_all(grads, keys)
    ex.record("push", [("payload", [sum(p.nbytes for p in row) for row in payloads], None)])
    t0 = time.perf_counter()
    avg = []
    for j, key in enumerate(keys):
        codec = ex.codec(0, key)
        column = [payloads[i][j] for i in range(ex.n_local)]
        if inner_codec(codec).linear:
            total = ex.to_grad(codec.decode(inner_codec(codec).combine(column), device=device), grads[0][j])
        else:
            total = None
            for p in column:
                dec = ex.to_grad(codec.decode(p, device=device), grads[0][j])
                total = dec if total is None else total + dec
        avg.append(total / ex.world_size)
    traffic.time(ex.step, -1, "decode", time.perf_counter() - t0)
    sent = avg
    if server_step is not None:
        t0 = time.perf_counter()
        sent = list(server_step(avg, keys))
        traffic.time(ex.step, -1, "step", time.perf_counter() - t0)
        if len(sent) != len(keys):
            raise UnsupportedTopologyError(f"server_step returned {len(sent)} tensors for {len(keys)} keys")
    if pull is None:
        ex.record("pull", [("payload", [sum(a.numel() * a.element_size() for a in sent)] * ex.n_local, None)])
        return sent
    t0 = time.perf_counter()
    pulled = []
    for a, key in zip(sent, keys):
        codec = pull.codec_for(key)
        pulled.append(codec.encode(a, key=key, generator=pull.generator_for(key, device, codec)))
    traffic.time(ex.step, -1, "encode", time.perf_counter() - t0)
    ex.record("pull", [("payload", [sum(p.nbytes for p in pulled)] * ex.n_local, None)])
    t0 = ex.start()
    out = [ex.to_grad(pull.codec_for(k).decode(p, device=device), a) for p, k, a in zip(pulled, keys, sent)]
    ex.stop(t0, "decode")
    return out
