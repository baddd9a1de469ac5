"""A compiled kernel for Count Sketch: the exact rebuild of hash codes from compact tables.

Count Sketch's ``accumulate`` (Charikar et al. 2002; Ivkin et al. NeurIPS 2019, section 3) adds
``s_j(i) x_i`` into bucket ``h_j(i)`` of every row ``j``. Its codes ``2 * bucket + (sign < 0)`` are
rebuilt block by block from :class:`~.countsketch_hashes.HashTables` (small bucket tables and
packed sign bits) instead of being held (``4 r d`` bytes): eager, that is about ten torch ops per
2^16-coordinate block, each a pass over ``r x 2^16`` int32 values, which cost as much as the
scatter-add itself. Compiled (:class:`.fused.Kernel`), the gathers from the tables, the integer
select and the sign bit are one pass that writes the codes once.

Only the rebuild is compiled, not the scatter-add: ``index_add_`` on the CPU adds in index order,
which fixes the float32 sums' bits (the payload's bytes); a compiled scatter is an ``atomic_add``
loop with no faster inner step (measured: the same 2.7 ns per element into a 4 MB accumulator).
The codes are integers, so the compiled kernel's are equal to the eager ones bit for bit, and so
is every sketch built from them (``tests/test_countsketch.py``, ``tests/test_fused.py``).

The kernel is compiled single-threaded (``cpp.threads = 1``): ``accumulate`` already runs the two
halves of a vector on its own thread pool, one kernel call per thread, so OpenMP teams inside it
would oversubscribe the cores. The first call per input signature (the compilation) is serialised
by a lock, so two pool threads never compile the same kernel at once.
"""

from __future__ import annotations

import threading

import torch
import torch.fx.experimental._config as fx_config

from .fused import Kernel

#: Coordinates per block of the bucket tables: must equal ``countsketch_hashes.BLOCK_BITS``
#: (checked by the caller, which owns the tables' layout).
BLOCK_BITS = 16


def _sketch_codes(
    params: torch.Tensor, rank: torch.Tensor, vc2: torch.Tensor, km1: torch.Tensor, delta: torch.Tensor,
    base0: torch.Tensor, negbits: torch.Tensor, out: torch.Tensor,
) -> None:
    """``out`` (int32 ``(rows, nb, 2^16)``) = the codes of rows ``r0 .. r0 + rows - 1`` at the ``nb``
    whole blocks of coordinates from block ``b0`` on (coordinate ``(b0 + b) 2^16 + l`` at
    ``out[:, b, l]``).

    ``params``: int64 ``[b0, 2c, r0]``; ``rank``, ``vc2``: int32 ``(rows, 2^16)``, these rows' tables
    over the low 16 bits of a coordinate; ``km1``, ``delta``, ``base0``: int32 ``(rows, blocks)``,
    their tables over the high bits (all blocks: indexed with ``b0`` here, so a new offset is not a
    new graph); ``negbits``: uint8 ``(nb, 2^16)``, the packed sign bits of these coordinates (row
    ``j`` in bit ``j``, ``r <= 8``).

    The integer steps are those of ``HashTables._finish`` (:mod:`.countsketch_hashes`): ``u + v``
    wraps past ``p`` iff ``rank(v) > k - 1``, read from the sign bit of ``km1 - rank``; then
    ``2 * bucket`` is reduced into ``[0, 2c)`` without a compare. Every read but the per-block
    terms (one value per row and block) is contiguous: no gather in the inner loop.
    """
    nb = out.shape[1]
    b0, two_c = params[0], params[1].to(torch.int32)
    shift = (torch.arange(out.shape[0], dtype=torch.int64, device=out.device) + params[2]).to(torch.int32)
    shift = shift.reshape(-1, 1, 1)  # row j's sign is bit j
    blk = torch.arange(nb, dtype=torch.int64, device=out.device) + b0
    k = km1[:, blk].unsqueeze(2)  # (r, nb, 1): one value per row and block
    o = k - rank.unsqueeze(1)
    o = (o >> 31) & delta[:, blk].unsqueeze(2)  # delta where the bucket hash wraps past p, else 0
    o = o + vc2.unsqueeze(1) + base0[:, blk].unsqueeze(2) - two_c  # 2 * bucket - 2c, or + 2c below if < 0
    o = o + ((o >> 31) & two_c)
    neg = (negbits.unsqueeze(0).to(torch.int32) >> shift) & 1
    out.copy_(o + neg)


#: The codes of whole blocks of coordinates (:meth:`.countsketch_hashes.HashTables.codes`, compiled).
sketch_codes = Kernel(_sketch_codes, "sketch_codes", {"cpp.threads": 1})

_FIRST_CALL = threading.Lock()
_warm: set[tuple] = set()


def run_sketch_codes(
    b0: int, r0: int, rank: torch.Tensor, vc2: torch.Tensor, km1: torch.Tensor, delta: torch.Tensor,
    base0: torch.Tensor, negbits: torch.Tensor, two_c: int, out: torch.Tensor,
) -> torch.Tensor:
    """:data:`sketch_codes` (arguments as :func:`_sketch_codes`, ``b0``, ``r0`` and ``2c`` as ints),
    safe to call from several threads (the first call per kind of input compiles under a lock);
    returns ``out``."""
    params = torch.tensor([b0, two_c, r0], dtype=torch.int64, device=out.device)
    args = (params, rank, vc2, km1, delta, base0, negbits, out)
    # Dynamo specialises sizes, strides and storage offsets 0 and 1: those are other graphs.
    key = (
        out.device.type, out.shape[0] == 1, out.shape[1] == 1, out.is_contiguous(),
        min(negbits.storage_offset(), 2), min(rank.storage_offset(), 2), min(km1.storage_offset(), 2),
    )
    # No duck sizing: two sizes equal by chance (e.g. rows and blocks) would become a guard, and
    # the next call where they differ another compilation.
    with fx_config.patch(use_duck_shape=False):
        if key in _warm:
            sketch_codes(*args)
            return out
        with _FIRST_CALL:
            sketch_codes(*args)
            _warm.add(key)
    return out
