"""Fuzzing of payload decoding: hostile wire bytes must fail typed, fast and small.

Every registered codec encodes a few ordinary tensors; :func:`mutate` then changes the wire bytes
of one payload (a random byte, a shape dimension, the number of dimensions, a dtype code, a
parameter value, a section's element count or dtype set to an extreme, bytes cut or appended) and
*recomputes the CRC-32*, so the parser goes past the checksum. :func:`check_case` parses and
decodes the result with the receiver's ``max_numel`` and checks the hostile-input contract:

* the only exceptions are :class:`~gcbench.compressors.GCBenchError` subclasses;
* the parse + decode finishes within ``time_limit`` seconds;
* a decode that succeeds returns only finite values, of at most ``max_numel`` elements (no
  encoder writes NaN or Inf for finite input).

Memory is bounded by the caller (the test lowers ``RLIMIT_AS``, so a multi-GB allocation becomes
an untyped ``RuntimeError``/``MemoryError`` and fails the check).

The test suite runs a few hundred cases under hypothesis (``tests/test_hostile_payloads.py``); the
long run is one command::

    python -m gcbench.commands.fuzz --cases 100000 --seed 0

which prints a count per outcome and exits 1 on the first violation (with the hex of the payload).
"""

from __future__ import annotations

import argparse
import math
import random
import resource
import struct
import sys
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from gcbench import compressors
from gcbench.compressors import GCBenchError, Payload
from gcbench.compressors.wire.checksum import crc32

#: Values a 64-bit field is set to: zero, small, around 2**31/2**32, int64/uint64 limits.
EXTREME_U64 = (0, 1, 2, 3, 255, 1 << 20, (1 << 31) - 1, 1 << 31, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
#: Values a float64 parameter is set to.
EXTREME_F64 = (0.0, -0.0, 5e-324, -1.0, 1e-300, 1e300, 1.7976931348623157e308, math.inf, -math.inf, math.nan)
KINDS = ("byte", "shape", "ndim", "dtype", "param", "count", "section_dtype", "cut", "append")


@dataclass(frozen=True)
class Layout:
    """Byte offsets of the fields of a version-1 payload (see ``compressors/wire/payload.py``)."""

    dtype: int
    ndim: int
    shape: tuple[int, ...]
    params: tuple[tuple[int, bytes], ...]  # (offset of the value, type tag)
    counts: tuple[int, ...]  # offset of each section's u64 element count
    section_dtypes: tuple[int, ...]
    data: int  # first byte of section data


def layout(wire: bytes) -> Layout:
    """Field offsets of well-formed wire bytes (as written by ``Payload.to_bytes``)."""
    ndim = wire[9]
    shape = tuple(10 + 8 * i for i in range(ndim))
    pos = 10 + 8 * ndim
    (nparams,) = struct.unpack_from("<H", wire, pos)
    pos += 2
    params = []
    for _ in range(nparams):
        klen = wire[pos]
        pos += 1 + klen
        tag = wire[pos : pos + 1]
        pos += 1
        params.append((pos, tag))
        if tag in (b"i", b"f"):
            pos += 8
        elif tag == b"b":
            pos += 1
        else:
            (slen,) = struct.unpack_from("<H", wire, pos)
            pos += 2 + slen
    (nsec,) = struct.unpack_from("<H", wire, pos)
    pos += 2
    counts, sdtypes = [], []
    for _ in range(nsec):
        sdtypes.append(pos)
        counts.append(pos + 1)
        pos += 9
    return Layout(8, 9, shape, tuple(params), tuple(counts), tuple(sdtypes), pos)


def mutate(wire: bytes, mutations: Sequence[tuple[str, int, int]]) -> bytes:
    """Apply ``(kind, where, value)`` mutations to well-formed ``wire`` and recompute its CRC.

    ``where`` picks the field (or byte) and ``value`` the new content; both are reduced modulo the
    number of choices, so any integers give a valid mutation (hypothesis and ``random`` drive it).
    Field offsets come from the original bytes; a write past a cut end is dropped.
    """
    body = bytearray(wire[:-4])
    lay = layout(wire)

    def put(fmt: str, off: int, v: object) -> None:
        if off + struct.calcsize(fmt) <= len(body):
            struct.pack_into(fmt, body, off, v)

    for kind, where, value in mutations:
        u64 = EXTREME_U64[value % len(EXTREME_U64)]
        if kind == "shape" and lay.shape:
            put("<Q", lay.shape[where % len(lay.shape)], u64)
        elif kind == "ndim":
            put("<B", lay.ndim, value % 256)
        elif kind == "dtype":
            put("<B", lay.dtype, value % 13)
        elif kind == "param" and lay.params:
            off, tag = lay.params[where % len(lay.params)]
            if tag == b"i":
                put("<Q", off, u64)
            elif tag == b"f":
                put("<d", off, EXTREME_F64[value % len(EXTREME_F64)])
            else:
                put("<B", off, value % 256)
        elif kind == "count" and lay.counts:
            put("<Q", lay.counts[where % len(lay.counts)], u64)
        elif kind == "section_dtype" and lay.section_dtypes:
            put("<B", lay.section_dtypes[where % len(lay.section_dtypes)], value % 13)
        elif kind == "cut" and len(body) > lay.data:
            del body[len(body) - 1 - where % (len(body) - lay.data) :]
        elif kind == "append":
            body += bytes([value % 256]) * (1 + where % 64)
        elif kind == "byte" and body:
            body[where % len(body)] = value % 256
        elif body:  # the field does not exist in this payload: flip a byte instead
            body[where % len(body)] ^= 1 + value % 255
    return bytes(body) + struct.pack("<I", crc32(bytes(body)))


def sample_inputs() -> list[torch.Tensor]:
    """Ordinary tensors every codec encodes: dtypes, shapes, a sparse one, a 0-d one."""
    g = torch.Generator().manual_seed(19)
    return [
        torch.randn(64, generator=g),
        torch.randn(16, 24, generator=g) * 3,
        torch.randn(300, generator=g).to(torch.float16),
        torch.randn(40, generator=g).to(torch.bfloat16),
        torch.randn(6, 10, generator=g).double(),
        (torch.randn(30, 20, generator=g) * (torch.rand(30, 20, generator=g) < 0.1)).to_sparse(),
        torch.tensor(2.5),
    ]


def corpus(names: Sequence[str] | None = None) -> dict[str, list[bytes]]:
    """Wire bytes of every input (twice, for stateful codecs' second step) for each codec name."""
    out = {}
    for name in names or compressors.names():
        codec = compressors.get(name)
        wires = []
        for step in range(2):
            for i, x in enumerate(sample_inputs()):
                try:
                    wires.append(codec.encode(x, key=f"t{i}").to_bytes())
                    compressors.decode(Payload.from_bytes(wires[-1]))  # warm up lazy imports
                except GCBenchError:  # a codec may refuse an input kind (e.g. fp64 beyond a range)
                    pass
        out[name] = wires
    return out


class Violation(AssertionError):
    """A hostile payload broke the decode contract."""


def check_case(wire: bytes, *, max_numel: int | None = 1 << 20, time_limit: float = 5.0) -> str:
    """Parse and decode ``wire``; return the outcome (``"ok"`` or the error's class name).

    ``max_numel=None`` uses the decoders' defaults (int64 range for sparse-native codecs' sparse
    payloads, whose cost follows their keys; 2**28 elements otherwise).

    Raises:
        Violation: an untyped exception, a decode over ``time_limit`` seconds, an output larger
            than ``max_numel`` or holding NaN/Inf.
    """
    t0 = time.perf_counter()
    try:
        out = compressors.decode(Payload.from_bytes(wire, max_numel=max_numel), max_numel=max_numel)
        outcome = "ok"
    except GCBenchError as err:
        out, outcome = None, type(err).__name__
    except Exception as err:  # noqa: BLE001 - the point is to catch what should not happen
        raise Violation(f"untyped {type(err).__name__}: {err} for payload {wire.hex()}") from err
    elapsed = time.perf_counter() - t0
    if elapsed > time_limit:
        raise Violation(f"decode took {elapsed:.1f} s (> {time_limit} s) for payload {wire.hex()}")
    if out is not None:
        values = out.values() if out.layout == torch.sparse_coo else out  # never densify a sparse result
        if max_numel is not None and out.numel() > max_numel:
            raise Violation(f"decoded {out.numel()} elements > max_numel for payload {wire.hex()}")
        if values.numel() and not bool(torch.isfinite(values).all()):
            raise Violation(f"decoded non-finite values for payload {wire.hex()}")
    return outcome


def run(cases: int, seed: int = 0, *, max_numel: int = 1 << 20, time_limit: float = 5.0) -> dict[str, int]:
    """``cases`` random mutations spread over every codec; a count per outcome."""
    rng = random.Random(seed)
    wires = corpus()
    names = sorted(wires)
    counts: dict[str, int] = {}
    for i in range(cases):
        name = names[i % len(names)]
        muts = [(rng.choice(KINDS), rng.randrange(1 << 16), rng.randrange(1 << 16)) for _ in range(rng.randint(1, 3))]
        wire = mutate(rng.choice(wires[name]), muts)
        outcome = check_case(wire, max_numel=max_numel, time_limit=time_limit)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def limit_address_space(extra_bytes: int) -> tuple[int, int]:
    """Lower the soft ``RLIMIT_AS`` to the current virtual size plus ``extra_bytes``; return the old limits."""
    old = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft = vm + extra_bytes
    if old[1] != resource.RLIM_INFINITY:
        soft = min(soft, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (soft, old[1]))
    return old


#: Largest ``--memory-gib`` (1 PiB): the limit must stay a 64-bit byte count.
MAX_MEMORY_GIB = 1 << 20


def options_problem(cases: int, max_numel: int, memory_gib: float) -> str | None:
    """Why the long run's options cannot be used (None when they can)."""
    if cases < 1:
        return f"--cases must be >= 1, got {cases}"
    if max_numel < 1:
        return f"--max-numel must be >= 1, got {max_numel}"
    if not (math.isfinite(memory_gib) and 0 < memory_gib <= MAX_MEMORY_GIB):
        return f"--memory-gib must be a positive number of GiB up to {MAX_MEMORY_GIB}, got {memory_gib}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gcbench.commands.fuzz --cases N --seed S``: the long fuzz run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000, help="mutated payloads to check (>= 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-numel", type=int, default=1 << 20, help="the receiver's element limit (>= 1)")
    ap.add_argument("--memory-gib", type=float, default=2.0,
                    help=f"address space allowed beyond startup, GiB (positive, at most {MAX_MEMORY_GIB})")
    args = ap.parse_args(argv)
    problem = options_problem(args.cases, args.max_numel, args.memory_gib)
    if problem:
        print(f"usage: {problem}", file=sys.stderr)
        return 2
    wires_ready = corpus()  # warm every codec (imports, caches) before the limit
    del wires_ready
    limit_address_space(int(args.memory_gib * (1 << 30)))
    t0 = time.perf_counter()
    try:
        counts = run(args.cases, args.seed, max_numel=args.max_numel)
    except Violation as v:
        print(f"VIOLATION: {v}", file=sys.stderr)
        return 1
    print(f"{args.cases} cases in {time.perf_counter() - t0:.0f} s, no violation: {dict(sorted(counts.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
