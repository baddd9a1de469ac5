"""The ``all_gather`` protocol (every codec whose payloads cannot be summed).

Each worker encodes its gradients and serializes them (``payload.to_bytes()``); the byte sizes are
all_gathered (int64 per tensor, ``sizes`` traffic), then the concatenated payload bytes padded to
the largest worker's total (``payload`` traffic, the padding recorded as such); every worker trims
each worker's bytes, parses them (``Payload.from_bytes``: checksummed, bounds-checked), decodes,
sums in rank order and divides by ``W``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...compressors import Payload
from ..errors import CollectiveMismatchError
from ..exchange import Exchange


def run(ex: Exchange, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str]) -> list[torch.Tensor]:
    """The mean of ``grads`` over all workers, per key (see the module docstring)."""
    payloads = ex.encode_all(grads, keys)
    device = grads[0][0].device
    n_local = ex.n_local
    blobs = [[p.to_bytes() for p in row] for row in payloads]
    sizes = [torch.tensor([len(b) for b in row], dtype=torch.int64, device=device) for row in blobs]
    t0 = ex.start()
    all_sizes = ex.collective.all_gather(sizes)[0]
    ex.stop(t0, "comm")
    ex.record("all_gather", [("sizes", [8 * len(keys)] * n_local, None)])
    sizes_cpu = [s.cpu() for s in all_sizes]
    totals = [int(s.sum()) for s in sizes_cpu]
    if any(bool((s < 0).any()) for s in sizes_cpu):
        raise CollectiveMismatchError("a worker announced a negative payload size")
    longest = max(totals)
    bufs = []
    for row in blobs:
        data = b"".join(row)
        buf = torch.zeros(longest, dtype=torch.uint8)
        if data:
            buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        bufs.append(buf.to(device))
    own = [sum(len(b) for b in row) for row in blobs]
    t0 = ex.start()
    gathered = ex.collective.all_gather(bufs)[0]
    ex.stop(t0, "comm")
    ex.record("all_gather", [("payload", [longest] * n_local, [longest - o for o in own])])
    t0 = ex.start()
    codecs = [ex.codec(0, k) for k in keys]
    acc: list[torch.Tensor | None] = [None] * len(keys)
    for rank, (buf, sz) in enumerate(zip(gathered, sizes_cpu)):
        raw = buf[: totals[rank]].cpu().numpy().tobytes()
        offset = 0
        for j, n in enumerate(sz.tolist()):
            payload = Payload.from_bytes(raw[offset : offset + n])
            offset += n
            dec = ex.to_grad(codecs[j].decode(payload, device=device), grads[0][j])
            acc[j] = dec if acc[j] is None else acc[j] + dec
    ex.stop(t0, "decode")
    return [a / ex.world_size for a in acc]  # type: ignore[operator]
