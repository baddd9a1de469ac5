"""The codecs' stamp on a run's cells: a digest of the bytes every registered codec writes and decodes
on fixed inputs, so that a cell computed by codecs whose bits have changed since is never reused.

A cell's cache file is named by its config (:mod:`.cells`), and each paper package puts a
``CODE_VERSION`` into its configs: a number bumped by hand when a change alters the package's results.
A change inside a codec alters the bits of every training that uses it without touching any package
(a GEMM fed another operand layout rounds differently; a kernel that adds in another order gives other
sums), and a number not bumped would let a resumed run, or a report re-rendered from its cells, mix
or keep results of code that is no longer there. :func:`codec_stamp` closes that gap for the codecs:
the runner (:mod:`.runner`) mixes it into every cell's file name, so a codec whose output changed by
one bit gives every cell a new name and the run computes them again.

What it covers: each registered codec (:func:`~gcbench.compressors.registry.names`, with the
registry's defaults) encodes two fixed inputs twice (:data:`ROUNDS`, so that warm starts and error
feedback residuals are used), each payload is serialized, parsed back and decoded; the digest is of
the wire bytes and the decoded values' bytes (or the name of the error a codec raised). A codec that
is not byte-reproducible with the registry's defaults (SketchML with a DataSketches sketch: its coins
cannot be seeded, so its bytes differ from run to run) is left out. The inputs are
synthetic and fixed (:func:`probe_inputs`: N(0, 1) from a generator seeded with :data:`SEED`, a
``48 x 160`` matrix and a vector of 3001 values of which about 70% are exact zeros), small enough
that every codec takes its single-threaded path, and the probe runs on one intra-op thread, so the
digest does not depend on the machine's load. It does depend on the machine where results do: a GEMM
may round differently on another instruction set, and then so may a training's cells.

What it does not cover: models, trainers and aggregation, which each package's probe reaches
(:mod:`.workload_stamp`); data loading and the multi-process launch, which still need the package's
``CODE_VERSION``; codec paths the fixed inputs do not reach (compiled
kernels, which tests hold to the eager bytes; large-tensor thresholds).
"""

from __future__ import annotations

from typing import Iterator

import torch

from gcbench import compressors
from gcbench.compressors.errors import GCBenchError
from gcbench.compressors.parallel.threads import single_thread

from .digest import probe_digest

#: Seed of the probe inputs' generator.
SEED = 20181
#: Encode/decode rounds per input (the second uses the state the first left: warm starts, residuals).
ROUNDS = 2


def probe_inputs() -> dict[str, torch.Tensor]:
    """The fixed inputs, by the key each is encoded under: a ``48 x 160`` N(0, 1) float32 matrix and a
    3001-value N(0, 1) float32 vector with about 70% of its values set to exact zeros."""
    gen = torch.Generator().manual_seed(SEED)
    matrix = torch.randn(48, 160, generator=gen)
    vector = torch.randn(3001, generator=gen)
    vector[torch.rand(3001, generator=gen) < 0.7] = 0.0
    return {"probe.matrix": matrix, "probe.vector": vector}


def _items(names: list[str], inputs: dict[str, torch.Tensor]) -> Iterator[tuple[str, bytes]]:
    """What the codecs ``names`` write and decode on ``inputs``, as ``(name, key#round)``-labelled bytes
    (see :func:`codec_stamp`)."""
    for name in names:
        codec = compressors.get(name)
        if not codec.reproducible:  # other bytes on every run: nothing to compare
            yield f"{name}\0", b"not reproducible"
            continue
        for key, x in inputs.items():
            for r in range(ROUNDS):
                label = f"{name}\0{key}#{r}"
                try:
                    wire = codec.encode(x, key=key).to_bytes()
                    out = codec.decode(compressors.Payload.from_bytes(wire))
                except GCBenchError as err:
                    yield label, type(err).__name__.encode()
                    continue
                dense = out.to_dense() if out.layout == torch.sparse_coo else out
                yield label, wire
                yield label, dense.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def codec_stamp(names: list[str] | None = None) -> str:
    """The digest (:data:`~.digest.DIGITS` hex digits, :func:`~.digest.probe_digest`) of what the codecs
    ``names`` (default: every registered one) write and decode on :func:`probe_inputs`, :data:`ROUNDS`
    times each with a fresh codec per name. A codec that raises contributes its error's class name, so a
    probe never fails a run; one that is not byte-reproducible (``Codec.reproducible``: SketchML with a
    DataSketches sketch, whose coins cannot be seeded) contributes its name only."""
    with single_thread(torch.device("cpu")):
        return probe_digest(_items(names if names is not None else compressors.names(), probe_inputs()))
