"""The ``all_gather`` protocol (every codec whose payloads cannot be summed).

Each worker encodes its gradients and frames each tensor's payload
(:mod:`gcbench.envs.framing`, ``receiver=EVERY_RANK``: every rank receives the same bytes): the
first message of a tensor key carries its full header (codec, parameters, dtype, shape, section
dtypes), later ones a short reference, the sections and a checksum - the static part is not resent
step after step (for 3LC on a small model the self-describing header was half of the bytes). The
message sizes are all_gathered (int64 per tensor, ``sizes`` traffic), then the
concatenated messages padded to the largest worker's total (``payload`` traffic): each worker's
recorded bytes are the padded buffer (the longest worker's total), its padding recorded as
``padding``; the framed messages (their real lengths, first headers included) are the rest. Every
worker trims each worker's bytes, unframes them (checksummed, bounds-checked, the
declared shape limited to the receiver's own tensor size; a reference to a header never defined is
:class:`~gcbench.envs.framing.UnknownHeaderError`), decodes, sums in rank order and divides by ``W``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...compressors.errors import NonFiniteGradientError
from ..errors import CollectiveMismatchError
from ..exchange import Exchange
from ..framing import EVERY_RANK


#: The size a worker announces for every tensor when its gradients failed the finiteness check.
FAILED = -1


def run(ex: Exchange, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str]) -> list[torch.Tensor]:
    """The mean of ``grads`` over all workers, per key (see the module docstring).

    A worker whose encode finds NaN or Inf (:class:`~gcbench.compressors.errors.NonFiniteGradientError`)
    announces :data:`FAILED` sizes instead of raising before the collective, which would leave the
    others waiting in it: after the sizes' all_gather every worker raises (that worker its own error,
    the others one naming it), no payload is sent, and every sender forgets every header it sent on
    the ``EVERY_RANK`` link (all keys, this step's and earlier ones), so that the next step defines
    every key again (the receivers never got this step's definitions)."""
    device = grads[0][0].device
    n_local = ex.n_local
    failure: NonFiniteGradientError | None = None
    try:
        payloads = ex.encode_all(grads, keys)
    except NonFiniteGradientError as err:
        failure, payloads = err, []
    blobs = [[ex.links.sender(rank).frame_parts(p, EVERY_RANK, key) for p, key in zip(row, keys)]
             for rank, row in zip(ex.collective.local_ranks, payloads)]
    if failure is None:
        sizes = [torch.tensor([b.nbytes for b in row], dtype=torch.int64, device=device) for row in blobs]
    else:
        sizes = [torch.full((len(keys),), FAILED, dtype=torch.int64, device=device) for _ in range(n_local)]
    t0 = ex.start()
    all_sizes = ex.collective.all_gather(sizes)[0]
    ex.stop(t0, "comm")
    ex.record("all_gather", [("sizes", [8 * len(keys)] * n_local, None)])
    sizes_cpu = [s.cpu() for s in all_sizes]
    failed = [rank for rank, s in enumerate(sizes_cpu) if bool((s == FAILED).any())]
    if failed:
        for rank in ex.collective.local_ranks:
            ex.links.sender(rank).forget(EVERY_RANK)
        if failure is not None:
            raise failure
        raise NonFiniteGradientError(
            f"worker(s) {failed} found NaN or Inf in their gradients (or their encoding overflowed its precision); "
            "nothing was aggregated"
        )
    totals = [int(s.sum()) for s in sizes_cpu]
    if any(bool((s < 0).any()) for s in sizes_cpu):
        raise CollectiveMismatchError("a worker announced a negative payload size")
    longest = max(totals)
    bufs, own = [], []
    for row in blobs:  # each message copied once, into the buffer that is sent
        buf = torch.empty(longest, dtype=torch.uint8)
        pos = 0
        for b in row:
            pos += b.write_into(buf[pos:])
        buf[pos:].zero_()
        bufs.append(buf.to(device))
        own.append(pos)
    t0 = ex.start()
    gathered = ex.collective.all_gather(bufs)[0]
    ex.stop(t0, "comm")
    ex.record("all_gather", [("payload", [longest] * n_local, [longest - o for o in own])])
    t0 = ex.start()
    codecs = [ex.codec(0, k) for k in keys]
    # every local worker receives the same bytes: one receiver per process keeps the registries
    rx = ex.links.receiver(EVERY_RANK)
    acc: list[torch.Tensor | None] = [None] * len(keys)
    scratch: list[torch.Tensor | None] = [None] * len(keys)
    for rank, (buf, sz) in enumerate(zip(gathered, sizes_cpu)):
        raw = memoryview(buf[: totals[rank]].cpu().numpy())  # unframe copies each section out
        offset = 0
        for j, n in enumerate(sz.tolist()):
            # A foreign payload may declare any shape: the receiver bounds it by its own tensor's size.
            limit = grads[0][j].numel()
            got = rx.unframe(raw[offset : offset + n], rank, max_numel=limit)
            offset += n
            if got.key != keys[j]:
                raise CollectiveMismatchError(f"rank {rank} sent tensor {got.key!r} where this rank expects {keys[j]!r}")
            if acc[j] is None:  # the first rank's decode is the accumulator: the caller's buffer or a new one
                acc[j] = ex.decode_grad(codecs[j], got.payload, grads[0][j], device=device, max_numel=limit,
                                        into=ex.outputs.get(keys[j]))
            else:  # the others decode into one scratch buffer per tensor, added in place
                scratch[j] = ex.decode_grad(codecs[j], got.payload, grads[0][j], device=device, max_numel=limit,
                                            into=scratch[j])
                acc[j].add_(scratch[j])
    ex.stop(t0, "decode")
    return [ex.mean_(a) for a in acc]  # type: ignore[union-attr]
