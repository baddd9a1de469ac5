"""What the data-parallel training runs share: the mini-batch order and the replicas' digest.

Worker ``r`` of ``W`` takes, at step ``s``, the ``r``-th slice of ``batch_size`` examples of the
``s``-th global batch of an epoch-wise permutation seeded by ``(seed, epoch)``: batches depend only
on ``(seed, step, rank)``, so a resumed run sees what an uninterrupted one would, and a simulated
run's workers see what real ranks do.
"""

from __future__ import annotations

import hashlib

import torch

from ..data.digits import N_TRAIN


def batch_indices(step: int, rank: int, world_size: int, batch_size: int, seed: int, n_train: int = N_TRAIN) -> torch.Tensor:
    """Indices of worker ``rank``'s mini-batch at ``step`` (see the module docstring); ``n_train``
    examples (by default the digits' training split, :data:`gcbench.data.digits.N_TRAIN`)."""
    per_epoch = n_train // (batch_size * world_size)
    epoch, pos = divmod(step, per_epoch)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n_train, generator=gen)
    start = pos * batch_size * world_size + rank * batch_size
    return perm[start : start + batch_size]


def params_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter's bytes, in order (equal digests = bit-identical replicas)."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
